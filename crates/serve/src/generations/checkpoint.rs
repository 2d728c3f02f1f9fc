//! The checkpoint directory (`--state-dir`, default `/var/lib/agent-serve`): what a restarted
//! server needs to go on serving when its source is broken or missing, shaped like a node's
//! config checkpoints (seed: node-config-status.txt). It is private to one server (each host
//! has its own; replicas share nothing writable) and never holds a token or the token key.
//!
//! ```text
//! STATE/                       0700, locked (flock on STATE/.lock) by the one server using it
//!   assigned.json              {format, generation, path, since}: the newest generation seen
//!   active.json                {format, generation, path, since, pools: {pool: config-hash}}
//!   lastKnownGood.json         the same shape, for lastKnownGood
//!   retained.json              {format, payloads: [{pool, config, lastEpoch}]}: old configs
//!                              that still-valid tokens name
//!   configs/<config-hash>.json the canonical config (newest spec version), content-addressed;
//!                              also a generation's machines (machine files, boot profiles,
//!                              asset hashes), named by the SHA-256 of that record
//! ```
//!
//! Every file is 0600 and written atomically (a temp file created 0600, written, fsynced, renamed
//! over the old one, then the directory fsynced), so a crash leaves the old or the new file,
//! never a mix. A record is only trusted whole: a file that is not valid JSON, has an unknown
//! `format`, names a config whose file is missing, or whose config file does not hash to its
//! name, is refused with an error naming it (logged and shown in `/status`) and the server goes
//! on without that record alone; the next checkpoint replaces it. Config files nothing refers to
//! are removed after each checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::status::GenRef;
use crate::files::{sync_dir, write_private};
use crate::source::Generation;
use crate::source::render::Pool;
use crate::tokens::state::Retained;
use spec::encoding::hex;

/// The record format this server writes and reads.
pub const FORMAT: u32 = 1;
/// Largest record file read back (the pools map of a generation).
pub const MAX_RECORD_BYTES: u64 = 4 << 20;
/// Largest config file read back: the largest config the agent itself accepts.
pub const MAX_CONFIG_BYTES: u64 = runtime::limits::DEFAULT_MAX_CONFIG_SIZE;
pub const ASSIGNED: &str = "assigned.json";
pub const ACTIVE: &str = "active.json";
pub const LAST_KNOWN_GOOD: &str = "lastKnownGood.json";
pub const RETAINED: &str = "retained.json";
pub const CONFIGS: &str = "configs";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AssignedRecord {
    format: u32,
    generation: String,
    path: String,
    since: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GenRecord {
    format: u32,
    generation: String,
    path: String,
    since: u64,
    /// pool → hex SHA-256 of its canonical config.
    pools: BTreeMap<String, String>,
    /// The generation's machine files, boot profiles and asset hashes
    /// ([`crate::source::machines::Saved`]), as `configs/<hash>.json`; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    machines: Option<String>,
    /// The pools' rollout policies (`crate::source::rollout`); absent when none has one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    rollouts: BTreeMap<String, crate::source::rollout::Policy>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RetainedEntry {
    pool: String,
    config: String,
    last_epoch: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RetainedRecord {
    format: u32,
    payloads: Vec<RetainedEntry>,
}

/// What a restarted server gets back.
#[derive(Debug, Default)]
pub struct Restored {
    pub assigned: Option<GenRef>,
    pub active: Option<(Arc<Generation>, GenRef)>,
    pub lkg: Option<(Arc<Generation>, GenRef)>,
    pub retained: Vec<Retained>,
    /// One line per refused record.
    pub errors: Vec<String>,
}

/// What a checkpoint records.
pub struct Snapshot<'a> {
    pub assigned: Option<&'a GenRef>,
    pub active: Option<(&'a Generation, &'a GenRef)>,
    pub lkg: Option<(&'a Generation, &'a GenRef)>,
    pub retained: Vec<Retained>,
}

/// A server's checkpoint directory, locked for its lifetime.
pub struct Checkpoint {
    pub dir: PathBuf,
    _lock: nix::fcntl::Flock<std::fs::File>,
    /// The bytes last written per record file (None: removed), to write only on change.
    written: Mutex<BTreeMap<&'static str, Option<Vec<u8>>>>,
    /// Config files known to match their names (checked or written by this process).
    good_configs: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Checkpoint({})", self.dir.display())
    }
}

/// Reads at most `max` bytes of the regular file `path`, never blocking (a FIFO, device or
/// link in the checkpoint directory is refused before a byte is read); None when it does
/// not exist.
fn read_bounded(path: &Path, max: u64) -> Result<Option<Vec<u8>>> {
    crate::source::read_regular(path, max)
}

fn valid_hash(h: &str) -> bool {
    h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl Checkpoint {
    /// Creates (0700) and locks the directory. Fails when another server holds it.
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        runtime::util::mkdir_private(dir)?;
        runtime::util::mkdir_private(&dir.join(CONFIGS))?;
        let lp = dir.join(".lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lp)
            .with_context(|| format!("opening {}", lp.display()))?;
        let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .with_context(|| {
                format!(
                    "locking {}: another agent serve uses this --state-dir (each server needs its own)",
                    lp.display()
                )
            })?;
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            _lock: lock,
            written: Mutex::new(BTreeMap::new()),
            good_configs: Mutex::new(BTreeSet::new()),
        })
    }

    fn record<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        let p = self.dir.join(name);
        let Some(b) = read_bounded(&p, MAX_RECORD_BYTES)? else {
            return Ok(None);
        };
        let v: serde_json::Value = serde_json::from_slice(&b)
            .with_context(|| format!("{} is not valid JSON", p.display()))?;
        let format = v.get("format").and_then(|f| f.as_u64());
        if format != Some(FORMAT as u64) {
            bail!(
                "{} has format {}, this server reads format {FORMAT}",
                p.display(),
                format.map_or("(none)".to_string(), |f| f.to_string())
            );
        }
        let r =
            serde_json::from_value(v).with_context(|| format!("{} is malformed", p.display()))?;
        Ok(Some(r))
    }

    /// The pool `name` with the config stored as `hash`, checked against its name.
    fn pool(
        &self,
        name: &str,
        hash: &str,
        cache: &mut BTreeMap<(String, String), Arc<Pool>>,
    ) -> Result<Arc<Pool>> {
        let key = (name.to_string(), hash.to_string());
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        if !crate::source::valid_pool_name(name) {
            bail!("invalid pool name {name:?}");
        }
        if !valid_hash(hash) {
            bail!("pool {name}: invalid config hash {hash:?}");
        }
        let (p, b) = self
            .named(hash)
            .with_context(|| format!("pool {name}: config file"))?;
        let parsed = spec::config::parse(&b).map_err(|r| {
            anyhow::anyhow!(
                "pool {name}: config file {}: {}",
                p.display(),
                r.errors()
                    .map(crate::source::redact_diag)
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })?;
        let pool = Pool::new(name, parsed.config)
            .with_context(|| format!("pool {name}: config file {}", p.display()))?;
        if pool.config_hash != hash {
            bail!(
                "pool {name}: config file {} does not re-render to its hash",
                p.display()
            );
        }
        let pool = Arc::new(pool);
        cache.insert(key, pool.clone());
        Ok(pool)
    }

    fn generation(
        &self,
        name: &'static str,
        cache: &mut BTreeMap<(String, String), Arc<Pool>>,
    ) -> Result<Option<(Arc<Generation>, GenRef)>> {
        let Some(r) = self.record::<GenRecord>(name)? else {
            return Ok(None);
        };
        let mut pools = BTreeMap::new();
        for (pool, hash) in &r.pools {
            let p = self
                .pool(pool, hash, cache)
                .with_context(|| format!("{}", self.dir.join(name).display()))?;
            pools.insert(pool.clone(), p);
        }
        let machines = match &r.machines {
            None => Default::default(),
            Some(hash) => {
                let shown = self.dir.join(name);
                let set = self
                    .machines(hash, &pools, Path::new(&r.path))
                    .with_context(|| format!("{}", shown.display()))?;
                Arc::new(set)
            }
        };
        let g = Generation {
            id: r.generation.clone(),
            dir: PathBuf::from(&r.path),
            pools,
            machines,
            rollouts: r.rollouts.clone(),
        };
        let gref = GenRef {
            generation: r.generation,
            path: r.path,
            since: r.since,
        };
        Ok(Some((Arc::new(g), gref)))
    }

    /// The file `configs/<hash>.json`, checked against its name: its path and bytes.
    fn named(&self, hash: &str) -> Result<(PathBuf, Vec<u8>)> {
        let p = self.dir.join(CONFIGS).join(format!("{hash}.json"));
        let b = read_bounded(&p, MAX_CONFIG_BYTES)?
            .with_context(|| format!("{} is missing", p.display()))?;
        if hex(&Sha256::digest(&b)) != hash {
            bail!("{} does not match its hash (corrupt)", p.display());
        }
        Ok((p, b))
    }

    /// The machine set saved as `hash`, with the assets still in the generation's directory
    /// (`dir/boot/assets/`) that hash as they did.
    fn machines(
        &self,
        hash: &str,
        pools: &BTreeMap<String, Arc<Pool>>,
        dir: &Path,
    ) -> Result<crate::source::machines::MachineSet> {
        if !valid_hash(hash) {
            bail!("invalid machines hash {hash:?}");
        }
        let (p, b) = self.named(hash).context("machines file")?;
        let saved: crate::source::machines::Saved = serde_json::from_slice(&b)
            .with_context(|| format!("machines file {} is malformed", p.display()))?;
        let (set, missing) =
            crate::source::machines::MachineSet::restore(&saved, pools, &dir.join("boot/assets"))
                .with_context(|| format!("machines file {}", p.display()))?;
        if !missing.is_empty() {
            log::warn!(
                "checkpoint: boot assets no longer in {}/boot/assets (not served until the source loads): {}",
                dir.display(),
                missing.join(", ")
            );
        }
        Ok(set)
    }

    /// Reads everything back; each record that cannot be trusted is left out and named in
    /// [`Restored::errors`].
    pub fn load(&self) -> Restored {
        let mut out = Restored::default();
        let mut cache = BTreeMap::new();
        let refuse = |e: anyhow::Error| format!("checkpoint refused: {e:#}");
        match self.record::<AssignedRecord>(ASSIGNED) {
            Ok(r) => {
                out.assigned = r.map(|r| GenRef {
                    generation: r.generation,
                    path: r.path,
                    since: r.since,
                })
            }
            Err(e) => out.errors.push(refuse(e)),
        }
        match self.generation(ACTIVE, &mut cache) {
            Ok(g) => out.active = g,
            Err(e) => out.errors.push(refuse(e)),
        }
        match self.generation(LAST_KNOWN_GOOD, &mut cache) {
            Ok(g) => out.lkg = g,
            Err(e) => out.errors.push(refuse(e)),
        }
        match self.record::<RetainedRecord>(RETAINED) {
            Ok(Some(r)) => {
                for e in r.payloads {
                    match self.pool(&e.pool, &e.config, &mut cache) {
                        Ok(p) => out.retained.push(Retained {
                            pool: p,
                            last_epoch: e.last_epoch,
                        }),
                        Err(err) => out.errors.push(refuse(
                            err.context(format!("{}", self.dir.join(RETAINED).display())),
                        )),
                    }
                }
            }
            Ok(None) => {}
            Err(e) => out.errors.push(refuse(e)),
        }
        out
    }

    /// Writes what changed since the last save, then removes config files nothing refers to.
    pub fn save(&self, s: &Snapshot) -> Result<()> {
        runtime::util::mkdir_private(&self.dir)?;
        let cdir = self.dir.join(CONFIGS);
        runtime::util::mkdir_private(&cdir)?;
        let mut wanted: BTreeMap<String, Arc<Pool>> = BTreeMap::new();
        // Machine sets by the hash of their record.
        let mut blobs: BTreeMap<&String, &[u8]> = BTreeMap::new();
        for (g, _) in s.active.iter().chain(s.lkg.iter()) {
            if !g.machines.is_empty() {
                let (hash, b) = g.machines.record();
                blobs.insert(hash, b);
            }
        }
        for (g, _) in s.active.iter().chain(s.lkg.iter()) {
            for p in g.pools.values() {
                wanted.insert(p.config_hash.clone(), p.clone());
            }
        }
        for r in &s.retained {
            wanted.insert(r.pool.config_hash.clone(), r.pool.clone());
        }
        let mut dirty = false;
        let mut cdirty = false;
        let mut good = self.good_configs.lock().unwrap_or_else(|e| e.into_inner());
        good.retain(|h| wanted.contains_key(h) || blobs.contains_key(h));
        // Each file `configs/<hash>.json` wanted (a config, a generation's machines): a file
        // of that name may be left from before, even corrupt: trust it only when it hashes to
        // its name, else write it.
        enum Made<'a> {
            Bytes(&'a [u8]),
            Config(&'a Pool),
        }
        let files = blobs
            .iter()
            .map(|(h, b)| (*h, Made::Bytes(b)))
            .chain(wanted.iter().map(|(h, p)| (h, Made::Config(p))));
        for (hash, bytes) in files {
            if good.contains(hash) {
                continue;
            }
            let p = cdir.join(format!("{hash}.json"));
            let intact = read_bounded(&p, MAX_CONFIG_BYTES)
                .ok()
                .flatten()
                .is_some_and(|b| &hex(&Sha256::digest(&b)) == hash);
            if !intact {
                match bytes {
                    Made::Bytes(b) => write_private(&p, b)?,
                    Made::Config(pool) => write_private(&p, &pool.canonical()?)?,
                }
                cdirty = true;
            }
            good.insert(hash.clone());
        }
        drop(good);
        if cdirty {
            sync_dir(&cdir)?;
        }
        let records = records(s)?;
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        for (name, bytes) in records {
            if written.get(name) == Some(&bytes) {
                continue;
            }
            let p = self.dir.join(name);
            match &bytes {
                Some(b) => write_private(&p, b)?,
                None => match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e).with_context(|| format!("removing {}", p.display())),
                },
            }
            dirty = true;
            written.insert(name, bytes);
        }
        if dirty {
            sync_dir(&self.dir)?;
        }
        if dirty || cdirty {
            self.prune(
                &wanted
                    .keys()
                    .chain(blobs.keys().copied())
                    .cloned()
                    .collect(),
            )?;
        }
        Ok(())
    }

    /// Removes config files (and stale temp files) nothing refers to.
    fn prune(&self, keep: &BTreeSet<String>) -> Result<()> {
        let cdir = self.dir.join(CONFIGS);
        let mut removed = false;
        for e in std::fs::read_dir(&cdir).with_context(|| format!("listing {}", cdir.display()))? {
            let e = e.with_context(|| format!("listing {}", cdir.display()))?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            let stem = name.strip_suffix(".json").unwrap_or("");
            if !keep.contains(stem) {
                std::fs::remove_file(e.path())
                    .with_context(|| format!("removing {}", e.path().display()))?;
                removed = true;
            }
        }
        if removed {
            sync_dir(&cdir)?;
        }
        Ok(())
    }
}

fn ser<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    let mut b = serde_json::to_vec_pretty(v).context("serializing a checkpoint record")?;
    b.push(b'\n');
    Ok(b)
}

/// The checkpoint's records by file name (None: the file goes).
type Records = [(&'static str, Option<Vec<u8>>); 4];

/// The records of `s`.
fn records(s: &Snapshot) -> Result<Records> {
    Ok([
        (
            ASSIGNED,
            s.assigned
                .map(|a| {
                    ser(&AssignedRecord {
                        format: FORMAT,
                        generation: a.generation.clone(),
                        path: a.path.clone(),
                        since: a.since,
                    })
                })
                .transpose()?,
        ),
        (
            ACTIVE,
            s.active
                .map(|(g, r)| gen_record(g, r).and_then(|r| ser(&r)))
                .transpose()?,
        ),
        (
            LAST_KNOWN_GOOD,
            s.lkg
                .map(|(g, r)| gen_record(g, r).and_then(|r| ser(&r)))
                .transpose()?,
        ),
        (
            RETAINED,
            Some(ser(&RetainedRecord {
                format: FORMAT,
                payloads: s
                    .retained
                    .iter()
                    .map(|r| RetainedEntry {
                        pool: r.pool.name.clone(),
                        config: r.pool.config_hash.clone(),
                        last_epoch: r.last_epoch,
                    })
                    .collect(),
            })?),
        ),
    ])
}

/// An active or lastKnownGood generation's record.
fn gen_record(g: &Generation, r: &GenRef) -> Result<GenRecord> {
    Ok(GenRecord {
        machines: (!g.machines.is_empty()).then(|| g.machines.record().0.clone()),
        rollouts: g.rollouts.clone(),
        format: FORMAT,
        generation: r.generation.clone(),
        path: r.path.clone(),
        since: r.since,
        pools: g
            .pools
            .iter()
            .map(|(n, p)| (n.clone(), p.config_hash.clone()))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    use runtime::util::TestDir;

    /// A path for a checkpoint directory that does not exist yet (open creates it, 0700),
    /// inside a test directory removed on drop.
    struct Tmp(PathBuf, #[allow(dead_code)] /* kept for its Drop */ TestDir);
    fn tmp(tag: &str) -> Tmp {
        let d = TestDir::new(&format!("ckpt-{tag}"));
        Tmp(d.0.join("checkpoint"), d)
    }

    fn pool(name: &str, marker: &str) -> Arc<Pool> {
        let c = spec::config::parse(
            format!(
                r#"{{"ignition":{{"version":"3.0.0"}},"storage":{{"files":[{{"path":"/m","contents":{{"source":"data:,{marker}"}}}}]}}}}"#
            )
            .as_bytes(),
        )
        .unwrap()
        .config;
        Arc::new(Pool::new(name, c).unwrap())
    }

    fn generation(id: &str, pools: &[Arc<Pool>]) -> (Generation, GenRef) {
        (
            Generation {
                id: id.into(),
                dir: format!("/src/..{id}").into(),
                pools: pools.iter().map(|p| (p.name.clone(), p.clone())).collect(),
                machines: Default::default(),
                rollouts: Default::default(),
            },
            GenRef {
                generation: id.into(),
                path: format!("/src/..{id}"),
                since: 100,
            },
        )
    }

    #[test]
    fn round_trip_modes_prune_and_corruption() {
        let t = tmp("rt");
        let c = Checkpoint::open(&t.0).unwrap();
        assert!(
            Checkpoint::open(&t.0).is_err(),
            "a second server is refused"
        );
        let (w1, w2, m1) = (
            pool("worker", "1"),
            pool("worker", "2"),
            pool("master", "m"),
        );
        let (ga, ra) = generation("a", &[w2.clone(), m1.clone()]);
        let (gl, rl) = generation("l", &[w1.clone(), m1.clone()]);
        c.save(&Snapshot {
            assigned: Some(&ra),
            active: Some((&ga, &ra)),
            lkg: Some((&gl, &rl)),
            retained: vec![Retained {
                pool: w1.clone(),
                last_epoch: 7,
            }],
        })
        .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&t.0), 0o700);
        for f in [ASSIGNED, ACTIVE, LAST_KNOWN_GOOD, RETAINED] {
            assert_eq!(mode(&t.0.join(f)), 0o600, "{f}");
        }
        let blobs: Vec<_> = std::fs::read_dir(t.0.join(CONFIGS)).unwrap().collect();
        assert_eq!(blobs.len(), 3);
        for b in blobs {
            assert_eq!(mode(&b.unwrap().path()), 0o600);
        }
        let r = c.load();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let (a, aref) = r.active.unwrap();
        assert_eq!(aref, ra);
        assert_eq!(a.pools["worker"].config_hash, w2.config_hash);
        // Byte-identical payloads after the round trip.
        assert_eq!(
            a.pools["worker"].by_minor[0].as_ref().unwrap().body,
            w2.by_minor[0].as_ref().unwrap().body
        );
        assert_eq!(r.lkg.unwrap().0.pools["worker"].config_hash, w1.config_hash);
        assert_eq!(r.retained.len(), 1);
        assert_eq!(r.retained[0].last_epoch, 7);

        // lastKnownGood reset and nothing retained: its config file is pruned.
        c.save(&Snapshot {
            assigned: Some(&ra),
            active: Some((&ga, &ra)),
            lkg: None,
            retained: vec![],
        })
        .unwrap();
        assert!(!t.0.join(LAST_KNOWN_GOOD).exists());
        assert!(
            !t.0.join(CONFIGS)
                .join(format!("{}.json", w1.config_hash))
                .exists()
        );

        // Corruption: a record that is not JSON, and a config file that does not match its
        // hash. Each is refused alone.
        std::fs::write(t.0.join(ASSIGNED), "{garbage").unwrap();
        let r = c.load();
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        assert!(
            r.errors[0].contains("assigned.json is not valid JSON"),
            "{:?}",
            r.errors
        );
        assert!(r.active.is_some());
        std::fs::write(
            t.0.join(CONFIGS).join(format!("{}.json", w2.config_hash)),
            "{}",
        )
        .unwrap();
        let r = c.load();
        assert!(r.active.is_none());
        assert!(
            r.errors
                .iter()
                .any(|e| e.contains("does not match its hash")),
            "{:?}",
            r.errors
        );
        std::fs::write(t.0.join(ACTIVE), r#"{"format":2}"#).unwrap();
        let r = c.load();
        assert!(
            r.errors.iter().any(|e| e.contains("format 2")),
            "{:?}",
            r.errors
        );
    }
}
