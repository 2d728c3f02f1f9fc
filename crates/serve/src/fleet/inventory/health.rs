//! Whether the inventory store works, as `/status` (`inventory`) and both `/metrics`
//! (`agent_serve_inventory_up`, `agent_serve_inventory_failures_total`) show it.
//!
//! Each store says what its operations find: a failure (the embedded store's file could not
//! be written, no etcd member answered) makes it down, with the error and since when; an
//! operation that succeeds makes it up again. What "succeeds" means is the store's: the
//! embedded store is up again once a write commits (a read can succeed on a full disk), the
//! etcd store once a member answers. Between operations a probe ([`super::Store::probe`],
//! started by [`check`] at most every [`PROBE_EVERY`]) asks the store again, so a stopped
//! etcd shows before the next report, and so does its recovery.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

/// How often [`check`] starts a probe at most.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);

/// A store's health: kept by the store, read by `/status` and `/metrics`.
#[derive(Debug, Default)]
pub struct Health {
    state: Mutex<State>,
    failures: AtomicU64,
    probing: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    /// Why the store is down (None: up).
    error: Option<String>,
    /// Since when it is up or down (seconds since the Unix epoch; 0: up since it was opened).
    since: u64,
    /// When a probe was last started.
    probed: Option<Instant>,
}

/// What `/status` shows of the store (`"inventory"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub ok: bool,
    /// Why it is down: the error of the last operation that failed.
    pub error: Option<String>,
    /// Since when it is up (since it was opened: the time it was opened) or down (RFC 3339
    /// in `/status`).
    #[serde(serialize_with = "crate::http::serialize_time")]
    pub since: u64,
    /// Operations that failed since the server started.
    pub failures: u64,
}

impl Snapshot {
    /// A store that could not be opened at all (`since`: when the server tried).
    pub fn unusable(error: &str, since: u64) -> Snapshot {
        Snapshot {
            ok: false,
            error: Some(error.to_string()),
            since,
            failures: 0,
        }
    }

    /// The lines of `/metrics` (Prometheus text).
    pub fn metrics(&self) -> String {
        format!(
            "# HELP agent_serve_inventory_up Whether the inventory store works (0: its last operation failed; see /status).\n# TYPE agent_serve_inventory_up gauge\nagent_serve_inventory_up {}\n# HELP agent_serve_inventory_failures_total Inventory store operations that failed (the store's file could not be written, no etcd member answered).\n# TYPE agent_serve_inventory_failures_total counter\nagent_serve_inventory_failures_total {}\n",
            u8::from(self.ok),
            self.failures
        )
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Health {
    /// Up since now.
    pub fn new() -> Health {
        let h = Health::default();
        h.lock().since = now_secs();
        h
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An operation succeeded: up (again).
    pub fn up(&self) {
        let mut s = self.lock();
        if let Some(e) = s.error.take() {
            s.since = now_secs();
            drop(s);
            log::warn!(
                "the inventory store works again ({} failed operations so far; the last: {e})",
                self.failures.load(Ordering::Relaxed)
            );
        }
    }

    /// An operation failed with `e`: down (the error is the newest one's).
    pub fn down(&self, e: &anyhow::Error) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let msg = format!("{e:#}");
        let mut s = self.lock();
        if s.error.is_none() {
            s.since = now_secs();
            log::error!("the inventory store failed: {msg}");
        }
        s.error = Some(msg);
    }

    pub fn snapshot(&self) -> Snapshot {
        let s = self.lock();
        Snapshot {
            ok: s.error.is_none(),
            error: s.error.clone(),
            since: s.since,
            failures: self.failures.load(Ordering::Relaxed),
        }
    }

    /// Whether a probe should start now (none running, none started in the last `every`);
    /// if so, it counts as started.
    fn probe_due(&self, every: Duration) -> bool {
        let mut s = self.lock();
        if self.probing.load(Ordering::Acquire) || s.probed.is_some_and(|t| t.elapsed() < every) {
            return false;
        }
        s.probed = Some(Instant::now());
        self.probing.store(true, Ordering::Release);
        true
    }
}

/// What `/status` and `/metrics` call: the store's health as its operations left it, and a
/// probe started on a thread of its own when one is due (the answer never waits for the
/// store; the probe's finding shows in the next one).
pub fn check(store: &Arc<dyn super::Store>) -> Snapshot {
    let h = store.health();
    if h.probe_due(PROBE_EVERY) {
        let s = store.clone();
        let spawned = std::thread::Builder::new()
            .name("inventory-probe".into())
            .spawn(move || {
                s.probe();
                s.health().probing.store(false, Ordering::Release);
            });
        if let Err(e) = spawned {
            log::warn!("starting a thread to probe the inventory store: {e}");
            h.probing.store(false, Ordering::Release);
        }
    }
    h.snapshot()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_then_up() {
        let h = Health::new();
        assert!(h.snapshot().ok);
        h.down(&anyhow::anyhow!("disk full").context("writing x"));
        h.down(&anyhow::anyhow!("still full"));
        let s = h.snapshot();
        assert!(!s.ok);
        assert_eq!(s.error.as_deref(), Some("still full"));
        assert_eq!(s.failures, 2);
        assert!(s.metrics().contains("agent_serve_inventory_up 0\n"));
        assert!(
            s.metrics()
                .contains("agent_serve_inventory_failures_total 2\n")
        );
        h.up();
        let s = h.snapshot();
        assert!(s.ok && s.error.is_none() && s.failures == 2);
        assert!(s.metrics().contains("agent_serve_inventory_up 1\n"));
        // One probe at a time, one per interval.
        assert!(h.probe_due(Duration::ZERO));
        assert!(!h.probe_due(Duration::ZERO), "one is running");
        h.probing.store(false, Ordering::Release);
        assert!(
            !h.probe_due(Duration::from_secs(60)),
            "one started just now"
        );
        assert!(h.probe_due(Duration::ZERO));
    }
}
