//! Carrying out a plan of the disks stage: tables written (and put back on failure), then
//! arrays, volumes (their records and keys saved in the state directory) and filesystems.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};

use super::Report;
use super::devices::DiskWork;
use super::devices::resolve_fs;
use super::plan::{FsWork, StagePlan, check_free};
use crate::blockdev::filesystem::{self, FsAction};
use crate::blockdev::gpt::{self, Table};
use crate::blockdev::luks::{self, LuksAction};
use crate::blockdev::raid::{self, RaidAction};
use crate::blockdev::{failpoint, inuse, kernel};
use crate::config::types::Filesystem;
use crate::fetch::{self, Fetcher};
use crate::state::StateDir;

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
fn refresh_nodes(d: &DiskWork, timeout: Duration) -> Result<()> {
    let dev = &d.dev;
    let file = File::open(dev).with_context(|| format!("opening {}", dev.display()))?;
    let g = d.plan.geometry;
    check_free(&d.name, &d.plan)?;
    let nodes = kernel::sync_partitions(&file, &d.name, &g, &d.plan.new)
        .with_context(|| format!("updating partition nodes of {}", dev.display()))?;
    kernel::wait_for(&nodes, timeout)
}

/// Partitions one disk. Returns the table guard and the new partitions' nodes, opened
/// read-only: the caller keeps them open to the end of the stage. Closing the disk's write
/// handle makes udev (its `watch` on disks) re-read the partition table, which removes and
/// re-adds every partition node for a moment, unless a partition of the disk is open (the
/// kernel then refuses the re-read, EBUSY, and udev only sends change events). Holding them
/// closes that window, in which a node the stage is about to use could be missing.
fn partition(
    d: &DiskWork,
    table_io: &mut Duration,
    timeout: Duration,
) -> Result<(TableGuard, Vec<File>)> {
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
    kernel::wait_for(&nodes, timeout)?;
    let held = nodes
        .iter()
        .map(|n| File::open(n).with_context(|| format!("opening {}", n.display())))
        .collect::<Result<Vec<_>>>()?;
    Ok((guard, held))
}

/// Carries out a plan without RAID/LUKS state (state dir: a temporary record location is not
/// needed when the plan has no LUKS volumes).
pub fn apply(p: &StagePlan) -> Result<Report> {
    if !p.luks.is_empty() {
        bail!("internal: a plan with LUKS volumes needs apply_with (state dir and fetcher)");
    }
    apply_with(
        p,
        &StateDir::new(Path::new("/nonexistent")),
        &Fetcher::new(fetch::Options::default()),
    )
}

/// Carries out a plan; LUKS keys are fetched with `fetcher`, records and keys left in `state`.
pub fn apply_with(p: &StagePlan, state: &StateDir, fetcher: &Fetcher) -> Result<Report> {
    let t0 = Instant::now();
    let mut guards = Vec::new();
    // New partitions held open until the stage ends (see `partition`).
    let mut held = Vec::new();
    let mut table_io = Duration::ZERO;
    let timeout = p.device_timeout;
    for d in &p.disks {
        if d.plan.changes() {
            let (guard, open) = partition(d, &mut table_io, timeout)?;
            guards.push(guard);
            held.extend(open);
        } else {
            refresh_nodes(d, timeout)?;
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
                .map(|d| resolve_fs(&p.disks, d, timeout).map(|n| n.display().to_string()))
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
        raid::apply(r, a, timeout)?;
    }
    failpoint::hit("after-raid")?;
    // Volumes: every one decided, keyed and checked before any is formatted or opened.
    let prepared = p
        .luks
        .iter()
        .map(|w| {
            let mut l = w.luks.clone();
            let d = l.device.clone().unwrap_or_default();
            let node =
                resolve_fs(&p.disks, &d, timeout).with_context(|| format!("luks {}", l.name))?;
            l.device = Some(node.display().to_string());
            let a = match &w.action {
                LuksAction::AfterPartitioning => luks::decide_now(&l)?,
                a => a.clone(),
            };
            Ok((luks::prepare(&l, a, fetcher)?, l))
        })
        .collect::<Result<Vec<_>>>()?;
    for (pr, l) in &prepared {
        let (record, key) = luks::apply(l, pr, timeout)?;
        state.save_luks(&record, key)?;
    }
    failpoint::hit("after-luks")?;

    // Filesystems: decide the pending ones now, then run each device's tools in parallel.
    // Probing is decided for all devices (in parallel) before any of them is touched, so that a
    // mismatch on one leaves every other one alone too.
    let decided: Vec<Result<(Filesystem, PathBuf, FsAction)>> = std::thread::scope(|s| {
        let hs: Vec<_> = p
            .filesystems
            .iter()
            .map(|w| s.spawn(move || decide_now(&p.disks, w, timeout)))
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
            .map(|(fs, dev, action)| s.spawn(|| filesystem::make(fs, dev, action, &tools)))
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
    // Every filesystem is made: the partitions may be re-read from now on.
    drop(held);
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
fn decide_now(
    disks: &[DiskWork],
    w: &FsWork,
    timeout: Duration,
) -> Result<(Filesystem, PathBuf, FsAction)> {
    let dev = resolve_fs(disks, &w.fs.device, timeout)?;
    let action = match &w.action {
        FsAction::AfterPartitioning => filesystem::decide_after_partitioning(&w.fs, &dev)?,
        a => a.clone(),
    };
    if matches!(action, FsAction::Create | FsAction::WipeCreate(_)) {
        let name = kernel::sys_name(&dev)?;
        inuse::ensure_free(&name, &format!("format {}", w.fs.device))?;
    }
    Ok((w.fs.clone(), dev, action))
}
