//! The source watcher: loads generations from the source into the [`App`] (a new valid
//! generation becomes active, a broken one is recorded in the status and the last good one
//! stays served), promotes the active one to lastKnownGood after the soak time, rotates
//! tokens, and reloads the TLS certificate. [`watch_loop`] runs it on inotify events (the
//! source, its parent, `pools/`, the token directory), on SIGHUP and, as the fallback, every
//! poll interval.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;

use super::app::App;
use super::source::{self, LoadError};
use super::status::Change;
use super::{tls, tokens};

impl App {
    /// Reads the source and updates status; a new valid generation becomes active.
    pub fn reload(&self, force: bool) {
        let now = self.now();
        let raw = match source::read(&self.source) {
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
                *self.active.write().unwrap_or_else(|e| e.into_inner()) = t.active.clone();
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
        *self.active.write().unwrap_or_else(|e| e.into_inner()) = t.active.clone();
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
        let Some(store) = &self.token_store else {
            return;
        };
        let active = self
            .active
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
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
}

/// Watches the source (inotify on the directory, its parent and pools/, with polling as the
/// fallback), the token store and the TLS files; exits on shutdown.
pub fn watch_loop(
    app: &App,
    poll: Duration,
    tls: Option<&tls::CertResolver>,
    token_dir: Option<&Path>,
    hup: &AtomicBool,
    shutdown: &AtomicBool,
) {
    use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| log::warn!("inotify unavailable, polling every {poll:?}: {e}"))
        .ok();
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
        let mut paths = vec![src.clone(), src.join("pools")];
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
    let mut last_poll = Instant::now();
    while !shutdown.load(Ordering::SeqCst) {
        let mut changed = false;
        if let Some(ino) = &ino {
            rewatch(ino);
            // The inotify fd is non-blocking: check it in short slices.
            for _ in 0..10 {
                std::thread::sleep(Duration::from_millis(25));
                let mut got = false;
                while let Ok(ev) = ino.read_events() {
                    if ev.is_empty() {
                        break;
                    }
                    got = true;
                }
                if got {
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
                if shutdown.load(Ordering::SeqCst) || hup.load(Ordering::SeqCst) {
                    break;
                }
            }
        } else {
            std::thread::sleep(Duration::from_millis(250));
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
        }
    }
}
