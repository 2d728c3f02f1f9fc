//! The fetcher's own state, shared by every scheme: its options, the retry clock, the HTTP
//! clients and the AWS credentials it made (once each), the interface for link-local
//! addresses and the download buffers; the [`Scheme`] trait each URL scheme implements; and
//! the small rules every scheme applies (TLS downgrades, shortened URLs in messages).
//! Fetching itself (retries, decompression, hashing, placement) is in the module above.

use std::io::Read;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Result, anyhow};

use super::clients::Agents;
use super::metadata_client::Credentials;
use super::options::Options;
use super::retry::{Clock, Failure, SystemClock};
use spec::config::types::Resource;

/// One fetcher per URL scheme. `open` is one attempt: it returns the raw body (before
/// decompression) or says whether another attempt may help.
pub trait Scheme: Sync {
    /// The body behind `url` (it may borrow from the URL: a data URL is decoded as it is
    /// read).
    fn open<'u>(
        &self,
        f: &Fetcher,
        url: &'u str,
        r: &Resource,
        left: Option<Duration>,
    ) -> Result<Box<dyn Read + 'u>, Failure>;
    /// Whether this scheme needs the network (refused offline).
    fn needs_network(&self) -> bool {
        true
    }
}

pub struct Fetcher {
    pub opts: Options,
    clock: Arc<dyn Clock + Send + Sync>,
    pub(super) agents: OnceLock<std::result::Result<Agents, String>>,
    pub(super) aws_creds: OnceLock<Option<Credentials>>,
    /// The interface (index) its connections to IPv6 link-local addresses go out of
    /// ([`Fetcher::fork_scoped`]; OpenStack's `fe80::a9fe:a9fe`).
    link_scope: Option<u32>,
    /// Buffers kept between downloads; a fork has its own.
    pub(super) chunks: Chunks,
    /// The `X-Agent-*` headers of the last successful http(s) GET ([`Fetcher::take_agent_headers`]).
    pub(super) agent_headers: std::sync::Mutex<Option<AgentHeaders>>,
}

/// The `X-Agent-*` response headers of a config fetch (`agent serve` says which config it
/// served and where reports go, docs/reports.md), with the URL that answered (after
/// redirects). A relative `X-Agent-Report-URL` is resolved against the URL first asked, not
/// this one (the fetch stage's `note_served`): the token went there only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentHeaders {
    pub url: String,
    /// (lower-case name, value), only the `x-agent-*` ones.
    pub headers: Vec<(String, String)>,
}

impl AgentHeaders {
    /// The value of header `name` (any case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Fetcher {
    pub fn new(opts: Options) -> Self {
        Self::with_clock(opts, Arc::new(SystemClock))
    }

    /// A fetcher whose retry back-off uses `clock` (tests).
    pub fn with_clock(opts: Options, clock: Arc<dyn Clock + Send + Sync>) -> Self {
        Fetcher {
            opts,
            clock,
            agents: OnceLock::new(),
            aws_creds: OnceLock::new(),
            link_scope: None,
            chunks: Chunks::default(),
            agent_headers: std::sync::Mutex::new(None),
        }
    }

    /// The `X-Agent-*` headers of the last http(s) GET that succeeded with some, taken (the
    /// fetch stage asks after each config it fetches); None when there were none.
    pub fn take_agent_headers(&self) -> Option<AgentHeaders> {
        self.agent_headers.lock().ok().and_then(|mut h| h.take())
    }

    /// A fetcher with the same options and clock, for another thread (its clients are its
    /// own).
    pub fn fork(&self) -> Fetcher {
        Self::with_clock(self.opts.clone(), self.clock.clone())
    }

    /// [`Fetcher::fork`], connecting to IPv6 link-local addresses (`http://[fe80::…]/`) out of
    /// the interface with index `scope` (a URL cannot carry the zone: `[fe80::1%eth0]` is not
    /// a valid authority for the HTTP client).
    pub fn fork_scoped(&self, scope: u32) -> Fetcher {
        Fetcher {
            link_scope: Some(scope),
            ..self.fork()
        }
    }

    /// The interface of [`Fetcher::fork_scoped`].
    pub fn link_scope(&self) -> Option<u32> {
        self.link_scope
    }

    /// The clock of the retry back-off (the metadata client retries with it too).
    pub fn clock(&self) -> &(dyn Clock + Send + Sync) {
        &*self.clock
    }
}

/// Bytes read, decompressed and written per step of a download.
pub(super) const CHUNK: usize = 256 * 1024;
/// Chunks queued for the hashing thread at most: memory stays at (HASH_QUEUE + 2) × CHUNK
/// whatever the size of the download.
pub(super) const HASH_QUEUE: usize = 4;

/// Chunk buffers kept between the downloads of one fetcher (a files stage makes thousands of
/// small ones): at most `HASH_QUEUE + 2`, so at most that many × `CHUNK` bytes stay allocated.
#[derive(Default)]
pub(super) struct Chunks(std::sync::Mutex<Vec<Vec<u8>>>);

impl Chunks {
    pub(super) fn take(&self) -> Vec<u8> {
        let kept = self.0.lock().ok().and_then(|mut c| c.pop());
        kept.unwrap_or_else(|| vec![0u8; CHUNK])
    }

    pub(super) fn keep(&self, b: Vec<u8>) {
        if let Ok(mut c) = self.0.lock()
            && c.len() < HASH_QUEUE + 2
        {
            c.push(b);
        }
    }
}

/// A redirect from https to http drops TLS: always a warning; refused (final) when
/// `limits.refuse_tls_downgrade` (`--refuse-tls-downgrade`, `agent.refuse_tls_downgrade`).
pub fn check_tls_downgrade(f: &Fetcher, from: &str, to: &str) -> Result<(), Failure> {
    let scheme = |u: &str| {
        u.split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase())
            .unwrap_or_default()
    };
    if scheme(from) != "https" || scheme(to) != "http" {
        return Ok(());
    }
    if f.opts.limits.refuse_tls_downgrade {
        return Err(Failure::fatal(anyhow!(
            "{}: refusing the redirect to {}: it drops TLS (https to http) and TLS downgrades are refused (--refuse-tls-downgrade / agent.refuse_tls_downgrade)",
            short(from),
            short(to)
        )));
    }
    log::warn!(
        "{}: redirected to {}, which drops TLS (https to http): the contents are not protected in transit; refuse such redirects with --refuse-tls-downgrade / agent.refuse_tls_downgrade",
        short(from),
        short(to)
    );
    Ok(())
}

/// A source as logs and errors show it. A data URL is the file's contents (a key, a
/// password file), so only its header is shown with the payload's size:
/// `data:,… (14 bytes)`; the console and `/var/log/agent/` never hold it. Long URLs are
/// shortened; other sources (a file, a platform's drive: "openstack config drive /dev/sr0
/// (…), file …") are kept whole, their end names the file.
pub fn short(src: &str) -> String {
    if let Some(rest) = src.strip_prefix("data:") {
        let (head, payload) = rest.split_once(',').unwrap_or(("", rest));
        let head = &head[..head.floor_char_boundary(64)];
        return format!("data:{head},… ({} bytes)", payload.len());
    }
    // The scheme's "://" is near the start: a long data URL is not searched through.
    if src.len() > 80
        && (src.starts_with("data:") || src[..src.floor_char_boundary(64)].contains("://"))
    {
        format!("{}…", &src[..src.floor_char_boundary(77)])
    } else {
        src.to_string()
    }
}
