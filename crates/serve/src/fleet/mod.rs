//! The fleet's side of the server (docs/reports.md): the inventory store, `POST /report`
//! (answered on the machine-facing listeners; the app checks the token first) and the
//! inventory's metrics. The admin listener reads the inventory.

pub mod boot;
pub mod inventory;
pub mod jobs;
pub mod rollout;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use self::inventory::{Batching, Origin, Recorded, Refused, Report, Store};
use crate::http::{Body, Reply, Request, Response};

/// What a report's request carried, as the event loop saw it (it reads no store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// None (unauthenticated).
    None,
    /// A valid bearer token of this pool (checked on the loop: the token index is memory).
    Pool(String),
    /// `/report?token=T`, a machine's report credential: checked by the writers, which
    /// read the store (`require`: `--require-token`).
    Machine { token: String, require: bool },
}

/// What the fleet side keeps: the store, its writers, and the tallies of `/metrics`.
pub struct Fleet {
    pub store: Option<Arc<dyn Store>>,
    /// Why there is no store (shown in answers and in /status).
    pub store_error: Option<String>,
    /// `--max-body-bytes`: the largest report.
    max_body: usize,
    /// The event loop's answer time-out (reports queued longer are not recorded).
    answer_timeout: Duration,
    tallies: Arc<Tallies>,
    /// The queue of reports waiting for the store and its writer threads (started with the
    /// first report).
    writers: OnceLock<Arc<Writers>>,
    /// Machines by state and pool, read from the store at most once per `COUNTS_TTL`, on a
    /// thread of its own (a scrape never waits for the store).
    counts: Arc<Mutex<CountsCache>>,
    /// Network boot (`/boot.ipxe`, `/ipxe`, `/assets/`, `/machine-config`).
    pub boot: boot::Boot,
    /// The rollouts as the last tick saw them (`rollout`).
    pub rollouts: rollout::Watch,
    /// When the server started (seconds since the Unix epoch): since when a store that
    /// could not be opened is down, in /status.
    started: u64,
}

#[derive(Default)]
struct CountsCache {
    /// When the store was last asked (successfully or not).
    asked: Option<Instant>,
    /// The last counts the store gave.
    counts: Option<inventory::Counts>,
    /// A thread is asking the store now.
    asking: bool,
}

/// Reports by result (recorded, duplicate, refused, unavailable, full) and the time spent
/// recording them (microseconds, from the queue to the store's answer) and how many.
#[derive(Default)]
struct Tallies {
    results: [AtomicU64; 5],
    /// When a refusal for `--max-machines` was last logged (seconds since the epoch).
    full_logged: AtomicU64,
    record_us: AtomicU64,
    records: AtomicU64,
    /// Reports queued or being recorded.
    waiting: AtomicU64,
}

impl Tallies {
    fn tally(&self, i: usize) {
        self.results[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// Reports waiting for the store at most (the report queue, docs/reports.md): beyond it a
/// report is answered 503 with Retry-After. The agent's reports are a few KiB.
pub const REPORT_QUEUE: usize = 1024;
/// The report bodies waiting for the store at most, in bytes (their sizes as received;
/// a parsed report takes about as much again): beyond it a report is answered 503 with
/// Retry-After, so reports parked while the store is down hold at most this (docs/reports.md,
/// "The report queue").
pub const REPORT_QUEUE_BYTES: usize = 32 << 20;

/// The writers: threads that take reports from the queue and hand them to the store, so no
/// event loop ever waits for the store (a slow one, etcd failing over, delays only reports).
/// Their number and batch size are the batching policy's ([`Batching`], made of what the
/// store's commits take): one thread committing whatever has queued in one transaction for
/// the embedded and in-memory stores, many threads with a transaction's worth each for etcd.
struct Writers {
    store: Arc<dyn Store>,
    tallies: Arc<Tallies>,
    queue: Mutex<Queue>,
    more: Condvar,
    batching: Batching,
    /// The event loop's answer time-out: a report queued longer was answered 503 by the
    /// loop already, and is dropped unrecorded (its sender sends it again).
    stale_after: Duration,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// The body bytes of `jobs`.
    bytes: usize,
}

impl Queue {
    /// Whether a report of `bytes` finds room ([`REPORT_QUEUE`], [`REPORT_QUEUE_BYTES`]; one
    /// report always does when none waits).
    fn takes(&self, bytes: usize) -> bool {
        self.jobs.len() < REPORT_QUEUE
            && (self.bytes + bytes <= REPORT_QUEUE_BYTES || self.jobs.is_empty())
    }
}

struct Job {
    report: Report,
    origin: Origin,
    /// `/report?token=`, checked by the writer before the report is recorded.
    credential: Option<(String, bool)>,
    reply: Reply,
    queued: Instant,
    /// The body's size, counted against [`REPORT_QUEUE_BYTES`].
    bytes: usize,
}

impl Writers {
    fn start(store: Arc<dyn Store>, tallies: Arc<Tallies>, stale_after: Duration) -> Arc<Writers> {
        let batching = Batching::for_commits(store.commits());
        let w = Arc::new(Writers {
            store,
            tallies,
            queue: Mutex::new(Queue::default()),
            more: Condvar::new(),
            batching,
            stale_after,
        });
        for i in 0..batching.writers.max(1) {
            let w = w.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("inventory-{i}"))
                .spawn(move || w.run());
            if let Err(e) = spawned {
                // The threads that did start take the queue; with none, reports wait for
                // the answer time-out (503).
                log::error!("starting an inventory writer thread: {e}");
            }
        }
        w
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a report of `bytes` would find the queue full.
    fn full(&self, bytes: usize) -> bool {
        !self.lock().takes(bytes)
    }

    /// Queues a report; answers 503 at once when the queue is full.
    fn push(&self, job: Job) {
        let mut q = self.lock();
        if !q.takes(job.bytes) {
            drop(q);
            self.tallies.tally(3);
            job.reply.send(queue_full());
            return;
        }
        q.bytes += job.bytes;
        q.jobs.push_back(job);
        self.tallies.waiting.fetch_add(1, Ordering::Relaxed);
        drop(q);
        self.more.notify_one();
    }

    /// Checks a job's report credential (reading the store) and completes its origin;
    /// None when the job was answered (refused, or the store could not tell).
    fn check(&self, mut job: Job) -> Option<Job> {
        let Some((token, require)) = job.credential.take() else {
            return Some(job);
        };
        let now = now_secs();
        match report_credential(&*self.store, &token, &job.report.machine.id, require, now) {
            Ok(Some((pool, issued))) => {
                job.origin.token_pool = Some(pool);
                job.origin.machine_issued = Some(issued);
                Some(job)
            }
            Ok(None) => Some(job),
            Err(resp) => {
                self.tallies.tally(if resp.status >= 500 { 3 } else { 2 });
                self.tallies.waiting.fetch_sub(1, Ordering::Relaxed);
                job.reply.send(resp);
                None
            }
        }
    }

    fn run(&self) {
        loop {
            let jobs: Vec<Job> = {
                let mut q = self.lock();
                while q.jobs.is_empty() {
                    q = self.more.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
                let n = self.batching.take(q.jobs.len());
                let jobs: Vec<Job> = q.jobs.drain(..n).collect();
                q.bytes -= jobs.iter().map(|j| j.bytes).sum::<usize>();
                jobs
            };
            // Reports the loop answered already (queued past its answer time-out) are not
            // recorded: after the store comes back, a fresh report does not wait behind
            // those their senders gave up on (they send them again).
            let (stale, jobs): (Vec<Job>, Vec<Job>) = jobs
                .into_iter()
                .partition(|j| j.queued.elapsed() >= self.stale_after);
            for job in stale {
                self.tallies.tally(3);
                self.tallies.waiting.fetch_sub(1, Ordering::Relaxed);
                drop(job);
            }
            let jobs: Vec<Job> = jobs.into_iter().filter_map(|j| self.check(j)).collect();
            if jobs.is_empty() {
                continue;
            }
            let batch: Vec<(&Report, &Origin)> =
                jobs.iter().map(|j| (&j.report, &j.origin)).collect();
            let results = self.store.record_batch(&batch);
            drop(batch);
            let done = Instant::now();
            let mut results = results.into_iter();
            for job in jobs {
                let r = results
                    .next()
                    .unwrap_or_else(|| Err(anyhow::anyhow!("the store gave no answer")));
                let t = &self.tallies;
                t.record_us.fetch_add(
                    done.saturating_duration_since(job.queued).as_micros() as u64,
                    Ordering::Relaxed,
                );
                t.records.fetch_add(1, Ordering::Relaxed);
                let resp = answer(t, &job.report, r);
                t.waiting.fetch_sub(1, Ordering::Relaxed);
                job.reply.send(resp);
            }
        }
    }
}

/// The answer to a report the store took (or not).
fn answer(t: &Tallies, report: &Report, r: anyhow::Result<Recorded>) -> Response {
    match r {
        Ok(Recorded::New) => {
            t.tally(0);
            recorded("new")
        }
        Ok(Recorded::Duplicate) => {
            t.tally(1);
            recorded("duplicate")
        }
        Ok(Recorded::Full(full)) => {
            t.tally(4);
            // One line a minute at most (with how many were refused in all): a flood of new
            // machine ids does not flood the log.
            let now = now_secs();
            let last = t.full_logged.load(Ordering::Relaxed);
            if now >= last + 60
                && t.full_logged
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                log::warn!(
                    "report of new machine {} refused: {full} ({} refused so far)",
                    report.machine.id,
                    t.results[4].load(Ordering::Relaxed)
                );
            }
            // 507 Insufficient Storage: the server cannot store what the request needs
            // (RFC 4918 §11.5); a 5xx, so the agent keeps the report queued and sends it
            // again later (src/report/send.rs), and it is not a store failure (503).
            Response::text(507, format!("machine {}: {full}", report.machine.id))
                .header("Retry-After", "300")
        }
        Err(e) => {
            t.tally(3);
            log::error!("recording a report of machine {}: {e:#}", report.machine.id);
            Response::text(503, "the inventory store cannot take the report now; retry")
                .header("Retry-After", "5")
        }
    }
}

/// `{"recorded": "new"|"duplicate"}` (made without a JSON value: it is every report's answer).
fn recorded(what: &str) -> Response {
    let mut r = Response::new(200);
    r.body = Body::Owned(format!("{{\n  \"recorded\": \"{what}\"\n}}\n").into_bytes());
    r.header("Content-Type", "application/json")
}

fn queue_full() -> Response {
    Response::text(
        503,
        format!(
            "the report queue is full ({REPORT_QUEUE} reports or {} MiB waiting for the inventory store, the report queue limit); retry",
            REPORT_QUEUE_BYTES >> 20
        ),
    )
    .header("Retry-After", "1")
}

const COUNTS_TTL: Duration = Duration::from_secs(5);
const RESULTS: [&str; 5] = ["recorded", "duplicate", "refused", "unavailable", "full"];

impl Fleet {
    /// `max_body`: `--max-body-bytes`, the largest report taken.
    pub fn new(
        store: Result<Arc<dyn Store>, String>,
        max_body: usize,
        answer_timeout: Duration,
        boot: boot::Settings,
    ) -> Fleet {
        let (store, store_error) = match store {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        };
        Fleet {
            store,
            store_error,
            max_body,
            answer_timeout,
            tallies: Default::default(),
            writers: OnceLock::new(),
            counts: Default::default(),
            boot: boot::Boot::new(boot),
            rollouts: Default::default(),
            started: now_secs(),
        }
    }

    /// The inventory store's health for `/status`: `{ok, error, since, failures}` (a store
    /// that could not be opened is down since the server started).
    pub fn status_health(&self) -> inventory::health::Snapshot {
        let mut h = self.health();
        if self.store.is_none() {
            h.since = self.started;
        }
        h
    }

    /// Changes whenever a report is recorded here (shared listings are made again).
    pub fn version(&self) -> u64 {
        self.tallies.results[0].load(Ordering::Relaxed)
    }

    pub(crate) fn tally(&self, i: usize) {
        self.tallies.tally(i);
    }

    /// Whether the store works (`/status`, `/metrics`): as its operations found, a probe
    /// started when one is due (`inventory::health::check`); a store that could not be
    /// opened is down, `since` 0 (the server's start: `/status` says when).
    pub fn health(&self) -> inventory::health::Snapshot {
        match &self.store {
            Some(s) => inventory::health::check(s),
            None => inventory::health::Snapshot::unusable(
                self.store_error.as_deref().unwrap_or("no inventory store"),
                0,
            ),
        }
    }

    /// The report lines of `/metrics` (Prometheus text): reports by result, the time to
    /// record them, the queue. Nothing taken from a report's content: these lines are on the
    /// machine-facing listeners' `/metrics` too, which anyone who reaches them may read. The
    /// machines by state and pool are the admin listener's ([`Fleet::machine_counts`]).
    pub fn metrics(&self) -> String {
        let mut o = String::new();
        o.push_str("# HELP agent_serve_reports_total Machine reports received, by result.\n# TYPE agent_serve_reports_total counter\n");
        for (i, r) in RESULTS.iter().enumerate() {
            o.push_str(&format!(
                "agent_serve_reports_total{{result=\"{r}\"}} {}\n",
                self.tallies.results[i].load(Ordering::Relaxed)
            ));
        }
        o.push_str("# HELP agent_serve_report_seconds Time to record a report in the inventory store.\n# TYPE agent_serve_report_seconds summary\n");
        o.push_str(&format!(
            "agent_serve_report_seconds_sum {}\nagent_serve_report_seconds_count {}\n",
            self.tallies.record_us.load(Ordering::Relaxed) as f64 / 1e6,
            self.tallies.records.load(Ordering::Relaxed)
        ));
        o.push_str(&format!(
            "# HELP agent_serve_reports_waiting Reports waiting for the inventory store (queued or being recorded).\n# TYPE agent_serve_reports_waiting gauge\nagent_serve_reports_waiting {}\n",
            self.tallies.waiting.load(Ordering::Relaxed)
        ));
        // Up or down (a store that could not be opened is down), for both listeners' /metrics.
        o.push_str(&self.health().metrics());
        o
    }

    /// Machines by state and pool as the store counted them last (None before the first
    /// count, or without a store). The store is asked at most once per `COUNTS_TTL`, on a
    /// thread of its own: a caller never waits for it, and gets the last counts.
    pub fn machine_counts(&self) -> Option<inventory::Counts> {
        let store = self.store.as_ref()?;
        let mut cache = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let stale = cache.asked.is_none_or(|t| t.elapsed() >= COUNTS_TTL);
        if stale && !cache.asking {
            // Asked on a thread of its own: this scrape shows the last counts (none at the
            // first), the next ones the new. A store that cannot answer is asked again after
            // COUNTS_TTL, not at every scrape.
            cache.asking = true;
            let (store, cell) = (store.clone(), self.counts.clone());
            let spawned = std::thread::Builder::new()
                .name("inventory-counts".into())
                .spawn(move || {
                    let got = inventory::counts(&*store);
                    let mut c = cell.lock().unwrap_or_else(PoisonError::into_inner);
                    match got {
                        Ok(n) => c.counts = Some(n),
                        Err(e) => log::warn!("counting the inventory's machines: {e:#}"),
                    }
                    c.asked = Some(Instant::now());
                    c.asking = false;
                });
            if let Err(e) = spawned {
                log::warn!("starting a thread to count the inventory's machines: {e}");
                cache.asking = false;
                cache.asked = Some(Instant::now());
            }
        }
        cache.counts.clone()
    }
}

pub(crate) fn json(status: u16, v: &serde_json::Value) -> Response {
    let mut r = Response::new(status);
    let mut b = serde_json::to_vec_pretty(v).unwrap_or_default();
    b.push(b'\n');
    r.body = Body::Owned(b);
    r.header("Content-Type", "application/json")
}

pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `POST /report`: a machine's report, authenticated by the token it fetched its config
/// with (its pool wins over the body's); without a token it is recorded as unauthenticated,
/// unless `--require-token`. Checked here, on the event loop; recorded by the writers
/// (`Writers`), and answered from there once durable: 200 (new or a retry), 400/413 with the
/// field and limit, 401 for a bad token, 503 (Retry-After) when the store cannot take it or
/// [`REPORT_QUEUE`] reports wait for it, 507 (Retry-After) when the report's machine is new
/// and the inventory holds `--max-machines` records.
///
/// `token`: what the caller made of the request's bearer token: Ok(its pool), Ok(None) for
/// none, Err(the answer) for a token that does not pass.
pub fn report(
    fleet: &Fleet,
    token: Result<Credential, Response>,
    req: &Request,
    out: &mut Response,
) {
    let (token_pool, credential) = match token {
        Ok(Credential::None) => (None, None),
        Ok(Credential::Pool(p)) => (Some(p), None),
        Ok(Credential::Machine { token, require }) => (None, Some((token, require))),
        Err(r) => {
            fleet.tally(2);
            *out = r;
            return;
        }
    };
    let report = match inventory::parse_within(req.body(), fleet.max_body) {
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
    let writers = fleet
        .writers
        .get_or_init(|| Writers::start(store.clone(), fleet.tallies.clone(), fleet.answer_timeout))
        .clone();
    let bytes = req.body().len();
    if writers.full(bytes) {
        fleet.tally(3);
        *out = queue_full();
        return;
    }
    let origin = Origin {
        token_pool,
        machine_issued: None,
        received: now_secs(),
    };
    let queued = Instant::now();
    out.later(move |reply| {
        writers.push(Job {
            report,
            origin,
            credential,
            reply,
            queued,
            bytes,
        })
    });
}

/// What a report's `/report?token=T` proves (the credential `/machine-config` handed out
/// with the machine's config): Ok(Some((pool, issued))) when it is a report credential of
/// this machine, still valid (`issued`: when the boot token of its boot was issued).
/// Ok(None): none given, or one no longer valid where unauthenticated reports are taken
/// (recorded as history only: a report queued on a machine for longer than the
/// credential's window is not lost). Err: the answer otherwise: a credential of another
/// machine is refused whatever the flags (403), one unknown, expired or malformed with
/// `require` (`--require-token`) is 401. Reads the store: called off the event loop.
fn report_credential(
    store: &dyn Store,
    token: &str,
    machine: &str,
    require: bool,
    now: u64,
) -> Result<Option<(String, u64)>, Response> {
    if !inventory::well_formed_token(token) {
        return if require {
            Err(Response::text(401, "malformed token"))
        } else {
            Ok(None)
        };
    }
    let key = inventory::token_key(token);
    match store.boot_token(&key) {
        Ok(Some(t)) if t.kind == inventory::TokenKind::Report && t.machine != machine => {
            log::warn!(
                "a report naming machine {machine} came with the report credential of machine {} ({}…): refused",
                t.machine,
                &key[..8]
            );
            Err(Response::text(
                403,
                "this token was issued for another machine: a report changes only the record of the machine its credential was issued for",
            ))
        }
        Ok(Some(t)) if t.kind == inventory::TokenKind::Report && now < t.reports_until => {
            Ok(Some((t.pool, t.issued)))
        }
        Ok(_) if require => Err(Response::text(
            401,
            "unknown or expired report token (only the token a config fetch handed out in X-Agent-Report-URL authenticates reports)",
        )),
        Ok(_) => {
            log::info!(
                "a report of machine {machine} came with an unknown or expired report token: recorded as unauthenticated"
            );
            Ok(None)
        }
        Err(e) => {
            log::error!("reading a report credential: {e:#}");
            Err(
                Response::text(503, "the inventory store cannot answer now; retry")
                    .header("Retry-After", "5"),
            )
        }
    }
}
