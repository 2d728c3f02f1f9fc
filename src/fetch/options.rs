//! What shapes every fetch ([`Options`]: time-outs, proxy, CAs, offline mode, endpoints,
//! limits) and the CAs fetched once per run ([`CaCache`]).

use std::sync::Arc;
use std::time::Duration;

use runtime::limits::Limits;
use spec::config::types::{Config, Proxy, Resource};

/// Default wait for response headers on each try (`timeouts.httpResponseHeaders`).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings that shape every fetch, taken from a config's `ignition` section.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub http_response_headers: Option<i64>,
    pub http_total: Option<i64>,
    /// Extra trusted CAs (PEM bundles), added to the system roots for https.
    pub ca_pems: Vec<Vec<u8>>,
    pub proxy: Proxy,
    /// Refuse any fetch that needs the network (fails with [`super::NeedsNetwork`], recorded
    /// in [`Options::refused`]).
    pub offline: bool,
    /// What was refused for needing the network ([`Options::offline`]): shared by every
    /// clone of these options (and [`Options::with_base`]), so that whoever made them learns
    /// that a pass needs the network without looking into its error.
    pub refused: Refused,
    /// Where the services are (S3, GCS, the AWS metadata service, …; default: the built-in
    /// values; `agent run` passes its own down, see [`crate::endpoints`]).
    pub endpoints: crate::endpoints::Endpoints,
    /// Size limit of what is fetched into memory, TLS downgrade policy (default: the built-in
    /// ones; `agent run` passes its own down, see [`runtime::limits`]).
    pub limits: Limits,
    /// The CAs fetched so far, by source: shared by every clone of these options (and
    /// [`Options::with_base`]), so that a CA is fetched once per run ([`super::fetch_cas`]).
    pub ca_cache: CaCache,
}

/// CA bundles already fetched, by resource (source, compression and expected hash; Ignition
/// keeps such a cache, by source, in its fetcher).
#[derive(Debug, Clone, Default)]
pub struct CaCache(Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>>);

/// The first fetch refused offline, kept by [`Options::needs_network`] for whoever made the
/// options (the fetch stage: the offline pass then asks for the network).
#[derive(Debug, Clone, Default)]
pub struct Refused(Arc<std::sync::Mutex<Option<String>>>);

impl Refused {
    /// What the first refused fetch would have fetched; None: nothing was refused.
    pub fn first(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record(&self, what: &str) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get_or_insert_with(|| what.to_string());
    }
}

impl CaCache {
    fn key(r: &Resource) -> String {
        format!(
            "{}\0{}\0{}",
            r.source.as_deref().unwrap_or(""),
            r.compression.as_deref().unwrap_or(""),
            r.verification.hash.as_deref().unwrap_or("")
        )
    }
    pub(super) fn get(&self, r: &Resource) -> Option<Vec<u8>> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&Self::key(r)).cloned()
    }
    pub(super) fn put(&self, r: &Resource, pem: &[u8]) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(Self::key(r), pem.to_vec());
    }
}

impl Options {
    /// Timeouts and proxy of `c` (CAs are resources: see [`Options::from_config_with_cas`]).
    pub fn from_config(c: &Config) -> Self {
        Options {
            http_response_headers: c.ignition.timeouts.http_response_headers,
            http_total: c.ignition.timeouts.http_total,
            proxy: c.ignition.proxy.clone(),
            ..Default::default()
        }
    }

    /// These options with `base`'s offline mode (and its record of refusals), endpoints,
    /// limits, CAs and CA cache.
    pub fn with_base(mut self, base: &Options) -> Self {
        self.offline = base.offline;
        self.endpoints.clone_from(&base.endpoints);
        self.ca_pems.clone_from(&base.ca_pems);
        self.limits = base.limits;
        self.ca_cache = base.ca_cache.clone();
        self.refused = base.refused.clone();
        self
    }

    /// Refuses fetching `what` (a URL, "the config of platform P") because it needs the
    /// network: recorded in [`Options::refused`], and the error to fail with.
    pub fn needs_network(&self, what: impl Into<String>) -> anyhow::Error {
        let what = what.into();
        self.refused.record(&what);
        super::NeedsNetwork(what).into()
    }

    /// The per-try wait for response headers; None = no limit.
    pub fn header_timeout(&self) -> Option<Duration> {
        match self.http_response_headers {
            None => Some(DEFAULT_HEADER_TIMEOUT),
            Some(n) if n > 0 => Some(Duration::from_secs(n as u64)),
            Some(_) => None,
        }
    }

    /// The bound on a whole fetch, retries included; None = no limit.
    pub fn total_timeout(&self) -> Option<Duration> {
        match self.http_total {
            Some(n) if n > 0 => Some(Duration::from_secs(n as u64)),
            _ => None,
        }
    }
}
