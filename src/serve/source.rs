//! The config source: a directory holding `pools/<pool>.ign` (one config) or
//! `pools/<pool>/*.ign` (fragments merged in file-name order).
//!
//! Butane sources are welcome too: `pools/<pool>.bu`, and `.bu` fragments mixed with `.ign`
//! ones in `pools/<pool>/`. Each is translated while the generation is read, with the
//! directory it is in as the files dir (symlinks included, nothing outside it is read), so the
//! local files it embeds belong to the same generation and count in its id. A Butane error
//! makes the generation invalid, like any other error.
//!
//! The directory may be a plain tree, a Kubernetes AtomicWriter volume (`..data` → `..<stamp>`
//! swapped by rename(2)) or a git-sync link (the directory itself is a symlink that is swapped).
//! A generation is read whole from the directory the link pointed to when we resolved it once,
//! so two generations are never mixed; when that directory vanishes mid-read (the writer
//! reclaimed it) we resolve again and start over. Names starting with `..` are never content.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};

use super::render::Pool;
use crate::config::{self, Config};

/// How often a vanished or replaced directory is re-resolved before giving up.
const VANISH_RETRIES: usize = 8;

/// A validated generation of the source, ready to serve.
#[derive(Debug)]
pub struct Generation {
    /// Content hash of every pool file (short hex): equal on every replica for equal input.
    pub id: String,
    /// The resolved directory it was read from.
    pub dir: PathBuf,
    pub pools: BTreeMap<String, Arc<Pool>>,
}

/// The raw bytes of a generation, before validation.
#[derive(Debug, Default)]
pub struct RawGeneration {
    pub id: String,
    pub dir: PathBuf,
    /// pool → fragments (file name, bytes) in file-name order; a Butane fragment's bytes
    /// are its Ignition translation.
    pub pools: BTreeMap<String, Vec<(String, Vec<u8>)>>,
    /// Butane fragments that did not translate: "pool: file: errors".
    pub butane_errors: Vec<String>,
}

fn is_source(name: &str) -> bool {
    name.ends_with(".ign") || name.ends_with(".bu")
}

/// A fragment's Ignition bytes: `.ign` as read, `.bu` translated with `files_dir` (the
/// directory the file is in) as its confined files dir.
fn fragment(
    g: &mut RawGeneration,
    pool: &str,
    name: &str,
    bytes: Vec<u8>,
    files_dir: &Path,
) -> Vec<u8> {
    if !name.ends_with(".bu") {
        return bytes;
    }
    let files = crate::butane_files::DirFiles {
        root: files_dir.to_path_buf(),
        confine_symlinks: true,
    };
    let opts = butane::Options {
        files_dir: Some(&files),
        max_size: usize::try_from(crate::limits::DEFAULT_MAX_CONFIG_SIZE).unwrap_or(usize::MAX),
        ..Default::default()
    };
    match butane::translate(&bytes, &opts) {
        Ok(out) => {
            for w in &out.report.diags {
                log::debug!("pool {pool}: {name}: {w}");
            }
            out.json
        }
        Err(report) => {
            let msgs: Vec<String> = report.diags.iter().map(|d| d.to_string()).collect();
            let msg = format!("pool {pool}: {name}: {}", msgs.join("; "));
            g.butane_errors.push(msg.clone());
            msg.into_bytes()
        }
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

/// Whether `name` is a usable pool name (also keeps request paths inside `pools/`).
pub fn valid_pool_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 253
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
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
/// including between reading the `..data` link and resolving its target.
pub fn read(dir: &Path) -> Result<RawGeneration> {
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
        let res = read_from(&root);
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

fn sorted_entries(dir: &Path) -> Result<Vec<(String, std::fs::FileType, PathBuf)>> {
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
        // Follow symlinks (AtomicWriter's user-visible names are links into `..data`).
        let ft = std::fs::metadata(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .file_type();
        out.push((name.to_string(), ft, path));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn read_from(root: &Path) -> Result<RawGeneration> {
    let pools_dir = root.join("pools");
    let mut g = RawGeneration {
        dir: root.to_path_buf(),
        ..Default::default()
    };
    for (name, ft, path) in sorted_entries(&pools_dir)? {
        if ft.is_dir() {
            if !valid_pool_name(&name) {
                bail!(
                    "invalid pool directory name {name:?} in {}",
                    pools_dir.display()
                );
            }
            let mut frags = Vec::new();
            for (f, fft, fpath) in sorted_entries(&path)? {
                if !fft.is_file() || !is_source(&f) {
                    continue;
                }
                let b = std::fs::read(&fpath)
                    .with_context(|| format!("reading {}", fpath.display()))?;
                let b = fragment(&mut g, &name, &f, b, &path);
                frags.push((f, b));
            }
            if frags.is_empty() {
                bail!(
                    "pool directory {} holds no .ign or .bu fragments",
                    path.display()
                );
            }
            if g.pools.insert(name.clone(), frags).is_some() {
                bail!("pool {name:?} is given both as {name}.ign and as {name}/");
            }
        } else if ft.is_file() {
            let Some(pool) = name
                .strip_suffix(".ign")
                .or_else(|| name.strip_suffix(".bu"))
            else {
                continue;
            };
            if !valid_pool_name(pool) {
                bail!("invalid pool file name {name:?} in {}", pools_dir.display());
            }
            let b = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let b = fragment(&mut g, pool, &name, b, &pools_dir);
            if g.pools
                .insert(pool.to_string(), vec![(name.clone(), b)])
                .is_some()
            {
                bail!("pool {pool:?} is given twice ({pool}.ign, {pool}.bu or {pool}/)");
            }
        }
    }
    let mut h = Sha256::new();
    for (pool, frags) in &g.pools {
        h.update((pool.len() as u64).to_le_bytes());
        h.update(pool.as_bytes());
        for (f, b) in frags {
            h.update((f.len() as u64).to_le_bytes());
            h.update(f.as_bytes());
            h.update((b.len() as u64).to_le_bytes());
            h.update(b);
        }
    }
    g.id = crate::encoding::hex(&h.finalize()[..8]);
    Ok(g)
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
                let msgs: Vec<String> = r.errors().map(|d| d.to_string()).collect();
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
            let msgs: Vec<String> = report.errors().map(|d| d.to_string()).collect();
            return Err(invalid(format!(
                "pool {name}: merged config is invalid: {}",
                msgs.join("; ")
            )));
        }
        let pool = Pool::new(name, cfg).map_err(|e| invalid(format!("pool {name}: {e:#}")))?;
        pools.insert(name.clone(), Arc::new(pool));
    }
    Ok(Generation {
        id: raw.id,
        dir: raw.dir,
        pools,
    })
}

/// Reads and builds the current generation of `dir`.
pub fn load(dir: &Path) -> Result<Generation, LoadError> {
    let raw = read(dir).map_err(LoadError::Read)?;
    build(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::TestDir as Tmp;
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
        let g = read(&v.0).expect("read retries a generation removed mid-resolve");
        let frags = &g.pools["worker"];
        assert!(frags.iter().all(|(_, b)| b == b"1"), "{frags:?}");
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
            match read(&v.0) {
                Ok(g) => {
                    let frags = &g.pools["worker"];
                    assert_eq!(frags.len(), 3);
                    assert!(
                        frags.iter().all(|(_, b)| *b == frags[0].1),
                        "mixed: {frags:?}"
                    );
                    gens.insert(frags[0].1.clone());
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
