//! Temporary files and termination signals: every temporary file the agent creates beside a
//! target is registered here ([`Temp`]); SIGINT, SIGTERM and SIGHUP remove them all and end
//! the process with status 128+signal. A target is only ever replaced by rename(2) of a
//! complete temporary file, so a signal leaves it as it was or complete, never half-written.
//!
//! The signal handler only writes the signal number to a pipe; a thread reads it, takes the
//! creation lock for writing (so no temporary file is being created at that moment, and none
//! can be created after), removes what is registered and calls `_exit`. Creators share the
//! creation lock (a read lock): writer threads creating files at once do not wait for each
//! other, and the registry's own lock is held only to add or drop an entry.
//!
//! The registry is process-global state on purpose, the one such exception besides the
//! logger: a signal handler gets no arguments and can reach only globals, and every
//! temporary file anywhere in the program must be found by it. Everything else (limits,
//! stage options) is passed as values.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use anyhow::{Context, Result};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::unistd::UnlinkatFlags;

/// The signals that clean up and end the process.
pub const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Where a temporary node is: a path, or a name in a directory held open (the files stage
/// never names a node of the target root by host path: see `files::resolve`).
#[derive(Debug, Clone)]
enum Loc {
    Path(PathBuf),
    At {
        dir: Arc<OwnedFd>,
        name: String,
        /// For messages only.
        shown: PathBuf,
    },
}

impl Loc {
    fn shown(&self) -> &Path {
        match self {
            Loc::Path(p) => p,
            Loc::At { shown, .. } => shown,
        }
    }

    fn remove(&self) -> std::io::Result<()> {
        match self {
            Loc::Path(p) => std::fs::remove_file(p),
            Loc::At { dir, name, .. } => {
                nix::unistd::unlinkat(dir.as_fd(), name.as_str(), UnlinkatFlags::NoRemoveDir)
                    .map_err(std::io::Error::from)
            }
        }
    }
}

static TEMPS: Mutex<Vec<(u64, Loc)>> = Mutex::new(Vec::new());
/// Read-held while a temporary node is created and registered; write-held by [`terminate`].
static CREATING: RwLock<()> = RwLock::new(());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
static PIPE_WR: AtomicI32 = AtomicI32::new(-1);
static INSTALLED: OnceLock<()> = OnceLock::new();

fn temps() -> MutexGuard<'static, Vec<(u64, Loc)>> {
    TEMPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A registered temporary node: removed when dropped (unless [`Temp::disarm`]ed after it was
/// renamed into place), and by the signal handler.
#[derive(Debug)]
pub struct Temp {
    id: u64,
    loc: Loc,
    armed: bool,
}

impl Temp {
    /// Creates the temporary node at `path` with `create` and registers it, both under the
    /// creation lock (shared with other creators): a signal sees either no node or a
    /// registered one.
    pub fn create<T>(
        path: &Path,
        create: impl FnOnce(&Path) -> std::io::Result<T>,
    ) -> std::io::Result<(T, Temp)> {
        let _creating = CREATING.read().unwrap_or_else(|e| e.into_inner());
        let t = create(path)?;
        Ok((t, Temp::register(Loc::Path(path.to_path_buf()))))
    }

    /// [`Temp::create`] for the node `name` of the open directory `dir` (`shown`: its path,
    /// for messages): it is created and later removed relative to `dir`, never by path.
    pub fn create_at<T>(
        dir: &Arc<OwnedFd>,
        name: &str,
        shown: PathBuf,
        create: impl FnOnce(BorrowedFd, &str) -> std::io::Result<T>,
    ) -> std::io::Result<(T, Temp)> {
        let dir = Arc::clone(dir);
        let _creating = CREATING.read().unwrap_or_else(|e| e.into_inner());
        let t = create(dir.as_fd(), name)?;
        Ok((
            t,
            Temp::register(Loc::At {
                dir,
                name: name.to_string(),
                shown,
            }),
        ))
    }

    fn register(loc: Loc) -> Temp {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        temps().push((id, loc.clone()));
        Temp {
            id,
            loc,
            armed: true,
        }
    }

    /// The node's path (for a node created with [`Temp::create_at`]: as shown in messages).
    pub fn path(&self) -> &Path {
        self.loc.shown()
    }

    /// The node has been renamed into place: stop tracking it without removing anything.
    pub fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            unregister(self.id);
        }
    }
}

fn unregister(id: u64) {
    let mut g = temps();
    if let Some(k) = g.iter().position(|(i, _)| *i == id) {
        g.swap_remove(k);
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match self.loc.remove() {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => log::warn!("removing {}: {e}", self.loc.shown().display()),
        }
        unregister(self.id);
    }
}

/// Paths registered now (tests).
pub fn registered() -> Vec<PathBuf> {
    temps()
        .iter()
        .map(|(_, l)| l.shown().to_path_buf())
        .collect()
}

extern "C" fn on_signal(sig: nix::libc::c_int) {
    let saved = nix::errno::Errno::last_raw();
    let fd = PIPE_WR.load(Ordering::Relaxed);
    let b = sig as u8;
    // SAFETY: write(2) is async-signal-safe; `fd` is the write end of a pipe that stays open
    // for the life of the process, and `b` outlives the call.
    unsafe {
        nix::libc::write(fd, (&raw const b).cast(), 1);
    }
    nix::errno::Errno::set_raw(saved);
}

/// Installs the handlers for [`SIGNALS`] (once per process; later calls do nothing).
pub fn install() -> Result<()> {
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let (rd, wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("creating the signal pipe")?;
    PIPE_WR.store(wr.into_raw_fd(), Ordering::SeqCst);
    // SAFETY: `rd` is a pipe read end we own; File takes it over.
    let mut rd = unsafe { File::from_raw_fd(rd.into_raw_fd()) };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut b = [0u8; 1];
            loop {
                match rd.read(&mut b) {
                    Ok(1) => terminate(i32::from(b[0])),
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    _ => return,
                }
            }
        })
        .context("starting the signal thread")?;
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for s in SIGNALS {
        // SAFETY: the handler only calls async-signal-safe functions (write, errno access).
        unsafe { sigaction(s, &action) }.with_context(|| format!("installing a {s} handler"))?;
    }
    let _ = INSTALLED.set(());
    Ok(())
}

/// Removes every registered temporary node and ends the process with 128+`sig`.
fn terminate(sig: i32) -> ! {
    // Held until _exit: no temporary node is being created now, and none will be.
    let creating = CREATING.write().unwrap_or_else(|e| e.into_inner());
    let g = temps();
    let mut removed = 0;
    for (_, l) in g.iter() {
        match l.remove() {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => log::warn!("removing {}: {e}", l.shown().display()),
        }
    }
    let name = Signal::try_from(sig).map_or("a signal", |s| s.as_str());
    log::error!(
        "terminated by {name}: removed {removed} temporary file(s); targets are left as they were or complete; exit status {}",
        128 + sig
    );
    std::mem::forget(g);
    std::mem::forget(creating);
    // SAFETY: _exit ends the process at once, without running atexit handlers or destructors
    // that other threads could still be using.
    unsafe { nix::libc::_exit(128 + sig) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_removed_on_drop_kept_when_disarmed() {
        let dir = std::env::temp_dir().join(format!("agent-signals-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(".t1");
        let (_, t) = Temp::create(&p, |p| File::create(p)).unwrap();
        assert!(registered().contains(&p));
        drop(t);
        assert!(!p.exists());
        assert!(!registered().contains(&p));
        let p2 = dir.join(".t2");
        let (_, mut t) = Temp::create(&p2, |p| File::create(p)).unwrap();
        std::fs::rename(&p2, dir.join("final")).unwrap();
        t.disarm();
        assert!(!registered().contains(&p2));
        drop(t);
        assert!(dir.join("final").exists());
        assert!(Temp::create(&dir.join("no/such/dir"), |p| File::create(p)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
