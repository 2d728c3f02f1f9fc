//! Filesystems: what to do with a device (`decide`), the mkfs table (`mkfs_command`) and
//! carrying a decision out (`make`). The rules are Ignition's (`docs/disks.md`):
//!
//! - an entry without a format asks for nothing;
//! - nothing on the device: create (format `none`: nothing to do);
//! - `wipeFilesystem: true`: wipe every signature (`wipefs -a`), then create (format `none`:
//!   only wipe) — the outcome does not depend on what is there;
//! - an existing filesystem otherwise: reused when its type is the format and its label and
//!   uuid match where the config gives them (uuids case-insensitive, the dash of a vfat uuid
//!   ignored), else refused touching nothing (format `none` with a filesystem there too);
//! - a device carrying more than one signature (libblkid's ambivalent result, `probe`) is
//!   judged by the first; when refused, the error says so, and the plan notes it on a reuse;
//! - before every mkfs, `wipefs -a` (also where no filesystem was found: signatures libblkid
//!   does not report as a filesystem, a partition table inside the partition, say).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};

use super::devices::Devices;
use super::probe::{Found, probe};
use super::{failpoint, inuse, kernel};
use spec::config::types::Filesystem;

/// What happens to one filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsAction {
    /// Nothing there and format none: nothing to do.
    Nothing,
    Reuse(Found),
    Create,
    /// Wipe the existing signatures, then create (format none: only wipe).
    /// (`None`: not probed, wipeFilesystem is set so what is there does not matter.)
    WipeCreate(Option<Found>),
    /// The device is (re)created by the partitioning: probed and decided afterwards.
    AfterPartitioning,
}

fn norm_uuid(s: &str, fmt: &str) -> String {
    let s = s.to_ascii_lowercase();
    if fmt == "vfat" { s.replace('-', "") } else { s }
}

/// The filesystem rules: reuse, create, wipe, or fail touching nothing.
pub fn decide(fs: &Filesystem, found: Option<Found>) -> Result<FsAction> {
    let fmt = fs
        .format
        .as_deref()
        .ok_or_else(|| anyhow!("filesystem on {}: no format given", fs.device))?;
    if !matches!(fmt, "ext4" | "xfs" | "btrfs" | "vfat" | "swap" | "none") {
        bail!("filesystem on {}: unsupported format {fmt:?}", fs.device);
    }
    let wipe = fs.wipe_filesystem.unwrap_or(false);
    let Some(found) = found else {
        return Ok(if fmt == "none" {
            FsAction::Nothing
        } else {
            FsAction::Create
        });
    };
    if wipe {
        return Ok(FsAction::WipeCreate(Some(found)));
    }
    let mut why = Vec::new();
    if fmt == "none" {
        why.push("format none asks for no filesystem".to_string());
    } else if found.fstype != fmt {
        why.push(format!("type {} != {fmt}", found.fstype));
    }
    if let Some(l) = &fs.label
        && found.label.as_ref() != Some(l)
    {
        why.push(format!(
            "label {:?} != {l:?}",
            found.label.as_deref().unwrap_or("")
        ));
    }
    if let Some(u) = &fs.uuid
        && found.uuid.as_deref().map(|x| norm_uuid(x, fmt)) != Some(norm_uuid(u, fmt))
    {
        why.push(format!(
            "uuid {:?} != {u:?}",
            found.uuid.as_deref().unwrap_or("")
        ));
    }
    if why.is_empty() {
        Ok(FsAction::Reuse(found))
    } else {
        bail!(
            "filesystem on {}: the existing {} does not match the config ({}) and wipeFilesystem \
             is false; refusing to touch it{}",
            fs.device,
            found.fstype,
            why.join(", "),
            if found.ambivalent {
                " (the device carries more than one signature; `wipefs` lists them, and \
                 wipeFilesystem: true clears them all)"
            } else {
                ""
            }
        )
    }
}

/// Like Ignition: an entry without a format (only a device) asks for nothing.
pub fn asks_for_nothing(fs: &Filesystem) -> bool {
    fs.format.as_deref().is_none_or(str::is_empty)
}

/// Decides a filesystem whose device the partitioning, an array or a volume has just made:
/// with `wipeFilesystem` what is there does not matter (not probed), else it is probed.
pub fn decide_after_partitioning(fs: &Filesystem, dev: &Path) -> Result<FsAction> {
    if fs.wipe_filesystem == Some(true) {
        return Ok(FsAction::WipeCreate(None));
    }
    decide(fs, probe(dev)?)
}

/// Decides a filesystem from what is on its device now.
pub fn decide_now(fs: &Filesystem, dev: &Path) -> Result<FsAction> {
    decide(fs, probe(dev)?)
}

/// What the plan says about a filesystem.
pub fn describe(fs: &Filesystem, action: &FsAction) -> String {
    let fmt = fs.format.as_deref().unwrap_or("?");
    match action {
        FsAction::Nothing => "nothing (format none, nothing there)".to_string(),
        FsAction::Reuse(x) => format!(
            "reuse {} (label {:?}, uuid {}){}",
            x.fstype,
            x.label.as_deref().unwrap_or(""),
            x.uuid.as_deref().unwrap_or("-"),
            if x.ambivalent {
                "; other, stale signatures are on the device too"
            } else {
                ""
            }
        ),
        FsAction::Create => format!("create {fmt}"),
        FsAction::WipeCreate(x) if fmt == "none" => format!("wipe {}", fstype(x)),
        FsAction::WipeCreate(x) => format!("wipe {} and create {fmt}", fstype(x)),
        FsAction::AfterPartitioning => format!(
            "{} {fmt} (decided after partitioning/RAID/LUKS: the device is new, changed \
             or has no node yet)",
            if fs.wipe_filesystem == Some(true) {
                "wipe/create"
            } else {
                "reuse/create"
            }
        ),
    }
}

fn fstype(f: &Option<Found>) -> &str {
    f.as_ref().map(|f| f.fstype.as_str()).unwrap_or("any")
}

fn timed(tools: &Mutex<Duration>, program: &str, args: &[String]) -> Result<()> {
    let t = Instant::now();
    let r = runtime::util::run(program, args);
    *tools.lock().unwrap_or_else(|e| e.into_inner()) += t.elapsed();
    r.map(|_| ())
}

/// The mkfs table: the program and argv that create `fs` on `dev` (format `none`, or any
/// other format without a mkfs, is an error).
pub fn mkfs_command(fs: &Filesystem, dev: &str) -> Result<(&'static str, Vec<String>)> {
    let fmt = fs.format.as_deref().unwrap_or("none");
    let label = fs.label.clone();
    let uuid = fs.uuid.clone();
    let (prog, mut args): (&'static str, Vec<String>) = match fmt {
        "ext4" => ("mkfs.ext4", vec!["-F".into(), "-q".into()]),
        "xfs" => ("mkfs.xfs", vec!["-f".into(), "-q".into()]),
        "btrfs" => ("mkfs.btrfs", vec!["-f".into(), "-q".into()]),
        "vfat" => ("mkfs.fat", vec![]),
        "swap" => ("mkswap", vec!["-f".into()]),
        other => bail!("unsupported filesystem format {other:?}"),
    };
    if let Some(l) = label {
        args.push(if fmt == "vfat" { "-n" } else { "-L" }.into());
        args.push(l);
    }
    if let Some(u) = uuid {
        match fmt {
            "xfs" => {
                args.push("-m".into());
                args.push(format!("uuid={u}"));
            }
            "vfat" => {
                args.push("-i".into());
                args.push(u.replace('-', ""));
            }
            _ => {
                args.push("-U".into());
                args.push(u);
            }
        }
    }
    args.extend(fs.options.iter().cloned());
    args.push(dev.to_string());
    Ok((prog, args))
}

/// Carries out a decided action on `dev` (`fs.device` as named in the config): wipe and/or
/// mkfs. The wall time of the external tools is added to `tools`.
pub fn make(fs: &Filesystem, dev: &Path, action: &FsAction, tools: &Mutex<Duration>) -> Result<()> {
    let fmt = fs.format.as_deref().unwrap_or("none");
    let d = dev.display().to_string();
    match action {
        FsAction::Nothing => return Ok(()),
        FsAction::Reuse(_) => {
            log::info!("reusing the existing {fmt} filesystem on {}", fs.device);
            return Ok(());
        }
        FsAction::WipeCreate(found) => {
            log::info!("wiping the {} signatures on {}", fstype(found), fs.device);
            timed(tools, "wipefs", &["-a".into(), d.clone()])?;
            failpoint::hit("after-wipe")?;
        }
        // Like Ignition, signatures libblkid does not report as a filesystem (a partition table
        // inside the partition, say) are cleared before mkfs too.
        FsAction::Create => timed(tools, "wipefs", &["-a".into(), d.clone()])?,
        FsAction::AfterPartitioning => bail!("internal: undecided filesystem"),
    }
    if fmt == "none" {
        return Ok(());
    }
    let (prog, args) = mkfs_command(fs, &d)?;
    log::info!("creating {fmt} on {}", fs.device);
    timed(tools, prog, &args).with_context(|| format!("creating {fmt} on {}", fs.device))?;
    failpoint::hit("after-mkfs")
}

/// One filesystem of the plan.
#[derive(Debug)]
pub struct FsWork {
    pub fs: Filesystem,
    pub action: FsAction,
}

/// Plans every filesystem that asks for something: decided now from what its device holds,
/// unless the plan makes that device (then only its format is checked, and the rest is decided
/// by [`decide_all`]). Waits for a device's node at most `timeout`. Reads devices, writes
/// nothing.
pub fn plan(
    filesystems: &[Filesystem],
    devices: &Devices,
    timeout: Duration,
) -> Result<Vec<FsWork>> {
    let mut out = Vec::new();
    for fs in filesystems {
        if asks_for_nothing(fs) {
            log::info!("filesystem on {}: no format, nothing to do", fs.device);
            continue;
        }
        let action = if devices.made_by_plan(&fs.device) {
            decide(fs, None)?; // checks the format now
            FsAction::AfterPartitioning
        } else {
            let dev = devices.resolve(&fs.device, timeout)?;
            decide_now(fs, &dev)?
        };
        out.push(FsWork {
            fs: fs.clone(),
            action,
        });
    }
    Ok(out)
}

/// A filesystem ready to be made: its device's node and the decided action.
#[derive(Debug)]
pub struct Decided {
    pub fs: Filesystem,
    pub dev: PathBuf,
    pub action: FsAction,
}

/// Once the devices below exist: every filesystem's device resolved, probed if it was left for
/// now, and checked free where it is to be formatted, all in parallel and before any is
/// touched, so that a refusal on one leaves every other one alone too. Refuses two names for
/// one device. Writes nothing.
pub fn decide_all(
    filesystems: &[FsWork],
    devices: &Devices,
    timeout: Duration,
) -> Result<Vec<Decided>> {
    let decided: Vec<Result<Decided>> = std::thread::scope(|s| {
        let hs: Vec<_> = filesystems
            .iter()
            .map(|w| s.spawn(move || decide_one(w, devices, timeout)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("probe worker panicked")))
            })
            .collect()
    });
    let work = decided.into_iter().collect::<Result<Vec<_>>>()?;
    for (i, w) in work.iter().enumerate() {
        if let Some(other) = work[..i].iter().find(|o| o.dev == w.dev) {
            bail!(
                "filesystems {} and {} are the same device {}",
                other.fs.device,
                w.fs.device,
                w.dev.display()
            );
        }
    }
    Ok(work)
}

/// Resolves, probes (if not done at plan time) and checks one filesystem's device.
fn decide_one(w: &FsWork, devices: &Devices, timeout: Duration) -> Result<Decided> {
    let dev = devices.resolve(&w.fs.device, timeout)?;
    let action = match &w.action {
        FsAction::AfterPartitioning => decide_after_partitioning(&w.fs, &dev)?,
        a => a.clone(),
    };
    if matches!(action, FsAction::Create | FsAction::WipeCreate(_)) {
        let name = kernel::sys_name(&dev)?;
        inuse::ensure_free(&name, &format!("format {}", w.fs.device))?;
    }
    Ok(Decided {
        fs: w.fs.clone(),
        dev,
        action,
    })
}

/// Makes every decided filesystem, each device's tools in parallel (see [`make`]); every one
/// is tried, and the first error in config order is returned. Returns the summed wall time of
/// the external tools.
pub fn make_all(work: &[Decided]) -> Result<Duration> {
    let tools = Mutex::new(Duration::ZERO);
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = work
            .iter()
            .map(|w| s.spawn(|| make(&w.fs, &w.dev, &w.action, &tools)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("filesystem worker panicked")))
            })
            .collect()
    });
    for r in results {
        r?;
    }
    Ok(tools.into_inner().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs(format: &str, label: Option<&str>, uuid: Option<&str>, wipe: bool) -> Filesystem {
        Filesystem {
            device: "/dev/x".into(),
            format: Some(format.into()),
            label: label.map(Into::into),
            uuid: uuid.map(Into::into),
            wipe_filesystem: Some(wipe),
            ..Default::default()
        }
    }
    fn found(t: &str, label: Option<&str>, uuid: Option<&str>) -> Option<Found> {
        Some(Found {
            fstype: t.into(),
            label: label.map(Into::into),
            uuid: uuid.map(Into::into),
            ambivalent: false,
        })
    }

    #[test]
    fn filesystem_rules() {
        use FsAction::*;
        let u = "6b7f1c2e-0000-4000-8000-000000000001";
        let cases: Vec<(Filesystem, Option<Found>, Option<FsAction>)> = vec![
            (fs("ext4", None, None, false), None, Some(Create)),
            (fs("none", None, None, false), None, Some(Nothing)),
            (
                fs("ext4", None, None, false),
                found("ext4", Some("a"), None),
                Some(Reuse(found("ext4", Some("a"), None).unwrap())),
            ),
            (
                fs("ext4", Some("a"), None, false),
                found("ext4", Some("a"), None),
                Some(Reuse(found("ext4", Some("a"), None).unwrap())),
            ),
            (
                fs("ext4", Some("b"), None, false),
                found("ext4", Some("a"), None),
                None,
            ),
            (
                fs("xfs", None, None, false),
                found("ext4", None, None),
                None,
            ),
            (
                fs("ext4", None, Some(&u.to_uppercase()), false),
                found("ext4", None, Some(u)),
                Some(Reuse(found("ext4", None, Some(u)).unwrap())),
            ),
            (
                fs("ext4", None, Some(u), false),
                found("ext4", None, Some("6b7f1c2e-0000-4000-8000-000000000002")),
                None,
            ),
            (
                fs("vfat", None, Some("ABCD-1234"), false),
                found("vfat", None, Some("abcd1234")),
                Some(Reuse(found("vfat", None, Some("abcd1234")).unwrap())),
            ),
            (
                fs("none", None, None, false),
                found("ext4", None, None),
                None,
            ),
            (
                fs("none", None, None, true),
                found("ext4", None, None),
                Some(WipeCreate(found("ext4", None, None))),
            ),
            (
                fs("xfs", None, None, true),
                found("ext4", None, None),
                Some(WipeCreate(found("ext4", None, None))),
            ),
        ];
        for (i, (f, found, want)) in cases.into_iter().enumerate() {
            let got = decide(&f, found);
            match want {
                None => assert!(got.is_err(), "case {i}: {got:?}"),
                Some(w) => assert_eq!(got.unwrap(), w, "case {i}"),
            }
        }
    }

    #[test]
    fn mkfs_table() {
        let u = "6b7f1c2e-0000-4000-8000-000000000001";
        let cmd = |f: Filesystem| {
            let (p, a) = mkfs_command(&f, "/dev/x1").unwrap();
            format!("{p} {}", a.join(" "))
        };
        let mut e = fs("ext4", Some("root"), Some(u), false);
        e.options = vec!["-E".into(), "lazy_itable_init=0".into()];
        assert_eq!(
            cmd(e),
            format!("mkfs.ext4 -F -q -L root -U {u} -E lazy_itable_init=0 /dev/x1")
        );
        assert_eq!(
            cmd(fs("xfs", Some("x"), Some(u), false)),
            format!("mkfs.xfs -f -q -L x -m uuid={u} /dev/x1")
        );
        assert_eq!(
            cmd(fs("btrfs", None, Some(u), false)),
            format!("mkfs.btrfs -f -q -U {u} /dev/x1")
        );
        assert_eq!(
            cmd(fs("vfat", Some("EFI"), Some("ABCD-1234"), false)),
            "mkfs.fat -n EFI -i ABCD1234 /dev/x1"
        );
        assert_eq!(
            cmd(fs("swap", Some("sw"), None, false)),
            "mkswap -f -L sw /dev/x1"
        );
        assert!(mkfs_command(&fs("none", None, None, false), "/dev/x1").is_err());
    }
}
