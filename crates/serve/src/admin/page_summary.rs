//! What the fleet page (`/ui/`) reads from the inventory in one pass over its records: the
//! counts by state and pool, the failures grouped by cause, the stage durations, and the one
//! page of machines the table shows ([`Scan`]); and what it is asked for ([`Query`]: the
//! filters, the search, the page). Every part is bounded whatever the inventory holds: the
//! page keeps [`ROWS`] records, [`FAILED_SHOWN`] failed machines, [`CAUSES_KEPT`] causes
//! and one duration per machine and stage.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use crate::fleet::inventory::{Machine, State};

use super::PoolView;

/// Machines in one page of the table.
pub const ROWS: usize = 100;
/// Failed machines listed at the top of the first page (the rest: `?state=failed`).
pub const FAILED_SHOWN: usize = 20;
/// Distinct failure causes counted one by one; more are counted together.
pub const CAUSES_KEPT: usize = 200;
/// Machines named under each cause (the rest: its `?cause=` link).
pub const CAUSE_MACHINES: usize = 5;
/// The longest `?q=`, in bytes.
pub const QUERY_BYTES: usize = 200;
/// The slowest machines marked per stage.
pub const SLOWEST: usize = 5;
/// A stage this many times slower than the fleet's median for it is a slow outlier.
pub const OUTLIER_FACTOR: u64 = 3;

/// The states in the page's order: the order of the bar and of the table, which lists
/// failed machines first and finished ones last.
pub const STATES: [&str; 9] = [
    "failed",
    "provisioning",
    "fetching",
    "unassigned",
    "booted",
    "provisioned",
    "installed",
    "running",
    "unresponsive",
];

/// The index of a machine's state in [`STATES`].
pub fn rank(state: Option<State>) -> usize {
    match state {
        Some(State::Failed) => 0,
        Some(State::Provisioning) => 1,
        Some(State::Fetching) => 2,
        Some(State::Unassigned) => 3,
        None | Some(State::Booted) => 4,
        Some(State::Provisioned) => 5,
        Some(State::Installed) => 6,
        Some(State::Running) => 7,
        Some(State::Unresponsive) => 8,
    }
}

/// Where a machine sorts in the table: state (failed first), then seen last first, then id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    rank: usize,
    seen: Reverse<u64>,
    id: String,
}

impl Key {
    pub fn of(m: &Machine) -> Key {
        Key {
            rank: rank(m.state),
            seen: Reverse(m.last_seen),
            id: m.id.clone(),
        }
    }

    /// The key as `?after=`/`?before=` carry it: `RANK.LASTSEEN.ID`.
    pub fn cursor(&self) -> String {
        format!("{}.{}.{}", self.rank, self.seen.0, self.id)
    }

    fn parse(s: &str) -> Option<Key> {
        let mut it = s.splitn(3, '.');
        let rank = it.next()?.parse().ok().filter(|r| *r < STATES.len())?;
        let seen = it.next()?.parse().ok()?;
        let id = it.next()?.to_string();
        (!id.is_empty() && id.len() <= crate::fleet::inventory::limits::ID_BYTES).then_some(Key {
            rank,
            seen: Reverse(seen),
            id,
        })
    }
}

/// What the page is asked for: filters that combine (state, pool, cause, search) and which
/// page of the table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    pub state: Option<State>,
    pub pool: Option<String>,
    /// A cause's key ([`cause_key`]).
    pub cause: Option<String>,
    /// Matched against id, hostname, serial and MAC addresses, case-insensitively.
    pub q: Option<String>,
    pub after: Option<Key>,
    pub before: Option<Key>,
    /// `?refresh=1`: the page reloads itself every [`super::REFRESH_SECONDS`].
    pub refresh: bool,
}

/// A query value: `+` is a space, `%XX` a byte (a form's encoding).
fn decode(v: &str) -> Result<String, String> {
    let v = v.replace('+', " ");
    spec::encoding::data_url::percent_decode(&v)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| "a query value is not percent-encoded UTF-8".to_string())
}

/// A query value in a link: percent-encoded outside [A-Za-z0-9._~-].
pub fn encode(s: &str) -> String {
    super::path_segment(s)
}

impl Query {
    /// The query of a request, `param` giving each parameter's raw value.
    pub fn parse<'a>(param: impl Fn(&str) -> Option<&'a str>) -> Result<Query, String> {
        let text = |name: &str| -> Result<Option<String>, String> {
            match param(name) {
                None => Ok(None),
                Some(v) => {
                    let v = decode(v)?;
                    let v = v.trim();
                    if v.len() > QUERY_BYTES {
                        return Err(format!(
                            "{name} is longer than {QUERY_BYTES} bytes (the page's search limit)"
                        ));
                    }
                    Ok((!v.is_empty()).then(|| v.to_string()))
                }
            }
        };
        let state = match text("state")? {
            Some(s) => Some(s.parse::<State>()?),
            None => None,
        };
        let cause = text("cause")?;
        if let Some(c) = &cause
            && !(c.len() == 12 && c.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err("cause must be a cause's key from the page (12 hex digits)".into());
        }
        let cursor = |name: &str| -> Result<Option<Key>, String> {
            match text(name)? {
                None => Ok(None),
                Some(c) => Key::parse(&c)
                    .map(Some)
                    .ok_or_else(|| format!("{name} must be a cursor from the page's links")),
            }
        };
        Ok(Query {
            state,
            pool: text("pool")?,
            cause,
            q: text("q")?,
            after: cursor("after")?,
            before: cursor("before")?,
            refresh: param("refresh").is_some_and(|v| v == "1"),
        })
    }

    /// Whether a filter or the search narrows the table.
    pub fn narrowed(&self) -> bool {
        self.state.is_some() || self.pool.is_some() || self.cause.is_some() || self.q.is_some()
    }

    /// The link to the page with these filters changed by `f` (and its first page).
    pub fn link(&self, f: impl FnOnce(&mut Query)) -> String {
        let mut q = self.clone();
        q.after = None;
        q.before = None;
        f(&mut q);
        q.href()
    }

    /// This query as a link to `/ui/`.
    pub fn href(&self) -> String {
        let mut parts = Vec::new();
        if let Some(s) = self.state {
            parts.push(format!("state={}", s.as_str()));
        }
        for (k, v) in [("pool", &self.pool), ("cause", &self.cause), ("q", &self.q)] {
            if let Some(v) = v {
                parts.push(format!("{k}={}", encode(v)));
            }
        }
        for (k, v) in [("after", &self.after), ("before", &self.before)] {
            if let Some(v) = v {
                parts.push(format!("{k}={}", encode(&v.cursor())));
            }
        }
        if self.refresh {
            parts.push("refresh=1".into());
        }
        if parts.is_empty() {
            "/ui/".into()
        } else {
            format!("/ui/?{}", parts.join("&"))
        }
    }

    /// Whether `m` is in the table.
    pub fn matches(&self, m: &Machine) -> bool {
        if self.state.is_some_and(|s| m.current() != s) {
            return false;
        }
        if self
            .pool
            .as_ref()
            .is_some_and(|p| m.pool.as_ref() != Some(p))
        {
            return false;
        }
        if let Some(c) = &self.cause
            && failure(m).is_none_or(|(stage, error)| &cause_key(stage, &cause(error, m)) != c)
        {
            return false;
        }
        if let Some(q) = &self.q {
            return found(q, m);
        }
        true
    }
}

/// The search: `q` within the id, hostname, serial or a MAC address (case-insensitively; a
/// MAC also without its separators, so `525400123456` and `52-54-00-12-34-56` find
/// `52:54:00:12:34:56`).
fn found(q: &str, m: &Machine) -> bool {
    let q = q.to_lowercase();
    let has = |s: &str| s.to_lowercase().contains(&q);
    if has(&m.id)
        || m.identity.hostname.as_deref().is_some_and(has)
        || m.identity.serial.as_deref().is_some_and(has)
    {
        return true;
    }
    let bare = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, ':' | '-' | '.'))
            .collect::<String>()
            .to_lowercase()
    };
    let bq = bare(&q);
    m.identity
        .macs
        .iter()
        .any(|mac| has(mac) || (bq.len() >= 4 && bare(mac).contains(&bq)))
}

/// The stage and error of a failed machine's latest boot.
pub fn failure(m: &Machine) -> Option<(&'static str, &str)> {
    if m.state != Some(State::Failed) {
        return None;
    }
    let b = m.boots.last()?;
    let s = b
        .stages
        .iter()
        .find(|s| s.outcome == report_format::Outcome::Failed)?;
    Some((s.stage.as_str(), s.error.as_deref().unwrap_or("")))
}

/// A failure's cause: its error with what differs from machine to machine replaced — the
/// machine's own id, hostname, serial and MAC addresses, UUIDs and long hex strings, IP
/// addresses, and numbers of four digits or more (sizes, process ids, times) — so the same
/// fault on many machines reads as one cause. Short numbers (a partition, an exit status)
/// stay: they tell causes apart.
pub fn cause(error: &str, m: &Machine) -> String {
    let error = error.trim();
    if error.is_empty() {
        return "(no error text)".into();
    }
    let mut own: Vec<&str> = [
        Some(m.id.as_str()),
        m.identity.hostname.as_deref(),
        m.identity.serial.as_deref(),
    ]
    .into_iter()
    .flatten()
    .chain(m.identity.macs.iter().map(String::as_str))
    .filter(|s| s.len() >= 3)
    .collect();
    own.sort_by_key(|s| Reverse(s.len()));
    let mut text = error.to_string();
    for o in own {
        text = text.replace(o, "…");
    }
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        // Trailing separators are punctuation, not part of the word.
        let w = word.trim_end_matches(['.', ':', '-', '_']);
        let tail = &word[w.len()..];
        out.push_str(classify(w));
        out.push_str(tail);
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() || matches!(c, '.' | ':' | '-' | '_') {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    // Runs of placeholders read as one.
    while out.contains("… …") {
        out = out.replace("… …", "…");
    }
    out
}

/// A word of an error as a cause shows it: itself, or `…` (an identifier) or `#` (a number).
fn classify(w: &str) -> &str {
    let digits = w.bytes().filter(u8::is_ascii_digit).count();
    if digits == 0 {
        return w;
    }
    if w.bytes().all(|b| b.is_ascii_digit()) {
        return if w.len() >= 4 { "#" } else { w };
    }
    let hexish = w
        .bytes()
        .all(|b| b.is_ascii_hexdigit() || matches!(b, b'-' | b':'));
    let hex = w.bytes().filter(u8::is_ascii_hexdigit).count();
    if hexish && hex >= 8 {
        return "…"; // UUIDs, hashes, MAC addresses
    }
    let dotted = w.split([':', '.']).collect::<Vec<_>>();
    if dotted.len() >= 4 && dotted.iter().all(|p| p.bytes().all(|b| b.is_ascii_digit())) {
        return "…"; // IP addresses (with a port)
    }
    if digits >= 4
        && w.bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b',')
    {
        return "#";
    }
    w
}

/// The key of a cause in `?cause=`: 12 hex digits of the SHA-256 of its stage and text.
pub fn cause_key(stage: &str, cause: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("{stage}\n{cause}").as_bytes());
    d[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// One failure cause and the machines it stopped.
#[derive(Debug, Clone)]
pub struct Cause {
    pub key: String,
    pub stage: String,
    pub text: String,
    pub count: usize,
    /// The first [`CAUSE_MACHINES`] by id: (id, name).
    pub machines: Vec<(String, String)>,
}

/// A failed machine in the list at the top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub last_seen: u64,
    pub id: String,
    pub name: String,
    pub pool: Option<String>,
    pub stage: String,
    pub error: String,
}

impl Ord for Failed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Seen last first, then by id: the heap's "greatest" is the one to drop.
        o.last_seen.cmp(&self.last_seen).then(self.id.cmp(&o.id))
    }
}

impl PartialOrd for Failed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// One pool's machines.
#[derive(Debug, Clone, Default)]
pub struct PoolCounts {
    /// By [`STATES`].
    pub states: [usize; STATES.len()],
    /// Machines whose applied config is the active generation's config for the pool, the
    /// lastKnownGood's (when that differs), or another.
    pub on_active: usize,
    pub on_lkg: usize,
    pub on_other: usize,
}

impl PoolCounts {
    pub fn total(&self) -> usize {
        self.states.iter().sum()
    }
}

/// One stage's durations across the fleet (each machine's latest boot).
#[derive(Debug, Clone, Default)]
pub struct Durations {
    pub ms: Vec<u64>,
    /// The slowest, slowest first: (ms, id).
    pub slowest: Vec<(u64, String)>,
}

impl Durations {
    /// The `p`th percentile (0 to 100), after [`Durations::finish`].
    pub fn percentile(&self, p: usize) -> u64 {
        if self.ms.is_empty() {
            return 0;
        }
        self.ms[((self.ms.len() - 1) * p.min(100)) / 100]
    }

    fn finish(&mut self) {
        self.ms.sort_unstable();
        self.slowest
            .sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    }

    /// The slowest machines at least [`OUTLIER_FACTOR`] times the median.
    pub fn outliers(&self) -> impl Iterator<Item = &(u64, String)> {
        let limit = self.percentile(50).max(1) * OUTLIER_FACTOR;
        self.slowest.iter().filter(move |(ms, _)| *ms >= limit)
    }
}

/// The fleet at a glance: every record counts here, whatever the table's filters.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub total: usize,
    /// By [`STATES`].
    pub states: [usize; STATES.len()],
    /// The pools the source serves, by name; every other pool (and none) under `None`.
    pub pools: BTreeMap<Option<String>, PoolCounts>,
    pub causes: Vec<Cause>,
    /// Failed machines past [`CAUSES_KEPT`] distinct causes.
    pub other_causes: usize,
    /// The failed machines seen last, seen last first.
    pub failed: Vec<Failed>,
    pub stages: BTreeMap<&'static str, Durations>,
    served: HashMap<String, (Option<String>, Option<String>)>,
    cause_index: HashMap<String, usize>,
    failed_heap: BinaryHeap<Failed>,
}

impl Summary {
    /// A summary for the pools the source serves (their active and lastKnownGood configs).
    pub fn new(pools: &[PoolView]) -> Summary {
        let mut s = Summary::default();
        for p in pools {
            s.served.insert(
                p.name.clone(),
                (p.active_config.clone(), p.lkg_config.clone()),
            );
            s.pools.insert(Some(p.name.clone()), PoolCounts::default());
        }
        s
    }

    pub fn add(&mut self, m: &Machine) {
        self.total += 1;
        let r = rank(m.state);
        self.states[r] += 1;
        let served = m.pool.as_ref().and_then(|p| self.served.get(p));
        let key = served.and(m.pool.clone());
        let applied = m.config.as_ref().and_then(|c| c.name.as_deref());
        let p = self.pools.entry(key).or_default();
        p.states[r] += 1;
        match (served, applied) {
            (Some((Some(a), _)), Some(c)) if a == c => p.on_active += 1,
            (Some((_, Some(l))), Some(c)) if l == c => p.on_lkg += 1,
            _ => p.on_other += 1,
        }
        if let Some(b) = m.boots.last() {
            for s in &b.stages {
                let d = self.stages.entry(s.stage.as_str()).or_default();
                d.ms.push(s.duration_ms);
                if d.slowest.len() < SLOWEST || d.slowest.iter().any(|x| x.0 < s.duration_ms) {
                    d.slowest.push((s.duration_ms, m.id.clone()));
                    if d.slowest.len() > SLOWEST {
                        d.slowest.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                        d.slowest.truncate(SLOWEST);
                    }
                }
            }
        }
        let Some((stage, error)) = failure(m) else {
            if m.state == Some(State::Failed) {
                self.cause(m, "", "(no failed stage reported)");
            }
            return;
        };
        let text = cause(error, m);
        self.cause(m, stage, &text);
        self.failed_heap.push(Failed {
            last_seen: m.last_seen,
            id: m.id.clone(),
            name: m.identity.hostname.clone().unwrap_or_else(|| m.id.clone()),
            pool: m.pool.clone(),
            stage: stage.to_string(),
            error: error.to_string(),
        });
        if self.failed_heap.len() > FAILED_SHOWN {
            self.failed_heap.pop();
        }
    }

    fn cause(&mut self, m: &Machine, stage: &str, text: &str) {
        let key = cause_key(stage, text);
        let i = match self.cause_index.get(&key) {
            Some(i) => *i,
            None if self.causes.len() >= CAUSES_KEPT => {
                self.other_causes += 1;
                return;
            }
            None => {
                self.causes.push(Cause {
                    key: key.clone(),
                    stage: stage.to_string(),
                    text: text.to_string(),
                    count: 0,
                    machines: Vec::new(),
                });
                self.cause_index.insert(key, self.causes.len() - 1);
                self.causes.len() - 1
            }
        };
        let c = &mut self.causes[i];
        c.count += 1;
        let name = m.identity.hostname.clone().unwrap_or_else(|| m.id.clone());
        c.machines.push((m.id.clone(), name));
        if c.machines.len() > CAUSE_MACHINES {
            c.machines.sort();
            c.machines.truncate(CAUSE_MACHINES);
        }
    }

    /// Sorts what was gathered: causes by machines stopped, most first.
    pub fn finish(&mut self) {
        self.causes
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.text.cmp(&b.text)));
        for c in &mut self.causes {
            c.machines.sort();
        }
        self.cause_index.clear();
        self.failed = std::mem::take(&mut self.failed_heap).into_sorted_vec();
        for d in self.stages.values_mut() {
            d.finish();
        }
    }
}

/// One page of the table and where it is in the whole.
#[derive(Debug, Default)]
pub struct Window {
    /// In table order.
    pub machines: Vec<Machine>,
    /// Machines the filters match.
    pub matched: usize,
    /// How many of them come before this page.
    pub offset: usize,
    pub prev: Option<Key>,
    pub next: Option<Key>,
}

/// One pass over the inventory: the [`Summary`] of every record and the page of those the
/// query matches (at most [`ROWS`] records held, a heap of the best so far).
pub struct Scan<'q> {
    query: &'q Query,
    rows: usize,
    pub summary: Summary,
    heap: BinaryHeap<Entry>,
    matched: usize,
    /// Forward: matched machines at or before `after`; backward: at or after `before`.
    passed: usize,
    /// Candidates beyond the heap (a page past this one).
    more: bool,
}

struct Entry(Key, Box<Machine>, bool);

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Backward (`before`) pages keep the greatest keys: reversed.
        if self.2 {
            o.0.cmp(&self.0)
        } else {
            self.0.cmp(&o.0)
        }
    }
}

impl<'q> Scan<'q> {
    pub fn new(query: &'q Query, pools: &[PoolView], rows: usize) -> Scan<'q> {
        Scan {
            query,
            rows: rows.max(1),
            summary: Summary::new(pools),
            heap: BinaryHeap::new(),
            matched: 0,
            passed: 0,
            more: false,
        }
    }

    pub fn add(&mut self, m: Machine) {
        self.summary.add(&m);
        if !self.query.matches(&m) {
            return;
        }
        self.matched += 1;
        let key = Key::of(&m);
        let back = self.query.before.is_some() && self.query.after.is_none();
        let wanted = if back {
            self.query.before.as_ref().is_some_and(|b| key < *b)
        } else {
            self.query.after.as_ref().is_none_or(|a| key > *a)
        };
        if !wanted {
            self.passed += 1;
            return;
        }
        self.heap.push(Entry(key, Box::new(m), back));
        if self.heap.len() > self.rows {
            self.heap.pop();
            self.more = true;
        }
    }

    pub fn finish(mut self) -> (Summary, Window) {
        self.summary.finish();
        let back = self.query.before.is_some() && self.query.after.is_none();
        let mut entries = self.heap.into_sorted_vec();
        if back {
            entries.reverse();
        }
        let machines: Vec<Machine> = entries.into_iter().map(|e| *e.1).collect();
        let (offset, has_prev, has_next) = if back {
            let before = self.matched - self.passed;
            (before - machines.len(), self.more, self.passed > 0)
        } else {
            (self.passed, self.passed > 0, self.more)
        };
        let first = machines.first().map(Key::of);
        let last = machines.last().map(Key::of);
        (
            self.summary,
            Window {
                matched: self.matched,
                offset,
                prev: first.filter(|_| has_prev),
                next: last.filter(|_| has_next),
                machines,
            },
        )
    }
}
