//! The partition layer: each configured disk read and its new table planned (`plan`, the
//! rules in `blockdev::plan`) and checked free; then every table written, partition nodes
//! updated with BLKPG and waited for (`apply`), every table put back as it was unless the
//! caller commits (`Partitioned::commit`).

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use super::devices::{Devices, resolve};
use super::gpt::{self, OnDisk, Table};
use super::plan::{DiskPlan, Spec};
use super::{failpoint, inuse, kernel};
use spec::config::types::Disk;

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

/// Plans the new table of every disk; reads the disks, writes nothing. Waits for a disk's node
/// at most `timeout`. Refuses two names for one disk, an MBR without wipeTable, and a disk
/// whose table changes while it or a partition the change touches is in use.
pub fn plan(disks: &[Disk], timeout: Duration) -> Result<Vec<DiskWork>> {
    let mut out: Vec<DiskWork> = Vec::new();
    for d in disks {
        let dev = resolve(&d.device, timeout)?;
        if let Some(other) = out.iter().find(|o| o.dev == dev) {
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
        let plan = super::plan::plan(existing.as_ref(), &g, wipe, &specs, &mut uuid::Uuid::new_v4)
            .with_context(|| format!("planning partitions of {}", d.device))?;
        if plan.changes() {
            check_free(&name, &plan)?;
        }
        out.push(DiskWork {
            path: d.device.clone(),
            dev,
            name,
            plan,
        });
    }
    Ok(out)
}

/// The devices of the planned disks: what the layers above resolve the devices they name
/// against (see [`Devices`]).
pub fn devices(disks: &[DiskWork]) -> Devices {
    Devices::planned(disks.iter().map(|d| (d.name.as_str(), &d.plan)))
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

/// The disks as partitioned: the tables are put back as they were when this is dropped before
/// [`Partitioned::commit`]; the new partitions stay open until it is dropped.
pub struct Partitioned {
    /// The new partitions' nodes, opened read-only. Closing a disk's write handle makes udev
    /// (its `watch` on disks) re-read the partition table, which removes and re-adds every
    /// partition node for a moment, unless a partition of the disk is open (the kernel then
    /// refuses the re-read, EBUSY, and udev only sends change events). Holding them closes that
    /// window, in which a node the caller is about to use could be missing. Declared before
    /// `guards`, so dropped first: a table is put back with its partitions closed.
    held: Vec<File>,
    guards: Vec<TableGuard>,
    /// Time spent writing the tables and waiting for fsync (disk I/O).
    pub table_io: Duration,
}

impl Partitioned {
    /// Keeps the new tables: nothing is put back any more. The partitions stay open until
    /// `self` is dropped.
    pub fn commit(&mut self) -> Result<()> {
        for g in self.guards.drain(..) {
            g.close()?;
        }
        Ok(())
    }
}

/// Writes the table of every disk whose plan changes it and updates its partition nodes; for
/// the others makes sure the kernel has nodes for the unchanged table (a kernel that does not
/// parse tables has none for partitions made before this boot). Waits for every node at most
/// `timeout`. Each disk is checked free again right before it is written.
pub fn apply(disks: &[DiskWork], timeout: Duration) -> Result<Partitioned> {
    let mut done = Partitioned {
        held: Vec::new(),
        guards: Vec::new(),
        table_io: Duration::ZERO,
    };
    for d in disks {
        if d.plan.changes() {
            let (guard, open) = partition(d, &mut done.table_io, timeout)?;
            done.guards.push(guard);
            done.held.extend(open);
        } else {
            refresh_nodes(d, timeout)?;
        }
    }
    Ok(done)
}

/// Makes sure the kernel has nodes for an unchanged table.
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
/// read-only (see `Partitioned::held`).
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
