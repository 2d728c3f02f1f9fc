//! Files, directories and links, with every rule of the reference (§4): entries shallowest
//! first and hard links last; overwrite semantics for every kind of existing node; contents
//! and `append[]` streamed through the fetcher into a temporary file beside the target, with
//! mode and owner set before the rename. Durability comes from one `syncfs` per filesystem at
//! the end of the stage, not from an fsync per file.

use std::collections::HashMap;
use std::fs::File as FsFile;
use std::io::{ErrorKind, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};
use log::{debug, info};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat};
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchown, fchownat, linkat, symlinkat, unlinkat};

use super::Writer;
use super::resolve::{
    Changed, Place, kind, logical, mkdir_at, open_regular_at, stat_at, stat_kind_name,
};
use runtime::signals::Temp;
use spec::config::types::{Directory, File, Link, NodeUser, Resource, Storage};

/// Threads writing regular files at most.
const MAX_WORKERS: usize = 4;

/// What goes into a file.
pub enum Contents<'c> {
    /// Config resources: `contents` (if it has a source) then each `append`.
    Resources {
        contents: &'c Resource,
        append: &'c [Resource],
    },
    Bytes(&'c [u8]),
}

/// One entry of `storage.files`/`directories`/`links`.
#[derive(Clone, Copy)]
enum Entry<'c> {
    File(&'c File),
    Dir(&'c Directory),
    Link(&'c Link),
}

impl Entry<'_> {
    fn path(&self) -> &str {
        match self {
            Entry::File(f) => &f.path,
            Entry::Dir(d) => &d.path,
            Entry::Link(l) => &l.path,
        }
    }
    fn is_hard_link(&self) -> bool {
        matches!(self, Entry::Link(l) if l.hard == Some(true))
    }
}

/// Owner and mode wanted for a node; `None` keeps what is there (or the default when new).
#[derive(Debug, Clone, Copy, Default)]
pub struct Attrs {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mode: Option<u32>,
}

/// The name of a temporary node beside `name` (in the same directory).
fn tmp_name(name: &str) -> String {
    let short: String = name.chars().take(64).collect();
    format!(
        ".{short}.agent-tmp-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Removes a temporary node unless disarmed (also on SIGINT/SIGTERM/SIGHUP: see
/// [`runtime::signals`]).
struct TmpGuard(Option<Temp>);

impl TmpGuard {
    fn disarm(&mut self) {
        if let Some(t) = &mut self.0 {
            t.disarm();
        }
    }
}

impl Writer<'_> {
    /// Writes `storage.files`, `directories` and `links`: checks that no two entries resolve
    /// to the same place, then creates them shallowest first, hard links last.
    pub fn write_storage(&mut self, storage: &Storage) -> Result<()> {
        let mut entries: Vec<Entry> = Vec::new();
        entries.extend(storage.directories.iter().map(Entry::Dir));
        entries.extend(storage.files.iter().map(Entry::File));
        entries.extend(storage.links.iter().map(Entry::Link));
        // Duplicates: two entries that land on the same place.
        let mut seen: HashMap<String, &str> = HashMap::new();
        let resolved = self.root.resolve_all(entries.iter().map(Entry::path))?;
        for (e, r) in entries.iter().zip(resolved) {
            if let Some(other) = seen.insert(r.logical(), e.path()) {
                bail!(
                    "entries {other} and {} both resolve to {} in the target root",
                    e.path(),
                    r.logical()
                );
            }
        }
        let depth = |e: &Entry| e.path().split('/').filter(|s| !s.is_empty()).count();
        // Stable: within one depth, directories, then files, then links, in config order.
        entries.sort_by_key(|e| (e.is_hard_link(), depth(e)));
        let mut i = 0;
        while i < entries.len() {
            match entries[i] {
                Entry::File(_) => {
                    // Regular files of one depth are independent: write them in parallel.
                    let d = depth(&entries[i]);
                    let batch: Vec<&File> = entries[i..]
                        .iter()
                        .map_while(|e| match e {
                            Entry::File(f) if depth(e) == d => Some(*f),
                            _ => None,
                        })
                        .collect();
                    i += batch.len();
                    self.write_files(&batch)?;
                }
                Entry::Dir(d) => {
                    self.write_dir(d)?;
                    i += 1;
                }
                Entry::Link(l) => {
                    self.write_link(l)?;
                    i += 1;
                }
            }
        }
        Ok(())
    }

    /// Writes independent regular files with a few worker threads (fetching, decompressing
    /// and hashing are CPU-bound). The first failing entry in config order is reported.
    fn write_files(&mut self, files: &[&File]) -> Result<()> {
        let jobs: Vec<(&File, Attrs)> = files
            .iter()
            .map(|f| Ok((*f, self.attrs(&f.user, &f.group, f.mode, &f.path)?)))
            .collect::<Result<_>>()?;
        let put = |w: &Writer, f: &File, a: Attrs| {
            w.put_file(
                &f.path,
                Contents::Resources {
                    contents: &f.contents,
                    append: &f.append,
                },
                a,
                f.overwrite.unwrap_or(false),
            )
        };
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_WORKERS)
            .min(jobs.len());
        if workers <= 1 {
            for (f, a) in jobs {
                put(self, f, a)?;
            }
            return Ok(());
        }
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let this: &Writer = self;
        let mut errors: Vec<(usize, anyhow::Error)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    s.spawn(|| {
                        let mut errs = Vec::new();
                        while !failed.load(Ordering::Relaxed) {
                            let k = next.fetch_add(1, Ordering::Relaxed);
                            let Some((f, a)) = jobs.get(k) else { break };
                            if let Err(e) = put(this, f, *a) {
                                failed.store(true, Ordering::Relaxed);
                                errs.push((k, e));
                            }
                        }
                        errs
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![(usize::MAX, anyhow::anyhow!("a file writer thread panicked"))]
                    })
                })
                .collect()
        });
        errors.sort_by_key(|(k, _)| *k);
        match errors.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    fn attrs(
        &mut self,
        user: &NodeUser,
        group: &NodeUser,
        mode: Option<i64>,
        what: &str,
    ) -> Result<Attrs> {
        let owners = self.owners()?;
        let uid = owners.uid(user, what)?;
        let gid = owners.gid(group, what)?;
        let mode = match mode {
            Some(m) if (0..=0o7777).contains(&m) => Some(m as u32),
            Some(m) => bail!("{what}: invalid mode {m}"),
            None => None,
        };
        Ok(Attrs { uid, gid, mode })
    }

    /// Resolves a config path and opens its parent directory, creating the missing ones.
    fn place(&self, path: &str) -> Result<Place> {
        let p = self
            .root
            .place(path, true)?
            .expect("missing directories are created");
        for created in &p.created {
            self.touch(created.clone());
        }
        Ok(p)
    }

    /// Renames the finished temporary node `tmp` of the place's directory over the place.
    /// rename(2) replaces files and links atomically but not directories: an existing
    /// directory (already allowed by the overwrite rules) is removed first.
    fn rename_over(&self, p: &Place, tmp: &str, existing: Option<&FileStat>) -> Result<()> {
        if let Some(st) = existing
            && kind(st) == SFlag::S_IFDIR
        {
            self.remove_node(p, st)?;
        }
        match renameat(&p.dir, tmp, &p.dir, p.name()) {
            // ENOENT in an open directory: the directory itself was removed.
            Err(Errno::ENOENT) => Err(Changed(p.r.logical()).into()),
            r => r.with_context(|| format!("renaming {tmp} to {}", p.r.logical())),
        }
    }

    /// Removes the node at a place (a directory with everything in it, never crossing into
    /// another filesystem: a mount point is refused).
    fn remove_node(&self, p: &Place, st: &FileStat) -> Result<()> {
        let lpath = p.r.logical();
        if kind(st) == SFlag::S_IFDIR {
            remove_tree_at(p.dir.as_fd(), p.name(), &lpath)
        } else {
            unlinkat(&p.dir, p.name(), UnlinkatFlags::NoRemoveDir)
                .with_context(|| format!("removing {lpath}"))
        }
    }

    pub fn write_file(&mut self, f: &File) -> Result<()> {
        let what = f.path.as_str();
        let attrs = self.attrs(&f.user, &f.group, f.mode, what)?;
        self.put_file(
            what,
            Contents::Resources {
                contents: &f.contents,
                append: &f.append,
            },
            attrs,
            f.overwrite.unwrap_or(false),
        )
    }

    /// Writes a regular file at config path `path`.
    pub fn put_file(
        &self,
        path: &str,
        contents: Contents,
        attrs: Attrs,
        overwrite: bool,
    ) -> Result<()> {
        let p = self.place(path)?;
        let lpath = p.r.logical();
        let (has_contents, has_append) = match &contents {
            Contents::Resources { contents, append } => {
                (contents.source.is_some(), !append.is_empty())
            }
            Contents::Bytes(_) => (true, false),
        };
        let create = |name: &str, mode: u32| {
            Temp::create_at(
                &p.dir,
                name,
                self.root.host_path(&p.r.parent).join(name),
                |dir, name| {
                    openat(
                        dir,
                        name,
                        OFlag::O_WRONLY
                            | OFlag::O_CREAT
                            | OFlag::O_EXCL
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_CLOEXEC,
                        Mode::from_bits_truncate(mode),
                    )
                    .map(FsFile::from)
                    .map_err(std::io::Error::from)
                },
            )
            .map_err(|e| {
                created_in(e, join_logical(&p.r.parent, name), |w| {
                    format!("creating {w}")
                })
            })
        };
        // A new path is created in place with O_EXCL and registered as temporary until
        // complete, so that a failure or a signal removes it: one directory operation, as
        // `tar -x` does. Most paths are new: the create is tried first, and only when
        // something exists there (EEXIST, for any kind of node, a dangling link too) is it
        // looked at. An existing file is replaced by renaming a complete named temporary file
        // over it, never rewritten in place.
        let (uid, gid, mode) = (attrs.uid, attrs.gid, attrs.mode.unwrap_or(0o644));
        // A new file with no owner to set and a plain mode the umask leaves alone is created
        // with its mode (no fchmod afterwards).
        let created_with_mode =
            uid.is_none() && gid.is_none() && mode & 0o7000 == 0 && mode & self.umask() == 0;
        let is_eexist = |e: &anyhow::Error| {
            e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == ErrorKind::AlreadyExists)
        };
        // Something in the way is looked at; if it vanished meanwhile, the create is tried
        // once more.
        let mut fresh = None;
        let mut existing = None;
        for attempt in 0..2 {
            match create(p.name(), if created_with_mode { mode } else { 0o600 }) {
                Ok(ft) => {
                    fresh = Some(ft);
                    break;
                }
                Err(e) if is_eexist(&e) => {}
                Err(e) => return Err(e),
            }
            existing = p.stat()?;
            if existing.is_some() {
                break;
            }
            if attempt == 1 {
                bail!(
                    "{path}: {lpath} keeps appearing and vanishing (is something else writing there?)"
                );
            }
        }
        let keep = match &existing {
            Some(st) if !overwrite => {
                if kind(st) != SFlag::S_IFREG || has_contents {
                    bail!(
                        "{path}: a {} exists at {lpath} and overwrite is false",
                        stat_kind_name(st)
                    );
                }
                true
            }
            _ => false,
        };
        if keep && !has_append {
            // Existing regular file, no contents: only mode and owner apply.
            let f = open_regular_at(p.dir.as_fd(), p.name(), &lpath)?
                .with_context(|| format!("{path}: {lpath} vanished"))?;
            set_fd_attrs(&f, attrs, &lpath)?;
            debug!("{path}: kept existing file, set mode/owner");
            self.touch(lpath);
            return Ok(());
        }
        // Owner and mode of the result (the owner first: chown clears set-id bits).
        let (uid, gid, mode) = match (&existing, keep) {
            (Some(st), true) => (
                attrs.uid.or(Some(st.st_uid)),
                attrs.gid.or(Some(st.st_gid)),
                attrs.mode.unwrap_or(st.st_mode & 0o7777),
            ),
            _ => (uid, gid, mode),
        };
        let direct = existing.is_none();
        let (file, tmp, mut guard) = match fresh {
            Some((f, t)) => (f, p.name().to_string(), TmpGuard(Some(t))),
            None => {
                let tmp = tmp_name(p.name());
                let (f, t) = create(&tmp, 0o600)?;
                (f, tmp, TmpGuard(Some(t)))
            }
        };
        let tmp_shown = join_logical(&p.r.parent, &tmp);
        // Unbuffered: fetched contents arrive in chunks of up to 256 KiB (see fetch), bytes
        // whole; a buffer per file would cost more than it saves.
        let mut w = file;
        if keep {
            let mut old = open_regular_at(p.dir.as_fd(), p.name(), &lpath)?
                .with_context(|| format!("{path}: {lpath} vanished"))?;
            std::io::copy(&mut old, &mut w).with_context(|| format!("copying {lpath}"))?;
        }
        match contents {
            Contents::Resources { contents, append } => {
                if contents.source.is_some() {
                    self.fetcher
                        .fetch_to(contents, &mut w)
                        .with_context(|| format!("{path}: fetching contents"))?;
                }
                for (i, a) in append.iter().enumerate() {
                    self.fetcher
                        .fetch_to(a, &mut w)
                        .with_context(|| format!("{path}: fetching append[{i}]"))?;
                }
            }
            Contents::Bytes(b) => w
                .write_all(b)
                .with_context(|| format!("writing {tmp_shown}"))?,
        }
        let file = w;
        // Owner first (chown clears set-id bits), then mode.
        if uid.is_some() || gid.is_some() {
            refuse_minus_one(uid, gid, &lpath)?;
            std::os::unix::fs::fchown(&file, uid, gid)
                .with_context(|| format!("setting owner of {tmp_shown}"))?;
        }
        if !(direct && created_with_mode) {
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("setting mode of {tmp_shown}"))?;
        }
        drop(file);
        if !direct {
            self.rename_over(&p, &tmp, existing.as_ref())?;
        }
        guard.disarm();
        debug!("wrote file {lpath}");
        self.touch(lpath);
        Ok(())
    }

    pub fn write_dir(&mut self, d: &Directory) -> Result<()> {
        let attrs = self.attrs(&d.user, &d.group, d.mode, &d.path)?;
        self.put_dir(&d.path, attrs, d.overwrite.unwrap_or(false))
    }

    /// Creates (or adjusts) a directory at config path `path`.
    pub fn put_dir(&self, path: &str, attrs: Attrs, overwrite: bool) -> Result<()> {
        let p = self.place(path)?;
        let lpath = p.r.logical();
        match p.stat()? {
            Some(st) if kind(&st) == SFlag::S_IFDIR && !overwrite => {
                let d = open_dir_at(p.dir.as_fd(), p.name(), &lpath)?;
                set_fd_attrs(&d, attrs, &lpath)?;
                self.touch(lpath);
                return Ok(());
            }
            Some(st) if !overwrite => bail!(
                "{path}: a {} exists at {lpath} and overwrite is false",
                stat_kind_name(&st)
            ),
            Some(st) => self.remove_node(&p, &st)?,
            None => {}
        }
        let d = mkdir_at(p.dir.as_fd(), p.name(), 0o700, &lpath)?
            .with_context(|| format!("{path}: something else created {lpath} meanwhile"))?;
        set_fd_attrs(
            &d,
            Attrs {
                mode: Some(attrs.mode.unwrap_or(0o755)),
                ..attrs
            },
            &lpath,
        )?;
        debug!("created directory {lpath}");
        self.touch(lpath);
        Ok(())
    }

    /// Sets owner and mode of the existing directory at config path `path` (links on the
    /// way followed in the root, the directory itself never a link); false when there is no
    /// directory there.
    pub fn set_dir_attrs(&self, path: &str, attrs: Attrs) -> Result<bool> {
        let Some(p) = self.root.place(path, false)? else {
            return Ok(false);
        };
        let lpath = p.r.logical();
        match p.stat()? {
            Some(st) if kind(&st) == SFlag::S_IFDIR => {
                let d = open_dir_at(p.dir.as_fd(), p.name(), &lpath)?;
                set_fd_attrs(&d, attrs, &lpath)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    pub fn write_link(&mut self, l: &Link) -> Result<()> {
        let path = l.path.as_str();
        let Some(target) = l.target.as_deref() else {
            bail!("{path}: link without a target");
        };
        let overwrite = l.overwrite.unwrap_or(false);
        if l.hard == Some(true) {
            return self.put_hard_link(path, target, overwrite);
        }
        let attrs = self.attrs(&l.user, &l.group, None, path)?;
        self.put_symlink(path, target, attrs, overwrite)
    }

    /// A symbolic link; the target is written verbatim.
    pub fn put_symlink(
        &self,
        path: &str,
        target: &str,
        attrs: Attrs,
        overwrite: bool,
    ) -> Result<()> {
        let p = self.place(path)?;
        let lpath = p.r.logical();
        let existing = p.stat()?;
        if let Some(st) = &existing
            && !overwrite
        {
            let same = kind(st) == SFlag::S_IFLNK
                && readlinkat(&p.dir, p.name()).is_ok_and(|t| t.as_os_str() == target);
            if !same {
                bail!(
                    "{path}: a {} exists at {lpath} and overwrite is false",
                    stat_kind_name(st)
                );
            }
            chown_link_at(p.dir.as_fd(), p.name(), attrs, &lpath)?;
            self.touch(lpath);
            return Ok(());
        }
        let tmp = tmp_name(p.name());
        let ((), t) = Temp::create_at(
            &p.dir,
            &tmp,
            self.root.host_path(&p.r.parent).join(&tmp),
            |dir, name| symlinkat(target, dir, name).map_err(std::io::Error::from),
        )
        .map_err(|e| {
            created_in(e, join_logical(&p.r.parent, &tmp), |w| {
                format!("creating symlink {w}")
            })
        })?;
        let mut guard = TmpGuard(Some(t));
        chown_link_at(p.dir.as_fd(), &tmp, attrs, &join_logical(&p.r.parent, &tmp))?;
        self.rename_over(&p, &tmp, existing.as_ref())?;
        guard.disarm();
        debug!("created symlink {lpath} -> {target}");
        self.touch(lpath);
        Ok(())
    }

    /// A hard link to `target`, resolved in the root (its last element is not followed, so
    /// a link to a symlink links the symlink itself).
    pub fn put_hard_link(&self, path: &str, target: &str, overwrite: bool) -> Result<()> {
        let t = self
            .root
            .place(target, false)
            .with_context(|| format!("{path}: hard link target"))?;
        let tst = match &t {
            Some(t) => t.stat()?,
            None => None,
        };
        let (Some(t), Some(tst)) = (t, tst) else {
            let r = self.root.resolve(target)?;
            bail!("{path}: hard link target {} does not exist", r.logical());
        };
        if kind(&tst) == SFlag::S_IFDIR {
            bail!("{path}: hard link target {} is a directory", t.r.logical());
        }
        let p = self.place(path)?;
        let lpath = p.r.logical();
        let existing = p.stat()?;
        if let Some(st) = &existing
            && !overwrite
        {
            if st.st_dev == tst.st_dev && st.st_ino == tst.st_ino {
                return Ok(());
            }
            bail!(
                "{path}: a {} exists at {lpath} and overwrite is false",
                stat_kind_name(st)
            );
        }
        let tmp = tmp_name(p.name());
        let ((), temp) = Temp::create_at(
            &p.dir,
            &tmp,
            self.root.host_path(&p.r.parent).join(&tmp),
            |dir, name| {
                // Without AT_SYMLINK_FOLLOW: a link to a symlink links the symlink itself.
                linkat(&t.dir, t.name(), dir, name, AtFlags::empty()).map_err(std::io::Error::from)
            },
        )
        .map_err(|e| {
            created_in(e, join_logical(&p.r.parent, &tmp), |w| {
                format!("linking {w} to {}", t.r.logical())
            })
        })?;
        let mut guard = TmpGuard(Some(temp));
        self.rename_over(&p, &tmp, existing.as_ref())?;
        guard.disarm();
        debug!("created hard link {lpath} => {}", t.r.logical());
        self.touch(lpath);
        Ok(())
    }

    /// Logs a summary of what was written.
    pub fn log_summary(&self) {
        info!(
            "{} paths created or changed in {}",
            self.touched().len(),
            self.root.host.display()
        );
    }
}

/// Refuses an owner of 4294967295: chown reads it as -1 ("leave as is"), which would leave
/// a new node owned by root while the config asked for someone else. Ids are checked where
/// they are looked up; this is the last line of defence before every chown.
fn refuse_minus_one(uid: Option<u32>, gid: Option<u32>, what: &str) -> Result<()> {
    if uid == Some(u32::MAX) || gid == Some(u32::MAX) {
        bail!(
            "refusing to set owner {}:{} on {what}: 4294967295 means \"leave as is\" to chown",
            uid.map_or("-".into(), |u| u.to_string()),
            gid.map_or("-".into(), |g| g.to_string()),
        );
    }
    Ok(())
}

/// Sets owner then mode on an open node (a regular file or a directory opened without
/// following a link).
pub fn set_fd_attrs(f: &impl AsFd, a: Attrs, what: &str) -> Result<()> {
    if a.uid.is_some() || a.gid.is_some() {
        refuse_minus_one(a.uid, a.gid, what)?;
        fchown(
            f.as_fd(),
            a.uid.map(Uid::from_raw),
            a.gid.map(Gid::from_raw),
        )
        .with_context(|| format!("setting owner of {what}"))?;
    }
    if let Some(m) = a.mode {
        fchmod(f.as_fd(), Mode::from_bits_truncate(m))
            .with_context(|| format!("setting mode of {what}"))?;
    }
    Ok(())
}

/// Sets the owner of the symbolic link `name` of `dir` itself (a link has no mode).
fn chown_link_at(dir: BorrowedFd, name: &str, a: Attrs, what: &str) -> Result<()> {
    if a.uid.is_some() || a.gid.is_some() {
        refuse_minus_one(a.uid, a.gid, what)?;
        fchownat(
            dir,
            name,
            a.uid.map(Uid::from_raw),
            a.gid.map(Gid::from_raw),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .with_context(|| format!("setting owner of {what}"))?;
    }
    Ok(())
}

/// The error of creating node `what` in an open directory: ENOENT there means the directory
/// itself was removed (or swapped away) under the stage, which is [`Changed`].
/// Otherwise the error says what was being done (`doing` of the node's path).
fn created_in(
    e: std::io::Error,
    what: String,
    doing: impl FnOnce(&str) -> String,
) -> anyhow::Error {
    if e.kind() == ErrorKind::NotFound {
        anyhow::Error::from(Changed(what))
    } else {
        let doing = doing(&what);
        anyhow::Error::from(e).context(doing)
    }
}

/// Opens the directory `name` of `dir` (not a link) for reading and for fchown/fchmod.
pub fn open_dir_at(dir: BorrowedFd, name: &str, what: &str) -> Result<OwnedFd> {
    match openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(fd),
        Err(Errno::ENOTDIR | Errno::ELOOP | Errno::ENOENT) => Err(Changed(what.to_string()).into()),
        Err(e) => Err(e).with_context(|| format!("opening directory {what}")),
    }
}

/// Removes the directory `name` of `dir` and everything in it, through descriptors only
/// (no link followed); a mount point anywhere in it is refused (before anything of that
/// subtree is removed when it is the directory itself).
pub fn remove_tree_at(dir: BorrowedFd, name: &str, what: &str) -> Result<()> {
    let parent_dev = fstat(dir)
        .with_context(|| format!("inspecting the directory of {what}"))?
        .st_dev;
    let d = open_dir_at(dir, name, what)?;
    let st = fstat(&d).with_context(|| format!("inspecting {what}"))?;
    if st.st_dev != parent_dev {
        bail!("{what}: refusing to remove it: it is a mount point");
    }
    let entries: Vec<String> = {
        let listing =
            nix::dir::Dir::from_fd(d.try_clone().with_context(|| format!("listing {what}"))?)
                .with_context(|| format!("listing {what}"))?;
        let mut v = Vec::new();
        for e in listing {
            let e = e.with_context(|| format!("listing {what}"))?;
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            let n = String::from_utf8(n.to_vec())
                .map_err(|_| anyhow::anyhow!("{what}: an entry has a non-UTF-8 name"))?;
            v.push(n);
        }
        v
    };
    for n in entries {
        let child = format!("{what}/{n}");
        let Some(cst) = stat_at(d.as_fd(), &n, &child)? else {
            continue;
        };
        if kind(&cst) == SFlag::S_IFDIR {
            remove_tree_at(d.as_fd(), &n, &child)?;
        } else {
            unlinkat(&d, n.as_str(), UnlinkatFlags::NoRemoveDir)
                .with_context(|| format!("removing {child}"))?;
        }
    }
    unlinkat(dir, name, UnlinkatFlags::RemoveDir)
        .with_context(|| format!("removing directory {what}"))
}

/// The logical path of a resolved parent plus a name (helper for other writers).
pub fn join_logical(parent: &[String], name: &str) -> String {
    let mut v: Vec<String> = parent.to_vec();
    v.push(name.to_string());
    logical(v.iter())
}

#[cfg(test)]
mod tests {
    //! Each kind of node written through the root's descriptors, with `openat2` and with the
    //! element-by-element walk of kernels without it; a directory swapped for a link to the
    //! outside between resolution and writing never leads outside.
    use super::*;
    use crate::fetch::Fetcher;
    use crate::files::resolve::{NotDir, Root};
    use std::os::unix::fs::{MetadataExt, symlink};
    use std::path::{Path, PathBuf};

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "agent-nodes-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn writer<'f>(d: &Path, fetcher: &'f Fetcher, openat2: bool) -> Writer<'f> {
        let mut root = Root::open(d, &[]).unwrap();
        root.set_openat2(openat2);
        Writer::new(root, fetcher)
    }

    fn modes() -> [bool; 2] {
        [true, false]
    }

    fn owner_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn files_directories_symlinks_and_hard_links_in_both_modes() {
        let fetcher = Fetcher::new(Default::default());
        for openat2 in modes() {
            let d = tmp("kinds");
            let outside = tmp("kinds-outside");
            let w = writer(&d, &fetcher, openat2);
            let attrs = |mode| Attrs {
                mode: Some(mode),
                ..Attrs::default()
            };
            // A file in new directories; then replaced (rename in the same directory).
            w.put_file("/a/b/f", Contents::Bytes(b"one"), attrs(0o640), false)
                .unwrap();
            assert_eq!(std::fs::read(d.join("a/b/f")).unwrap(), b"one");
            assert_eq!(
                std::fs::metadata(d.join("a/b/f")).unwrap().mode() & 0o7777,
                0o640
            );
            assert_eq!(
                std::fs::metadata(d.join("a")).unwrap().mode() & 0o7777,
                0o755
            );
            w.put_file("/a/b/f", Contents::Bytes(b"two"), attrs(0o600), true)
                .unwrap();
            assert_eq!(std::fs::read(d.join("a/b/f")).unwrap(), b"two");
            let e = w
                .put_file("/a/b/f", Contents::Bytes(b"3"), attrs(0o600), false)
                .unwrap_err();
            assert!(format!("{e:#}").contains("overwrite is false"), "{e:#}");
            // Directories: created with their mode; an existing one adjusted.
            w.put_dir("/a/dir", attrs(0o700), false).unwrap();
            assert_eq!(
                std::fs::metadata(d.join("a/dir")).unwrap().mode() & 0o7777,
                0o700
            );
            w.put_dir("/a/dir", attrs(0o750), false).unwrap();
            assert_eq!(
                std::fs::metadata(d.join("a/dir")).unwrap().mode() & 0o7777,
                0o750
            );
            assert!(w.set_dir_attrs("/a/dir", attrs(0o711)).unwrap());
            assert!(!w.set_dir_attrs("/a/none", attrs(0o711)).unwrap());
            // A directory with contents replaced by a file (overwrite): removed through
            // descriptors.
            std::fs::create_dir_all(d.join("a/dir/x/y")).unwrap();
            std::fs::write(d.join("a/dir/x/y/z"), "z").unwrap();
            symlink(&outside, d.join("a/dir/x/out")).unwrap();
            std::fs::write(outside.join("keep"), "k").unwrap();
            w.put_file("/a/dir", Contents::Bytes(b"f"), attrs(0o644), true)
                .unwrap();
            assert_eq!(std::fs::read(d.join("a/dir")).unwrap(), b"f");
            assert!(
                outside.join("keep").exists(),
                "a link in the tree is not followed"
            );
            // Symbolic links: written verbatim, not followed; replaced atomically.
            w.put_symlink("/a/l", "/etc/target", Attrs::default(), false)
                .unwrap();
            assert_eq!(
                std::fs::read_link(d.join("a/l")).unwrap(),
                Path::new("/etc/target")
            );
            w.put_symlink("/a/l", "/etc/target", Attrs::default(), false)
                .unwrap();
            w.put_symlink("/a/l", "other", Attrs::default(), true)
                .unwrap();
            assert_eq!(
                std::fs::read_link(d.join("a/l")).unwrap(),
                Path::new("other")
            );
            if owner_root() {
                let a = Attrs {
                    uid: Some(1234),
                    gid: Some(4321),
                    mode: None,
                };
                w.put_symlink("/a/owned", "x", a, false).unwrap();
                let md = std::fs::symlink_metadata(d.join("a/owned")).unwrap();
                assert_eq!((md.uid(), md.gid()), (1234, 4321));
                w.put_file("/a/owned-f", Contents::Bytes(b""), a, false)
                    .unwrap();
                let md = std::fs::metadata(d.join("a/owned-f")).unwrap();
                assert_eq!((md.uid(), md.gid()), (1234, 4321));
            }
            // Hard links: to a file, and to a symlink itself (not followed).
            w.put_hard_link("/a/h", "/a/b/f", false).unwrap();
            assert_eq!(
                std::fs::metadata(d.join("a/h")).unwrap().ino(),
                std::fs::metadata(d.join("a/b/f")).unwrap().ino()
            );
            w.put_hard_link("/a/h", "/a/b/f", false).unwrap();
            w.put_hard_link("/a/hl", "/a/l", false).unwrap();
            assert!(
                std::fs::symlink_metadata(d.join("a/hl"))
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
            let e = w.put_hard_link("/a/h2", "/a/none", false).unwrap_err();
            assert!(format!("{e:#}").contains("does not exist"), "{e:#}");
            let e = w.put_hard_link("/a/h3", "/a/b", false).unwrap_err();
            assert!(format!("{e:#}").contains("is a directory"), "{e:#}");
            // A hard link target reached through a link to the outside resolves inside the
            // root (an absolute link is re-rooted): the outside file is never linked.
            symlink(&outside, d.join("toout")).unwrap();
            let e = w.put_hard_link("/a/h4", "/toout/keep", false).unwrap_err();
            assert!(format!("{e:#}").contains("does not exist"), "{e:#}");
            // Nothing left behind: no temporary nodes, nothing written outside.
            let leftovers: Vec<_> = std::fs::read_dir(d.join("a"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("agent-tmp"))
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
            let out: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
            assert_eq!(out.len(), 1, "only the test's own file is outside");
            std::fs::remove_dir_all(&d).unwrap();
            std::fs::remove_dir_all(&outside).unwrap();
        }
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_resolution_never_leads_outside() {
        let fetcher = Fetcher::new(Default::default());
        for openat2 in modes() {
            let d = tmp("swap");
            let outside = tmp("swap-outside");
            let w = writer(&d, &fetcher, openat2);
            std::fs::create_dir(d.join("d")).unwrap();
            // Resolved while /d is a directory ...
            let r = w.root.resolve("/d/f").unwrap();
            assert_eq!(r.logical(), "/d/f");
            // ... then swapped for a link to the outside.
            std::fs::rename(d.join("d"), d.join("d.moved")).unwrap();
            symlink(&outside, d.join("d")).unwrap();
            let e = w
                .root
                .open_dir(&r.parent, true, &mut Vec::new())
                .unwrap_err();
            assert!(e.is::<NotDir>(), "{e:#}");
            // Writing resolves again: the link is followed inside the root (re-rooted, as
            // every absolute link is), never to the outside directory.
            w.put_file("/d/f", Contents::Bytes(b"x"), Attrs::default(), false)
                .unwrap();
            let inside = d.join(outside.strip_prefix("/").unwrap()).join("f");
            assert_eq!(std::fs::read(&inside).unwrap(), b"x");
            w.put_dir("/d/sub", Attrs::default(), false).unwrap();
            w.put_symlink("/d/l", "t", Attrs::default(), false).unwrap();
            w.put_hard_link("/d/h", "/d/f", false).unwrap();
            assert!(
                std::fs::read_dir(&outside).unwrap().next().is_none(),
                "nothing outside"
            );
            // A link to a file on the way is an error naming it.
            std::fs::write(d.join("file"), "").unwrap();
            let e = w
                .root
                .open_dir(&["file".into(), "x".into()], true, &mut Vec::new())
                .unwrap_err();
            assert!(e.to_string().contains("/file is a regular file"), "{e:#}");
            std::fs::remove_dir_all(&d).unwrap();
            std::fs::remove_dir_all(&outside).unwrap();
        }
    }

    #[test]
    fn files_are_read_through_the_root() {
        for openat2 in modes() {
            let d = tmp("read");
            let mut root = Root::open(&d, &[]).unwrap();
            root.set_openat2(openat2);
            std::fs::create_dir_all(d.join("real/etc")).unwrap();
            std::fs::write(d.join("real/etc/passwd"), "inside").unwrap();
            symlink("/real/etc", d.join("etc")).unwrap();
            symlink("../../real/etc/passwd", d.join("real/etc/rel")).unwrap();
            symlink("/etc/passwd", d.join("real/etc/abs")).unwrap();
            assert_eq!(root.read_file("/etc/passwd").unwrap().unwrap(), b"inside");
            // Final links are followed inside the root too, never to the host's file.
            assert_eq!(root.read_file("/etc/rel").unwrap().unwrap(), b"inside");
            assert_eq!(root.read_file("/etc/abs").unwrap().unwrap(), b"inside");
            assert!(root.read_file("/etc/none").unwrap().is_none());
            nix::unistd::mkfifo(&d.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
            let e = root.read_file("/fifo").unwrap_err().to_string();
            assert!(e.contains("fifo, not a regular file"), "{e}");
            std::fs::remove_dir_all(&d).unwrap();
        }
    }

    #[test]
    fn a_mount_point_in_a_replaced_directory_is_refused() {
        // The same check as before, now by device number through descriptors: a directory
        // on another filesystem (here /proc's) is never descended into or removed.
        let fetcher = Fetcher::new(Default::default());
        let d = tmp("mp");
        let w = writer(&d, &fetcher, true);
        let p = w.root.place("/x", true).unwrap().unwrap();
        let e = remove_tree_at(
            nix::fcntl::open("/", OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                .unwrap()
                .as_fd(),
            "proc",
            "/proc",
        )
        .unwrap_err();
        assert!(e.to_string().contains("mount point"), "{e:#}");
        drop(p);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
