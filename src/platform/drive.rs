//! Config drives and seed disks: the one reader every platform that hands its user data over
//! on a disk uses (OpenStack's and CloudStack's `config-2`, NoCloud's `cidata`, Azure's OVF
//! provisioning CD, IONOS Cloud's `OEM` disk).
//!
//! A [`Drive`] says what to look for: filesystem labels, filesystem types, whether it must be
//! a CD-ROM with a disc in, and how long to wait for it. [`find`] looks for it without udev:
//! the `/dev/disk/by-label/LABEL` links when present, and every block device of
//! `/sys/class/block` probed with libblkid ([`crate::blockdev::probe`]); it polls until the
//! drive appears or the wait is over (both logged). [`Mounted`] mounts it read-only (nosuid,
//! nodev, noexec; ext4 with `noload`, so not even a journal is replayed) through
//! [`crate::mounts::Mounts`] in a temporary directory, reads files with the size limit, and unmounts.
//! Nothing is ever written to the drive.
//!
//! [`read`] is the common case: find, mount, read one file, unmount. A drive without the file
//! is no user data ([`Outcome::Read(None)`](Outcome::Read)); the bytes found carry a source
//! naming platform, device, label and path, so that a broken config's error says where it is.
//!
//! [`drive_or_service`] runs the two halves of platforms that have both a drive and a
//! metadata service (OpenStack, CloudStack) side by side, first answer wins, as Ignition does;
//! the service half is [`crate::metadata::fetch_user_data_at`], bounded by the platform's wait
//! and stopped when the drive answers first.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use log::{debug, info, warn};

use super::Found;
use crate::mounts::Mounts;

/// How often the block devices are looked at again while waiting for a drive.
pub const POLL: Duration = Duration::from_millis(500);
/// How often a wait says on the console what it waits for, and since when.
pub const PROGRESS: Duration = Duration::from_secs(5);
/// A wait without end ([`Drive::wait`]): the platforms on which Ignition waits for the drive
/// until it appears (it is always attached there).
pub const FOREVER: Duration = Duration::MAX;

/// What a platform's drive looks like.
#[derive(Debug, Clone, Copy)]
pub struct Drive {
    /// The platform (logs, sources).
    pub platform: &'static str,
    /// What it is called in messages: "config drive", "NoCloud seed", "OVF provisioning CD".
    pub what: &'static str,
    /// Filesystem labels, exact, in order of preference; empty: any label.
    pub labels: &'static [&'static str],
    /// Filesystem types accepted; empty: any filesystem libblkid recognises.
    pub fstypes: &'static [&'static str],
    /// Only a CD-ROM drive with a disc in (`CDROM_DRIVE_STATUS` says `CDS_DISC_OK`).
    pub cdrom: bool,
    /// The longest wait for it; [`FOREVER`]: until it appears.
    pub wait: Duration,
}

/// `wait` as a limit: None for [`FOREVER`].
pub fn limit(wait: Duration) -> Option<Duration> {
    (wait != FOREVER).then_some(wait)
}

/// Where block devices are: the real places, or a test's.
#[derive(Debug, Clone)]
pub struct Roots {
    /// One entry per block device (`/sys/class/block`): the names looked at.
    pub sys_block: PathBuf,
    /// Device nodes (`/dev`).
    pub dev: PathBuf,
    /// udev's label links (`/dev/disk/by-label`), used when present.
    pub by_label: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            sys_block: "/sys/class/block".into(),
            dev: "/dev".into(),
            by_label: "/dev/disk/by-label".into(),
        }
    }
}

/// A drive found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub path: PathBuf,
    pub fstype: String,
    pub label: Option<String>,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}", self.path.display(), self.fstype)?;
        if let Some(l) = &self.label {
            write!(f, ", label {l}")?;
        }
        write!(f, ")")
    }
}

/// What [`read`] found.
pub enum Outcome {
    /// No such drive appeared within the wait.
    NoDrive,
    /// The drive was there: the file (with its source), or None when it has no such file.
    Read(Option<Found>),
}

impl Drive {
    /// "config drive labelled config-2 or CONFIG-2", "OVF provisioning CD (udf)".
    pub fn describe(&self) -> String {
        let mut s = self.what.to_string();
        if !self.labels.is_empty() {
            s.push_str(" labelled ");
            s.push_str(&self.labels.join(" or "));
        }
        if !self.fstypes.is_empty() {
            s.push_str(&format!(" ({})", self.fstypes.join(" or ")));
        }
        s
    }

    /// "up to 30s" or "without end".
    pub fn wait_text(&self) -> String {
        if self.wait == FOREVER {
            "without end".into()
        } else {
            format!("up to {}s", self.wait.as_secs_f64())
        }
    }

    /// Whether a probed filesystem is this drive; the rank of its label (lower is preferred).
    pub fn matches(&self, fstype: &str, label: Option<&str>) -> Option<usize> {
        if !self.fstypes.is_empty() && !self.fstypes.contains(&fstype) {
            return None;
        }
        if self.labels.is_empty() {
            return Some(0);
        }
        let label = label?;
        self.labels.iter().position(|l| *l == label)
    }
}

/// The block devices to look at, once: the targets of the label links first (in the drive's
/// label order), then every device of `roots.sys_block` with a non-zero size, in name order;
/// each once.
pub fn candidates(d: &Drive, roots: &Roots) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for l in d.labels {
        if let Ok(p) = std::fs::canonicalize(roots.by_label.join(l)) {
            out.push(p);
        }
    }
    let mut names: Vec<String> = std::fs::read_dir(&roots.sys_block)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for n in names {
        // An unbound loop device or an empty drive: size 0, nothing to probe.
        let size = std::fs::read_to_string(roots.sys_block.join(&n).join("size"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let dev = roots.dev.join(&n);
        if (size > 0 || n.starts_with("sr")) && dev.exists() && !out.contains(&dev) {
            out.push(dev);
        }
    }
    out
}

/// Whether `dev` is a CD-ROM drive with a disc in (the `CDROM_DRIVE_STATUS` ioctl, as
/// Ignition's Azure provider checks): a disk the user attached is never taken for the
/// provisioning CD.
pub fn is_cdrom_with_disc(dev: &Path) -> bool {
    const CDROM_DRIVE_STATUS: nix::libc::c_ulong = 0x5326;
    const CDS_DISC_OK: nix::libc::c_int = 4;
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(dev)
    else {
        return false;
    };
    use std::os::fd::AsRawFd;
    // SAFETY: CDROM_DRIVE_STATUS takes an integer argument (the slot, 0) and no pointer; the
    // descriptor is open for the duration of the call.
    let r = unsafe { nix::libc::ioctl(f.as_raw_fd(), CDROM_DRIVE_STATUS as _, 0) };
    r == CDS_DISC_OK
}

/// One look: the best matching device now, if any, other than those in `exclude`.
pub fn find_once(d: &Drive, roots: &Roots, exclude: &[PathBuf]) -> Option<Device> {
    let mut best: Option<(usize, Device)> = None;
    for dev in candidates(d, roots) {
        if exclude.contains(&dev) || (d.cdrom && !is_cdrom_with_disc(&dev)) {
            continue;
        }
        let found = match crate::blockdev::probe::probe(&dev) {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(e) => {
                debug!("{}: {e:#}", d.platform);
                continue;
            }
        };
        let Some(rank) = d.matches(&found.fstype, found.label.as_deref()) else {
            continue;
        };
        if best.as_ref().is_none_or(|(r, _)| rank < *r) {
            best = Some((
                rank,
                Device {
                    path: dev,
                    fstype: found.fstype,
                    label: found.label,
                },
            ));
        }
    }
    best.map(|(_, d)| d)
}

/// Waits at most `d.wait` for the drive (polling every [`POLL`]), or until `stop` is set;
/// None when it did not appear. The wait is logged when it starts, every [`PROGRESS`] while
/// it lasts (what it waits for, since when), and when it ends.
pub fn find(d: &Drive, roots: &Roots, stop: &AtomicBool) -> Option<Device> {
    find_excluding(d, roots, stop, &[], Instant::now())
}

/// [`find`], not taking the devices in `exclude`, waiting until `start` + `d.wait`.
pub fn find_excluding(
    d: &Drive,
    roots: &Roots,
    stop: &AtomicBool,
    exclude: &[PathBuf],
    start: Instant,
) -> Option<Device> {
    // None: without end ([`FOREVER`]).
    let deadline = start.checked_add(d.wait);
    let mut next_progress: Option<Instant> = None;
    loop {
        if let Some(dev) = find_once(d, roots, exclude) {
            info!(
                "{}: found the {} {dev} after {:.1}s",
                d.platform,
                d.what,
                start.elapsed().as_secs_f64()
            );
            return Some(dev);
        }
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let now = Instant::now();
        if deadline.is_some_and(|end| now >= end) {
            info!(
                "{}: no {} appeared within {}s",
                d.platform,
                d.describe(),
                d.wait.as_secs_f64()
            );
            return None;
        }
        match next_progress {
            None => {
                info!(
                    "{}: waiting {} for a {}",
                    d.platform,
                    d.wait_text(),
                    d.describe()
                );
                next_progress = Some(now + PROGRESS);
            }
            Some(t) if now >= t => {
                info!(
                    "{}: still waiting for a {} (since {:.0}s; waiting {})",
                    d.platform,
                    d.describe(),
                    start.elapsed().as_secs_f64(),
                    d.wait_text()
                );
                next_progress = Some(t + PROGRESS);
            }
            Some(_) => {}
        }
        let nap = deadline.map_or(POLL, |end| POLL.min(end - now));
        std::thread::sleep(nap);
    }
}

/// A drive mounted read-only in a temporary directory; unmounted (and the directory removed)
/// by [`Mounted::close`] or on drop.
pub struct Mounted {
    dir: PathBuf,
    guard: Option<Mounts>,
    pub device: Device,
}

impl Mounted {
    /// Mounts `device` read-only.
    pub fn mount(device: &Device) -> Result<Mounted> {
        let dir = std::env::temp_dir().join(format!(
            "agent-drive-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // ext4 and ext3 would replay their journal even read-only.
        let data = match device.fstype.as_str() {
            "ext4" | "ext3" => "noload",
            _ => "",
        };
        match Mounts::mount_readonly(&device.path, &device.fstype, data, &dir) {
            Ok(g) => Ok(Mounted {
                dir,
                guard: Some(g),
                device: device.clone(),
            }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The file `rel` (relative to the drive's root) of at most `limit` bytes, None when the
    /// drive has no such file. `what` names it in errors.
    pub fn read(&self, rel: &str, limit: u64, what: &str) -> Result<Option<Vec<u8>>> {
        let p = self.dir.join(rel.trim_start_matches('/'));
        runtime::limits::read_optional_file_bounded(&p, limit, what)
    }

    /// Whether the drive has the file `rel`.
    pub fn has(&self, rel: &str) -> bool {
        self.dir.join(rel.trim_start_matches('/')).exists()
    }

    /// Unmounts and removes the directory.
    pub fn close(mut self) -> Result<()> {
        self.unmount()
    }

    fn unmount(&mut self) -> Result<()> {
        if let Some(g) = self.guard.take() {
            g.close()?;
            std::fs::remove_dir(&self.dir)
                .with_context(|| format!("removing {}", self.dir.display()))?;
        }
        Ok(())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            warn!("{e:#}");
        }
    }
}

/// The source of a file read from a drive: "openstack config drive /dev/sr0 (iso9660, label
/// config-2), file openstack/latest/user_data".
pub fn source(d: &Drive, dev: &Device, rel: &str) -> String {
    format!(
        "{} {} {dev}, file {}",
        d.platform,
        d.what,
        rel.trim_start_matches('/')
    )
}

/// Finds the drive (waiting at most `d.wait`, or until `stop`), mounts it, reads the file
/// `rel` (at most `limit` bytes), unmounts.
pub fn read(d: &Drive, roots: &Roots, rel: &str, limit: u64, stop: &AtomicBool) -> Result<Outcome> {
    let Some(dev) = find(d, roots, stop) else {
        return Ok(Outcome::NoDrive);
    };
    read_device(d, &dev, rel, limit).map(Outcome::Read)
}

/// Mounts `dev`, reads the file `rel`, unmounts: None without the file (logged).
pub fn read_device(d: &Drive, dev: &Device, rel: &str, limit: u64) -> Result<Option<Found>> {
    let src = source(d, dev, rel);
    let m = Mounted::mount(dev).with_context(|| format!("{} {}", d.platform, d.what))?;
    let bytes = m.read(rel, limit, &format!("config from {src}"))?;
    m.close()?;
    match bytes {
        None => {
            info!(
                "{}: the {} {dev} has no {}: no user data",
                d.platform,
                d.what,
                rel.trim_start_matches('/')
            );
            Ok(None)
        }
        Some(bytes) => Ok(Some(Found { bytes, source: src })),
    }
}

/// What a drive-only platform does when its drive never appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// No user data: provisioning goes on with the base configs (Ignition gives up after
    /// its wait on these platforms: IBM Cloud, Proxmox VE, IONOS Cloud).
    NoUserData,
    /// An error, for a drive with a bounded wait that never appeared (the platforms whose
    /// drive is always attached wait for it without end, as Ignition: [`FOREVER`]).
    Error,
}

/// The file of the user data on an OpenStack-layout config drive.
pub const OPENSTACK_USER_DATA: &str = "openstack/latest/user_data";

/// An OpenStack-layout config drive (label `config-2`) that `platform` always attaches
/// (KubeVirt, Nutanix, PowerVS): as Ignition, waited for without end (the wait says every
/// [`PROGRESS`] what it waits for).
pub const fn attached_config_drive(platform: &'static str) -> Drive {
    Drive {
        platform,
        what: "config drive",
        labels: &["config-2"],
        fstypes: &[],
        cdrom: false,
        wait: FOREVER,
    }
}

/// A platform whose user data is one file on its drive: find it, read `rel`, unmount.
pub fn fetch_file(
    d: &Drive,
    roots: &Roots,
    rel: &str,
    limit: u64,
    absent: Absent,
) -> Result<Option<Found>> {
    match read(d, roots, rel, limit, &AtomicBool::new(false))? {
        Outcome::Read(found) => Ok(found),
        Outcome::NoDrive if absent == Absent::NoUserData => {
            info!("{}: continuing without user data", d.platform);
            Ok(None)
        }
        Outcome::NoDrive => bail!(
            "no {} appeared within {}s (the platform attaches one to every machine: is this the right platform?)",
            d.describe(),
            d.wait.as_secs_f64()
        ),
    }
}

/// The platforms with two kinds of drive (KubeVirt: a NoCloud `cidata` seed or a `config-2`
/// config drive), as Ignition reads them: each `(drive, file)` looked for side by side; the
/// first drive found answers (its file, or no user data without it) and the others stop
/// looking; a drive that cannot be read leaves the answer to the others; when all fail, the
/// error names each.
pub fn first_drive(sources: &[(Drive, &str)], roots: &Roots, limit: u64) -> Result<Option<Found>> {
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(usize, Result<Outcome>)>();
    std::thread::scope(|s| {
        for (i, (d, rel)) in sources.iter().enumerate() {
            let (tx, stop) = (tx.clone(), &stop);
            s.spawn(move || {
                let _ = tx.send((i, read(d, roots, rel, limit, stop)));
            });
        }
        drop(tx);
        let mut errors: Vec<String> = Vec::new();
        for (i, r) in rx {
            let d = &sources[i].0;
            let e = match r {
                Ok(Outcome::Read(found)) => {
                    stop.store(true, Ordering::Relaxed);
                    return Ok(found);
                }
                Ok(Outcome::NoDrive) if stop.load(Ordering::Relaxed) => continue,
                Ok(Outcome::NoDrive) => anyhow!(
                    "no {} appeared within {}s",
                    d.describe(),
                    d.wait.as_secs_f64()
                ),
                Err(e) => e,
            };
            warn!("{}: {}: {e:#}", d.platform, d.describe());
            errors.push(format!("{}: {e:#}", d.describe()));
        }
        bail!("no config from any drive: {}", errors.join("; "))
    })
}

/// Whether user data is a cloud-init document rather than a config (`#cloud-config`, or a
/// script, `#!`): Ignition's NoCloud readers (Proxmox VE, IONOS Cloud) skip those. A JSON
/// config never starts with `#`.
pub fn is_cloud_init(b: &[u8]) -> bool {
    b.starts_with(b"#cloud-config") || b.starts_with(b"#!")
}

/// The two sources of a platform that has both a drive and a metadata service, run side by
/// side as Ignition does: the first to answer wins (a drive without the file and a service
/// without user data are answers too: no user data); when one fails the other's answer is
/// awaited; when both fail, the error names both. The drive is waited for at most `d.wait`;
/// `service` must return by itself and should give up when its `stop` flag is set.
pub fn drive_or_service(
    d: &Drive,
    roots: &Roots,
    rel: &str,
    limit: u64,
    service_name: &str,
    service: impl FnOnce(&AtomicBool) -> Result<Option<Found>> + Send,
) -> Result<Option<Found>> {
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(bool, Result<Option<Found>>)>();
    std::thread::scope(|s| {
        let (tx1, stop1) = (tx.clone(), &stop);
        s.spawn(move || {
            let r = match read(d, roots, rel, limit, stop1) {
                Ok(Outcome::Read(found)) => Ok(found),
                Ok(Outcome::NoDrive) => Err(anyhow!(
                    "no {} appeared within {}s",
                    d.describe(),
                    d.wait.as_secs_f64()
                )),
                Err(e) => Err(e),
            };
            let _ = tx1.send((true, r));
        });
        let stop2 = &stop;
        s.spawn(move || {
            let _ = tx.send((false, service(stop2)));
        });
        let mut errors: Vec<String> = Vec::new();
        for _ in 0..2 {
            let Ok((is_drive, r)) = rx.recv() else { break };
            let name = if is_drive { d.what } else { service_name };
            match r {
                Ok(found) => {
                    stop.store(true, Ordering::Relaxed);
                    info!("{}: config from the {name}", d.platform);
                    return Ok(found);
                }
                Err(e) => {
                    warn!("{}: {name}: {e:#}", d.platform);
                    errors.push(format!("{name}: {e:#}"));
                }
            }
        }
        bail!("no config from either source: {}", errors.join("; "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Drive = Drive {
        platform: "test",
        what: "config drive",
        labels: &["config-2", "CONFIG-2"],
        fstypes: &[],
        cdrom: false,
        wait: Duration::from_millis(300),
    };

    #[test]
    fn labels_and_types_select_the_drive() {
        assert_eq!(D.matches("iso9660", Some("config-2")), Some(0));
        assert_eq!(D.matches("vfat", Some("CONFIG-2")), Some(1));
        assert_eq!(D.matches("iso9660", Some("Config-2")), None);
        assert_eq!(D.matches("iso9660", None), None);
        let ovf = Drive {
            labels: &[],
            fstypes: &["udf", "iso9660"],
            cdrom: true,
            ..D
        };
        assert_eq!(ovf.matches("udf", None), Some(0));
        assert_eq!(ovf.matches("iso9660", Some("rd_rdfe_stable")), Some(0));
        assert_eq!(ovf.matches("vfat", None), None);
        assert_eq!(D.describe(), "config drive labelled config-2 or CONFIG-2");
        assert_eq!(ovf.describe(), "config drive (udf or iso9660)");
    }

    #[test]
    fn cloud_init_documents_are_not_configs() {
        assert!(is_cloud_init(b"#cloud-config\nusers: []\n"));
        assert!(is_cloud_init(b"#!/bin/sh\necho hi\n"));
        assert!(!is_cloud_init(b"{\"ignition\":{\"version\":\"3.4.0\"}}"));
        assert!(!is_cloud_init(b""));
    }

    #[test]
    fn the_wait_is_bounded_and_candidates_come_from_the_roots() {
        let dir = std::env::temp_dir().join(format!("agent-drive-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sys/vdz")).unwrap();
        std::fs::create_dir_all(dir.join("sys/loop99")).unwrap();
        std::fs::create_dir_all(dir.join("dev")).unwrap();
        std::fs::write(dir.join("sys/vdz/size"), "2048\n").unwrap();
        std::fs::write(dir.join("sys/loop99/size"), "0\n").unwrap();
        std::fs::write(dir.join("dev/vdz"), "not a filesystem").unwrap();
        std::fs::write(dir.join("dev/loop99"), "").unwrap();
        let roots = Roots {
            sys_block: dir.join("sys"),
            dev: dir.join("dev"),
            by_label: dir.join("by-label"),
        };
        // Size 0 (an unbound loop device) is not a candidate; the by-label dir is absent.
        assert_eq!(candidates(&D, &roots), vec![dir.join("dev/vdz")]);
        let start = Instant::now();
        assert_eq!(find(&D, &roots, &AtomicBool::new(false)), None);
        assert!(start.elapsed() >= D.wait);
        // A stop request ends the wait at once.
        let long = Drive {
            wait: Duration::from_secs(3600),
            ..D
        };
        assert_eq!(find(&long, &roots, &AtomicBool::new(true)), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_first_answer_wins_and_both_failures_are_named() {
        let roots = Roots {
            sys_block: "/nonexistent".into(),
            dev: "/nonexistent".into(),
            by_label: "/nonexistent".into(),
        };
        let found = drive_or_service(&D, &roots, "x", 10, "metadata service", |_| {
            Ok(Some(Found {
                bytes: b"{}".to_vec(),
                source: "svc".into(),
            }))
        })
        .unwrap()
        .unwrap();
        assert_eq!(found.source, "svc");
        let e = drive_or_service(&D, &roots, "x", 10, "metadata service", |_| {
            Err(anyhow!("connection refused"))
        })
        .err()
        .unwrap();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("no config drive labelled config-2 or CONFIG-2 appeared within 0.3s"),
            "{msg}"
        );
        assert!(
            msg.contains("metadata service: connection refused"),
            "{msg}"
        );
    }
}
