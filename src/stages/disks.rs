//! The disks stage: partitions (GPT), then RAID arrays, then LUKS volumes, then filesystems.
//!
//! Everything is planned first (`plan`): the new partition table of every disk, computed whole in
//! memory and checked, and what happens to every array, volume and filesystem (what sits on a
//! device that the plan itself creates is decided once that device exists). Only then is
//! anything written (`apply`): one table write per disk, partition nodes updated with BLKPG,
//! nodes waited for; arrays created or assembled (`blockdev::raid`); volumes formatted or reused
//! and opened (`blockdev::luks`, keys left in `<state-dir>/luks/` for the files stage); then
//! filesystems wiped/created in parallel. A failure while partitioning, or an array refused
//! after partitioning, puts every table back as it was.
//!
//! `--device-timeout` / `agent.device_timeout=` bounds every wait for a device node (default
//! 30 s); test builds have failpoints (see `blockdev::failpoint`).

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};

use super::Context;
use crate::blockdev::gpt::{self, OnDisk, Table};
use crate::blockdev::luks::{self, LuksAction};
use crate::blockdev::plan::{Action, DiskPlan, Spec};
use crate::blockdev::probe::{Found, probe};
use crate::blockdev::raid::{self, RaidAction};
use crate::blockdev::{failpoint, inuse, kernel};
use crate::config::Config;
use crate::config::types::{Filesystem, Luks, Raid};
use crate::fetch::{self, Fetcher};

/// One disk of the plan.
#[derive(Debug)]
pub struct DiskWork {
    /// As named in the config.
    pub path: String,
    /// The device node it resolves to.
    pub dev: PathBuf,
    /// Kernel name ("loop3").
    pub name: String,
    pub plan: DiskPlan,
}

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

#[derive(Debug)]
pub struct FsWork {
    pub fs: Filesystem,
    pub action: FsAction,
}

#[derive(Debug)]
pub struct RaidWork {
    pub raid: Raid,
    pub action: RaidAction,
}

#[derive(Debug)]
pub struct LuksWork {
    pub luks: Luks,
    pub action: LuksAction,
}

/// The whole plan of the stage.
#[derive(Debug, Default)]
pub struct StagePlan {
    pub disks: Vec<DiskWork>,
    pub raids: Vec<RaidWork>,
    pub luks: Vec<LuksWork>,
    pub filesystems: Vec<FsWork>,
}

/// Times of one run, for the benchmark and the log.
#[derive(Debug, Default, Clone, Copy)]
pub struct Report {
    pub total: Duration,
    /// Summed wall time of the external mkfs/wipefs tools (they run in parallel).
    pub tools: Duration,
    /// Wall time of the filesystem phase (tools in parallel).
    pub fs_phase: Duration,
    /// Reading tables, planning, probing devices known before partitioning.
    pub planning: Duration,
    /// Table writes (with fsync), partition nodes, waiting for them.
    pub partitioning: Duration,
    /// Probing and checking filesystems after partitioning.
    pub probing: Duration,
    /// Of `partitioning`: writing the tables and waiting for fsync (disk I/O).
    pub table_io: Duration,
}

pub fn run(config: &Config, ctx: &Context) -> Result<()> {
    let t0 = Instant::now();
    let p = plan(config)?;
    let planning = t0.elapsed();
    if p.disks.is_empty() && p.raids.is_empty() && p.luks.is_empty() && p.filesystems.is_empty() {
        log::info!("nothing to do");
        return Ok(());
    }
    for line in p.to_string().lines() {
        log::info!("plan: {line}");
    }
    let fetcher = Fetcher::new(fetch::Options::from_config(config));
    let mut r = apply_with(&p, &ctx.state_dir, &fetcher)?;
    r.total = t0.elapsed();
    r.planning = planning;
    log::info!(
        "done in {:.1} ms (external tools {:.1} ms summed, filesystem phase {:.1} ms, own overhead {:.1} ms)",
        ms(r.total),
        ms(r.tools),
        ms(r.fs_phase),
        ms(r.total.saturating_sub(r.fs_phase))
    );
    log::info!(
        "overhead: planning {:.1} ms, partitioning {:.1} ms (of which table write + fsync {:.1} ms), probing {:.1} ms",
        ms(r.planning),
        ms(r.partitioning),
        ms(r.table_io),
        ms(r.probing)
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Waits (bounded) for a config device path and resolves it to its node.
fn resolve(path: &str) -> Result<PathBuf> {
    let p = PathBuf::from(path);
    kernel::wait_for(std::slice::from_ref(&p), kernel::device_timeout())?;
    std::fs::canonicalize(&p).with_context(|| format!("resolving {path}"))
}

/// Computes the plan of the stage; reads devices, writes nothing.
pub fn plan(config: &Config) -> Result<StagePlan> {
    let st = &config.storage;
    let mut out = StagePlan::default();
    for d in &st.disks {
        let dev = resolve(&d.device)?;
        if let Some(other) = out.disks.iter().find(|o| o.dev == dev) {
            bail!(
                "disks {} and {} are the same device {}",
                other.path,
                d.device,
                dev.display()
            );
        }
        let name = kernel::sys_name(&dev)?;
        let f = File::open(&dev).with_context(|| format!("opening {}", dev.display()))?;
        let g = kernel::geometry(&f, &dev)?;
        let wipe = d.wipe_table.unwrap_or(false);
        let existing = match gpt::read(&f, &g) {
            Ok(OnDisk::Gpt(t)) => Some(t),
            Ok(OnDisk::None) => None,
            Ok(OnDisk::Mbr) if wipe => None,
            Ok(OnDisk::Mbr) => bail!(
                "{} has an MBR (DOS) partition table; set wipeTable to replace it with a GPT",
                d.device
            ),
            Err(e) if wipe => {
                log::warn!("{}: {e:#}; ignored since wipeTable is set", dev.display());
                None
            }
            Err(e) => return Err(e.context(format!("reading GPT of {}", dev.display()))),
        };
        let specs = d
            .partitions
            .iter()
            .map(Spec::from_config)
            .collect::<Result<Vec<_>>>()
            .with_context(|| format!("disk {}", d.device))?;
        let plan = crate::blockdev::plan::plan(
            existing.as_ref(),
            &g,
            wipe,
            &specs,
            &mut uuid::Uuid::new_v4,
        )
        .with_context(|| format!("planning partitions of {}", d.device))?;
        if plan.changes() {
            check_free(&name, &plan)?;
        }
        out.disks.push(DiskWork {
            path: d.device.clone(),
            dev,
            name,
            plan,
        });
    }
    // Arrays: decided now unless a member is (re)made by the partitioning.
    for r in &st.raid {
        raid::layout(r)?;
        let action = if r
            .devices
            .iter()
            .any(|d| touched_by_partitioning(&out.disks, d))
        {
            RaidAction::AfterPartitioning
        } else {
            raid::decide_now(r)?
        };
        out.raids.push(RaidWork {
            raid: r.clone(),
            action,
        });
    }
    // Volumes: decided now unless their device is made by the partitioning or an array.
    for l in &st.luks {
        let dev = l.device.as_deref().unwrap_or_default();
        let action = if touched_by_partitioning(&out.disks, dev) || made_by_layers(&out, dev) {
            luks::decide(l, None)?; // checks what does not depend on the device (cex)
            LuksAction::AfterPartitioning
        } else {
            luks::decide_now(l)?
        };
        out.luks.push(LuksWork {
            luks: l.clone(),
            action,
        });
    }
    for fs in &st.filesystems {
        // Like Ignition: an entry without a format (only a device) asks for nothing.
        if fs.format.as_deref().is_none_or(str::is_empty) {
            log::info!("filesystem on {}: no format, nothing to do", fs.device);
            continue;
        }
        let action = if touched_by_partitioning(&out.disks, &fs.device)
            || made_by_layers(&out, &fs.device)
        {
            decide(fs, None)?; // checks the format now
            FsAction::AfterPartitioning
        } else {
            let dev = resolve_fs(&out.disks, &fs.device)?;
            decide(fs, probe(&dev)?)?
        };
        out.filesystems.push(FsWork {
            fs: fs.clone(),
            action,
        });
    }
    Ok(out)
}

/// Whether `device` names an array or a volume that the plan creates or opens (it does not exist,
/// or not yet with its final contents, until then).
fn made_by_layers(p: &StagePlan, device: &str) -> bool {
    let dev = Path::new(device);
    p.raids
        .iter()
        .any(|w| w.action != RaidAction::Active && raid::array_path(&w.raid.name) == dev)
        || p.luks
            .iter()
            .any(|w| w.action != LuksAction::Active && luks::mapper_path(&w.luks.name) == dev)
}

/// Refuses when the disk, or a partition the kernel knows that the new table removes or changes,
/// is in use; with wipeTable, any partition in use (like Ignition: "refusing to wipe active
/// disk").
fn check_free(name: &str, plan: &DiskPlan) -> Result<()> {
    inuse::ensure_free(name, &format!("repartition /dev/{name}"))?;
    let ss = plan.geometry.sector_size;
    for (n, start, size) in kernel::kernel_partitions(name) {
        let same = !plan.wipe_table
            && plan
                .new
                .get(n)
                .is_some_and(|e| e.start * ss == start && e.size() * ss == size);
        if !same {
            let pn = kernel::part_name(name, n);
            let what = if plan.wipe_table {
                format!("wipe the partition table of /dev/{name}, which holds /dev/{pn}")
            } else {
                format!("change or delete partition /dev/{pn}")
            };
            inuse::ensure_free(&pn, &what)?;
        }
    }
    Ok(())
}

/// Decodes udev's `\xHH` escapes in a /dev/disk/by-* link name.
fn udev_unescape(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1) == Some(&b'x')
            && let Some(h) = s.get(i + 2..i + 4)
            && let Ok(v) = u8::from_str_radix(h, 16)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The partition of a planned disk that a filesystem device names: its node path (also when the
/// node does not exist yet), or a /dev/disk/by-partlabel or by-partuuid link resolved against the
/// planned table (no udev needed). Returns the node and whether the plan changes that partition.
fn planned_partition(disks: &[DiskWork], device: &str) -> Option<(PathBuf, bool)> {
    let canon = std::fs::canonicalize(device).ok();
    let by = |prefix: &str| device.strip_prefix(prefix).map(udev_unescape);
    let (plabel, puuid) = (by("/dev/disk/by-partlabel/"), by("/dev/disk/by-partuuid/"));
    for d in disks {
        for p in &d.plan.parts {
            let node = PathBuf::from("/dev").join(kernel::part_name(&d.name, p.number));
            let by_link = canon.is_none()
                && p.new.as_ref().is_some_and(|e| {
                    plabel.as_deref() == Some(e.name.as_str())
                        || puuid
                            .as_deref()
                            .is_some_and(|u| u.eq_ignore_ascii_case(&e.guid.to_string()))
                });
            if canon.as_deref() == Some(node.as_path()) || Path::new(device) == node || by_link {
                let changed = d.plan.changes()
                    && !matches!(p.action, Action::Keep | Action::Unlisted | Action::Absent);
                return Some((node, changed));
            }
        }
    }
    None
}

/// Whether the filesystem device is a partition that the plan creates, recreates or resizes,
/// or one whose node only appears once the partitioning has told the kernel about it.
fn touched_by_partitioning(disks: &[DiskWork], device: &str) -> bool {
    planned_partition(disks, device)
        .is_some_and(|(node, changed)| changed || !Path::new(device).exists() || !node.exists())
}

/// Resolves a filesystem device: an existing path, else a planned partition's node, else waits.
fn resolve_fs(disks: &[DiskWork], device: &str) -> Result<PathBuf> {
    if !Path::new(device).exists()
        && let Some((node, _)) = planned_partition(disks, device)
    {
        kernel::wait_for(std::slice::from_ref(&node), kernel::device_timeout())?;
        return Ok(node);
    }
    resolve(device)
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

impl fmt::Display for StagePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.disks {
            writeln!(f, "disk {} ({}):", d.path, d.dev.display())?;
            write!(f, "{}", d.plan)?;
        }
        for w in &self.raids {
            let r = &w.raid;
            let what = match &w.action {
                RaidAction::Active => "reuse (running, layout matches)".to_string(),
                RaidAction::Assemble(u) => format!("reuse (assemble existing array {u})"),
                RaidAction::Create => format!(
                    "create {} on {}{}",
                    r.level.as_deref().unwrap_or("?"),
                    r.devices.join(", "),
                    match r.spares {
                        Some(s) if s > 0 => format!(" ({s} spares)"),
                        _ => String::new(),
                    }
                ),
                RaidAction::AfterPartitioning => {
                    "reuse/create (decided after partitioning: members are new or changed)".into()
                }
            };
            writeln!(f, "raid {}: {what}", raid::array_path(&r.name).display())?;
        }
        for w in &self.luks {
            let l = &w.luks;
            let key = if l.key_file.url().is_some() {
                "key file"
            } else {
                "generated key"
            };
            let what = match &w.action {
                LuksAction::Active => "reuse (already open on the device)".to_string(),
                LuksAction::Reuse { clevis: true } => "reuse (open with clevis)".into(),
                LuksAction::Reuse { clevis: false } => format!("reuse (open with the {key})"),
                LuksAction::Create { wipe: None } => format!("create LUKS2 ({key})"),
                LuksAction::Create { wipe: Some(t) } => {
                    format!("wipe {t} and create LUKS2 ({key})")
                }
                LuksAction::AfterPartitioning => format!(
                    "{} ({key}; decided once its device exists)",
                    if l.wipe_volume == Some(true) {
                        "wipe/create"
                    } else {
                        "reuse/create"
                    }
                ),
            };
            let bind = luks::clevis_pin(l)
                .map(|(p, _)| format!(", clevis {p}"))
                .unwrap_or_default();
            writeln!(
                f,
                "luks {} on {}: {what}{bind}",
                l.name,
                l.device.as_deref().unwrap_or("?")
            )?;
        }
        for w in &self.filesystems {
            let fmt = w.fs.format.as_deref().unwrap_or("?");
            let what = match &w.action {
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
                    if w.fs.wipe_filesystem == Some(true) {
                        "wipe/create"
                    } else {
                        "reuse/create"
                    }
                ),
            };
            writeln!(f, "filesystem {}: {what}", w.fs.device)?;
        }
        Ok(())
    }
}

/// Puts a disk's table back as it was unless `close()`d.
struct TableGuard {
    file: File,
    name: String,
    geometry: gpt::Geometry,
    snapshot: gpt::Snapshot,
    old: Table,
    done: bool,
}

impl TableGuard {
    /// Commits the new table (the success path): nothing is undone any more.
    fn close(mut self) -> Result<()> {
        self.done = true;
        Ok(())
    }
    fn rollback(&mut self) -> Result<()> {
        self.done = true;
        gpt::restore(&self.file, &self.snapshot)
            .with_context(|| format!("restoring the table of /dev/{}", self.name))?;
        kernel::sync_partitions(&self.file, &self.name, &self.geometry, &self.old)
            .with_context(|| format!("restoring partition nodes of /dev/{}", self.name))?;
        Ok(())
    }
}

impl Drop for TableGuard {
    fn drop(&mut self) {
        if !self.done {
            log::warn!(
                "partitioning failed: putting the table of /dev/{} back",
                self.name
            );
            if let Err(e) = self.rollback() {
                log::error!("{e:#}");
            }
        }
    }
}

/// Makes sure the kernel has nodes for an unchanged table (a kernel that does not parse tables
/// has none for partitions made before this boot).
fn refresh_nodes(d: &DiskWork) -> Result<()> {
    let dev = &d.dev;
    let file = File::open(dev).with_context(|| format!("opening {}", dev.display()))?;
    let g = d.plan.geometry;
    check_free(&d.name, &d.plan)?;
    let nodes = kernel::sync_partitions(&file, &d.name, &g, &d.plan.new)
        .with_context(|| format!("updating partition nodes of {}", dev.display()))?;
    kernel::wait_for(&nodes, kernel::device_timeout())
}

fn partition(d: &DiskWork, table_io: &mut Duration) -> Result<TableGuard> {
    let dev = &d.dev;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev)
        .with_context(|| format!("opening {} for writing", dev.display()))?;
    let g = d.plan.geometry;
    // Re-check right before writing: nothing may have been mounted since the plan.
    check_free(&d.name, &d.plan)?;
    let snapshot = gpt::snapshot(&file, &g)
        .with_context(|| format!("saving the table of {}", dev.display()))?;
    let old = d.plan.old.clone().unwrap_or(Table {
        disk_guid: uuid::Uuid::nil(),
        entries: Vec::new(),
    });
    let guard = TableGuard {
        file: file.try_clone().context("duplicating a file handle")?,
        name: d.name.clone(),
        geometry: g,
        snapshot,
        old,
        done: false,
    };
    log::info!("writing the partition table of {}", dev.display());
    let t = Instant::now();
    let written = gpt::write(&file, &g, &d.plan.new, !d.plan.wipe_table);
    *table_io += t.elapsed();
    written.with_context(|| format!("writing the partition table of {}", dev.display()))?;
    failpoint::hit("after-table-write")?;
    let nodes = kernel::sync_partitions(&file, &d.name, &g, &d.plan.new)
        .with_context(|| format!("updating partition nodes of {}", dev.display()))?;
    failpoint::hit("after-partition-nodes")?;
    kernel::udev_settle();
    kernel::wait_for(&nodes, kernel::device_timeout())?;
    Ok(guard)
}

/// Carries out a plan without RAID/LUKS state (state dir: a temporary record location is not
/// needed when the plan has no LUKS volumes).
pub fn apply(p: &StagePlan) -> Result<Report> {
    if !p.luks.is_empty() {
        bail!("internal: a plan with LUKS volumes needs apply_with (state dir and fetcher)");
    }
    apply_with(
        p,
        Path::new("/nonexistent"),
        &Fetcher::new(fetch::Options::default()),
    )
}

/// Carries out a plan; LUKS keys are fetched with `fetcher`, records left in `state_dir`.
pub fn apply_with(p: &StagePlan, state_dir: &Path, fetcher: &Fetcher) -> Result<Report> {
    let t0 = Instant::now();
    let mut guards = Vec::new();
    let mut table_io = Duration::ZERO;
    for d in &p.disks {
        if d.plan.changes() {
            guards.push(partition(d, &mut table_io)?);
        } else {
            refresh_nodes(d)?;
        }
    }
    failpoint::hit("after-partitioning")?;
    // Arrays whose members the partitioning made: decided now, while a refusal still puts the
    // tables back.
    // Members and volume devices named by a planned partition (node or by-partlabel/partuuid
    // link, which needs no udev) are resolved to the partition's node.
    let raids = p
        .raids
        .iter()
        .map(|w| {
            let mut r = w.raid.clone();
            r.devices = r
                .devices
                .iter()
                .map(|d| resolve_fs(&p.disks, d).map(|n| n.display().to_string()))
                .collect::<Result<_>>()
                .with_context(|| format!("array {}", r.name))?;
            let a = match &w.action {
                RaidAction::AfterPartitioning => raid::decide_now(&r)?,
                a => a.clone(),
            };
            Ok((r, a))
        })
        .collect::<Result<Vec<_>>>()?;
    for g in guards {
        g.close()?;
    }
    let partitioning = t0.elapsed();

    for (r, a) in &raids {
        raid::apply(r, a)?;
    }
    failpoint::hit("after-raid")?;
    // Volumes: every one decided, keyed and checked before any is formatted or opened.
    let prepared = p
        .luks
        .iter()
        .map(|w| {
            let mut l = w.luks.clone();
            let d = l.device.clone().unwrap_or_default();
            let node = resolve_fs(&p.disks, &d).with_context(|| format!("luks {}", l.name))?;
            l.device = Some(node.display().to_string());
            let a = match &w.action {
                LuksAction::AfterPartitioning => luks::decide_now(&l)?,
                a => a.clone(),
            };
            Ok((luks::prepare(&l, a, fetcher)?, l))
        })
        .collect::<Result<Vec<_>>>()?;
    for (pr, l) in &prepared {
        luks::apply(l, pr, state_dir)?;
    }
    failpoint::hit("after-luks")?;

    // Filesystems: decide the pending ones now, then run each device's tools in parallel.
    // Probing is decided for all devices (in parallel) before any of them is touched, so that a
    // mismatch on one leaves every other one alone too.
    let decided: Vec<Result<(Filesystem, PathBuf, FsAction)>> = std::thread::scope(|s| {
        let hs: Vec<_> = p
            .filesystems
            .iter()
            .map(|w| s.spawn(move || decide_now(&p.disks, w)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("probe worker panicked")))
            })
            .collect()
    });
    let work = decided.into_iter().collect::<Result<Vec<_>>>()?;
    for (i, (fs, dev, _)) in work.iter().enumerate() {
        if let Some((other, _, _)) = work[..i].iter().find(|w| &w.1 == dev) {
            bail!(
                "filesystems {} and {} are the same device {}",
                other.device,
                fs.device,
                dev.display()
            );
        }
    }
    let probing = t0.elapsed() - partitioning;
    let tools = Mutex::new(Duration::ZERO);
    let t_fs = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = work
            .iter()
            .map(|(fs, dev, action)| s.spawn(|| make_fs(fs, dev, action, &tools)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("filesystem worker panicked")))
            })
            .collect()
    });
    let fs_phase = t_fs.elapsed();
    for r in results {
        r?;
    }
    let tools = *tools.lock().unwrap_or_else(|e| e.into_inner());
    Ok(Report {
        total: t0.elapsed(),
        tools,
        fs_phase,
        planning: Duration::ZERO,
        partitioning,
        probing,
        table_io,
    })
}

/// Resolves, probes (if not done at plan time) and checks one filesystem's device.
fn decide_now(disks: &[DiskWork], w: &FsWork) -> Result<(Filesystem, PathBuf, FsAction)> {
    let dev = resolve_fs(disks, &w.fs.device)?;
    let action = match &w.action {
        // With wipeFilesystem the outcome does not depend on what is there: no probe.
        FsAction::AfterPartitioning if w.fs.wipe_filesystem == Some(true) => {
            FsAction::WipeCreate(None)
        }
        FsAction::AfterPartitioning => decide(&w.fs, probe(&dev)?)?,
        a => a.clone(),
    };
    if matches!(action, FsAction::Create | FsAction::WipeCreate(_)) {
        let name = kernel::sys_name(&dev)?;
        inuse::ensure_free(&name, &format!("format {}", w.fs.device))?;
    }
    Ok((w.fs.clone(), dev, action))
}

fn fstype(f: &Option<Found>) -> &str {
    f.as_ref().map(|f| f.fstype.as_str()).unwrap_or("any")
}

fn timed(tools: &Mutex<Duration>, program: &str, args: &[String]) -> Result<()> {
    let t = Instant::now();
    let r = crate::util::run(program, args);
    *tools.lock().unwrap_or_else(|e| e.into_inner()) += t.elapsed();
    r.map(|_| ())
}

fn make_fs(fs: &Filesystem, dev: &Path, action: &FsAction, tools: &Mutex<Duration>) -> Result<()> {
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
    let label = fs.label.clone();
    let uuid = fs.uuid.clone();
    let (prog, mut args): (&str, Vec<String>) = match fmt {
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
    args.push(d);
    log::info!("creating {fmt} on {}", fs.device);
    timed(tools, prog, &args).with_context(|| format!("creating {fmt} on {}", fs.device))?;
    failpoint::hit("after-mkfs")
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
    fn udev_escapes() {
        assert_eq!(udev_unescape("EFI\\x20System"), "EFI System");
        assert_eq!(udev_unescape("plain\\xZZ"), "plain\\xZZ");
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
}
