//! [`Tokens`]: the server's token state in one value — the legacy store or the key tokens
//! are derived from, the rotation schedule, the index a request's token is looked up in, the
//! old configs that still-valid derived tokens name, and the last error — with what is done
//! with it: [`authorize`](Tokens::authorize) a request, [`rotate`](Tokens::rotate) on the
//! watcher's tick, [`rebuild`](Tokens::rebuild) the index after a new generation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::Result;

use super::{Clock, Grant, Index, Key, Schedule, Store, Target, derived_index, parse_bearer};
use crate::http::{Request, Response};
use crate::source::Generation;
use crate::source::render::Pool;

/// Old configs kept per pool at most (the newest; [`Tokens::retire`]).
pub const MAX_RETAINED_PER_POOL: usize = 16;

/// An old config kept because tokens of it may still be valid: the payload and the last epoch
/// whose tokens were handed out for it.
#[derive(Debug, Clone)]
pub struct Retained {
    pub pool: Arc<Pool>,
    pub last_epoch: u64,
}

/// What tokens are made of and looked up in (module docs).
pub struct Tokens {
    clock: Box<dyn Clock>,
    /// Legacy mode: the shared token directory.
    store: Option<Store>,
    /// Derived mode: the key file and the key read from it.
    key_file: Option<PathBuf>,
    key: RwLock<Option<Key>>,
    schedule: Schedule,
    /// Derived mode: the epoch the rotation counter last saw.
    seen_epoch: AtomicU64,
    index: RwLock<Option<Index>>,
    error: Mutex<Option<String>>,
    /// Old configs that still-valid derived tokens name, by (pool, config hash).
    retained: RwLock<BTreeMap<(String, String), Retained>>,
    ttl: u64,
}

impl Tokens {
    /// Derived tokens from the key in `key_file` (read now: fails when it cannot be), else
    /// the legacy store in `store_dir`.
    pub fn new(
        key_file: Option<PathBuf>,
        store_dir: PathBuf,
        ttl: u64,
        skew: u64,
        clock: Box<dyn Clock>,
    ) -> Result<Tokens> {
        let key = match &key_file {
            Some(p) => Some(Key::from_file(p)?),
            None => None,
        };
        if let (Some(k), Some(p)) = (&key, &key_file) {
            log::info!(
                "tokens derived from the key in {} (key id {})",
                p.display(),
                k.id()
            );
        }
        Ok(Tokens {
            clock,
            store: key.is_none().then(|| Store::new(store_dir)),
            key_file,
            key: RwLock::new(key),
            schedule: Schedule::new(ttl, skew),
            seen_epoch: AtomicU64::new(0),
            index: RwLock::new(None),
            error: Mutex::new(None),
            retained: RwLock::new(BTreeMap::new()),
            ttl,
        })
    }

    /// The server's clock (seconds since the Unix epoch).
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Whether tokens are derived from a key (else the legacy store).
    pub fn derived(&self) -> bool {
        self.key_file.is_some()
    }

    /// The last error of the key or the store, if any.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Checks a bearer token; Ok(what it grants) or the error response. `active`: the
    /// generation served, should the index be stale.
    pub fn authorize(
        &self,
        req: &Request,
        active: impl FnOnce() -> Option<Arc<Generation>>,
    ) -> Result<Grant, Response> {
        let tok = parse_bearer(req.header_one("authorization")).map_err(|_| {
            Response::text(401, "missing or malformed Authorization: Bearer <token>")
                .header("WWW-Authenticate", "Bearer")
        })?;
        let now = self.now();
        if self.derived() {
            // The index covers the epochs around the one it was built in; past that (the
            // watcher has not ticked yet) rebuild it first.
            let stale = self
                .index
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(|i| self.schedule.epoch(now) > i.epoch + 1);
            if stale {
                self.rebuild(active().as_deref());
            }
        }
        let idx = self.index.read().unwrap_or_else(|e| e.into_inner());
        let Some(idx) = idx.as_ref() else {
            return Err(
                Response::text(503, "tokens are not available yet").header("Retry-After", "5")
            );
        };
        match idx.lookup(tok, now) {
            Some(g) => Ok(g.clone()),
            // Unknown is "not ready yet" for a booting machine: a 5xx makes it retry.
            None => Err(Response::text(503, "token not known (yet)").header("Retry-After", "5")),
        }
    }

    /// The payload a token names: a store token its pool's current config (in `active`); a
    /// derived token its own config, current or retained. None once the pool left the source
    /// (revoked).
    pub fn granted_pool(&self, g: &Grant, active: Option<&Generation>) -> Option<Arc<Pool>> {
        let cur = active.and_then(|a| a.pools.get(&g.pool).cloned())?;
        let Some(cfg) = &g.config else {
            return Some(cur);
        };
        if &cur.config_hash == cfg {
            return Some(cur);
        }
        self.retained
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(g.pool.clone(), cfg.clone()))
            .map(|r| r.pool.clone())
    }

    /// Rebuilds the derived-token index from the key, the `active` generation and the
    /// retained configs.
    pub fn rebuild(&self, active: Option<&Generation>) {
        if !self.derived() {
            return;
        }
        let now = self.now();
        let Some(key) = self.key.read().unwrap_or_else(|e| e.into_inner()).clone() else {
            return;
        };
        let mut targets = Vec::new();
        if let Some(g) = active {
            for (name, p) in &g.pools {
                targets.push(Target {
                    pool: name.clone(),
                    config: p.config_hash.clone(),
                    last_epoch: None,
                });
            }
        }
        for r in self
            .retained
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            targets.push(Target {
                pool: r.pool.name.clone(),
                config: r.pool.config_hash.clone(),
                last_epoch: Some(r.last_epoch),
            });
        }
        let idx = derived_index(&key, &self.schedule, &targets, now);
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = Some(idx);
    }

    /// Puts back the old configs a checkpoint kept whose tokens have not all expired
    /// (derived mode only).
    pub fn restore(&self, retained: Vec<Retained>, now: u64) {
        if !self.derived() {
            return;
        }
        let mut ret = self.retained.write().unwrap_or_else(|e| e.into_inner());
        for x in retained {
            if self.schedule.expires(x.last_epoch) > now {
                ret.insert((x.pool.name.clone(), x.pool.config_hash.clone()), x);
            }
        }
    }

    /// The old configs kept, for the checkpoint.
    pub fn retained(&self) -> Vec<Retained> {
        self.retained
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// After the active generation changed from `before` to `after` (derived tokens): a pool
    /// whose config changed keeps its old config (and payload) for the tokens handed out for
    /// it until this epoch; a pool that left the source loses all of them at once.
    pub fn retire(&self, before: Option<&Generation>, after: Option<&Generation>, now: u64) {
        if !self.derived() {
            return;
        }
        let epoch = self.schedule.epoch(now);
        let mut r = self.retained.write().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = before {
            for (name, old) in &b.pools {
                let new = after.and_then(|a| a.pools.get(name));
                if new.is_some_and(|n| n.config_hash != old.config_hash) {
                    let e = r
                        .entry((name.clone(), old.config_hash.clone()))
                        .or_insert_with(|| Retained {
                            pool: old.clone(),
                            last_epoch: epoch,
                        });
                    e.last_epoch = e.last_epoch.max(epoch);
                    log::info!(
                        "pool {name}: config {} replaced by {}; its tokens keep their payload until they expire",
                        old.config_name,
                        new.map_or("", |n| n.config_name.as_str())
                    );
                }
            }
        }
        let before_n = r.len();
        r.retain(|(pool, hash), _| {
            after.is_some_and(|a| a.pools.get(pool).is_some_and(|p| &p.config_hash != hash))
        });
        if r.len() < before_n {
            log::info!(
                "tokens: {} retained payload(s) dropped (pool left the source, or config current again)",
                before_n - r.len()
            );
        }
        cap_retained(&mut r);
    }

    /// The watcher's tick: derived tokens re-read the key, count rotations, prune retained
    /// configs and rebuild the index; store tokens are reconciled with the pools of `active`
    /// and read back. Returns the tokens rotated (for the metrics).
    pub fn rotate(&self, active: Option<&Generation>, now: u64) -> u64 {
        if self.derived() {
            return self.rotate_derived(active, now);
        }
        let Some(store) = &self.store else {
            return 0;
        };
        let mut rotated = 0;
        let res = (|| -> Result<Index> {
            if let Some(g) = active {
                let pools: Vec<String> = g.pools.keys().cloned().collect();
                let r = store.update(|s| s.reconcile(&pools, now, self.ttl))?;
                if r.changed() {
                    rotated = r.rotated as u64;
                    log::info!(
                        "tokens: {} issued, {} rotated, {} expired, {} revoked",
                        r.created,
                        r.rotated,
                        r.expired,
                        r.revoked
                    );
                }
            }
            Ok(store.read()?.index())
        })();
        let mut err = self.error.lock().unwrap_or_else(|e| e.into_inner());
        match res {
            Ok(idx) => {
                *self.index.write().unwrap_or_else(|e| e.into_inner()) = Some(idx);
                *err = None;
            }
            Err(e) => {
                let msg = format!("token store {}: {e:#}", store.dir.display());
                if err.as_deref() != Some(msg.as_str()) {
                    log::error!("{msg}");
                }
                *err = Some(msg);
            }
        }
        rotated
    }

    /// Derived tokens: re-read the key (a changed key revokes every token of the old one; an
    /// unreadable one keeps the old key and is reported), count rotations, prune retained
    /// configs whose tokens have all expired, rebuild the index.
    fn rotate_derived(&self, active: Option<&Generation>, now: u64) -> u64 {
        if let Some(path) = &self.key_file {
            let mut err = self.error.lock().unwrap_or_else(|e| e.into_inner());
            match Key::from_file(path) {
                Ok(k) => {
                    let mut cur = self.key.write().unwrap_or_else(|e| e.into_inner());
                    if cur.as_ref().is_none_or(|c| c.id() != k.id()) {
                        log::warn!(
                            "token key {} changed (key id {}): tokens derived from the old key are no longer accepted",
                            path.display(),
                            k.id()
                        );
                        *cur = Some(k);
                    }
                    *err = None;
                }
                Err(e) => {
                    let msg = format!("{e:#} (keeping the key read before)");
                    if err.as_deref() != Some(msg.as_str()) {
                        log::error!("{msg}");
                    }
                    *err = Some(msg);
                }
            }
        }
        let epoch = self.schedule.epoch(now);
        let seen = self.seen_epoch.swap(epoch, Ordering::Relaxed);
        let mut rotated = 0;
        if seen != 0 && epoch > seen {
            let pools = active.map_or(0, |g| g.pools.len()) as u64;
            rotated = pools * (epoch - seen).min(2);
        }
        {
            let mut r = self.retained.write().unwrap_or_else(|e| e.into_inner());
            let n = r.len();
            r.retain(|_, x| self.schedule.expires(x.last_epoch) > now);
            if r.len() < n {
                log::info!(
                    "tokens: {} retained payload(s) pruned (all their tokens expired)",
                    n - r.len()
                );
            }
        }
        self.rebuild(active);
        rotated
    }

    /// `/status`'s `"tokens"`.
    pub fn status_json(&self) -> serde_json::Value {
        let error = self.error();
        if !self.derived() {
            return serde_json::json!({"mode": "store", "error": error, "ttlSeconds": self.ttl});
        }
        let retained: Vec<serde_json::Value> = self
            .retained
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|r| {
                serde_json::json!({"pool": r.pool.name, "config": r.pool.config_name,
                    "tokensExpire": crate::http::time(self.schedule.expires(r.last_epoch))})
            })
            .collect();
        let key_id = self
            .key
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|k| k.id().to_string());
        serde_json::json!({"mode": "derived", "error": error, "ttlSeconds": self.ttl,
            "rotationSeconds": self.schedule.period(),
            "clockSkewSeconds": self.schedule.skew, "keyId": key_id,
            "retainedPayloads": retained})
    }
}

/// Keeps at most [`MAX_RETAINED_PER_POOL`] old configs per pool, the newest.
fn cap_retained(r: &mut BTreeMap<(String, String), Retained>) {
    let mut per_pool: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for ((pool, hash), x) in r.iter() {
        per_pool
            .entry(pool.clone())
            .or_default()
            .push((x.last_epoch, hash.clone()));
    }
    for (pool, mut list) in per_pool {
        if list.len() <= MAX_RETAINED_PER_POOL {
            continue;
        }
        list.sort();
        let drop_n = list.len() - MAX_RETAINED_PER_POOL;
        for (_, hash) in list.into_iter().take(drop_n) {
            log::warn!(
                "pool {pool}: more than {MAX_RETAINED_PER_POOL} old configs with valid tokens; dropping the oldest ({hash:.16})"
            );
            r.remove(&(pool.clone(), hash));
        }
    }
}
