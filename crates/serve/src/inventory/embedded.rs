//! The embedded store: one redb file (`<state-dir>/inventory.db`).
//!
//! Two tables: `machines` (machine id → the record as JSON) and `details` (`<machine
//! id>/<report id>` → the report's changes and log tail as JSON). A report is recorded in one
//! write transaction (redb runs one at a time), committed with redb's default durability: the
//! commit returns after fsync, and redb's copy-on-write pages with a checksummed commit slot
//! mean a crash at any point leaves the last committed transaction intact.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::model::{self, Applied, Detail, Filter, Machine, Origin, Report};
use super::{Recorded, Store};

const MACHINES: TableDefinition<&str, &[u8]> = TableDefinition::new("machines");
const DETAILS: TableDefinition<&str, &[u8]> = TableDefinition::new("details");

pub struct Embedded {
    db: Database,
    path: PathBuf,
}

fn detail_key(machine: &str, report: &str) -> String {
    format!("{machine}/{report}")
}

impl Embedded {
    /// Opens (or creates) the store at `path`. Only one process may have it open.
    pub fn open(path: &Path) -> Result<Embedded> {
        let db = Database::create(path)
            .with_context(|| format!("opening the inventory store {}", path.display()))?;
        let s = Embedded {
            db,
            path: path.to_path_buf(),
        };
        // Create both tables, so readers never find one missing.
        let tx = s.db.begin_write().with_context(|| s.what("starting a write to"))?;
        tx.open_table(MACHINES).with_context(|| s.what("creating the tables of"))?;
        tx.open_table(DETAILS).with_context(|| s.what("creating the tables of"))?;
        tx.commit().with_context(|| s.what("committing to"))?;
        Ok(s)
    }

    fn what(&self, doing: &str) -> String {
        format!("{doing} the inventory store {}", self.path.display())
    }
}

impl Store for Embedded {
    fn record(&self, r: &Report, origin: &Origin) -> Result<Recorded> {
        let tx = self.db.begin_write().with_context(|| self.what("starting a write to"))?;
        {
            let mut machines = tx.open_table(MACHINES).with_context(|| self.what("opening"))?;
            let old = match machines.get(r.machine.id.as_str()).with_context(|| self.what("reading"))? {
                Some(v) => Some(
                    serde_json::from_slice::<Machine>(v.value())
                        .with_context(|| format!("reading machine {} from the inventory", r.machine.id))?,
                ),
                None => None,
            };
            let (m, applied) = model::apply(old, r, origin);
            let Applied::Recorded { store, drop } = applied else {
                return Ok(Recorded::Duplicate); // the transaction is dropped: nothing written
            };
            let json = serde_json::to_vec(&m)?;
            machines
                .insert(r.machine.id.as_str(), json.as_slice())
                .with_context(|| self.what("writing to"))?;
            let mut details = tx.open_table(DETAILS).with_context(|| self.what("opening"))?;
            for id in drop {
                details
                    .remove(detail_key(&m.id, &id).as_str())
                    .with_context(|| self.what("writing to"))?;
            }
            if let Some(id) = store {
                let d = serde_json::to_vec(&r.detail())?;
                details
                    .insert(detail_key(&m.id, &id).as_str(), d.as_slice())
                    .with_context(|| self.what("writing to"))?;
            }
        }
        tx.commit().with_context(|| self.what("committing to"))?;
        Ok(Recorded::New)
    }

    fn machine(&self, id: &str) -> Result<Option<Machine>> {
        let tx = self.db.begin_read().with_context(|| self.what("reading"))?;
        let machines = tx.open_table(MACHINES).with_context(|| self.what("opening"))?;
        let Some(v) = machines.get(id).with_context(|| self.what("reading"))? else {
            return Ok(None);
        };
        let mut m: Machine = serde_json::from_slice(v.value())
            .with_context(|| format!("reading machine {id} from the inventory"))?;
        let details = tx.open_table(DETAILS).with_context(|| self.what("opening"))?;
        for s in m.boots.iter_mut().flat_map(|b| b.stages.iter_mut()) {
            if let Some(d) = details
                .get(detail_key(id, &s.report_id).as_str())
                .with_context(|| self.what("reading"))?
            {
                s.detail = Some(serde_json::from_slice::<Detail>(d.value()).with_context(
                    || format!("reading report {} of machine {id} from the inventory", s.report_id),
                )?);
            }
        }
        Ok(Some(m))
    }

    fn machines(&self, filter: &Filter) -> Result<Vec<Machine>> {
        let tx = self.db.begin_read().with_context(|| self.what("reading"))?;
        let machines = tx.open_table(MACHINES).with_context(|| self.what("opening"))?;
        let mut out = Vec::new();
        for e in machines.iter().with_context(|| self.what("reading"))? {
            let (k, v) = e.with_context(|| self.what("reading"))?;
            let m: Machine = serde_json::from_slice(v.value())
                .with_context(|| format!("reading machine {} from the inventory", k.value()))?;
            if filter.matches(&m) {
                out.push(m);
            }
        }
        Ok(out)
    }
}
