//! `file`: the config is a local file, `$AGENT_CONFIG_FILE` or `/config.ign` (for tests
//! and development; Ignition's `file` platform reads `$IGNITION_CONFIG_FILE` the same way).
//! Documented in `docs/platforms.md` and `--platform`'s help.

use anyhow::{Context, Result};

use super::{Found, Provider};
use crate::fetch::Fetcher;

pub const DEFAULT_PATH: &str = "/config.ign";

pub struct File;

impl Provider for File {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let path = std::env::var("AGENT_CONFIG_FILE").unwrap_or_else(|_| DEFAULT_PATH.into());
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                log::info!("file platform: {path} does not exist");
                return Ok(None);
            }
            Err(e) => return Err(e).with_context(|| format!("reading {path}")),
        };
        let source = format!("file {path}");
        let bytes = crate::limits::read_bounded(
            file,
            f.opts.limits.max_config_size,
            &format!("config from {source}"),
        )?;
        Ok(Some(Found { bytes, source }))
    }
}
