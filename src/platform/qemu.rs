//! `qemu`: the config is the fw_cfg blob `opt/com.coreos/config`
//! (`-fw_cfg name=opt/com.coreos/config,file=F`), read from sysfs
//! ([`super::Endpoints::qemu_fw_cfg_dir`]). Without that directory the `qemu_fw_cfg` module
//! is loaded first (`modprobe`); a failed load is an error, as in Ignition. A directory
//! without the entry is no user data.

use anyhow::{Context, Result};

use super::{Found, Provider};
use crate::fetch::Fetcher;
use runtime::limits::read_optional_file_bounded;

pub const FW_CFG_NAME: &str = "opt/com.coreos/config";

pub struct Qemu;

impl Provider for Qemu {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let dir = &f.opts.endpoints.qemu_fw_cfg_dir;
        // As Ignition: without the fw_cfg directory the module is loaded, and a failure to
        // load it is an error (not "no config": the config may well be there).
        if !dir.exists() {
            runtime::util::run("modprobe", &["qemu_fw_cfg"])
                .context("qemu: loading the QEMU firmware config module (qemu_fw_cfg)")?;
        }
        let raw = dir.join("by_name").join(FW_CFG_NAME).join("raw");
        let source = format!("qemu fw_cfg {FW_CFG_NAME}");
        let what = format!("config from {source}");
        let Some(bytes) = read_optional_file_bounded(&raw, f.opts.limits.max_config_size, &what)?
        else {
            log::info!("qemu: no fw_cfg entry {FW_CFG_NAME}");
            return Ok(None);
        };
        Ok(Some(Found { bytes, source }))
    }
}
