//! Prometheus text-format metrics: requests by pool, status and spec version; a latency
//! histogram; source reloads and failures; token rotations; connections (open, refused,
//! evicted, timed out), read from the HTTP server's own counters.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::http::ConnStats;

/// Latency bucket upper bounds in seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// Request counters that a group of event loops add to. Each loop adds to one tally (its
/// number's), so event loops on different CPUs do not take turns owning the same
/// cache lines on every request; `/metrics` adds the tallies up.
#[derive(Default)]
#[repr(align(128))]
struct Tally {
    requests: RwLock<BTreeMap<(String, u16, String), AtomicU64>>,
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

const TALLIES: usize = 8;

#[derive(Default)]
pub struct Metrics {
    tallies: [Tally; TALLIES],
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
    pub token_rotations: AtomicU64,
    pub tls_reloads: AtomicU64,
    /// Reads of the source (each poll, change, SIGHUP).
    pub source_reads: AtomicU64,
    /// Butane translations run (a `.bu` file new or changed since the last read).
    pub butane_translations: AtomicU64,
}

impl Metrics {
    /// Records one request in tally `part` (the event loop's number: each loop writes its
    /// own). `pool` must already be a bounded label (known pool or "-").
    pub fn request(&self, part: usize, pool: &str, status: u16, version: &str, took: Duration) {
        let t = &self.tallies[part % TALLIES];
        // Hot path: a shared lock and an atomic add, no allocation.
        let found = t.requests.read().is_ok_and(|m| {
            m.iter()
                .find(|((p, s, v), _)| p == pool && *s == status && v == version)
                .map(|(_, c)| c.fetch_add(1, Ordering::Relaxed))
                .is_some()
        });
        if !found && let Ok(mut m) = t.requests.write() {
            m.entry((pool.to_string(), status, version.to_string()))
                .or_default()
                .fetch_add(1, Ordering::Relaxed);
        }
        let secs = took.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                t.buckets[i].fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
        t.count.fetch_add(1, Ordering::Relaxed);
        t.sum_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn render(&self, conns: &ConnStats) -> String {
        let mut s = String::new();
        s.push_str(
            "# HELP agent_serve_requests_total HTTP requests by pool, status and spec version.\n",
        );
        s.push_str("# TYPE agent_serve_requests_total counter\n");
        let mut requests: BTreeMap<(&str, u16, &str), u64> = BTreeMap::new();
        let guards: Vec<_> = self
            .tallies
            .iter()
            .filter_map(|t| t.requests.read().ok())
            .collect();
        for m in &guards {
            for ((p, st, v), c) in m.iter() {
                *requests.entry((p, *st, v)).or_default() += c.load(Ordering::Relaxed);
            }
        }
        for ((p, st, v), c) in requests {
            let _ = writeln!(
                s,
                "agent_serve_requests_total{{pool=\"{}\",status=\"{st}\",version=\"{}\"}} {c}",
                esc(p),
                esc(v)
            );
        }
        drop(guards);
        self.render_latency(&mut s);
        for (name, help, v) in [
            (
                "agent_serve_reloads_total",
                "Source generations activated.",
                &self.reloads,
            ),
            (
                "agent_serve_reload_failures_total",
                "Source generations that failed to load or validate.",
                &self.reload_failures,
            ),
            (
                "agent_serve_token_rotations_total",
                "Tokens issued by rotation.",
                &self.token_rotations,
            ),
            (
                "agent_serve_tls_reloads_total",
                "TLS certificate reloads.",
                &self.tls_reloads,
            ),
            (
                "agent_serve_source_reads_total",
                "Reads of the config source (on a change, SIGHUP or every poll interval).",
                &self.source_reads,
            ),
            (
                "agent_serve_butane_translations_total",
                "Butane files translated (new or changed since the last read; unchanged ones are not translated again).",
                &self.butane_translations,
            ),
            (
                "agent_serve_connections_rejected_total",
                "Connections refused: connection limit reached with every connection busy with a request, or the per-address cap.",
                &conns.rejected,
            ),
            (
                "agent_serve_connections_evicted_total",
                "Connections closed to make room for a new one at the connection limit: one without a whole request head, else the slowest response waiting for its client.",
                &conns.evicted,
            ),
            (
                "agent_serve_connections_header_timeouts_total",
                "Connections closed because no whole request head (or TLS handshake) arrived within the header time-out.",
                &conns.header_timeouts,
            ),
            (
                "agent_serve_responses_too_slow_total",
                "Responses dropped because their client took less than the minimum send rate in a window.",
                &conns.too_slow,
            ),
        ] {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            s,
            "# HELP agent_serve_open_connections Open client connections.\n# TYPE agent_serve_open_connections gauge\nagent_serve_open_connections {}",
            conns.open.load(Ordering::Relaxed)
        );
        if let Some(loops) = conns.loops.get() {
            let _ = writeln!(
                s,
                "# HELP agent_serve_loop_connections Connections each event loop has (new ones go to the loop with the fewest).\n# TYPE agent_serve_loop_connections gauge"
            );
            for (i, n) in loops.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "agent_serve_loop_connections{{loop=\"{i}\"}} {}",
                    n.load(Ordering::Relaxed)
                );
            }
        }
        s
    }

    /// The request latency histogram's lines.
    fn render_latency(&self, s: &mut String) {
        s.push_str("# HELP agent_serve_request_duration_seconds Request latency.\n");
        s.push_str("# TYPE agent_serve_request_duration_seconds histogram\n");
        let sum = |f: &dyn Fn(&Tally) -> &AtomicU64| -> u64 {
            self.tallies
                .iter()
                .map(|t| f(t).load(Ordering::Relaxed))
                .sum()
        };
        let mut cum = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cum += sum(&|t| &t.buckets[i]);
            let _ = writeln!(
                s,
                "agent_serve_request_duration_seconds_bucket{{le=\"{b}\"}} {cum}"
            );
        }
        let count = sum(&|t| &t.count);
        let _ = writeln!(
            s,
            "agent_serve_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            s,
            "agent_serve_request_duration_seconds_sum {}",
            sum(&|t| &t.sum_micros) as f64 / 1e6
        );
        let _ = writeln!(s, "agent_serve_request_duration_seconds_count {count}");
    }
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_add_up() {
        // More threads than tallies: some share one, and render adds all of them up.
        let m = std::sync::Arc::new(Metrics::default());
        let threads: Vec<_> = (0..TALLIES + 3)
            .map(|i| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        m.request(i, "worker", 200, "3.4.0", Duration::from_micros(200));
                    }
                    m.request(
                        i,
                        "worker",
                        if i % 2 == 0 { 304 } else { 200 },
                        "3.4.0",
                        Duration::ZERO,
                    );
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = m.render(&ConnStats::default());
        let n = (TALLIES + 3) * 100;
        let even = (TALLIES + 3).div_ceil(2);
        let ok = n + (TALLIES + 3 - even);
        assert!(
            s.contains(&format!(
                "agent_serve_requests_total{{pool=\"worker\",status=\"200\",version=\"3.4.0\"}} {ok}\n"
            )),
            "{s}"
        );
        assert!(
            s.contains(&format!(
                "agent_serve_requests_total{{pool=\"worker\",status=\"304\",version=\"3.4.0\"}} {even}\n"
            )),
            "{s}"
        );
        assert!(
            s.contains(&format!(
                "agent_serve_request_duration_seconds_count {}\n",
                n + TALLIES + 3
            )),
            "{s}"
        );
    }

    #[test]
    fn renders() {
        let m = Metrics::default();
        m.request(0, "worker", 200, "3.0.0", Duration::from_micros(300));
        m.request(0, "worker", 200, "3.0.0", Duration::from_millis(2));
        m.request(0, "-", 404, "-", Duration::from_micros(50));
        let c = ConnStats::default();
        c.open.store(3, Ordering::Relaxed);
        c.rejected.store(2, Ordering::Relaxed);
        c.evicted.store(5, Ordering::Relaxed);
        let s = m.render(&c);
        assert!(
            s.contains(
                "agent_serve_requests_total{pool=\"worker\",status=\"200\",version=\"3.0.0\"} 2"
            ),
            "{s}"
        );
        assert!(
            s.contains("agent_serve_request_duration_seconds_bucket{le=\"0.0005\"} 2"),
            "{s}"
        );
        assert!(s.contains("agent_serve_request_duration_seconds_count 3"));
        assert!(s.contains("agent_serve_open_connections 3"));
        assert!(
            s.contains("agent_serve_connections_rejected_total 2"),
            "{s}"
        );
        assert!(s.contains("agent_serve_connections_evicted_total 5"), "{s}");
        assert!(
            s.contains("agent_serve_connections_header_timeouts_total 0"),
            "{s}"
        );
    }
}
