//! The app: what a request to a machine-facing listener gets. [`App`] is a thin router over
//! the concerns' own values — the generations (`crate::generations`), the tokens
//! (`crate::tokens::state`), the fleet (`crate::fleet`: reports, network boot, the inventory)
//! and the metrics — answering from [`ROUTES`] (`/config/<pool>`, `/ignition`, `/report`,
//! network boot, `/healthz`, `/readyz`, `/status`, `/metrics`); `run` starts the server.

pub mod run;

use std::borrow::Cow;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::admin::AdminStatus;
use crate::fleet::boot::{self, Boot};
use crate::fleet::{Credential, Fleet};
use crate::generations::{Generations, Seen};
use crate::http::{self, Body, Request, Response};
use crate::metrics::Metrics;
use crate::options::Options;
use crate::routes::{self, GET, POST, Pattern, READ, Route};
use crate::source::accept::{self, Negotiated};
use crate::source::render::{Pool, answer};
use crate::source::{self, Generation};
use crate::tokens::state::Tokens;
use crate::tokens::{self as token, Grant};
use spec::config::Version;

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
enum AccessSink {
    Stderr,
    File(Mutex<std::fs::File>),
}

/// Shared state of a running server: the concerns' values and how requests are answered.
pub struct App {
    /// The source's generations (the watcher's value).
    pub generations: Arc<Generations>,
    /// The bearer tokens.
    pub tokens: Arc<Tokens>,
    pub metrics: Arc<Metrics>,
    /// Machine reports, network boot and the inventory (`POST /report`, the admin listener).
    pub fleet: Arc<Fleet>,
    /// The admin listener's state (bound, or why not), for /status.
    pub admin_status: AdminStatus,
    /// Where each request's access-log line goes (None: nowhere; a file: apart from the
    /// server's log).
    access_log: Option<AccessSink>,
    conns: Arc<http::ConnStats>,
    /// The connection and request limits, as shown in /status.
    limits: serde_json::Value,
    require_token: bool,
    /// This app, for the jobs it hands a request to ([`App::set_shared`]); unset (tests
    /// that build an `App` alone), those requests are answered on the event loop.
    shared: OnceLock<Weak<App>>,
}

/// Who may call a route of the machine-facing listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// Anyone.
    Anyone,
    /// With `--require-token`, a pool's bearer token; anyone without.
    PoolIfRequired,
    /// A pool's bearer token.
    Pool,
    /// A report's credential: a network-booted machine's `?token=`, a pool's bearer token,
    /// or (without `--require-token`) none.
    Reporter,
}

/// Who called, as the route's [`Caller`] found.
enum Who {
    Anyone,
    Pool(Grant),
    /// A refused credential too: the fleet counts the refused report.
    Reporter(Result<Credential, Response>),
}

type Handle = fn(&App, &mut Local, &Request, &str, Who, &mut Response);

/// The machine-facing listeners' routes: a path matching none is 404, a method the route does
/// not answer 405 (before any token is checked).
#[rustfmt::skip]
const ROUTES: &[Route<Caller, Handle>] = &[
    Route { methods: POST, path: Pattern::Exact(crate::source::render::REPORT_PATH), auth: Caller::Reporter, handler: App::report },
    Route { methods: READ, path: Pattern::Exact("/boot.ipxe"), auth: Caller::Anyone, handler: App::boot },
    Route { methods: READ, path: Pattern::Exact("/ipxe"), auth: Caller::Anyone, handler: App::boot },
    Route { methods: GET, path: Pattern::Exact("/machine-config"), auth: Caller::Anyone, handler: App::boot },
    Route { methods: READ, path: Pattern::Prefix("/assets/"), auth: Caller::Anyone, handler: App::boot },
    Route { methods: READ, path: Pattern::Prefix("/config/"), auth: Caller::PoolIfRequired, handler: App::config },
    Route { methods: READ, path: Pattern::Exact("/ignition"), auth: Caller::Pool, handler: App::ignition },
    Route { methods: READ, path: Pattern::Exact("/healthz"), auth: Caller::Anyone, handler: |_, _, _, _, _, out| *out = Response::text(200, "ok") },
    Route { methods: READ, path: Pattern::Exact("/readyz"), auth: Caller::Anyone, handler: App::readyz },
    Route { methods: READ, path: Pattern::Exact("/status"), auth: Caller::Anyone, handler: App::status },
    Route { methods: READ, path: Pattern::Exact("/metrics"), auth: Caller::Anyone, handler: App::metrics },
];

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
        let access_log = open_access_log(&opts.access_log)?;
        let tokens = Arc::new(Tokens::new(
            opts.token_key.clone(),
            opts.token_dir(),
            opts.token_ttl.as_secs(),
            opts.token_clock_skew.as_secs(),
            token::default_clock(),
        )?);
        let metrics = Arc::new(Metrics::default());
        let generations = Arc::new(Generations::new(
            opts.source.clone(),
            opts.state_dir.as_deref(),
            opts.soak.as_secs(),
            tokens.clone(),
            metrics.clone(),
        ));
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
        let boot = boot::Settings {
            public_url: opts.public_url.clone(),
            discovery: opts.discovery.clone(),
            token_ttl: opts.boot_token_ttl.as_secs(),
            running_deadline: opts.running_deadline.map(|d| d.as_secs().max(1)),
        };
        Ok(App {
            generations,
            tokens,
            metrics,
            fleet: Arc::new(Fleet::new(
                store,
                limits.max_body_bytes,
                limits.answer_timeout,
                boot,
            )),
            admin_status: Default::default(),
            access_log,
            conns,
            limits: limits_json(limits),
            require_token: opts.require_token,
            shared: OnceLock::new(),
        })
    }

    /// Lets requests that wait on the store (network boot's) be answered by jobs holding
    /// `me` rather than on the event loop.
    pub fn set_shared(me: &Arc<App>) {
        let _ = me.shared.set(Arc::downgrade(me));
    }

    fn active(&self) -> Option<Arc<Generation>> {
        self.generations.active()
    }

    /// Who called, as `caller` asks; Err: the answer refusing the request.
    fn check(&self, caller: Caller, req: &Request) -> Result<Who, Response> {
        let authorize = || self.tokens.authorize(req, || self.active()).map(Who::Pool);
        match caller {
            Caller::Anyone => Ok(Who::Anyone),
            Caller::PoolIfRequired if self.require_token => authorize(),
            Caller::PoolIfRequired => Ok(Who::Anyone),
            Caller::Pool => authorize(),
            Caller::Reporter => Ok(Who::Reporter(self.reporter(req))),
        }
    }

    /// A report's credential: the token checked here (its pool wins over the body's; none is
    /// unauthenticated, refused with `--require-token`).
    fn reporter(&self, req: &Request) -> Result<Credential, Response> {
        match req.header_one("authorization") {
            // A network-booted machine's report credential (`crate::fleet::boot`): checked by
            // the writers (it must be this machine's), which read the store off the loop.
            _ if let Some(t) = req.query_param("token") => Ok(Credential::Machine {
                token: t.to_string(),
                require: self.require_token,
            }),
            Some(_) => self
                .tokens
                .authorize(req, || self.active())
                .map(|g| Credential::Pool(g.pool)),
            None if self.require_token => Err(Response::text(
                401,
                "a report needs the token the config was fetched with",
            )
            .header("WWW-Authenticate", "Bearer")),
            None => Ok(Credential::None),
        }
    }

    /// `POST /report`: the rest in [`crate::fleet::report`].
    fn report(&self, _: &mut Local, req: &Request, _: &str, who: Who, out: &mut Response) {
        if let Who::Reporter(c) = who {
            crate::fleet::report(&self.fleet, c, req, out);
        }
    }

    /// Network boot: the answer a machine asking again had, else one made by a boot job
    /// when it waits on the store (its writes never hold the event loop), else here.
    fn boot(&self, local: &mut Local, req: &Request, _: &str, _: Who, out: &mut Response) {
        let boot = &self.fleet.boot;
        if let Some(r) = boot.recent.get(req) {
            return *out = r;
        }
        if boot::waits_on_store(req)
            && let Some(app) = self.shared.get().and_then(Weak::upgrade)
            && let Some(store) = self.fleet.store.clone()
        {
            let generation = self.generations.seen(&mut local.seen).cloned();
            let lkg = self.generations.last_known_good();
            let req = req.clone();
            let jobs = boot.jobs.clone();
            let client = req.peer;
            return out.later(move |reply| {
                jobs.push(
                    Box::new(move |refused| {
                        if refused {
                            return reply.send(Boot::queue_full());
                        }
                        let mut out = Response::new(200);
                        let ctx = boot::Ctx {
                            settings: &app.fleet.boot.settings,
                            recent: &app.fleet.boot.recent,
                            generation: generation.as_ref(),
                            last_known_good: lkg.as_ref(),
                            store: Some(&*store),
                            serve: &|r, p, o| serve_pool(r, p, o),
                        };
                        boot::handle(&ctx, &req, &mut out);
                        reply.send(out);
                    }),
                    client,
                )
            });
        }
        // Only `/machine-config` reads lastKnownGood (for a rollout), and it waits on the
        // store: answered here only without jobs (tests that build an `App` alone).
        let lkg = boot::waits_on_store(req)
            .then(|| self.generations.last_known_good())
            .flatten();
        let ctx = boot::Ctx {
            settings: &boot.settings,
            recent: &boot.recent,
            generation: self.generations.seen(&mut local.seen),
            last_known_good: lkg.as_ref(),
            store: self.fleet.store.as_deref(),
            serve: &|r, p, o| serve_pool(r, p, o),
        };
        boot::handle(&ctx, req, out)
    }

    /// `/config/<pool>`. With `--require-token` the token was checked before the pool is
    /// looked up, so the answer never tells whether a pool the caller may not read exists:
    /// no or a malformed `Authorization` → 401, a well-formed unknown token → 503 (machines
    /// retry), another pool's token → 403, whether the requested pool exists or not.
    fn config(&self, local: &mut Local, req: &Request, name: &str, who: Who, out: &mut Response) {
        if let Who::Pool(grant) = who {
            if name != grant.pool {
                *out = Response::text(403, "this token does not grant the requested pool");
                return;
            }
            if self.active().is_none() {
                return *out = not_loaded();
            }
            return self.granted(req, &grant, out);
        }
        if !source::valid_pool_name(name) {
            return out.reset(404);
        }
        let Some(g) = self.generations.seen(&mut local.seen) else {
            return *out = not_loaded();
        };
        match g.pools.get(name) {
            // A pool with a rollout policy: a fetch that names no machine is never a
            // canary, it gets the previous config until the rollout completes.
            Some(_) if !g.rollouts.is_empty() && g.rollouts.contains_key(name) => {
                match self.generations.unfinished_previous(name) {
                    Some(prev) => serve_pool(req, &prev, out),
                    None => serve_pool(req, &g.pools[name], out),
                }
            }
            Some(pool) => serve_pool(req, pool, out),
            None => out.reset(404),
        }
    }

    /// `/ignition`: the config the token names.
    fn ignition(&self, _: &mut Local, req: &Request, _: &str, who: Who, out: &mut Response) {
        if let Who::Pool(grant) = who {
            self.granted(req, &grant, out)
        }
    }

    /// The config `grant` names.
    fn granted(&self, req: &Request, grant: &Grant, out: &mut Response) {
        match self.tokens.granted_pool(grant, self.active().as_deref()) {
            Some(p) => serve_pool(req, &p, out),
            None => {
                *out = Response::text(503, "token's pool is not being served")
                    .header("Retry-After", "5")
            }
        }
    }

    fn readyz(&self, _: &mut Local, _: &Request, _: &str, _: Who, out: &mut Response) {
        *out = match self.active() {
            Some(g) => Response::text(200, format!("ready: generation {}", g.id)),
            None => Response::text(503, "no valid config generation loaded"),
        }
    }

    fn status(&self, _: &mut Local, _: &Request, _: &str, _: Who, out: &mut Response) {
        let mut r = Response::new(200);
        r.body = Body::Owned(if self.require_token {
            self.public_status_json()
        } else {
            self.status_json()
        });
        *out = r.header("Content-Type", "application/json")
    }

    fn metrics(&self, _: &mut Local, _: &Request, _: &str, _: Who, out: &mut Response) {
        let mut r = Response::new(200);
        let mut text = self.metrics.render(&self.conns);
        text.push_str(&self.fleet.metrics());
        text.push_str(&self.fleet.boot.metrics());
        text.push_str(&self.fleet.rollouts.metrics());
        r.body = Body::Owned(text.into_bytes());
        *out = r.header("Content-Type", "text/plain; version=0.0.4")
    }

    /// `/status` under `--require-token`: only what tells no pool, config, path or error
    /// text (there is no admin credential to show more to): whether the server is ready,
    /// the generation served, and whether the source, the tokens, the checkpoint or the
    /// inventory store have an error. The details are in the log.
    fn public_status_json(&self) -> Vec<u8> {
        let (generation, error, checkpoint_error) = self.generations.public_status();
        let v = serde_json::json!({
            "ready": generation.is_some(),
            "generation": generation,
            "error": error,
            "tokensError": self.tokens.error().is_some(),
            "checkpointError": checkpoint_error,
            "inventoryError": !self.fleet.status_health().ok,
            "adminError": self.admin_status.failed(),
            "detail": "with --require-token /status names no pool: see the server's log",
        });
        let mut b = serde_json::to_vec_pretty(&v).unwrap_or_default();
        b.push(b'\n');
        b
    }

    fn status_json(&self) -> Vec<u8> {
        let v = serde_json::json!({
            "sources": [self.generations.source_json()],
            "tokens": self.tokens.status_json(),
            "checkpoint": self.generations.checkpoint_json(),
            "inventory": self.fleet.status_health(),
            "openConnections": self.conns.open.load(Ordering::Relaxed),
            "limits": self.limits,
            "admin": self.admin_status.json(),
            "rollouts": self.fleet.rollouts.json(),
        });
        let mut b = serde_json::to_vec_pretty(&v).unwrap_or_default();
        b.push(b'\n');
        b
    }

    fn log_access(
        sink: &AccessSink,
        req: Option<&Request>,
        resp: &Response,
        bytes: usize,
        took: Duration,
        peer: SocketAddr,
    ) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // Never the query string's secrets nor any header: method, path, labels, sizes.
        let line = serde_json::json!({
            "time": runtime::util::rfc3339_millis(now),
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

/// The answer while no generation is loaded.
fn not_loaded() -> Response {
    Response::text(503, "no valid config generation loaded").header("Retry-After", "5")
}

/// Opens `--access-log`'s file (O_NONBLOCK: a FIFO without a reader fails here instead of
/// hanging start-up).
fn open_access_log(how: &crate::options::AccessLog) -> anyhow::Result<Option<AccessSink>> {
    use crate::options::AccessLog;
    use std::os::unix::fs::OpenOptionsExt;
    Ok(match how {
        AccessLog::Off => None,
        AccessLog::Stderr => Some(AccessSink::Stderr),
        AccessLog::File(p) => {
            let f = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o640)
                .custom_flags(nix::libc::O_NONBLOCK)
                .open(p)
                .map_err(|e| anyhow::anyhow!("opening --access-log {}: {e}", p.display()))?;
            Some(AccessSink::File(Mutex::new(f)))
        }
    })
}

/// `pool`'s config in the version the request negotiates. Labels the response with the
/// pool's name: only ever a served pool's, so the metrics' labels stay bounded.
fn serve_pool(req: &Request, pool: &Pool, out: &mut Response) {
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
        Negotiated::Spec2(m) => {
            return crate::source::openshift::spec2::answer_v2(req, pool, m, out);
        }
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

impl http::Handler for App {
    type Local = Local;
    type Labels = http::Labels;

    fn local(&self, index: usize) -> Local {
        Local {
            part: index,
            seen: Seen::default(),
        }
    }

    /// The answer from [`ROUTES`]: the path, then the method, then who called.
    fn handle(&self, local: &mut Local, req: &Request, out: &mut Response) {
        let Some((route, arg)) = routes::find(ROUTES, req.path()) else {
            return out.reset(404);
        };
        if let Some(r) = route.refuse_method(req) {
            return *out = r;
        }
        match self.check(route.auth, req) {
            Ok(who) => (route.handler)(self, local, req, arg, who, out),
            Err(r) => *out = r,
        }
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
            Self::log_access(sink, req, resp, bytes, took, peer);
        }
    }
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
    use crate::source::render::etag_matches;

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
