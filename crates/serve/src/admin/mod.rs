//! The admin listener (`--admin-listen`, 127.0.0.1:22625 by default): the only place the
//! inventory is served — `GET /machines` (JSON, `?pool=`, `?state=`), `GET /machines/<id>`,
//! `GET /machines/summary`, `DELETE /machines/<id>` (a decommissioned machine), the page
//! (`/ui/`, `/ui/machines/<id>`) and the inventory's metrics; the JSON is [`api`]'s
//! (docs/openapi.json). A machine's token never
//! opens it: it takes the admin token (`--admin-token-file`) when one is set, and only
//! loopback clients reach it otherwise (checked when it is bound). Whatever the token, it
//! answers only requests that name it in `Host`, and changes nothing for a request a
//! browser could send from another page ([`crate::admin::auth`]); no answer may be framed.

pub mod api;
pub mod auth;
pub mod page;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use self::auth::{Challenges, Hosts, Proven};
use self::page::{BootView, MachineView, StageView};
use crate::fleet::Fleet;
use crate::fleet::inventory::Store;
use crate::fleet::inventory::{self, Filter, Machine, State};
use crate::fleet::rollout;
use crate::fleet::{json, now_secs};
use crate::generations::Generations;
use crate::http::{Body, Handler, Request, Response};
use crate::routes::{self, ANY, POST, Pattern, READ, Route};

/// The admin listener's handler.
pub struct Admin {
    /// The inventory and network boot (what the admin listener serves and changes).
    pub fleet: Arc<Fleet>,
    /// The source's generations (the pools the page and the gauges name).
    pub generations: Arc<Generations>,
    /// `--admin-token-file`'s token; None: loopback clients only (checked at bind).
    pub token: Option<String>,
    /// The listings (`/machines`, `/ui/`) rendered last, shared by the answers.
    pub listings: Listings,
    /// The `Host` (and `Origin`) values it answers to.
    pub hosts: Hosts,
    /// The nonces of the token's challenge-response.
    pub challenges: Challenges,
}

/// The Content-Security-Policy of every answer: nothing loads but inline style (the page's),
/// no script, and no page may frame it (with `X-Frame-Options: DENY` for older browsers).
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'";

/// The admin listener's state as `/status` shows it (`"admin"`): its address, whether it is
/// bound, and the error that kept it from binding (retried every
/// `ADMIN_RETRY`, every 5 s). Null without an admin listener.
#[derive(Default)]
pub struct AdminStatus(Mutex<serde_json::Value>);

impl AdminStatus {
    /// The state after a try to bind; `since` stays while it is the same.
    pub fn set(&self, listen: SocketAddr, error: Option<String>) {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if v["bound"] == error.is_none() && v["error"].as_str() == error.as_deref() {
            return;
        }
        *v = serde_json::json!({
            "listen": listen.to_string(),
            "bound": error.is_none(),
            "error": error,
            "since": crate::http::time(now_secs()),
        });
    }

    pub fn json(&self) -> serde_json::Value {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The admin listener was asked for and is not bound.
    pub fn failed(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)["bound"] == false
    }
}

/// How long a rendered listing is served again while no report was recorded here (another
/// replica's reports to a shared etcd show after this).
pub const LISTING_WINDOW: Duration = Duration::from_secs(1);
/// Listings kept (by path and query).
const LISTINGS_KEPT: usize = 16;

/// Rendered listings (`/machines`, `/ui/`, by path and query), each shared by every answer
/// made from it: 256 admin clients that do not read their answers hold one listing, not 256
/// copies. One is made again once a report was recorded since (the fleet's
/// [`version`](crate::fleet::Fleet::version)) or [`LISTING_WINDOW`] has passed.
#[derive(Default)]
pub struct Listings(Mutex<Vec<Listing>>);

struct Listing {
    key: String,
    version: u64,
    made: Instant,
    body: Arc<[u8]>,
}

impl Listings {
    /// Forgets every kept listing (the inventory changed other than by a report).
    pub fn clear(&self) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The listing `key` at inventory `version`: the kept one while current, else `render`'s
    /// (kept unless it is an error answer).
    pub fn get(
        &self,
        key: &str,
        version: u64,
        render: impl FnOnce() -> Result<Vec<u8>, Response>,
    ) -> Result<Arc<[u8]>, Response> {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        kept.retain(|l| l.version == version && now.duration_since(l.made) < LISTING_WINDOW);
        if let Some(l) = kept.iter().find(|l| l.key == key) {
            return Ok(l.body.clone());
        }
        let body: Arc<[u8]> = render()?.into();
        if kept.len() >= LISTINGS_KEPT {
            kept.remove(0);
        }
        kept.push(Listing {
            key: key.to_string(),
            version,
            made: now,
            body: body.clone(),
        });
        Ok(body)
    }
}

impl Admin {
    pub fn new(
        fleet: Arc<Fleet>,
        generations: Arc<Generations>,
        token: Option<String>,
        hosts: Hosts,
    ) -> anyhow::Result<Admin> {
        Ok(Admin {
            fleet,
            generations,
            token,
            listings: Listings::default(),
            hosts,
            challenges: Challenges::new()?,
        })
    }

    /// None when `req` may go on; else the answer refusing it: a `Host` that is not this
    /// listener's (421: a page on another name, DNS rebinding), or a state-changing request
    /// a browser could have sent from another page (403: no `X-Agent-Admin: 1`, or an
    /// `Origin` or `Sec-Fetch-Site` of another site).
    fn refuse(&self, req: &Request) -> Option<Response> {
        let host = req.header_one("host").unwrap_or_default();
        if !self.hosts.allows(host) {
            return Some(Response::text(
                421,
                format!(
                    "Host {host:?} is not this admin listener's name ({}): give --admin-host NAME to reach it as NAME",
                    self.hosts.describe()
                ),
            ));
        }
        if matches!(req.method(), "GET" | "HEAD") {
            return None;
        }
        if req.header_one(auth::ADMIN_HEADER).map(str::trim) != Some("1") {
            return Some(Response::text(
                403,
                format!(
                    "a {} on the admin listener needs the header {}: 1 (a browser cannot send it from another page; agent machines does)",
                    req.method(),
                    auth::ADMIN_HEADER
                ),
            ));
        }
        if let Some(o) = req.header_one("origin")
            && !self.hosts.allows_origin(o)
        {
            return Some(Response::text(
                403,
                format!(
                    "Origin {o:?} is not this admin listener ({}; --admin-host names more)",
                    self.hosts.describe()
                ),
            ));
        }
        if let Some(site) = req.header_one("sec-fetch-site")
            && !matches!(site.trim(), "same-origin" | "none")
        {
            return Some(Response::text(
                403,
                format!("a request from another site ({site}) changes nothing here"),
            ));
        }
        None
    }

    /// Whether `req` carries the admin token (always, when none is set): Ok(Some) for the
    /// challenge-response (the answer then proves the token too), Ok(None) for Bearer or
    /// Basic or no token set; Err: the 401.
    fn authenticate(&self, req: &Request) -> Result<Option<Proven>, Response> {
        let Some(want) = &self.token else {
            return Ok(None);
        };
        let refused = |why: &str| {
            Response::text(
                401,
                format!("the admin token is needed (--admin-token-file): {why}"),
            )
            .header(
                "WWW-Authenticate",
                "Basic realm=\"agent serve\", charset=\"UTF-8\"",
            )
        };
        let Some(h) = req.header_one("authorization") else {
            return Err(refused("no Authorization"));
        };
        if h.starts_with(auth::AUTH_SCHEME) {
            let target = match req.query() {
                Some(q) => format!("{}?{q}", req.path()),
                None => req.path().to_string(),
            };
            return self
                .challenges
                .check(want, h, req.method(), &target, now_secs())
                .map(Some)
                .map_err(refused);
        }
        let given = if let Some(t) = h.strip_prefix("Bearer ") {
            t.trim().to_string()
        } else if let Some(b) = h.strip_prefix("Basic ") {
            // A browser's prompt: any user name, the token as the password.
            let Ok(d) = spec::encoding::data_url::base64_decode(b.trim().as_bytes()) else {
                return Err(refused("not base64"));
            };
            let s = String::from_utf8_lossy(&d).into_owned();
            s.split_once(':')
                .map(|(_, p)| p.to_string())
                .unwrap_or_default()
        } else {
            return Err(refused("not Bearer, Basic or Agent-HMAC"));
        };
        // Compared as digests, in constant time (the tokens' own comparison).
        use sha2::{Digest, Sha256};
        if crate::tokens::ct_eq(
            &Sha256::digest(given.as_bytes()).into(),
            &Sha256::digest(want.as_bytes()).into(),
        ) {
            Ok(None)
        } else {
            Err(refused("not the admin token"))
        }
    }

    /// The answer to `req` from [`ROUTES`]: who may call checked first (the `Host`, the
    /// admin token), then the method; `proven` is set when the request was authenticated by
    /// the challenge-response (its answer then carries the proof).
    fn route(&self, req: &Request, proven: &mut Option<Proven>) -> Response {
        let Some((route, arg)) = routes::find(ROUTES, req.path()) else {
            return Response::new(404);
        };
        if route.auth != Caller::Anyone
            && let Some(r) = self.refuse(req)
        {
            return r;
        }
        if route.auth == Caller::Admin {
            match self.authenticate(req) {
                Ok(p) => *proven = p,
                Err(r) => return r,
            }
        }
        if let Some(r) = route.refuse_method(req) {
            return r;
        }
        (route.handler)(self, req, arg)
    }

    /// `GET /metrics`: the reports' and network boot's lines, and the machines by state and
    /// pool.
    fn metrics(&self, _: &Request, _: &str) -> Response {
        let mut r = Response::new(200);
        let mut text = self.fleet.metrics();
        text.push_str(&self.machine_gauges());
        text.push_str(&self.fleet.boot.metrics());
        text.push_str(&self.fleet.rollouts.metrics());
        r.body = Body::Owned(text.into_bytes());
        r.header("Content-Type", "text/plain; version=0.0.4")
    }

    /// `GET /rollouts`: every pool's rollout, as the last evaluation saw it.
    fn rollouts(&self, _: &Request, _: &str) -> Response {
        json(
            200,
            &serde_json::json!({"rollouts": self.fleet.rollouts.json()}),
        )
    }

    /// The store and pool `pool`'s rollout now; Err: the answer (no store, no such pool, no
    /// rollout).
    fn current_rollout<T>(
        &self,
        pool: &str,
        f: impl FnOnce(&dyn Store, &rollout::Current<'_>) -> T,
    ) -> Result<T, Response> {
        let Some(store) = &self.fleet.store else {
            return Err(Response::text(503, "no inventory store"));
        };
        if !crate::source::valid_pool_name(pool) {
            return Err(Response::text(404, "no such pool"));
        }
        let Some(active) = self.generations.active() else {
            return Err(Response::text(503, "no generation loaded"));
        };
        let lkg = self.generations.last_known_good();
        match rollout::current(&active, lkg.as_ref(), pool) {
            Some(c) => Ok(f(&**store, &c)),
            None if active.rollouts.contains_key(pool) => Err(Response::text(
                404,
                format!(
                    "pool {pool} is not in a rollout: its config is lastKnownGood's (or there is no lastKnownGood yet)"
                ),
            )),
            None => Err(Response::text(
                404,
                format!("pool {pool} has no rollout policy in the served generation"),
            )),
        }
    }

    /// `GET /rollouts/<pool>`: the pool's rollout, read from the store now.
    fn rollout(&self, _: &Request, pool: &str) -> Response {
        let now = now_secs();
        let got = self.current_rollout(pool, |store, c| {
            let r = rollout::record(store, c, now)?;
            let o = rollout::outcomes(store, &r, c.policy, now)?;
            let step = c.policy.steps[r.stage.min(c.policy.steps.len() - 1)];
            anyhow::Ok(rollout::json(&r, Some(step), &o))
        });
        match got {
            Ok(Ok(v)) => json(200, &v),
            Ok(Err(e)) => store_error(e),
            Err(r) => r,
        }
    }

    /// `POST /rollouts/<pool>/pause|resume|promote|abort`.
    fn rollout_act(&self, _: &Request, pool: &str, action: rollout::Action) -> Response {
        let now = now_secs();
        let got = self.current_rollout(pool, |store, c| {
            rollout::act(store, c, action, now).map(|r| {
                r.map(|r| {
                    let step = c.policy.steps[r.stage.min(c.policy.steps.len() - 1)];
                    rollout::json(&r, Some(step), &[])
                })
            })
        });
        match got {
            Ok(Ok(Ok(v))) => {
                log::info!(
                    "rollout of pool {pool}: {action:?} asked for: now {}",
                    v["state"]
                );
                json(200, &v)
            }
            Ok(Ok(Err(why))) => Response::text(409, why),
            Ok(Err(e)) => store_error(e),
            Err(r) => r,
        }
    }

    /// `GET` of a challenge: a nonce for the challenge-response.
    fn challenge(&self, _: &Request, _: &str) -> Response {
        json(
            200,
            &serde_json::json!({
                "nonce": self.challenges.issue(now_secs()),
                "expiresInSeconds": auth::NONCE_TTL,
            }),
        )
        .header("Cache-Control", "no-store")
    }

    /// What every read of the inventory needs: the store, and the request's `?pool=` and
    /// `?state=` filter (checked on every such path, even one that matches nothing).
    fn reading(&self, req: &Request) -> Result<(&dyn Store, Filter), Response> {
        let Some(store) = &self.fleet.store else {
            return Err(Response::text(
                503,
                format!(
                    "no inventory store: {}",
                    self.fleet
                        .store_error
                        .as_deref()
                        .unwrap_or("not configured")
                ),
            ));
        };
        let mut filter = filter(req).map_err(|e| Response::text(400, e))?;
        filter.deadline = self.deadline();
        Ok((&**store, filter))
    }

    /// `--running-deadline` now, if set.
    fn deadline(&self) -> Option<inventory::model::Deadline> {
        self.fleet
            .boot
            .settings
            .running_deadline
            .map(|after| inventory::model::Deadline {
                after,
                now: now_secs(),
            })
    }

    /// The key a listing of `req` is kept by, and the inventory version it is made at
    /// (with `--running-deadline`, the second too: a machine becomes unresponsive as time
    /// passes, not only when the inventory changes).
    fn listing_key(&self, req: &Request) -> (String, u64) {
        let at = match self.deadline() {
            Some(d) => format!("@{}", d.now),
            None => String::new(),
        };
        (
            format!("{}?{}{at}", req.path(), req.query().unwrap_or_default()),
            self.fleet.version(),
        )
    }

    /// `GET /machines`: a page of the inventory (JSON, without tokens), shared while current.
    fn machines(&self, req: &Request, _: &str) -> Response {
        let (store, filter) = match self.reading(req) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let (key, version) = self.listing_key(req);
        let (limit, after) = match page(req) {
            Ok(p) => p,
            Err(e) => return Response::text(400, e),
        };
        let listing = self.listings.get(&key, version, || {
            list_machines(store, &filter, limit, after.as_deref())
        });
        match listing {
            Ok(b) => shared(b, "application/json"),
            Err(r) => r,
        }
    }

    /// `GET /ui/`: the page of the machines seen last, shared while current.
    fn ui_index(&self, req: &Request, _: &str) -> Response {
        let (store, _) = match self.reading(req) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let query = match page::summary::Query::parse(|n| req.query_param(n)) {
            Ok(q) => q,
            Err(e) => return Response::text(400, e),
        };
        let (key, version) = self.listing_key(req);
        let listing = self.listings.get(&key, version, || {
            // One pass over the inventory: the summary counts every record, the table keeps
            // one page of the matching ones (page::summary::ROWS): the page never holds the
            // whole inventory.
            let roles = self.generations.roles();
            let pools = page::pools(&roles);
            let mut scan = page::summary::Scan::new(&query, &pools, page::summary::ROWS);
            let deadline = self.deadline();
            store
                .each_machine(&Filter::default(), None, &mut |mut m| {
                    m.state = inventory::model::standing(&m, deadline);
                    scan.add(m);
                    true
                })
                .map_err(store_error)?;
            let (summary, window) = scan.finish();
            let rows: Vec<MachineView> = window.machines.iter().map(view).collect();
            let rejected = page::rejected(&roles, ts);
            let halts = page::halts(&self.fleet.rollouts.views(), ts);
            let now = ts(now_secs());
            Ok(page::index(&page::Index {
                pools: &pools,
                rejected: rejected.as_ref(),
                halts: &halts,
                summary: &summary,
                window: &window,
                rows: &rows,
                query: &query,
                now: &now,
            })
            .into_bytes())
        });
        match listing {
            Ok(b) => page_headers(Response::new(200), b),
            Err(r) => r,
        }
    }

    /// `GET /machines/<id>`: one machine as JSON (without its tokens).
    fn machine(&self, req: &Request, id: &str) -> Response {
        self.one_machine(req, id, false)
    }

    /// `GET /ui/machines/<id>`: one machine's page.
    fn ui_machine(&self, req: &Request, id: &str) -> Response {
        self.one_machine(req, id, true)
    }

    fn one_machine(&self, req: &Request, id: &str, ui: bool) -> Response {
        let (store, filter) = match self.reading(req) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let id = spec::encoding::data_url::percent_decode(id)
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        let Some(id) = id.filter(|i| valid_id(i)) else {
            return Response::new(404);
        };
        let found = store.machine(&id).map(|m| {
            m.map(|mut m| {
                m.state = inventory::model::standing(&m, filter.deadline);
                m
            })
        });
        match found {
            Ok(Some(m)) if ui => html(page::machine(
                &view(&m),
                &ts(now_secs()),
                req.query_param("refresh") == Some("1"),
            )),
            Ok(Some(m)) => json(200, &api::machine(&m)),
            Ok(None) => Response::text(404, "no such machine"),
            Err(e) => store_error(e),
        }
    }

    /// `GET /machines/summary`: the machines by state and pool ([`api::summary`]), counted
    /// now (one pass over the records).
    fn summary(&self, req: &Request, _: &str) -> Response {
        let (store, _) = match self.reading(req) {
            Ok(x) => x,
            Err(r) => return r,
        };
        match inventory::counts(store) {
            Ok(c) => json(200, &api::summary(&c)),
            Err(e) => store_error(e),
        }
    }

    /// `/machines/<id>`: `DELETE` forgets it, the other methods read it.
    fn machine_or_delete(&self, req: &Request, id: &str) -> Response {
        if req.method() == "DELETE" {
            self.delete(req, id)
        } else {
            self.machine(req, id)
        }
    }

    /// `DELETE /machines/<id>`: a decommissioned machine: its record and details forgotten,
    /// its boot token and report credentials with them (a report it still sends is
    /// recorded as a new machine's, proving only what its credential proves); 204, or 404
    /// for a machine not known.
    fn delete(&self, req: &Request, id: &str) -> Response {
        let (store, _) = match self.reading(req) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let id = spec::encoding::data_url::percent_decode(id)
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        let Some(id) = id.filter(|i| valid_id(i)) else {
            return Response::text(404, "no such machine");
        };
        match store.remove(&id) {
            Ok(Some(m)) => {
                for k in m.tokens.boot.iter().chain(&m.tokens.report) {
                    if let Err(e) = store.forget_boot_token(k) {
                        log::warn!("machine {id}: forgetting a token: {e:#}");
                    }
                }
                self.fleet.boot.recent.forget(&id);
                // A listing kept from before would still show it.
                self.listings.clear();
                log::info!("machine {id}: removed from the inventory (decommissioned)");
                Response::new(204)
            }
            Ok(None) => Response::text(404, "no such machine"),
            Err(e) => {
                log::error!("removing machine {id} from the inventory: {e:#}");
                Response::text(503, "the inventory store cannot be changed now; retry")
                    .header("Retry-After", "5")
            }
        }
    }

    /// Any other path: read as the inventory's paths are (the store, the filter), then 404.
    fn not_found(&self, req: &Request, _: &str) -> Response {
        match self.reading(req) {
            Ok(_) => Response::new(404),
            Err(r) => r,
        }
    }

    /// `POST /machines/<id>/reprovision`: the machine installs again at its next network
    /// boot (docs/serve.md, "Install once").
    fn reprovision(&self, _: &Request, id: &str) -> Response {
        let Some(store) = &self.fleet.store else {
            return Response::text(503, "no inventory store");
        };
        let id = spec::encoding::data_url::percent_decode(id)
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        let Some(id) = id.filter(|i| valid_id(i)) else {
            return Response::text(404, "no such machine");
        };
        let now = now_secs();
        // The machine's tokens and report credentials are forgotten with the request: a
        // report still queued from an earlier boot is history, it cannot end the
        // reprovision (only a boot that begins now can).
        let mut forget = Vec::new();
        match store.update(&id, &mut |m: Option<Machine>| {
            m.map(|mut m| {
                m.reprovision = Some(now);
                let t = std::mem::take(&mut m.tokens);
                forget = t.boot.into_iter().chain(t.report).collect();
                m
            })
        }) {
            Ok(Some(m)) => {
                for k in &forget {
                    if let Err(e) = store.forget_boot_token(k) {
                        log::warn!("machine {id}: forgetting a token: {e:#}");
                    }
                }
                self.fleet.boot.recent.forget(&id);
                log::info!(
                    "machine {id}: reprovision asked for: it installs at its next network boot"
                );
                json(
                    200,
                    &serde_json::json!({"id": m.id, "reprovision": m.reprovision.map(crate::http::time)}),
                )
            }
            Ok(None) => Response::text(404, "no such machine"),
            Err(e) => store_error(e),
        }
    }
}

impl Admin {
    /// `agent_serve_machines{state,pool}`: a pool the source serves by its name, machines of
    /// no pool as `pool=""`, and every other pool a report named summed as
    /// [`OTHER_POOLS`]: a report never adds a label of its own, so the series are at most
    /// the states times the served pools plus two.
    fn machine_gauges(&self) -> String {
        let Some(counts) = self.fleet.machine_counts() else {
            return String::new();
        };
        let active = self.generations.roles().generation;
        let served = |p: &str| active.as_ref().is_some_and(|g| g.pools.contains_key(p));
        let mut by = std::collections::BTreeMap::<(&str, &str), u64>::new();
        for ((state, pool), n) in &counts {
            let p = if pool.is_empty() || served(pool) {
                pool.as_str()
            } else {
                OTHER_POOLS
            };
            *by.entry((state.as_str(), p)).or_default() += n;
        }
        let mut o = String::from(
            "# HELP agent_serve_machines Machines in the inventory, by state and pool (pools the source does not serve summed as pool=\"(other)\").\n# TYPE agent_serve_machines gauge\n",
        );
        for ((state, pool), n) in by {
            o.push_str(&format!(
                "agent_serve_machines{{state=\"{state}\",pool=\"{}\"}} {n}\n",
                label(pool)
            ));
        }
        o
    }
}

/// The `pool` label of machines whose pool the source does not serve (no pool name can be
/// it: names begin with a letter or digit).
pub const OTHER_POOLS: &str = "(other)";

/// A Prometheus label value: quotes, backslashes and line breaks escaped.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Handler for Admin {
    type Local = ();
    type Labels = crate::http::Labels;

    fn local(&self, _: usize) {}

    fn handle(&self, _: &mut (), req: &Request, out: &mut Response) {
        let mut proven = None;
        let mut r = self.route(req, &mut proven);
        if let (Some(p), Some(token)) = (&proven, &self.token) {
            // The admin's answers are whole in memory (a listing is shared, not copied).
            let body: &[u8] = match &r.body {
                Body::Owned(b) => b,
                Body::Shared(b) => b,
                _ => &[],
            };
            let proof = auth::answer_proof(token, &p.nonce, &p.mac, r.status, body);
            r.add_header(auth::PROOF_HEADER, &proof);
        }
        r.add_header("Content-Security-Policy", CSP);
        r.add_header("X-Frame-Options", "DENY");
        r.add_header("X-Content-Type-Options", "nosniff");
        *out = r;
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

/// Who may call an admin route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// Anyone who reaches the listener, whatever its `Host` (`/healthz`).
    Anyone,
    /// A request naming this listener in `Host` and, changing something, not one a browser
    /// could send from another page ([`Admin::refuse`]).
    Host,
    /// That, with the admin token ([`Admin::authenticate`]).
    Admin,
}

type Handle = fn(&Admin, &Request, &str) -> Response;

/// The methods of `/machines/<id>`: read it, or forget it (`DELETE`).
const MACHINE: &[&str] = &["GET", "HEAD", "DELETE"];

/// The admin listener's routes, the first match answering (module docs). The last matches
/// every path: an unknown path is answered 404 after the checks every inventory path gets.
#[rustfmt::skip]
const ROUTES: &[Route<Caller, Handle>] = &[
    Route { methods: ANY, path: Pattern::Exact("/healthz"), auth: Caller::Anyone, handler: |_, _, _| Response::text(200, "ok") },
    Route { methods: READ, path: Pattern::Exact(auth::CHALLENGE_PATH), auth: Caller::Host, handler: Admin::challenge },
    Route { methods: POST, path: Pattern::Within("/machines/", "/reprovision"), auth: Caller::Admin, handler: Admin::reprovision },
    Route { methods: POST, path: Pattern::Within("/rollouts/", "/pause"), auth: Caller::Admin, handler: |a, r, p| a.rollout_act(r, p, rollout::Action::Pause) },
    Route { methods: POST, path: Pattern::Within("/rollouts/", "/resume"), auth: Caller::Admin, handler: |a, r, p| a.rollout_act(r, p, rollout::Action::Resume) },
    Route { methods: POST, path: Pattern::Within("/rollouts/", "/promote"), auth: Caller::Admin, handler: |a, r, p| a.rollout_act(r, p, rollout::Action::Promote) },
    Route { methods: POST, path: Pattern::Within("/rollouts/", "/abort"), auth: Caller::Admin, handler: |a, r, p| a.rollout_act(r, p, rollout::Action::Abort) },
    Route { methods: READ, path: Pattern::Exact("/rollouts"), auth: Caller::Admin, handler: Admin::rollouts },
    Route { methods: READ, path: Pattern::Prefix("/rollouts/"), auth: Caller::Admin, handler: Admin::rollout },
    Route { methods: READ, path: Pattern::Exact("/metrics"), auth: Caller::Admin, handler: Admin::metrics },
    Route { methods: READ, path: Pattern::Exact("/ui"), auth: Caller::Admin, handler: |_, _, _| Response::new(308).header("Location", "/ui/") },
    Route { methods: READ, path: Pattern::Exact("/"), auth: Caller::Admin, handler: |_, _, _| Response::new(308).header("Location", "/ui/") },
    Route { methods: READ, path: Pattern::Exact("/machines"), auth: Caller::Admin, handler: Admin::machines },
    Route { methods: READ, path: Pattern::Exact("/machines/summary"), auth: Caller::Admin, handler: Admin::summary },
    Route { methods: READ, path: Pattern::Exact("/ui/"), auth: Caller::Admin, handler: Admin::ui_index },
    Route { methods: MACHINE, path: Pattern::Prefix("/machines/"), auth: Caller::Admin, handler: Admin::machine_or_delete },
    Route { methods: READ, path: Pattern::Prefix("/ui/machines/"), auth: Caller::Admin, handler: Admin::ui_machine },
    Route { methods: READ, path: Pattern::Any, auth: Caller::Admin, handler: Admin::not_found },
];

/// A page of `/machines` rendered (JSON, [`api::listing`]): at most `limit` machines after
/// `after`, and where the next page starts.
fn list_machines(
    store: &dyn Store,
    filter: &Filter,
    limit: usize,
    after: Option<&str>,
) -> Result<Vec<u8>, Response> {
    let (mut ms, mut more) = (Vec::new(), false);
    store
        .each_machine(filter, after, &mut |mut m| {
            more = ms.len() == limit;
            if !more {
                m.state = inventory::model::standing(&m, filter.deadline);
                ms.push(m);
            }
            !more
        })
        .map_err(store_error)?;
    let next = if more {
        ms.last().map(|m| m.id.as_str())
    } else {
        None
    };
    let mut b = serde_json::to_vec_pretty(&api::listing(&ms, next)).unwrap_or_default();
    b.push(b'\n');
    Ok(b)
}

fn html(body: String) -> Response {
    page_headers(Response::new(200), body.into_bytes().into())
}

/// A shared listing's answer.
fn shared(body: Arc<[u8]>, content_type: &str) -> Response {
    let mut r = Response::new(200);
    r.body = Body::Shared(body);
    r.header("Content-Type", content_type)
}

/// A page's answer: no caching (and, as every answer, no script: [`CSP`]).
fn page_headers(mut r: Response, body: Arc<[u8]>) -> Response {
    r.body = Body::Shared(body);
    r.header("Content-Type", "text/html; charset=utf-8")
        .header("Cache-Control", "no-store")
}

fn store_error(e: anyhow::Error) -> Response {
    log::error!("reading the inventory: {e:#}");
    Response::text(503, "the inventory store cannot be read now; retry").header("Retry-After", "5")
}

/// `/machines` answers this many machines at most unless `?limit=` says otherwise.
pub const LIST_LIMIT: usize = 1000;
/// The largest `?limit=` of `/machines`.
pub const LIST_LIMIT_MAX: usize = 10_000;

/// `?limit=` (1 to [`LIST_LIMIT_MAX`], default [`LIST_LIMIT`]) and `?after=` (a machine id)
/// of `/machines`.
fn page(req: &Request) -> Result<(usize, Option<String>), String> {
    let limit = match req.query_param("limit") {
        None => LIST_LIMIT,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=LIST_LIMIT_MAX).contains(&n) => n,
            _ => {
                return Err(format!(
                    "limit must be a number from 1 to {LIST_LIMIT_MAX} (the listing page limit)"
                ));
            }
        },
    };
    let after = match req.query_param("after") {
        None => None,
        Some(a) if valid_id(a) => Some(a.to_string()),
        Some(_) => return Err("after must be a machine id".into()),
    };
    Ok((limit, after))
}

fn filter(req: &Request) -> Result<Filter, String> {
    let state = match req.query_param("state") {
        Some(s) => Some(s.parse::<State>()?),
        None => None,
    };
    Ok(Filter {
        pool: req.query_param("pool").map(str::to_string),
        state,
        deadline: None,
    })
}

/// Machine ids as reports may carry them (docs/reports.md): letters, digits and `.:_-`.
fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= inventory::limits::ID_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'_' | b'-'))
}

fn ts(secs: u64) -> String {
    page::ts(secs)
}

/// A machine as the page shows it: boots newest first; what each stage changed in words.
pub fn view(m: &Machine) -> MachineView {
    MachineView {
        id: m.id.clone(),
        hostname: m.identity.hostname.clone(),
        state: m.current().as_str().to_string(),
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
        machine_file: m
            .machine_file
            .as_ref()
            .map(|f| format!("machines/{f}.json")),
        reprovision: m.reprovision.map(ts),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One rendered listing is shared while the inventory is unchanged; a recorded report (a
    /// new version) makes it again; an error answer is not kept.
    #[test]
    fn listings_are_shared_until_the_inventory_changes() {
        let l = Listings::default();
        let mut made = 0;
        let render = |n: &mut i32| {
            *n += 1;
            Ok(format!("listing {n}").into_bytes())
        };
        let a = l.get("/machines?", 1, || render(&mut made)).unwrap();
        let b = l.get("/machines?", 1, || render(&mut made)).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the same bytes, not a copy");
        assert_eq!(made, 1);
        let other = l
            .get("/machines?state=failed", 1, || render(&mut made))
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &other));
        let c = l.get("/machines?", 2, || render(&mut made)).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(&c[..], b"listing 3");
        let e = l.get("/ui/?", 2, || Err(Response::new(503)));
        assert_eq!(e.err().map(|r| r.status), Some(503));
        let d = l.get("/ui/?", 2, || render(&mut made)).unwrap();
        assert_eq!(&d[..], b"listing 4");
    }
}
