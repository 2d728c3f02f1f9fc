//! `qemu`: the config is the fw_cfg blob `opt/com.coreos/config`
//! (`-fw_cfg name=opt/com.coreos/config,file=F`), read from sysfs. The sysfs directory can
//! be overridden with `$AGENT_QEMU_FW_CFG` (tests).

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{Found, Provider};
use crate::fetch::Fetcher;

pub const FW_CFG_DIR: &str = "/sys/firmware/qemu_fw_cfg";
pub const FW_CFG_NAME: &str = "opt/com.coreos/config";

pub struct Qemu;

impl Provider for Qemu {
    fn name(&self) -> &'static str {
        "qemu"
    }
    fn fetch_config(&self, _: &Fetcher) -> Result<Option<Found>> {
        let dir = PathBuf::from(std::env::var("AGENT_QEMU_FW_CFG").unwrap_or(FW_CFG_DIR.into()));
        if !dir.exists()
            && crate::util::have_program("modprobe")
            && let Err(e) = crate::util::run("modprobe", &["qemu_fw_cfg"])
        {
            log::warn!("loading qemu_fw_cfg: {e:#}");
        }
        let raw = dir.join("by_name").join(FW_CFG_NAME).join("raw");
        match std::fs::read(&raw) {
            Ok(bytes) => Ok(Some(Found {
                bytes,
                source: format!("qemu fw_cfg {FW_CFG_NAME}"),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                log::info!("qemu: no fw_cfg entry {FW_CFG_NAME}");
                Ok(None)
            }
            Err(e) => Err(e).with_context(|| format!("reading {}", raw.display())),
        }
    }
}
