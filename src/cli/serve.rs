//! `agent serve`: its flags, turned into [`serve::Options`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

/// Parses a duration: a number with an optional unit `ms`, `s` (default), `m` or `h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (e.g. 30s, 10m, 11h)"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => {
            return Err(format!(
                "invalid duration unit in {s:?} (use ms, s, m or h)"
            ));
        }
    };
    Ok(d)
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Config source directory: pools/<pool>.ign or pools/<pool>/*.ign, or Butane
    /// (.bu) for either (plain tree, AtomicWriter volume or git-sync link).
    #[arg(help_heading = "Source", long)]
    pub source: PathBuf,
    /// HTTPS listen address [default: 0.0.0.0:22623 when --tls-cert is given]. HTTPS only:
    /// needs --tls-cert and --tls-key (plain HTTP is --listen-http).
    #[arg(help_heading = "Listeners", long)]
    pub listen: Option<SocketAddr>,
    /// TLS certificate chain (PEM); reloaded when the file changes.
    #[arg(help_heading = "TLS", long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); reloaded when the file changes.
    #[arg(help_heading = "TLS", long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Also serve plain HTTP on this address (only when asked).
    #[arg(help_heading = "Listeners", long)]
    pub listen_http: Option<SocketAddr>,
    /// How long a generation must stay active before it becomes lastKnownGood.
    #[arg(help_heading = "Source", long, default_value = "10m", value_parser = parse_duration)]
    pub soak: Duration,
    /// Token lifetime; tokens rotate after half of it.
    #[arg(help_heading = "Tokens", long, default_value = "11h", value_parser = parse_duration)]
    pub token_ttl: Duration,
    /// Token state directory shared by replicas (default: STATE_DIR/tokens). Legacy: without
    /// --token-key only.
    #[arg(help_heading = "Tokens", long, conflicts_with = "token_key")]
    pub token_dir: Option<PathBuf>,
    /// Derive every token from this secret key file (at least 32 bytes; e.g. a Kubernetes
    /// Secret volume): tokens per pool, config and rotation epoch, the same on every replica
    /// with the same key and source, nothing stored.
    #[arg(help_heading = "Tokens", long)]
    pub token_key: Option<PathBuf>,
    /// With --token-key: how early the next rotation's token is accepted, for clocks that
    /// differ between hosts (at most TTL/2).
    #[arg(help_heading = "Tokens", long, default_value = "5m", value_parser = parse_duration)]
    pub token_clock_skew: Duration,
    /// Checkpoint directory (lastKnownGood, active, payloads that valid tokens still name):
    /// private to this server.
    #[arg(help_heading = "Source", long, default_value = "/var/lib/agent-serve")]
    pub state_dir: PathBuf,
    /// Require a pool's bearer token on /config/<pool> too; /status then names no pool
    /// (only ready, the generation served and whether there are errors).
    #[arg(help_heading = "Tokens", long)]
    pub require_token: bool,
    /// Fallback polling interval for source, token and certificate changes (at least 250ms
    /// in effect).
    #[arg(help_heading = "Source", long, default_value = "5s", value_parser = parse_duration)]
    pub poll_interval: Duration,
    /// Time from accept (TLS handshake included) until the whole first request head is read,
    /// and from the first byte of each later head; a silent connection is closed then.
    #[arg(help_heading = "Limits", long, default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// Idle time between requests before a keep-alive connection is closed.
    #[arg(help_heading = "Limits", long, default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Minimum send rate in bytes per second (0: none): a response in progress whose client
    /// accepts less than this times --send-rate-window in any such window is dropped.
    #[arg(help_heading = "Limits", long, default_value_t = 4096)]
    pub min_send_rate: usize,
    /// The window over which --min-send-rate is measured.
    #[arg(help_heading = "Limits", long, default_value = "10s", value_parser = parse_duration)]
    pub send_rate_window: Duration,
    /// Most open connections. At the limit the connection that has waited longest without
    /// sending a whole request head is closed to make room; when every connection is busy
    /// with a request, new ones are answered 503 (over TLS after the handshake).
    #[arg(help_heading = "Limits", long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// Most open connections from one client address (0: no cap). Off by default: behind a
    /// load balancer every client has the balancer's address.
    #[arg(help_heading = "Limits", long, default_value_t = 0)]
    pub max_connections_per_address: usize,
    /// Seconds the kernel holds a new connection that has sent nothing before the server
    /// accepts it (TCP_DEFER_ACCEPT, as nginx's `listen … deferred`): a connection is
    /// accepted with its request already there, one wake-up instead of two. 0: accept at once.
    #[arg(help_heading = "Listeners", long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=60))]
    pub defer_accept: u32,
    /// Event-loop threads (default: one per CPU).
    #[arg(help_heading = "Listeners", long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: Option<u64>,
    /// Largest request head in bytes.
    #[arg(help_heading = "Limits", long, default_value_t = 16 * 1024)]
    pub max_header_bytes: usize,
    /// Largest request body in bytes (a machine's report, sent with Content-Length; larger
    /// is answered 413).
    #[arg(help_heading = "Limits", long, default_value_t = 256 * 1024)]
    pub max_body_bytes: usize,
    /// Request bodies being read at one time, all connections together, in bytes (beyond:
    /// 503 with Retry-After).
    #[arg(help_heading = "Limits", long, default_value_t = 32 << 20)]
    pub max_body_total: usize,
    /// Where machine reports are kept: `embedded` (one file, inventory.db, in --state-dir),
    /// `etcd` (the cluster at --etcd-endpoints: replicas then share one inventory) or
    /// `memory` (for tests and short-lived servers: lost when the server stops).
    #[arg(help_heading = "Inventory", long, default_value = "embedded")]
    pub inventory_store: serve::fleet::inventory::StoreKind,
    /// With --inventory-store=etcd: the etcd client URLs, comma-separated
    /// (http://10.0.0.1:2379,http://10.0.0.2:2379).
    #[arg(help_heading = "Inventory", long, value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// Machine records the inventory holds at most, all replicas together: a report or a
    /// network-boot registration of a machine not known yet is refused beyond it (507), one of
    /// a known machine is still recorded.
    #[arg(help_heading = "Inventory", long, default_value_t = serve::fleet::inventory::DEFAULT_MAX_MACHINES,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub max_machines: u64,
    /// The embedded inventory: begin a new, empty one when inventory.db is missing or empty
    /// although inventory.id beside it says an inventory was there (or take an inventory.db
    /// that holds another inventory than the one named there). Without it such a start
    /// keeps the inventory closed and says so (/status, the log): every machine it knew
    /// would install again. For one start: an intact inventory is kept either way.
    #[arg(help_heading = "Inventory", long)]
    pub inventory_reset: bool,
    /// The admin listener (the inventory: /machines, /ui/, its metrics), plain HTTP; `off`
    /// for none. Off loopback it needs --admin-token-file.
    #[arg(help_heading = "Listeners", long, default_value = "127.0.0.1:22625", value_parser = parse_admin_listen)]
    pub admin_listen: AdminListen,
    /// A file holding the admin token (its first line, at least 16 bytes): every admin
    /// request must carry it (Authorization: Bearer, or Basic with it as the password), or
    /// prove it without sending it (`agent machines` does; docs/reports.md).
    #[arg(help_heading = "Listeners", long)]
    pub admin_token_file: Option<PathBuf>,
    /// Another name the admin listener answers to (repeatable): `NAME` (any port) or
    /// `NAME:PORT`. Requests whose Host names anything else but the bound address and
    /// localhost:PORT are refused (421), so a web page on another name reads nothing.
    #[arg(help_heading = "Listeners", long = "admin-host", value_name = "NAME", value_parser = serve::admin::auth::parse_admin_host)]
    pub admin_hosts: Vec<String>,
    /// Time in-flight requests get to finish on SIGTERM (the process exits at most 1 s
    /// after it, whatever the source watcher is doing).
    #[arg(help_heading = "Listeners", long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Do not write a JSON access-log line per request (as --access-log off).
    #[arg(help_heading = "Logging", long, conflicts_with = "access_log")]
    pub no_access_log: bool,
    /// Where each request's JSON access-log line goes: stderr (beside the server's log),
    /// off, or a file's path (appended to; the server's log stays on stderr).
    #[arg(help_heading = "Logging", long, value_name = "stderr|off|FILE")]
    pub access_log: Option<serve::options::AccessLog>,
    /// The URL machines reach this server at (e.g. http://10.0.0.1:8080), used in the iPXE
    /// scripts' URLs [default: http:// and the request's Host header].
    #[arg(help_heading = "Listeners", long)]
    pub public_url: Option<String>,
    /// What /ipxe gives a machine no machine file selects: `register` (recorded as
    /// unassigned in the inventory; its script waits and asks again) or `pool:<name>`
    /// (installs that pool's config).
    #[arg(help_heading = "Network boot", long, default_value = "register")]
    pub discovery: serve::fleet::boot::Discovery,
    /// How long the one-time token /ipxe puts on a machine's kernel command line may fetch
    /// its config (/machine-config?token=); it is spent by that fetch.
    #[arg(help_heading = "Network boot", long, default_value = "10m", value_parser = parse_duration)]
    pub boot_token_ttl: Duration,
    /// How long a machine may stay installed or provisioned without the installed system's
    /// `running` report before the inventory shows it as `unresponsive` [default: off].
    #[arg(help_heading = "Network boot", long, value_name = "DURATION", value_parser = parse_duration)]
    pub running_deadline: Option<Duration>,
    /// OpenShift mode: write the files the OpenShift Machine Config Server writes into every
    /// config (the node annotations the Machine Config Daemon starts from, the kubeconfig)
    /// instead of /etc/agent/node-config.json, and serve spec 2.2.0 to
    /// `Accept: application/vnd.coreos.ignition+json;version=2.2.0` (old boot images).
    #[arg(help_heading = "Source", long)]
    pub openshift: bool,
    /// OpenShift mode: the kubeconfig new nodes join with, written to
    /// /etc/kubernetes/kubeconfig in every config (read once, at most 1 MiB).
    #[arg(help_heading = "Source", long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// OpenShift mode: the rendered MachineConfig a pool's nodes start from (repeatable),
    /// as POOL=NAME [default: the pool's config name].
    #[arg(help_heading = "Source", long = "openshift-config-name", value_name = "POOL=NAME", value_parser = serve::source::openshift::parse_config_name)]
    pub openshift_config_names: Vec<(String, String)>,
}

impl From<ServeArgs> for serve::Options {
    fn from(a: ServeArgs) -> Self {
        serve::Options {
            source: a.source,
            listen: a.listen,
            tls_cert: a.tls_cert,
            tls_key: a.tls_key,
            listen_http: a.listen_http,
            soak: a.soak,
            token_ttl: a.token_ttl,
            token_dir: a.token_dir,
            token_key: a.token_key,
            token_clock_skew: a.token_clock_skew,
            state_dir: Some(a.state_dir),
            require_token: a.require_token,
            poll_interval: a.poll_interval,
            header_timeout: a.header_timeout,
            idle_timeout: a.idle_timeout,
            min_send_rate: a.min_send_rate,
            send_rate_window: a.send_rate_window,
            max_connections: usize::try_from(a.max_connections).unwrap_or(usize::MAX),
            max_connections_per_address: a.max_connections_per_address,
            defer_accept_secs: a.defer_accept,
            // At most 256 (the flag's range).
            threads: a.threads.map(|n| n as usize),
            max_header_bytes: a.max_header_bytes,
            max_body_bytes: a.max_body_bytes,
            max_body_total: a.max_body_total,
            inventory_store: a.inventory_store,
            etcd_endpoints: a.etcd_endpoints,
            max_machines: a.max_machines,
            inventory_reset: a.inventory_reset,
            admin_listen: a.admin_listen.0,
            admin_token_file: a.admin_token_file,
            admin_hosts: a.admin_hosts,
            shutdown_grace: a.shutdown_grace,
            access_log: if a.no_access_log {
                serve::options::AccessLog::Off
            } else {
                a.access_log.unwrap_or_default()
            },
            public_url: a.public_url.map(|u| u.trim_end_matches('/').to_string()),
            discovery: a.discovery,
            boot_token_ttl: a.boot_token_ttl,
            running_deadline: a.running_deadline,
            openshift: a.openshift,
            kubeconfig: a.kubeconfig,
            openshift_config_names: a.openshift_config_names,
        }
    }
}

pub fn run(a: ServeArgs) -> Result<()> {
    serve::run(&a.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("11h"), Ok(Duration::from_secs(39600)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("5d").is_err());
    }
}

/// `--admin-listen`: an address, or `off`.
#[derive(Debug, Clone, Copy)]
pub struct AdminListen(pub Option<std::net::SocketAddr>);

fn parse_admin_listen(s: &str) -> Result<AdminListen, String> {
    if s == "off" {
        return Ok(AdminListen(None));
    }
    s.parse()
        .map(|a| AdminListen(Some(a)))
        .map_err(|e| format!("{s:?}: {e} (an address such as 127.0.0.1:22625, or off)"))
}
