//! The fleet's side of the server (docs/reports.md): the inventory store, `POST /report`
//! (answered on the machine-facing listeners; the app checks the token first) and the
//! inventory's metrics. The admin listener that reads the inventory is `crate::admin`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use super::http::{Body, Reply, Request, Response};
use super::inventory::{self, Origin, Recorded, Refused, Report, Store};

/// What the fleet side keeps: the store, its writers, and the tallies of `/metrics`.
pub struct Fleet {
    pub store: Option<Arc<dyn Store>>,
    /// Why there is no store (shown in answers and in /status).
    pub store_error: Option<String>,
    /// `--max-body-bytes`: the largest report.
    max_body: usize,
    tallies: Arc<Tallies>,
    /// The queue of reports waiting for the store and its writer threads (started with the
    /// first report).
    writers: OnceLock<Arc<Writers>>,
    /// Machines by state and pool, read from the store at most once per `COUNTS_TTL`, on a
    /// thread of its own (a scrape never waits for the store).
    counts: Arc<Mutex<CountsCache>>,
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
/// report is answered 503 with Retry-After. With reports of up to `--max-body-bytes`
/// (256 KiB) this bounds the queue at 256 MiB; the agent's reports are a few KiB.
pub const REPORT_QUEUE: usize = 1024;

/// The writers: threads that take reports from the queue and hand them to the store, so no
/// event loop ever waits for the store (a slow one, etcd failing over, delays only reports).
/// Their number and batch size are the store's (`Store::writers`): one thread committing
/// whatever has queued in one transaction for the embedded store, many threads with one
/// report each for etcd.
struct Writers {
    store: Arc<dyn Store>,
    tallies: Arc<Tallies>,
    queue: Mutex<VecDeque<Job>>,
    more: Condvar,
    batch: usize,
}

struct Job {
    report: Report,
    origin: Origin,
    reply: Reply,
    queued: Instant,
}

impl Writers {
    fn start(store: Arc<dyn Store>, tallies: Arc<Tallies>) -> Arc<Writers> {
        let (threads, batch) = store.writers();
        let w = Arc::new(Writers {
            store,
            tallies,
            queue: Mutex::new(VecDeque::new()),
            more: Condvar::new(),
            batch: batch.max(1),
        });
        for i in 0..threads.max(1) {
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

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Job>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn full(&self) -> bool {
        self.lock().len() >= REPORT_QUEUE
    }

    /// Queues a report; answers 503 at once when the queue is full.
    fn push(&self, job: Job) {
        let mut q = self.lock();
        if q.len() >= REPORT_QUEUE {
            drop(q);
            self.tallies.tally(3);
            job.reply.send(queue_full());
            return;
        }
        q.push_back(job);
        self.tallies.waiting.fetch_add(1, Ordering::Relaxed);
        drop(q);
        self.more.notify_one();
    }

    fn run(&self) {
        loop {
            let jobs: Vec<Job> = {
                let mut q = self.lock();
                while q.is_empty() {
                    q = self.more.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
                let n = q.len().min(self.batch);
                q.drain(..n).collect()
            };
            let batch: Vec<(&Report, &Origin)> =
                jobs.iter().map(|j| (&j.report, &j.origin)).collect();
            let results = self.store.record_all(&batch);
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
            "{REPORT_QUEUE} reports are waiting for the inventory store (the report queue limit); retry"
        ),
    )
    .header("Retry-After", "1")
}

const COUNTS_TTL: Duration = Duration::from_secs(5);
const RESULTS: [&str; 5] = ["recorded", "duplicate", "refused", "unavailable", "full"];

impl Fleet {
    /// `max_body`: `--max-body-bytes`, the largest report taken.
    pub fn new(store: Result<Arc<dyn Store>, String>, max_body: usize) -> Fleet {
        let (store, store_error) = match store {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        };
        Fleet {
            store,
            store_error,
            max_body,
            tallies: Default::default(),
            writers: OnceLock::new(),
            counts: Default::default(),
        }
    }

    /// Changes whenever a report is recorded here (shared listings are made again).
    pub fn version(&self) -> u64 {
        self.tallies.results[0].load(Ordering::Relaxed)
    }

    pub(crate) fn tally(&self, i: usize) {
        self.tallies.tally(i);
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
                    let got = store.counts();
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
    token: Result<Option<String>, Response>,
    req: &Request,
    out: &mut Response,
) {
    let token_pool = match token {
        Ok(p) => p,
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
        .get_or_init(|| Writers::start(store.clone(), fleet.tallies.clone()))
        .clone();
    if writers.full() {
        fleet.tally(3);
        *out = queue_full();
        return;
    }
    let origin = Origin {
        token_pool,
        received: now_secs(),
    };
    let queued = Instant::now();
    out.later(move |reply| {
        writers.push(Job {
            report,
            origin,
            reply,
            queued,
        })
    });
}
