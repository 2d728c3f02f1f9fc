//! The fleet's side of the server (docs/reports.md): the inventory store, `POST /report`
//! (answered on the machine-facing listeners; the app checks the token first) and the
//! inventory's metrics. The admin listener that reads the inventory is `crate::admin`.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::http::{Body, Request, Response};
use super::inventory::{self, Origin, Recorded, Refused, Store};

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

    pub(crate) fn tally(&self, i: usize) {
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
/// unless `--require-token`. Answered once durable: 200 (new or a retry), 400/413 with the
/// field and limit, 401 for a bad token, 503 (Retry-After) when the store cannot take it.
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
