//! `qemu`: the config is the fw_cfg blob `opt/com.coreos/config`
//! (`-fw_cfg name=opt/com.coreos/config,file=F`), read from sysfs
//! ([`super::Endpoints::qemu_fw_cfg_dir`]).

use anyhow::{Context, Result};

use super::{Found, Provider};
use crate::fetch::Fetcher;

pub const FW_CFG_NAME: &str = "opt/com.coreos/config";

pub struct Qemu;

impl Provider for Qemu {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let dir = &f.opts.endpoints.qemu_fw_cfg_dir;
        if !dir.exists()
            && crate::util::have_program("modprobe")
            && let Err(e) = crate::util::run("modprobe", &["qemu_fw_cfg"])
        {
            log::warn!("loading qemu_fw_cfg: {e:#}");
        }
        let raw = dir.join("by_name").join(FW_CFG_NAME).join("raw");
        let file = match std::fs::File::open(&raw) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                log::info!("qemu: no fw_cfg entry {FW_CFG_NAME}");
                return Ok(None);
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", raw.display())),
        };
        let source = format!("qemu fw_cfg {FW_CFG_NAME}");
        let bytes = crate::limits::read_bounded(
            file,
            f.opts.limits.max_config_size,
            &format!("config from {source}"),
        )?;
        Ok(Some(Found { bytes, source }))
    }
}
