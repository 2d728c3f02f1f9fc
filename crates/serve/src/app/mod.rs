//! The app: what a request gets. [`App`] holds the server's shared state (the active
//! generation, the status tracker, the token index, metrics) and answers each request
//! (`/config/<pool>`, `/ignition`, `/healthz`, `/readyz`, `/status`, `/metrics`); the source
//! watcher ([`crate::generations::watch`]) keeps that state current.

pub mod run;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::source::accept::{self, Negotiated};
use crate::generations::checkpoint::{Checkpoint, Retained};
use crate::http::{self, Body, Request, Response};
use crate::metrics::Metrics;
use crate::options::Options;
use crate::source::render::{Pool, etag_matches};
use crate::source::{self, Generation};
use crate::generations::status::Tracker;
use crate::tokens::{self, Clock};
use spec::config::Version;

/// The active generation, which every event loop reads on every request. Each loop keeps a
/// clone of its own (a [`Seen`]) and takes it again only after a change, so a read takes no
/// lock and writes no memory that another CPU reads (measured: the shared lock word and
/// reference count, taken twice per request, were a tenth of the server's own code on the
/// serve benchmark). A loop holds at most one generation this way until its next read.
#[derive(Default)]
pub(crate) struct Active {
    cur: RwLock<Option<Arc<Generation>>>,
    /// Changes with every `set` (0: never set).
    stamp: AtomicU64,
}

/// One reader's clone of an [`Active`]'s generation, and that generation's stamp. A `Seen`
/// serves one `Active` only (each event loop's belongs to the one `App` it serves).
#[derive(Default)]
pub(crate) struct Seen(u64, Option<Arc<Generation>>);

impl Active {
    pub(crate) fn set(&self, g: Option<Arc<Generation>>) {
        let mut cur = self.cur.write().unwrap_or_else(|e| e.into_inner());
        *cur = g;
        // Under the lock: stamps follow the order of the values.
        let next = self.stamp.load(Ordering::Relaxed) + 1;
        self.stamp.store(next, Ordering::Release);
    }

    pub(crate) fn get(&self) -> Option<Arc<Generation>> {
        self.cur.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The active generation, from the reader's clone `seen` (taken again after a change).
    pub(crate) fn seen<'a>(&self, seen: &'a mut Seen) -> Option<&'a Arc<Generation>> {
        let stamp = self.stamp.load(Ordering::Acquire);
        if stamp == 0 || seen.0 != stamp {
            let cur = self.cur.read().unwrap_or_else(|e| e.into_inner());
            // Under the lock: the stamp that goes with `cur`.
            *seen = Seen(self.stamp.load(Ordering::Acquire), cur.clone());
        }
        seen.1.as_ref()
    }
}

/// What each event loop keeps for the [`App`] (see [`http::Handler::local`]).
#[derive(Default)]
pub struct Local {
    /// The loop's number: its part of the metrics' tallies.
    part: usize,
    /// The loop's clone of the active generation.
    seen: Seen,
}

/// The metrics labels of the known spec versions, 3.0.0 on (checked against
/// `spec::config::version` by a test).
const LABELS: [&str; 7] = [
    "3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0", "3.6.0",
];

/// The metrics label of spec version 3.`minor`.0 (no allocation for a known version).
fn version_label(minor: u8) -> Cow<'static, str> {
    match LABELS.get(minor as usize) {
        Some(l) => Cow::Borrowed(l),
        None => Cow::Owned(Version::new(minor).to_string()),
    }
}

/// Where access-log lines are written.
pub(crate) enum AccessSink {
    Stderr,
    File(Mutex<std::fs::File>),
}

/// Shared state of a running server.
pub struct App {
    pub(crate) source: PathBuf,
    pub(crate) clock: Box<dyn Clock>,
    pub metrics: Metrics,
    pub(crate) tracker: Mutex<Tracker>,
    /// Butane translations kept from one read of the source to the next.
    pub(crate) translations: Mutex<crate::source::Translations>,
    pub(crate) active: Active,
    /// Legacy mode: the shared token directory.
    pub(crate) token_store: Option<tokens::Store>,
    /// Derived mode: the key file and the key read from it.
    pub(crate) token_key_file: Option<PathBuf>,
    pub(crate) token_key: RwLock<Option<tokens::Key>>,
    pub(crate) schedule: tokens::Schedule,
    /// Derived mode: the epoch the rotation counter last saw.
    pub(crate) seen_epoch: AtomicU64,
    pub(crate) token_index: RwLock<Option<tokens::Index>>,
    pub(crate) token_error: Mutex<Option<String>>,
    /// Old configs that still-valid derived tokens name, by (pool, config hash).
    pub(crate) retained: RwLock<BTreeMap<(String, String), Retained>>,
    pub(crate) checkpoint: Option<Checkpoint>,
    /// Why a checkpoint was refused at start, or the last failed checkpoint write.
    pub(crate) checkpoint_errors: Mutex<Vec<String>>,
    /// What the checkpoint gave back at start (for /status).
    pub(crate) restored: Mutex<serde_json::Value>,
    pub(crate) ttl: u64,
    pub(crate) soak: u64,
    pub(crate) require_token: bool,
    /// Where each request's access-log line goes (None: nowhere; a file: apart from the
    /// server's log).
    pub(crate) access_log: Option<AccessSink>,
    pub(crate) conns: Arc<http::ConnStats>,
    /// The connection and request limits, as shown in /status.
    pub(crate) limits: serde_json::Value,
    /// Machine reports and the inventory (`POST /report`, the admin listener).
    pub(crate) fleet: crate::fleet::Fleet,
    /// The admin listener's state (bound, or why not), for /status.
    pub admin_status: crate::admin::AdminStatus,
    /// Network boot's settings (`crate::fleet::boot`).
    pub(crate) boot: crate::fleet::boot::Settings,
    /// Where network boot's store-bound requests are answered, off the event loop.
    pub(crate) boot_jobs: Arc<crate::fleet::jobs::Jobs>,
    /// The boot scripts answered last (`crate::fleet::boot::Recent`).
    pub(crate) boot_recent: crate::fleet::boot::Recent,
    /// This app, for the jobs it hands a request to ([`App::set_shared`]); unset (tests
    /// that build an `App` alone), those requests are answered on the event loop.
    pub(crate) shared: std::sync::OnceLock<std::sync::Weak<App>>,
    /// When the server started (seconds since the Unix epoch): since when a store that
    /// could not be opened is down, in /status.
    pub(crate) started: u64,
}

/// The answer when [`crate::fleet::jobs::BOOT_QUEUE`] network-boot requests already wait.
fn boot_queue_full() -> Response {
    Response::text(
        503,
        format!(
            "the boot queue is full ({} network-boot requests, or {} of this client's, are waiting for the inventory store: the boot queue limit); retry",
            crate::fleet::jobs::BOOT_QUEUE,
            crate::fleet::jobs::PER_CLIENT
        ),
    )
    .header("Retry-After", "1")
}

fn method_ok(req: &Request) -> Option<Response> {
    if matches!(req.method(), "GET" | "HEAD") {
        None
    } else {
        Some(Response::new(405).header("Allow", "GET, HEAD"))
    }
}

impl App {
    /// A server's state before the first generation is loaded: the source, tokens,
    /// checkpoint and request handling of `opts`; `limits` as `/status` shows them. Fails
    /// when the token key cannot be read (a server that cannot check tokens must not start);
    /// a checkpoint directory that cannot be used is reported, and the server goes on
    /// without it.
    pub fn new(
        opts: &Options,
        conns: Arc<http::ConnStats>,
        limits: &http::Limits,
    ) -> anyhow::Result<App> {
        let access_log = match &opts.access_log {
            crate::options::AccessLog::Off => None,
            crate::options::AccessLog::Stderr => Some(AccessSink::Stderr),
            crate::options::AccessLog::File(p) => {
                use std::os::unix::fs::OpenOptionsExt;
                // O_NONBLOCK: a FIFO without a reader fails here instead of hanging start-up.
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o640)
                    .custom_flags(nix::libc::O_NONBLOCK)
                    .open(p)
                    .map_err(|e| anyhow::anyhow!("opening --access-log {}: {e}", p.display()))?;
                Some(AccessSink::File(Mutex::new(f)))
            }
        };
        let key = match &opts.token_key {
            Some(p) => Some(tokens::Key::from_file(p)?),
            None => None,
        };
        let mut checkpoint_errors = Vec::new();
        let checkpoint = match &opts.state_dir {
            Some(d) => match Checkpoint::open(d) {
                Ok(c) => Some(c),
                Err(e) => {
                    let msg = format!(
                        "checkpoint directory unusable, running without checkpoints: {e:#}"
                    );
                    log::error!("{msg}");
                    checkpoint_errors.push(msg);
                    None
                }
            },
            None => None,
        };
        if let Some(k) = &key {
            log::info!(
                "tokens derived from the key in {} (key id {})",
                opts.token_key
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string()),
                k.id()
            );
        }
        let schedule =
            tokens::Schedule::new(opts.token_ttl.as_secs(), opts.token_clock_skew.as_secs());
        // A store that cannot be opened is reported (answers, /status, the log), and the
        // server goes on serving configs without an inventory.
        let store = crate::fleet::inventory::open_checked(
            opts.inventory_store,
            opts.state_dir.as_deref(),
            &opts.etcd_endpoints,
            opts.max_machines,
            opts.inventory_reset,
        )
        .map_err(|e| {
            let msg = format!("{e:#}");
            log::error!("inventory store unusable, reports are refused: {msg}");
            msg
        });
        Ok(App {
            fleet: crate::fleet::Fleet::new(store, limits.max_body_bytes, limits.answer_timeout),
            admin_status: Default::default(),
            source: opts.source.clone(),
            clock: tokens::default_clock(),
            metrics: Metrics::default(),
            tracker: Mutex::new(Tracker::default()),
            translations: Mutex::default(),
            active: Active::default(),
            token_store: key.is_none().then(|| tokens::Store::new(opts.token_dir())),
            token_key_file: opts.token_key.clone(),
            token_key: RwLock::new(key),
            schedule,
            seen_epoch: AtomicU64::new(0),
            token_index: RwLock::new(None),
            token_error: Mutex::new(None),
            retained: RwLock::new(BTreeMap::new()),
            checkpoint,
            checkpoint_errors: Mutex::new(checkpoint_errors),
            restored: Mutex::new(serde_json::Value::Null),
            ttl: opts.token_ttl.as_secs(),
            soak: opts.soak.as_secs(),
            require_token: opts.require_token,
            access_log,
            conns,
            limits: limits_json(limits),
            boot: crate::fleet::boot::Settings {
                public_url: opts.public_url.clone(),
                discovery: opts.discovery.clone(),
                token_ttl: opts.boot_token_ttl.as_secs(),
            },
            boot_jobs: crate::fleet::jobs::Jobs::new(
                "boot",
                crate::fleet::jobs::BOOT_THREADS,
                crate::fleet::jobs::BOOT_QUEUE,
            ),
            boot_recent: Default::default(),
            shared: std::sync::OnceLock::new(),
            started: crate::fleet::now_secs(),
        })
    }

    /// Network boot's lines of `/metrics` (Prometheus text).
    pub(crate) fn boot_metrics(&self) -> String {
        format!(
            "# HELP agent_serve_boot_requests_waiting Network-boot requests waiting for the inventory store (queued or being answered).\n# TYPE agent_serve_boot_requests_waiting gauge\nagent_serve_boot_requests_waiting {}\n",
            self.boot_jobs.waiting()
        )
    }

    /// Lets requests that wait on the store (network boot's) be answered by jobs holding
    /// `me` rather than on the event loop.
    pub fn set_shared(me: &Arc<App>) {
        let _ = me.shared.set(Arc::downgrade(me));
    }

    /// Whether tokens are derived from a key (else the legacy store).
    pub(crate) fn derived(&self) -> bool {
        self.token_key_file.is_some()
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now()
    }

    pub(crate) fn active(&self) -> Option<Arc<Generation>> {
        self.active.get()
    }

    /// The inventory store's health for `/status`: `{ok, error, since, failures}`.
    fn inventory_health(&self) -> crate::fleet::inventory::health::Snapshot {
        let mut h = self.fleet.health();
        if self.fleet.store.is_none() {
            h.since = self.started;
        }
        h
    }

    /// `/status` under `--require-token`: only what tells no pool, config, path or error
    /// text (there is no admin credential to show more to): whether the server is ready,
    /// the generation served, and whether the source, the tokens, the checkpoint or the
    /// inventory store have an error. The details are in the log.
    fn public_status_json(&self) -> Vec<u8> {
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let generation = t.active.as_ref().map(|g| g.id.clone());
        let error = t.error.is_some();
        drop(t);
        let tokens_error = self
            .token_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        let checkpoint_error = !self
            .checkpoint_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        let v = serde_json::json!({
            "ready": generation.is_some(),
            "generation": generation,
            "error": error,
            "tokensError": tokens_error,
            "checkpointError": checkpoint_error,
            "inventoryError": !self.inventory_health().ok,
            "adminError": self.admin_status.failed(),
            "detail": "with --require-token /status names no pool: see the server's log",
        });
        let mut b = serde_json::to_vec_pretty(&v).unwrap_or_default();
        b.push(b'\n');
        b
    }

    fn status_json(&self) -> Vec<u8> {
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let src = t.to_json(&self.source.display().to_string());
        let tok_err = self
            .token_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        drop(t);
        let retained: Vec<serde_json::Value> = self
            .retained
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|r| {
                serde_json::json!({"pool": r.pool.name, "config": r.pool.config_name,
                    "tokensExpire": self.schedule.expires(r.last_epoch)})
            })
            .collect();
        let tokens = if self.derived() {
            let key_id = self
                .token_key
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|k| k.id().to_string());
            serde_json::json!({"mode": "derived", "error": tok_err, "ttlSeconds": self.ttl,
                "rotationSeconds": self.schedule.period(),
                "clockSkewSeconds": self.schedule.skew, "keyId": key_id,
                "retainedPayloads": retained})
        } else {
            serde_json::json!({"mode": "store", "error": tok_err, "ttlSeconds": self.ttl})
        };
        let errors = self
            .checkpoint_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let checkpoint = serde_json::json!({
            "dir": self.checkpoint.as_ref().map(|c| c.dir.display().to_string()),
            "errors": errors,
            "restored": *self.restored.lock().unwrap_or_else(|e| e.into_inner()),
        });
        let v = serde_json::json!({
            "sources": [src],
            "tokens": tokens,
            "checkpoint": checkpoint,
            "inventory": self.inventory_health(),
            "openConnections": self.conns.open.load(Ordering::Relaxed),
            "limits": self.limits,
            "admin": self.admin_status.json(),
        });
        let mut b = serde_json::to_vec_pretty(&v).unwrap_or_default();
        b.push(b'\n');
        b
    }

    /// `POST /report`: the token checked here (its pool wins over the body's; none is
    /// unauthenticated, refused with `--require-token`), the rest in [`crate::fleet::report`].
    fn report(&self, req: &Request, out: &mut Response) {
        if req.method() != "POST" {
            *out = Response::new(405).header("Allow", "POST");
            return;
        }
        use crate::fleet::Credential;
        let token = match req.header_one("authorization") {
            // A network-booted machine's report credential (`crate::fleet::boot`): checked by the
            // writers (it must be this machine's), which read the store off the loop.
            _ if let Some(t) = req.query_param("token") => Ok(Credential::Machine {
                token: t.to_string(),
                require: self.require_token,
            }),
            Some(_) => self.authorize(req).map(|g| Credential::Pool(g.pool)),
            None if self.require_token => Err(Response::text(
                401,
                "a report needs the token the config was fetched with",
            )
            .header("WWW-Authenticate", "Bearer")),
            None => Ok(Credential::None),
        };
        crate::fleet::report(&self.fleet, token, req, out);
    }

    /// Checks a bearer token; Ok(what it grants) or the error response.
    fn authorize(&self, req: &Request) -> Result<tokens::Grant, Response> {
        let tok = tokens::parse_bearer(req.header_one("authorization")).map_err(|_| {
            Response::text(401, "missing or malformed Authorization: Bearer <token>")
                .header("WWW-Authenticate", "Bearer")
        })?;
        let now = self.now();
        if self.derived() {
            // The index covers the epochs around the one it was built in; past that (the
            // watcher has not ticked yet) rebuild it first.
            let stale = self
                .token_index
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(|i| self.schedule.epoch(now) > i.epoch + 1);
            if stale {
                self.rebuild_index();
            }
        }
        let idx = self.token_index.read().unwrap_or_else(|e| e.into_inner());
        let Some(idx) = idx.as_ref() else {
            return Err(
                Response::text(503, "tokens are not available yet").header("Retry-After", "5")
            );
        };
        match idx.lookup(tok, now) {
            Some(g) => Ok(g.clone()),
            // Unknown is "not ready yet" for a booting machine: a 5xx makes it retry.
            None => Err(Response::text(503, "token not known (yet)").header("Retry-After", "5")),
        }
    }

    /// The payload a token names: a store token its pool's current config; a derived token
    /// its own config, current or retained. None once the pool left the source (revoked).
    fn granted_pool(&self, g: &tokens::Grant) -> Option<Arc<Pool>> {
        let cur = self.active().and_then(|a| a.pools.get(&g.pool).cloned())?;
        let Some(cfg) = &g.config else {
            return Some(cur);
        };
        if &cur.config_hash == cfg {
            return Some(cur);
        }
        self.retained
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(g.pool.clone(), cfg.clone()))
            .map(|r| r.pool.clone())
    }

    fn config(&self, seen: &mut Seen, req: &Request, name: &str, out: &mut Response) {
        if self.require_token {
            return self.config_with_token(req, name, out);
        }
        if !source::valid_pool_name(name) {
            return out.reset(404);
        }
        let Some(g) = self.active.seen(seen) else {
            *out =
                Response::text(503, "no valid config generation loaded").header("Retry-After", "5");
            return;
        };
        match g.pools.get(name) {
            Some(pool) => self.serve_pool(req, pool, out),
            None => out.reset(404),
        }
    }

    /// `/config/<pool>` with `--require-token`. The token is checked before the pool is looked
    /// up, so the answer never tells whether a pool the caller may not read exists: no or a
    /// malformed `Authorization` → 401, a well-formed unknown token → 503 (machines retry),
    /// another pool's token → 403, whether the requested pool exists or not.
    fn config_with_token(&self, req: &Request, name: &str, out: &mut Response) {
        let grant = match self.authorize(req) {
            Ok(g) => g,
            Err(r) => return *out = r,
        };
        if name != grant.pool {
            *out = Response::text(403, "this token does not grant the requested pool");
            return;
        }
        if self.active().is_none() {
            *out =
                Response::text(503, "no valid config generation loaded").header("Retry-After", "5");
            return;
        }
        self.granted(req, &grant, out)
    }

    fn ignition(&self, req: &Request, out: &mut Response) {
        match self.authorize(req) {
            Ok(grant) => self.granted(req, &grant, out),
            Err(r) => *out = r,
        }
    }

    /// The config `grant` names.
    fn granted(&self, req: &Request, grant: &tokens::Grant, out: &mut Response) {
        match self.granted_pool(grant) {
            Some(p) => self.serve_pool(req, &p, out),
            None => {
                *out = Response::text(503, "token's pool is not being served")
                    .header("Retry-After", "5")
            }
        }
    }

    /// `pool`'s config in the version the request negotiates. Labels the response with the
    /// pool's name: only ever a served pool's, so the metrics' labels stay bounded.
    fn serve_pool(&self, req: &Request, pool: &Pool, out: &mut Response) {
        let minor = match accept::negotiate(req.header("accept").as_deref()) {
            Negotiated::BadMajor(m) => {
                *out = Response::text(
                    400,
                    format!(
                        "spec version {m}.x is not served: this server speaks 3.0.0 through {}",
                        Version::NEWEST
                    ),
                );
                out.labels.set_pool(&pool.name);
                return;
            }
            Negotiated::Spec2(m) => return crate::source::openshift::answer_v2(req, pool, m, out),
            Negotiated::Minor(m) => m,
            Negotiated::Default => pool.min_version.minor,
        };
        let mut etcd = None;
        if pool.name == "master"
            && let Some(v) = req.query_param("etcd_index")
        {
            if v.is_empty() || v.len() > 6 || !v.bytes().all(|b| b.is_ascii_digit()) {
                *out = Response::text(400, "etcd_index must be a small non-negative integer");
                out.labels.set_pool(&pool.name);
                return;
            }
            etcd = v.parse().ok();
        }
        if let Some(i) = etcd {
            // Shares the document with every other response for any index.
            match pool.render_etcd(minor, i) {
                Ok(doc) => answer(req, out, &doc.etag, &doc.header_lines, || doc.body),
                Err(e) => *out = Response::text(406, e),
            }
            out.labels.set_pool(&pool.name);
            out.labels.version = version_label(minor);
            return;
        }
        match pool.rendered(minor) {
            Ok(doc) => answer(req, out, &doc.etag, doc.header_lines(), || doc.http_body()),
            Err(e) => *out = Response::text(406, e),
        }
        out.labels.set_pool(&pool.name);
        out.labels.version = version_label(minor);
    }

    fn access_log(
        sink: &AccessSink,
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
            "method": req.map(|r| r.method()),
            "path": req.map(|r| r.path()),
            "pool": resp.labels.pool(),
            "status": resp.status,
            "version": resp.labels.version,
            "bytes": bytes,
            "durationMs": (took.as_secs_f64() * 1e6).round() / 1e3,
        });
        let mut s = line.to_string();
        s.push('\n');
        match sink {
            AccessSink::Stderr => {
                let p = runtime::logging::journal_prefix(log::Level::Info);
                let _ = std::io::stderr()
                    .lock()
                    .write_all(format!("{p}{s}").as_bytes());
            }
            // One write(2) per line on an O_APPEND file: lines never interleave.
            AccessSink::File(f) => {
                if let Ok(mut f) = f.lock() {
                    let _ = f.write_all(s.as_bytes());
                }
            }
        }
    }
}

impl http::Handler for App {
    type Local = Local;
    type Labels = http::Labels;

    fn local(&self, index: usize) -> Local {
        Local {
            part: index,
            seen: Seen::default(),
        }
    }

    fn handle(&self, local: &mut Local, req: &Request, out: &mut Response) {
        let path = req.path();
        let config = path.strip_prefix("/config/");
        if path == crate::source::render::REPORT_PATH {
            return self.report(req, out);
        }
        if crate::fleet::boot::ours(path) {
            // A machine asking again (or a client looping on one machine): the answer it
            // had, without the store or the boot queue.
            if let Some(r) = self.boot_recent.get(req) {
                return *out = r;
            }
            if crate::fleet::boot::waits_on_store(req)
                && let Some(app) = self.shared.get().and_then(std::sync::Weak::upgrade)
                && let Some(store) = self.fleet.store.clone()
            {
                // Answered by a boot job: the store's writes (a token, a record, a spend)
                // never hold this event loop.
                let generation = self.active.seen(&mut local.seen).cloned();
                let req = req.clone();
                let jobs = self.boot_jobs.clone();
                let client = req.peer;
                return out.later(move |reply| {
                    jobs.push(
                        Box::new(move |refused| {
                            if refused {
                                return reply.send(boot_queue_full());
                            }
                            let mut out = Response::new(200);
                            let ctx = crate::fleet::boot::Ctx {
                                settings: &app.boot,
                                recent: &app.boot_recent,
                                generation: generation.as_ref(),
                                store: Some(&*store),
                                serve: &|r, p, o| app.serve_pool(r, p, o),
                            };
                            crate::fleet::boot::handle(&ctx, &req, &mut out);
                            reply.send(out);
                        }),
                        client,
                    )
                });
            }
            let ctx = crate::fleet::boot::Ctx {
                settings: &self.boot,
                recent: &self.boot_recent,
                generation: self.active.seen(&mut local.seen),
                store: self.fleet.store.as_deref(),
                serve: &|r, p, o| self.serve_pool(r, p, o),
            };
            return crate::fleet::boot::handle(&ctx, req, out);
        }
        let known = config.is_some()
            || matches!(
                path,
                "/healthz" | "/readyz" | "/status" | "/metrics" | "/ignition"
            );
        if !known {
            return out.reset(404);
        }
        if let Some(r) = method_ok(req) {
            return *out = r;
        }
        if let Some(name) = config {
            return self.config(&mut local.seen, req, name, out);
        }
        *out = match path {
            "/healthz" => Response::text(200, "ok"),
            "/readyz" => match self.active() {
                Some(g) => Response::text(200, format!("ready: generation {}", g.id)),
                None => Response::text(503, "no valid config generation loaded"),
            },
            "/status" => {
                let mut r = Response::new(200);
                r.body = Body::Owned(if self.require_token {
                    self.public_status_json()
                } else {
                    self.status_json()
                });
                r.header("Content-Type", "application/json")
            }
            "/metrics" => {
                let mut r = Response::new(200);
                let mut text = self.metrics.render(&self.conns);
                text.push_str(&self.fleet.metrics());
                text.push_str(&self.boot_metrics());
                r.body = Body::Owned(text.into_bytes());
                r.header("Content-Type", "text/plain; version=0.0.4")
            }
            _ => return self.ignition(req, out),
        };
    }

    fn done(
        &self,
        local: &mut Local,
        req: Option<&Request>,
        resp: &Response,
        bytes: usize,
        took: Duration,
        peer: SocketAddr,
    ) {
        self.metrics.request(
            local.part,
            resp.labels.pool(),
            resp.status,
            &resp.labels.version,
            took,
        );
        if let Some(sink) = &self.access_log {
            Self::access_log(sink, req, resp, bytes, took, peer);
        }
    }
}

/// A served document's answer: 304 when `If-None-Match` names its ETag, else 200 with the
/// body; its header lines (Content-Type, ETag, Vary) either way.
pub(crate) fn answer(
    req: &Request,
    out: &mut Response,
    etag: &str,
    lines: &str,
    body: impl FnOnce() -> Body,
) {
    let hit = req
        .header("if-none-match")
        .is_some_and(|v| etag_matches(&v, etag));
    out.reset(if hit { 304 } else { 200 });
    if !hit {
        out.body = body();
    }
    out.add_lines(lines);
}

/// The limits as shown in `/status`.
fn limits_json(l: &http::Limits) -> serde_json::Value {
    serde_json::json!({
        "maxConnections": l.max_connections,
        // 0: no per-address cap.
        "maxConnectionsPerAddress": l.max_connections_per_address,
        "headerTimeoutSeconds": l.header_timeout.as_secs_f64(),
        "idleTimeoutSeconds": l.idle_timeout.as_secs_f64(),
        // A response in progress must deliver this much per second, in every window.
        "minSendRateBytesPerSecond": l.min_send_rate,
        "sendRateWindowSeconds": l.send_window.as_secs_f64(),
        "maxHeaderBytes": l.max_header_bytes,
        "maxHeaders": l.max_headers,
        // A request body (a machine's report) is read whole, with Content-Length only.
        "maxBodyBytes": l.max_body_bytes,
        "maxBodyTotalBytes": l.max_body_total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generation(id: &str) -> Option<Arc<Generation>> {
        Some(Arc::new(Generation {
            id: id.into(),
            dir: PathBuf::new(),
            pools: Default::default(),
            machines: Default::default(),
        }))
    }

    fn id(a: &Active, seen: &mut Seen) -> Option<String> {
        a.seen(seen).map(|g| g.id.clone())
    }

    #[test]
    fn every_reader_sees_each_new_generation() {
        let a = Arc::new(Active::default());
        let b = Active::default();
        let (mut sa, mut sb) = (Seen::default(), Seen::default());
        assert_eq!(id(&a, &mut sa), None);
        a.set(generation("one"));
        b.set(generation("other"));
        assert_eq!(id(&a, &mut sa), Some("one".into()));
        assert_eq!(id(&b, &mut sb), Some("other".into()));
        assert_eq!(id(&a, &mut sa), Some("one".into()));
        let seen: Vec<_> = (0..4)
            .map(|i| {
                let a = a.clone();
                std::thread::spawn(move || {
                    let first = id(&a, &mut Seen::default());
                    if i == 0 {
                        a.set(generation("two"));
                    }
                    (first, a)
                })
            })
            .map(|t| t.join().unwrap())
            .collect();
        assert!(seen.iter().all(|(f, _)| f.is_some()));
        // This reader had a clone of "one": it sees "two" now.
        assert_eq!(id(&a, &mut sa), Some("two".into()));
        a.set(None);
        assert_eq!(id(&a, &mut sa), None);
        assert!(a.get().is_none());
    }

    /// The labels made without allocating are those of the known versions.
    #[test]
    fn version_labels() {
        assert_eq!(
            LABELS.len(),
            spec::config::version::NEWEST_MINOR as usize + 1
        );
        for (m, l) in LABELS.iter().enumerate() {
            assert_eq!(*l, Version::new(m as u8).to_string());
        }
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
}
