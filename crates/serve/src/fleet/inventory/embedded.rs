//! The embedded store: one redb file (`<state-dir>/inventory.db`).
//!
//! Tables: `machines` (machine id → the record as JSON), `details` (`<machine id>/<report
//! id>` → the report's changes and log tail as JSON; none for a report that changed nothing
//! and logged nothing, read back as the empty details), `boot_tokens`, and `meta` (the
//! number of machine records, changed in the transaction that adds one: `--max-machines`;
//! and the inventory's id). A batch of reports is recorded in one write transaction (redb
//! runs one at a time; the server's one writer hands it whatever queued meanwhile,
//! `super::batch`), committed with redb's default durability: the commit returns after
//! fsync, and redb's copy-on-write pages with a checksummed commit slot mean a crash at any
//! point leaves the last committed transaction intact. `record_batch` returns after its
//! batch's transaction committed.
//!
//! **After a failure** (a write that fails, the disk full): redb fails every later
//! operation until the database is closed, so the store closes it and opens it again (redb
//! repairs it to its last commit) before the next transaction, at most once every
//! [`REOPEN_EVERY`]; until then operations fail at once. The store is down
//! ([`super::health`]) from the failure until a write commits again.
//!
//! **The marker** (`inventory.id` beside the file): the inventory's id (also in `meta`) and
//! when it was created, written when the store creates the file. A missing or empty file
//! where the marker says an inventory was is refused (a new, empty inventory would make
//! every machine it knew install again), and so is a file holding another inventory, unless
//! `--inventory-reset`; a brand-new state directory (no marker, no file) gets a new
//! inventory. A file from before markers were written gets one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition, WriteTransaction,
};

use super::batch::Commits;
use super::health::Health;
use super::model::{self, Applied, Detail, Filter, Machine, Origin, Report};
use super::recent::Recent;
use super::store::{
    BootToken, BootTokens, Full, Recorded, Records, Rollout, Rollouts, Spend, Store,
    TOKEN_PRUNE_EVERY,
};

const MACHINES: TableDefinition<&str, &[u8]> = TableDefinition::new("machines");
const DETAILS: TableDefinition<&str, &[u8]> = TableDefinition::new("details");
/// One-time network-boot tokens: SHA-256 of the token (hex) → [`BootToken`] as JSON.
const BOOT_TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("boot_tokens");
/// Pool → its rollout record (JSON).
const ROLLOUTS: TableDefinition<&str, &[u8]> = TableDefinition::new("rollouts");
/// Counters: [`COUNT`] → the number of entries of `machines` (`--max-machines` is checked
/// against it), changed in the transaction that adds a record; [`ID`] → the inventory's id.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const COUNT: &str = "machines";
const ID: &str = "id";

/// The flag that takes a missing, empty or other inventory file as it is.
pub const RESET_FLAG: &str = "--inventory-reset";

/// How often a store that failed is opened again at most.
pub const REOPEN_EVERY: Duration = Duration::from_secs(1);
/// How long opening again waits for the transactions in progress to end.
const REOPEN_WAIT: Duration = Duration::from_secs(10);

pub struct Embedded {
    db: Db,
    path: PathBuf,
    /// `--max-machines`.
    max_machines: u64,
    /// The records written last, decoded (`commit_batch`); its lock is held across every
    /// write transaction that changes a record.
    recent: Mutex<Recent<Machine>>,
    /// When boot tokens past their time were last forgotten (seconds; see `put_boot_token`).
    tokens_pruned: std::sync::atomic::AtomicU64,
}

fn detail_key(machine: &str, report: &str) -> String {
    format!("{machine}/{report}")
}

/// The redb database, closed and opened again after a failure (module docs). Transactions
/// are begun through it and hold its lock (shared) until they end, so it is never closed
/// under one.
struct Db {
    path: PathBuf,
    /// None: closed after a failure and not opened again (yet).
    db: RwLock<Option<Database>>,
    /// The inventory's id: the file opened again must hold the same.
    id: u64,
    /// A redb operation failed: close and open again before the next transaction.
    broken: AtomicBool,
    reopen: Mutex<Reopen>,
    health: Health,
}

#[derive(Default)]
struct Reopen {
    /// When the database was last opened again, or tried.
    tried: Option<Instant>,
    /// Why it is broken: the failure, or why opening it again failed.
    why: Option<String>,
}

/// A redb error the store has counted as a failure already (an error that is not one of
/// these, but has a redb error in its chain, is counted by [`Db::seen`]).
#[derive(Debug)]
struct Counted(redb::Error);

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Counted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0)
    }
}

fn is_redb(e: &(dyn std::error::Error + 'static)) -> bool {
    e.is::<redb::Error>()
        || e.is::<redb::StorageError>()
        || e.is::<redb::TransactionError>()
        || e.is::<redb::CommitError>()
        || e.is::<redb::TableError>()
        || e.is::<redb::DatabaseError>()
}

/// A read transaction, holding the database open.
struct ReadTx<'a> {
    tx: ReadTransaction,
    _open: RwLockReadGuard<'a, Option<Database>>,
}

impl std::ops::Deref for ReadTx<'_> {
    type Target = ReadTransaction;
    fn deref(&self) -> &ReadTransaction {
        &self.tx
    }
}

/// A write transaction, holding the database open; its commit is a success or a failure
/// of the store.
struct WriteTx<'a> {
    tx: WriteTransaction,
    db: &'a Db,
    _open: RwLockReadGuard<'a, Option<Database>>,
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = WriteTransaction;
    fn deref(&self) -> &WriteTransaction {
        &self.tx
    }
}

impl WriteTx<'_> {
    fn commit(self) -> Result<()> {
        match self.tx.commit() {
            Ok(()) => {
                self.db.health.up();
                Ok(())
            }
            Err(e) => Err(self.db.failed(e.into())),
        }
    }
}

impl Db {
    fn lock(&self) -> RwLockReadGuard<'_, Option<Database>> {
        if self.broken.load(Ordering::Acquire) {
            self.reopen();
        }
        self.db.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open database, or why there is none.
    fn open<'a>(
        &self,
        g: &'a RwLockReadGuard<'_, Option<Database>>,
    ) -> Result<&'a Database, anyhow::Error> {
        match g.as_ref() {
            Some(db) if !self.broken.load(Ordering::Acquire) => Ok(db),
            _ => {
                let why = self
                    .reopen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .why
                    .clone()
                    .unwrap_or_default();
                Err(anyhow!(
                    "it failed and is opened again at most every {} s, not yet: {why}",
                    REOPEN_EVERY.as_secs()
                ))
            }
        }
    }

    fn begin_read(&self) -> Result<ReadTx<'_>> {
        let g = self.lock();
        let tx = match self.open(&g)?.begin_read() {
            Ok(tx) => tx,
            Err(e) => return Err(self.failed(e.into())),
        };
        Ok(ReadTx { tx, _open: g })
    }

    fn begin_write(&self) -> Result<WriteTx<'_>> {
        let g = self.lock();
        let tx = match self.open(&g)?.begin_write() {
            Ok(tx) => tx,
            Err(e) => return Err(self.failed(e.into())),
        };
        Ok(WriteTx {
            tx,
            db: self,
            _open: g,
        })
    }

    /// Counts the failure `e`: the store is down, and the database is opened again before
    /// the next transaction.
    fn failed(&self, e: redb::Error) -> anyhow::Error {
        let e = anyhow::Error::new(Counted(e));
        self.broken.store(true, Ordering::Release);
        self.reopen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .why = Some(format!("{e:#}"));
        self.health.down(
            &anyhow!("{e:#}").context(format!("the inventory store {}", self.path.display())),
        );
        e
    }

    /// `r`, its error counted as a failure when it is redb's and not counted yet.
    fn seen<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r
            && !e.chain().any(|c| c.is::<Counted>())
            && e.chain().any(is_redb)
        {
            self.broken.store(true, Ordering::Release);
            self.reopen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .why = Some(format!("{e:#}"));
            self.health.down(e);
        }
        r
    }

    /// Closes the database and opens it again (redb repairs it), unless that was tried in
    /// the last [`REOPEN_EVERY`], another thread is at it, or transactions in progress do
    /// not end within [`REOPEN_WAIT`]. Never waits for a lock the caller may hold: the
    /// database's is tried, not waited for.
    fn reopen(&self) {
        let Ok(mut r) = self.reopen.try_lock() else {
            return;
        };
        if r.tried.is_some_and(|t| t.elapsed() < REOPEN_EVERY) {
            return;
        }
        r.tried = Some(Instant::now());
        let deadline = Instant::now() + REOPEN_WAIT;
        let mut g = loop {
            match self.db.try_write() {
                Ok(g) => break g,
                Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    log::warn!(
                        "the inventory store {} failed; transactions still in progress after {} s: not opened again yet",
                        self.path.display(),
                        REOPEN_WAIT.as_secs()
                    );
                    return;
                }
            }
        };
        if !self.broken.load(Ordering::Acquire) {
            return;
        }
        if let Some(old) = g.take()
            && let Err(e) = old.close()
        {
            // A failed one says so again as it closes.
            log::debug!("closing the inventory store {}: {e}", self.path.display());
        }
        match open_again(&self.path, self.id) {
            Ok(db) => {
                *g = Some(db);
                self.broken.store(false, Ordering::Release);
                log::warn!(
                    "the inventory store {} failed: closed and opened again (repaired to its last commit)",
                    self.path.display()
                );
            }
            Err(e) => {
                let e = e.context(format!(
                    "opening the inventory store {} again after a failure",
                    self.path.display()
                ));
                r.why = Some(format!("{e:#}"));
                self.health.down(&e);
            }
        }
    }
}

/// The marker beside the store's file (module docs): `inventory.id` for `inventory.db`.
pub fn marker_path(path: &Path) -> PathBuf {
    path.with_extension("id")
}

/// What the marker holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Marker {
    format: u32,
    /// The inventory's id (16 hex digits; `meta` holds it as a number).
    id: String,
    /// When the inventory was created (seconds since the Unix epoch).
    created: u64,
}

const MARKER_FORMAT: u32 = 1;

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A new inventory id: 64 random bits (never 0).
fn new_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut b = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_ok();
    let mut id = u64::from_le_bytes(b);
    if !random {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(now_secs());
        h.write_u32(std::process::id());
        id = h.finish();
    }
    id.max(1)
}

/// The marker at `p`, if there is one; one that cannot be read is an error (with `reset`:
/// ignored, it is written again).
fn read_marker(p: &Path, reset: bool) -> Result<Option<Marker>> {
    let bad = |why: String| {
        anyhow!(
            "{} is not an inventory marker ({why}): delete it, or start with {RESET_FLAG}, to take the inventory file beside it as it is",
            p.display()
        )
    };
    let got = match crate::source::reading::read_regular(p, 4096) {
        Ok(Some(b)) => serde_json::from_slice::<Marker>(&b)
            .map_err(|e| bad(e.to_string()))
            .and_then(|m| {
                if m.format != MARKER_FORMAT || u64::from_str_radix(&m.id, 16).is_err() {
                    Err(bad(format!(
                        "format {}, id {:?}; this server writes format {MARKER_FORMAT}",
                        m.format, m.id
                    )))
                } else {
                    Ok(Some(m))
                }
            }),
        Ok(None) => Ok(None),
        Err(e) => Err(bad(format!("{e:#}"))),
    };
    match got {
        Err(e) if reset => {
            log::warn!("{e:#}: {RESET_FLAG} given, it is written again");
            Ok(None)
        }
        other => other,
    }
}

fn write_marker(p: &Path, id: u64) -> Result<()> {
    let m = Marker {
        format: MARKER_FORMAT,
        id: format!("{id:016x}"),
        created: now_secs(),
    };
    let mut b = serde_json::to_vec(&m)?;
    b.push(b'\n');
    crate::files::write_private(p, &b)?;
    crate::files::sync_dir(p.parent().unwrap_or(Path::new(".")))
}

/// Why a missing or empty file is not taken as a new inventory (module docs).
fn lost(path: &Path, marker: &Path, m: &Marker, len: Option<u64>) -> anyhow::Error {
    anyhow!(
        "{} is {}, but {} says this server's inventory {} (created {}) was there: it is not \
         taken as a new, empty inventory, in which every machine it knew would install again. \
         Restore {} from a backup, or start once with {RESET_FLAG} (or delete {}) to begin a \
         new, empty inventory",
        path.display(),
        if len.is_none() {
            "missing"
        } else {
            "empty (0 bytes)"
        },
        marker.display(),
        m.id,
        runtime::util::rfc3339(m.created),
        path.display(),
        marker.display()
    )
}

/// The size of `path` (None: it does not exist).
fn file_len(path: &Path) -> Result<Option<u64>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Opens the file of inventory `id` again after a failure: it must still be there, not
/// empty, and hold the same inventory.
fn open_again(path: &Path, id: u64) -> Result<Database> {
    let marker = marker_path(path);
    let m = Marker {
        format: MARKER_FORMAT,
        id: format!("{id:016x}"),
        created: 0,
    };
    let len = file_len(path)?;
    if len.unwrap_or(0) == 0 {
        return Err(lost(path, &marker, &m, len));
    }
    let db = Database::open(path).with_context(|| format!("opening {}", path.display()))?;
    let got = db
        .begin_read()
        .map_err(redb::Error::from)
        .and_then(|tx| match tx.open_table(META) {
            Ok(t) => Ok(t.get(ID)?.map(|v| v.value())),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
            Err(e) => Err(e.into()),
        })
        .with_context(|| format!("reading {}", path.display()))?;
    if got != Some(id) {
        bail!(
            "{} now holds inventory {}, not {id:016x}, the one this server had open",
            path.display(),
            got.map_or("(none)".to_string(), |g| format!("{g:016x}"))
        );
    }
    Ok(db)
}

impl Embedded {
    /// Opens (or creates) the store at `path` with the default `--max-machines`. Only one
    /// process may have it open.
    pub fn open(path: &Path) -> Result<Embedded> {
        Embedded::open_with(path, super::store::DEFAULT_MAX_MACHINES)
    }

    /// Opens (or creates) the store at `path`, holding `max_machines` records at most.
    pub fn open_with(path: &Path, max_machines: u64) -> Result<Embedded> {
        Embedded::open_checked(path, max_machines, false)
    }

    /// [`Embedded::open_with`], checked against the marker beside the file (module docs):
    /// a missing or empty file, or another inventory, where the marker names one is an error
    /// naming what to do, unless `reset` (`--inventory-reset`): then it is taken as it is
    /// (a missing or empty one begins a new, empty inventory) and the marker written again.
    pub fn open_checked(path: &Path, max_machines: u64, reset: bool) -> Result<Embedded> {
        let marker_file = marker_path(path);
        let marker = read_marker(&marker_file, reset)?;
        let len = file_len(path)?;
        if let Some(m) = &marker
            && len.unwrap_or(0) == 0
        {
            let e = lost(path, &marker_file, m, len);
            if !reset {
                return Err(e);
            }
            log::warn!("{e:#}: {RESET_FLAG} given, a new, empty inventory begins");
        }
        // Private to the server like the rest of its state directory (machine identities,
        // error texts): created 0600, and made so if it exists.
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(path)
                .with_context(|| format!("opening the inventory store {}", path.display()))?;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("setting the mode of {} to 0600", path.display()))?;
        }
        let db = Database::create(path)
            .with_context(|| format!("opening the inventory store {}", path.display()))?;
        let what = |doing: &str| format!("{doing} the inventory store {}", path.display());
        // Create the tables, so readers never find one missing; settle the id.
        let tx = db
            .begin_write()
            .with_context(|| what("starting a write to"))?;
        tx.open_table(MACHINES)
            .with_context(|| what("creating the tables of"))?;
        tx.open_table(DETAILS)
            .with_context(|| what("creating the tables of"))?;
        tx.open_table(BOOT_TOKENS)
            .with_context(|| what("creating the tables of"))?;
        tx.open_table(ROLLOUTS)
            .with_context(|| what("creating the tables of"))?;
        let id = {
            // A file written before the count was kept (or by hand) gets it counted once.
            let mut meta = tx
                .open_table(META)
                .with_context(|| what("creating the tables of"))?;
            if meta.get(COUNT).with_context(|| what("reading"))?.is_none() {
                let machines = tx.open_table(MACHINES).with_context(|| what("opening"))?;
                let n = machines
                    .len()
                    .with_context(|| what("counting the machines of"))?;
                meta.insert(COUNT, n).with_context(|| what("writing to"))?;
            }
            let have = meta
                .get(ID)
                .with_context(|| what("reading"))?
                .map(|v| v.value());
            let marked = marker
                .as_ref()
                .and_then(|m| u64::from_str_radix(&m.id, 16).ok());
            match (have, marked) {
                (Some(h), Some(m)) if h != m && !reset => bail!(
                    "{} holds inventory {h:016x}, but {} says this server's inventory is {m:016x} \
                     (created {}): the file was replaced by another inventory's. Put this \
                     server's file back, or start once with {RESET_FLAG} (or delete {}) to take \
                     this one",
                    path.display(),
                    marker_file.display(),
                    runtime::util::rfc3339(marker.as_ref().map_or(0, |m| m.created)),
                    marker_file.display()
                ),
                (Some(h), _) => h,
                // A file from before the id was kept: the marker's, or a new one.
                (None, m) => {
                    let id = m.filter(|_| !reset).unwrap_or_else(new_id);
                    meta.insert(ID, id).with_context(|| what("writing to"))?;
                    id
                }
            }
        };
        tx.commit().with_context(|| what("committing to"))?;
        let marked = marker
            .as_ref()
            .and_then(|m| u64::from_str_radix(&m.id, 16).ok());
        if marked != Some(id) {
            write_marker(&marker_file, id).with_context(|| {
                format!(
                    "writing {}, the marker of the inventory store",
                    marker_file.display()
                )
            })?;
        }
        Ok(Embedded {
            db: Db {
                path: path.to_path_buf(),
                db: RwLock::new(Some(db)),
                id,
                broken: AtomicBool::new(false),
                reopen: Mutex::default(),
                health: Health::new(),
            },
            path: path.to_path_buf(),
            max_machines,
            recent: Mutex::default(),
            tokens_pruned: Default::default(),
        })
    }

    /// The machine count kept in `meta` (the transaction's view).
    fn count(&self, meta: &impl ReadableTable<&'static str, u64>) -> Result<u64> {
        Ok(meta
            .get(COUNT)
            .with_context(|| self.what("reading"))?
            .map_or(0, |v| v.value()))
    }

    fn what(&self, doing: &str) -> String {
        format!("{doing} the inventory store {}", self.path.display())
    }
}

impl Embedded {
    /// Records `batch` in one write transaction: each report is applied to the record as
    /// the reports before it in the batch left it.
    ///
    /// The records come from the writers' [`Recent`] when there (the committed record, kept
    /// decoded: held under its lock for the whole transaction, so no other write runs in
    /// between), else from the file; the batch's records go back into it once committed.
    fn commit_batch(&self, batch: &[(&Report, &Origin)]) -> Result<Vec<Recorded>> {
        self.db.seen(self.commit_batch_in(batch))
    }

    fn commit_batch_in(&self, batch: &[(&Report, &Origin)]) -> Result<Vec<Recorded>> {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = self
            .db
            .begin_write()
            .with_context(|| self.what("starting a write to"))?;
        let mut out = Vec::with_capacity(batch.len());
        // The records this batch wrote (or found unchanged), for `recent` once committed.
        let mut written: HashMap<String, Machine> = HashMap::new();
        let mut json = Vec::new();
        {
            let mut machines = tx
                .open_table(MACHINES)
                .with_context(|| self.what("opening"))?;
            let mut details = tx
                .open_table(DETAILS)
                .with_context(|| self.what("opening"))?;
            let mut meta = tx.open_table(META).with_context(|| self.what("opening"))?;
            let before = self.count(&meta)?;
            let mut count = before;
            for &(r, origin) in batch {
                let id = r.machine.id.as_str();
                let old = match written.remove(id).or_else(|| recent.take(id)) {
                    Some(m) => Some(m),
                    None => match machines.get(id).with_context(|| self.what("reading"))? {
                        Some(v) => {
                            Some(serde_json::from_slice::<Machine>(v.value()).with_context(
                                || format!("reading machine {id} from the inventory"),
                            )?)
                        }
                        None => None,
                    },
                };
                if old.is_none() {
                    if count >= self.max_machines {
                        out.push(Recorded::Full(Full {
                            max: self.max_machines,
                        }));
                        continue;
                    }
                    count += 1;
                }
                let (m, applied) = model::apply(old, r, origin);
                let Applied::Recorded { store, drop } = applied else {
                    written.insert(m.id.clone(), m);
                    out.push(Recorded::Duplicate);
                    continue;
                };
                json.clear();
                serde_json::to_writer(&mut json, &m)?;
                machines
                    .insert(id, json.as_slice())
                    .with_context(|| self.what("writing to"))?;
                for id in drop {
                    details
                        .remove(detail_key(&m.id, &id).as_str())
                        .with_context(|| self.what("writing to"))?;
                }
                if let Some(id) = store
                    && model::has_detail(r)
                {
                    let d = model::detail_json(r)?;
                    details
                        .insert(detail_key(&m.id, &id).as_str(), d.as_slice())
                        .with_context(|| self.what("writing to"))?;
                }
                out.push(Recorded::New);
                written.insert(m.id.clone(), m);
            }
            if count != before {
                meta.insert(COUNT, count)
                    .with_context(|| self.what("writing to"))?;
            }
        }
        tx.commit().with_context(|| self.what("committing to"))?;
        for (id, m) in written {
            recent.put(id, m);
        }
        Ok(out)
    }
}

impl Records for Embedded {
    /// One write transaction for the whole batch (one fsync); when it fails, every report
    /// of it fails. Callers' batches commit one after the other (redb runs one write
    /// transaction at a time).
    fn record_batch(&self, batch: &[(&Report, &Origin)]) -> Vec<Result<Recorded>> {
        match self.commit_batch(batch) {
            Ok(rs) => rs.into_iter().map(Ok).collect(),
            Err(e) => {
                let msg = format!("{e:#}");
                batch.iter().map(|_| Err(anyhow!(msg.clone()))).collect()
            }
        }
    }

    /// One write transaction at a time, of any number of reports.
    fn commits(&self) -> Commits {
        Commits {
            concurrent: false,
            max_reports: None,
        }
    }

    fn machine_count(&self) -> Result<u64> {
        self.db.seen((|| {
            let tx = self.db.begin_read().with_context(|| self.what("reading"))?;
            let meta = tx.open_table(META).with_context(|| self.what("opening"))?;
            self.count(&meta)
        })())
    }

    fn machine(&self, id: &str) -> Result<Option<Machine>> {
        self.db.seen((|| {
            let tx = self.db.begin_read().with_context(|| self.what("reading"))?;
            let machines = tx
                .open_table(MACHINES)
                .with_context(|| self.what("opening"))?;
            let Some(v) = machines.get(id).with_context(|| self.what("reading"))? else {
                return Ok(None);
            };
            let mut m: Machine = serde_json::from_slice(v.value())
                .with_context(|| format!("reading machine {id} from the inventory"))?;
            let details = tx
                .open_table(DETAILS)
                .with_context(|| self.what("opening"))?;
            for s in m.boots.iter_mut().flat_map(|b| b.stages.iter_mut()) {
                // A stage without a record of its details changed nothing and logged nothing
                // (`model::has_detail`): its details are the empty ones.
                s.detail = Some(
                    match details
                        .get(detail_key(id, &s.report_id).as_str())
                        .with_context(|| self.what("reading"))?
                    {
                        Some(d) => {
                            serde_json::from_slice::<Detail>(d.value()).with_context(|| {
                                format!(
                                    "reading report {} of machine {id} from the inventory",
                                    s.report_id
                                )
                            })?
                        }
                        None => Detail::default(),
                    },
                );
            }
            Ok(Some(m))
        })())
    }

    fn update(
        &self,
        id: &str,
        f: &mut dyn FnMut(Option<Machine>) -> Option<Machine>,
    ) -> Result<Option<Machine>> {
        self.db.seen((|| {
            // The record changes here, not through `commit_batch`: forgotten by `recent` (whose
            // lock keeps reports out of the way meanwhile).
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = recent.take(id);
            let tx = self
                .db
                .begin_write()
                .with_context(|| self.what("starting a write to"))?;
            let out = {
                let mut machines = tx
                    .open_table(MACHINES)
                    .with_context(|| self.what("opening"))?;
                let old = match machines.get(id).with_context(|| self.what("reading"))? {
                    Some(v) => Some(
                        serde_json::from_slice::<Machine>(v.value())
                            .with_context(|| format!("reading machine {id} from the inventory"))?,
                    ),
                    None => None,
                };
                match f(old.clone()) {
                    Some(m) => {
                        if old.is_none() {
                            let mut meta =
                                tx.open_table(META).with_context(|| self.what("opening"))?;
                            let n = self.count(&meta)?;
                            if n >= self.max_machines {
                                return Err(Full {
                                    max: self.max_machines,
                                }
                                .into());
                            }
                            meta.insert(COUNT, n + 1)
                                .with_context(|| self.what("writing to"))?;
                        }
                        let json = serde_json::to_vec(&m)?;
                        machines
                            .insert(id, json.as_slice())
                            .with_context(|| self.what("writing to"))?;
                        Some(m)
                    }
                    None => old,
                }
            };
            tx.commit().with_context(|| self.what("committing to"))?;
            Ok(out)
        })())
    }

    fn remove(&self, id: &str) -> Result<Option<Machine>> {
        self.db.seen((|| {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = recent.take(id);
            let tx = self
                .db
                .begin_write()
                .with_context(|| self.what("starting a write to"))?;
            let old = {
                let mut machines = tx
                    .open_table(MACHINES)
                    .with_context(|| self.what("opening"))?;
                let old = match machines
                    .remove(id)
                    .with_context(|| self.what("writing to"))?
                {
                    Some(v) => Some(
                        serde_json::from_slice::<Machine>(v.value())
                            .with_context(|| format!("reading machine {id} from the inventory"))?,
                    ),
                    None => None,
                };
                if old.is_some() {
                    let mut meta = tx.open_table(META).with_context(|| self.what("opening"))?;
                    let n = self.count(&meta)?;
                    meta.insert(COUNT, n.saturating_sub(1))
                        .with_context(|| self.what("writing to"))?;
                    // Its details are `<id>/<report>`: the keys from `<id>/` up to `<id>0`.
                    let mut details = tx
                        .open_table(DETAILS)
                        .with_context(|| self.what("opening"))?;
                    let (from, to) = (format!("{id}/"), format!("{id}0"));
                    let mut keys = Vec::new();
                    for e in details
                        .range(from.as_str()..to.as_str())
                        .with_context(|| self.what("reading"))?
                    {
                        keys.push(
                            e.with_context(|| self.what("reading"))?
                                .0
                                .value()
                                .to_string(),
                        );
                    }
                    for k in keys {
                        details
                            .remove(k.as_str())
                            .with_context(|| self.what("writing to"))?;
                    }
                }
                old
            };
            tx.commit().with_context(|| self.what("committing to"))?;
            Ok(old)
        })())
    }

    fn each_machine(
        &self,
        filter: &Filter,
        after: Option<&str>,
        visit: &mut dyn FnMut(Machine) -> bool,
    ) -> Result<()> {
        self.db.seen((|| {
            let tx = self.db.begin_read().with_context(|| self.what("reading"))?;
            let machines = tx
                .open_table(MACHINES)
                .with_context(|| self.what("opening"))?;
            let entries = match after {
                Some(a) => machines.range(a..),
                None => machines.range::<&str>(..),
            }
            .with_context(|| self.what("reading"))?;
            for e in entries {
                let (k, v) = e.with_context(|| self.what("reading"))?;
                if Some(k.value()) == after {
                    continue;
                }
                let m: Machine = serde_json::from_slice(v.value())
                    .with_context(|| format!("reading machine {} from the inventory", k.value()))?;
                if filter.matches(&m) && !visit(m) {
                    break;
                }
            }
            Ok(())
        })())
    }
}

impl BootTokens for Embedded {
    fn put_boot_token(&self, key: &str, t: &BootToken, now: u64) -> Result<()> {
        let tx = self
            .db
            .begin_write()
            .with_context(|| self.what("starting a write to"))?;
        {
            let mut tokens = tx
                .open_table(BOOT_TOKENS)
                .with_context(|| self.what("opening"))?;
            // Forgets the records past their time, at most once a minute: a herd of booting
            // machines does not scan the table once each.
            use std::sync::atomic::Ordering;
            let last = self.tokens_pruned.load(Ordering::Relaxed);
            if now >= last + TOKEN_PRUNE_EVERY
                && self
                    .tokens_pruned
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                let mut old = Vec::new();
                for e in tokens.iter().with_context(|| self.what("reading"))? {
                    let (k, v) = e.with_context(|| self.what("reading"))?;
                    let gone = serde_json::from_slice::<BootToken>(v.value())
                        .map_or(true, |b| now > b.forget_after());
                    if gone {
                        old.push(k.value().to_string());
                    }
                }
                for k in old {
                    tokens
                        .remove(k.as_str())
                        .with_context(|| self.what("writing to"))?;
                }
            }
            tokens
                .insert(key, serde_json::to_vec(t)?.as_slice())
                .with_context(|| self.what("writing to"))?;
        }
        tx.commit().with_context(|| self.what("committing to"))
    }

    /// One redb write transaction: read, decide, write (redb runs one writer at a time).
    fn spend_boot_token(&self, key: &str, now: u64) -> Result<Spend> {
        let tx = self
            .db
            .begin_write()
            .with_context(|| self.what("starting a write to"))?;
        let spend = {
            let mut tokens = tx
                .open_table(BOOT_TOKENS)
                .with_context(|| self.what("opening"))?;
            let old = match tokens.get(key).with_context(|| self.what("reading"))? {
                Some(v) => Some(
                    serde_json::from_slice::<BootToken>(v.value())
                        .context("reading a boot token from the inventory")?,
                ),
                None => None,
            };
            let (spend, new) = Spend::decide(old, now);
            if let Some(n) = new {
                tokens
                    .insert(key, serde_json::to_vec(&n)?.as_slice())
                    .with_context(|| self.what("writing to"))?;
            }
            spend
        };
        tx.commit().with_context(|| self.what("committing to"))?;
        Ok(spend)
    }

    fn forget_boot_token(&self, key: &str) -> Result<()> {
        let tx = self
            .db
            .begin_write()
            .with_context(|| self.what("starting a write to"))?;
        {
            let mut tokens = tx
                .open_table(BOOT_TOKENS)
                .with_context(|| self.what("opening"))?;
            tokens
                .remove(key)
                .with_context(|| self.what("writing to"))?;
        }
        tx.commit().with_context(|| self.what("committing to"))
    }

    fn boot_token(&self, key: &str) -> Result<Option<BootToken>> {
        let tx = self.db.begin_read().with_context(|| self.what("reading"))?;
        let tokens = tx
            .open_table(BOOT_TOKENS)
            .with_context(|| self.what("opening"))?;
        let Some(v) = tokens.get(key).with_context(|| self.what("reading"))? else {
            return Ok(None);
        };
        Ok(Some(
            serde_json::from_slice(v.value()).context("reading a boot token from the inventory")?,
        ))
    }
}

impl Rollouts for Embedded {
    fn rollout(&self, pool: &str) -> Result<Option<Rollout>> {
        self.db.seen((|| {
            let tx = self.db.begin_read().with_context(|| self.what("reading"))?;
            let t = tx
                .open_table(ROLLOUTS)
                .with_context(|| self.what("opening"))?;
            let Some(v) = t.get(pool).with_context(|| self.what("reading"))? else {
                return Ok(None);
            };
            Ok(Some(serde_json::from_slice(v.value()).with_context(
                || format!("reading pool {pool}'s rollout from the inventory"),
            )?))
        })())
    }

    /// One redb write transaction: read, decide, write (redb runs one writer at a time).
    fn update_rollout(
        &self,
        pool: &str,
        f: &mut dyn FnMut(Option<Rollout>) -> Option<Rollout>,
    ) -> Result<Option<Rollout>> {
        self.db.seen((|| {
            let tx = self
                .db
                .begin_write()
                .with_context(|| self.what("starting a write to"))?;
            let out = {
                let mut t = tx
                    .open_table(ROLLOUTS)
                    .with_context(|| self.what("opening"))?;
                let old: Option<Rollout> =
                    match t.get(pool).with_context(|| self.what("reading"))? {
                        Some(v) => Some(serde_json::from_slice(v.value()).with_context(|| {
                            format!("reading pool {pool}'s rollout from the inventory")
                        })?),
                        None => None,
                    };
                match f(old.clone()) {
                    Some(r) => {
                        t.insert(pool, serde_json::to_vec(&r)?.as_slice())
                            .with_context(|| self.what("writing to"))?;
                        Some(r)
                    }
                    None => old,
                }
            };
            tx.commit().with_context(|| self.what("committing to"))?;
            Ok(out)
        })())
    }
}

impl Store for Embedded {
    fn health(&self) -> &Health {
        &self.db.health
    }

    /// Opens the file again when it failed (at most every [`REOPEN_EVERY`]), so a listing
    /// works again after a failure without waiting for a write; the store is up again only
    /// once a write commits (a read works on a full disk too).
    fn probe(&self) {
        if self.db.broken.load(Ordering::Acquire) {
            drop(self.db.lock());
        }
    }
}
