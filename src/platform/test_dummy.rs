//! `test-dummy` (test builds only): shows what adding a platform takes — this file, plus its
//! `mod` line and one row in [`super::PLATFORMS`] — and exercises every hook of [`Provider`]:
//! it needs the network (refused offline), prepares the fetcher (an S3 region), returns a
//! config that names the region its fetcher was prepared with, and leaves a file for the
//! target root ([`OUTPUT_FILE`], mode 0600, the region). Each time it is asked it appends a
//! line to the file named by `$AGENT_TEST_DUMMY_CALLS` (if set), so that tests can count the
//! calls (the fetch stage asks a platform once per boot).

use anyhow::Result;

use super::{Endpoints, Found, Provider, ProviderFile};
use crate::fetch::Fetcher;

/// The S3 region the dummy prepares the fetcher with.
pub const REGION: &str = "dummy-region-1";
/// The file the dummy leaves for the target root.
pub const OUTPUT_FILE: &str = "/var/lib/test-dummy/region";
/// The variable naming the file that counts the calls.
pub const CALLS_ENV: &str = "AGENT_TEST_DUMMY_CALLS";

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

    fn fetch_config_with_files(&self, f: &Fetcher) -> Result<(Option<Found>, Vec<ProviderFile>)> {
        if let Some(calls) = std::env::var_os(CALLS_ENV) {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&calls)
                .and_then(|mut c| c.write_all(b"fetch_config_with_files\n"))?;
        }
        let file = ProviderFile {
            path: OUTPUT_FILE.into(),
            mode: 0o600,
            contents: f
                .opts
                .endpoints
                .s3_region
                .clone()
                .unwrap_or_default()
                .into_bytes(),
        };
        Ok((self.fetch_config(f)?, vec![file]))
    }

    fn needs_network(&self) -> bool {
        true
    }

    fn prepare_fetcher(&self, endpoints: &mut Endpoints, _offline: bool) -> Result<()> {
        endpoints.s3_region = Some(REGION.into());
        Ok(())
    }
}
