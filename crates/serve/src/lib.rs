//! `agent serve`: the machine config server (docs/serve.md).
//!
//! - `app`: what a request gets (the router and its handlers, over the server's shared state);
//! - `watch`: the source watcher (generations, the inotify/poll loop, status updates, token
//!   rotation, certificate reload);
//! - `run`: the run loop (listeners, event-loop threads, signals, reload, graceful shutdown),
//!   driven by a plain [`Options`] value (the command line lives in the agent crate's `cli`);
//! - `source`: generation loading from a plain tree, an AtomicWriter volume or a git-sync link;
//! - `render`: etcd index templating, the node-agent file, per-version documents;
//! - `accept`: spec version negotiation; `status`: assigned/active/lastKnownGood/error;
//! - `tokens`: bearer tokens (derived from a key per pool+config+epoch, or the legacy store);
//! - `checkpoint`: the `--state-dir` checkpoints (assigned/active/lastKnownGood, old payloads);
//! - `http`: the HTTP/1.1 server; `tls`: rustls with
//!   certificate reload; `metrics`: Prometheus text;
//! - `tokens_cmd`: `agent token` (show, rotate, revoke); `pointer`: `agent pointer`.
//!
//! Default spec version (no usable `Accept`): the **oldest** 3.x version that can express the
//! pool's config. Every Ignition that speaks that version or any newer 3.x reads it, so old
//! and new clients alike get a config they understand.

pub mod accept;
pub mod app;
pub mod checkpoint;
pub mod http;
pub mod inventory;
pub mod metrics;
pub mod pipes;
pub mod pointer;
pub mod render;
pub mod run;
pub mod source;
pub mod status;
pub mod tls;
pub mod tokens;
pub mod tokens_cmd;
pub mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use self::app::App;
pub use self::pointer::pointer_config;
pub use self::run::run;

/// Everything `agent serve` is told: where the configs are, where to listen, timeouts and
/// limits. The command line (the agent crate's `cli::serve`) fills it in; see `agent serve --help` for
/// each setting.
#[derive(Debug, Clone)]
pub struct Options {
    /// Config source directory: `pools/<pool>.ign` or `pools/<pool>/*.ign`.
    pub source: PathBuf,
    /// HTTPS listen address (default 0.0.0.0:22623 when there is a certificate).
    pub listen: Option<SocketAddr>,
    /// TLS certificate chain (PEM); reloaded when the file changes.
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); reloaded when the file changes.
    pub tls_key: Option<PathBuf>,
    /// Plain HTTP listen address (only when asked).
    pub listen_http: Option<SocketAddr>,
    /// How long a generation must stay active before it becomes lastKnownGood.
    pub soak: Duration,
    /// Token lifetime; tokens rotate after half of it.
    pub token_ttl: Duration,
    /// Token state directory shared by replicas (default: SOURCE/tokens); store mode only.
    pub token_dir: Option<PathBuf>,
    /// Key file tokens are derived from (per pool, config and epoch); when set, no token
    /// state is stored anywhere.
    pub token_key: Option<PathBuf>,
    /// How early a derived token of the next epoch is accepted (clock skew between hosts).
    pub token_clock_skew: Duration,
    /// Checkpoint directory (lastKnownGood, active, old payloads); None: none.
    pub state_dir: Option<PathBuf>,
    /// Require a pool's bearer token on `/config/<pool>` too; `/status` then names no pool.
    pub require_token: bool,
    /// Fallback polling interval for source, token and certificate changes.
    pub poll_interval: Duration,
    /// Time until a whole request head is read.
    pub header_timeout: Duration,
    /// Idle time between requests.
    pub idle_timeout: Duration,
    /// Bytes per second a response in progress must deliver in every `send_rate_window`
    /// (0: no minimum).
    pub min_send_rate: usize,
    pub send_rate_window: Duration,
    /// Most open connections (at least 1).
    pub max_connections: usize,
    /// Most open connections from one client address (0: no cap).
    pub max_connections_per_address: usize,
    /// Event-loop threads (default: one per CPU).
    pub threads: Option<usize>,
    /// Largest request head in bytes.
    pub max_header_bytes: usize,
    /// Time in-flight requests get to finish on SIGTERM.
    pub shutdown_grace: Duration,
    /// Write a JSON access-log line per request (stderr).
    pub access_log: bool,
}

impl Options {
    /// The token state directory: [`Options::token_dir`], default `SOURCE/tokens`.
    pub fn token_dir(&self) -> PathBuf {
        self.token_dir
            .clone()
            .unwrap_or_else(|| self.source.join("tokens"))
    }
}

static NEXT_THREAD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    static THREAD: usize = NEXT_THREAD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// This thread's part among `parts`: threads take parts in turn as they first ask, so each of
/// a few event loops has one of its own (the per-thread parts of shared counters and sets,
/// which keep loops on different CPUs from writing the same cache lines on every request).
pub(crate) fn thread_part(parts: usize) -> usize {
    THREAD.with(|t| *t) % parts
}
