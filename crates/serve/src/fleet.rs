//! The fleet's side of the server (docs/reports.md): `POST /report` on the machine-facing
//! listeners, and the admin listener (`--admin-listen`, 127.0.0.1 by default) that alone
//! serves the inventory: `GET /machines` (JSON, `?pool=`, `?state=`), `GET /machines/<id>`,
//! the page (`/ui/`, `/ui/machines/<id>`) and the inventory's metrics. A machine's token never
//! opens the admin listener: it takes the admin token (`--admin-token-file`) when one is set,
//! and only loopback clients reach it otherwise.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::app::App;
use super::http::{Body, Handler, Request, Response};
use super::inventory::{self, Filter, Machine, Origin, Recorded, Refused, State, Store};
use super::page::{self, BootView, MachineView, PoolView, StageView};

/// What the fleet side keeps: the store, and the tallies of `/metrics`.
pub struct Fleet {
    pub store: Option<Arc<dyn Store>>,
    /// Why there is no store (shown in answers and in /status).
    pub store_error: Option<String>,
    /// Reports by result: recorded, duplicate, refused, unavailable.
    tallies: [AtomicU64; 4],
    /// Time spent recording reports (microseconds) and how many.
    record_us: AtomicU64,
    records: AtomicU64,
    /// Machines by state and pool, read from the store at most once per `COUNTS_TTL`.
    counts: Mutex<Option<(Instant, Option<inventory::Counts>)>>,
}

const COUNTS_TTL: Duration = Duration::from_secs(5);
const RESULTS: [&str; 4] = ["recorded", "duplicate", "refused", "unavailable"];

impl Fleet {
    pub fn new(store: Result<Arc<dyn Store>, String>) -> Fleet {
        let (store, store_error) = match store {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        };
        Fleet {
            store,
            store_error,
            tallies: Default::default(),
            record_us: AtomicU64::new(0),
            records: AtomicU64::new(0),
            counts: Mutex::new(None),
        }
    }

    fn tally(&self, i: usize) {
        self.tallies[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The inventory's lines of `/metrics` (Prometheus text).
    pub fn metrics(&self) -> String {
        let mut o = String::new();
        o.push_str("# HELP agent_serve_reports_total Machine reports received, by result.\n# TYPE agent_serve_reports_total counter\n");
        for (i, r) in RESULTS.iter().enumerate() {
            o.push_str(&format!(
                "agent_serve_reports_total{{result=\"{r}\"}} {}\n",
                self.tallies[i].load(Ordering::Relaxed)
            ));
        }
        o.push_str("# HELP agent_serve_report_seconds Time to record a report in the inventory store.\n# TYPE agent_serve_report_seconds summary\n");
        o.push_str(&format!(
            "agent_serve_report_seconds_sum {}\nagent_serve_report_seconds_count {}\n",
            self.record_us.load(Ordering::Relaxed) as f64 / 1e6,
            self.records.load(Ordering::Relaxed)
        ));
        let Some(store) = &self.store else {
            return o;
        };
        let mut cache = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = cache
            .as_ref()
            .is_some_and(|(t, _)| t.elapsed() < COUNTS_TTL);
        if !fresh {
            // A store that cannot answer is asked again after COUNTS_TTL, not at every
            // scrape: the last counts stay (or none).
            match store.counts() {
                Ok(c) => *cache = Some((Instant::now(), Some(c))),
                Err(e) => {
                    log::warn!("counting the inventory's machines: {e:#}");
                    let last = cache.take().and_then(|(_, c)| c);
                    *cache = Some((Instant::now(), last));
                }
            }
        }
        if let Some((_, Some(counts))) = cache.as_ref() {
            o.push_str("# HELP agent_serve_machines Machines in the inventory, by state and pool.\n# TYPE agent_serve_machines gauge\n");
            for ((state, pool), n) in counts {
                o.push_str(&format!(
                    "agent_serve_machines{{state=\"{}\",pool=\"{}\"}} {n}\n",
                    state.as_str(),
                    label(pool)
                ));
            }
        }
        o
    }
}

/// A Prometheus label value: quotes, backslashes and line breaks escaped.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn json(status: u16, v: &serde_json::Value) -> Response {
    let mut r = Response::new(status);
    let mut b = serde_json::to_vec_pretty(v).unwrap_or_default();
    b.push(b'\n');
    r.body = Body::Owned(b);
    r.header("Content-Type", "application/json")
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `POST /report`: a machine's report, authenticated by the token it fetched its config
/// with (its pool wins over the body's); without a token it is recorded as unauthenticated,
/// unless `--require-token`. Answered once durable: 200 (new or a retry), 400/413 with the
/// field and limit, 401 for a bad token, 503 (Retry-After) when the store cannot take it.
pub fn report(app: &App, req: &Request, out: &mut Response) {
    if req.method() != "POST" {
        *out = Response::new(405).header("Allow", "POST");
        return;
    }
    let fleet = &app.fleet;
    let token_pool = match req.header_one("authorization") {
        Some(_) => match app.authorize(req) {
            Ok(g) => Some(g.pool),
            Err(r) => {
                fleet.tally(2);
                *out = r;
                return;
            }
        },
        None if app.require_token => {
            fleet.tally(2);
            *out = Response::text(401, "a report needs the token the config was fetched with")
                .header("WWW-Authenticate", "Bearer");
            return;
        }
        None => None,
    };
    let report = match inventory::parse(req.body()) {
        Ok(r) => r,
        Err(e) => {
            fleet.tally(2);
            *out = match e {
                Refused::TooLarge(m) => Response::text(413, m),
                Refused::Invalid(m) => Response::text(400, m),
            };
            return;
        }
    };
    let Some(store) = &fleet.store else {
        fleet.tally(3);
        *out = Response::text(
            503,
            format!(
                "no inventory store: {}",
                fleet.store_error.as_deref().unwrap_or("not configured")
            ),
        )
        .header("Retry-After", "30");
        return;
    };
    let origin = Origin {
        token_pool,
        received: now_secs(),
    };
    let t = Instant::now();
    let r = store.record(&report, &origin);
    fleet
        .record_us
        .fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
    fleet.records.fetch_add(1, Ordering::Relaxed);
    *out = match r {
        Ok(Recorded::New) => {
            fleet.tally(0);
            json(200, &serde_json::json!({"recorded": "new"}))
        }
        Ok(Recorded::Duplicate) => {
            fleet.tally(1);
            json(200, &serde_json::json!({"recorded": "duplicate"}))
        }
        Err(e) => {
            fleet.tally(3);
            log::error!("recording a report of machine {}: {e:#}", report.machine.id);
            Response::text(503, "the inventory store cannot take the report now; retry")
                .header("Retry-After", "5")
        }
    };
}

/// The admin listener's handler.
pub struct Admin {
    pub app: Arc<App>,
    /// `--admin-token-file`'s token; None: loopback clients only (checked at bind).
    pub token: Option<String>,
}

impl Admin {
    fn allowed(&self, req: &Request) -> bool {
        let Some(want) = &self.token else {
            return true;
        };
        let Some(h) = req.header_one("authorization") else {
            return false;
        };
        let given = if let Some(t) = h.strip_prefix("Bearer ") {
            t.trim().to_string()
        } else if let Some(b) = h.strip_prefix("Basic ") {
            // A browser's prompt: any user name, the token as the password.
            let Ok(d) = spec::encoding::data_url::base64_decode(b.trim().as_bytes()) else {
                return false;
            };
            let s = String::from_utf8_lossy(&d).into_owned();
            s.split_once(':')
                .map(|(_, p)| p.to_string())
                .unwrap_or_default()
        } else {
            return false;
        };
        constant_time_eq(given.as_bytes(), want.as_bytes())
    }

    fn route(&self, req: &Request) -> Response {
        let path = req.path();
        if path == "/healthz" {
            return Response::text(200, "ok");
        }
        if !self.allowed(req) {
            return Response::text(401, "the admin token is needed (--admin-token-file)").header(
                "WWW-Authenticate",
                "Basic realm=\"agent serve\", charset=\"UTF-8\"",
            );
        }
        if !matches!(req.method(), "GET" | "HEAD") {
            return Response::new(405).header("Allow", "GET, HEAD");
        }
        if path == "/metrics" {
            let mut r = Response::new(200);
            r.body = Body::Owned(self.app.fleet.metrics().into_bytes());
            return r.header("Content-Type", "text/plain; version=0.0.4");
        }
        if path == "/ui" {
            return Response::new(308).header("Location", "/ui/");
        }
        let Some(store) = &self.app.fleet.store else {
            return Response::text(
                503,
                format!(
                    "no inventory store: {}",
                    self.app
                        .fleet
                        .store_error
                        .as_deref()
                        .unwrap_or("not configured")
                ),
            );
        };
        let filter = match filter(req) {
            Ok(f) => f,
            Err(e) => return Response::text(400, e),
        };
        match path {
            "/machines" => match store.machines(&filter) {
                Ok(ms) => json(200, &serde_json::json!({ "machines": ms })),
                Err(e) => store_error(e),
            },
            "/ui/" => match store.machines(&filter) {
                Ok(mut ms) => {
                    ms.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then(a.id.cmp(&b.id)));
                    let pools = self.pools(&ms);
                    let views: Vec<MachineView> = ms.iter().map(view).collect();
                    html(page::index(&pools, &views, &ts(now_secs())))
                }
                Err(e) => store_error(e),
            },
            _ => {
                let (id, ui) = if let Some(id) = path.strip_prefix("/machines/") {
                    (id, false)
                } else if let Some(id) = path.strip_prefix("/ui/machines/") {
                    (id, true)
                } else {
                    return Response::new(404);
                };
                let Some(id) = percent_decode(id).filter(|i| valid_id(i)) else {
                    return Response::new(404);
                };
                match store.machine(&id) {
                    Ok(Some(m)) if ui => html(page::machine(&view(&m), &ts(now_secs()))),
                    Ok(Some(m)) => json(200, &serde_json::to_value(&m).unwrap_or_default()),
                    Ok(None) => Response::text(404, "no such machine"),
                    Err(e) => store_error(e),
                }
            }
        }
    }

    /// The pools of the active generation with the source's generations, and how many
    /// machines of the inventory each has.
    fn pools(&self, machines: &[Machine]) -> Vec<PoolView> {
        let t = self.app.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let generation = |g: Option<&str>| g.map_or_else(|| "—".to_string(), str::to_string);
        let assigned = generation(t.assigned.as_ref().map(|g| g.generation.as_str()));
        let active = generation(t.active_ref.as_ref().map(|g| g.generation.as_str()));
        let lkg = generation(t.lkg_ref.as_ref().map(|g| g.generation.as_str()));
        let names: Vec<String> = t
            .active
            .as_ref()
            .map(|g| g.pools.keys().cloned().collect())
            .unwrap_or_default();
        drop(t);
        names
            .into_iter()
            .map(|name| PoolView {
                machines: machines
                    .iter()
                    .filter(|m| m.pool.as_deref() == Some(name.as_str()))
                    .count(),
                name,
                assigned: assigned.clone(),
                active: active.clone(),
                last_known_good: lkg.clone(),
            })
            .collect()
    }
}

impl Handler for Admin {
    type Local = ();

    fn local(&self, _: usize) {}

    fn handle(&self, _: &mut (), req: &Request, out: &mut Response) {
        *out = self.route(req);
    }

    fn done(
        &self,
        _: &mut (),
        _: Option<&Request>,
        _: &Response,
        _: usize,
        _: Duration,
        _: SocketAddr,
    ) {
    }
}

fn html(body: String) -> Response {
    let mut r = Response::new(200);
    r.body = Body::Owned(body.into_bytes());
    r.header("Content-Type", "text/html; charset=utf-8")
        .header("Cache-Control", "no-store")
        .header(
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'",
        )
}

fn store_error(e: anyhow::Error) -> Response {
    log::error!("reading the inventory: {e:#}");
    Response::text(503, "the inventory store cannot be read now; retry").header("Retry-After", "5")
}

fn filter(req: &Request) -> Result<Filter, String> {
    let state = match req.query_param("state") {
        Some(s) => Some(s.parse::<State>()?),
        None => None,
    };
    Ok(Filter {
        pool: req.query_param("pool").map(str::to_string),
        state,
    })
}

/// Machine ids as reports may carry them (docs/reports.md): letters, digits and `.:_-`.
fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= inventory::limits::ID_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'_' | b'-'))
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn ts(secs: u64) -> String {
    let u = runtime::util::utc(secs);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        u.year, u.month, u.day, u.hour, u.minute, u.second
    )
}

/// A machine as the page shows it: boots newest first; what each stage changed in words.
fn view(m: &Machine) -> MachineView {
    MachineView {
        id: m.id.clone(),
        hostname: m.identity.hostname.clone(),
        state: m.state.map_or("unknown", State::as_str).to_string(),
        pool: m.pool.clone(),
        config: m.config.as_ref().and_then(|c| c.name.clone()),
        config_hash: m.config.as_ref().and_then(|c| c.hash.clone()),
        first_seen: ts(m.first_seen),
        last_seen: ts(m.last_seen),
        authenticated: m.authenticated,
        platform: m.identity.platform.clone(),
        serial: m.identity.serial.clone(),
        macs: m.identity.macs.clone(),
        agent: m.agent.clone(),
        boots: m
            .boots
            .iter()
            .rev()
            .map(|b| BootView {
                boot_id: b.boot_id.clone(),
                started: ts(b.first_seen),
                stages: b
                    .stages
                    .iter()
                    .map(|s| {
                        let mut changes = Vec::new();
                        if let Some(d) = &s.detail {
                            let c = &d.changes;
                            for (what, list) in [
                                ("partition created", &c.partitions.created),
                                ("partition kept", &c.partitions.kept),
                                ("partition deleted", &c.partitions.deleted),
                                ("filesystem made", &c.filesystems.made),
                                ("filesystem reused", &c.filesystems.reused),
                            ] {
                                changes.extend(list.iter().map(|x| format!("{what}: {x}")));
                            }
                            if !c.paths.is_empty() {
                                changes.push(format!(
                                    "{} paths written{}",
                                    c.paths.len() as u64 + c.paths_truncated,
                                    c.paths
                                        .first()
                                        .map_or(String::new(), |p| format!(" ({p}, …)"))
                                ));
                            }
                        }
                        StageView {
                            stage: format!("{:?}", s.stage).to_lowercase(),
                            outcome: format!("{:?}", s.outcome).to_lowercase(),
                            duration_ms: Some(s.duration_ms),
                            changes,
                            error: s.error.clone(),
                            log_tail: s
                                .detail
                                .as_ref()
                                .map(|d| d.log_tail.clone())
                                .unwrap_or_default(),
                        }
                    })
                    .collect(),
            })
            .collect(),
    }
}
