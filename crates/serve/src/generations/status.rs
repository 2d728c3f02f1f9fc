//! Source status, shaped like a node's config status: `assigned` (newest generation seen),
//! `active` (being served), `lastKnownGood` (the active generation once it has soaked), `error`.
//!
//! A generation that fails to load or validate is never served: the server rolls back to
//! lastKnownGood when there is one, else keeps what it was serving, and reports why. A valid
//! generation without any pool (the source reset to empty) resets lastKnownGood at once, and is
//! never promoted: like a node's local defaults, "nothing" needs no fallback.
//!
//! The checkpoint directory (`crate::generations::checkpoint`) keeps assigned, active and lastKnownGood
//! across restarts: [`Tracker::restore`] puts them back before the first load, so a restart
//! on a broken or missing source serves lastKnownGood (or the last active generation when
//! none has soaked yet), and a soak goes on from its recorded start.

use std::sync::Arc;

use serde::Serialize;

use crate::source::Generation;

/// A generation as reported in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenRef {
    pub generation: String,
    pub path: String,
    /// Unix seconds when this server first saw it in this role (RFC 3339 in `/status`).
    #[serde(serialize_with = "crate::http::serialize_time")]
    pub since: u64,
}

#[derive(Debug, Default)]
pub struct Tracker {
    pub assigned: Option<GenRef>,
    pub active: Option<Arc<Generation>>,
    pub active_ref: Option<GenRef>,
    pub lkg: Option<Arc<Generation>>,
    pub lkg_ref: Option<GenRef>,
    pub error: Option<String>,
}

/// What an observation changed.
#[derive(Debug, PartialEq, Eq)]
pub enum Change {
    None,
    /// A new generation is being served.
    Activated,
    /// A bad generation was seen (first time or a different error).
    Failed,
}

fn gref(g: &Generation, now: u64) -> GenRef {
    GenRef {
        generation: g.id.clone(),
        path: g.dir.display().to_string(),
        since: now,
    }
}

impl Tracker {
    /// A generation that loaded and validated.
    pub fn observe_ok(&mut self, g: Generation, now: u64) -> Change {
        if self.assigned.as_ref().is_some_and(|a| a.generation == g.id)
            && self.active.as_ref().is_some_and(|a| a.id == g.id)
            && self.error.is_none()
        {
            return Change::None;
        }
        self.error = None;
        if self.assigned.as_ref().is_none_or(|a| a.generation != g.id) {
            self.assigned = Some(gref(&g, now));
        }
        if g.pools.is_empty() {
            // Reset to empty: lastKnownGood is reset with it.
            self.lkg = None;
            self.lkg_ref = None;
        }
        if self.active.as_ref().is_some_and(|a| a.id == g.id) {
            return Change::None;
        }
        self.active_ref = Some(gref(&g, now));
        self.active = Some(Arc::new(g));
        Change::Activated
    }

    /// A generation that could not be read (`id` None) or did not validate.
    pub fn observe_err(&mut self, id: Option<&str>, path: &str, error: String, now: u64) -> Change {
        let id = id.unwrap_or("unreadable");
        let same = self.assigned.as_ref().is_some_and(|a| a.generation == id)
            && self.error.as_deref() == Some(error.as_str());
        if same {
            return Change::None;
        }
        if self.assigned.as_ref().is_none_or(|a| a.generation != id) {
            self.assigned = Some(GenRef {
                generation: id.to_string(),
                path: path.to_string(),
                since: now,
            });
        }
        self.error = Some(error);
        // Roll back to lastKnownGood when there is one; otherwise keep serving what we had.
        if let (Some(lkg), Some(lref)) = (&self.lkg, &self.lkg_ref)
            && self.active.as_ref().is_none_or(|a| a.id != lkg.id)
        {
            self.active = Some(lkg.clone());
            self.active_ref = Some(GenRef {
                since: now,
                ..lref.clone()
            });
        }
        Change::Failed
    }

    /// Promotes the active generation to lastKnownGood once it has been assigned and active
    /// for `soak` seconds. Returns whether it promoted.
    pub fn tick(&mut self, now: u64, soak: u64) -> bool {
        let (Some(active), Some(assigned)) = (&self.active, &self.assigned) else {
            return false;
        };
        if assigned.generation != active.id || self.error.is_some() {
            return false;
        }
        if self.lkg.as_ref().is_some_and(|l| l.id == active.id) || active.pools.is_empty() {
            return false;
        }
        if now.saturating_sub(assigned.since) < soak {
            return false;
        }
        self.lkg = Some(active.clone());
        self.lkg_ref = Some(gref(active, now));
        true
    }

    /// Puts back what the checkpoint kept, before the first load. Without an active record
    /// lastKnownGood is served.
    pub fn restore(
        &mut self,
        assigned: Option<GenRef>,
        active: Option<(Arc<Generation>, GenRef)>,
        lkg: Option<(Arc<Generation>, GenRef)>,
    ) {
        self.assigned = assigned;
        if let Some((g, r)) = lkg {
            self.lkg = Some(g);
            self.lkg_ref = Some(r);
        }
        match active {
            Some((g, r)) => {
                self.active = Some(g);
                self.active_ref = Some(r);
            }
            None => {
                self.active = self.lkg.clone();
                self.active_ref = self.lkg_ref.clone();
            }
        }
    }

    pub fn to_json(&self, source: &str) -> serde_json::Value {
        serde_json::json!({
            "source": source,
            "assigned": self.assigned,
            "active": self.active_ref,
            "lastKnownGood": self.lkg_ref,
            "error": self.error,
            "pools": self.active.as_ref().map(|g| g.pools.values().map(|p| {
                serde_json::json!({"name": p.name, "config": p.config_name,
                    "minVersion": p.min_version.to_string()})
            }).collect::<Vec<_>>()),
            // Network boot (docs/serve.md, "Machines and network boot"): how many machine
            // files, which boot profiles and assets the served generation has.
            "machines": self.active.as_ref().map(|g| serde_json::json!({
                "files": g.machines.specs.len(),
                "bootProfiles": g.machines.profiles.keys().collect::<Vec<_>>(),
                "assets": g.machines.assets.keys().collect::<Vec<_>>(),
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A generation with one pool (an empty one is the source reset to empty).
    fn g(id: &str) -> Generation {
        let mut e = empty(id);
        e.pools.insert(
            "worker".into(),
            Arc::new(
                crate::source::render::Pool::new(
                    "worker",
                    spec::config::parse(br#"{"ignition":{"version":"3.0.0"}}"#)
                        .unwrap()
                        .config,
                )
                .unwrap(),
            ),
        );
        e
    }

    fn empty(id: &str) -> Generation {
        Generation {
            id: id.into(),
            dir: format!("/src/..{id}").into(),
            pools: BTreeMap::new(),
            machines: Default::default(),
            rollouts: Default::default(),
        }
    }

    #[test]
    fn lifecycle() {
        let mut t = Tracker::default();
        assert_eq!(t.observe_ok(g("a"), 0), Change::Activated);
        assert_eq!(t.observe_ok(g("a"), 5), Change::None);
        assert!(!t.tick(599, 600));
        assert!(t.tick(600, 600));
        assert_eq!(t.lkg_ref.as_ref().unwrap().generation, "a");
        // b is valid and served, but not yet soaked.
        assert_eq!(t.observe_ok(g("b"), 700), Change::Activated);
        assert!(!t.tick(800, 600));
        // c is broken: roll back to lastKnownGood a, report the error.
        assert_eq!(
            t.observe_err(Some("c"), "/src/..c", "bad".into(), 900),
            Change::Failed
        );
        assert_eq!(t.active.as_ref().unwrap().id, "a");
        assert_eq!(t.assigned.as_ref().unwrap().generation, "c");
        assert_eq!(t.error.as_deref(), Some("bad"));
        assert_eq!(
            t.observe_err(Some("c"), "/src/..c", "bad".into(), 950),
            Change::None
        );
        assert!(!t.tick(10_000, 600));
        // Fixed: d becomes active, then lastKnownGood after its soak.
        assert_eq!(t.observe_ok(g("d"), 1000), Change::Activated);
        assert!(t.error.is_none());
        assert!(!t.tick(1599, 600));
        assert!(t.tick(1600, 600));
        assert_eq!(t.lkg.as_ref().unwrap().id, "d");
    }

    #[test]
    fn empty_source_resets_last_known_good_and_restore() {
        let mut t = Tracker::default();
        t.observe_ok(g("a"), 0);
        assert!(t.tick(600, 600));
        assert!(t.lkg.is_some());
        t.observe_ok(empty("empty"), 700);
        assert!(t.lkg.is_none(), "reset to empty resets lastKnownGood");
        assert!(
            !t.tick(10_000, 600),
            "an empty generation is never promoted"
        );

        // Restore: no active record → lastKnownGood is served; the soak start is kept.
        let mut r = Tracker::default();
        let l = Arc::new(g("l"));
        let lref = gref(&l, 5);
        r.restore(Some(lref.clone()), None, Some((l.clone(), lref.clone())));
        assert_eq!(r.active.as_ref().unwrap().id, "l");
        assert_eq!(r.observe_ok(g("l"), 50), Change::None);
        assert_eq!(r.assigned.as_ref().unwrap().since, 5);
    }

    #[test]
    fn broken_first_generation_serves_nothing() {
        let mut t = Tracker::default();
        t.observe_err(None, "/src", "unreadable".into(), 0);
        assert!(t.active.is_none());
        // No lastKnownGood yet: a broken push keeps the current active one.
        t.observe_ok(g("a"), 1);
        t.observe_err(Some("b"), "/src", "bad".into(), 2);
        assert_eq!(t.active.as_ref().unwrap().id, "a");
    }
}
