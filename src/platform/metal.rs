//! `metal`: the config URL comes from the kernel command line only (handled by the fetch
//! stage before any provider is asked), so the provider itself has nothing.

use anyhow::Result;

use super::{Found, Provider};
use crate::fetch::Fetcher;

pub struct Metal;

impl Provider for Metal {
    fn fetch_config(&self, _: &Fetcher) -> Result<Option<Found>> {
        Ok(None)
    }
}
