//! `test-dummy` (test builds only): shows what adding a platform takes — this file, plus its
//! `mod` line and one row in [`super::PLATFORMS`] — and exercises every hook of [`Provider`]:
//! it needs the network (refused offline), prepares the fetcher (an S3 region) and returns a
//! config that names the region its fetcher was prepared with.

use anyhow::Result;

use super::{Endpoints, Found, Provider};
use crate::fetch::Fetcher;

/// The S3 region the dummy prepares the fetcher with.
pub const REGION: &str = "dummy-region-1";

pub struct TestDummy;

impl Provider for TestDummy {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let region = f
            .opts
            .endpoints
            .s3_region
            .as_deref()
            .unwrap_or("unprepared");
        let config = format!(
            r#"{{"ignition":{{"version":"3.4.0"}},"storage":{{"files":[{{"path":"/test-dummy/{region}"}}]}}}}"#
        );
        Ok(Some(Found {
            bytes: config.into_bytes(),
            source: "test-dummy provider".into(),
        }))
    }

    fn needs_network(&self) -> bool {
        true
    }

    fn prepare_fetcher(&self, endpoints: &mut Endpoints, _offline: bool) -> Result<()> {
        endpoints.s3_region = Some(REGION.into());
        Ok(())
    }
}
