//! The plan of the disks stage: every disk's new partition table and what happens to every
//! array, volume and filesystem, asked of `blockdev` one layer at a time (`partitions`,
//! `raid`, `luks`, `filesystem`), each layer handed the devices the layers below make
//! (`blockdev::devices`); computed reading devices and writing nothing; printed by `agent plan`
//! and logged by the stage.

use std::fmt;
use std::time::Duration;

use anyhow::Result;

use crate::blockdev::devices::Devices;
use crate::blockdev::filesystem::{self, FsWork};
use crate::blockdev::luks::{self, LuksWork};
use crate::blockdev::partitions::{self, DiskWork};
use crate::blockdev::raid::{self, RaidWork};
use spec::config::Config;

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
    /// The planned partitions, and the arrays and volumes the plan makes: how every layer
    /// resolves the devices it names.
    pub devices: Devices,
}

/// Computes the plan of the stage; reads devices, writes nothing. Every wait for a device
/// node, now and when the plan is carried out, lasts at most `device_timeout`.
pub fn plan(config: &Config, device_timeout: Duration) -> Result<StagePlan> {
    let st = &config.storage;
    let disks = partitions::plan(&st.disks, device_timeout)?;
    let mut devices = partitions::devices(&disks);
    let raids = raid::plan(&st.raid, &mut devices)?;
    let luks = luks::plan(&st.luks, &mut devices)?;
    let filesystems = filesystem::plan(&st.filesystems, &devices, device_timeout)?;
    Ok(StagePlan {
        device_timeout,
        disks,
        raids,
        luks,
        filesystems,
        devices,
    })
}

impl StagePlan {
    /// The plan as `agent plan --json` prints it: `disks` (each with its table and
    /// partitions), `raid`, `luks` and `filesystems` (each with what happens to it).
    pub fn to_json(&self) -> serde_json::Value {
        let disks: Vec<serde_json::Value> = self
            .disks
            .iter()
            .map(|d| {
                let mut v = d.plan.to_json();
                v["device"] = d.path.clone().into();
                v["node"] = d.dev.display().to_string().into();
                v
            })
            .collect();
        let raids: Vec<serde_json::Value> = self
            .raids
            .iter()
            .map(|w| {
                serde_json::json!({
                    "name": w.raid.name,
                    "device": raid::array_path(&w.raid.name).display().to_string(),
                    "action": raid::describe(&w.raid, &w.action),
                })
            })
            .collect();
        let luks: Vec<serde_json::Value> = self
            .luks
            .iter()
            .map(|w| {
                serde_json::json!({
                    "name": w.luks.name,
                    "device": w.luks.device,
                    "action": luks::describe(&w.luks, &w.action),
                })
            })
            .collect();
        let filesystems: Vec<serde_json::Value> = self
            .filesystems
            .iter()
            .map(|w| {
                serde_json::json!({
                    "device": w.fs.device,
                    "format": w.fs.format,
                    "action": filesystem::describe(&w.fs, &w.action),
                })
            })
            .collect();
        serde_json::json!({
            "disks": disks,
            "raid": raids,
            "luks": luks,
            "filesystems": filesystems,
        })
    }
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
