//! The source watcher: loads generations from the source into the [`App`] (a new valid
//! generation becomes active, a broken one is recorded in the status and the last good one
//! stays served), promotes the active one to lastKnownGood after the soak time, rotates
//! tokens, and reloads the TLS certificate. [`watch_loop`] runs it on inotify events (the
//! source, its parent, `pools/`, the token directory), on SIGHUP and, as the fallback, every
//! poll interval.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::Generations;
use super::checkpoint::Snapshot;
use super::status::Change;
use crate::http::tls;
use crate::source::{self, Generation, LoadError};

impl Generations {
    /// Puts back what the checkpoint directory kept (before the first load): assigned,
    /// active, lastKnownGood and the old payloads that valid tokens may still name. Records
    /// that cannot be trusted are refused one by one, logged and shown in `/status`.
    pub fn restore(&self) {
        let Some(c) = &self.checkpoint else {
            return;
        };
        let now = self.tokens.now();
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
        self.tokens.restore(r.retained, now);
        let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        t.restore(r.assigned, r.active, r.lkg);
        self.active.set(t.active.clone());
        drop(t);
        self.tokens.rebuild(self.active().as_deref());
    }

    /// Reads the source and updates status; a new valid generation becomes active.
    pub fn reload(&self, force: bool) {
        let now = self.tokens.now();
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
        if changed {
            self.tokens.retire(before.as_deref(), after.as_deref(), now);
            self.tokens.rebuild(after.as_deref());
        }
        self.save_checkpoint();
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
        let retained = self.tokens.retained();
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
        let now = self.tokens.now();
        {
            let mut t = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
            if !self.rollout_unfinished(&t)
                && t.tick(now, self.soak)
                && let Some(l) = &t.lkg
            {
                log::info!("generation {} is now lastKnownGood", l.id);
            }
        }
        // Derived tokens are rotated before the checkpoint (it keeps their old configs);
        // the store's after it, as they always were.
        let derived = self.tokens.derived();
        if !derived {
            self.save_checkpoint();
        }
        let rotated = self.tokens.rotate(self.active().as_deref(), now);
        self.metrics
            .token_rotations
            .fetch_add(rotated, Ordering::Relaxed);
        if derived {
            self.save_checkpoint();
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
    gens: &Generations,
    poll: Duration,
    tls: Option<&tls::CertResolver>,
    token_dir: Option<&Path>,
    nudges: &Nudges,
    loaded: impl FnOnce(&Generations),
) {
    let (hup, shutdown) = (&nudges.hup, &*nudges.shutdown);
    let sleeper = Sleeper::new(poll, nudges);
    let watched = || watched(&gens.source, token_dir);
    // The first load, with the watches already in place so no change is missed.
    sleeper.rewatch(&watched());
    gens.reload(true);
    gens.tick();
    loaded(gens);
    let mut last_poll = Instant::now();
    // The watches are renewed after every reload (a directory made since, e.g. `machines/`,
    // is watched from then on); in between, the watcher sleeps until a change, a nudge
    // (SIGHUP, shutdown) or the next poll: an idle server's watcher wakes once per `poll`.
    let mut rewatch_due = false;
    while !shutdown.load(Ordering::SeqCst) {
        let mut changed = false;
        if rewatch_due {
            sleeper.rewatch(&watched());
        }
        rewatch_due = false;
        let end = last_poll + poll.max(MIN_POLL);
        while Instant::now() < end
            && !shutdown.load(Ordering::SeqCst)
            && !hup.load(Ordering::SeqCst)
        {
            if sleeper.sleep(end) {
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
            gens.reload(forced);
            if let Some(t) = tls {
                gens.reload_tls(t, forced);
            }
            gens.tick();
            last_poll = Instant::now();
            rewatch_due = true;
        }
    }
}

impl Generations {
    /// Reloads the TLS certificate when its files changed (`forced`: in any case).
    fn reload_tls(&self, t: &tls::CertResolver, forced: bool) {
        match t.maybe_reload(forced) {
            Ok(true) => {
                self.metrics.tls_reloads.fetch_add(1, Ordering::Relaxed);
                log::info!("TLS certificate reloaded");
            }
            Ok(false) => {}
            Err(e) => log::error!("reloading TLS certificate (keeping the old one): {e:#}"),
        }
    }
}

/// What inotify watches: the source, `pools/` and each pool's directory, the machine files,
/// boot profiles and assets (network boot), the source's parent (a link swapped there), and
/// the token directory.
fn watched(src: &Path, token_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut paths = vec![
        src.to_path_buf(),
        src.join("pools"),
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
    paths
}

/// The watcher's sleep: on the inotify fd and the nudges together; without an epoll set (out
/// of descriptors) in short slices as the fallback; without inotify, polling only.
struct Sleeper<'a> {
    ino: Option<nix::sys::inotify::Inotify>,
    epoll: Option<nix::sys::epoll::Epoll>,
    nudges: &'a Nudges,
}

impl<'a> Sleeper<'a> {
    fn new(poll: Duration, nudges: &'a Nudges) -> Sleeper<'a> {
        use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
        use nix::sys::inotify::{InitFlags, Inotify};
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| log::warn!("inotify unavailable, polling every {poll:?}: {e}"))
            .ok();
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .and_then(|ep| {
                ep.add(&nudges.wake, EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
                if let Some(ino) = &ino {
                    ep.add(ino, EpollEvent::new(EpollFlags::EPOLLIN, 1))?;
                }
                Ok(ep)
            })
            .map_err(|e| log::warn!("watching for changes with epoll: {e}; checking every 25 ms"))
            .ok();
        Sleeper { ino, epoll, nudges }
    }

    /// Watches `paths` (again: a watch already there is kept).
    fn rewatch(&self, paths: &[PathBuf]) {
        use nix::sys::inotify::AddWatchFlags as F;
        let Some(ino) = &self.ino else {
            return;
        };
        let mask = F::IN_CREATE
            | F::IN_DELETE
            | F::IN_MOVED_TO
            | F::IN_MOVED_FROM
            | F::IN_CLOSE_WRITE
            | F::IN_ATTRIB
            | F::IN_DELETE_SELF
            | F::IN_MOVE_SELF;
        for p in paths {
            let _ = ino.add_watch(p, mask);
        }
    }

    /// Sleeps until `end` at most; true when the source changed (the events then drained,
    /// after a burst of changes settled).
    fn sleep(&self, end: Instant) -> bool {
        if !self.wait(end) {
            return false;
        }
        let Some(ino) = &self.ino else {
            return false;
        };
        std::thread::sleep(Duration::from_millis(30));
        while let Ok(ev) = ino.read_events() {
            if ev.is_empty() {
                break;
            }
        }
        true
    }

    /// Sleeps until `end` at most; true when inotify is readable.
    fn wait(&self, end: Instant) -> bool {
        use nix::sys::epoll::{EpollEvent, EpollTimeout};
        let Some(ep) = &self.epoll else {
            std::thread::sleep(Duration::from_millis(25));
            return self
                .ino
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
        let _ = self.nudges.wake.read();
        evs[..n].iter().any(|e| e.data() == 1)
    }
}
