//! `file`: the config is a local file, `$AGENT_CONFIG_FILE` or `/config.ign` (for tests
//! and development).

use anyhow::{Context, Result};

use super::{Found, Provider};
use crate::fetch::Fetcher;

pub const DEFAULT_PATH: &str = "/config.ign";

pub struct File;

impl Provider for File {
    fn name(&self) -> &'static str {
        "file"
    }
    fn fetch_config(&self, _: &Fetcher) -> Result<Option<Found>> {
        let path = std::env::var("AGENT_CONFIG_FILE").unwrap_or_else(|_| DEFAULT_PATH.into());
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(Found {
                bytes,
                source: format!("file {path}"),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                log::info!("file platform: {path} does not exist");
                Ok(None)
            }
            Err(e) => Err(e).with_context(|| format!("reading {path}")),
        }
    }
}
