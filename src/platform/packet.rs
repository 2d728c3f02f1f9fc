//! `packet`: Equinix Metal (formerly Packet) user data from its metadata service at
//! `https://metadata.packet.net/userdata` (a name resolved by DNS, over TLS), with
//! `Accept: */*` (the service refuses Ignition's default Accept with 406). As in Ignition,
//! any status but 2xx is an error; an empty answer is no user data.
//!
//! After each stage, as Ignition's `Status` hook, the stage's outcome is posted to the
//! instance timeline ([`Packet::report_status`]): the `phone_home_url` of
//! `https://metadata.packet.net/metadata`, without its `/phone-home`, plus `/events`, gets
//! `{"state":"running","message":"[STAGE] Ignition status: finished successfully"}` or
//! `{"state":"failed","message":"[STAGE] Ignition error: ERROR"}`. A failure to post is
//! logged, never fatal. Unlike Ignition (which retries `/metadata` without end), the
//! metadata is retried for at most [`STATUS_WAIT`].

use std::time::Duration;

use anyhow::{Context, Result};

use super::metadata::{self, Bounds, Service};
use super::{Found, Provider};
use crate::fetch::Fetcher;

pub const SERVICE: Service = Service {
    headers: &[("Accept", "*/*")],
    absent_on: &[],
    ..Service::new("packet", "https://metadata.packet.net", "/userdata")
};

/// The instance metadata (JSON, with `phone_home_url`).
pub const METADATA: Service = Service {
    user_data: "/metadata",
    ..SERVICE
};

/// The longest the metadata is retried for a status report.
pub const STATUS_WAIT: Duration = Duration::from_secs(30);

/// Time limit of the POST of an event.
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// One event of the instance timeline, as Ignition's `postMessage` encodes it (field order
/// included).
#[derive(serde::Serialize)]
struct Event<'a> {
    state: &'a str,
    message: String,
}

pub struct Packet;

impl Provider for Packet {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        super::from_metadata(f, &SERVICE)
    }

    fn needs_network(&self) -> bool {
        true
    }

    fn report_status(&self, f: &Fetcher, stage: &str, error: Option<&anyhow::Error>) -> Result<()> {
        log::info!("packet: posting the {stage} stage's status to the instance timeline");
        let base = f.opts.endpoints.metadata_base("packet", SERVICE.base);
        let bounds = Bounds {
            total: Some(STATUS_WAIT),
            ..Default::default()
        };
        let data = metadata::fetch_user_data_at(f, &METADATA, &base, bounds)
            .map_err(|e| e.error)?
            .filter(|d| !d.is_empty())
            .context("packet: the metadata service answered an empty /metadata")?;
        let m: serde_json::Value =
            serde_json::from_slice(&data).context("packet: parsing /metadata")?;
        let phone_home = m["phone_home_url"].as_str().unwrap_or("");
        let url = format!(
            "{}/events",
            phone_home.strip_suffix("/phone-home").unwrap_or(phone_home)
        );
        let event = match error {
            Some(e) => Event {
                state: "failed",
                message: format!("[{stage}] Ignition error: {e:#}"),
            },
            None => Event {
                state: "running",
                message: format!("[{stage}] Ignition status: finished successfully"),
            },
        };
        let body = serde_json::to_vec(&event)?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(POST_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(&body[..])
            .with_context(|| format!("packet: POST {url}"))?;
        Ok(())
    }
}
