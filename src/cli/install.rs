//! `agent install`: its flags (named after `coreos-installer install` where they mean the
//! same), the disk selector flags it shares with `agent plan`, and the `coreos.inst.*` kernel
//! arguments of `--from-kargs`, turned into [`crate::install::Options`].

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::fetch::{Fetcher, Options as FetchOptions};
use crate::install::{self, Signed, Source, kargs::Kargs, select, signature};
use crate::report::{self, Target};
use spec::config::types::Resource;

/// The install disk by what it is (sizes in bytes or with K/M/G; strings are globs: `*`, `?`,
/// `[...]`). Exactly one disk must match.
#[derive(Debug, Clone, Default, Args)]
pub struct SelectorArgs {
    /// Smallest size of the install disk (e.g. 8G).
    #[arg(long, value_name = "SIZE", value_parser = super::run::parse_size_arg)]
    pub disk_size_min: Option<u64>,
    /// Largest size of the install disk (e.g. 2T is 2048G).
    #[arg(long, value_name = "SIZE", value_parser = super::run::parse_size_arg)]
    pub disk_size_max: Option<u64>,
    /// Model of the install disk (sysfs device/model), a glob.
    #[arg(long, value_name = "GLOB")]
    pub disk_model: Option<String>,
    /// Serial number of the install disk (sysfs serial, device/serial or VPD page 0x80), a glob.
    #[arg(long, value_name = "GLOB")]
    pub disk_serial: Option<String>,
    /// World Wide Name of the install disk (sysfs wwid), a glob.
    #[arg(long, value_name = "GLOB")]
    pub disk_wwn: Option<String>,
    /// How the install disk is attached.
    #[arg(long, value_name = "TRANSPORT", value_parser = ["nvme", "sata", "scsi", "virtio", "usb", "loop"])]
    pub disk_transport: Option<String>,
    /// Whether the install disk spins (sysfs queue/rotational).
    #[arg(long, value_name = "yes|no", value_parser = parse_yes_no)]
    pub disk_rotational: Option<bool>,
    /// Whether the install disk is removable (sysfs removable).
    #[arg(long, value_name = "yes|no", value_parser = parse_yes_no)]
    pub disk_removable: Option<bool>,
    /// Root of the sysfs tree the disks are read from.
    #[arg(long, value_name = "DIR", default_value = "/sys", hide = true)]
    pub sysfs: PathBuf,
}

fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s {
        "yes" | "true" | "1" => Ok(true),
        "no" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?}: yes or no")),
    }
}

impl SelectorArgs {
    pub fn selector(&self) -> select::Selector {
        select::Selector {
            size_min: self.disk_size_min,
            size_max: self.disk_size_max,
            model: self.disk_model.clone(),
            serial: self.disk_serial.clone(),
            wwn: self.disk_wwn.clone(),
            transport: self
                .disk_transport
                .as_deref()
                .and_then(|t| select::Transport::parse(t).ok()),
            rotational: self.disk_rotational,
            removable: self.disk_removable,
        }
    }

    /// The selection over every disk (its candidates and why each does or does not match).
    pub fn choose(&self) -> Result<select::Choice> {
        let s = self.selector();
        if s.size_min.zip(s.size_max).is_some_and(|(a, b)| a > b) {
            bail!("--disk-size-min is larger than --disk-size-max");
        }
        select::choose(&self.sysfs, &s)
    }
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The whole disk to install to (/dev/sda, /dev/disk/by-id/...); optional with the
    /// --disk-* selector flags, which choose it by what it is.
    #[arg(value_name = "DEST_DEVICE")]
    pub dest_device: Option<PathBuf>,
    /// The image to write: raw, or compressed with gzip, xz or zstd (recognised by its first
    /// bytes); any URL the fetcher takes (http, https, tftp, s3, gs, data).
    #[arg(long, value_name = "URL", value_parser = super::run::parse_url_arg, conflicts_with = "image_file")]
    pub image_url: Option<String>,
    /// The image to write, from a local file.
    #[arg(long, value_name = "PATH")]
    pub image_file: Option<PathBuf>,
    /// Expected hash of the image as fetched (compressed): sha256-HEX or sha512-HEX.
    #[arg(long, value_name = "HASH")]
    pub image_hash: Option<String>,
    /// minisign public key (minisign.pub) the image must be signed with.
    #[arg(long, value_name = "FILE")]
    pub image_key: Option<PathBuf>,
    /// The image's minisign signature (URL or file); default: the image's URL or path with
    /// `.minisig` appended.
    #[arg(long, value_name = "URL|FILE")]
    pub image_signature: Option<String>,
    /// Skip the image's signature verification.
    #[arg(long)]
    pub insecure: bool,
    /// Ignition config to install, from a URL.
    #[arg(long, value_name = "URL", value_parser = super::run::parse_url_arg, conflicts_with = "ignition_file")]
    pub ignition_url: Option<String>,
    /// Ignition config to install, from a file ("-" for standard input).
    #[arg(long, short = 'i', value_name = "PATH")]
    pub ignition_file: Option<PathBuf>,
    /// Expected hash of the Ignition config: sha256-HEX or sha512-HEX.
    #[arg(long, value_name = "HASH")]
    pub ignition_hash: Option<String>,
    /// Install over a disk that holds a partition table or a filesystem (destroying it).
    #[arg(long)]
    pub overwrite: bool,
    /// Leave the disk as it is when the install fails (by default its partition tables are
    /// wiped, so that nothing half-written looks installed).
    #[arg(long)]
    pub preserve_on_error: bool,
    /// Failed fetch attempts of the image allowed (each resumes where the last stopped).
    #[arg(long, value_name = "N", default_value = "10")]
    pub fetch_retries: u32,
    /// Take the install from the kernel arguments coreos.inst.install_dev, .image_url,
    /// .ignition_url, .insecure, .skip_reboot (flags given as well win); reboot after it
    /// unless coreos.inst.skip_reboot.
    #[arg(long)]
    pub from_kargs: bool,
    /// The kernel command line --from-kargs reads.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/proc/cmdline",
        hide = true
    )]
    pub kernel_cmdline: PathBuf,
    /// Where the chosen disk's path is recorded (install-disk).
    #[arg(long, default_value = "/run/agent")]
    pub state_dir: PathBuf,
    /// Longest wait for the new partitions' device nodes (seconds); default 30.
    #[arg(long, value_name = "SECS", value_parser = super::run::parse_seconds_arg)]
    pub device_timeout: Option<std::time::Duration>,
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Test builds only: the SMBIOS directory (/sys/class/dmi/id) the install report's
    /// machine identity comes from.
    #[cfg(feature = "test-hooks")]
    #[arg(long, hide = true, value_name = "DIR")]
    pub test_dmi_dir: Option<PathBuf>,
}

/// Fills the `--disk-*` selector flags not given from `agent.install.disk.*` (each checked as
/// its flag is).
fn kargs_selector(s: &mut SelectorArgs, d: &install::kargs::DiskKargs) -> Result<()> {
    let size = |v: &Option<String>, k: &str| -> Result<Option<u64>> {
        v.as_deref()
            .map(|v| super::run::parse_size_arg(v).map_err(|e| anyhow::anyhow!("{k}={v}: {e}")))
            .transpose()
    };
    let yes_no = |v: &Option<String>, k: &str| -> Result<Option<bool>> {
        v.as_deref()
            .map(|v| parse_yes_no(v).map_err(|e| anyhow::anyhow!("{k}: {e}")))
            .transpose()
    };
    const K: &str = "agent.install.disk.";
    s.disk_size_min = s
        .disk_size_min
        .or(size(&d.size_min, &format!("{K}size_min"))?);
    s.disk_size_max = s
        .disk_size_max
        .or(size(&d.size_max, &format!("{K}size_max"))?);
    s.disk_model = s.disk_model.take().or(d.model.clone());
    s.disk_serial = s.disk_serial.take().or(d.serial.clone());
    s.disk_wwn = s.disk_wwn.take().or(d.wwn.clone());
    if let Some(t) = &d.transport
        && s.disk_transport.is_none()
    {
        select::Transport::parse(t).map_err(|e| anyhow::anyhow!("{K}transport={t}: {e}"))?;
        s.disk_transport = Some(t.clone());
    }
    s.disk_rotational = s
        .disk_rotational
        .or(yes_no(&d.rotational, &format!("{K}rotational"))?);
    s.disk_removable = s
        .disk_removable
        .or(yes_no(&d.removable, &format!("{K}removable"))?);
    Ok(())
}

/// Reads a signature or key: a URL through the fetcher, else a file.
fn read_small(f: &Fetcher, src: &str, what: &str) -> Result<Vec<u8>> {
    if src.contains("://") || src.starts_with("data:") {
        let r = Resource {
            source: Some(src.to_string()),
            ..Default::default()
        };
        f.fetch_bytes_as(&r, what)
    } else {
        read_file(Path::new(src), 64 << 10, what)
    }
}

/// A local file of at most `limit` bytes.
fn read_file(p: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    let f = std::fs::File::open(p).with_context(|| format!("opening {what} {}", p.display()))?;
    runtime::limits::read_bounded(f, limit, &format!("{what} {}", p.display()))
}

/// The config bytes of `--ignition-url` / `--ignition-file`, hash-checked, `${install_disk}`
/// replaced, and parsed as an Ignition config; with what the config server said of it
/// (where reports go), when it was fetched from `agent serve`.
fn read_config(
    a: &InstallArgs,
    f: &Fetcher,
    disk: &Path,
) -> Result<(Option<Vec<u8>>, Option<crate::state::Served>)> {
    let mut served = None;
    let mut bytes = match (&a.ignition_url, &a.ignition_file) {
        (Some(u), _) => {
            let mut r = Resource {
                source: Some(u.clone()),
                ..Default::default()
            };
            r.verification.hash = a.ignition_hash.clone();
            let b = f.fetch_bytes_as(&r, "config")?;
            served = crate::stages::fetch::served(f, &r);
            b
        }
        (None, Some(p)) => {
            let b = if p.as_os_str() == "-" {
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut v)
                    .context("reading standard input")?;
                v
            } else {
                read_file(p, f.opts.limits.max_config_size, "config")?
            };
            if a.ignition_hash.is_some() {
                let r = Resource {
                    verification: spec::config::types::Verification {
                        hash: a.ignition_hash.clone(),
                    },
                    ..Default::default()
                };
                crate::fetch::verify(&r, &b).context("--ignition-hash")?;
            }
            b
        }
        (None, None) => {
            if a.ignition_hash.is_some() {
                bail!("--ignition-hash needs --ignition-url or --ignition-file");
            }
            return Ok((None, None));
        }
    };
    bytes = substitute_install_disk(&bytes, disk);
    spec::config::parse(&bytes)
        .map_err(|r| anyhow::anyhow!("the Ignition config to install is invalid:\n{r}"))?;
    Ok((Some(bytes), served))
}

/// Where the install report goes: the report URL the config server named with the config
/// (it carries the machine's credential); None without one.
fn report_target(a: &InstallArgs, served: Option<&crate::state::Served>) -> Option<Target> {
    let s = served?;
    #[allow(unused_mut)]
    let mut endpoints = crate::endpoints::Endpoints::builtin();
    #[cfg(feature = "test-hooks")]
    if let Some(d) = &a.test_dmi_dir {
        endpoints.dmi_dir = d.clone();
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = a;
    Some(Target {
        url: s.report_url.clone()?,
        auth: None,
        cas: Vec::new(),
        config: report::AppliedConfig {
            pool: s.pool.clone(),
            name: s.config.clone(),
            hash: s.hash.clone(),
        },
        endpoints,
        limits: runtime::limits::Limits::default(),
        hostname: None,
    })
}

/// Sends the `install` report (the live boot's final one) to `t`, or queues it in
/// `state_dir`; a failure to is logged, never the install's.
fn send_install_report(
    t: &Target,
    state_dir: &Path,
    started: std::time::Instant,
    changes: report::Changes,
    error: Option<&anyhow::Error>,
) {
    let o = report::Outcome {
        stage: report::ReportStage::Install,
        outcome: if error.is_some() {
            report::StageOutcome::Failed
        } else {
            report::StageOutcome::Ok
        },
        final_: true,
        duration: started.elapsed(),
        changes,
        error,
        platform: Some("metal"),
    };
    let state = crate::state::StateDir::new(state_dir);
    if let Err(e) = state.create() {
        log::warn!("install report not sent: {e:#}");
        return;
    }
    report::deliver(t, &state, &report::build(t, o));
}

/// Replaces every `${install_disk}` in the config with the install disk's path (as a JSON
/// string's contents).
pub fn substitute_install_disk(cfg: &[u8], disk: &Path) -> Vec<u8> {
    const VAR: &[u8] = b"${install_disk}";
    let s = serde_json::to_string(&disk.display().to_string()).unwrap_or_default();
    let rep = s
        .as_bytes()
        .get(1..s.len().saturating_sub(1))
        .unwrap_or_default();
    let mut out = Vec::with_capacity(cfg.len());
    let mut i = 0;
    while i < cfg.len() {
        if cfg[i..].starts_with(VAR) {
            out.extend_from_slice(rep);
            i += VAR.len();
        } else {
            out.push(cfg[i]);
            i += 1;
        }
    }
    out
}

pub fn run(mut a: InstallArgs) -> Result<()> {
    let mut reboot = false;
    // The minisign public key as text: `--image-key`'s file, or `agent.install.image_key=`.
    let mut key_text = None;
    if a.from_kargs {
        let line = runtime::cmdline::read(&a.kernel_cmdline)?;
        let k = Kargs::parse(&line);
        if !k.any() {
            bail!(
                "--from-kargs: the kernel command line ({}) has neither coreos.inst.install_dev, agent.install.disk.* nor coreos.inst.image_url",
                a.kernel_cmdline.display()
            );
        }
        a.dest_device = a.dest_device.or(k.install_dev.map(PathBuf::from));
        if a.image_file.is_none() {
            a.image_url = a.image_url.or(k.image_url);
        }
        if a.ignition_file.is_none() {
            a.ignition_url = a.ignition_url.or(k.ignition_url);
        }
        a.insecure |= k.insecure;
        a.overwrite |= k.overwrite;
        a.image_hash = a.image_hash.or(k.image_hash);
        if a.image_key.is_none() {
            key_text = k.image_key;
        }
        kargs_selector(&mut a.selector, &k.disk)?;
        reboot = !k.skip_reboot;
    }
    let image = match (&a.image_url, &a.image_file) {
        (Some(u), _) => Source::Url(u.clone()),
        (None, Some(p)) => Source::File(p.clone()),
        (None, None) => bail!(
            "no image: give --image-url or --image-file (or coreos.inst.image_url with --from-kargs)"
        ),
    };
    let selector = a.selector.selector();
    let (dest, stable) = match (&a.dest_device, selector.is_empty()) {
        (Some(_), false) => {
            bail!("give either DEST_DEVICE or the --disk-* selector flags, not both")
        }
        (Some(d), true) => (d.clone(), d.clone()),
        (None, false) => {
            let choice = a.selector.choose()?;
            let disk = choice.one()?;
            let stable = select::stable_path(&disk.name);
            log::info!("install disk: {disk} ({})", stable.display());
            (PathBuf::from("/dev").join(&disk.name), stable)
        }
        (None, true) => bail!(
            "no install disk: give DEST_DEVICE or --disk-* selector flags (or coreos.inst.install_dev with --from-kargs)"
        ),
    };
    let fetcher = Fetcher::new(FetchOptions::default());
    let signed = if a.insecure {
        if a.image_key.is_some() {
            log::warn!("--insecure: the image's signature is not checked (--image-key ignored)");
        }
        None
    } else if let Some((text, what)) = match (&a.image_key, key_text) {
        (Some(k), _) => Some((
            String::from_utf8_lossy(&read_file(k, 64 << 10, "public key")?).into_owned(),
            k.display().to_string(),
        )),
        (None, Some(t)) => Some((t, "agent.install.image_key=".to_string())),
        (None, None) => None,
    } {
        let key =
            signature::PublicKey::parse(&text).with_context(|| format!("public key {what}"))?;
        let src = a.image_signature.clone().unwrap_or_else(|| match &image {
            Source::Url(u) => format!("{u}.minisig"),
            Source::File(p) => format!("{}.minisig", p.display()),
        });
        let sig = signature::Signature::parse(&String::from_utf8_lossy(&read_small(
            &fetcher,
            &src,
            "signature",
        )?))
        .with_context(|| format!("signature {}", crate::fetch::short(&src)))?;
        Some(Signed {
            key,
            signature: sig,
        })
    } else if a.image_hash.is_none() {
        bail!(
            "the image would not be verified: give --image-key (its minisign signature is checked) or --image-hash, or --insecure to write it unverified"
        );
    } else {
        None
    };
    let started = std::time::Instant::now();
    let (ignition, served) = read_config(&a, &fetcher, &stable)?;
    let target = report_target(&a, served.as_ref());
    let o = install::Options {
        dest: crate::blockdev::devices::block_device(&dest.display().to_string())?,
        image,
        image_hash: a.image_hash.clone(),
        signed,
        ignition,
        served: served
            .as_ref()
            .filter(|s| s.report_url.is_some())
            .and_then(|s| serde_json::to_vec(s).ok()),
        overwrite: a.overwrite,
        preserve_on_error: a.preserve_on_error,
        fetch_retries: a.fetch_retries,
        device_timeout: a
            .device_timeout
            .unwrap_or(crate::endpoints::DEFAULT_DEVICE_TIMEOUT),
    };
    runtime::logging::set_stage("install");
    let done = match install::install(&o, &fetcher) {
        Ok(d) => d,
        Err(e) => {
            if let Some(t) = &target {
                send_install_report(
                    t,
                    &a.state_dir,
                    started,
                    report::Changes::default(),
                    Some(&e),
                );
            }
            return Err(e);
        }
    };
    install::record_disk(&a.state_dir, &stable)?;
    if let Some(t) = &target {
        let mut paths = vec![stable.display().to_string()];
        paths.extend(
            done.config_on
                .iter()
                .map(|p| format!("{}:{}", p.display(), install::BOOT_CONFIG)),
        );
        send_install_report(
            t,
            &a.state_dir,
            started,
            report::Changes::of_paths(paths),
            None,
        );
    }
    log::info!(
        "installed to {} ({} image, {} bytes{})",
        stable.display(),
        done.format.name(),
        done.bytes,
        if done.resumed > 0 {
            format!(", resumed {} times", done.resumed)
        } else {
            String::new()
        }
    );
    println!("{}", stable.display());
    if reboot {
        log::info!("rebooting (coreos.inst.skip_reboot not given)");
        nix::unistd::sync();
        runtime::util::run("systemctl", &["--no-block", "reboot"])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_disk_is_substituted_as_json_string_contents() {
        let cfg = br#"{"storage":{"disks":[{"device":"${install_disk}"}],"x":"$install_disk"}}"#;
        let out = substitute_install_disk(cfg, Path::new("/dev/disk/by-id/wwn-0x5"));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"storage":{"disks":[{"device":"/dev/disk/by-id/wwn-0x5"}],"x":"$install_disk"}}"#
        );
        let out = substitute_install_disk(b"\"${install_disk}\"", Path::new("/dev/a\"b"));
        assert_eq!(out, b"\"/dev/a\\\"b\"");
    }
}
