//! The source watcher: loads generations from the source into the [`App`] (a new valid
//! generation becomes active, a broken one is recorded in the status and the last good one
//! stays served), promotes the active one to lastKnownGood after the soak time, rotates
//! tokens, and reloads the TLS certificate. [`watch_loop`] runs it on inotify events (the
//! source, its parent, `pools/`, the token directory), on SIGHUP and, as the fallback, every
//! poll interval.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::app::App;
use crate::generations::checkpoint::{MAX_RETAINED_PER_POOL, Retained, Snapshot};
use crate::http::tls;
use crate::source::{self, Generation, LoadError};
use crate::generations::status::Change;
use crate::tokens;

impl App {
    /// Puts back what the checkpoint directory kept (before the first load): assigned,
    /// active, lastKnownGood and the old payloads that valid tokens may still name. Records
    /// that cannot be trusted are refused one by one, logged and shown in `/status`.
    pub fn restore(&self) {
        let Some(c) = &self.checkpoint else {
            return;
        };
        let now = self.now();
        let r = c.load();
        for e in &r.errors {
            log::error!("{e}");
        }
        let info = serde_json::json!({
            "active": r.active.as_ref().map(|(g, _)| g.id.clone()),
            "lastKnownGood": r.lkg.as_ref().map(|(g, _)| g.id.clone()),
            "retainedPayloads": r.retained.len(),
        });
        if r.active.is_some() || r.lkg.is_some() {
            log::info!("restored from checkpoint {}: {info}", c.dir.display());
        }
        *self.restored.lock().unwrap_or_else(|e| e.into_inner()) = info;
        self.checkpoint_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(r.errors);
        if self.derived() {
            let mut ret = self.retained.write().unwrap_or_else(|e| e.into_inner());
            for x in r.retained {
                if self.schedule.expires(x.last_epoch) > now {
                    ret.insert((x.pool.name.clone(), x.pool.config_hash.clone()), x);
                }
            }
        }
        let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        t.restore(r.assigned, r.active, r.lkg);
        self.active.set(t.active.clone());
        drop(t);
        self.rebuild_index();
    }

    /// Reads the source and updates status; a new valid generation becomes active.
    pub fn reload(&self, force: bool) {
        let now = self.now();
        let before = self.active();
        self.load(force, now);
        self.after_change(before, now);
    }

    fn load(&self, force: bool, now: u64) {
        let read = {
            let mut tr = self.translations.lock().unwrap_or_else(|e| e.into_inner());
            let before = tr.count;
            let r = source::read(&self.source, &mut tr);
            self.metrics
                .butane_translations
                .fetch_add(tr.count - before, Ordering::Relaxed);
            self.metrics.source_reads.fetch_add(1, Ordering::Relaxed);
            r
        };
        let raw = match read {
            Ok(r) => r,
            Err(e) => {
                return self.failed(
                    None,
                    &self.source.display().to_string(),
                    format!("{e:#}"),
                    now,
                );
            }
        };
        {
            let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
            if !force && t.assigned.as_ref().is_some_and(|a| a.generation == raw.id) {
                return;
            }
        }
        match source::build(raw) {
            Ok(g) => {
                let id = g.id.clone();
                let dir = g.dir.display().to_string();
                let pools = g.pools.len();
                let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
                if t.observe_ok(g, now) == Change::Activated {
                    self.metrics.reloads.fetch_add(1, Ordering::Relaxed);
                    log::info!("serving generation {id} from {dir} ({pools} pools)");
                }
                self.active.set(t.active.clone());
            }
            Err(LoadError::Invalid { id, dir, error }) => {
                self.failed(Some(&id), &dir.display().to_string(), error, now)
            }
            Err(LoadError::Read(e)) => self.failed(
                None,
                &self.source.display().to_string(),
                format!("{e:#}"),
                now,
            ),
        }
    }

    fn failed(&self, id: Option<&str>, path: &str, error: String, now: u64) {
        let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        if t.observe_err(id, path, error.clone(), now) == Change::Failed {
            self.metrics.reload_failures.fetch_add(1, Ordering::Relaxed);
            let serving = t
                .active
                .as_ref()
                .map_or("nothing".to_string(), |g| format!("generation {}", g.id));
            log::error!(
                "source generation {} rejected, still serving {serving}: {error}",
                id.unwrap_or("(unreadable)")
            );
        }
        self.active.set(t.active.clone());
    }

    /// After a load: when the active generation changed, keep the configs it replaced for
    /// the tokens that name them and drop those of pools that left (revoked); refresh the
    /// token index; checkpoint.
    fn after_change(&self, before: Option<Arc<Generation>>, now: u64) {
        let after = self.active();
        let changed = match (&before, &after) {
            (Some(b), Some(a)) => !Arc::ptr_eq(b, a),
            (None, None) => false,
            _ => true,
        };
        if changed && self.derived() {
            self.retire(before.as_deref(), after.as_deref(), now);
        }
        if changed {
            self.rebuild_index();
        }
        self.save_checkpoint();
    }

    /// Derived tokens: a pool whose config changed keeps its old config (and payload) for the
    /// tokens handed out for it until this epoch; a pool that left the source loses all of
    /// them at once.
    fn retire(&self, before: Option<&Generation>, after: Option<&Generation>, now: u64) {
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

    /// Rebuilds the derived-token index from the key, the active generation and the
    /// retained configs.
    pub(crate) fn rebuild_index(&self) {
        if !self.derived() {
            return;
        }
        let now = self.now();
        let Some(key) = self
            .token_key
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return;
        };
        let mut targets = Vec::new();
        if let Some(g) = self.active() {
            for (name, p) in &g.pools {
                targets.push(tokens::Target {
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
            targets.push(tokens::Target {
                pool: r.pool.name.clone(),
                config: r.pool.config_hash.clone(),
                last_epoch: Some(r.last_epoch),
            });
        }
        let idx = tokens::derived_index(&key, &self.schedule, &targets, now);
        *self.token_index.write().unwrap_or_else(|e| e.into_inner()) = Some(idx);
    }

    /// Writes the checkpoint (only what changed); a failure is logged and shown in /status,
    /// and serving goes on.
    pub(crate) fn save_checkpoint(&self) {
        let Some(c) = &self.checkpoint else {
            return;
        };
        let t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        let (assigned, active, active_ref, lkg, lkg_ref) = (
            t.assigned.clone(),
            t.active.clone(),
            t.active_ref.clone(),
            t.lkg.clone(),
            t.lkg_ref.clone(),
        );
        drop(t);
        let retained: Vec<Retained> = self
            .retained
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let snap = Snapshot {
            assigned: assigned.as_ref(),
            active: active.as_deref().zip(active_ref.as_ref()),
            lkg: lkg.as_deref().zip(lkg_ref.as_ref()),
            retained,
        };
        const WRITE: &str = "checkpoint write failed";
        let mut errs = self
            .checkpoint_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match c.save(&snap) {
            Ok(()) => errs.retain(|e| !e.starts_with(WRITE)),
            Err(e) => {
                let msg = format!("{WRITE} (serving goes on): {e:#}");
                if !errs.contains(&msg) {
                    log::error!("{msg}");
                    errs.retain(|e| !e.starts_with(WRITE));
                    errs.push(msg);
                }
            }
        }
    }

    /// Soak promotion, token rotation and the token index refresh.
    pub fn tick(&self) {
        let now = self.now();
        {
            let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
            if t.tick(now, self.soak)
                && let Some(l) = &t.lkg
            {
                log::info!("generation {} is now lastKnownGood", l.id);
            }
        }
        if self.derived() {
            self.tick_derived(now);
            self.save_checkpoint();
            return;
        }
        self.save_checkpoint();
        let Some(store) = &self.token_store else {
            return;
        };
        let active = self.active();
        let res = (|| -> Result<tokens::Index> {
            if let Some(g) = &active {
                let pools: Vec<String> = g.pools.keys().cloned().collect();
                let r = store.update(|s| s.reconcile(&pools, now, self.ttl))?;
                if r.changed() {
                    self.metrics
                        .token_rotations
                        .fetch_add(r.rotated as u64, Ordering::Relaxed);
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
        let mut err = self.token_error.lock().unwrap_or_else(|e| e.into_inner());
        match res {
            Ok(idx) => {
                *self.token_index.write().unwrap_or_else(|e| e.into_inner()) = Some(idx);
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
    }

    /// Derived tokens: re-read the key (a changed key revokes every token of the old one; an
    /// unreadable one keeps the old key and is reported), count rotations, prune retained
    /// configs whose tokens have all expired, rebuild the index.
    fn tick_derived(&self, now: u64) {
        if let Some(path) = &self.token_key_file {
            let mut err = self.token_error.lock().unwrap_or_else(|e| e.into_inner());
            match tokens::Key::from_file(path) {
                Ok(k) => {
                    let mut cur = self.token_key.write().unwrap_or_else(|e| e.into_inner());
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
        if seen != 0 && epoch > seen {
            let pools = self.active().map_or(0, |g| g.pools.len()) as u64;
            self.metrics
                .token_rotations
                .fetch_add(pools * (epoch - seen).min(2), Ordering::Relaxed);
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
        self.rebuild_index();
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

/// What the signal thread tells the watcher: SIGHUP (reload now) and shutdown, each with a
/// nudge on an event fd so the watcher wakes at once instead of polling for them.
pub struct Nudges {
    hup: AtomicBool,
    shutdown: Arc<AtomicBool>,
    wake: nix::sys::eventfd::EventFd,
}

impl Nudges {
    pub fn new(shutdown: Arc<AtomicBool>) -> Result<Nudges> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        let wake = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .context("creating an event fd")?;
        Ok(Nudges {
            hup: AtomicBool::new(false),
            shutdown,
            wake,
        })
    }

    /// SIGHUP: reload the source and the certificate now.
    pub fn hup(&self) {
        self.hup.store(true, Ordering::SeqCst);
        self.nudge();
    }

    /// Wakes the watcher (after `shutdown` was set, so it returns).
    pub fn nudge(&self) {
        // Fails only when the counter would overflow: the watcher is then awake anyway.
        let _ = self.wake.write(1);
    }
}

/// The shortest poll: a smaller `--poll-interval` (even 0) polls this often, never in a loop.
const MIN_POLL: Duration = Duration::from_millis(250);

/// Loads the source (then calls `loaded`), and watches it (inotify on the directory, its
/// parent and pools/, with polling as the fallback), the token store and the TLS files;
/// exits on shutdown.
pub fn watch_loop(
    app: &App,
    poll: Duration,
    tls: Option<&tls::CertResolver>,
    token_dir: Option<&Path>,
    nudges: &Nudges,
    loaded: impl FnOnce(&App),
) {
    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
    use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
    let (hup, shutdown) = (&nudges.hup, &*nudges.shutdown);
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| log::warn!("inotify unavailable, polling every {poll:?}: {e}"))
        .ok();
    // Sleeps on the inotify fd and the nudges together; without an epoll set (out of
    // descriptors) it sleeps in short slices as the fallback.
    let sleeper = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
        .and_then(|ep| {
            ep.add(&nudges.wake, EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
            if let Some(ino) = &ino {
                ep.add(ino, EpollEvent::new(EpollFlags::EPOLLIN, 1))?;
            }
            Ok(ep)
        })
        .map_err(|e| log::warn!("watching for changes with epoll: {e}; checking every 25 ms"))
        .ok();
    // Sleeps until `end` at most; true when the source changed (inotify is readable).
    let sleep = |end: Instant| -> bool {
        let Some(ep) = &sleeper else {
            std::thread::sleep(Duration::from_millis(25));
            return ino
                .as_ref()
                .is_some_and(|i| i.read_events().is_ok_and(|e| !e.is_empty()));
        };
        let mut evs = [EpollEvent::empty(); 2];
        // Whole milliseconds, rounded up (the conversion rounds down): else the last
        // fraction of a millisecond before `end` is spent in a loop of zero-time waits.
        let left = end.saturating_duration_since(Instant::now());
        let n = ep
            .wait(
                &mut evs,
                EpollTimeout::try_from(left.saturating_add(Duration::from_nanos(999_999)))
                    .unwrap_or(EpollTimeout::MAX),
            )
            .unwrap_or(0);
        let _ = nudges.wake.read();
        evs[..n].iter().any(|e| e.data() == 1)
    };
    let mask = F::IN_CREATE
        | F::IN_DELETE
        | F::IN_MOVED_TO
        | F::IN_MOVED_FROM
        | F::IN_CLOSE_WRITE
        | F::IN_ATTRIB
        | F::IN_DELETE_SELF
        | F::IN_MOVE_SELF;
    let src = &app.source;
    let rewatch = |ino: &Inotify| {
        let mut paths = vec![
            src.clone(),
            src.join("pools"),
            // Machine files, boot profiles and assets (network boot).
            src.join("machines"),
            src.join("boot"),
            src.join("boot/assets"),
        ];
        if let Some(parent) = src.parent() {
            paths.push(if parent.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                parent.to_path_buf()
            });
        }
        if let Ok(rd) = std::fs::read_dir(src.join("pools")) {
            paths.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
        if let Some(t) = token_dir {
            paths.push(t.to_path_buf());
        }
        for p in paths {
            let _ = ino.add_watch(&p, mask);
        }
    };
    // The first load, with the watches already in place so no change is missed.
    if let Some(ino) = &ino {
        rewatch(ino);
    }
    app.reload(true);
    app.tick();
    loaded(app);
    let mut last_poll = Instant::now();
    // The watches are renewed after every reload (a directory made since, e.g. `machines/`,
    // is watched from then on); in between, the watcher sleeps until a change, a nudge
    // (SIGHUP, shutdown) or the next poll: an idle server's watcher wakes once per `poll`.
    let mut rewatch_due = false;
    while !shutdown.load(Ordering::SeqCst) {
        let mut changed = false;
        if rewatch_due && let Some(ino) = &ino {
            rewatch(ino);
        }
        rewatch_due = false;
        let end = last_poll + poll.max(MIN_POLL);
        while Instant::now() < end
            && !shutdown.load(Ordering::SeqCst)
            && !hup.load(Ordering::SeqCst)
        {
            if sleep(end)
                && let Some(ino) = &ino
            {
                // Let a burst of changes settle, then drain.
                std::thread::sleep(Duration::from_millis(30));
                while let Ok(ev) = ino.read_events() {
                    if ev.is_empty() {
                        break;
                    }
                }
                changed = true;
                break;
            }
        }
        let forced = hup.swap(false, Ordering::SeqCst);
        if forced {
            log::info!("SIGHUP: reloading source and certificate");
        }
        let due = last_poll.elapsed() >= poll;
        if changed || forced || due {
            app.reload(forced);
            if let Some(t) = tls {
                match t.maybe_reload(forced) {
                    Ok(true) => {
                        app.metrics.tls_reloads.fetch_add(1, Ordering::Relaxed);
                        log::info!("TLS certificate reloaded");
                    }
                    Ok(false) => {}
                    Err(e) => log::error!("reloading TLS certificate (keeping the old one): {e:#}"),
                }
            }
        }
        if due || forced || changed {
            app.tick();
            last_poll = Instant::now();
            rewatch_due = true;
        }
    }
}
