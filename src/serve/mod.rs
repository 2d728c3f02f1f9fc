//! `agent serve`: the machine config server (REFERENCE §5).
//!
//! - `source`: generation loading from a plain tree, an AtomicWriter volume or a git-sync link;
//! - `render`: etcd index templating, the node-agent file, per-version documents;
//! - `accept`: spec version negotiation; `status`: assigned/active/lastKnownGood/error;
//! - `tokens`: bearer tokens with rotation; `http`: the HTTP/1.1 server; `tls`: rustls with
//!   certificate reload; `metrics`: Prometheus text.
//!
//! Default spec version (no usable `Accept`): the **oldest** 3.x version that can express the
//! pool's config. Every Ignition that speaks that version or any newer 3.x reads it, so old
//! and new clients alike get a config they understand.

pub mod accept;
pub mod http;
pub mod metrics;
pub mod render;
pub mod source;
pub mod status;
pub mod tls;
pub mod tokens;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use self::accept::Negotiated;
use self::http::{Body, Request, Response};
use self::metrics::Metrics;
use self::render::Pool;
use self::source::{Generation, LoadError};
use self::status::{Change, Tracker};
use self::tokens::Clock;
use crate::config::{self, Config, Version};

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
    /// Config source directory: pools/<pool>.ign or pools/<pool>/*.ign (plain tree,
    /// AtomicWriter volume or git-sync link).
    #[arg(long)]
    pub source: PathBuf,
    /// HTTPS listen address [default: 0.0.0.0:22623 when --tls-cert is given]. HTTPS only:
    /// needs --tls-cert and --tls-key (plain HTTP is --listen-http).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// TLS certificate chain (PEM); reloaded when the file changes.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); reloaded when the file changes.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Also serve plain HTTP on this address (only when asked).
    #[arg(long)]
    pub listen_http: Option<SocketAddr>,
    /// How long a generation must stay active before it becomes lastKnownGood.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub soak: Duration,
    /// Token lifetime; tokens rotate after half of it.
    #[arg(long, default_value = "11h", value_parser = parse_duration)]
    pub token_ttl: Duration,
    /// Token state directory shared by replicas (default: SOURCE/tokens).
    #[arg(long)]
    pub token_dir: Option<PathBuf>,
    /// Require a pool's bearer token on /config/<pool> too.
    #[arg(long)]
    pub require_token: bool,
    /// Fallback polling interval for source, token and certificate changes.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub poll_interval: Duration,
    /// Time from accept (TLS handshake included) until the whole first request head is read,
    /// and from the first byte of each later head; a silent connection is closed then.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// Idle time between requests before a keep-alive connection is closed; also the time a
    /// response may make no progress.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Most open connections. At the limit the connection that has waited longest without
    /// sending a whole request head is closed to make room; when every connection is busy
    /// with a request, new ones are answered 503 (over TLS after the handshake).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// Most open connections from one client address (0: no cap). Off by default: behind a
    /// load balancer every client has the balancer's address.
    #[arg(long, default_value_t = 0)]
    pub max_connections_per_address: usize,
    /// Event-loop threads (default: one per CPU).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub threads: Option<u64>,
    /// Largest request head in bytes.
    #[arg(long, default_value_t = 16 * 1024)]
    pub max_header_bytes: usize,
    /// Time in-flight requests get to finish on SIGTERM.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Do not write a JSON access-log line per request.
    #[arg(long)]
    pub no_access_log: bool,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(Debug, Args)]
pub struct TokenStoreArgs {
    /// Config source directory (tokens in SOURCE/tokens).
    #[arg(long, required_unless_present = "token_dir")]
    pub source: Option<PathBuf>,
    /// Token state directory (overrides SOURCE/tokens).
    #[arg(long)]
    pub token_dir: Option<PathBuf>,
}

impl TokenStoreArgs {
    fn store(&self) -> Result<tokens::Store> {
        match (&self.token_dir, &self.source) {
            (Some(d), _) => Ok(tokens::Store::new(d)),
            (None, Some(s)) => Ok(tokens::Store::new(s.join("tokens"))),
            (None, None) => bail!("give --source or --token-dir"),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TokenAction {
    /// List tokens (hash prefix, created, expires); --reveal prints current plaintext tokens.
    Show {
        #[command(flatten)]
        store: TokenStoreArgs,
        /// Only this pool.
        #[arg(long)]
        pool: Option<String>,
        /// Print each pool's current token in clear.
        #[arg(long)]
        reveal: bool,
    },
    /// Issue a new current token for a pool (the previous one stays valid until its TTL).
    Rotate {
        #[command(flatten)]
        store: TokenStoreArgs,
        #[arg(long)]
        pool: String,
        /// Lifetime of the new token.
        #[arg(long, default_value = "11h", value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Revoke every token of a pool at once.
    Revoke {
        #[command(flatten)]
        store: TokenStoreArgs,
        #[arg(long)]
        pool: String,
    },
}

#[derive(Debug, Args)]
pub struct PointerArgs {
    /// Pool whose token to use.
    #[arg(long)]
    pub pool: String,
    /// URL of the server's /ignition endpoint (e.g. https://mcs.example:22623/ignition).
    #[arg(long)]
    pub url: String,
    /// CA certificate (PEM) the machine must trust for the server.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    #[command(flatten)]
    pub store: TokenStoreArgs,
}

/// Shared state of a running server.
pub struct App {
    source: PathBuf,
    clock: Box<dyn Clock>,
    pub metrics: Metrics,
    tracker: Mutex<Tracker>,
    active: RwLock<Option<Arc<Generation>>>,
    token_store: Option<tokens::Store>,
    token_index: RwLock<Option<tokens::Index>>,
    token_error: Mutex<Option<String>>,
    ttl: u64,
    soak: u64,
    require_token: bool,
    access_log: bool,
    conns: Arc<http::ConnStats>,
    /// The connection and request limits, as shown in /status.
    limits: serde_json::Value,
}

fn method_ok(req: &Request) -> Option<Response> {
    if req.method == "GET" || req.method == "HEAD" {
        None
    } else {
        Some(Response::new(405).header("Allow", "GET, HEAD"))
    }
}

impl App {
    fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Reads the source and updates status; a new valid generation becomes active.
    pub fn reload(&self, force: bool) {
        let now = self.now();
        let raw = match source::read(&self.source) {
            Ok(r) => r,
            Err(e) => {
                return self.failed(
                    None,
                    &self.source.display().to_string(),
                    format!("{e:#}"),
                    now,
                );
            }
        };
        {
            let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
            if !force && t.assigned.as_ref().is_some_and(|a| a.generation == raw.id) {
                return;
            }
        }
        match source::build(raw) {
            Ok(g) => {
                let id = g.id.clone();
                let dir = g.dir.display().to_string();
                let pools = g.pools.len();
                let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
                if t.observe_ok(g, now) == Change::Activated {
                    self.metrics.reloads.fetch_add(1, Ordering::Relaxed);
                    log::info!("serving generation {id} from {dir} ({pools} pools)");
                }
                *self.active.write().unwrap_or_else(|e| e.into_inner()) = t.active.clone();
            }
            Err(LoadError::Invalid { id, dir, error }) => {
                self.failed(Some(&id), &dir.display().to_string(), error, now)
            }
            Err(LoadError::Read(e)) => self.failed(
                None,
                &self.source.display().to_string(),
                format!("{e:#}"),
                now,
            ),
        }
    }

    fn failed(&self, id: Option<&str>, path: &str, error: String, now: u64) {
        let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        if t.observe_err(id, path, error.clone(), now) == Change::Failed {
            self.metrics.reload_failures.fetch_add(1, Ordering::Relaxed);
            let serving = t
                .active
                .as_ref()
                .map_or("nothing".to_string(), |g| format!("generation {}", g.id));
            log::error!(
                "source generation {} rejected, still serving {serving}: {error}",
                id.unwrap_or("(unreadable)")
            );
        }
        *self.active.write().unwrap_or_else(|e| e.into_inner()) = t.active.clone();
    }

    /// Soak promotion, token rotation and the token index refresh.
    pub fn tick(&self) {
        let now = self.now();
        {
            let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
            if t.tick(now, self.soak)
                && let Some(l) = &t.lkg
            {
                log::info!("generation {} is now lastKnownGood", l.id);
            }
        }
        let Some(store) = &self.token_store else {
            return;
        };
        let active = self
            .active
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let res = (|| -> Result<tokens::Index> {
            if let Some(g) = &active {
                let pools: Vec<String> = g.pools.keys().cloned().collect();
                let r = store.update(|s| s.reconcile(&pools, now, self.ttl))?;
                if r.changed() {
                    self.metrics
                        .token_rotations
                        .fetch_add(r.rotated as u64, Ordering::Relaxed);
                    log::info!(
                        "tokens: {} issued, {} rotated, {} expired, {} revoked",
                        r.created,
                        r.rotated,
                        r.expired,
                        r.revoked
                    );
                }
            }
            Ok(store.read()?.index())
        })();
        let mut err = self.token_error.lock().unwrap_or_else(|e| e.into_inner());
        match res {
            Ok(idx) => {
                *self.token_index.write().unwrap_or_else(|e| e.into_inner()) = Some(idx);
                *err = None;
            }
            Err(e) => {
                let msg = format!("token store {}: {e:#}", store.dir.display());
                if err.as_deref() != Some(msg.as_str()) {
                    log::error!("{msg}");
                }
                *err = Some(msg);
            }
        }
    }

    fn active(&self) -> Option<Arc<Generation>> {
        self.active
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn status_json(&self) -> Vec<u8> {
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let src = t.to_json(&self.source.display().to_string());
        let tok_err = self
            .token_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let v = serde_json::json!({
            "sources": [src],
            "tokens": {"error": tok_err, "ttlSeconds": self.ttl},
            "openConnections": self.conns.open.load(Ordering::Relaxed),
            "limits": self.limits,
        });
        let mut b = serde_json::to_vec_pretty(&v).unwrap_or_default();
        b.push(b'\n');
        b
    }

    /// Checks a bearer token; Ok(pool) or the error response.
    fn authorize(&self, req: &Request) -> Result<String, Response> {
        let tok = tokens::parse_bearer(req.header_one("authorization")).map_err(|_| {
            Response::text(401, "missing or malformed Authorization: Bearer <token>")
                .header("WWW-Authenticate", "Bearer")
        })?;
        let idx = self.token_index.read().unwrap_or_else(|e| e.into_inner());
        let Some(idx) = idx.as_ref() else {
            return Err(
                Response::text(503, "tokens are not available yet").header("Retry-After", "5")
            );
        };
        match idx.lookup(tok, self.now()) {
            Some(p) => Ok(p.to_string()),
            // Unknown is "not ready yet" for a booting machine: a 5xx makes it retry.
            None => Err(Response::text(503, "token not known (yet)").header("Retry-After", "5")),
        }
    }

    fn config(&self, req: &Request, name: &str) -> Response {
        if self.require_token {
            return self.config_with_token(req, name);
        }
        if !source::valid_pool_name(name) {
            return Response::new(404);
        }
        let Some(g) = self.active() else {
            return Response::text(503, "no valid config generation loaded")
                .header("Retry-After", "5");
        };
        let Some(pool) = g.pools.get(name) else {
            return Response::new(404);
        };
        self.serve_pool(req, pool)
    }

    /// `/config/<pool>` with `--require-token`. The token is checked before the pool is looked
    /// up, so the answer never tells whether a pool the caller may not read exists: no or a
    /// malformed `Authorization` → 401, a well-formed unknown token → 503 (machines retry),
    /// another pool's token → 403, whether the requested pool exists or not.
    fn config_with_token(&self, req: &Request, name: &str) -> Response {
        let own = match self.authorize(req) {
            Ok(p) => p,
            Err(r) => return r,
        };
        if name != own {
            return Response::text(403, "this token does not grant the requested pool");
        }
        let Some(g) = self.active() else {
            return Response::text(503, "no valid config generation loaded")
                .header("Retry-After", "5");
        };
        match g.pools.get(name) {
            Some(p) => self.serve_pool(req, p),
            None => {
                Response::text(503, "token's pool is not being served").header("Retry-After", "5")
            }
        }
    }

    fn ignition(&self, req: &Request) -> Response {
        let name = match self.authorize(req) {
            Ok(p) => p,
            Err(r) => return r,
        };
        let pool = self.active().and_then(|g| g.pools.get(&name).cloned());
        match pool {
            Some(p) => self.serve_pool(req, &p),
            None => {
                Response::text(503, "token's pool is not being served").header("Retry-After", "5")
            }
        }
    }

    fn serve_pool(&self, req: &Request, pool: &Pool) -> Response {
        let minor = match accept::negotiate(req.header("accept").as_deref()) {
            Negotiated::BadMajor(m) => {
                let mut r = Response::text(
                    400,
                    format!(
                        "spec version {m}.x is not served: this server speaks 3.0.0 through {}",
                        Version::NEWEST
                    ),
                );
                r.pool = pool.name.clone();
                return r;
            }
            Negotiated::Minor(m) => m,
            Negotiated::Default => pool.min_version.minor,
        };
        let mut etcd = None;
        if pool.name == "master"
            && let Some(v) = req.query_param("etcd_index")
        {
            if v.is_empty() || v.len() > 6 || !v.bytes().all(|b| b.is_ascii_digit()) {
                let mut r = Response::text(400, "etcd_index must be a small non-negative integer");
                r.pool = pool.name.clone();
                return r;
            }
            etcd = v.parse().ok();
        }
        let mut r = match pool.render(minor, etcd) {
            Ok(doc) => {
                let hit = req
                    .header("if-none-match")
                    .is_some_and(|v| etag_matches(&v, &doc.etag));
                let mut r = Response::new(if hit { 304 } else { 200 });
                if !hit {
                    r.body = Body::Shared(doc.body.clone());
                }
                r.headers.push((
                    "Content-Type",
                    format!(
                        "application/vnd.coreos.ignition+json;version={}",
                        doc.version
                    ),
                ));
                r.headers.push(("ETag", doc.etag.clone()));
                r.headers.push(("Vary", "Accept".into()));
                r
            }
            Err(e) => Response::text(406, e),
        };
        r.pool = pool.name.clone();
        r.version = Version::new(minor).to_string();
        r
    }

    fn access_log(
        &self,
        req: Option<&Request>,
        resp: &Response,
        bytes: usize,
        took: Duration,
        peer: SocketAddr,
    ) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        // Never the query string's secrets nor any header: method, path, labels, sizes.
        let line = serde_json::json!({
            "time": (now * 1000.0).round() / 1000.0,
            "remote": peer.to_string(),
            "method": req.map(|r| r.method.as_str()),
            "path": req.map(|r| r.path.as_str()),
            "pool": resp.pool,
            "status": resp.status,
            "version": resp.version,
            "bytes": bytes,
            "durationMs": (took.as_secs_f64() * 1e6).round() / 1e3,
        });
        let mut s = line.to_string();
        s.push('\n');
        let _ = std::io::stderr().lock().write_all(s.as_bytes());
    }
}

/// `If-None-Match` against our (strong) ETag, with the weak comparison RFC 9110 §13.1.2
/// prescribes for it: `W/"x"` matches `"x"`; `*` matches any current representation.
fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').any(|t| {
        let t = t.trim();
        t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag
    })
}

/// Limits the metrics labels to pools being served (no label explosion from random paths).
fn bounded_pool<'a>(app: &App, pool: &'a str) -> &'a str {
    if pool == "-" {
        return "-";
    }
    match app.active() {
        Some(g) if g.pools.contains_key(pool) => pool,
        _ => "-",
    }
}

impl http::Handler for App {
    fn handle(&self, req: &Request) -> Response {
        let path = req.path.as_str();
        let known = matches!(
            path,
            "/healthz" | "/readyz" | "/status" | "/metrics" | "/ignition"
        ) || path.starts_with("/config/");
        if !known {
            return Response::new(404);
        }
        if let Some(r) = method_ok(req) {
            return r;
        }
        match path {
            "/healthz" => Response::text(200, "ok"),
            "/readyz" => match self.active() {
                Some(g) => Response::text(200, format!("ready: generation {}", g.id)),
                None => Response::text(503, "no valid config generation loaded"),
            },
            "/status" => {
                let mut r = Response::new(200);
                r.body = Body::Owned(self.status_json());
                r.header("Content-Type", "application/json")
            }
            "/metrics" => {
                let mut r = Response::new(200);
                r.body = Body::Owned(self.metrics.render(&self.conns).into_bytes());
                r.header("Content-Type", "text/plain; version=0.0.4")
            }
            "/ignition" => self.ignition(req),
            p => self.config(req, &p["/config/".len()..]),
        }
    }

    fn done(
        &self,
        req: Option<&Request>,
        resp: &Response,
        bytes: usize,
        took: Duration,
        peer: SocketAddr,
    ) {
        self.metrics.request(
            bounded_pool(self, &resp.pool),
            resp.status,
            &resp.version,
            took,
        );
        if self.access_log {
            self.access_log(req, resp, bytes, took, peer);
        }
    }
}

/// Watches the source (inotify on the directory, its parent and pools/, with polling as the
/// fallback), the token store and the TLS files; exits on shutdown.
fn watch_loop(
    app: &App,
    poll: Duration,
    tls: Option<&tls::CertResolver>,
    token_dir: Option<&Path>,
    hup: &AtomicBool,
    shutdown: &AtomicBool,
) {
    use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| log::warn!("inotify unavailable, polling every {poll:?}: {e}"))
        .ok();
    let mask = F::IN_CREATE
        | F::IN_DELETE
        | F::IN_MOVED_TO
        | F::IN_MOVED_FROM
        | F::IN_CLOSE_WRITE
        | F::IN_ATTRIB
        | F::IN_DELETE_SELF
        | F::IN_MOVE_SELF;
    let src = &app.source;
    let rewatch = |ino: &Inotify| {
        let mut paths = vec![src.clone(), src.join("pools")];
        if let Some(parent) = src.parent() {
            paths.push(if parent.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                parent.to_path_buf()
            });
        }
        if let Ok(rd) = std::fs::read_dir(src.join("pools")) {
            paths.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
        if let Some(t) = token_dir {
            paths.push(t.to_path_buf());
        }
        for p in paths {
            let _ = ino.add_watch(&p, mask);
        }
    };
    let mut last_poll = Instant::now();
    while !shutdown.load(Ordering::SeqCst) {
        let mut changed = false;
        if let Some(ino) = &ino {
            rewatch(ino);
            // The inotify fd is non-blocking: check it in short slices.
            for _ in 0..10 {
                std::thread::sleep(Duration::from_millis(25));
                let mut got = false;
                while let Ok(ev) = ino.read_events() {
                    if ev.is_empty() {
                        break;
                    }
                    got = true;
                }
                if got {
                    // Let a burst of changes settle, then drain.
                    std::thread::sleep(Duration::from_millis(30));
                    while let Ok(ev) = ino.read_events() {
                        if ev.is_empty() {
                            break;
                        }
                    }
                    changed = true;
                    break;
                }
                if shutdown.load(Ordering::SeqCst) || hup.load(Ordering::SeqCst) {
                    break;
                }
            }
        } else {
            std::thread::sleep(Duration::from_millis(250));
        }
        let forced = hup.swap(false, Ordering::SeqCst);
        if forced {
            log::info!("SIGHUP: reloading source and certificate");
        }
        let due = last_poll.elapsed() >= poll;
        if changed || forced || due {
            app.reload(forced);
            if let Some(t) = tls {
                match t.maybe_reload(forced) {
                    Ok(true) => {
                        app.metrics.tls_reloads.fetch_add(1, Ordering::Relaxed);
                        log::info!("TLS certificate reloaded");
                    }
                    Ok(false) => {}
                    Err(e) => log::error!("reloading TLS certificate (keeping the old one): {e:#}"),
                }
            }
        }
        if due || forced || changed {
            app.tick();
            last_poll = Instant::now();
        }
    }
}

pub fn main(args: ServeArgs) -> Result<()> {
    crate::logging::set_stage("serve");
    if let (Some(addr), None) = (args.listen, &args.tls_cert) {
        bail!(
            "--listen {addr} serves HTTPS and needs --tls-cert and --tls-key; for plain HTTP use --listen-http {addr}"
        );
    }
    if args.tls_cert.is_none() && args.listen_http.is_none() {
        bail!("nothing to listen on: give --tls-cert and --tls-key (HTTPS) and/or --listen-http");
    }
    if args.token_ttl.as_secs() < 2 {
        bail!("--token-ttl must be at least 2s");
    }
    // Signals go to a dedicated thread: block them before any other thread starts.
    use nix::sys::signal::{SigSet, Signal};
    let mut sigs = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        sigs.add(s);
    }
    sigs.thread_block().context("blocking signals")?;

    let token_dir = args
        .token_dir
        .clone()
        .unwrap_or_else(|| args.source.join("tokens"));
    let limits = http::Limits {
        max_header_bytes: args.max_header_bytes,
        header_timeout: args.header_timeout,
        idle_timeout: args.idle_timeout,
        write_timeout: args.idle_timeout,
        max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
        max_connections_per_address: args.max_connections_per_address,
        ..Default::default()
    };
    raise_open_files_limit(&limits);
    let conns = Arc::new(http::ConnStats::default());
    let app = Arc::new(App {
        source: args.source.clone(),
        clock: tokens::default_clock(),
        metrics: Metrics::default(),
        tracker: Mutex::new(Tracker::default()),
        active: RwLock::new(None),
        token_store: Some(tokens::Store::new(&token_dir)),
        token_index: RwLock::new(None),
        token_error: Mutex::new(None),
        ttl: args.token_ttl.as_secs(),
        soak: args.soak.as_secs(),
        require_token: args.require_token,
        access_log: !args.no_access_log,
        conns: conns.clone(),
        limits: limits_json(&limits),
    });
    app.reload(true);
    app.tick();

    let resolver = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(Arc::new(tls::CertResolver::new(c.clone(), k.clone())?)),
        _ => None,
    };
    let shutdown = Arc::new(AtomicBool::new(false));
    let server = http::Server::new(limits, app.clone(), conns.clone(), shutdown.clone());
    let mut plan: Vec<(SocketAddr, Option<Arc<rustls::ServerConfig>>, &str)> = Vec::new();
    if let Some(r) = &resolver {
        let addr = args
            .listen
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 22623)));
        plan.push((addr, Some(tls::server_config(r.clone())?), "https"));
    }
    if let Some(a) = args.listen_http {
        plan.push((a, None, "http"));
    }
    let mut listeners = Vec::new();
    let mut out = std::io::stdout().lock();
    for (addr, cfg, scheme) in plan {
        let l = http::bind(addr)?;
        let local = l.local_addr().context("reading the bound address")?;
        writeln!(out, "listening {scheme}://{local}").context("writing to stdout")?;
        log::info!("listening on {scheme}://{local}");
        listeners.push(http::Listener { sock: l, tls: cfg });
    }
    out.flush().ok();
    drop(out);
    let threads = match args.threads {
        Some(n) => n as usize,
        None => std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    let loops = server.start(&listeners, threads)?;

    let hup = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (app, hup, shutdown, resolver) =
            (app.clone(), hup.clone(), shutdown.clone(), resolver.clone());
        let poll = args.poll_interval;
        let td = token_dir.clone();
        std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || watch_loop(&app, poll, resolver.as_deref(), Some(&td), &hup, &shutdown))
            .context("starting watcher thread")?
    };

    loop {
        match sigs.wait() {
            Ok(Signal::SIGHUP) => hup.store(true, Ordering::SeqCst),
            Ok(s) => {
                log::info!("{s}: shutting down gracefully");
                break;
            }
            Err(e) => bail!("waiting for signals: {e}"),
        }
    }
    shutdown.store(true, Ordering::SeqCst);
    for l in &listeners {
        http::stop_listener(&l.sock);
    }
    // The event loops finish in-flight requests, then return.
    let deadline = Instant::now() + args.shutdown_grace;
    while loops.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = conns.open.load(Ordering::SeqCst);
    if loops.iter().any(|t| !t.is_finished()) {
        log::warn!("{left} connections still open after the grace period");
    }
    let _ = watcher.join();
    log::info!("stopped");
    Ok(())
}

/// The limits as shown in `/status`.
fn limits_json(l: &http::Limits) -> serde_json::Value {
    serde_json::json!({
        "maxConnections": l.max_connections,
        // 0: no per-address cap.
        "maxConnectionsPerAddress": l.max_connections_per_address,
        "headerTimeoutSeconds": l.header_timeout.as_secs_f64(),
        "idleTimeoutSeconds": l.idle_timeout.as_secs_f64(),
        "writeTimeoutSeconds": l.write_timeout.as_secs_f64(),
        "maxHeaderBytes": l.max_header_bytes,
        "maxHeaders": l.max_headers,
        // Request bodies are never read: a request with one is answered and the
        // connection closed.
        "maxBodyBytes": 0,
    })
}

/// Raises the soft open-files limit to the hard one (every connection is a descriptor) and
/// warns when even that is too low for --max-connections.
fn raise_open_files_limit(l: &http::Limits) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_err() {
        log::warn!("could not raise the open-files limit from {soft} to {hard}");
    }
    let have = getrlimit(Resource::RLIMIT_NOFILE).map_or(soft, |(s, _)| s);
    let need = (l.max_connections + l.reject_budget() + 64) as u64;
    if have < need {
        log::warn!(
            "the open-files limit ({have}) is below --max-connections plus headroom ({need}): raise it (LimitNOFILE= in the unit) or lower --max-connections"
        );
    }
}

/// `agent token ...`
pub fn token_main(a: TokenArgs) -> Result<()> {
    let now = tokens::default_clock().now();
    match a.action {
        TokenAction::Show {
            store,
            pool,
            reveal,
        } => {
            let s = store.store()?.read()?;
            let mut out = std::io::stdout().lock();
            for (p, list) in &s.state.pools {
                if pool.as_ref().is_some_and(|x| x != p) {
                    continue;
                }
                for (i, e) in list.iter().enumerate() {
                    let role = if i == 0 { "current" } else { "previous" };
                    let state = if e.expires <= now { "expired" } else { "valid" };
                    writeln!(
                        out,
                        "{p}\t{role}\tsha256:{}\tcreated={}\texpires={}\t{state}",
                        e.hash.get(..12).unwrap_or(&e.hash),
                        e.created,
                        e.expires
                    )?;
                }
                if reveal && let Some(t) = s.plaintext.get(p) {
                    writeln!(out, "{p}\ttoken\t{t}")?;
                }
            }
            Ok(())
        }
        TokenAction::Rotate { store, pool, ttl } => {
            if !source::valid_pool_name(&pool) {
                bail!("invalid pool name {pool:?}");
            }
            store
                .store()?
                .update(|s| s.rotate(&pool, now, ttl.as_secs()))?;
            eprintln!("rotated the token of pool {pool}");
            Ok(())
        }
        TokenAction::Revoke { store, pool } => {
            let n = store.store()?.update(|s| Ok(s.revoke(&pool)))?;
            eprintln!("revoked {n} token(s) of pool {pool}");
            Ok(())
        }
    }
}

/// The pointer config a machine boots with: merge the server's /ignition with the bearer
/// header, trusting the server's CA.
pub fn pointer_config(url: &str, token: &str, ca_pem: Option<&[u8]>) -> Result<Vec<u8>> {
    use crate::config::types::{HttpHeader, Resource};
    use crate::encoding::data_url::base64_encode;
    let mut c = Config::default();
    c.ignition.config.merge.push(Resource {
        source: Some(url.to_string()),
        http_headers: vec![HttpHeader {
            name: "Authorization".into(),
            value: Some(format!("Bearer {token}")),
        }],
        ..Default::default()
    });
    if let Some(pem) = ca_pem {
        c.ignition
            .security
            .tls
            .certificate_authorities
            .push(Resource {
                source: Some(format!(
                    "data:text/plain;charset=utf-8;base64,{}",
                    base64_encode(pem)
                )),
                ..Default::default()
            });
    }
    let report = config::check(&c);
    if report.has_errors() {
        bail!("pointer config is invalid: {report}");
    }
    let v = Version::new(crate::config::version::minimum(&c).minor.max(1));
    config::to_json_pretty(&c, v).map_err(|e| anyhow::anyhow!(e))
}

/// `agent pointer ...`
pub fn pointer_main(a: PointerArgs) -> Result<()> {
    if !(a.url.starts_with("https://") || a.url.starts_with("http://")) {
        bail!("--url must be an http(s) URL, got {:?}", a.url);
    }
    let s = a.store.store()?.read()?;
    let Some(tok) = s.plaintext.get(&a.pool) else {
        bail!(
            "no token for pool {:?} yet (start `agent serve` or run `agent token rotate --pool {}`)",
            a.pool,
            a.pool
        );
    };
    let ca = match &a.ca {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let out = pointer_config(&a.url, tok, ca.as_deref())?;
    std::io::stdout()
        .write_all(&out)
        .context("writing to stdout")?;
    Ok(())
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

    #[test]
    fn if_none_match() {
        let e = "\"0123abcd\"";
        for (h, want) in [
            ("\"0123abcd\"", true),
            ("W/\"0123abcd\"", true),
            ("\"other\", W/\"0123abcd\"", true),
            ("*", true),
            ("\"other\"", false),
            ("0123abcd", false),
            ("w/\"0123abcd\"", false),
            ("", false),
        ] {
            assert_eq!(etag_matches(h, e), want, "{h}");
        }
    }

    #[test]
    fn pointer() {
        let b = pointer_config(
            "https://mcs:22623/ignition",
            "tok_abcdefghijklmnop",
            Some(b"-----BEGIN CERTIFICATE-----\n"),
        )
        .unwrap();
        let p = config::parse(&b).unwrap();
        assert_eq!(p.version, Version::new(1));
        let m = &p.config.ignition.config.merge[0];
        assert_eq!(
            m.http_headers[0].value.as_deref(),
            Some("Bearer tok_abcdefghijklmnop")
        );
        assert!(
            p.config.ignition.security.tls.certificate_authorities[0]
                .source
                .as_deref()
                .unwrap()
                .starts_with("data:")
        );
    }
}
