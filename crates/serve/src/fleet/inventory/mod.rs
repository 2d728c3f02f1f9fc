//! The machine inventory (docs/reports.md): what every machine reported, kept in a store.
//!
//! - `model`: the report ([`parse`], bounded by [`limits`]), the machine record and the rules
//!   that fold a report into it ([`apply`]);
//! - `store`: what every store implements: [`Records`] (machine records) and [`BootTokens`]
//!   (network boot's token records), together with its health a [`Store`];
//! - `embedded`: the default store, one redb file in `--state-dir` (`inventory.db`);
//! - `etcd`: the shared store for replicas, over etcd's v3 JSON gateway;
//! - `memory`: the in-memory store, for tests and short-lived servers (lost on restart);
//! - `batch`: how the server's writers hand reports to a store ([`Batching`], the one
//!   place that decides it);
//! - `health`: whether the store works, for `/status` and `/metrics`.
//!
//! Every store runs the same [`apply`] inside its own atomic read-modify-write of one
//! machine's record, so a retried report (same `id`) is recorded once and concurrent reports
//! of one machine never overwrite each other. One contract test suite
//! (`crates/serve/tests/inventory_contract.rs`) runs the same cases against each.

pub mod batch;
pub mod embedded;
pub mod etcd;
pub mod health;
pub mod memory;
pub mod model;
pub mod recent;
pub mod store;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};

pub use self::batch::{Batching, Commits};
pub use self::embedded::Embedded;
pub use self::etcd::{Etcd, EtcdOptions};
pub use self::health::Health;
pub use self::memory::Memory;
pub use self::model::{
    Applied, Counts, Filter, Machine, Origin, Refused, Report, State, apply, limits, parse,
    parse_within,
};
pub use self::store::{
    BootToken, BootTokens, DEFAULT_MAX_MACHINES, FailedMachine, Full, Halt, MAX_TOKEN_USES,
    Recorded, Records, Rollout, RolloutMachine, RolloutState, Rollouts, Spend, Store, TokenKind,
    counts, machines, record, token_key, well_formed_token,
};

/// `--inventory-store`: which store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// `embedded` (default): `<state-dir>/inventory.db`.
    #[default]
    Embedded,
    /// `etcd`: the cluster at `--etcd-endpoints`.
    Etcd,
    /// `memory`: the server's memory, lost when it stops (tests, short-lived servers).
    Memory,
}

impl std::str::FromStr for StoreKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "embedded" => Ok(StoreKind::Embedded),
            "etcd" => Ok(StoreKind::Etcd),
            "memory" => Ok(StoreKind::Memory),
            _ => Err(format!(
                "unknown inventory store {s:?} (embedded, etcd, memory)"
            )),
        }
    }
}

/// The embedded store's file in the state directory.
pub const EMBEDDED_FILE: &str = "inventory.db";

/// Opens the store `agent serve` was asked for: `kind` with `--state-dir` (embedded) or
/// `--etcd-endpoints` (etcd), or in memory, holding `max_machines` machine records at most
/// (`--max-machines`).
pub fn open(
    kind: StoreKind,
    state_dir: Option<&Path>,
    etcd_endpoints: &[String],
    max_machines: u64,
) -> Result<Arc<dyn Store>> {
    open_checked(kind, state_dir, etcd_endpoints, max_machines, false)
}

/// [`open`], with `reset` (`--inventory-reset`): the embedded store takes a missing, empty
/// or other inventory file as it is ([`Embedded::open_checked`]).
pub fn open_checked(
    kind: StoreKind,
    state_dir: Option<&Path>,
    etcd_endpoints: &[String],
    max_machines: u64,
    reset: bool,
) -> Result<Arc<dyn Store>> {
    Ok(match kind {
        StoreKind::Embedded => {
            let Some(dir) = state_dir else {
                bail!(
                    "the embedded inventory store needs --state-dir (it keeps {EMBEDDED_FILE} there)"
                );
            };
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the state directory {}", dir.display()))?;
            Arc::new(Embedded::open_checked(
                &dir.join(EMBEDDED_FILE),
                max_machines,
                reset,
            )?)
        }
        StoreKind::Etcd => Arc::new(Etcd::new(EtcdOptions {
            max_machines,
            ..EtcdOptions::new(etcd_endpoints.to_vec())
        })?),
        StoreKind::Memory => {
            log::warn!(
                "the inventory is kept in memory (--inventory-store=memory): every machine \
                 record and boot token is lost when the server stops"
            );
            Arc::new(Memory::new(max_machines))
        }
    })
}
