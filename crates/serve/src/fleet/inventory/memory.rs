//! The in-memory store (`--inventory-store=memory`): the inventory in the server's memory,
//! for tests and short-lived servers. Nothing is written anywhere: every record and token is
//! lost when the server stops.
//!
//! Otherwise it behaves as the other stores do: the same [`apply`](super::model::apply) of
//! each report under one lock (a batch is applied in order, each report seeing the ones
//! before it), retried reports recognised by their id, `--max-machines` records at most (a
//! new machine beyond is [`Recorded::Full`], a registration [`Full`]), a report's details
//! kept beside its record (none for a report that changed nothing and logged nothing, read
//! back as the empty details), and token records spent once and forgotten past their time
//! when the next is put, as the embedded store does. Its health is always up.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use anyhow::Result;

use super::batch::Commits;
use super::health::Health;
use super::model::{self, Applied, Detail, Filter, Machine, Origin, Report};
use super::store::{
    BootToken, BootTokens, Full, Recorded, Records, Rollout, Rollouts, Spend, Store,
    TOKEN_PRUNE_EVERY,
};

pub struct Memory {
    /// `--max-machines`.
    max_machines: u64,
    records: Mutex<Inventory>,
    tokens: Mutex<HashMap<String, BootToken>>,
    rollouts: Mutex<BTreeMap<String, Rollout>>,
    /// When token records past their time were last forgotten (seconds).
    tokens_pruned: AtomicU64,
    health: Health,
}

#[derive(Default)]
struct Inventory {
    /// Machine id → its record (without details).
    machines: BTreeMap<String, Machine>,
    /// Machine id → report id → the report's details (only reports that have some).
    details: HashMap<String, HashMap<String, Detail>>,
}

impl Memory {
    /// An empty inventory holding `max_machines` records at most (`--max-machines`).
    pub fn new(max_machines: u64) -> Memory {
        Memory {
            max_machines,
            records: Mutex::default(),
            tokens: Mutex::default(),
            rollouts: Mutex::default(),
            tokens_pruned: AtomicU64::new(0),
            health: Health::new(),
        }
    }

    fn records(&self) -> MutexGuard<'_, Inventory> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tokens(&self) -> MutexGuard<'_, HashMap<String, BootToken>> {
        self.tokens.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn full(&self) -> Full {
        Full {
            max: self.max_machines,
        }
    }
}

impl Inventory {
    fn record(&mut self, r: &Report, origin: &Origin, max: u64) -> Recorded {
        let id = r.machine.id.as_str();
        let old = self.machines.get(id).cloned();
        if old.is_none() && self.machines.len() as u64 >= max {
            return Recorded::Full(Full { max });
        }
        let (m, applied) = model::apply(old, r, origin);
        let Applied::Recorded { store, drop } = applied else {
            return Recorded::Duplicate;
        };
        let details = self.details.entry(m.id.clone()).or_default();
        for id in drop {
            details.remove(&id);
        }
        if let Some(id) = store
            && model::has_detail(r)
        {
            details.insert(id, model::detail(r));
        }
        self.machines.insert(m.id.clone(), m);
        Recorded::New
    }
}

impl Records for Memory {
    /// The whole batch under the store's lock.
    fn record_batch(&self, batch: &[(&Report, &Origin)]) -> Vec<Result<Recorded>> {
        let mut inv = self.records();
        batch
            .iter()
            .map(|(r, o)| Ok(inv.record(r, o, self.max_machines)))
            .collect()
    }

    /// One batch at a time (one lock), of any number of reports.
    fn commits(&self) -> Commits {
        Commits {
            concurrent: false,
            max_reports: None,
        }
    }

    fn machine_count(&self) -> Result<u64> {
        Ok(self.records().machines.len() as u64)
    }

    fn machine(&self, id: &str) -> Result<Option<Machine>> {
        let inv = self.records();
        let Some(mut m) = inv.machines.get(id).cloned() else {
            return Ok(None);
        };
        let details = inv.details.get(id);
        for s in m.boots.iter_mut().flat_map(|b| b.stages.iter_mut()) {
            // As the embedded store: a stage without details changed nothing and logged
            // nothing.
            s.detail = Some(
                details
                    .and_then(|d| d.get(&s.report_id))
                    .cloned()
                    .unwrap_or_default(),
            );
        }
        Ok(Some(m))
    }

    fn update(
        &self,
        id: &str,
        f: &mut dyn FnMut(Option<Machine>) -> Option<Machine>,
    ) -> Result<Option<Machine>> {
        let mut inv = self.records();
        let old = inv.machines.get(id).cloned();
        let known = old.is_some();
        let Some(m) = f(old.clone()) else {
            return Ok(old);
        };
        if !known && inv.machines.len() as u64 >= self.max_machines {
            return Err(self.full().into());
        }
        inv.machines.insert(id.to_string(), m.clone());
        Ok(Some(m))
    }

    fn remove(&self, id: &str) -> Result<Option<Machine>> {
        let mut inv = self.records();
        inv.details.remove(id);
        Ok(inv.machines.remove(id))
    }

    fn each_machine(
        &self,
        filter: &Filter,
        after: Option<&str>,
        visit: &mut dyn FnMut(Machine) -> bool,
    ) -> Result<()> {
        // One record at a time, the lock taken for each: `visit` may take its time (a
        // listing renders as it goes) without holding reports up.
        let mut from = after.map(str::to_string);
        loop {
            let next = {
                let inv = self.records();
                let mut range = match &from {
                    Some(a) => inv.machines.range::<str, _>((
                        std::ops::Bound::Excluded(a.as_str()),
                        std::ops::Bound::Unbounded,
                    )),
                    None => inv.machines.range::<str, _>(..),
                };
                range
                    .find(|(_, m)| filter.matches(m))
                    .map(|(_, m)| m.clone())
            };
            let Some(m) = next else {
                return Ok(());
            };
            from = Some(m.id.clone());
            if !visit(m) {
                return Ok(());
            }
        }
    }
}

impl BootTokens for Memory {
    fn put_boot_token(&self, key: &str, t: &BootToken, now: u64) -> Result<()> {
        let mut tokens = self.tokens();
        // As the embedded store: past their time, forgotten at most once a minute.
        let last = self.tokens_pruned.load(Ordering::Relaxed);
        if now >= last + TOKEN_PRUNE_EVERY {
            self.tokens_pruned.store(now, Ordering::Relaxed);
            tokens.retain(|_, b| now <= b.forget_after());
        }
        tokens.insert(key.to_string(), t.clone());
        Ok(())
    }

    fn spend_boot_token(&self, key: &str, now: u64) -> Result<Spend> {
        let mut tokens = self.tokens();
        let (spend, new) = Spend::decide(tokens.get(key).cloned(), now);
        if let Some(n) = new {
            tokens.insert(key.to_string(), n);
        }
        Ok(spend)
    }

    fn boot_token(&self, key: &str) -> Result<Option<BootToken>> {
        Ok(self.tokens().get(key).cloned())
    }

    fn forget_boot_token(&self, key: &str) -> Result<()> {
        self.tokens().remove(key);
        Ok(())
    }
}

impl Rollouts for Memory {
    fn rollout(&self, pool: &str) -> Result<Option<Rollout>> {
        Ok(self
            .rollouts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(pool)
            .cloned())
    }

    fn update_rollout(
        &self,
        pool: &str,
        f: &mut dyn FnMut(Option<Rollout>) -> Option<Rollout>,
    ) -> Result<Option<Rollout>> {
        let mut all = self.rollouts.lock().unwrap_or_else(PoisonError::into_inner);
        let old = all.get(pool).cloned();
        match f(old.clone()) {
            Some(r) => {
                all.insert(pool.to_string(), r.clone());
                Ok(Some(r))
            }
            None => Ok(old),
        }
    }
}

impl Store for Memory {
    fn health(&self) -> &Health {
        &self.health
    }

    /// Nothing to ask: memory does not fail.
    fn probe(&self) {}
}
