//! What every inventory store offers (the embedded, etcd and in-memory stores implement it):
//! [`Records`], the machine records, and [`BootTokens`], network boot's token records, each
//! with required methods only; [`Store`] is both, with the backend's health.

use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

use super::batch::Commits;
use super::health::Health;
use super::model::{self, Counts, Filter, Machine, Origin, Report};

/// Whether a report was new or a retry of one already recorded, or refused because it
/// would add a machine to an inventory that holds `--max-machines` already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    New,
    Duplicate,
    /// Not recorded: the report's machine is new and the inventory is full.
    Full(Full),
}

/// The default of `--max-machines` (docs/reports.md, "Limits"): ten times the largest herd
/// the benchmarks boot at once, and a listing of that many records is still a few seconds
/// and tens of MiB (measured there).
pub const DEFAULT_MAX_MACHINES: u64 = 100_000;

/// The inventory holds `max` machines (`--max-machines`): a new one is not recorded. Known
/// machines still are. What [`Records::update`] fails with when it would add one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    pub max: u64,
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the inventory holds {} machines, the --max-machines limit: a new machine is not \
             recorded (machines already known still are; raise --max-machines)",
            self.max
        )
    }
}

impl std::error::Error for Full {}

/// A one-time network-boot token's record (docs/serve.md, "One-time tokens"), kept under
/// the SHA-256 of the token (the token itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootToken {
    /// The machine's inventory id (from what it said at `/ipxe`).
    pub machine: String,
    /// The machine file that selected it; None: the discovery pool.
    #[serde(default)]
    pub file: Option<String>,
    pub pool: String,
    /// Until when the config may be fetched with it (seconds since the Unix epoch).
    pub expires: u64,
    /// When it was spent (the config fetched), if it was.
    #[serde(default)]
    pub spent: Option<u64>,
    /// Until when the machine's reports are authenticated by it (a report credential; a
    /// boot token authenticates none).
    pub reports_until: u64,
    /// A one-time boot token (`/ipxe`), or the report credential a config fetch with one
    /// issued (`/machine-config`).
    #[serde(default)]
    pub kind: TokenKind,
    /// When the boot token was issued (for a report credential: its boot token's).
    #[serde(default)]
    pub issued: u64,
    /// How many config fetches the boot token allows within its lifetime (the boot
    /// profile's `tokenUses`, 1 to [`MAX_TOKEN_USES`]; a record without it: 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub uses: u32,
    /// How many of them were made (`spent` is the time of the last).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub used: u32,
}

pub use crate::source::selectors::MAX_TOKEN_USES;

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What a token record is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenKind {
    /// Fetches the machine's config, once (`/machine-config?token=`).
    #[default]
    Boot,
    /// Authenticates the machine's reports (`/report?token=`) until `reports_until`.
    Report,
}

impl BootToken {
    /// When the store may forget it.
    pub fn forget_after(&self) -> u64 {
        self.expires.max(self.reports_until)
    }
}

/// How often a store that forgets token records when the next is put (`put_boot_token`)
/// looks for records past their time at most, in seconds (a scan of all of them).
pub const TOKEN_PRUNE_EVERY: u64 = 60;

/// The key a token's record is kept under: its SHA-256 (hex). The token itself is never
/// stored.
pub fn token_key(token: &str) -> String {
    use sha2::{Digest, Sha256};
    spec::encoding::hex(&Sha256::digest(token.as_bytes()))
}

/// A token as the server hands them out: base64url, 16 to 128 characters.
pub fn well_formed_token(t: &str) -> bool {
    (16..=128).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What spending a boot token gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spend {
    /// Spent now (one of its uses): the config may be served, once more.
    Spent(BootToken),
    /// Unknown (never issued, or forgotten), expired, or every use spent: refused.
    Refused(&'static str),
}

impl Spend {
    /// The rule every store applies to a token's record at `now`.
    pub fn decide(t: Option<BootToken>, now: u64) -> (Spend, Option<BootToken>) {
        match t {
            None => (Spend::Refused("unknown token"), None),
            Some(t) if t.kind != TokenKind::Boot => (Spend::Refused("unknown token"), None),
            // A record from before uses were counted that was spent has used its one.
            Some(t) if t.used.max(t.spent.is_some() as u32) >= t.uses.max(1) => {
                (Spend::Refused("token already used"), None)
            }
            Some(t) if now >= t.expires => (Spend::Refused("token expired"), None),
            Some(mut t) => {
                t.used = t.used.max(t.spent.is_some() as u32) + 1;
                t.spent = Some(now);
                (Spend::Spent(t.clone()), Some(t))
            }
        }
    }
}

/// A store's machine records: what reports and operators change, what listings read. Every
/// method is safe to call from many threads at once.
pub trait Records: Send + Sync {
    /// Records reports (parsed by [`model::parse`]) in order, a later one seeing what an
    /// earlier one did; one result each, in the batch's order. For each report: reads the
    /// machine's record, [`model::apply`]s the report, writes the record and the report's
    /// details atomically, or, when the report's id is already known, changes nothing and
    /// says [`Recorded::Duplicate`]. A report of a machine not known yet when the store
    /// holds `--max-machines` records changes nothing and says [`Recorded::Full`]; the count
    /// is exact (every store keeps it in the commit that adds a record). On `Ok` the report
    /// is as durable as the store keeps anything. How many reports a batch holds and how
    /// many batches are in flight at once is the writers' policy ([`super::batch`]), from
    /// what [`Records::commits`] says.
    fn record_batch(&self, batch: &[(&Report, &Origin)]) -> Vec<Result<Recorded>>;
    /// What the store's commits can take (a fact of the backend the writers' policy reads;
    /// the store chooses no thread count).
    fn commits(&self) -> Commits;
    /// One machine, with each stage's details (changes, log tail).
    fn machine(&self, id: &str) -> Result<Option<Machine>>;
    /// Hands `visit` the machines matching `filter` whose id sorts after `after` (None:
    /// all), by id, without stage details, one at a time, until it returns false: a listing
    /// of a page, or a count, never holds the whole inventory.
    fn each_machine(
        &self,
        filter: &Filter,
        after: Option<&str>,
        visit: &mut dyn FnMut(Machine) -> bool,
    ) -> Result<()>;
    /// How many machine records the store holds (the count `--max-machines` is checked
    /// against).
    fn machine_count(&self) -> Result<u64>;
    /// Changes one machine's record atomically: `f` gets the record (None: not known) and
    /// returns the new one (None: leave it as it is). Returns what is stored afterwards.
    /// A new record counts against `--max-machines`: at the limit it fails with [`Full`].
    fn update(
        &self,
        id: &str,
        f: &mut dyn FnMut(Option<Machine>) -> Option<Machine>,
    ) -> Result<Option<Machine>>;
    /// Forgets one machine (`DELETE /machines/<id>`: decommissioned): its record and its
    /// stages' details, atomically; it no longer counts against `--max-machines`, and a
    /// later report of it makes a new record. The removed record (None: not known).
    fn remove(&self, id: &str) -> Result<Option<Machine>>;
}

/// A store's network-boot token records (docs/serve.md, "One-time tokens"): one-time boot
/// tokens and the report credentials a config fetch hands out, each kept under the token's
/// SHA-256 ([`token_key`]). Every method is safe to call from many threads at once.
pub trait BootTokens: Send + Sync {
    /// Keeps a new token's record under `key` (the token's SHA-256, hex); forgets records
    /// past their [`BootToken::forget_after`].
    fn put_boot_token(&self, key: &str, t: &BootToken, now: u64) -> Result<()>;
    /// Spends the boot token `key` atomically (one caller of all replicas gets
    /// [`Spend::Spent`]; see [`Spend::decide`]).
    fn spend_boot_token(&self, key: &str, now: u64) -> Result<Spend>;
    /// A token's record, spent or not.
    fn boot_token(&self, key: &str) -> Result<Option<BootToken>>;
    /// Forgets a token's record (one replaced by a newer of the same machine).
    fn forget_boot_token(&self, key: &str) -> Result<()>;
}

/// A rollout's state (docs/serve.md, "Rollouts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutState {
    /// Widening stage by stage as machines on the new config report provisioned.
    Rolling,
    /// Asked to (`agent rollout pause`): no more machines get the new config.
    Paused,
    /// Failures passed the policy's threshold: the next machines get the previous config.
    Halted,
    /// Asked to (`agent rollout abort`): every machine gets the previous config.
    Aborted,
    /// The last stage reached (or promoted): every machine gets the new config.
    Complete,
}

impl RolloutState {
    pub const ALL: [RolloutState; 5] = [
        RolloutState::Rolling,
        RolloutState::Paused,
        RolloutState::Halted,
        RolloutState::Aborted,
        RolloutState::Complete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RolloutState::Rolling => "rolling",
            RolloutState::Paused => "paused",
            RolloutState::Halted => "halted",
            RolloutState::Aborted => "aborted",
            RolloutState::Complete => "complete",
        }
    }
}

/// A machine given a rollout's new config, and when (seconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutMachine {
    pub id: String,
    pub given: u64,
    /// The stage it was given the new config in.
    pub stage: usize,
}

/// Why a rollout halted: when, at which stage, and the machines that failed with their
/// errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Halt {
    pub at: u64,
    pub stage: usize,
    pub reason: String,
    pub machines: Vec<FailedMachine>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedMachine {
    pub id: String,
    pub error: String,
}

/// One pool's rollout from config `from` (lastKnownGood's) to config `to` (the active
/// generation's), both by config hash: the state every replica decides from, kept in the
/// inventory store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    pub pool: String,
    pub from: String,
    pub to: String,
    pub state: RolloutState,
    /// The stage (an index into the policy's steps).
    pub stage: usize,
    pub started: u64,
    /// When the state or stage last changed.
    pub changed: u64,
    /// The machines given the new config, in the order they were.
    pub machines: Vec<RolloutMachine>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt: Option<Halt>,
}

/// A store's rollout records, one per pool (docs/serve.md, "Rollouts"). Every method is
/// safe to call from many threads and replicas at once.
pub trait Rollouts: Send + Sync {
    /// Pool `pool`'s rollout record.
    fn rollout(&self, pool: &str) -> Result<Option<Rollout>>;
    /// Changes pool `pool`'s rollout record atomically (compare-and-swap: `f` may be called
    /// again when another writer changed it meanwhile): `f` gets the record (None: none)
    /// and returns the new one (None: leave it). Returns what is stored afterwards.
    fn update_rollout(
        &self,
        pool: &str,
        f: &mut dyn FnMut(Option<Rollout>) -> Option<Rollout>,
    ) -> Result<Option<Rollout>>;
}

/// Where the inventory lives (`--inventory-store`): the machine records, the token records
/// and the rollout records of one backend, and whether that backend works.
pub trait Store: Records + BootTokens + Rollouts {
    /// Whether the store works, as its operations (and probes) found (`super::health`).
    fn health(&self) -> &Health;
    /// Asks the store whether it works now, for [`Store::health`] (`super::health::check`
    /// calls it on a thread of its own: it may take seconds).
    fn probe(&self);
}

/// Records one report: a batch of one ([`Records::record_batch`]).
pub fn record(store: &(impl Records + ?Sized), r: &Report, origin: &Origin) -> Result<Recorded> {
    store
        .record_batch(&[(r, origin)])
        .pop()
        .unwrap_or_else(|| Err(anyhow!("the store gave no answer")))
}

/// The machines matching `filter`, by id, without stage details (all of them: at
/// `--max-machines` that is the whole inventory; listings page with
/// [`Records::each_machine`]).
pub fn machines(store: &(impl Records + ?Sized), filter: &Filter) -> Result<Vec<Machine>> {
    let mut out = Vec::new();
    store.each_machine(filter, None, &mut |m| {
        out.push(m);
        true
    })?;
    Ok(out)
}

/// Machines by state and pool (for metrics and `/machines/summary`), counted one record at a
/// time; a machine with no report yet as [`model::State::Booted`].
pub fn counts(store: &(impl Records + ?Sized)) -> Result<Counts> {
    let mut map = std::collections::BTreeMap::<(model::State, String), u64>::new();
    store.each_machine(&Filter::default(), None, &mut |m| {
        *map.entry((m.current(), m.pool.unwrap_or_default()))
            .or_insert(0) += 1;
        true
    })?;
    Ok(map.into_iter().collect())
}
