//! The embedded store: one redb file (`<state-dir>/inventory.db`).
//!
//! Tables: `machines` (machine id → the record as JSON), `details` (`<machine id>/<report
//! id>` → the report's changes and log tail as JSON; none for a report that changed nothing
//! and logged nothing, read back as the empty details), `boot_tokens`, and `meta` (the
//! number of machine records, changed in the transaction that adds one: `--max-machines`). Reports are recorded in
//! write transactions (redb runs one at a time; reports that arrive while one commits go
//! together into the next), committed with redb's default durability: the commit returns
//! after fsync, and redb's copy-on-write pages with a checksummed commit slot mean a crash at
//! any point leaves the last committed transaction intact. `record` returns after its
//! report's transaction committed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, PoisonError};

use anyhow::{Context, Result, anyhow};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use super::model::{self, Applied, Detail, Filter, Machine, Origin, Report};
use super::recent::Recent;
use super::store::{BootToken, Full, Recorded, Spend, Store};

const MACHINES: TableDefinition<&str, &[u8]> = TableDefinition::new("machines");
const DETAILS: TableDefinition<&str, &[u8]> = TableDefinition::new("details");
/// One-time network-boot tokens: SHA-256 of the token (hex) → [`BootToken`] as JSON.
const BOOT_TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("boot_tokens");
/// Counters: [`COUNT`] → the number of entries of `machines` (`--max-machines` is checked
/// against it), changed in the transaction that adds a record.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const COUNT: &str = "machines";

pub struct Embedded {
    db: Database,
    path: PathBuf,
    /// `--max-machines`.
    max_machines: u64,
    /// The records written last, decoded (`commit_batch`); its lock is held across every
    /// write transaction that changes a record.
    recent: Mutex<Recent<Machine>>,
    queue: Mutex<Queue>,
    /// Signalled when a batch is committed.
    ready: Condvar,
    /// When boot tokens past their time were last forgotten (seconds; see `put_boot_token`).
    tokens_pruned: std::sync::atomic::AtomicU64,
}

/// How often `put_boot_token` looks for boot tokens to forget (a scan of the table).
const PRUNE_EVERY: u64 = 60;

/// Reports committed in one transaction at most.
const BATCH: usize = 512;

/// Reports waiting for a commit, and the results of committed ones not yet collected.
#[derive(Default)]
struct Queue {
    next: u64,
    pending: Vec<Queued>,
    committing: bool,
    done: HashMap<u64, std::result::Result<Recorded, String>>,
}

struct Queued {
    ticket: u64,
    report: Report,
    origin: Origin,
}

fn detail_key(machine: &str, report: &str) -> String {
    format!("{machine}/{report}")
}

impl Embedded {
    /// Opens (or creates) the store at `path` with the default `--max-machines`. Only one
    /// process may have it open.
    pub fn open(path: &Path) -> Result<Embedded> {
        Embedded::open_with(path, super::store::DEFAULT_MAX_MACHINES)
    }

    /// Opens (or creates) the store at `path`, holding `max_machines` records at most.
    pub fn open_with(path: &Path, max_machines: u64) -> Result<Embedded> {
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
        let s = Embedded {
            db,
            path: path.to_path_buf(),
            max_machines,
            recent: Mutex::default(),
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            tokens_pruned: Default::default(),
        };
        // Create both tables, so readers never find one missing.
        let tx =
            s.db.begin_write()
                .with_context(|| s.what("starting a write to"))?;
        tx.open_table(MACHINES)
            .with_context(|| s.what("creating the tables of"))?;
        tx.open_table(DETAILS)
            .with_context(|| s.what("creating the tables of"))?;
        tx.open_table(BOOT_TOKENS)
            .with_context(|| s.what("creating the tables of"))?;
        {
            // A file written before the count was kept (or by hand) gets it counted once.
            let mut meta = tx
                .open_table(META)
                .with_context(|| s.what("creating the tables of"))?;
            if meta
                .get(COUNT)
                .with_context(|| s.what("reading"))?
                .is_none()
            {
                let machines = tx.open_table(MACHINES).with_context(|| s.what("opening"))?;
                let n = machines
                    .len()
                    .with_context(|| s.what("counting the machines of"))?;
                meta.insert(COUNT, n)
                    .with_context(|| s.what("writing to"))?;
            }
        }
        tx.commit().with_context(|| s.what("committing to"))?;
        Ok(s)
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

impl Store for Embedded {
    /// Group commit: a caller queues its report; whoever finds no commit under way commits
    /// everything queued (at most [`BATCH`]) in one transaction and one fsync, and hands each
    /// caller its result. A herd of reports costs a few fsyncs, not one each.
    fn record(&self, r: &Report, origin: &Origin) -> Result<Recorded> {
        let lock = || self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let mut q = lock();
        let ticket = q.next;
        q.next += 1;
        q.pending.push(Queued {
            ticket,
            report: r.clone(),
            origin: origin.clone(),
        });
        loop {
            if let Some(res) = q.done.remove(&ticket) {
                return res.map_err(|e| anyhow!(e));
            }
            if q.committing {
                q = self.ready.wait(q).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            q.committing = true;
            let take = q.pending.len().min(BATCH);
            let batch: Vec<Queued> = q.pending.drain(..take).collect();
            drop(q);
            let pairs: Vec<(&Report, &Origin)> =
                batch.iter().map(|b| (&b.report, &b.origin)).collect();
            let results = self.commit_batch(&pairs);
            q = lock();
            q.committing = false;
            match results {
                Ok(rs) => {
                    for (b, r) in batch.iter().zip(rs) {
                        q.done.insert(b.ticket, Ok(r));
                    }
                }
                Err(e) => {
                    let msg = format!("{e:#}");
                    for b in &batch {
                        q.done.insert(b.ticket, Err(msg.clone()));
                    }
                }
            }
            self.ready.notify_all();
        }
    }

    /// One transaction for the whole batch (one fsync); when it fails, every report of it
    /// fails.
    fn record_all(&self, batch: &[(&Report, &Origin)]) -> Vec<Result<Recorded>> {
        match self.commit_batch(batch) {
            Ok(rs) => rs.into_iter().map(Ok).collect(),
            Err(e) => {
                let msg = format!("{e:#}");
                batch.iter().map(|_| Err(anyhow!(msg.clone()))).collect()
            }
        }
    }

    /// One writer taking what has queued, [`BATCH`] at most: the group commit without
    /// threads waiting on each other.
    fn writers(&self) -> (usize, usize) {
        (1, BATCH)
    }

    fn machine_count(&self) -> Result<u64> {
        let tx = self.db.begin_read().with_context(|| self.what("reading"))?;
        let meta = tx.open_table(META).with_context(|| self.what("opening"))?;
        self.count(&meta)
    }

    fn machine(&self, id: &str) -> Result<Option<Machine>> {
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
                    Some(d) => serde_json::from_slice::<Detail>(d.value()).with_context(|| {
                        format!(
                            "reading report {} of machine {id} from the inventory",
                            s.report_id
                        )
                    })?,
                    None => Detail::default(),
                },
            );
        }
        Ok(Some(m))
    }

    fn update(
        &self,
        id: &str,
        f: &mut dyn FnMut(Option<Machine>) -> Option<Machine>,
    ) -> Result<Option<Machine>> {
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
                        let mut meta = tx.open_table(META).with_context(|| self.what("opening"))?;
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
    }

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
            if now >= last + PRUNE_EVERY
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

    fn each_machine(
        &self,
        filter: &Filter,
        after: Option<&str>,
        visit: &mut dyn FnMut(Machine) -> bool,
    ) -> Result<()> {
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
    }
}
