//! Files, directories and links, with every rule of the reference (§4): entries shallowest
//! first and hard links last; overwrite semantics for every kind of existing node; contents
//! and `append[]` streamed through the fetcher into a temporary file beside the target, with
//! mode and owner set before the rename. Durability comes from one `syncfs` per filesystem at
//! the end of the stage, not from an fsync per file.

use std::collections::HashMap;
use std::fs::{File as FsFile, Metadata, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};
use log::{debug, info};

use super::Writer;
use super::resolve::{Resolved, is_mount_point, kind_name, logical};
use crate::config::types::{Directory, File, Link, NodeUser, Resource, Storage};
use crate::signals::Temp;

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

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

fn lstat(p: &Path) -> Result<Option<Metadata>> {
    match std::fs::symlink_metadata(p) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("inspecting {}", p.display())),
    }
}

fn tmp_name(dir: &Path, name: &str) -> PathBuf {
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let short: String = name.chars().take(64).collect();
    dir.join(format!(".{short}.agent-tmp-{}-{n}", std::process::id()))
}

/// Removes a temporary node unless disarmed (also on SIGINT/SIGTERM/SIGHUP: see
/// [`crate::signals`]).
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

    /// Resolves a config path and creates its missing parent directories.
    fn place(&self, path: &str) -> Result<(Resolved, PathBuf)> {
        let r = self.root.resolve(path)?;
        for created in self.root.create_parents(&r.parent)? {
            self.touch(created);
        }
        let host = self.root.host_path(&r.parent).join(&r.name);
        Ok((r, host))
    }

    /// Removes an existing node that an `overwrite: true` entry replaces.
    /// Renames a finished temporary node over `host`. rename(2) replaces files and links
    /// atomically but not directories: an existing directory (already allowed by the
    /// overwrite rules) is removed first.
    fn rename_over(
        &self,
        tmp: &Path,
        host: &Path,
        existing: Option<&Metadata>,
        logical_path: &str,
    ) -> Result<()> {
        if let Some(md) = existing
            && md.is_dir()
        {
            self.remove_node(host, md, logical_path)?;
        }
        std::fs::rename(tmp, host)
            .with_context(|| format!("renaming {} to {}", tmp.display(), host.display()))
    }

    fn remove_node(&self, host: &Path, md: &Metadata, logical_path: &str) -> Result<()> {
        self.root.forget_dirs();
        if md.is_dir() {
            if is_mount_point(host) {
                bail!(
                    "{logical_path}: refusing to remove {}: it is a mount point",
                    host.display()
                );
            }
            let r = std::fs::remove_dir_all(host)
                .with_context(|| format!("removing directory {}", host.display()));
            self.root.forget_dirs();
            r
        } else {
            std::fs::remove_file(host).with_context(|| format!("removing {}", host.display()))
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
        let (r, host) = self.place(path)?;
        let lpath = r.logical();
        let (has_contents, has_append) = match &contents {
            Contents::Resources { contents, append } => {
                (contents.source.is_some(), !append.is_empty())
            }
            Contents::Bytes(_) => (true, false),
        };
        let create = |p: &Path, mode: u32| {
            Temp::create(p, |p| {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode)
                    .custom_flags(nix::libc::O_CLOEXEC)
                    .open(p)
            })
            .with_context(|| format!("creating {}", p.display()))
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
            match create(&host, if created_with_mode { mode } else { 0o600 }) {
                Ok(ft) => {
                    fresh = Some(ft);
                    break;
                }
                Err(e) if is_eexist(&e) => {}
                Err(e) => return Err(e),
            }
            existing = lstat(&host)?;
            if existing.is_some() {
                break;
            }
            if attempt == 1 {
                bail!(
                    "{path}: {} keeps appearing and vanishing (is something else writing there?)",
                    host.display()
                );
            }
        }
        let keep = match &existing {
            Some(md) if !overwrite => {
                if !md.is_file() || has_contents {
                    bail!(
                        "{path}: a {} exists at {lpath} and overwrite is false",
                        kind_name(&md.file_type())
                    );
                }
                true
            }
            _ => false,
        };
        if keep && !has_append {
            // Existing regular file, no contents: only mode and owner apply.
            set_attrs(&host, attrs, false)?;
            debug!("{path}: kept existing file, set mode/owner");
            self.touch(lpath);
            return Ok(());
        }
        let dir = host
            .parent()
            .expect("resolved path has a parent")
            .to_path_buf();
        // Owner and mode of the result (the owner first: chown clears set-id bits).
        let (uid, gid, mode) = match (&existing, keep) {
            (Some(md), true) => (
                attrs.uid.or(Some(md.uid())),
                attrs.gid.or(Some(md.gid())),
                attrs.mode.unwrap_or(md.mode() & 0o7777),
            ),
            _ => (uid, gid, mode),
        };
        let direct = existing.is_none();
        let (file, tmp, mut guard) = match fresh {
            Some((f, t)) => (f, host.clone(), TmpGuard(Some(t))),
            None => {
                let tmp = tmp_name(&dir, &r.name);
                let (f, t) = create(&tmp, 0o600)?;
                (f, tmp, TmpGuard(Some(t)))
            }
        };
        // Unbuffered: fetched contents arrive in chunks of up to 256 KiB (see fetch), bytes
        // whole; a buffer per file would cost more than it saves.
        let mut w = file;
        if keep {
            let mut old =
                FsFile::open(&host).with_context(|| format!("opening {}", host.display()))?;
            std::io::copy(&mut old, &mut w)
                .with_context(|| format!("copying {}", host.display()))?;
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
                .with_context(|| format!("writing {}", tmp.display()))?,
        }
        let file = w;
        // Owner first (chown clears set-id bits), then mode.
        if uid.is_some() || gid.is_some() {
            refuse_minus_one(uid, gid, &host)?;
            std::os::unix::fs::fchown(&file, uid, gid)
                .with_context(|| format!("setting owner of {}", tmp.display()))?;
        }
        if !(direct && created_with_mode) {
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("setting mode of {}", tmp.display()))?;
        }
        drop(file);
        if !direct {
            self.rename_over(&tmp, &host, existing.as_ref(), &lpath)?;
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
        let (r, host) = self.place(path)?;
        let lpath = r.logical();
        match lstat(&host)? {
            Some(md) if md.is_dir() && !overwrite => {
                set_attrs(&host, attrs, false)?;
                self.touch(lpath);
                return Ok(());
            }
            Some(md) if !overwrite => bail!(
                "{path}: a {} exists at {lpath} and overwrite is false",
                kind_name(&md.file_type())
            ),
            Some(md) => self.remove_node(&host, &md, &lpath)?,
            None => {}
        }
        std::fs::create_dir(&host)
            .with_context(|| format!("creating directory {}", host.display()))?;
        set_attrs(
            &host,
            Attrs {
                mode: Some(attrs.mode.unwrap_or(0o755)),
                ..attrs
            },
            false,
        )?;
        debug!("created directory {lpath}");
        self.touch(lpath);
        Ok(())
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
        let (r, host) = self.place(path)?;
        let lpath = r.logical();
        let existing = lstat(&host)?;
        if let Some(md) = &existing
            && !overwrite
        {
            let same = md.file_type().is_symlink()
                && std::fs::read_link(&host).is_ok_and(|t| t.as_os_str() == target);
            if !same {
                bail!(
                    "{path}: a {} exists at {lpath} and overwrite is false",
                    kind_name(&md.file_type())
                );
            }
            set_attrs(&host, attrs, true)?;
            self.touch(lpath);
            return Ok(());
        }
        let dir = host
            .parent()
            .expect("resolved path has a parent")
            .to_path_buf();
        let tmp = tmp_name(&dir, &r.name);
        let ((), t) = Temp::create(&tmp, |p| std::os::unix::fs::symlink(target, p))
            .with_context(|| format!("creating symlink {}", tmp.display()))?;
        let mut guard = TmpGuard(Some(t));
        set_attrs(
            &tmp,
            Attrs {
                mode: None,
                ..attrs
            },
            true,
        )?;
        self.rename_over(&tmp, &host, existing.as_ref(), &lpath)?;
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
            .resolve(target)
            .with_context(|| format!("{path}: hard link target"))?;
        let thost = self.root.host_path(&t.parent).join(&t.name);
        let Some(tmd) = lstat(&thost)? else {
            bail!("{path}: hard link target {} does not exist", t.logical());
        };
        if tmd.is_dir() {
            bail!("{path}: hard link target {} is a directory", t.logical());
        }
        let (r, host) = self.place(path)?;
        let lpath = r.logical();
        let existing = lstat(&host)?;
        if let Some(md) = &existing
            && !overwrite
        {
            if md.dev() == tmd.dev() && md.ino() == tmd.ino() {
                return Ok(());
            }
            bail!(
                "{path}: a {} exists at {lpath} and overwrite is false",
                kind_name(&md.file_type())
            );
        }
        let dir = host
            .parent()
            .expect("resolved path has a parent")
            .to_path_buf();
        let tmp = tmp_name(&dir, &r.name);
        let ((), temp) = Temp::create(&tmp, |p| std::fs::hard_link(&thost, p))
            .with_context(|| format!("linking {} to {}", tmp.display(), thost.display()))?;
        let mut guard = TmpGuard(Some(temp));
        self.rename_over(&tmp, &host, existing.as_ref(), &lpath)?;
        guard.disarm();
        debug!("created hard link {lpath} => {}", t.logical());
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
fn refuse_minus_one(uid: Option<u32>, gid: Option<u32>, host: &Path) -> Result<()> {
    if uid == Some(u32::MAX) || gid == Some(u32::MAX) {
        bail!(
            "refusing to set owner {}:{} on {}: 4294967295 means \"leave as is\" to chown",
            uid.map_or("-".into(), |u| u.to_string()),
            gid.map_or("-".into(), |g| g.to_string()),
            host.display()
        );
    }
    Ok(())
}

/// Sets owner then mode on a path (`nofollow`: on a symlink itself, mode not applicable).
pub fn set_attrs(host: &Path, a: Attrs, nofollow: bool) -> Result<()> {
    if a.uid.is_some() || a.gid.is_some() {
        refuse_minus_one(a.uid, a.gid, host)?;
        if nofollow {
            std::os::unix::fs::lchown(host, a.uid, a.gid)
        } else {
            std::os::unix::fs::chown(host, a.uid, a.gid)
        }
        .with_context(|| format!("setting owner of {}", host.display()))?;
    }
    if let Some(m) = a.mode
        && !nofollow
    {
        std::fs::set_permissions(host, std::fs::Permissions::from_mode(m))
            .with_context(|| format!("setting mode of {}", host.display()))?;
    }
    Ok(())
}

/// The logical path of a resolved parent plus a name (helper for other writers).
pub fn join_logical(parent: &[String], name: &str) -> String {
    let mut v: Vec<String> = parent.to_vec();
    v.push(name.to_string());
    logical(v.iter())
}
