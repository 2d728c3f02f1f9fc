//! What `agent serve` is told: [`Options`], filled in by the command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Token state directory shared by replicas (default: STATE_DIR/tokens); store mode only.
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
    /// TCP_DEFER_ACCEPT of the listeners in seconds (0: accept at once).
    pub defer_accept_secs: u32,
    /// Event-loop threads (default: one per CPU).
    pub threads: Option<usize>,
    /// Largest request head in bytes.
    pub max_header_bytes: usize,
    /// Largest request body in bytes (a machine's report).
    pub max_body_bytes: usize,
    /// Request bodies being read, all connections together, in bytes.
    pub max_body_total: usize,
    /// Time in-flight requests get to finish on SIGTERM.
    pub shutdown_grace: Duration,
    /// Where the JSON access-log line of each request goes.
    pub access_log: AccessLog,
    /// Where machine reports are kept (docs/reports.md).
    pub inventory_store: crate::fleet::inventory::StoreKind,
    /// `--inventory-store=etcd`: the cluster's client URLs.
    pub etcd_endpoints: Vec<String>,
    /// Machine records the inventory holds at most (new machines beyond are refused).
    pub max_machines: u64,
    /// Take a missing, empty or other embedded inventory file as it is (a missing or empty
    /// one begins a new, empty inventory) where its marker says another was.
    pub inventory_reset: bool,
    /// The admin listener (the inventory, its API, its page); None: none.
    pub admin_listen: Option<SocketAddr>,
    /// The admin token's file; required when the admin listener is not on loopback.
    pub admin_token_file: Option<PathBuf>,
    /// More names the admin listener answers to (`Host`, `Origin`) besides its bound
    /// address and `localhost:PORT`: `name` (any port) or `name:port`, lowercase.
    pub admin_hosts: Vec<String>,
    /// The base URL machines reach this server at, for the URLs of iPXE scripts (default:
    /// `http://` and the request's Host).
    pub public_url: Option<String>,
    /// What `/ipxe` does for a machine no machine file selects.
    pub discovery: crate::fleet::boot::Discovery,
    /// How long a one-time boot token may fetch its config.
    pub boot_token_ttl: Duration,
    /// How long a machine may be installed or provisioned without a `running` report before
    /// it is shown `unresponsive` (None: never).
    pub running_deadline: Option<Duration>,
    /// OpenShift mode: the Machine Config Server's files and spec 2.2.0 (`openshift`).
    pub openshift: bool,
    /// OpenShift mode: the kubeconfig new nodes join with.
    pub kubeconfig: Option<PathBuf>,
    /// OpenShift mode: the rendered MachineConfig name of a pool.
    pub openshift_config_names: Vec<(String, String)>,
}

impl Options {
    /// The token state directory: [`Options::token_dir`], default `STATE_DIR/tokens`, never
    /// inside the source (a source kept in git would pick the plaintext tokens up). `agent
    /// serve` always has a state directory; a library caller without one gets `SOURCE/tokens`.
    pub fn token_dir(&self) -> PathBuf {
        self.token_dir.clone().unwrap_or_else(|| {
            self.state_dir
                .as_ref()
                .map_or_else(|| self.source.join("tokens"), |d| d.join("tokens"))
        })
    }

    /// Where servers before this one kept the token store by default: `SOURCE/tokens`.
    pub fn legacy_token_dir(&self) -> Option<PathBuf> {
        (self.token_dir.is_none() && self.token_key.is_none() && self.state_dir.is_some())
            .then(|| self.source.join("tokens"))
    }
}

/// Where the access log goes (`--access-log`): one JSON line per request, apart from the
/// server's own log when it is a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AccessLog {
    /// Not written.
    Off,
    /// On stderr, beside the server's log (the default).
    #[default]
    Stderr,
    /// Appended to this file (created 0640 if missing).
    File(PathBuf),
}

impl std::str::FromStr for AccessLog {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(AccessLog::Off),
            "stderr" | "-" => Ok(AccessLog::Stderr),
            "" => Err("an empty --access-log: give off, stderr or a file's path".into()),
            p => Ok(AccessLog::File(PathBuf::from(p))),
        }
    }
}
