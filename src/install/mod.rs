//! `agent install`: writes an OS image to a disk, as coreos-installer does, and the config
//! where the installed system's first boot reads it.
//!
//! The flow: the config is fetched first (nothing is touched if it cannot be); the disk is
//! checked (not in use; no partition table or filesystem unless `overwrite`); its first and
//! last MiB are zeroed (no old partition table, primary or backup, survives a half-written
//! image); the image streams onto it ([`image`]) without its first MiB; the hash and the
//! signature of the compressed stream are checked; only then is the first MiB written. The
//! kernel is told about the new partitions with BLKPG, and the config is written to
//! `ignition/config.ign` on the partition labelled `boot`. On any failure after the disk was
//! touched its first and last MiB are zeroed again (unless `preserve_on_error`): nothing is
//! left that looks installed.

pub mod image;
pub mod kargs;
pub mod select;
pub mod signature;

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::blockdev::{gpt, inuse, kernel, mbr, probe};
use crate::fetch::Fetcher;
pub use image::Source;

/// The file on the `boot` partition the installed system's first boot reads.
pub const BOOT_CONFIG: &str = "ignition/config.ign";
/// Beside it: where the installed system's reports go (the first boot's `user.served.json`).
pub const BOOT_SERVED: &str = "ignition/agent-served.json";
/// The label of the partition the config goes to.
pub const BOOT_LABEL: &str = "boot";
/// Where the chosen disk's stable path is recorded.
pub const INSTALL_DISK_FILE: &str = "install-disk";

/// A detached minisign signature and the key to check it with.
#[derive(Debug, Clone)]
pub struct Signed {
    pub key: signature::PublicKey,
    pub signature: signature::Signature,
}

/// Everything an install needs, resolved (the CLI fetches the config and the signature).
pub struct Options {
    /// The whole disk (a block device).
    pub dest: PathBuf,
    pub image: Source,
    /// `sha256-HEX` / `sha512-HEX` of the image as fetched (compressed).
    pub image_hash: Option<String>,
    pub signed: Option<Signed>,
    /// The Ignition config to install, already fetched and checked.
    pub ignition: Option<Vec<u8>>,
    /// What the config server said when the config was fetched (`state::Served`, JSON:
    /// where the installed system's first boot reports), written beside it as
    /// [`BOOT_SERVED`].
    pub served: Option<Vec<u8>>,
    pub overwrite: bool,
    pub preserve_on_error: bool,
    pub fetch_retries: u32,
    /// Longest wait for the new partitions' device nodes.
    pub device_timeout: Duration,
}

/// What an install did.
#[derive(Debug, Clone)]
pub struct Installed {
    pub format: image::Format,
    pub bytes: u64,
    pub raw: u64,
    pub resumed: u32,
    pub partitions: Vec<PathBuf>,
    /// The boot partition the config was written to.
    pub config_on: Option<PathBuf>,
    pub elapsed: Duration,
}

/// Why a disk may not be overwritten without `--overwrite`: its partition table, its
/// filesystem or other signature, the partitions the kernel knows.
pub fn existing_contents(dev: &Path, name: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let f = File::open(dev).with_context(|| format!("opening {}", dev.display()))?;
    let g = kernel::geometry(&f, dev)?;
    match gpt::read(&f, &g) {
        Ok(gpt::OnDisk::Gpt(t)) => out.push(format!(
            "a GPT partition table ({} partitions)",
            t.entries.len()
        )),
        Ok(gpt::OnDisk::Mbr) => out.push("an MBR partition table".into()),
        Ok(gpt::OnDisk::None) => {}
        Err(e) => out.push(format!("a damaged partition table ({e:#})")),
    }
    if let Some(found) = probe::probe(dev)? {
        let label = found
            .label
            .map(|l| format!(" labelled {l:?}"))
            .unwrap_or_default();
        out.push(format!("a signature of type {}{label}", found.fstype));
    }
    let parts = kernel::kernel_partitions(name);
    if !parts.is_empty() {
        out.push(format!("{} partitions known to the kernel", parts.len()));
    }
    Ok(out)
}

/// Refuses a disk that is in use: mounted, swap, held, or with such a partition.
pub fn ensure_not_in_use(name: &str) -> Result<()> {
    inuse::ensure_free(name, &format!("install to /dev/{name}"))?;
    for (n, _, _) in kernel::kernel_partitions(name) {
        inuse::ensure_free(
            &kernel::part_name(name, n),
            &format!("install to /dev/{name}"),
        )?;
    }
    Ok(())
}

/// Installs the image onto `o.dest` with `fetcher`.
pub fn install(o: &Options, fetcher: &Fetcher) -> Result<Installed> {
    let dest = &o.dest;
    let name = kernel::sys_name(dest)?;
    if Path::new("/sys/class/block")
        .join(&name)
        .join("partition")
        .exists()
    {
        bail!("{} is a partition: give the whole disk", dest.display());
    }
    ensure_not_in_use(&name)?;
    let found = existing_contents(dest, &name)?;
    if !found.is_empty() && !o.overwrite {
        bail!(
            "refusing to install to {}: it holds {}; pass --overwrite to destroy it",
            dest.display(),
            found.join(", ")
        );
    }
    let written = {
        // Exclusive while the image is written: the kernel refuses while anything mounts or
        // holds the disk, and nothing can mount it meanwhile. (Closed before the boot
        // partition is mounted: the disk's claim would keep its partitions from mounting.)
        let direct = open_direct(dest)?;
        let plain = open_plain(dest)?;
        let g = kernel::geometry(&plain, dest)?;
        let t = target(&direct, &plain, &g, &name);
        log::info!(
            "installing {} to {} ({} bytes, {}-byte sectors)",
            o.image.describe(),
            dest.display(),
            t.size,
            t.sector
        );
        // The kernel's old partitions go first: they would describe what is being overwritten.
        kernel::remove_partitions(&plain, &name)
            .with_context(|| format!("removing the old partitions of {}", dest.display()))?;
        wipe_ends(&t)?;
        let r = write(o, fetcher, &t, &g);
        match r {
            Ok(w) => w,
            Err(e) => return Err(failed(o, &t, e)),
        }
    };
    let config_on = match &o.ignition {
        Some(cfg) => match write_config(&written.partitions, cfg, o.served.as_deref()) {
            Ok(p) => Some(p),
            Err(e) => {
                let direct = open_direct(dest)?;
                let plain = open_plain(dest)?;
                let g = kernel::geometry(&plain, dest)?;
                return Err(failed(o, &target(&direct, &plain, &g, &name), e));
            }
        },
        None => None,
    };
    Ok(Installed {
        config_on,
        ..written
    })
}

fn open_direct(dest: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_DIRECT | nix::libc::O_EXCL)
        .open(dest)
        .with_context(|| {
            format!(
                "opening {} for writing (O_DIRECT, exclusive)",
                dest.display()
            )
        })
}

fn open_plain(dest: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dest)
        .with_context(|| format!("opening {}", dest.display()))
}

fn target<'a>(
    direct: &'a File,
    plain: &'a File,
    g: &gpt::Geometry,
    name: &'a str,
) -> image::Target<'a> {
    image::Target {
        direct,
        plain,
        size: g.sectors * g.sector_size,
        sector: g.sector_size,
        name,
    }
}

/// After a failure: the partition tables wiped (and the kernel's partitions removed) unless
/// `preserve_on_error`; returns the error to report.
fn failed(o: &Options, t: &image::Target, e: anyhow::Error) -> anyhow::Error {
    if o.preserve_on_error {
        log::warn!("install failed; the disk is left as it is (--preserve-on-error)");
        return e;
    }
    log::warn!(
        "install failed; wiping the partition tables of {}",
        o.dest.display()
    );
    let _ = kernel::remove_partitions(t.plain, t.name);
    if let Err(w) = wipe_ends(t) {
        return e.context(format!(
            "wiping {} after the failure also failed: {w:#}",
            o.dest.display()
        ));
    }
    e
}

/// Zeroes the first and the last MiB: MBR, primary and backup GPT.
fn wipe_ends(t: &image::Target) -> Result<()> {
    image::zero(t, 0, image::FIRST as u64)?;
    let last = t
        .size
        .saturating_sub(image::FIRST as u64)
        .max(image::FIRST as u64);
    image::zero(t, last, image::FIRST as u64)
}

fn write(
    o: &Options,
    fetcher: &Fetcher,
    t: &image::Target,
    g: &gpt::Geometry,
) -> Result<Installed> {
    let (hasher, want) = match &o.image_hash {
        Some(h) => {
            let (hs, w) = image::Hasher::parse(h)?;
            (Some(hs), Some(w))
        }
        None => (None, None),
    };
    let reading = image::Reading {
        source: &o.image,
        fetcher,
        hasher,
        blake2b: o.signed.is_some(),
        retries: o.fetch_retries,
    };
    let w = image::stream(reading, t)?;
    if let (Some((func, got)), Some(want)) = (&w.digests.hash, &want)
        && got != want
    {
        bail!(
            "image hash mismatch: expected {func}-{want}, got {func}-{got} (of the image as fetched, compressed)"
        );
    }
    if let (Some(s), Some(d)) = (&o.signed, &w.digests.blake2b) {
        s.signature
            .verify(&s.key, d)
            .context("checking the image's signature")?;
        log::info!(
            "image signature good (key {}; trusted comment: {})",
            s.key.id_hex(),
            s.signature.trusted_comment
        );
    }
    image::write_first(t, &w)?;
    log::info!(
        "wrote {} bytes ({} {} bytes fetched) in {:.1}s ({:.0} MiB/s; {} MiB of zeros zeroed by the device, not written)",
        w.bytes,
        w.format.name(),
        w.digests.raw,
        w.elapsed.as_secs_f64(),
        w.bytes as f64 / 1048576.0 / w.elapsed.as_secs_f64().max(1e-6),
        w.zeroed >> 20
    );
    let partitions = announce_partitions(t, g, &o.dest, o.device_timeout)?;
    Ok(Installed {
        format: w.format,
        bytes: w.bytes,
        raw: w.digests.raw,
        resumed: w.digests.resumed,
        partitions,
        config_on: None,
        elapsed: w.elapsed,
    })
}

/// Tells the kernel about the image's partitions (BLKPG, one at a time: this works on a
/// kernel that parses no partition tables, and on a loop device without partscan) and waits
/// for their nodes.
fn announce_partitions(
    t: &image::Target,
    g: &gpt::Geometry,
    dest: &Path,
    timeout: Duration,
) -> Result<Vec<PathBuf>> {
    let table = match gpt::read(t.plain, g)
        .with_context(|| format!("reading the new partition table of {}", dest.display()))?
    {
        gpt::OnDisk::Gpt(table) => table,
        gpt::OnDisk::Mbr => {
            let parts = mbr::read(t.plain, g.sector_size, g.sectors * g.sector_size).with_context(
                || format!("reading the new partition table of {}", dest.display()),
            )?;
            log::info!(
                "the image has a DOS (MBR) partition table: {} partitions",
                parts.len()
            );
            let nodes = kernel::sync_partition_list(t.plain, t.name, &parts)?;
            kernel::udev_settle();
            kernel::wait_for(&nodes, timeout)?;
            return Ok(nodes);
        }
        gpt::OnDisk::None => {
            log::warn!("the image has no partition table");
            return Ok(Vec::new());
        }
    };
    let nodes = kernel::sync_partitions(t.plain, t.name, g, &table)?;
    kernel::udev_settle();
    kernel::wait_for(&nodes, timeout)?;
    Ok(nodes)
}

/// Writes the config to [`BOOT_CONFIG`] on the partition labelled [`BOOT_LABEL`].
fn write_config(partitions: &[PathBuf], cfg: &[u8], served: Option<&[u8]>) -> Result<PathBuf> {
    let mut boot = None;
    for p in partitions {
        if let Some(f) = probe::probe(p)?
            && f.label.as_deref() == Some(BOOT_LABEL)
        {
            boot = Some((p.clone(), f.fstype));
            break;
        }
    }
    let Some((dev, fstype)) = boot else {
        bail!(
            "the image has no partition labelled {BOOT_LABEL:?} to write the config to (partitions: {})",
            partitions
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let at = std::env::temp_dir().join(format!("agent-install-boot.{}", std::process::id()));
    std::fs::create_dir_all(&at).with_context(|| format!("creating {}", at.display()))?;
    let m = sys_mount::Mount::builder()
        .fstype(fstype.as_str())
        .flags(
            sys_mount::MountFlags::NOSUID
                | sys_mount::MountFlags::NODEV
                | sys_mount::MountFlags::NOEXEC,
        )
        .mount(&dev, &at)
        .with_context(|| format!("mounting {} ({fstype}) at {}", dev.display(), at.display()))?;
    drop(m);
    let mut mounts = crate::mounts::Mounts::default();
    mounts.push(at.clone(), None);
    let path = at.join(BOOT_CONFIG);
    let r = runtime::util::write_atomic(&path, cfg, 0o600)
        .with_context(|| format!("writing {BOOT_CONFIG} on {}", dev.display()))
        .and_then(|()| match served {
            Some(b) => runtime::util::write_atomic(&at.join(BOOT_SERVED), b, 0o600)
                .with_context(|| format!("writing {BOOT_SERVED} on {}", dev.display())),
            None => Ok(()),
        });
    mounts.close()?;
    let _ = std::fs::remove_dir(&at);
    r?;
    log::info!("wrote the config to {BOOT_CONFIG} on {}", dev.display());
    Ok(dev)
}

/// Records the chosen disk's stable path in `<state_dir>/install-disk`.
pub fn record_disk(state_dir: &Path, path: &Path) -> Result<()> {
    let mut s = path.display().to_string();
    s.push('\n');
    runtime::util::write_atomic(&state_dir.join(INSTALL_DISK_FILE), s.as_bytes(), 0o644)
}
