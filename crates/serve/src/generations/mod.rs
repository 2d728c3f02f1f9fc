//! Generations: what the source gave (assigned, active, lastKnownGood: `status`), what the
//! `--state-dir` keeps of them (`checkpoint`), and the watcher that loads new ones (`watch`).
//! [`Generations`] is the watcher's value: it owns the generation state, loads the source
//! into it ([`reload`](Generations::reload)), ticks the soak and the tokens
//! ([`tick`](Generations::tick)), and answers what a request or `/status` reads of it.

pub mod checkpoint;
pub mod status;
pub mod watch;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use self::checkpoint::Checkpoint;
use self::status::Tracker;
use crate::metrics::Metrics;
use crate::source::{Generation, Translations};
use crate::tokens::state::Tokens;

/// The active generation, which every event loop reads on every request. Each loop keeps a
/// clone of its own (a [`Seen`]) and takes it again only after a change, so a read takes no
/// lock and writes no memory that another CPU reads (measured: the shared lock word and
/// reference count, taken twice per request, were a tenth of the server's own code on the
/// serve benchmark). A loop holds at most one generation this way until its next read.
#[derive(Default)]
pub struct Active {
    cur: RwLock<Option<Arc<Generation>>>,
    /// Changes with every `set` (0: never set).
    stamp: AtomicU64,
}

/// One reader's clone of an [`Active`]'s generation, and that generation's stamp. A `Seen`
/// serves one `Active` only (each event loop's belongs to the one server it serves).
#[derive(Default)]
pub struct Seen(u64, Option<Arc<Generation>>);

impl Active {
    pub fn set(&self, g: Option<Arc<Generation>>) {
        let mut cur = self.cur.write().unwrap_or_else(|e| e.into_inner());
        *cur = g;
        // Under the lock: stamps follow the order of the values.
        let next = self.stamp.load(Ordering::Relaxed) + 1;
        self.stamp.store(next, Ordering::Release);
    }

    pub fn get(&self) -> Option<Arc<Generation>> {
        self.cur.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The active generation, from the reader's clone `seen` (taken again after a change).
    pub fn seen<'a>(&self, seen: &'a mut Seen) -> Option<&'a Arc<Generation>> {
        let stamp = self.stamp.load(Ordering::Acquire);
        if stamp == 0 || seen.0 != stamp {
            let cur = self.cur.read().unwrap_or_else(|e| e.into_inner());
            // Under the lock: the stamp that goes with `cur`.
            *seen = Seen(self.stamp.load(Ordering::Acquire), cur.clone());
        }
        seen.1.as_ref()
    }
}

/// The generation state the watcher owns (module docs).
pub struct Generations {
    pub(crate) source: PathBuf,
    pub(crate) tracker: Mutex<Tracker>,
    /// Butane translations kept from one read of the source to the next.
    pub(crate) translations: Mutex<Translations>,
    pub(crate) active: Active,
    pub(crate) checkpoint: Option<Checkpoint>,
    /// Why a checkpoint was refused at start, or the last failed checkpoint write.
    pub(crate) checkpoint_errors: Mutex<Vec<String>>,
    /// What the checkpoint gave back at start (for /status).
    pub(crate) restored: Mutex<serde_json::Value>,
    pub(crate) soak: u64,
    /// The tokens, rebuilt when the active generation changes and rotated on each tick.
    pub(crate) tokens: Arc<Tokens>,
    pub(crate) metrics: Arc<Metrics>,
    /// The rollouts the store says are complete (`pool:config-hash`), told by the fleet's
    /// rollout tick: until then lastKnownGood stays the previous generation.
    pub(crate) rollouts_done: Mutex<std::collections::BTreeSet<String>>,
}

/// The generations by role, for the admin page and gauges.
pub struct Roles {
    pub assigned: Option<String>,
    pub active: Option<String>,
    pub last_known_good: Option<String>,
    /// The active generation as the tracker has it.
    pub generation: Option<Arc<Generation>>,
    /// The lastKnownGood generation as the tracker has it.
    pub lkg_generation: Option<Arc<Generation>>,
    /// The assigned (newest seen) generation: its id, directory and when it was seen.
    pub assigned_ref: Option<status::GenRef>,
    /// Why the assigned generation was rejected, while it is.
    pub error: Option<String>,
}

impl Generations {
    /// Nothing loaded yet: generations of `source`, checkpointed in `state_dir` (a directory
    /// that cannot be used is reported, and the server goes on without checkpoints).
    pub fn new(
        source: PathBuf,
        state_dir: Option<&std::path::Path>,
        soak: u64,
        tokens: Arc<Tokens>,
        metrics: Arc<Metrics>,
    ) -> Generations {
        let mut checkpoint_errors = Vec::new();
        let checkpoint = match state_dir {
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
        Generations {
            source,
            tracker: Mutex::new(Tracker::default()),
            translations: Mutex::default(),
            active: Active::default(),
            checkpoint,
            checkpoint_errors: Mutex::new(checkpoint_errors),
            restored: Mutex::new(serde_json::Value::Null),
            soak,
            tokens,
            metrics,
            rollouts_done: Mutex::default(),
        }
    }

    /// The rollouts complete now (`pool:config-hash`, see [`crate::fleet::rollout`]).
    pub fn set_rollouts_done(&self, done: std::collections::BTreeSet<String>) {
        *self.rollouts_done.lock().unwrap_or_else(|e| e.into_inner()) = done;
    }

    /// Whether a pool of `active` with a rollout policy has another config than
    /// lastKnownGood's and its rollout is not complete: lastKnownGood is not replaced then.
    pub(crate) fn rollout_unfinished(&self, t: &Tracker) -> bool {
        let (Some(active), Some(lkg)) = (&t.active, &t.lkg) else {
            return false;
        };
        let done = self.rollouts_done.lock().unwrap_or_else(|e| e.into_inner());
        active
            .rollouts
            .keys()
            .any(|pool| match (active.pools.get(pool), lkg.pools.get(pool)) {
                (Some(new), Some(old)) => {
                    new.config_hash != old.config_hash
                        && !done.contains(&format!("{pool}:{}", new.config_hash))
                }
                _ => false,
            })
    }

    /// For a fetch that names no machine (`/config/<pool>`): the previous config of `pool`
    /// while its rollout is not complete (such a machine is never a canary), else None.
    pub fn unfinished_previous(&self, pool: &str) -> Option<Arc<crate::source::render::Pool>> {
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let (active, lkg) = (t.active.as_ref()?, t.lkg.as_ref()?);
        active.rollouts.get(pool)?;
        let (new, old) = (active.pools.get(pool)?, lkg.pools.get(pool)?);
        if new.config_hash == old.config_hash {
            return None;
        }
        let key = format!("{pool}:{}", new.config_hash);
        let done = self.rollouts_done.lock().unwrap_or_else(|e| e.into_inner());
        (!done.contains(&key)).then(|| old.clone())
    }

    /// The generation served.
    pub fn active(&self) -> Option<Arc<Generation>> {
        self.active.get()
    }

    /// The lastKnownGood generation (a rollout's previous one).
    pub fn last_known_good(&self) -> Option<Arc<Generation>> {
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        t.lkg.clone()
    }

    /// The generation served, from a reader's clone (see [`Active::seen`]).
    pub fn seen<'a>(&self, seen: &'a mut Seen) -> Option<&'a Arc<Generation>> {
        self.active.seen(seen)
    }

    /// Assigned, active and lastKnownGood by generation id, and the active generation.
    pub fn roles(&self) -> Roles {
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let id = |g: Option<&status::GenRef>| g.map(|g| g.generation.clone());
        Roles {
            assigned: id(t.assigned.as_ref()),
            active: id(t.active_ref.as_ref()),
            last_known_good: id(t.lkg_ref.as_ref()),
            generation: t.active.clone(),
            lkg_generation: t.lkg.clone(),
            assigned_ref: t.assigned.clone(),
            error: t.error.clone(),
        }
    }

    /// For `/status` under `--require-token`: the generation id served, whether the source
    /// has an error, whether the checkpoint has one.
    pub fn public_status(&self) -> (Option<String>, bool, bool) {
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let generation = t.active.as_ref().map(|g| g.id.clone());
        let error = t.error.is_some();
        drop(t);
        let checkpoint_error = !self
            .checkpoint_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        (generation, error, checkpoint_error)
    }

    /// After the first load: whether the source loaded and what is served, in one line.
    pub fn first_load_line(&self) -> String {
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let serving = t
            .active
            .as_ref()
            .map_or("nothing".to_string(), |g| format!("generation {}", g.id));
        match &t.error {
            None => format!("source loaded: serving {serving}"),
            Some(_) => format!("source not loaded (see /status): serving {serving}"),
        }
    }

    /// `/status`'s `"sources"` entry: the source's status.
    pub fn source_json(&self) -> serde_json::Value {
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        t.to_json(&self.source.display().to_string())
    }

    /// `/status`'s `"checkpoint"`.
    pub fn checkpoint_json(&self) -> serde_json::Value {
        let errors = self
            .checkpoint_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        serde_json::json!({
            "dir": self.checkpoint.as_ref().map(|c| c.dir.display().to_string()),
            "errors": errors,
            "restored": *self.restored.lock().unwrap_or_else(|e| e.into_inner()),
        })
    }
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
            rollouts: Default::default(),
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
}
