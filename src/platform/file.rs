//! `file`: the config is a local file, `$AGENT_CONFIG_FILE` or `/config.ign` (for tests
//! and development; Ignition's `file` platform reads `$IGNITION_CONFIG_FILE` the same way).
//! Documented in `docs/platforms.md` and `--platform`'s help.

use anyhow::Result;

use super::{Found, Provider};
use crate::fetch::Fetcher;
use runtime::limits::read_optional_file_bounded;

pub const DEFAULT_PATH: &str = "/config.ign";

pub struct File;

impl Provider for File {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let path = std::env::var("AGENT_CONFIG_FILE").unwrap_or_else(|_| DEFAULT_PATH.into());
        let source = format!("file {path}");
        let what = format!("config from {source}");
        let Some(bytes) = read_optional_file_bounded(path.as_ref(), f.opts.limits.max_config_size, &what)?
        else {
            log::info!("file platform: {path} does not exist");
            return Ok(None);
        };
        Ok(Some(Found { bytes, source }))
    }
}
