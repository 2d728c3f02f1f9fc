//! The report a machine sends and the record the server keeps of it (docs/reports.md).
//!
//! [`parse`] reads a report body into [`Report`]: only the documented fields, each bounded
//! ([`limits`]); anything else in the body is dropped. [`apply`] folds one report into a
//! machine's record ([`Machine`]); it is a plain function of (record, report), so every store
//! runs the same rules inside its own atomic read-modify-write.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The bounds on a report, each named in the error that refuses it (docs/reports.md, "Limits").
pub mod limits {
    /// A report body (`--max-body-bytes` by default).
    pub const BODY_BYTES: usize = 256 * 1024;
    /// `id`, `boot_id` and `machine.id`: letters, digits and `.:_-` only.
    pub const ID_BYTES: usize = 128;
    /// Every other string (serial, hostname, platform, config name, a partition, ...).
    pub const STRING_BYTES: usize = 256;
    /// One entry of `changes.paths`.
    pub const PATH_BYTES: usize = 4096;
    /// `changes.paths` entries (more are counted in `paths_truncated` by the agent).
    pub const PATHS: usize = report_format::MAX_PATHS;
    /// Entries of each of `partitions.{created,kept,deleted}` and `filesystems.{made,reused}`.
    pub const DEVICES: usize = 128;
    /// `machine.macs` entries.
    pub const MACS: usize = 64;
    /// `error` (one line).
    pub const ERROR_BYTES: usize = 4096;
    /// `log_tail` lines.
    pub const LOG_LINES: usize = 50;
    /// One `log_tail` line.
    pub const LOG_LINE_BYTES: usize = 1024;
    /// Boots kept per machine (the oldest is dropped).
    pub const BOOTS: usize = 10;
    /// Report ids kept per machine to recognise a retried report.
    pub const RECENT_IDS: usize = 64;
}

/// Why a report body is refused. `TooLarge` is the body limit (HTTP 413); `Invalid` is any
/// other (HTTP 400). The message names the field and the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    TooLarge(String),
    Invalid(String),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::TooLarge(m) | Refused::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Refused {}

/// The report's wire types, one definition shared with the agent (crates/report-format).
pub use report_format::{
    AppliedConfig, Changes, Filesystems, Identity, Outcome, Partitions, Report, Stage,
};

/// A machine's state (docs/reports.md, "The inventory").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Fetching,
    Provisioning,
    Provisioned,
    Failed,
    /// Network-booted without a machine file that selects it (`--discovery register`): known,
    /// waiting to be given a pool. Its first report moves it on.
    Unassigned,
}

impl State {
    pub const ALL: [State; 5] = [
        State::Fetching,
        State::Provisioning,
        State::Provisioned,
        State::Failed,
        State::Unassigned,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Fetching => "fetching",
            State::Provisioning => "provisioning",
            State::Provisioned => "provisioned",
            State::Failed => "failed",
            State::Unassigned => "unassigned",
        }
    }
}

impl std::str::FromStr for State {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        State::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                format!("unknown state {s:?} (fetching, provisioning, provisioned, failed)")
            })
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a report came from, as the HTTP layer saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The pool of the bearer token the report carried, when it carried a valid one; the
    /// record then takes its pool from here, not from the body. `None`: unauthenticated.
    pub token_pool: Option<String>,
    /// The server's clock when the report arrived (seconds since the Unix epoch).
    pub received: u64,
}

/// The server's record of one machine. Listings carry it without [`StageRecord::detail`];
/// [`Store::machine`](super::store::Store::machine) fills that in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub id: String,
    pub identity: Identity,
    /// Seconds since the Unix epoch (the server's clock).
    pub first_seen: u64,
    pub last_seen: u64,
    /// The token's pool when the last report was authenticated, else the body's.
    pub pool: Option<String>,
    pub config: Option<AppliedConfig>,
    pub agent: Option<String>,
    pub state: Option<State>,
    /// Whether the last report carried a valid token.
    pub authenticated: bool,
    /// Reports recorded (each once, whatever the retries).
    pub reports: u64,
    /// The last [`limits::BOOTS`] boots, oldest first.
    pub boots: Vec<Boot>,
    /// The last [`limits::RECENT_IDS`] report ids, oldest first.
    pub recent_ids: Vec<String>,
    /// `agent machines reprovision`: when it was asked for (the server's clock). The machine
    /// installs again at its next network boot, until a boot that began since ends
    /// provisioned (docs/serve.md, "Install once").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reprovision: Option<u64>,
    /// The machine file that selected it at its last network boot (`/ipxe`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_file: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Boot {
    pub boot_id: String,
    pub first_seen: u64,
    pub last_seen: u64,
    /// One entry per stage (in stage order); a stage reported twice keeps its most
    /// decisive report (failed over ok over started; a tie: the later).
    pub stages: Vec<StageRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRecord {
    pub stage: Stage,
    pub outcome: Outcome,
    #[serde(rename = "final")]
    pub last: bool,
    pub duration_ms: u64,
    pub report_id: String,
    pub received: u64,
    pub authenticated: bool,
    /// One line; kept in the record so a listing can show why a machine failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the stage changed and its log tail: stored beside the record (one entry per
    /// report), read by [`Store::machine`](super::store::Store::machine), absent from listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
}

/// The bulky part of a report, stored under its report id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detail {
    pub changes: Changes,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The report's id is among the machine's recent ids: nothing changed.
    Duplicate,
    /// Recorded. `store`: the report id whose [`Detail`] to store (None when the report lost
    /// to a more decisive one of the same stage); `drop`: report ids whose details are no
    /// longer referenced (a replaced stage, a boot dropped from the history).
    Recorded {
        store: Option<String>,
        drop: Vec<String>,
    },
}

/// Parses and checks a report body: at most [`limits::BODY_BYTES`] (the default of
/// `--max-body-bytes`), the documented fields only, every bound of [`limits`].
pub fn parse(body: &[u8]) -> Result<Report, Refused> {
    parse_within(body, limits::BODY_BYTES)
}

/// [`parse`] with the body limit the server runs with (`--max-body-bytes`).
pub fn parse_within(body: &[u8], max_body: usize) -> Result<Report, Refused> {
    if body.len() > max_body {
        return Err(Refused::TooLarge(format!(
            "the report has {} bytes, more than the --max-body-bytes limit ({max_body} bytes)",
            body.len(),
        )));
    }
    let r: Report = serde_json::from_slice(body)
        .map_err(|e| Refused::Invalid(format!("the report is not a valid report: {e}")))?;
    validate(&r)?;
    Ok(r)
}

fn invalid(msg: String) -> Refused {
    Refused::Invalid(msg)
}

fn check_id(field: &str, v: &str) -> Result<(), Refused> {
    if v.is_empty() || v.len() > limits::ID_BYTES {
        return Err(invalid(format!(
            "{field} must have 1 to {} bytes (the id limit), it has {}",
            limits::ID_BYTES,
            v.len()
        )));
    }
    if !v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
    {
        return Err(invalid(format!(
            "{field} may hold only letters, digits and `.:_-`"
        )));
    }
    Ok(())
}

fn check_str(field: &str, v: &str, max: usize, limit: &str) -> Result<(), Refused> {
    if v.len() > max {
        return Err(invalid(format!(
            "{field} has {} bytes, more than the {limit} limit of {max}",
            v.len()
        )));
    }
    Ok(())
}

fn check_opt(field: &str, v: &Option<String>) -> Result<(), Refused> {
    v.as_deref().map_or(Ok(()), |s| {
        check_str(field, s, limits::STRING_BYTES, "string")
    })
}

fn check_list(
    field: &str,
    v: &[String],
    max_n: usize,
    n_limit: &str,
    max_len: usize,
    len_limit: &str,
) -> Result<(), Refused> {
    if v.len() > max_n {
        return Err(invalid(format!(
            "{field} has {} entries, more than the {n_limit} limit of {max_n}",
            v.len()
        )));
    }
    // The entry's name is made only for the error (measured: naming each of a report's 100
    // paths while checking them was half of parsing it, 15.9 against 7.9 us).
    if let Some((i, s)) = v.iter().enumerate().find(|(_, s)| s.len() > max_len) {
        check_str(&format!("{field}[{i}]"), s, max_len, len_limit)?;
    }
    Ok(())
}

fn validate(r: &Report) -> Result<(), Refused> {
    if r.format != 1 {
        return Err(invalid(format!(
            "format {} is not a known report format (1)",
            r.format
        )));
    }
    check_id("id", &r.id)?;
    check_id("boot_id", &r.boot_id)?;
    check_id("machine.id", &r.machine.id)?;
    check_opt("sent", &r.sent)?;
    let m = &r.machine;
    check_opt("machine.uuid", &m.uuid)?;
    check_opt("machine.serial", &m.serial)?;
    check_opt("machine.platform", &m.platform)?;
    check_opt("machine.instance_id", &m.instance_id)?;
    check_opt("machine.hostname", &m.hostname)?;
    let s = limits::STRING_BYTES;
    check_list("machine.macs", &m.macs, limits::MACS, "MAC", s, "string")?;
    check_opt("agent", &r.agent)?;
    if let Some(c) = &r.config {
        check_opt("config.pool", &c.pool)?;
        check_opt("config.name", &c.name)?;
        check_opt("config.hash", &c.hash)?;
    }
    if r.outcome == Outcome::Started && r.stage != Stage::Fetch {
        return Err(invalid(
            "outcome `started` is only for the fetch stage".into(),
        ));
    }
    let c = &r.changes;
    let d = limits::DEVICES;
    check_list(
        "changes.partitions.created",
        &c.partitions.created,
        d,
        "device",
        s,
        "string",
    )?;
    check_list(
        "changes.partitions.kept",
        &c.partitions.kept,
        d,
        "device",
        s,
        "string",
    )?;
    check_list(
        "changes.partitions.deleted",
        &c.partitions.deleted,
        d,
        "device",
        s,
        "string",
    )?;
    check_list(
        "changes.filesystems.made",
        &c.filesystems.made,
        d,
        "device",
        s,
        "string",
    )?;
    check_list(
        "changes.filesystems.reused",
        &c.filesystems.reused,
        d,
        "device",
        s,
        "string",
    )?;
    check_list(
        "changes.paths",
        &c.paths,
        limits::PATHS,
        "path",
        limits::PATH_BYTES,
        "path length",
    )?;
    if let Some(e) = &r.error {
        check_str("error", e, limits::ERROR_BYTES, "error")?;
    }
    check_list(
        "log_tail",
        &r.log_tail,
        limits::LOG_LINES,
        "log line",
        limits::LOG_LINE_BYTES,
        "log line length",
    )?;
    Ok(())
}

/// The part of a report stored beside the machine record.
pub fn detail(r: &Report) -> Detail {
    Detail {
        changes: r.changes.clone(),
        log_tail: r.log_tail.clone(),
    }
}

/// [`detail`] as stored (JSON), without copying the report's lists first.
pub fn detail_json(r: &Report) -> serde_json::Result<Vec<u8>> {
    #[derive(Serialize)]
    struct Borrowed<'a> {
        changes: &'a Changes,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        log_tail: &'a [String],
    }
    serde_json::to_vec(&Borrowed {
        changes: &r.changes,
        log_tail: &r.log_tail,
    })
}

/// Whether a report has a [`Detail`] worth a record of its own: a stage that changed
/// nothing and sent no log lines (most fetch and disks stages) has none, and the embedded
/// store writes no record for it (it reads a missing one as the empty [`Detail`]).
pub fn has_detail(r: &Report) -> bool {
    !r.log_tail.is_empty() || r.changes != Changes::default()
}

/// How decisive an outcome is when a stage is reported twice in one boot.
fn rank(o: Outcome) -> u8 {
    match o {
        Outcome::Started => 0,
        Outcome::Ok => 1,
        Outcome::Failed => 2,
    }
}

/// The state a boot's stages put a machine in (docs/reports.md): any stage failed: failed;
/// the final stage ok: provisioned; a stage ok: provisioning; only a fetch started: fetching.
/// It does not depend on the order the reports arrived in.
pub fn boot_state(b: &Boot) -> Option<State> {
    let ok = |s: &&StageRecord| s.outcome == Outcome::Ok;
    if b.stages.iter().any(|s| s.outcome == Outcome::Failed) {
        Some(State::Failed)
    } else if b.stages.iter().filter(ok).any(|s| s.last) {
        Some(State::Provisioned)
    } else if b.stages.iter().any(|s| ok(&s)) {
        Some(State::Provisioning)
    } else if b.stages.iter().any(|s| s.outcome == Outcome::Started) {
        Some(State::Fetching)
    } else {
        None
    }
}

/// Folds one report into a machine's record (`m` is `None` for a machine not seen before).
/// A report whose id the record knows changes nothing ([`Applied::Duplicate`]).
pub fn apply(m: Option<Machine>, r: &Report, origin: &Origin) -> (Machine, Applied) {
    let mut m = m.unwrap_or_else(|| Machine {
        id: r.machine.id.clone(),
        first_seen: origin.received,
        ..Machine::default()
    });
    if m.recent_ids.contains(&r.id) {
        return (m, Applied::Duplicate);
    }
    let authenticated = origin.token_pool.is_some();
    m.identity = r.machine.clone();
    m.last_seen = m.last_seen.max(origin.received);
    m.authenticated = authenticated;
    m.pool = match &origin.token_pool {
        Some(p) => Some(p.clone()),
        None => r.config.as_ref().and_then(|c| c.pool.clone()),
    };
    if r.config.is_some() {
        m.config = r.config.clone();
    }
    if r.agent.is_some() {
        m.agent = r.agent.clone();
    }
    m.reports += 1;
    m.recent_ids.push(r.id.clone());
    if m.recent_ids.len() > limits::RECENT_IDS {
        let extra = m.recent_ids.len() - limits::RECENT_IDS;
        m.recent_ids.drain(..extra);
    }

    let mut drop = Vec::new();
    let bi = match m.boots.iter().position(|b| b.boot_id == r.boot_id) {
        Some(i) => i,
        None => {
            m.boots.push(Boot {
                boot_id: r.boot_id.clone(),
                first_seen: origin.received,
                ..Boot::default()
            });
            if m.boots.len() > limits::BOOTS {
                let gone = m.boots.remove(0);
                drop.extend(gone.stages.into_iter().map(|s| s.report_id));
            }
            m.boots.len() - 1
        }
    };
    let boot = &mut m.boots[bi];
    boot.last_seen = boot.last_seen.max(origin.received);
    let entry = StageRecord {
        stage: r.stage,
        outcome: r.outcome,
        last: r.last,
        duration_ms: r.duration_ms,
        report_id: r.id.clone(),
        received: origin.received,
        authenticated,
        error: r.error.clone(),
        detail: None,
    };
    let store = match boot.stages.iter().position(|s| s.stage == r.stage) {
        Some(i) if rank(boot.stages[i].outcome) > rank(r.outcome) => None,
        Some(i) => {
            let old = std::mem::replace(&mut boot.stages[i], entry);
            drop.push(old.report_id);
            Some(r.id.clone())
        }
        None => {
            let at = boot.stages.partition_point(|s| s.stage < r.stage);
            boot.stages.insert(at, entry);
            Some(r.id.clone())
        }
    };
    // A report applied again (a retry older than the recent ids) replaces its own entry:
    // its details are stored, not dropped.
    drop.retain(|id| Some(id) != store.as_ref());
    // The state follows the newest boot (the last one to appear).
    m.state = m.boots.last().and_then(boot_state);
    // A reprovision asked for is done once the newest boot ends provisioned.
    if let Some(asked) = m.reprovision
        && m.state == Some(State::Provisioned)
        && m.boots.last().is_some_and(|b| b.first_seen >= asked)
    {
        m.reprovision = None;
    }
    (m, Applied::Recorded { store, drop })
}

/// Which machines a listing returns (`None`: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub pool: Option<String>,
    pub state: Option<State>,
}

impl Filter {
    pub fn matches(&self, m: &Machine) -> bool {
        self.pool
            .as_ref()
            .is_none_or(|p| m.pool.as_ref() == Some(p))
            && self.state.is_none_or(|s| m.state == Some(s))
    }
}

/// Machines by state and pool (for metrics): ((state, pool or ""), count), sorted.
pub type Counts = Vec<((State, String), u64)>;
