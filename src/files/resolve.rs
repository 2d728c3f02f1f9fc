//! Root-confined path resolution and race-free access to the target root.
//!
//! A config path names a place in the target system. It is resolved inside the target root
//! (`--root`): symlinks are followed on every element but the last; on the root filesystem an
//! absolute link target is re-rooted (a link to `/etc` means `<root>/etc`) and `..` stops at
//! the root; on any other mounted filesystem (the deepest config filesystem whose mount path
//! contains the entry's path) following a link or `..` out of that filesystem is an error.
//!
//! Resolution walks the existing tree one element at a time from a directory descriptor of
//! the root opened once ([`Root::open`]): `fstatat`/`readlinkat` relative to the descriptor of
//! the directory reached so far, and `openat(O_PATH | O_DIRECTORY | O_NOFOLLOW)` to step into
//! a directory, with a hop limit; elements that do not exist yet are taken literally (they
//! will be created as directories). The result names the place by its *logical* path (inside
//! the root, every link already followed), which is also the key used to detect two entries
//! that resolve to the same place.
//!
//! Nothing is ever opened by host path. A place is written through a descriptor of its parent
//! directory ([`Root::place`]), opened from the root's descriptor along the logical path with
//! no symbolic link followed at all: one `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` where
//! the kernel has it (Linux 5.6), otherwise `openat(O_NOFOLLOW | O_DIRECTORY)` element by
//! element (missing directories are made with `mkdirat` on the way). Every write, removal,
//! owner or mode change then uses that descriptor (`openat`, `mkdirat`, `symlinkat`,
//! `linkat`, `renameat`, `unlinkat`, `fchownat(AT_SYMLINK_NOFOLLOW)`, `fchown`/`fchmod` on an
//! opened node). A directory swapped for a symbolic link (or a file) after it was resolved
//! makes that open fail instead of leading elsewhere: the place is resolved again (the new
//! link is then followed inside the root, as any link is) a few times, and then the entry
//! fails with an error saying the root changed. No result is cached between entries.

use std::collections::HashSet;
use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat, openat2, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};

/// Symlinks followed for one path before giving up (the kernel's own limit).
pub const MAX_HOPS: usize = 40;

/// How many times a place is resolved again when the root changed under the stage.
pub const MAX_RETRIES: usize = 3;

/// `openat` flags of a directory stepped through: never a symlink.
const STEP: OFlag = OFlag::O_PATH
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// The target root and the mount paths of the config's filesystems.
#[derive(Debug)]
pub struct Root {
    pub host: PathBuf,
    /// The root directory, opened once (`O_PATH`): every access starts here.
    fd: OwnedFd,
    /// Mount paths of the config's filesystems as element lists ("/" excluded).
    mounts: Vec<Vec<String>>,
    /// Whether `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` works here.
    openat2: bool,
}

/// The root changed while the stage was writing (a directory was removed, or became
/// something else).
#[derive(Debug, thiserror::Error)]
#[error(
    "{0}: the target root changed while the stage was writing (a directory on the way was removed, or replaced by a link or a file): something else is changing it"
)]
pub struct Changed(pub String);

/// An element on the way to a directory is not a directory (a link is not followed there).
#[derive(Debug, thiserror::Error)]
#[error("{what} is a {kind}, not a directory")]
pub struct NotDir {
    pub what: String,
    pub kind: &'static str,
}

/// Where a config path lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Logical elements of the parent directory, all existing directories or missing.
    pub parent: Vec<String>,
    /// The last element, not followed.
    pub name: String,
}

impl Resolved {
    /// The logical path inside the root, e.g. `/etc/hostname`.
    pub fn logical(&self) -> String {
        logical(self.parent.iter().chain(std::iter::once(&self.name)))
    }
}

/// A resolved place with its parent directory open: every operation on the node goes
/// through `dir` and `name`.
#[derive(Debug)]
pub struct Place {
    pub r: Resolved,
    /// Shared with the temporary nodes made in it (see `signals::Temp::create_at`).
    pub dir: Arc<OwnedFd>,
    /// Logical paths of the parent directories created to reach it, shallowest first.
    pub created: Vec<String>,
}

impl Place {
    pub fn name(&self) -> &str {
        &self.r.name
    }

    /// What is at the place now (not followed), `None` when nothing is.
    pub fn stat(&self) -> Result<Option<FileStat>> {
        stat_at(self.dir.as_fd(), &self.r.name, &self.r.logical())
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when nothing is there.
pub fn stat_at(dir: BorrowedFd, name: &str, what: &str) -> Result<Option<FileStat>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("inspecting {what}")),
    }
}

/// The kind bits of a stat.
pub fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// A short name for the kind of node of a stat, for messages.
pub fn stat_kind_name(st: &FileStat) -> &'static str {
    match kind(st) {
        SFlag::S_IFDIR => "directory",
        SFlag::S_IFLNK => "symbolic link",
        SFlag::S_IFREG => "regular file",
        SFlag::S_IFIFO => "fifo",
        SFlag::S_IFSOCK => "socket",
        SFlag::S_IFBLK => "block device",
        SFlag::S_IFCHR => "character device",
        _ => "special file",
    }
}

/// Opens the regular file `name` of `dir` for reading, without following a link and without
/// blocking on a FIFO; anything but a regular file is refused.
pub fn open_regular_at(dir: BorrowedFd, name: &str, what: &str) -> Result<Option<File>> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = match openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::ELOOP) => bail!("{what} is a symbolic link, not a regular file"),
        Err(e) => return Err(e).with_context(|| format!("opening {what}")),
    };
    let st = fstat(&fd).with_context(|| format!("inspecting {what}"))?;
    if kind(&st) != SFlag::S_IFREG {
        bail!("{what} is a {}, not a regular file", stat_kind_name(&st));
    }
    Ok(Some(File::from(fd)))
}

/// Joins elements into an absolute logical path.
pub fn logical<'a>(elems: impl IntoIterator<Item = &'a String>) -> String {
    let mut s = String::new();
    for e in elems {
        s.push('/');
        s.push_str(e);
    }
    if s.is_empty() { "/".into() } else { s }
}

/// Splits a path into its normal elements (`.` and empty ones dropped, `..` kept).
pub fn elements(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|e| !e.is_empty() && *e != ".")
        .map(str::to_string)
        .collect()
}

/// Whether `openat2` with the flags used here works from `fd` (it needs Linux 5.6; a
/// seccomp filter may refuse it too).
fn probe_openat2(fd: BorrowedFd) -> bool {
    openat2(fd, ".", how()).is_ok()
}

fn how() -> OpenHow {
    OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        )
}

impl Root {
    /// Opens the target root at `host` (its descriptor is kept: every later access starts
    /// from it, so renaming or replacing `host` itself does not move the stage).
    pub fn open(host: impl Into<PathBuf>, mount_paths: &[String]) -> Result<Self> {
        let host = host.into();
        let fd = nix::fcntl::open(
            &host,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .with_context(|| format!("opening target root {}", host.display()))?;
        let mut mounts: Vec<Vec<String>> = mount_paths
            .iter()
            .map(|p| elements(p))
            .filter(|e| !e.is_empty())
            .collect();
        mounts.sort();
        mounts.dedup();
        let openat2 = probe_openat2(fd.as_fd());
        log::debug!(
            "target root {}: opening directories with {}",
            host.display(),
            if openat2 {
                "openat2 (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)"
            } else {
                "openat and O_NOFOLLOW element by element"
            }
        );
        Ok(Root {
            host,
            fd,
            mounts,
            openat2,
        })
    }

    /// Opens the root again at its host path: after a filesystem was mounted on the root
    /// itself, the old descriptor still names the directory underneath the mount (a lookup
    /// from it would write there, hidden by the mount).
    pub fn reopen(&mut self) -> Result<()> {
        self.fd = nix::fcntl::open(
            &self.host,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .with_context(|| format!("opening target root {} again", self.host.display()))?;
        Ok(())
    }

    /// Whether directories are opened with one `openat2` call (else element by element).
    pub fn uses_openat2(&self) -> bool {
        self.openat2
    }

    /// Test builds only: turns `openat2` off (to test the element-by-element walk of
    /// kernels without it) or back on where the kernel has it.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn set_openat2(&mut self, on: bool) {
        self.openat2 = on && probe_openat2(self.fd.as_fd());
    }

    /// The root's directory descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The host path of logical elements (for messages and external tools only: nothing in
    /// the stage opens it).
    pub fn host_path<S: AsRef<str>>(&self, elems: &[S]) -> PathBuf {
        let mut p = self.host.clone();
        for e in elems {
            p.push(e.as_ref());
        }
        p
    }

    /// The mount (as elements) of the filesystem holding `elems`: the deepest config mount
    /// path that contains it, or the root (empty).
    pub fn filesystem_of(&self, elems: &[String]) -> Vec<String> {
        self.mounts
            .iter()
            .filter(|m| elems.starts_with(m))
            .max_by_key(|m| m.len())
            .cloned()
            .unwrap_or_default()
    }

    /// Resolves a config path (absolute) to its place inside the root.
    pub fn resolve(&self, path: &str) -> Result<Resolved> {
        Ok(self.resolve_memo(path, None)?.0)
    }

    /// [`Root::resolve`] for many paths while nothing is created or removed: `missing`
    /// remembers the logical paths found missing, so the elements they share are looked at
    /// once (10,000 files under one new directory: one lookup, not 10,000).
    pub fn resolve_all<'p>(
        &self,
        paths: impl IntoIterator<Item = &'p str>,
    ) -> Result<Vec<Resolved>> {
        let mut missing = HashSet::new();
        paths
            .into_iter()
            .map(|p| Ok(self.resolve_memo(p, Some(&mut missing))?.0))
            .collect()
    }

    /// Resolves `path` and opens its parent directory (creating the missing ones when
    /// `create`); `None` when the parent does not exist and `create` is false. A root that
    /// changes under the walk is resolved again, up to [`MAX_RETRIES`] times.
    pub fn place(&self, path: &str, create: bool) -> Result<Option<Place>> {
        let mut attempt = 0;
        let mut created = Vec::new();
        loop {
            let (r, fd) = self.resolve_memo(path, None)?;
            if let Some(dir) = fd {
                return Ok(Some(Place {
                    r,
                    dir: Arc::new(dir),
                    created,
                }));
            }
            match self.open_dir(&r.parent, create, &mut created) {
                Ok(Some(dir)) => {
                    return Ok(Some(Place {
                        r,
                        dir: Arc::new(dir),
                        created,
                    }));
                }
                Ok(None) => return Ok(None),
                // Resolution found directories there a moment ago.
                Err(e) if e.is::<Changed>() || e.is::<NotDir>() => {
                    if attempt == MAX_RETRIES {
                        let what = e
                            .downcast_ref::<NotDir>()
                            .map_or(logical(r.parent.iter()), |n| n.what.clone());
                        return Err(e).context(Changed(what)).context(format!(
                            "{path}: gave up after resolving it {} times (at most {MAX_RETRIES} retries)",
                            MAX_RETRIES + 1
                        ));
                    }
                    log::warn!("{path}: {e}; resolving it again");
                    attempt += 1;
                }
                Err(e) => return Err(e).with_context(|| format!("{path}: opening its directory")),
            }
        }
    }

    /// Opens the directory at logical `elems` with no symbolic link followed, beneath the
    /// root (see the module doc); missing directories are created (mode 0755, root-owned,
    /// logged in `created`) when `create`, else `None` is returned.
    pub fn open_dir(
        &self,
        elems: &[String],
        create: bool,
        created: &mut Vec<String>,
    ) -> Result<Option<OwnedFd>> {
        // One call when everything is there; else the walk below finds what is missing
        // (and creates it) or what is not a directory.
        if let Some(fd) = self.open_plain(elems) {
            return Ok(Some(fd));
        }
        let mut fd = self
            .fd
            .try_clone()
            .context("duplicating the root's descriptor")?;
        for (i, e) in elems.iter().enumerate() {
            let here = || logical(elems[..=i].iter());
            let not_dir = |fd: &OwnedFd| -> anyhow::Error {
                match stat_at(fd.as_fd(), e, &here()) {
                    Ok(Some(st)) => NotDir {
                        what: here(),
                        kind: stat_kind_name(&st),
                    }
                    .into(),
                    _ => Changed(here()).into(),
                }
            };
            fd = match openat(&fd, e.as_str(), STEP, Mode::empty()) {
                Ok(next) => next,
                Err(Errno::ENOENT) if create => match mkdir_at(fd.as_fd(), e, 0o755, &here())? {
                    Some(next) => {
                        created.push(here());
                        next
                    }
                    // Another writer made it first.
                    None => match openat(&fd, e.as_str(), STEP, Mode::empty()) {
                        Ok(next) => next,
                        Err(Errno::ENOTDIR | Errno::ELOOP) => return Err(not_dir(&fd)),
                        // Made and removed again meanwhile.
                        Err(Errno::ENOENT) => return Err(Changed(here()).into()),
                        Err(e) => return Err(e).with_context(|| format!("opening {}", here())),
                    },
                },
                Err(Errno::ENOENT) => return Ok(None),
                Err(Errno::ENOTDIR | Errno::ELOOP) => return Err(not_dir(&fd)),
                Err(err) => return Err(err).with_context(|| format!("opening {}", here())),
            };
        }
        Ok(Some(fd))
    }

    /// The contents of the regular file at config path `path`, following links in the root
    /// (the last element too, unlike [`Root::resolve`]); `None` when nothing is there.
    pub fn read_file(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let mut path = path.to_string();
        for _ in 0..=MAX_HOPS {
            let Some(p) = self.place(&path, false)? else {
                return Ok(None);
            };
            let what = p.r.logical();
            match p.stat()? {
                None => return Ok(None),
                Some(st) if kind(&st) == SFlag::S_IFLNK => {
                    let t = readlinkat(&p.dir, p.name())
                        .with_context(|| format!("reading link {what}"))?;
                    let t = t
                        .to_str()
                        .with_context(|| format!("link {what} has a non-UTF-8 target"))?;
                    path = if t.starts_with('/') {
                        t.to_string()
                    } else {
                        format!("{}/{t}", logical(p.r.parent.iter()))
                    };
                    // `..` of a link target, resolved lexically from the root (where `..`
                    // stops), as the walk does for parent directories.
                    let mut norm: Vec<String> = Vec::new();
                    for e in elements(&path) {
                        if e == ".." {
                            norm.pop();
                        } else {
                            norm.push(e);
                        }
                    }
                    path = logical(norm.iter());
                    if norm.is_empty() {
                        bail!("{what}: a link to the root directory is not a file");
                    }
                }
                Some(_) => {
                    let Some(mut f) = open_regular_at(p.dir.as_fd(), p.name(), &what)? else {
                        return Ok(None);
                    };
                    let mut b = Vec::new();
                    f.read_to_end(&mut b)
                        .with_context(|| format!("reading {what}"))?;
                    return Ok(Some(b));
                }
            }
        }
        bail!("{path}: more than {MAX_HOPS} symbolic links (a loop?)")
    }

    /// What is at config path `path` (the last element not followed), `None` when nothing.
    pub fn stat(&self, path: &str) -> Result<Option<FileStat>> {
        match self.place(path, false)? {
            Some(p) => p.stat(),
            None => Ok(None),
        }
    }

    /// Resolves `path`; with `openat2`, a path whose parent directories all exist and are no
    /// links is resolved (and its parent opened, returned) by one `openat2` call, as the
    /// walk would resolve it (no link, no `..`: the logical path is the path itself).
    fn resolve_memo(
        &self,
        path: &str,
        missing: Option<&mut HashSet<Vec<String>>>,
    ) -> Result<(Resolved, Option<OwnedFd>)> {
        // What no system call would take, said before anything is written (the walk does not
        // look below a missing element, so it would not find out).
        if path.contains('\0') {
            bail!("{path:?}: a path cannot contain a NUL byte");
        }
        let limit = nix::libc::PATH_MAX as usize;
        let n = self.host.as_os_str().len() + path.len();
        if n >= limit {
            bail!(
                "{path}: too long: {n} bytes under the root {} (the system's limit is {limit})",
                self.host.display()
            );
        }
        let mut elems = elements(path);
        if elems.iter().any(|e| e == "..") {
            bail!("{path}: path is not normalised");
        }
        let Some(name) = elems.pop() else {
            bail!("{path}: the root directory itself cannot be an entry");
        };
        let fs = self.filesystem_of(&{
            let mut all = elems.clone();
            all.push(name.clone());
            all
        });
        if let Some(fd) = self.open_plain(&elems) {
            return Ok((
                Resolved {
                    parent: elems,
                    name,
                },
                Some(fd),
            ));
        }
        let parent = self.resolve_dir(path, elems, &fs, missing)?;
        Ok((Resolved { parent, name }, None))
    }

    /// The directory at `elems` opened by one `openat2` call when every element exists and
    /// is a directory (no link); `None` otherwise, or without `openat2`.
    fn open_plain(&self, elems: &[String]) -> Option<OwnedFd> {
        if !self.openat2 {
            return None;
        }
        if elems.is_empty() {
            return self.fd.try_clone().ok();
        }
        let rel = elems.join("/");
        // A rename elsewhere on the filesystem makes the kernel answer EAGAIN: try again.
        for _ in 0..8 {
            match openat2(self.fd.as_fd(), rel.as_str(), how()) {
                Ok(fd) => return Some(fd),
                Err(Errno::EAGAIN) => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// Resolves the directory elements `queue` (following every symlink) for `path`, confined
    /// to the filesystem mounted at `fs` (empty: the root filesystem).
    ///
    /// The walk holds a descriptor of each directory of `cur` that exists: an element is
    /// looked at relative to its parent's descriptor, never by host path. Below a missing
    /// element nothing exists: it is not looked at (until a `..` of a link target climbs back
    /// above it). `missing` (see [`Root::resolve_all`]) also remembers missing paths across
    /// calls.
    fn resolve_dir(
        &self,
        path: &str,
        queue: Vec<String>,
        fs: &[String],
        mut missing: Option<&mut HashSet<Vec<String>>>,
    ) -> Result<Vec<String>> {
        let fs_name = logical(fs.iter());
        let mut queue: VecDeque<String> = queue.into();
        let mut cur: Vec<String> = Vec::new();
        // Descriptors of the existing directories of `cur` (a prefix of it).
        let mut fds: Vec<OwnedFd> = Vec::new();
        let mut hops = 0;
        // The depth of the first missing element of `cur`, if any.
        let mut missing_at: Option<usize> = None;
        // Once the walk has entered the filesystem it may not leave it again.
        let mut inside = fs.is_empty();
        while let Some(e) = queue.pop_front() {
            if e == ".." {
                cur.pop();
                fds.truncate(cur.len());
                if missing_at.is_some_and(|m| cur.len() < m) {
                    missing_at = None;
                }
                if inside && !cur.starts_with(fs) {
                    bail!("{path}: \"..\" leaves the filesystem mounted at {fs_name}");
                }
                continue;
            }
            cur.push(e);
            if !inside && cur.as_slice() == fs {
                inside = true;
            }
            if missing_at.is_some() {
                continue;
            }
            if missing.as_ref().is_some_and(|m| m.contains(&cur)) {
                missing_at = Some(cur.len());
                continue;
            }
            let parent = fds.last().map_or(self.fd.as_fd(), |f| f.as_fd());
            let name = cur.last().expect("just pushed").as_str();
            let here = || logical(cur.iter());
            let Some(st) = stat_at(parent, name, &here())? else {
                missing_at = Some(cur.len());
                if let Some(m) = missing.as_mut() {
                    m.insert(cur.clone());
                }
                continue;
            };
            match kind(&st) {
                SFlag::S_IFDIR => {
                    let fd = match openat(parent, name, STEP, Mode::empty()) {
                        Ok(fd) => fd,
                        Err(Errno::ENOTDIR | Errno::ELOOP | Errno::ENOENT) => {
                            return Err(Changed(here()).into());
                        }
                        Err(err) => return Err(err).with_context(|| format!("opening {}", here())),
                    };
                    fds.push(fd);
                    continue;
                }
                SFlag::S_IFLNK => {}
                _ => bail!(
                    "{path}: {} is a {} and not a directory",
                    here(),
                    stat_kind_name(&st)
                ),
            }
            hops += 1;
            if hops > MAX_HOPS {
                bail!("{path}: more than {MAX_HOPS} symbolic links (a loop?)");
            }
            let target = match readlinkat(parent, name) {
                Ok(t) => t,
                Err(Errno::ENOENT | Errno::EINVAL) => return Err(Changed(here()).into()),
                Err(e) => return Err(e).with_context(|| format!("reading link {}", here())),
            };
            let target = target
                .to_str()
                .with_context(|| format!("link {} has a non-UTF-8 target", here()))?
                .to_string();
            let link_at = here();
            cur.pop();
            if target.starts_with('/') {
                cur.clear();
                fds.clear();
            }
            if !fs.is_empty() {
                // The lexical destination of this link must stay inside the filesystem.
                let mut dest = cur.clone();
                for t in elements(&target) {
                    if t == ".." {
                        if dest.pop().is_none() || !dest.starts_with(fs) {
                            bail!(
                                "{path}: symlink {link_at} -> {target} leaves the filesystem mounted at {fs_name}"
                            );
                        }
                    } else {
                        dest.push(t);
                    }
                }
                if !dest.starts_with(fs) {
                    bail!(
                        "{path}: symlink {link_at} -> {target} leaves the filesystem mounted at {fs_name}"
                    );
                }
            }
            for t in elements(&target).into_iter().rev() {
                queue.push_front(t);
            }
        }
        Ok(cur)
    }
}

/// `mkdirat(dir, name, mode)` with `mode` exactly (the umask does not apply): the new
/// directory is opened (no link followed) and given its mode through the descriptor.
/// Returns its descriptor, or `None` when something already exists there.
pub fn mkdir_at(dir: BorrowedFd, name: &str, mode: u32, what: &str) -> Result<Option<OwnedFd>> {
    match mkdirat(dir, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) => {}
        Err(Errno::EEXIST) => return Ok(None),
        // The directory it goes in was removed.
        Err(Errno::ENOENT) => return Err(Changed(what.to_string()).into()),
        Err(e) => return Err(e).with_context(|| format!("creating directory {what}")),
    }
    let fd = match openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOTDIR | Errno::ELOOP | Errno::ENOENT) => {
            return Err(Changed(what.to_string()).into());
        }
        Err(e) => return Err(e).with_context(|| format!("opening directory {what}")),
    };
    nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(mode))
        .with_context(|| format!("setting mode of {what}"))?;
    Ok(Some(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "agent-resolve-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn nul_bytes_and_overlong_paths_are_errors_even_below_missing_directories() {
        let d = tmp("bad-paths");
        let r = Root::open(&d, &[]).unwrap();
        let e = r.resolve_all(["/new/a\0b/f"]).unwrap_err().to_string();
        assert!(e.contains("NUL"), "{e}");
        let long = format!("/new/{}/f", "x/".repeat(2100));
        let e = r.resolve_all([long.as_str()]).unwrap_err().to_string();
        assert!(e.contains("too long"), "{e}");
        assert!(r.resolve("/new/dir/f").is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn openat2_is_used_where_the_kernel_has_it_and_can_be_turned_off() {
        let d = tmp("openat2");
        let mut r = Root::open(&d, &[]).unwrap();
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut v = release
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
        if (major, minor) >= (5, 6) {
            assert!(r.uses_openat2(), "Linux {release} has openat2");
        }
        r.set_openat2(false);
        assert!(!r.uses_openat2());
        // Both ways open the same directories and refuse the same links.
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        symlink("a", d.join("l")).unwrap();
        for on in [true, false] {
            r.set_openat2(on);
            let fd = r
                .open_dir(&elements("/a/b"), false, &mut Vec::new())
                .unwrap();
            assert!(fd.is_some());
            assert!(
                r.open_dir(&elements("/a/none"), false, &mut Vec::new())
                    .unwrap()
                    .is_none()
            );
            let e = r
                .open_dir(&elements("/l/b"), false, &mut Vec::new())
                .unwrap_err();
            assert!(
                e.to_string()
                    .contains("/l is a symbolic link, not a directory"),
                "{e}"
            );
            let mut created = Vec::new();
            r.open_dir(&elements(&format!("/n{on}/m")), true, &mut created)
                .unwrap();
            assert_eq!(created, [format!("/n{on}"), format!("/n{on}/m")]);
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn follows_parent_links_inside_root() {
        let d = tmp("parent");
        std::fs::create_dir_all(d.join("real/etc")).unwrap();
        symlink("/real/etc", d.join("etc")).unwrap();
        symlink("../real", d.join("rel")).unwrap();
        let r = Root::open(&d, &[]).unwrap();
        assert_eq!(r.resolve("/etc/x").unwrap().logical(), "/real/etc/x");
        assert_eq!(r.resolve("/rel/etc/x").unwrap().logical(), "/real/etc/x");
        // The last element is never followed.
        assert_eq!(r.resolve("/etc").unwrap().logical(), "/etc");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn dotdot_stops_at_root() {
        let d = tmp("dotdot");
        symlink("../../../../..", d.join("up")).unwrap();
        symlink("/../../tmp", d.join("abs")).unwrap();
        let r = Root::open(&d, &[]).unwrap();
        assert_eq!(r.resolve("/up/etc/x").unwrap().logical(), "/etc/x");
        assert_eq!(r.resolve("/abs/x").unwrap().logical(), "/tmp/x");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_leaving_a_mounted_filesystem() {
        let d = tmp("leave");
        std::fs::create_dir_all(d.join("var/lib")).unwrap();
        std::fs::create_dir_all(d.join("etc")).unwrap();
        symlink("/etc", d.join("var/abs")).unwrap();
        symlink("../../etc", d.join("var/lib/rel")).unwrap();
        symlink("/var/lib", d.join("var/inside")).unwrap();
        symlink("lib", d.join("var/relinside")).unwrap();
        let r = Root::open(&d, &["/var".into()]).unwrap();
        let e = r.resolve("/var/abs/x").unwrap_err().to_string();
        assert!(e.contains("leaves the filesystem mounted at /var"), "{e}");
        assert!(r.resolve("/var/lib/rel/x").is_err());
        assert_eq!(r.resolve("/var/inside/x").unwrap().logical(), "/var/lib/x");
        assert_eq!(
            r.resolve("/var/relinside/x").unwrap().logical(),
            "/var/lib/x"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn non_directory_and_loops() {
        let d = tmp("nondir");
        std::fs::write(d.join("f"), "x").unwrap();
        symlink("loop", d.join("loop")).unwrap();
        let r = Root::open(&d, &[]).unwrap();
        assert!(
            r.resolve("/f/x")
                .unwrap_err()
                .to_string()
                .contains("not a directory")
        );
        assert!(r.resolve("/loop/x").unwrap_err().to_string().contains("40"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn filesystem_is_the_deepest_mount() {
        let r = Root::open("/", &["/var".into(), "/var/lib".into(), "/".into()]).unwrap();
        assert_eq!(
            r.filesystem_of(&elements("/var/lib/a")),
            elements("/var/lib")
        );
        assert_eq!(r.filesystem_of(&elements("/var/x")), elements("/var"));
        assert!(r.filesystem_of(&elements("/variable")).is_empty());
    }
}
