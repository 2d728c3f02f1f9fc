//! What every inventory store offers (the embedded and the etcd store implement it).

use anyhow::Result;

use super::model::{self, Counts, Filter, Machine, Origin, Report};

/// Whether a report was new or a retry of one already recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    New,
    Duplicate,
}

/// Where the inventory lives. Every method is safe to call from many threads at once.
pub trait Store: Send + Sync {
    /// Records a report (parsed by [`model::parse`]) atomically: reads the machine's record,
    /// [`model::apply`]s the report, writes the record and the report's details, or, when the
    /// report's id is already known, changes nothing and says [`Recorded::Duplicate`].
    /// On `Ok` the report is durable.
    fn record(&self, report: &Report, origin: &Origin) -> Result<Recorded>;
    /// Records several reports, in order (a later one sees what an earlier one did); one
    /// result each. By default one [`Store::record`] after the other; the embedded store
    /// commits them in one transaction.
    fn record_all(&self, batch: &[(&Report, &Origin)]) -> Vec<Result<Recorded>> {
        batch.iter().map(|(r, o)| self.record(r, o)).collect()
    }
    /// How the server's writers call it (`crate::fleet`): (threads calling
    /// [`Store::record_all`] at once, reports per call at most).
    fn writers(&self) -> (usize, usize) {
        (1, 1)
    }
    /// One machine, with each stage's details (changes, log tail).
    fn machine(&self, id: &str) -> Result<Option<Machine>>;
    /// The machines matching `filter`, by id, without stage details.
    fn machines(&self, filter: &Filter) -> Result<Vec<Machine>>;
    /// Machines by state and pool (for metrics).
    fn counts(&self) -> Result<Counts> {
        Ok(model::count(&self.machines(&Filter::default())?))
    }
}
