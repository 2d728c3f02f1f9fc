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
    /// `id`, `bootId` and `machine.id`: letters, digits and `.:_-` only.
    pub const ID_BYTES: usize = 128;
    /// Every other string (serial, hostname, platform, config name, a partition, ...).
    pub const STRING_BYTES: usize = 256;
    /// One entry of `changes.paths`.
    pub const PATH_BYTES: usize = 4096;
    /// `changes.paths` entries (more are counted in `pathsTruncated` by the agent).
    pub const PATHS: usize = report_format::MAX_PATHS;
    /// Entries of each of `partitions.{created,kept,deleted}` and `filesystems.{made,reused}`.
    pub const DEVICES: usize = 128;
    /// `machine.macs` entries.
    pub const MACS: usize = 64;
    /// One `machine.macs` entry (a 20-byte InfiniBand address is 59 characters).
    pub const MAC_BYTES: usize = 64;
    /// `error` (one line).
    pub const ERROR_BYTES: usize = 4096;
    /// `logTail` lines.
    pub const LOG_LINES: usize = 50;
    /// One `logTail` line.
    pub const LOG_LINE_BYTES: usize = 1024;
    /// Boots kept per machine (the oldest is dropped).
    pub const BOOTS: usize = 10;
    /// Report ids kept per machine to recognise a retried report.
    pub const RECENT_IDS: usize = 64;
    /// A stage's error as the record keeps it (the whole error is in its details).
    pub const RECORD_ERROR_BYTES: usize = 512;
    /// A machine's record (without its details), as stored (JSON), at most: every field
    /// above at its limit (checked by a test).
    pub const RECORD_BYTES: usize = 64 * 1024;
    /// A machine's stored details (changes, log tails, whole errors), all its stages
    /// together: beyond it the oldest stages' details are dropped (their outcome, duration
    /// and error stay in the record). The newest report's details are always kept.
    pub const DETAIL_BYTES: usize = 256 * 1024;
    /// Report credentials kept per machine (each config fetch issues one): its current
    /// boot's and the one before, so a report queued in the previous boot is still taken.
    pub const REPORT_CREDENTIALS: usize = 2;
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
    /// `agent install` wrote the OS image (its `install` report): the installed system has
    /// not reported yet.
    Installed,
    /// The installed system came up (its `running` report).
    Running,
    /// Installed or provisioned, but no `running` report within `--running-deadline`:
    /// never stored, derived when the inventory is read ([`standing`]).
    Unresponsive,
    /// Network-booted (`/ipxe`), no report that counts for it yet. A record keeps it as no
    /// state (`null`, as records always have): [`Machine::current`] names it.
    Booted,
}

impl State {
    /// Every state; a new one goes last, so none of the others moves.
    pub const ALL: [State; 9] = [
        State::Fetching,
        State::Provisioning,
        State::Provisioned,
        State::Failed,
        State::Unassigned,
        State::Installed,
        State::Running,
        State::Unresponsive,
        State::Booted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Fetching => "fetching",
            State::Provisioning => "provisioning",
            State::Provisioned => "provisioned",
            State::Failed => "failed",
            State::Unassigned => "unassigned",
            State::Installed => "installed",
            State::Running => "running",
            State::Unresponsive => "unresponsive",
            State::Booted => "booted",
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
                let all: Vec<&str> = State::ALL.iter().map(|st| st.as_str()).collect();
                format!("unknown state {s:?} ({})", all.join(", "))
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
    /// The pool of the credential the report carried, when it carried a valid one (a pool's
    /// bearer token, or the machine's report credential); the record then takes its pool
    /// from here, not from the body. `None`: unauthenticated.
    pub token_pool: Option<String>,
    /// Set when the credential was the report credential that the machine's config fetch
    /// (`/machine-config`) issued for this very machine: when its one-time boot token was
    /// issued (the server's clock). Only such a report speaks for the machine's install
    /// state (docs/reports.md, "Who may change a record").
    pub machine_issued: Option<u64>,
    /// The server's clock when the report arrived (seconds since the Unix epoch).
    pub received: u64,
}

impl Origin {
    /// What the report's credential proves.
    pub fn trust(&self) -> Trust {
        if self.machine_issued.is_some() {
            Trust::Machine
        } else if self.token_pool.is_some() {
            Trust::Pool
        } else {
            Trust::None
        }
    }
}

/// What a report's credential proves (docs/reports.md, "Who may change a record"): nothing
/// (no credential: anyone on the machine network may have sent it), membership of a pool (a
/// pool's bearer token, which every machine of the pool holds), or this machine (the report
/// credential its own config fetch was given).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Trust {
    #[default]
    None,
    Pool,
    Machine,
}

impl Trust {
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::None => "none",
            Trust::Pool => "pool",
            Trust::Machine => "machine",
        }
    }
}

/// A machine's install, as the server has evidence of it: the final stage reported ok with
/// the report credential of a config fetch (`/machine-config`) of this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Install {
    /// When the final report arrived (the server's clock).
    pub at: u64,
    /// The boot that installed it.
    pub boot_id: String,
    /// When the boot token of that boot was issued.
    pub issued: u64,
}

/// The keys (SHA-256, hex) of a machine's current boot token and report credentials, so a
/// new one replaces the old (at most one boot token, [`limits::REPORT_CREDENTIALS`] report
/// credentials per machine). Never shown: listings leave it out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
    /// Oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub report: Vec<String>,
}

impl TokenKeys {
    pub fn is_empty(&self) -> bool {
        self.boot.is_none() && self.report.is_empty()
    }
}

/// The server's record of one machine. Listings carry it without [`StageRecord::detail`];
/// [`Records::machine`](super::store::Records::machine) fills that in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    pub id: String,
    #[serde(serialize_with = "stored::identity")]
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
    /// The most a report has proved of this machine so far: reports that prove less add
    /// to its history only (docs/reports.md, "Who may change a record").
    #[serde(default)]
    pub trust: Trust,
    /// Installed, on evidence the server holds ([`Install`]); None: not (yet, or a record
    /// from before install evidence was kept: see [`Machine::installed`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<Install>,
    /// 0: a record written before trust and install evidence were kept; 1: now.
    #[serde(default)]
    pub format: u8,
    #[serde(default, skip_serializing_if = "TokenKeys::is_empty")]
    pub tokens: TokenKeys,
    /// The config a rollout gave it at its last network boot (docs/serve.md, "Rollouts"):
    /// a machine that fetches again during that rollout gets the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Given>,
}

/// What a rollout gave a machine: the pool, the rollout (by its new config's hash) and the
/// config it was given (the new one's hash or the previous one's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Given {
    pub pool: String,
    pub rollout: String,
    pub config: String,
}

impl Machine {
    /// A new record of machine `id`, first seen at `now`.
    pub fn new(id: &str, now: u64) -> Machine {
        Machine {
            id: id.to_string(),
            first_seen: now,
            format: 1,
            ..Machine::default()
        }
    }

    /// Its state as every answer names it: a record without one is [`State::Booted`].
    pub fn current(&self) -> State {
        self.state.unwrap_or(State::Booted)
    }

    /// Whether its next network boot goes to the local disk, once no reprovision is asked
    /// for: an install the server has evidence of, or a record from before that evidence
    /// was kept that ended provisioned (kept installed across the upgrade: never made
    /// again for want of evidence it could not have).
    pub fn installed(&self) -> bool {
        self.install.is_some() || (self.format == 0 && self.state == Some(State::Provisioned))
    }

    /// A record written before trust was kept, read as now: its stages' trust from their
    /// `authenticated` (a pool's, as that is all such a report proved for certain), install
    /// as [`Machine::installed`] says.
    fn upgrade(&mut self) {
        if self.format != 0 {
            return;
        }
        for b in &mut self.boots {
            for s in &mut b.stages {
                if s.authenticated && s.trust == Trust::None {
                    s.trust = Trust::Pool;
                }
            }
        }
        if self.authenticated {
            self.trust = self.trust.max(Trust::Pool);
        }
        if self.install.is_none() && self.state == Some(State::Provisioned) {
            self.install = Some(Install {
                at: self.last_seen,
                boot_id: self
                    .boots
                    .last()
                    .map(|b| b.boot_id.clone())
                    .unwrap_or_default(),
                issued: 0,
            });
        }
        self.format = 1;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Boot {
    pub boot_id: String,
    pub first_seen: u64,
    pub last_seen: u64,
    /// One entry per stage (in stage order); a stage reported twice keeps its most
    /// decisive report (failed over ok over started; a tie: the later).
    pub stages: Vec<StageRecord>,
    /// The kernel release the boot's `running` report named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
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
    /// What the report's credential proved; a stage counts for the machine's state only
    /// at the record's own trust.
    #[serde(default)]
    pub trust: Trust,
    /// Whether the report could speak for the record when it came (a pool token of
    /// another pool than the record's cannot).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub counts: bool,
    /// One line, at most [`limits::RECORD_ERROR_BYTES`] (the whole of it is in the
    /// stage's details); kept in the record so a listing can show why a machine failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The size of the stage's stored details (their JSON), 0 for none or dropped: a
    /// machine's details are kept within [`limits::DETAIL_BYTES`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub detail_bytes: u64,
    /// What the stage changed and its log tail: stored beside the record (one entry per
    /// report), read by [`Records::machine`](super::store::Records::machine), absent from listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The bulky part of a report, stored under its report id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detail {
    #[serde(serialize_with = "stored::changes")]
    pub changes: Changes,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
    /// The stage's error whole, when the record keeps only its start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The report's parts a record keeps, written as records always were (snake_case: a server
/// before camelCase reports reads them, and they read back either way, the wire types
/// taking both names).
mod stored {
    use serde::{Serialize, Serializer};

    use super::{Changes, Filesystems, Identity, Partitions};

    pub fn identity<S: Serializer>(i: &Identity, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Stored<'a> {
            id: &'a str,
            uuid: &'a Option<String>,
            serial: &'a Option<String>,
            macs: &'a [String],
            platform: &'a Option<String>,
            instance_id: &'a Option<String>,
            hostname: &'a Option<String>,
        }
        Stored {
            id: &i.id,
            uuid: &i.uuid,
            serial: &i.serial,
            macs: &i.macs,
            platform: &i.platform,
            instance_id: &i.instance_id,
            hostname: &i.hostname,
        }
        .serialize(s)
    }

    pub fn changes<S: Serializer>(c: &Changes, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Stored<'a> {
            partitions: &'a Partitions,
            filesystems: &'a Filesystems,
            paths: &'a [String],
            #[serde(skip_serializing_if = "is_zero")]
            paths_truncated: u64,
        }
        fn is_zero(n: &u64) -> bool {
            *n == 0
        }
        Stored {
            partitions: &c.partitions,
            filesystems: &c.filesystems,
            paths: &c.paths,
            paths_truncated: c.paths_truncated,
        }
        .serialize(s)
    }
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
    let mut r: Report = serde_json::from_slice(body)
        .map_err(|e| Refused::Invalid(format!("the report is not a valid report: {e}")))?;
    validate(&r)?;
    sanitize(&mut r);
    Ok(r)
}

/// Whether `c` may change how a terminal or a page shows what follows it: C0 and C1
/// controls, DEL, and the bidirectional overrides and isolates.
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every [`is_unsafe_char`] replaced (a tab by a space, any other by `?`), never
/// longer than it was.
fn clean(s: &mut String) {
    // Only a byte below 0x20, DEL or a multi-byte sequence can be one.
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) || !s.chars().any(is_unsafe_char) {
        return;
    }
    *s = s
        .chars()
        .map(|c| match c {
            '\t' => ' ',
            c if is_unsafe_char(c) => '?',
            c => c,
        })
        .collect();
}

/// Replaces control characters in every string of the report ([`clean`]): the inventory
/// is read on terminals (`agent machines`) and in browsers, and a report's text is the
/// machine's word only.
fn sanitize(r: &mut Report) {
    let opt = |s: &mut Option<String>| {
        if let Some(s) = s {
            clean(s)
        }
    };
    let m = &mut r.machine;
    for s in [
        &mut r.sent,
        &mut m.uuid,
        &mut m.serial,
        &mut m.platform,
        &mut m.instance_id,
        &mut m.hostname,
        &mut r.agent,
        &mut r.error,
        &mut r.kernel,
    ] {
        opt(s);
    }
    if let Some(c) = &mut r.config {
        for s in [&mut c.pool, &mut c.name, &mut c.hash] {
            opt(s);
        }
    }
    let ch = &mut r.changes;
    for list in [
        &mut m.macs,
        &mut ch.partitions.created,
        &mut ch.partitions.kept,
        &mut ch.partitions.deleted,
        &mut ch.filesystems.made,
        &mut ch.filesystems.reused,
        &mut ch.paths,
        &mut r.log_tail,
    ] {
        list.iter_mut().for_each(clean);
    }
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
    check_id("bootId", &r.boot_id)?;
    check_id("machine.id", &r.machine.id)?;
    check_opt("sent", &r.sent)?;
    let m = &r.machine;
    check_opt("machine.uuid", &m.uuid)?;
    check_opt("machine.serial", &m.serial)?;
    check_opt("machine.platform", &m.platform)?;
    check_opt("machine.instanceId", &m.instance_id)?;
    check_opt("machine.hostname", &m.hostname)?;
    let s = limits::STRING_BYTES;
    check_list(
        "machine.macs",
        &m.macs,
        limits::MACS,
        "MAC",
        limits::MAC_BYTES,
        "MAC length",
    )?;
    check_opt("agent", &r.agent)?;
    check_opt("kernel", &r.kernel)?;
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
        "logTail",
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
        error: long_error(r).map(str::to_string),
    }
}

/// The report's error when the record keeps only its start.
fn long_error(r: &Report) -> Option<&str> {
    r.error
        .as_deref()
        .filter(|e| e.len() > limits::RECORD_ERROR_BYTES)
}

/// [`detail`] as stored (JSON), without copying the report's lists first.
pub fn detail_json(r: &Report) -> serde_json::Result<Vec<u8>> {
    #[derive(Serialize)]
    struct Borrowed<'a> {
        #[serde(serialize_with = "stored::changes")]
        changes: &'a Changes,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        log_tail: &'a [String],
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
    }
    serde_json::to_vec(&Borrowed {
        changes: &r.changes,
        log_tail: &r.log_tail,
        error: long_error(r),
    })
}

/// Whether a report has a [`Detail`] worth a record of its own: a stage that changed
/// nothing and sent no log lines (most fetch and disks stages) has none, and the embedded
/// store writes no record for it (it reads a missing one as the empty [`Detail`]).
pub fn has_detail(r: &Report) -> bool {
    !r.log_tail.is_empty() || r.changes != Changes::default() || long_error(r).is_some()
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
/// `running` ok: running; a provisioning stage ok as the final one: provisioned; `install`
/// ok as the final stage: installed; a stage ok: provisioning; only a fetch started:
/// fetching. It does not depend on the order the reports arrived in.
pub fn boot_state(b: &Boot) -> Option<State> {
    let ok = |s: &&StageRecord| s.outcome == Outcome::Ok;
    if b.stages.iter().any(|s| s.outcome == Outcome::Failed) {
        Some(State::Failed)
    } else if b
        .stages
        .iter()
        .filter(ok)
        .any(|s| s.stage == Stage::Running)
    {
        Some(State::Running)
    } else if b
        .stages
        .iter()
        .filter(ok)
        .any(|s| s.last && s.stage != Stage::Install)
    {
        Some(State::Provisioned)
    } else if b.stages.iter().filter(ok).any(|s| s.last) {
        Some(State::Installed)
    } else if b.stages.iter().any(|s| ok(&s)) {
        Some(State::Provisioning)
    } else if b.stages.iter().any(|s| s.outcome == Outcome::Started) {
        Some(State::Fetching)
    } else {
        None
    }
}

/// Whether a report of trust `t` (and pool `pool`) may speak for a record that has `m`'s
/// trust and pool: change its identity, pool and state (docs/reports.md, "Who may change a
/// record"). The machine's own credential always may; a pool's token when the record has
/// proved no more, and of the same pool once it has; no credential only while the record
/// has none either.
fn speaks_for(m: &Machine, t: Trust, pool: Option<&str>) -> bool {
    match (t, m.trust) {
        (Trust::Machine, _) => true,
        (Trust::Pool, Trust::None) => true,
        (Trust::Pool, Trust::Pool) => m.pool.is_none() || m.pool.as_deref() == pool,
        (Trust::None, Trust::None) => true,
        _ => false,
    }
}

/// `s` cut to at most `max` bytes at a character boundary, with `…` when cut.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The size of [`detail_json`] for `r` (0 when it has none, [`has_detail`]).
pub fn detail_size(r: &Report) -> u64 {
    if !has_detail(r) {
        return 0;
    }
    detail_json(r).map_or(0, |b| b.len() as u64)
}

/// The state of a record: its newest boot that has a stage counting at the record's trust,
/// from those stages.
fn record_state(m: &Machine) -> Option<State> {
    m.boots.iter().rev().find_map(|b| {
        let counted: Vec<StageRecord> = b
            .stages
            .iter()
            .filter(|s| s.counts && s.trust >= m.trust)
            .cloned()
            .collect();
        (!counted.is_empty()).then(|| {
            boot_state(&Boot {
                stages: counted,
                ..Boot::default()
            })
        })?
    })
}

/// Folds one report into a machine's record (`m` is `None` for a machine not seen before).
/// A report whose id the record knows changes nothing ([`Applied::Duplicate`]).
///
/// Every report adds to the machine's history (its boots and stages, each marked with what
/// its credential proved); only one that [`speaks_for`] the record changes its identity,
/// pool, applied config and state; only the machine's own report credential changes its
/// install ([`Install`]), and only with a credential issued since the last reprovision
/// request, so a report queued in an earlier boot never clears a later request.
pub fn apply(m: Option<Machine>, r: &Report, origin: &Origin) -> (Machine, Applied) {
    let mut m = m.unwrap_or_else(|| Machine::new(&r.machine.id, origin.received));
    m.upgrade();
    if m.recent_ids.contains(&r.id) {
        return (m, Applied::Duplicate);
    }
    let trust = origin.trust();
    let authenticated = trust != Trust::None;
    let body_pool = r.config.as_ref().and_then(|c| c.pool.clone());
    let pool = origin.token_pool.clone().or(body_pool);
    let speaks = speaks_for(&m, trust, origin.token_pool.as_deref());
    m.last_seen = m.last_seen.max(origin.received);
    if speaks {
        m.trust = trust;
        m.identity = r.machine.clone();
        m.authenticated = authenticated;
        m.pool = pool;
        if r.config.is_some() {
            m.config = r.config.clone();
        }
        if r.agent.is_some() {
            m.agent = r.agent.clone();
        }
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
    let detail_bytes = detail_size(r);
    let boot = &mut m.boots[bi];
    boot.last_seen = boot.last_seen.max(origin.received);
    if r.stage == Stage::Running && r.kernel.is_some() && speaks {
        boot.kernel = r.kernel.clone();
    }
    let entry = StageRecord {
        stage: r.stage,
        outcome: r.outcome,
        last: r.last,
        duration_ms: r.duration_ms,
        report_id: r.id.clone(),
        received: origin.received,
        authenticated,
        trust,
        counts: speaks,
        error: r
            .error
            .as_deref()
            .map(|e| cut(e, limits::RECORD_ERROR_BYTES)),
        detail_bytes,
        detail: None,
    };
    // A stage reported again replaces its entry unless the entry is more decisive, or the
    // new report proves less than the entry's.
    let store = match boot.stages.iter().position(|s| s.stage == r.stage) {
        Some(i)
            if rank(boot.stages[i].outcome) > rank(r.outcome)
                || (boot.stages[i].trust > trust && boot.stages[i].counts) =>
        {
            None
        }
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
    trim_details(&mut m, store.as_ref(), &mut drop);
    // A report applied again (a retry older than the recent ids) replaces its own entry:
    // its details are stored, not dropped.
    drop.retain(|id| Some(id) != store.as_ref());
    m.state = record_state(&m);
    // Install evidence: the final stage ok, reported with this machine's credential, from
    // a boot whose token was issued since the last reprovision request.
    if let Some(issued) = origin.machine_issued
        && r.last
        && r.outcome == Outcome::Ok
        && m.reprovision.is_none_or(|asked| issued >= asked)
    {
        m.install = Some(Install {
            at: origin.received,
            boot_id: r.boot_id.clone(),
            issued,
        });
        m.reprovision = None;
    }
    (m, Applied::Recorded { store, drop })
}

/// Keeps `m`'s details within DETAIL_BYTES: the oldest stages' go first (their report ids
/// pushed on `drop`), never `keep`'s (the new one's).
fn trim_details(m: &mut Machine, keep: Option<&String>, drop: &mut Vec<String>) {
    let mut total: u64 = m
        .boots
        .iter()
        .flat_map(|b| &b.stages)
        .map(|s| s.detail_bytes)
        .sum();
    'trim: for b in &mut m.boots {
        for s in &mut b.stages {
            if total <= limits::DETAIL_BYTES as u64 {
                break 'trim;
            }
            if s.detail_bytes > 0 && Some(&s.report_id) != keep {
                total -= s.detail_bytes;
                s.detail_bytes = 0;
                drop.push(s.report_id.clone());
            }
        }
    }
}

/// `--running-deadline` at a time: a machine installed or provisioned more than `after`
/// seconds before `now` without a `running` report since is [`State::Unresponsive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub after: u64,
    pub now: u64,
}

/// The state a reader shows of `m` ([`Machine::state`], or [`State::Unresponsive`] past
/// `deadline`): when its record entered installed or provisioned (the report that put
/// it there), more than the deadline ago, it never came up.
pub fn standing(m: &Machine, deadline: Option<Deadline>) -> Option<State> {
    let (Some(d), Some(st @ (State::Installed | State::Provisioned))) = (deadline, m.state) else {
        return m.state;
    };
    // The newest boot's final report: when the machine got where it is.
    let since = m
        .boots
        .iter()
        .rev()
        .find_map(|b| b.stages.iter().filter(|s| s.last).map(|s| s.received).max());
    match since {
        Some(t) if d.now.saturating_sub(t) > d.after => Some(State::Unresponsive),
        _ => Some(st),
    }
}

/// Which machines a listing returns (`None`: any); `deadline`: `--running-deadline`, for
/// [`standing`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub pool: Option<String>,
    pub state: Option<State>,
    pub deadline: Option<Deadline>,
}

impl Filter {
    pub fn matches(&self, m: &Machine) -> bool {
        self.pool
            .as_ref()
            .is_none_or(|p| m.pool.as_ref() == Some(p))
            && self
                .state
                .is_none_or(|s| standing(m, self.deadline).unwrap_or(State::Booted) == s)
    }
}

/// Machines by state and pool (for metrics): ((state, pool or ""), count), sorted.
pub type Counts = Vec<((State, String), u64)>;

#[cfg(test)]
mod tests {
    use super::*;

    fn report(id: &str, boot: &str, stage: &str, outcome: &str, last: bool) -> Report {
        report_with(id, boot, stage, outcome, last, serde_json::json!({}))
    }

    fn report_with(
        id: &str,
        boot: &str,
        stage: &str,
        outcome: &str,
        last: bool,
        extra: serde_json::Value,
    ) -> Report {
        let mut v = serde_json::json!({
            "format": 1, "id": id, "boot_id": boot,
            "machine": {"id": "m-1", "hostname": "node-1", "macs": ["52:54:00:12:34:56"]},
            "config": {"pool": "worker"},
            "stage": stage, "outcome": outcome, "final": last,
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        parse(v.to_string().as_bytes()).unwrap()
    }

    fn anon(at: u64) -> Origin {
        Origin {
            received: at,
            ..Origin::default()
        }
    }

    fn pool(p: &str, at: u64) -> Origin {
        Origin {
            token_pool: Some(p.into()),
            received: at,
            ..Origin::default()
        }
    }

    fn machine(issued: u64, at: u64) -> Origin {
        Origin {
            token_pool: Some("worker".into()),
            machine_issued: Some(issued),
            received: at,
        }
    }

    fn fold(m: Option<Machine>, r: &Report, o: &Origin) -> Machine {
        apply(m, r, o).0
    }

    /// The three stages of one boot, reported with `o`.
    fn boot(m: Option<Machine>, boot: &str, o: &Origin) -> Machine {
        let m = fold(
            m,
            &report(&format!("{boot}-f"), boot, "fetch", "ok", false),
            o,
        );
        let m = fold(
            Some(m),
            &report(&format!("{boot}-d"), boot, "disks", "ok", false),
            o,
        );
        fold(
            Some(m),
            &report(&format!("{boot}-x"), boot, "files", "ok", true),
            o,
        )
    }

    /// A network install as the server sees it: the live boot's `install` report
    /// (installed, and install evidence: the next boot is local), the installed system's
    /// first boot (provisioned), its `running` report (running, with its kernel); one that
    /// never came up is unresponsive past the deadline, at read time only.
    #[test]
    fn installed_provisioned_then_running() {
        let o = machine(5, 100);
        let m = fold(None, &report("i", "live", "install", "ok", true), &o);
        assert_eq!(m.state, Some(State::Installed));
        assert!(m.installed());
        let late = Deadline {
            after: 60,
            now: 161,
        };
        assert_eq!(standing(&m, Some(late)), Some(State::Unresponsive));
        assert_eq!(
            standing(&m, Some(Deadline { now: 160, ..late })),
            Some(State::Installed)
        );
        assert_eq!(standing(&m, None), Some(State::Installed));
        let o2 = machine(5, 200);
        let m = boot(Some(m), "first", &o2);
        assert_eq!(m.state, Some(State::Provisioned));
        assert_eq!(
            standing(
                &m,
                Some(Deadline {
                    after: 60,
                    now: 250
                })
            ),
            Some(State::Provisioned)
        );
        assert_eq!(
            standing(
                &m,
                Some(Deadline {
                    after: 60,
                    now: 261
                })
            ),
            Some(State::Unresponsive)
        );
        let filter = |state| Filter {
            state: Some(state),
            deadline: Some(Deadline {
                after: 60,
                now: 261,
            }),
            ..Filter::default()
        };
        assert!(filter(State::Unresponsive).matches(&m));
        assert!(!filter(State::Provisioned).matches(&m));
        let m = fold(
            Some(m),
            &report_with(
                "r",
                "first",
                "running",
                "ok",
                true,
                serde_json::json!({"kernel": "6.1.0-13-amd64"}),
            ),
            &machine(5, 300),
        );
        assert_eq!(m.state, Some(State::Running));
        assert_eq!(
            m.boots.last().unwrap().kernel.as_deref(),
            Some("6.1.0-13-amd64")
        );
        assert_eq!(
            standing(
                &m,
                Some(Deadline {
                    after: 60,
                    now: 9999
                })
            ),
            Some(State::Running)
        );
        // A failed install is failed, not installed.
        let f = fold(None, &report("f", "live", "install", "failed", true), &o);
        assert_eq!(f.state, Some(State::Failed));
        assert!(!f.installed());
    }

    #[test]
    fn only_the_machines_credential_installs() {
        // Unauthenticated, or a pool's token: provisioned in the history, not installed.
        for o in [anon(10), pool("worker", 10)] {
            let m = boot(None, "b1", &o);
            assert_eq!(m.state, Some(State::Provisioned));
            assert!(!m.installed(), "{o:?}");
        }
        let m = boot(None, "b1", &machine(5, 10));
        assert!(m.installed());
        assert_eq!(m.trust, Trust::Machine);
        assert_eq!(m.install.as_ref().unwrap().boot_id, "b1");
    }

    #[test]
    fn forged_reports_add_history_only() {
        let m = boot(None, "b1", &machine(5, 10));
        for o in [anon(20), pool("worker", 20), pool("infra", 20)] {
            // A failed fetch of a new boot, with another hostname and pool.
            let forged = report_with(
                "forged-1",
                "forged",
                "fetch",
                "failed",
                false,
                serde_json::json!({"machine": {"id": "m-1", "hostname": "evil"},
                    "config": {"pool": "infra"}, "error": "x"}),
            );
            let after = fold(Some(m.clone()), &forged, &o);
            assert_eq!(after.state, Some(State::Provisioned), "{o:?}");
            assert!(after.installed());
            assert_eq!(after.pool.as_deref(), Some("worker"));
            assert_eq!(after.identity.hostname.as_deref(), Some("node-1"));
            assert_eq!((after.authenticated, after.trust), (true, Trust::Machine));
            // ... but it is in the history, marked with what it proved.
            let s = &after.boots.last().unwrap().stages[0];
            assert_eq!((s.trust, s.counts), (o.trust(), false));
        }
    }

    #[test]
    fn a_pool_token_speaks_for_its_pool_only() {
        let m = boot(None, "b1", &pool("worker", 10));
        assert_eq!(m.trust, Trust::Pool);
        let forged = report("o-1", "b2", "fetch", "failed", false);
        let other = fold(Some(m.clone()), &forged, &pool("infra", 20));
        assert_eq!(other.pool.as_deref(), Some("worker"));
        assert_eq!(other.state, Some(State::Provisioned));
        let unauth = fold(Some(m.clone()), &forged, &anon(20));
        assert_eq!(unauth.state, Some(State::Provisioned));
        let same = fold(Some(m), &forged, &pool("worker", 20));
        assert_eq!(same.state, Some(State::Failed));
    }

    #[test]
    fn a_reprovision_ends_only_with_a_boot_issued_since() {
        let mut m = boot(None, "b1", &machine(5, 10));
        m.reprovision = Some(100);
        // A report queued in the earlier boot (its credential issued before the request).
        let late = report("late-x", "b1", "files", "ok", true);
        let m = fold(Some(m), &late, &machine(5, 120));
        assert_eq!(m.reprovision, Some(100));
        // Forged, unauthenticated: no.
        let m = boot(Some(m), "b2", &anon(130));
        assert_eq!(m.reprovision, Some(100));
        // A boot whose token was issued since: done.
        let m = boot(Some(m), "b3", &machine(140, 150));
        assert_eq!(m.reprovision, None);
        assert_eq!(m.install.as_ref().unwrap().boot_id, "b3");
        // A failure later does not uninstall it.
        let m = fold(
            Some(m),
            &report("f-1", "b4", "fetch", "failed", false),
            &machine(160, 170),
        );
        assert!(m.installed());
        assert_eq!(m.state, Some(State::Failed));
    }

    #[test]
    fn records_from_before_trust_stay_installed() {
        // A record as an older server wrote it: no trust, no install, no format.
        let old = serde_json::json!({
            "id": "m-1", "identity": {"id": "m-1"}, "first_seen": 1, "last_seen": 2,
            "pool": "worker", "state": "provisioned", "authenticated": true, "reports": 3,
            "boots": [{"boot_id": "b1", "first_seen": 1, "last_seen": 2, "stages": [
                {"stage": "files", "outcome": "ok", "final": true, "duration_ms": 1,
                 "report_id": "r1", "received": 2, "authenticated": true}]}],
            "recent_ids": ["r1"]
        });
        let m: Machine = serde_json::from_value(old).unwrap();
        assert!(m.installed());
        let m = fold(
            Some(m),
            &report("x", "b2", "fetch", "failed", false),
            &anon(3),
        );
        assert!(m.installed());
        assert_eq!(m.state, Some(State::Provisioned));
        assert_eq!(m.format, 1);
    }

    /// A record is stored as records were before the API went camelCase (snake_case keys,
    /// the report's parts too), and such a record reads back the same.
    #[test]
    fn records_keep_their_stored_form() {
        let r = report_with(
            "s-1",
            "b1",
            "files",
            "ok",
            true,
            serde_json::json!({"machine": {"id": "m-1", "instance_id": "i-1"},
                "changes": {"paths": ["/a"], "pathsTruncated": 2}, "log_tail": ["x"]}),
        );
        let m = fold(None, &r, &anon(5));
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["identity"]["instance_id"], "i-1", "{v}");
        assert!(v["identity"].get("instanceId").is_none(), "{v}");
        assert_eq!(v["first_seen"], 5);
        assert!(v["recent_ids"].is_array());
        let d = serde_json::to_value(detail(&r)).unwrap();
        assert_eq!(d["changes"]["paths_truncated"], 2, "{d}");
        assert_eq!(d["log_tail"][0], "x");
        let bytes = detail_json(&r).unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            d
        );
        let back: Machine = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
        let back: Detail = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, detail(&r));
    }

    #[test]
    fn control_characters_never_reach_the_record() {
        let r = report_with(
            "c-1",
            "b1",
            "fetch",
            "failed",
            false,
            serde_json::json!({
                "machine": {"id": "m-1", "hostname": "a\u{1b}]0;pwned\u{7}b",
                    "serial": "x\nforged-row", "macs": ["\u{202e}52:54"]},
                "error": "tab\there \u{9b}31m", "log_tail": ["l\u{2066}ine\r"],
            }),
        );
        let v = serde_json::to_string(&r).unwrap();
        for bad in [
            '\u{1b}', '\u{7}', '\n', '\r', '\t', '\u{9b}', '\u{202e}', '\u{2066}',
        ] {
            assert!(!v.contains(bad), "{bad:?} in {v}");
        }
        assert_eq!(r.machine.hostname.as_deref(), Some("a?]0;pwned?b"));
        assert_eq!(r.error.as_deref(), Some("tab here ?31m"));
    }

    #[test]
    fn a_record_and_its_details_stay_within_their_bytes() {
        // Every field at its limit, every boot with every stage, each with the largest error
        // and details a report may carry.
        let mac = "m".repeat(limits::MAC_BYTES);
        let s = "s".repeat(limits::STRING_BYTES);
        let id = |p: &str, i: usize| format!("{p}{i:0>w$}", w = limits::ID_BYTES - p.len());
        let mut m = None;
        let mut n = 0;
        for b in 0..limits::BOOTS + 2 {
            for (stage, last) in [("fetch", false), ("disks", false), ("files", true)] {
                n += 1;
                let r = report_with(
                    &id("r", n),
                    &id("b", b),
                    stage,
                    "failed",
                    last,
                    serde_json::json!({
                        "machine": {"id": "m-1", "uuid": s, "serial": s, "platform": s,
                            "instance_id": s, "hostname": s, "macs": vec![&mac; limits::MACS]},
                        "agent": s, "sent": s,
                        "config": {"pool": s, "name": s, "hash": s},
                        "error": "e".repeat(limits::ERROR_BYTES),
                        "log_tail": vec!["l".repeat(limits::LOG_LINE_BYTES); limits::LOG_LINES],
                        "changes": {"paths": vec!["p".repeat(limits::PATH_BYTES); 45]},
                    }),
                );
                let (next, applied) = apply(m, &r, &machine(1, n as u64));
                assert!(matches!(applied, Applied::Recorded { store: Some(_), .. }));
                m = Some(next);
            }
        }
        let m = m.unwrap();
        let bytes = serde_json::to_vec(&m).unwrap().len();
        assert!(
            bytes <= limits::RECORD_BYTES,
            "record {bytes} bytes > {}",
            limits::RECORD_BYTES
        );
        let details: u64 = m
            .boots
            .iter()
            .flat_map(|b| &b.stages)
            .map(|s| s.detail_bytes)
            .sum();
        assert!(
            details > 0 && details <= limits::DETAIL_BYTES as u64,
            "{details}"
        );
        eprintln!("the largest record: {bytes} bytes, its details {details} bytes");
    }
}
