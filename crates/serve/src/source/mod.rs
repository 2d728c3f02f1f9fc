//! The config source: a directory holding `pools/<pool>.ign` (one config) or
//! `pools/<pool>/*.ign` (fragments merged in file-name order).
//!
//! Butane sources are welcome too: `pools/<pool>.bu`, and `.bu` fragments mixed with `.ign`
//! ones in `pools/<pool>/`. Each is translated while the generation is read, with the
//! directory it is in as the files dir (symlinks included, nothing outside it is read), so the
//! local files it embeds belong to the same generation and count in its id. A Butane error
//! makes the generation invalid, like any other error. Translations are kept by content
//! ([`Translations`]): a `.bu` file is translated again only when its bytes or a local file it
//! read changed, so polling an unchanged source costs reads and hashes, not translations.
//!
//! The directory may be a plain tree, a Kubernetes AtomicWriter volume (`..data` → `..<stamp>`
//! swapped by rename(2)) or a git-sync link (the directory itself is a symlink that is swapped).
//! A generation is read whole from the directory the link pointed to when we resolved it once,
//! so two generations are never mixed; when that directory vanishes mid-read (the writer
//! reclaimed it) we resolve again and start over. Names starting with `..` are never content.
//!
//! Only what is inside the source is read: a symlink is followed only when its target is
//! inside the generation's directory or the source directory itself (AtomicWriter's and
//! git-sync's own links are), and only regular files are read, each opened without blocking
//! and checked (fstat) before a byte is read, at most [`MAX_SOURCE_FILE_BYTES`] each: a FIFO,
//! a device or a socket named like a pool file makes the generation invalid with an error
//! naming it, never a hung watcher. Errors never quote file contents ([`redact`]).

pub mod accept;
pub mod install;
pub mod machines;
pub mod openshift;
pub mod placeholders;
pub mod reading;
pub mod render;
pub mod rollout;
pub mod selectors;

use std::collections::{BTreeMap, HashMap};
use std::fs::FileType;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};

use crate::source::machines::{AssetCache, MachineSet, RawMachines};
pub use crate::source::reading::{
    Fragment, open_regular, read_regular, redact, redact_butane, redact_diag, valid_pool_name,
};
use crate::source::render::Pool;
use spec::config::{self, Config};

/// How often a vanished or replaced directory is re-resolved before giving up.
const VANISH_RETRIES: usize = 8;

/// Largest source file read (each `.ign` or `.bu` pool file or fragment): the largest config
/// the agent itself accepts.
pub const MAX_SOURCE_FILE_BYTES: u64 = runtime::limits::DEFAULT_MAX_CONFIG_SIZE;

/// A validated generation of the source, ready to serve.
#[derive(Debug)]
pub struct Generation {
    /// Content hash of the bytes read (every pool file, and the local files `.bu` files
    /// embed; short hex): equal on every replica for equal input.
    pub id: String,
    /// The resolved directory it was read from.
    pub dir: PathBuf,
    pub pools: BTreeMap<String, Arc<Pool>>,
    /// The machine files, boot profiles and assets, and each machine's config
    /// (`machines/`, `boot/`; empty when the source has none).
    pub machines: Arc<MachineSet>,
    /// Pool → its rollout policy (`crate::source::rollout`); a pool without one has none.
    pub rollouts: BTreeMap<String, rollout::Policy>,
}

/// The raw bytes of a generation, before validation.
#[derive(Debug, Default)]
pub struct RawGeneration {
    pub id: String,
    pub dir: PathBuf,
    /// pool → fragments (file name, bytes) in file-name order; a Butane fragment's bytes
    /// are its Ignition translation.
    pub pools: BTreeMap<String, Vec<Fragment>>,
    /// Butane fragments that did not translate: "pool: file: errors".
    pub butane_errors: Vec<String>,
    /// `machines/` and `boot/` as read.
    pub machines: RawMachines,
    /// Pool → its rollout policy file's bytes.
    pub rollouts: BTreeMap<String, Vec<u8>>,
}

fn is_source(name: &str) -> bool {
    name.ends_with(".ign") || name.ends_with(".bu")
}

fn not_regular(path: &Path, ft: &FileType) -> anyhow::Error {
    anyhow!(
        "{} is {}, not a regular file: only regular files are read",
        path.display(),
        runtime::util::file_kind(ft)
    )
}

/// A source file's bytes (see [`read_regular`]); a file that vanished is a `NotFound` error,
/// which [`read`] takes for a generation being swapped.
fn read_source_file(path: &Path) -> Result<Vec<u8>> {
    read_bounded(path, MAX_SOURCE_FILE_BYTES, path)
}

/// [`read_source_file`] with its own bound, naming the file as `shown`.
fn read_bounded(path: &Path, max: u64, shown: &Path) -> Result<Vec<u8>> {
    read_regular(path, max)?.ok_or_else(|| {
        anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::NotFound))
            .context(format!("reading {}", shown.display()))
    })
}

/// The directories links may lead into: the generation's directory and the source
/// directory itself (for an AtomicWriter volume, the volume holding `..data`).
struct Bases(Vec<PathBuf>);

impl Bases {
    fn contains(&self, real: &Path) -> bool {
        self.0.iter().any(|b| real.starts_with(b))
    }
}

/// One local file (or tree) a Butane translation read, and a hash of what it got.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Dep {
    /// A file: its path, the bytes the translation allowed, the hash.
    File(String, u64, [u8; 32]),
    /// A tree: its path, the bytes allowed per file and in all, the hash.
    Tree(String, (u64, u64), [u8; 32]),
}

fn hash_read(r: &Result<Vec<u8>, butane::LocalError>) -> [u8; 32] {
    let mut h = Sha256::new();
    match r {
        Ok(b) => {
            h.update([1]);
            h.update(b);
        }
        Err(e) => {
            h.update([0]);
            h.update(format!("{e:?}").as_bytes());
        }
    }
    h.finalize().into()
}

fn hash_walk(r: &Result<Vec<butane::TreeEntry>, butane::LocalError>) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    match r {
        Ok(entries) => {
            for e in entries {
                match e {
                    butane::TreeEntry::File {
                        rel,
                        contents,
                        executable,
                    } => {
                        field(b"f");
                        field(rel.as_bytes());
                        field(contents);
                        field(&[u8::from(*executable)]);
                    }
                    butane::TreeEntry::Dir { rel } => {
                        field(b"d");
                        field(rel.as_bytes());
                    }
                    butane::TreeEntry::Symlink { rel, target } => {
                        field(b"l");
                        field(rel.as_bytes());
                        field(target.as_bytes());
                    }
                }
            }
        }
        Err(e) => {
            field(b"e");
            field(format!("{e:?}").as_bytes());
        }
    }
    h.finalize().into()
}

/// Butane's files dir for a translation, recording every local file and tree it reads.
struct Recorder<'a> {
    inner: &'a runtime::butane_files::DirFiles,
    deps: std::cell::RefCell<Vec<Dep>>,
}

impl butane::FilesDir for Recorder<'_> {
    fn read(&self, rel: &str, max: u64) -> Result<Vec<u8>, butane::LocalError> {
        let r = self.inner.read(rel, max);
        self.deps
            .borrow_mut()
            .push(Dep::File(rel.to_string(), max, hash_read(&r)));
        r
    }

    fn walk(
        &self,
        rel: &str,
        max_file: u64,
        max_total: u64,
    ) -> Result<Vec<butane::TreeEntry>, butane::LocalError> {
        let r = self.inner.walk(rel, max_file, max_total);
        self.deps.borrow_mut().push(Dep::Tree(
            rel.to_string(),
            (max_file, max_total),
            hash_walk(&r),
        ));
        r
    }
}

/// A translation kept by [`Translations`].
struct Translated {
    deps: Vec<Dep>,
    /// The Ignition JSON, or the (redacted) errors.
    result: Result<Arc<Vec<u8>>, String>,
    /// Used by the latest read (entries no read used are dropped after it).
    used: bool,
}

/// Butane translations kept from one read of the source to the next, by the SHA-256 of the
/// `.bu` file's bytes and its files dir. An entry is reused when every local file (and tree)
/// the translation read still reads the same (read again and hashed, which costs I/O, not a
/// translation); entries the latest read did not use are dropped, so it holds at most the
/// translations of one generation.
#[derive(Default)]
pub struct Translations {
    entries: HashMap<[u8; 32], Translated>,
    /// Boot assets kept by file identity (see [`AssetCache`]).
    pub assets: AssetCache,
    /// Translations run (not found or out of date), for `/metrics`.
    pub count: u64,
}

impl std::fmt::Debug for Translations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Translations({} kept, {} run)",
            self.entries.len(),
            self.count
        )
    }
}

impl Translations {
    /// The translation of the Butane file `bytes` with `files_dir` as its files dir, and the
    /// local files it read (for the generation id). `place` is that directory relative to the
    /// generation's (`pools`, `pools/<pool>`): the key, so that a new AtomicWriter or
    /// git-sync directory with the same files reuses the translation.
    fn get(
        &mut self,
        bytes: &[u8],
        files_dir: &Path,
        place: &str,
    ) -> (Result<Arc<Vec<u8>>, String>, Vec<Dep>) {
        let files = runtime::butane_files::DirFiles {
            root: files_dir.to_path_buf(),
            confine_symlinks: true,
        };
        let mut h = Sha256::new();
        h.update(place.as_bytes());
        h.update([0]);
        h.update(bytes);
        let key: [u8; 32] = h.finalize().into();
        if let Some(t) = self.entries.get_mut(&key) {
            use butane::FilesDir;
            let current = t.deps.iter().all(|d| match d {
                Dep::File(rel, max, hash) => hash_read(&files.read(rel, *max)) == *hash,
                Dep::Tree(rel, (max_file, max_total), hash) => {
                    hash_walk(&files.walk(rel, *max_file, *max_total)) == *hash
                }
            });
            if current {
                t.used = true;
                return (t.result.clone(), t.deps.clone());
            }
        }
        self.count += 1;
        let rec = Recorder {
            inner: &files,
            deps: Default::default(),
        };
        let opts = butane::Options {
            files_dir: Some(&rec),
            max_size: usize::try_from(MAX_SOURCE_FILE_BYTES).unwrap_or(usize::MAX),
            ..Default::default()
        };
        let result = match butane::translate(bytes, &opts) {
            Ok(out) => {
                for w in &out.report.diags {
                    log::debug!("{}: {}", files_dir.display(), redact_butane(w));
                }
                Ok(Arc::new(out.json))
            }
            Err(report) => Err(report
                .diags
                .iter()
                .filter(|d| d.error)
                .map(redact_butane)
                .collect::<Vec<_>>()
                .join("; ")),
        };
        let deps = rec.deps.into_inner();
        self.entries.insert(
            key,
            Translated {
                deps: deps.clone(),
                result: result.clone(),
                used: true,
            },
        );
        (result, deps)
    }

    /// Before a read: nothing used yet.
    fn begin(&mut self) {
        for t in self.entries.values_mut() {
            t.used = false;
        }
        self.assets.begin();
    }

    /// After a read: drop what it did not use.
    fn end(&mut self) {
        self.entries.retain(|_, t| t.used);
        self.assets.end();
    }
}

/// Reading one generation: what was read so far, the id's hash, the translations.
struct Reader<'a> {
    g: RawGeneration,
    id: Sha256,
    bases: &'a Bases,
    translations: &'a mut Translations,
}

impl Reader<'_> {
    fn field(&mut self, b: &[u8]) {
        self.id.update((b.len() as u64).to_le_bytes());
        self.id.update(b);
    }

    /// Reads one fragment (its real path `path`, in directory `dir`) of `pool`: its bytes
    /// count in the id as read; a `.bu` fragment is translated (or its kept translation
    /// reused) with `dir` as its files dir, and the local files it read count too.
    fn fragment(
        &mut self,
        pool: &str,
        name: &str,
        path: &Path,
        dir: &Path,
        place: &str,
    ) -> Result<Fragment> {
        let bytes = read_source_file(path)?;
        self.field(pool.as_bytes());
        self.field(name.as_bytes());
        self.field(&bytes);
        if !name.ends_with(".bu") {
            return Ok((name.to_string(), Arc::new(bytes)));
        }
        let (res, deps) = self.translations.get(&bytes, dir, place);
        for d in &deps {
            let (tag, rel, hash) = match d {
                Dep::File(r, _, h) => (b"f", r, h),
                Dep::Tree(r, _, h) => (b"t", r, h),
            };
            self.field(tag);
            self.field(rel.as_bytes());
            self.field(hash);
        }
        Ok(match res {
            Ok(json) => (name.to_string(), json),
            Err(e) => {
                self.g
                    .butane_errors
                    .push(format!("pool {pool}: {name}: {e}"));
                (name.to_string(), Arc::new(Vec::new()))
            }
        })
    }
}

impl Reader<'_> {
    /// Reads pool `pool`'s rollout policy file (entry `e`, shown as `shown`): its bytes
    /// count in the id.
    fn policy(&mut self, pool: &str, shown: &Path, e: &Entry) -> Result<()> {
        e.confined(shown)?;
        if !e.ft.is_file() {
            return Err(not_regular(shown, &e.ft));
        }
        let bytes = read_bounded(&e.real, rollout::MAX_BYTES, shown)?;
        self.field(b"rollout");
        self.field(pool.as_bytes());
        self.field(&bytes);
        if self.g.rollouts.insert(pool.to_string(), bytes).is_some() {
            bail!(
                "pool {pool:?} has two rollout policies ({pool}.rollout.json and {pool}/rollout.json)"
            );
        }
        Ok(())
    }
}

/// Why loading failed: the bytes could not be read, or they were read but are invalid.
#[derive(Debug)]
pub enum LoadError {
    Read(anyhow::Error),
    Invalid {
        id: String,
        dir: PathBuf,
        error: String,
    },
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Read(e) => write!(f, "{e:#}"),
            LoadError::Invalid { id, error, .. } => write!(f, "generation {id}: {error}"),
        }
    }
}

/// The directory the current generation lives in: `DIR/..data` resolved when present
/// (AtomicWriter), else DIR itself resolved (git-sync link or plain tree).
///
/// The link is read first and its target resolved after: a writer may swap the link and
/// remove the old target in between, which shows here as `NotFound` (retried by [`read`]).
pub fn resolve(dir: &Path) -> Result<PathBuf> {
    let data = dir.join("..data");
    let target = match std::fs::read_link(&data) {
        Ok(t) => {
            #[cfg(test)]
            hooks::after_readlink();
            dir.join(t)
        }
        // Not a link (a plain directory named `..data`) or absent: resolve it or DIR.
        Err(_) if std::fs::symlink_metadata(&data).is_ok() => data,
        Err(_) => dir.to_path_buf(),
    };
    std::fs::canonicalize(&target).with_context(|| format!("resolving {}", target.display()))
}

/// Whether an error is a file or directory that vanished (a generation being swapped).
fn vanished(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
    })
}

/// Reads one whole generation, retrying when the resolved directory vanishes mid-read,
/// including between reading the `..data` link and resolving its target. Butane
/// translations are looked up in (and kept for the next read in) `translations`.
pub fn read(dir: &Path, translations: &mut Translations) -> Result<RawGeneration> {
    translations.begin();
    let res = read_retrying(dir, translations);
    translations.end();
    res
}

fn read_retrying(dir: &Path, translations: &mut Translations) -> Result<RawGeneration> {
    let mut last = None;
    for _ in 0..VANISH_RETRIES {
        let root = match resolve(dir) {
            Ok(r) => r,
            Err(e) if vanished(&e) && std::fs::symlink_metadata(dir).is_ok() => {
                log::debug!("{:#}: generation swapped while resolving, retrying", e);
                last = Some(e);
                std::thread::sleep(std::time::Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut bases = vec![root.clone()];
        if let Ok(d) = std::fs::canonicalize(dir)
            && d != root
        {
            bases.push(d);
        }
        let res = read_from(&root, &Bases(bases), translations);
        // A writer reclaims a generation only after swapping the link away from it: if the
        // link still points here, what we read (or failed to read) was not being deleted.
        // Otherwise the directory may have vanished or been half-removed while we listed it
        // (an empty listing is not even an error), so start over from the new link.
        if resolve(dir).ok().as_ref() == Some(&root) {
            return res;
        }
        log::debug!("{} was replaced while being read, retrying", root.display());
        last = Some(match res {
            Ok(_) => anyhow!("{} was replaced while being read", root.display()),
            Err(e) => e,
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Err(last.unwrap_or_else(|| anyhow!("reading {}", dir.display())))
        .with_context(|| format!("{} kept changing while being read", dir.display()))
}

/// Test-only hook points (compiled into unit-test builds only).
#[cfg(test)]
mod hooks {
    use std::cell::RefCell;

    thread_local! {
        static AFTER_READLINK: RefCell<Option<Box<dyn FnMut()>>> = RefCell::new(None);
    }

    /// Runs `f` once, the next time this thread has read `..data` and not yet resolved it.
    pub fn set_after_readlink(f: impl FnMut() + 'static) {
        AFTER_READLINK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    pub fn after_readlink() {
        if let Some(mut f) = AFTER_READLINK.with(|h| h.borrow_mut().take()) {
            f();
        }
    }
}

/// An entry of a source directory: its name, its real path (symlinks resolved) and what
/// is there, and whether that is outside the source (a link out of it).
struct Entry {
    name: String,
    real: PathBuf,
    ft: FileType,
    outside: bool,
}

impl Entry {
    /// Refuses an entry that is to be read but leads out of the source.
    fn confined(&self, shown: &Path) -> Result<()> {
        if self.outside {
            bail!(
                "{} is a symbolic link to a place outside the source: links are followed only within the source directory",
                shown.display()
            );
        }
        Ok(())
    }
}

/// The entries of `dir` (a real path inside the source) in name order, without names
/// starting with `.`; links are resolved and marked when they lead out of `bases`.
fn sorted_entries(dir: &Path, bases: &Bases) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e.with_context(|| format!("listing {}", dir.display()))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.starts_with('.') {
            // `..data`, `..<stamp>`, editor and temp files: never content.
            continue;
        }
        let path = e.path();
        let ft = e
            .file_type()
            .with_context(|| format!("reading {}", path.display()))?;
        let (real, ft) = if ft.is_symlink() {
            // Follow symlinks within the source (AtomicWriter's user-visible names are
            // links into `..data`); resolving one does not open what it leads to.
            let real = std::fs::canonicalize(&path)
                .with_context(|| format!("resolving {}", path.display()))?;
            let ft = std::fs::symlink_metadata(&real)
                .with_context(|| format!("reading {}", path.display()))?
                .file_type();
            (real, ft)
        } else {
            (path, ft)
        };
        let outside = !bases.contains(&real);
        out.push(Entry {
            name: name.to_string(),
            real,
            ft,
            outside,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn read_from(root: &Path, bases: &Bases, translations: &mut Translations) -> Result<RawGeneration> {
    let shown_pools = root.join("pools");
    let pools_dir = std::fs::canonicalize(&shown_pools)
        .with_context(|| format!("listing {}", shown_pools.display()))?;
    if !bases.contains(&pools_dir) {
        bail!(
            "{} is a symbolic link to a place outside the source: links are followed only within the source directory",
            shown_pools.display()
        );
    }
    let mut r = Reader {
        g: RawGeneration {
            dir: root.to_path_buf(),
            ..Default::default()
        },
        id: Sha256::new(),
        bases,
        translations,
    };
    for e in sorted_entries(&pools_dir, bases)? {
        let shown = shown_pools.join(&e.name);
        if e.ft.is_dir() {
            let name = &e.name;
            if !valid_pool_name(name) {
                bail!(
                    "invalid pool directory name {name:?} in {}",
                    shown_pools.display()
                );
            }
            e.confined(&shown)?;
            let mut frags = Vec::new();
            for f in sorted_entries(&e.real, r.bases)? {
                if f.name == rollout::IN_DIR && !f.ft.is_dir() {
                    r.policy(name, &shown.join(&f.name), &f)?;
                    continue;
                }
                if !is_source(&f.name) || f.ft.is_dir() {
                    continue;
                }
                let fshown = shown.join(&f.name);
                f.confined(&fshown)?;
                if !f.ft.is_file() {
                    return Err(not_regular(&fshown, &f.ft));
                }
                frags.push(r.fragment(
                    name,
                    &f.name,
                    &f.real,
                    &e.real,
                    &format!("pools/{name}"),
                )?);
            }
            if frags.is_empty() {
                bail!(
                    "pool directory {} holds no .ign or .bu fragments",
                    shown.display()
                );
            }
            if r.g.pools.insert(name.clone(), frags).is_some() {
                bail!("pool {name:?} is given both as {name}.ign and as {name}/");
            }
        } else {
            let name = &e.name;
            if let Some(pool) = name.strip_suffix(rollout::SUFFIX) {
                if !valid_pool_name(pool) {
                    bail!(
                        "invalid rollout policy name {name:?} in {}",
                        shown_pools.display()
                    );
                }
                r.policy(pool, &shown, &e)?;
                continue;
            }
            let Some(pool) = name
                .strip_suffix(".ign")
                .or_else(|| name.strip_suffix(".bu"))
            else {
                continue;
            };
            if !valid_pool_name(pool) {
                bail!(
                    "invalid pool file name {name:?} in {}",
                    shown_pools.display()
                );
            }
            e.confined(&shown)?;
            if !e.ft.is_file() {
                return Err(not_regular(&shown, &e.ft));
            }
            let frag = r.fragment(pool, name, &e.real, &pools_dir, "pools")?;
            if r.g.pools.insert(pool.to_string(), vec![frag]).is_some() {
                bail!("pool {pool:?} is given twice ({pool}.ign, {pool}.bu or {pool}/)");
            }
        }
    }
    read_machines(&mut r, root)?;
    let mut g = r.g;
    g.id = spec::encoding::hex(&r.id.finalize()[..8]);
    Ok(g)
}

/// The regular files of the optional directory `root/<rel>` (confined like pool files):
/// (name, real path) of each, by name; none when it does not exist.
fn plain_files(root: &Path, rel: &str, bases: &Bases) -> Result<Vec<(String, PathBuf)>> {
    let shown = root.join(rel);
    let real = match std::fs::canonicalize(&shown) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", shown.display())),
    };
    if !bases.contains(&real) {
        bail!(
            "{} is a symbolic link to a place outside the source: links are followed only within the source directory",
            shown.display()
        );
    }
    if !real.is_dir() {
        bail!("{} is not a directory", shown.display());
    }
    let mut out = Vec::new();
    for e in sorted_entries(&real, bases)? {
        if e.ft.is_dir() {
            continue;
        }
        let fshown = shown.join(&e.name);
        e.confined(&fshown)?;
        if !e.ft.is_file() {
            return Err(not_regular(&fshown, &e.ft));
        }
        out.push((e.name, e.real));
    }
    Ok(out)
}

/// `machines/*.json`, `boot/*.json` and `boot/assets/*` (docs/serve.md, "Machines and network
/// boot"), each counted in the generation id (an asset by its SHA-256).
fn read_machines(r: &mut Reader<'_>, root: &Path) -> Result<()> {
    use crate::source::selectors::MAX_FILE_BYTES;
    let small = |p: &Path| {
        read_regular(p, MAX_FILE_BYTES)?.ok_or_else(|| {
            anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::NotFound))
                .context(format!("reading {}", p.display()))
        })
    };
    for (name, path) in plain_files(root, "machines", r.bases)? {
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        let bytes = small(&path)?;
        r.field(b"machine");
        r.field(stem.as_bytes());
        r.field(&bytes);
        r.g.machines.machines.push((stem.to_string(), bytes));
    }
    for (name, path) in plain_files(root, "boot", r.bases)? {
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        if !valid_pool_name(stem) {
            bail!(
                "invalid boot profile name {name:?} in {}",
                root.join("boot").display()
            );
        }
        let bytes = small(&path)?;
        r.field(b"profile");
        r.field(stem.as_bytes());
        r.field(&bytes);
        r.g.machines.profiles.push((stem.to_string(), bytes));
    }
    let assets: Vec<(String, PathBuf)> = plain_files(root, "boot/assets", r.bases)?
        .into_iter()
        .filter(|(name, _)| crate::source::reading::valid_asset_name(name))
        .collect();
    // Assets are held in memory: their sizes are summed before a byte is read.
    let total: u64 = assets
        .iter()
        .map(|(_, p)| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    if total > crate::source::machines::MAX_ASSETS_TOTAL_BYTES {
        bail!(
            "{} holds {} MiB of assets, more than the {} MiB limit for boot assets held in memory",
            root.join("boot/assets").display(),
            total >> 20,
            crate::source::machines::MAX_ASSETS_TOTAL_BYTES >> 20
        );
    }
    for (name, path) in assets {
        let a = r.translations.assets.read(&path)?;
        r.field(b"asset");
        r.field(name.as_bytes());
        r.field(a.sha256.as_bytes());
        r.g.machines.assets.insert(name, a);
    }
    Ok(())
}

/// Parses, merges and validates every pool of a raw generation.
pub fn build(raw: RawGeneration) -> Result<Generation, LoadError> {
    let invalid = |error: String| LoadError::Invalid {
        id: raw.id.clone(),
        dir: raw.dir.clone(),
        error,
    };
    if !raw.butane_errors.is_empty() {
        return Err(invalid(raw.butane_errors.join("; ")));
    }
    let mut pools = BTreeMap::new();
    for (name, frags) in &raw.pools {
        let mut merged: Option<Config> = None;
        for (f, bytes) in frags {
            let parsed = config::parse(bytes).map_err(|r| {
                let msgs: Vec<String> = r.errors().map(redact_diag).collect();
                invalid(format!("pool {name}: {f}: {}", msgs.join("; ")))
            })?;
            for w in &parsed.warnings.diagnostics {
                log::debug!("pool {name}: {f}: {w}");
            }
            merged = Some(match merged {
                None => parsed.config,
                Some(m) => config::merge(&m, &parsed.config),
            });
        }
        let Some(cfg) = merged else {
            return Err(invalid(format!("pool {name}: no config")));
        };
        let report = config::check(&cfg);
        if report.has_errors() {
            let msgs: Vec<String> = report.errors().map(redact_diag).collect();
            return Err(invalid(format!(
                "pool {name}: merged config is invalid: {}",
                msgs.join("; ")
            )));
        }
        let pool = Pool::new(name, cfg).map_err(|e| invalid(format!("pool {name}: {e:#}")))?;
        pools.insert(name.clone(), Arc::new(pool));
    }
    let machines =
        crate::source::machines::build(&raw.machines, &pools, &raw.pools).map_err(invalid)?;
    let mut rollouts = BTreeMap::new();
    for (pool, bytes) in &raw.rollouts {
        if !pools.contains_key(pool) {
            return Err(invalid(format!(
                "rollout policy for pool {pool}, which has no config"
            )));
        }
        let p = rollout::Policy::parse(bytes)
            .map_err(|e| invalid(format!("pool {pool}: rollout policy: {e}")))?;
        rollouts.insert(pool.clone(), p);
    }
    Ok(Generation {
        id: raw.id,
        dir: raw.dir,
        pools,
        machines: Arc::new(machines),
        rollouts,
    })
}

/// Reads and builds the current generation of `dir` (translating every `.bu` file).
pub fn load(dir: &Path) -> Result<Generation, LoadError> {
    let raw = read(dir, &mut Translations::default()).map_err(LoadError::Read)?;
    build(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    use runtime::util::TestDir as Tmp;
    fn tmp(tag: &str) -> Tmp {
        Tmp::new(&format!("source-{tag}"))
    }
    fn put(p: &Path, s: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    }
    const C: &str = r#"{"ignition":{"version":"3.0.0"}}"#;

    #[test]
    fn layouts() {
        // Plain tree.
        let t = tmp("plain");
        put(&t.0.join("pools/worker.ign"), C);
        put(
            &t.0.join("pools/infra/b.ign"),
            r#"{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/b"}]}}"#,
        );
        put(
            &t.0.join("pools/infra/a.ign"),
            r#"{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/a"}]}}"#,
        );
        put(&t.0.join("pools/infra/notes.txt"), "x");
        put(&t.0.join("pools/.swp.ign"), "x");
        put(&t.0.join("tokens/..data/state.json"), "{}");
        let g = load(&t.0).unwrap();
        assert_eq!(g.pools.keys().collect::<Vec<_>>(), ["infra", "worker"]);
        let files: Vec<&str> = g.pools["infra"]
            .config
            .storage
            .files
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(files, ["/a", "/b"], "fragments merged in file-name order");
        let id = g.id.clone();
        assert_eq!(load(&t.0).unwrap().id, id, "same content, same id");

        // AtomicWriter volume: read from the resolved ..data target only.
        let v = tmp("atomic");
        put(&v.0.join("..2024_01/pools/worker.ign"), C);
        put(&v.0.join("..2023_12/pools/old.ign"), C);
        std::os::unix::fs::symlink("..2024_01", v.0.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/pools", v.0.join("pools")).unwrap();
        let g = load(&v.0).unwrap();
        assert_eq!(g.pools.keys().collect::<Vec<_>>(), ["worker"]);
        assert!(g.dir.ends_with("..2024_01"));

        // git-sync: the directory itself is a link.
        let gs = tmp("gitsync");
        put(&gs.0.join("wt-1/pools/master.ign"), C);
        std::os::unix::fs::symlink(gs.0.join("wt-1"), gs.0.join("current")).unwrap();
        let g = load(&gs.0.join("current")).unwrap();
        assert!(g.dir.ends_with("wt-1"));
        assert!(g.pools.contains_key("master"));
    }

    /// The race behind a once-flaky test, made deterministic: the writer swaps `..data` to a
    /// new generation and removes the old one exactly between our reading the link and
    /// resolving its target. The read must retry and return the new generation whole.
    #[test]
    fn generation_removed_between_readlink_and_resolve_is_retried() {
        let v = tmp("swap-race");
        let make_gen = |n: usize| {
            let d = v.0.join(format!("..g{n}"));
            for f in ["a", "b"] {
                put(&d.join(format!("pools/worker/{f}.ign")), &format!("{n}"));
            }
        };
        make_gen(0);
        std::os::unix::fs::symlink("..g0", v.0.join("..data")).unwrap();
        make_gen(1);
        let dir = v.0.clone();
        super::hooks::set_after_readlink(move || {
            let tmp = dir.join("..data_tmp");
            std::os::unix::fs::symlink("..g1", &tmp).unwrap();
            std::fs::rename(&tmp, dir.join("..data")).unwrap();
            std::fs::remove_dir_all(dir.join("..g0")).unwrap();
        });
        let g = read(&v.0, &mut Translations::default())
            .expect("read retries a generation removed mid-resolve");
        let frags = &g.pools["worker"];
        assert!(frags.iter().all(|(_, b)| b.as_slice() == b"1"), "{frags:?}");
        assert!(g.dir.ends_with("..g1"));
    }

    /// A writer swaps generations and reclaims the old directory as fast as it can while we
    /// read: every read must succeed and hold a single generation.
    #[test]
    fn reads_never_mix_generations_under_churn() {
        let v = tmp("churn");
        let write_gen = |n: usize| {
            let d = v.0.join(format!("..g{n}"));
            for f in ["a", "b", "c"] {
                put(&d.join(format!("pools/worker/{f}.ign")), &format!("{n}"));
            }
            let tmp = v.0.join("..data_tmp");
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(format!("..g{n}"), &tmp).unwrap();
            std::fs::rename(&tmp, v.0.join("..data")).unwrap();
            if n > 0 {
                std::fs::remove_dir_all(v.0.join(format!("..g{}", n - 1))).unwrap();
            }
        };
        write_gen(0);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let stop = stop.clone();
            let dir = v.0.clone();
            std::thread::spawn(move || {
                let mut n = 1;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) && n < 3000 {
                    let d = dir.join(format!("..g{n}"));
                    for f in ["a", "b", "c"] {
                        put(&d.join(format!("pools/worker/{f}.ign")), &format!("{n}"));
                    }
                    let tmp = dir.join("..data_tmp");
                    let _ = std::fs::remove_file(&tmp);
                    std::os::unix::fs::symlink(format!("..g{n}"), &tmp).unwrap();
                    std::fs::rename(&tmp, dir.join("..data")).unwrap();
                    std::fs::remove_dir_all(dir.join(format!("..g{}", n - 1))).unwrap();
                    n += 1;
                }
                n
            })
        };
        let mut ok = 0;
        let mut reads = 0;
        let mut gens = std::collections::BTreeSet::new();
        // At least 300 reads, and on until the writer (which may start late on a loaded
        // machine) has swapped at least once; bounded either way.
        while reads < 300 || (gens.len() < 2 && reads < 20_000) {
            reads += 1;
            match read(&v.0, &mut Translations::default()) {
                Ok(g) => {
                    let frags = &g.pools["worker"];
                    assert_eq!(frags.len(), 3);
                    assert!(
                        frags.iter().all(|(_, b)| *b == frags[0].1),
                        "mixed: {frags:?}"
                    );
                    gens.insert(frags[0].1.to_vec());
                    ok += 1;
                }
                Err(e) => assert!(format!("{e:#}").contains("kept changing"), "{e:#}"),
            }
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        writer.join().unwrap();
        assert!(ok * 6 > reads * 5, "only {ok} of {reads} reads succeeded");
        assert!(gens.len() > 1);
    }

    #[test]
    fn broken_generations() {
        let t = tmp("broken");
        put(&t.0.join("pools/worker.ign"), C);
        put(&t.0.join("pools/worker/a.ign"), C);
        assert!(
            matches!(load(&t.0), Err(LoadError::Read(_))),
            "ambiguous pool"
        );
        let t = tmp("broken2");
        put(
            &t.0.join("pools/worker.ign"),
            r#"{"ignition":{"version":"2.2.0"}}"#,
        );
        match load(&t.0) {
            Err(LoadError::Invalid { error, .. }) => assert!(error.contains("worker"), "{error}"),
            other => panic!("{other:?}"),
        }
        let t = tmp("broken3");
        std::fs::create_dir_all(t.0.join("pools/empty")).unwrap();
        assert!(load(&t.0).is_err(), "a pool directory without fragments");
        let t = tmp("broken4");
        assert!(
            matches!(load(&t.0), Err(LoadError::Read(_))),
            "no pools/ at all"
        );
    }

    /// N reads of an unchanged `.bu` pool translate it once; a changed local file or `.bu`
    /// once more each; the id follows the bytes read (local files included).
    #[test]
    fn translations_are_kept_by_content() {
        let t = tmp("translations");
        let bu = "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/m\n      contents:\n        local: m.txt\n";
        put(&t.0.join("pools/worker/a.bu"), bu);
        put(&t.0.join("pools/worker/m.txt"), "one");
        let mut tr = Translations::default();
        let first = read(&t.0, &mut tr).unwrap();
        for _ in 0..10 {
            assert_eq!(read(&t.0, &mut tr).unwrap().id, first.id);
        }
        assert_eq!(tr.count, 1, "ten more reads, no translation");
        put(&t.0.join("pools/worker/m.txt"), "two");
        let second = read(&t.0, &mut tr).unwrap();
        assert_ne!(second.id, first.id, "a local file counts in the id");
        assert!(
            String::from_utf8_lossy(&second.pools["worker"][0].1).contains("data:,two"),
            "{second:?}"
        );
        read(&t.0, &mut tr).unwrap();
        assert_eq!(tr.count, 2);
        put(
            &t.0.join("pools/worker/a.bu"),
            &bu.replace("/etc/m", "/etc/n"),
        );
        read(&t.0, &mut tr).unwrap();
        read(&t.0, &mut tr).unwrap();
        assert_eq!(tr.count, 3);
        assert_eq!(tr.entries.len(), 1, "the old translations are dropped");

        // AtomicWriter: a new generation directory with the same .bu and local file (another
        // pool changed) reuses the translation; a changed local file in it does not.
        let v = tmp("translations-atomic");
        let make_gen = |n: usize, local: &str, other: &str| {
            let d = v.0.join(format!("..g{n}"));
            put(&d.join("pools/worker/a.bu"), bu);
            put(&d.join("pools/worker/m.txt"), local);
            put(&d.join("pools/infra.ign"), other);
            let tmp = v.0.join("..data_tmp");
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(format!("..g{n}"), &tmp).unwrap();
            std::fs::rename(&tmp, v.0.join("..data")).unwrap();
        };
        let mut tr = Translations::default();
        make_gen(0, "one", C);
        let g0 = read(&v.0, &mut tr).unwrap();
        make_gen(1, "one", r#"{"ignition":{"version":"3.1.0"}}"#);
        let g1 = read(&v.0, &mut tr).unwrap();
        assert_ne!(g0.id, g1.id);
        assert_eq!(tr.count, 1, "same .bu and local file in a new directory");
        make_gen(2, "two", r#"{"ignition":{"version":"3.1.0"}}"#);
        let g2 = read(&v.0, &mut tr).unwrap();
        assert_eq!(tr.count, 2);
        assert!(String::from_utf8_lossy(&g2.pools["worker"][0].1).contains("data:,two"));
    }

    #[test]
    fn read_regular_refuses_what_is_not_a_regular_file() {
        let t = tmp("regular");
        let fifo = t.0.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = format!("{:#}", read_regular(&fifo, 10).unwrap_err());
        assert!(e.contains("FIFO") && e.contains("fifo"), "{e}");
        std::os::unix::fs::symlink("/dev/null", t.0.join("link")).unwrap();
        let e = format!("{:#}", read_regular(&t.0.join("link"), 10).unwrap_err());
        assert!(e.contains("symbolic link"), "{e}");
        put(&t.0.join("big"), "0123456789a");
        let e = format!("{:#}", read_regular(&t.0.join("big"), 10).unwrap_err());
        assert!(e.contains("larger than"), "{e}");
        assert_eq!(read_regular(&t.0.join("none"), 10).unwrap(), None);
    }

    #[test]
    fn redact_keeps_positions_and_reasons_only() {
        for (input, want) in [
            (
                "invalid JSON: unexpected character 'r'",
                "invalid JSON: unexpected character 'r'",
            ),
            (
                r#"unknown key "root:x:0:0" doesn't fit"#,
                r#"unknown key "…" doesn't fit"#,
            ),
            ("bad `secret` and 'secret'", "bad `…` and '…'"),
        ] {
            assert_eq!(redact(input), want);
        }
        let r = config::parse(
            br#"{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"rel/s3cret"}]}}"#,
        )
        .expect_err("invalid");
        let e = r.errors().map(redact_diag).collect::<Vec<_>>().join("; ");
        assert_eq!(
            e,
            "error at $.storage.files.0.path, line 1 col 61: path not absolute"
        );
        let r = config::parse(b"root:$6$s3cret:19000::").expect_err("invalid");
        let e = r.errors().map(redact_diag).collect::<Vec<_>>().join("; ");
        assert!(e.contains("line 1 col 1") && !e.contains("s3cret"), "{e}");
    }

    #[test]
    fn pool_names() {
        for ok in ["worker", "master", "infra-1", "a.b_c"] {
            assert!(valid_pool_name(ok), "{ok}");
        }
        for bad in [
            "",
            "..",
            ".x",
            "a/b",
            "../etc",
            "a%2fb",
            "a b",
            "-x",
            &"x".repeat(300),
        ] {
            assert!(!valid_pool_name(bad), "{bad}");
        }
    }
}
