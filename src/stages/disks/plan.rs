//! The plan of the disks stage: every disk's new partition table (`blockdev::plan`) and what
//! happens to every array, volume and filesystem (`blockdev::raid`, `luks`, `filesystem`),
//! computed reading devices and writing nothing; printed by `agent plan` and logged by the
//! stage.

use std::fmt;
use std::fs::File;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use super::devices::{DiskWork, resolve, resolve_fs, touched_by_partitioning};
use crate::blockdev::filesystem::{self, FsAction};
use crate::blockdev::gpt::{self, OnDisk};
use crate::blockdev::luks::{self, LuksAction};
use crate::blockdev::plan::{DiskPlan, Spec};
use crate::blockdev::raid::{self, RaidAction};
use crate::blockdev::{inuse, kernel};
use crate::config::Config;
use crate::config::types::{Filesystem, Luks, Raid};

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
#[derive(Debug)]
pub struct StagePlan {
    /// Longest wait for a device node, planning and carrying the plan out
    /// (`--device-timeout`, `agent.device_timeout=`).
    pub device_timeout: Duration,
    pub disks: Vec<DiskWork>,
    pub raids: Vec<RaidWork>,
    pub luks: Vec<LuksWork>,
    pub filesystems: Vec<FsWork>,
}

/// Computes the plan of the stage; reads devices, writes nothing. Every wait for a device
/// node, now and when the plan is carried out, lasts at most `device_timeout`.
pub fn plan(config: &Config, device_timeout: Duration) -> Result<StagePlan> {
    let st = &config.storage;
    let mut out = StagePlan {
        device_timeout,
        disks: Vec::new(),
        raids: Vec::new(),
        luks: Vec::new(),
        filesystems: Vec::new(),
    };
    for d in &st.disks {
        let dev = resolve(&d.device, device_timeout)?;
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
        if filesystem::asks_for_nothing(fs) {
            log::info!("filesystem on {}: no format, nothing to do", fs.device);
            continue;
        }
        let action = if touched_by_partitioning(&out.disks, &fs.device)
            || made_by_layers(&out, &fs.device)
        {
            filesystem::decide(fs, None)?; // checks the format now
            FsAction::AfterPartitioning
        } else {
            let dev = resolve_fs(&out.disks, &fs.device, device_timeout)?;
            filesystem::decide_now(fs, &dev)?
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
pub(super) fn check_free(name: &str, plan: &DiskPlan) -> Result<()> {
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

impl fmt::Display for StagePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.disks {
            writeln!(f, "disk {} ({}):", d.path, d.dev.display())?;
            write!(f, "{}", d.plan)?;
        }
        for w in &self.raids {
            writeln!(
                f,
                "raid {}: {}",
                raid::array_path(&w.raid.name).display(),
                raid::describe(&w.raid, &w.action)
            )?;
        }
        for w in &self.luks {
            writeln!(
                f,
                "luks {} on {}: {}",
                w.luks.name,
                w.luks.device.as_deref().unwrap_or("?"),
                luks::describe(&w.luks, &w.action)
            )?;
        }
        for w in &self.filesystems {
            writeln!(
                f,
                "filesystem {}: {}",
                w.fs.device,
                filesystem::describe(&w.fs, &w.action)
            )?;
        }
        Ok(())
    }
}
