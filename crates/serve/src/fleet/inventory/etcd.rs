//! The etcd store: the inventory in an etcd v3 cluster, through its JSON gateway
//! (`POST /v3/kv/range`, `/v3/kv/txn`; keys and values in base64), so replicas of the server
//! share one inventory. Plain blocking HTTP with ureq, no async runtime, no gRPC stack.
//!
//! Keys, under the prefix (default `/agent/inventory/`):
//! - `machines/<machine id>`: the record (JSON);
//! - `details/<machine id>/<report id>`: a report's changes and log tail (JSON);
//! - `count/00` … `count/63`, `count/gate`: the machine count (below);
//! - `rollouts/<pool>`: a pool's rollout record (JSON), changed by compare-and-swap on its
//!   `mod_revision`, so a halt or a widening one replica decided holds on all.
//!
//! Recording a report is optimistic read-modify-write: range the record (its `mod_revision`),
//! [`apply`](super::model::apply) the report, then one txn that puts the record and the
//! details only if the record's `mod_revision` is unchanged (0: still absent). A lost race
//! reads again ([`CONFLICT_TRIES`] times). Retried reports are recognised by the record's
//! recent ids, so a txn that committed but whose answer was lost (a member killed mid-request)
//! is not applied twice when it is retried on the next member.
//!
//! The machine count (`--max-machines`): the sum of [`COUNT_SHARDS`] shard keys (decimal),
//! read with the records in the same txn (one revision). A write that creates records adds
//! them to its thread's shard (writer threads of a process take different shards) in the
//! same txn, which compares the records' `mod_revision` as ever, and: far from the limit
//! (count + new + [`NEAR`] ≤ limit), the shard's and the gate's `mod_revision` (writers of
//! different shards never conflict); near it, that no key under `count/` changed since the
//! read (a range compare), and it rewrites the gate. Exact: a write passes the limit only if
//! the count moved under it; near the limit no key may move; far from it, after the count
//! first passes limit − [`NEAR`] at most one write per shard that read before can still
//! commit (the next one on that shard sees the shard changed), [`BATCH`] machines each, and
//! none after a near write bumped the gate. An inventory without `count/gate` (written
//! before the count was kept) is counted once from its records (`Etcd::set_up_count`).
//!
//! Members: each request goes to the member that answered last; on a connection failure, a
//! time-out or a 5xx answer it goes to the next, [`ROUNDS`] times round the list, waiting
//! [`ROUND_PAUSE`] (doubling) between rounds, so a leader election (about 1 s) is ridden out.
//!
//! Health ([`super::health`]): down when no member answered a request (after every round),
//! up when one answers. The probe reads one key (a linearizable read: it needs a leader and
//! a quorum, as a write does) from each member once, [`PROBE_TIMEOUT`] each, so a stopped
//! cluster shows in seconds, not after a request's rounds.

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::{Value, json};
use spec::encoding::data_url::{base64_decode, base64_encode};

use super::batch::{CONCURRENT_WRITERS, Commits};
use super::health::Health;
use super::model::{self, Applied, Detail, Filter, Machine, Origin, Report};
use super::recent::Recent;
use super::store::{
    BootToken, BootTokens, Full, Recorded, Records, Rollout, Rollouts, Spend, Store,
};

/// Time to connect to a member.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time for a whole request to a member (connect, send, answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Time for a probe's request to one member (`Store::probe`).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Times round the member list before a request fails.
pub const ROUNDS: u32 = 4;
/// Pause after the first round without an answer; doubles each round (0.25 + 0.5 + 1 s).
pub const ROUND_PAUSE: Duration = Duration::from_millis(250);
/// Read-modify-write attempts of one report when other writers keep changing the record.
pub const CONFLICT_TRIES: u32 = 32;
/// Reports written in one transaction at most (etcd's `--max-txn-ops` is 128 by default: a
/// report is two or three operations): what a commit takes (`Records::commits`); a larger
/// batch is written in transactions of this many.
pub const BATCH: usize = 32;
/// Bytes of records and details written in one transaction at most (etcd's
/// `--max-request-bytes` is 1.5 MiB by default; base64 adds a third).
const BATCH_BYTES: usize = 768 * 1024;
/// Keys per range request when listing.
const PAGE: usize = 500;
/// Largest answer read from a member.
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Where the cluster is and where the inventory lives in it.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Client URLs (`--etcd-endpoints`), e.g. `http://127.0.0.1:2379`; tried in order.
    pub endpoints: Vec<String>,
    /// Key prefix (ends with `/`).
    pub prefix: String,
    /// `--max-machines`: machine records the cluster holds at most, all replicas together.
    pub max_machines: u64,
}

impl EtcdOptions {
    pub fn new(endpoints: Vec<String>) -> EtcdOptions {
        EtcdOptions {
            endpoints,
            prefix: "/agent/inventory/".into(),
            max_machines: super::store::DEFAULT_MAX_MACHINES,
        }
    }
}

/// Shards of the machine count (module docs, "The machine count").
pub const COUNT_SHARDS: usize = 64;
/// How close to `--max-machines` a write that adds machines compares every shard of the
/// count, not just its own: one writer can add at most [`BATCH`] machines in one txn, and at
/// most one stale txn per shard can commit, so [`COUNT_SHARDS`]`·`[`BATCH`] is the most
/// writes with their own shard only could add past the point where they were allowed.
const NEAR: u64 = (COUNT_SHARDS * BATCH) as u64;

pub struct Etcd {
    opts: EtcdOptions,
    agent: ureq::Agent,
    /// The member that answered last.
    current: AtomicUsize,
    /// The records this replica wrote last, with their mod_revision (`record_together`).
    recent: Mutex<Recent<(Machine, i64)>>,
    health: Health,
    /// The probe's client: [`PROBE_TIMEOUT`] a request.
    probe_agent: ureq::Agent,
}

/// A member's failure: worth trying the next one (`retry`) or not.
struct Failed {
    retry: bool,
    err: anyhow::Error,
}

#[derive(Deserialize)]
struct Kv {
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    mod_revision: Option<String>,
    #[serde(default)]
    lease: Option<String>,
}

#[derive(Deserialize)]
struct RangeAnswer {
    #[serde(default)]
    kvs: Vec<Kv>,
    #[serde(default)]
    more: bool,
}

#[derive(Deserialize)]
struct TxnAnswer {
    #[serde(default)]
    succeeded: bool,
    #[serde(default)]
    responses: Vec<TxnResponse>,
    #[serde(default)]
    header: Option<Header>,
}

#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    revision: Option<String>,
}

#[derive(Deserialize)]
struct CountAnswer {
    #[serde(default)]
    count: Option<String>,
    #[serde(default)]
    header: Option<Header>,
}

fn revision(h: &Option<Header>) -> Result<i64> {
    h.as_ref()
        .and_then(|h| h.revision.as_deref())
        .unwrap_or("0")
        .parse::<i64>()
        .context("etcd: an answer's revision")
}

/// The machine count as one read saw it (module docs, "The machine count").
struct Count {
    /// The sum of the shards.
    total: u64,
    /// Per shard: (value, mod_revision); absent: (0, 0).
    shards: Vec<(u64, i64)>,
    /// The gate's mod_revision; None: the count was never set up.
    gate: Option<i64>,
    /// The revision the read saw.
    revision: i64,
}

#[derive(Deserialize)]
struct TxnResponse {
    #[serde(default)]
    response_range: Option<RangeAnswer>,
}

fn b64(s: &[u8]) -> String {
    base64_encode(s)
}

/// The end of the range of keys that start with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// This thread's shard of the count: writer threads of one process take different ones;
/// processes start at a random one.
fn my_shard() -> usize {
    use std::cell::Cell;
    use std::hash::BuildHasher;
    static NEXT: AtomicUsize = AtomicUsize::new(usize::MAX);
    thread_local! { static SHARD: Cell<Option<usize>> = const { Cell::new(None) }; }
    SHARD.with(|c| {
        if let Some(s) = c.get() {
            return s;
        }
        let _ = NEXT.compare_exchange(
            usize::MAX,
            std::collections::hash_map::RandomState::new().hash_one(0u8) as usize % COUNT_SHARDS,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let s = NEXT.fetch_add(1, Ordering::Relaxed) % COUNT_SHARDS;
        c.set(Some(s));
        s
    })
}

/// A txn's body written as it is built (`record_together`: a serde_json `Value` tree per
/// operation cost more in allocations than the rest of the writer).
#[derive(Default)]
struct TxnBody {
    compare: Vec<u8>,
    success: Vec<u8>,
    ops: usize,
}

impl TxnBody {
    fn item(list: &mut Vec<u8>) {
        list.push(if list.is_empty() { b'[' } else { b',' });
    }

    fn compare_mod(&mut self, key: &str, rev: i64) {
        Self::item(&mut self.compare);
        let _ = write!(
            self.compare,
            r#"{{"key":"{}","target":"MOD","result":"EQUAL","mod_revision":"{rev}"}}"#,
            b64(key.as_bytes())
        );
    }

    fn put(&mut self, key: &str, value: &[u8]) {
        Self::item(&mut self.success);
        let _ = write!(
            self.success,
            r#"{{"request_put":{{"key":"{}","value":"{}"}}}}"#,
            b64(key.as_bytes()),
            b64(value)
        );
        self.ops += 1;
    }

    fn delete(&mut self, key: &str) {
        Self::item(&mut self.success);
        let _ = write!(
            self.success,
            r#"{{"request_delete_range":{{"key":"{}"}}}}"#,
            b64(key.as_bytes())
        );
        self.ops += 1;
    }

    fn compare_value(&mut self, v: &Value) -> Result<()> {
        Self::item(&mut self.compare);
        serde_json::to_writer(&mut self.compare, v)?;
        Ok(())
    }

    fn op_value(&mut self, v: &Value) -> Result<()> {
        Self::item(&mut self.success);
        serde_json::to_writer(&mut self.success, v)?;
        self.ops += 1;
        Ok(())
    }

    fn finish(self) -> Vec<u8> {
        let list = |mut l: Vec<u8>| {
            if l.is_empty() {
                l.push(b'[');
            }
            l.push(b']');
            l
        };
        let mut out = b"{\"compare\":".to_vec();
        out.extend(list(self.compare));
        out.extend(b",\"success\":");
        out.extend(list(self.success));
        out.push(b'}');
        out
    }
}

fn compare_mod(key: &str, rev: i64) -> Value {
    json!({"key": b64(key.as_bytes()), "target": "MOD", "result": "EQUAL",
        "mod_revision": rev.to_string()})
}

impl Etcd {
    pub fn new(opts: EtcdOptions) -> Result<Etcd> {
        if opts.endpoints.is_empty() {
            bail!("the etcd inventory store needs at least one endpoint (--etcd-endpoints)");
        }
        for e in &opts.endpoints {
            if !e.starts_with("http://") && !e.starts_with("https://") {
                bail!("etcd endpoint {e:?} is not an http:// or https:// URL (--etcd-endpoints)");
            }
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            // A connection kept for each writer (ureq keeps 3 per host by default: the
            // other writers opened a new connection per request; measured with one report
            // per request, 32 writers: 922 -> 553 us of server CPU per report).
            .max_idle_connections(CONCURRENT_WRITERS * 2)
            .max_idle_connections_per_host(CONCURRENT_WRITERS)
            .build()
            .into();
        let probe_agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(PROBE_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Etcd {
            opts,
            agent,
            current: AtomicUsize::new(0),
            recent: Mutex::default(),
            health: Health::new(),
            probe_agent,
        })
    }

    /// Opens the store with `first` as the member tried first (tests spread clients over
    /// members with it).
    pub fn with_first(opts: EtcdOptions, first: usize) -> Result<Etcd> {
        let e = Etcd::new(opts)?;
        e.current
            .store(first % e.opts.endpoints.len(), Ordering::Relaxed);
        Ok(e)
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent<(Machine, i64)>> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.opts.prefix)
    }

    /// The answer's body (JSON, parsed by the caller into what it expects: one parse).
    fn post_once(&self, endpoint: &str, path: &str, body: &[u8]) -> Result<Vec<u8>, Failed> {
        let url = format!("{}{path}", endpoint.trim_end_matches('/'));
        let mut resp = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(body)
            .map_err(|e| Failed {
                retry: true,
                err: anyhow!("etcd: POST {url}: {e}"),
            })?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()
            .map_err(|e| Failed {
                retry: true,
                err: anyhow!("etcd: reading the answer of POST {url}: {e}"),
            })?;
        if status != 200 {
            let msg = String::from_utf8_lossy(&text[..text.len().min(512)]).into_owned();
            return Err(Failed {
                retry: status >= 500,
                err: anyhow!("etcd: POST {url}: HTTP {status}: {msg}"),
            });
        }
        Ok(text)
    }

    /// POSTs to the current member, moving on to the next on failure (module docs).
    fn post(&self, path: &str, body: &Value) -> Result<Vec<u8>> {
        self.post_bytes(path, &serde_json::to_vec(body)?)
    }

    /// [`Etcd::post`] with the body already encoded.
    fn post_bytes(&self, path: &str, body: &[u8]) -> Result<Vec<u8>> {
        let n = self.opts.endpoints.len();
        let mut pause = ROUND_PAUSE;
        let mut last = None;
        for round in 0..ROUNDS {
            if round > 0 {
                std::thread::sleep(pause);
                pause *= 2;
            }
            for _ in 0..n {
                let i = self.current.load(Ordering::Relaxed) % n;
                match self.post_once(&self.opts.endpoints[i], path, body) {
                    Ok(v) => {
                        self.health.up();
                        return Ok(v);
                    }
                    Err(Failed { retry: false, err }) => {
                        // A member answered: the cluster is there.
                        self.health.up();
                        return Err(err);
                    }
                    Err(Failed { retry: true, err }) => {
                        log::debug!("{err:#}; trying the next etcd member");
                        // Move on unless another thread already did.
                        let _ = self.current.compare_exchange(
                            i,
                            (i + 1) % n,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                        last = Some(err);
                    }
                }
            }
        }
        let err = last
            .unwrap_or_else(|| anyhow!("no etcd member"))
            .context(format!(
                "no etcd member of {} answered ({ROUNDS} rounds)",
                self.opts.endpoints.join(",")
            ));
        self.health.down(&err);
        Err(err)
    }

    /// [`Store::probe`]: a linearizable read of one key from each member in turn (from the
    /// current one), until one answers.
    fn probe_members(&self) {
        let n = self.opts.endpoints.len();
        let body = serde_json::to_vec(&json!({
            "key": b64(self.gate_key().as_bytes()), "count_only": true
        }))
        .unwrap_or_default();
        let start = self.current.load(Ordering::Relaxed);
        let mut last = String::new();
        for k in 0..n {
            let url = format!(
                "{}/v3/kv/range",
                self.opts.endpoints[(start + k) % n].trim_end_matches('/')
            );
            let got = self
                .probe_agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(&body[..]);
            match got {
                Ok(r) if r.status().as_u16() < 500 => {
                    self.health.up();
                    return;
                }
                Ok(r) => last = format!("POST {url}: HTTP {}", r.status().as_u16()),
                Err(e) => last = format!("POST {url}: {e}"),
            }
        }
        self.health.down(&anyhow!(
            "no etcd member of {} answered a probe ({} s each; the last: {last})",
            self.opts.endpoints.join(","),
            PROBE_TIMEOUT.as_secs()
        ));
    }

    /// Reads one key: its value and mod_revision (0: absent).
    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, i64)>> {
        Ok(self.get_with_lease(key)?.map(|((v, _), rev)| (v, rev)))
    }

    /// Every key/value under `prefix`, a page at a time.
    fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let mut out = Vec::new();
        self.scan_each(prefix, None, &mut |k, v| {
            out.push((k, v));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Hands `f` every key/value under `prefix` after the key `after` (None: all), a page
    /// of [`PAGE`] keys at a time, until it returns false.
    #[allow(clippy::type_complexity)]
    fn scan_each(
        &self,
        prefix: &str,
        after: Option<&str>,
        f: &mut dyn FnMut(String, Vec<u8>) -> Result<bool>,
    ) -> Result<()> {
        let end = b64(&prefix_end(prefix));
        let mut from = match after {
            Some(a) => {
                let mut k = a.as_bytes().to_vec();
                k.push(0);
                k
            }
            None => prefix.as_bytes().to_vec(),
        };
        loop {
            let a: RangeAnswer = serde_json::from_slice(&self.post(
                "/v3/kv/range",
                &json!({"key": b64(&from), "range_end": end, "limit": PAGE.to_string()}),
            )?)
            .with_context(|| format!("etcd: listing {prefix}"))?;
            let got = a.kvs.len();
            for kv in a.kvs {
                let k = base64_decode(kv.key.as_bytes()).context("etcd: a key")?;
                let v = base64_decode(kv.value.as_bytes()).context("etcd: a value")?;
                from = k.clone();
                from.push(0);
                if !f(String::from_utf8_lossy(&k).into_owned(), v)? {
                    return Ok(());
                }
            }
            if !a.more || got == 0 {
                return Ok(());
            }
        }
    }
}

#[derive(Deserialize)]
struct LeaseAnswer {
    #[serde(rename = "ID")]
    id: String,
}

impl Etcd {
    /// Writes `value` at `key` only if its mod_revision is still `rev` (0: absent), keeping
    /// `lease` when given; whether it did.
    fn put_if(&self, key: &str, rev: i64, value: &[u8], lease: Option<&str>) -> Result<bool> {
        let mut put = json!({"key": b64(key.as_bytes()), "value": b64(value)});
        if let Some(l) = lease {
            put["lease"] = json!(l);
        }
        let txn = json!({
            "compare": [{
                "key": b64(key.as_bytes()),
                "target": "MOD",
                "result": "EQUAL",
                "mod_revision": rev.to_string(),
            }],
            "success": [{"request_put": put}],
        });
        let a: TxnAnswer = serde_json::from_slice(&self.post("/v3/kv/txn", &txn)?)
            .with_context(|| format!("etcd: writing {key}"))?;
        Ok(a.succeeded)
    }

    /// [`Etcd::get`] with the key's lease: ((value, lease), mod_revision).
    #[allow(clippy::type_complexity)]
    fn get_with_lease(&self, key: &str) -> Result<Option<((Vec<u8>, Option<String>), i64)>> {
        let a: RangeAnswer = serde_json::from_slice(
            &self.post("/v3/kv/range", &json!({"key": b64(key.as_bytes())}))?,
        )
        .with_context(|| format!("etcd: reading {key}"))?;
        let Some(kv) = a.kvs.into_iter().next() else {
            return Ok(None);
        };
        let rev = kv
            .mod_revision
            .as_deref()
            .unwrap_or("0")
            .parse::<i64>()
            .with_context(|| format!("etcd: the mod_revision of {key}"))?;
        let v = base64_decode(kv.value.as_bytes())
            .with_context(|| format!("etcd: the value of {key}"))?;
        Ok(Some(((v, kv.lease.filter(|l| l != "0")), rev)))
    }
}

impl Etcd {
    fn gate_key(&self) -> String {
        self.key("count/gate")
    }

    fn shard_key(&self, i: usize) -> String {
        self.key(&format!("count/{i:02}"))
    }

    /// The read op of the whole count (in the read txn of the records it goes with).
    fn count_read(&self) -> Value {
        let p = self.key("count/");
        json!({"request_range": {"key": b64(p.as_bytes()), "range_end": b64(&prefix_end(&p))}})
    }

    /// Reads `keys` and the count in one txn: each key's (value, mod_revision), the count.
    #[allow(clippy::type_complexity)]
    fn read_with_count(&self, keys: &[String]) -> Result<(Vec<Option<(Vec<u8>, i64)>>, Count)> {
        for round in 0..2 {
            let mut reads: Vec<Value> = keys
                .iter()
                .map(|k| json!({"request_range": {"key": b64(k.as_bytes())}}))
                .collect();
            reads.push(self.count_read());
            let a: TxnAnswer = serde_json::from_slice(
                &self.post("/v3/kv/txn", &json!({"compare": [], "success": reads}))?,
            )
            .context("etcd: reading machine records")?;
            if a.responses.len() != keys.len() + 1 {
                bail!(
                    "etcd: {} answers to {} reads of machine records",
                    a.responses.len(),
                    keys.len() + 1
                );
            }
            let revision = revision(&a.header)?;
            let mut resp = a.responses.into_iter();
            let mut out = Vec::with_capacity(keys.len());
            for (k, r) in keys.iter().zip(resp.by_ref()) {
                out.push(
                    match r.response_range.and_then(|a| a.kvs.into_iter().next()) {
                        Some(kv) => {
                            let v = base64_decode(kv.value.as_bytes())
                                .with_context(|| format!("etcd: the value of {k}"))?;
                            let rev = kv.mod_revision.as_deref().unwrap_or("0").parse::<i64>()?;
                            Some((v, rev))
                        }
                        None => None,
                    },
                );
            }
            let kvs = resp
                .next()
                .and_then(|r| r.response_range)
                .map(|a| a.kvs)
                .unwrap_or_default();
            let count = self.parse_count(kvs, revision)?;
            if count.gate.is_some() || round == 1 {
                return Ok((out, count));
            }
            self.set_up_count()?;
        }
        unreachable!("the loop returns in its second round")
    }

    fn parse_count(&self, kvs: Vec<Kv>, revision: i64) -> Result<Count> {
        let mut c = Count {
            total: 0,
            shards: vec![(0, 0); COUNT_SHARDS],
            gate: None,
            revision,
        };
        let (gate, prefix) = (self.gate_key(), self.key("count/"));
        for kv in kvs {
            let k = base64_decode(kv.key.as_bytes()).context("etcd: a key of the count")?;
            let k = String::from_utf8_lossy(&k);
            let rev = kv.mod_revision.as_deref().unwrap_or("0").parse::<i64>()?;
            if k == gate {
                c.gate = Some(rev);
                continue;
            }
            let Some(i) = k
                .strip_prefix(&prefix)
                .and_then(|i| i.parse::<usize>().ok())
                .filter(|&i| i < COUNT_SHARDS)
            else {
                continue;
            };
            let v = base64_decode(kv.value.as_bytes()).context("etcd: a shard of the count")?;
            let n = std::str::from_utf8(&v)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .with_context(|| format!("etcd: {k} is not a count"))?;
            c.shards[i] = (n, rev);
            c.total += n;
        }
        Ok(c)
    }

    /// Sets up the count of an inventory written before it was kept: the machine records,
    /// counted, go into shard 0, in a txn that succeeds only if the gate is still absent and
    /// no record was created since they were counted. Whoever loses reads again.
    fn set_up_count(&self) -> Result<()> {
        let p = self.key("machines/");
        let end = b64(&prefix_end(&p));
        for attempt in 0..CONFLICT_TRIES {
            if attempt > 0 {
                backoff(attempt);
            }
            let a: CountAnswer = serde_json::from_slice(&self.post(
                "/v3/kv/range",
                &json!({"key": b64(p.as_bytes()), "range_end": end, "count_only": true}),
            )?)
            .context("etcd: counting machine records")?;
            let n: u64 = a.count.as_deref().unwrap_or("0").parse()?;
            let rev = revision(&a.header)?;
            let gate = self.gate_key();
            let txn = json!({
                "compare": [
                    {"key": b64(gate.as_bytes()), "target": "VERSION", "result": "EQUAL",
                        "version": "0"},
                    {"key": b64(p.as_bytes()), "range_end": end, "target": "CREATE",
                        "result": "LESS", "create_revision": (rev + 1).to_string()},
                ],
                "success": [
                    {"request_put": {"key": b64(gate.as_bytes()), "value": b64(b"1")}},
                    {"request_put": {"key": b64(self.shard_key(0).as_bytes()),
                        "value": b64(n.to_string().as_bytes())}},
                ],
                "failure": [{"request_range": {"key": b64(gate.as_bytes())}}],
            });
            let a: TxnAnswer = serde_json::from_slice(&self.post("/v3/kv/txn", &txn)?)
                .context("etcd: setting up the machine count")?;
            let gate_there = a
                .responses
                .into_iter()
                .next()
                .and_then(|r| r.response_range)
                .is_some_and(|r| !r.kvs.is_empty());
            if a.succeeded || gate_there {
                return Ok(());
            }
        }
        bail!(
            "etcd: machine records kept being created while counting them ({CONFLICT_TRIES} tries)"
        )
    }

    /// The compares and puts that add `new` machines to count `c` (read with the records):
    /// far from the limit, this writer's shard and the gate; near it, every key of the count
    /// unchanged since the read, and the gate bumped (module docs).
    fn count_ops(&self, c: &Count, new: u64) -> (Vec<Value>, Vec<Value>) {
        let i = my_shard();
        let (v, rev) = c.shards[i];
        let shard = self.shard_key(i);
        let mut puts = vec![json!({"request_put": {"key": b64(shard.as_bytes()),
            "value": b64((v + new).to_string().as_bytes())}})];
        let gate = self.gate_key();
        let far = c.total + new + NEAR <= self.opts.max_machines;
        let compares = if far {
            vec![
                compare_mod(&shard, rev),
                compare_mod(&gate, c.gate.unwrap_or(0)),
            ]
        } else {
            let p = self.key("count/");
            puts.push(json!({"request_put": {"key": b64(gate.as_bytes()), "value": b64(b"1")}}));
            vec![
                json!({"key": b64(p.as_bytes()), "range_end": b64(&prefix_end(&p)),
                "target": "MOD", "result": "LESS", "mod_revision": (c.revision + 1).to_string()}),
            ]
        };
        (compares, puts)
    }

    fn full(&self) -> Full {
        Full {
            max: self.opts.max_machines,
        }
    }
}

/// A short pause before reading again after a lost race, different per thread and attempt.
fn backoff(attempt: u32) {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(attempt);
    let ms = 1 + h.finish() % (2 * u64::from(attempt.min(10)) + 2);
    std::thread::sleep(Duration::from_millis(ms));
}

impl Etcd {
    /// Records reports of distinct machines in one read and one transaction (see
    /// `record_batch`). Ok(None): not done, record them one by one (a record changed meanwhile,
    /// or they do not fit one transaction).
    fn record_together(&self, batch: &[(&Report, &Origin)]) -> Result<Option<Vec<Recorded>>> {
        let mkey = |r: &Report| self.key(&format!("machines/{}", r.machine.id));
        // Records this replica wrote last are not read again: the txn's compare on their
        // mod_revision finds out if another replica wrote one since (then the reports are
        // recorded one by one, reading every record).
        let cached: Vec<Option<(Machine, i64)>> = {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            batch
                .iter()
                .map(|(r, _)| recent.take(&r.machine.id))
                .collect()
        };
        let missing: Vec<String> = batch
            .iter()
            .zip(&cached)
            .filter(|(_, c)| c.is_none())
            .map(|((r, _), _)| mkey(r))
            .collect();
        let (mut records, count) = if missing.is_empty() {
            (Vec::new().into_iter(), None)
        } else {
            let (records, count) = self.read_with_count(&missing)?;
            (records.into_iter(), Some(count))
        };
        let mut new = 0;
        let (mut txn, mut results) = (TxnBody::default(), Vec::new());
        // Records for `recent` once written: (record, its mod_revision if unchanged).
        let mut keep: Vec<(Machine, Option<i64>)> = Vec::new();
        let mut bytes = 0;
        for ((r, origin), c) in batch.iter().zip(cached) {
            let (old, rev) = match c {
                Some((m, rev)) => (Some(m), rev),
                None => match records.next().flatten() {
                    Some((v, rev)) => {
                        let m = serde_json::from_slice::<Machine>(&v)
                            .with_context(|| format!("etcd: reading machine {}", r.machine.id))?;
                        (Some(m), rev)
                    }
                    None => {
                        let total = count.as_ref().map_or(u64::MAX, |c| c.total);
                        if total.saturating_add(new) >= self.opts.max_machines {
                            results.push(Recorded::Full(self.full()));
                            continue;
                        }
                        new += 1;
                        (None, 0)
                    }
                },
            };
            let (m, applied) = model::apply(old, r, origin);
            let Applied::Recorded { store, drop } = applied else {
                keep.push((m, Some(rev)));
                results.push(Recorded::Duplicate);
                continue;
            };
            let key = mkey(r);
            txn.compare_mod(&key, rev);
            let record = serde_json::to_vec(&m)?;
            bytes += record.len();
            txn.put(&key, &record);
            let dkey = |id: &str| self.key(&format!("details/{}/{id}", r.machine.id));
            for id in drop {
                txn.delete(&dkey(&id));
            }
            if let Some(id) = store {
                let d = model::detail_json(r)?;
                bytes += d.len();
                txn.put(&dkey(&id), &d);
            }
            keep.push((m, None));
            results.push(Recorded::New);
        }
        let mut txn_revision = None;
        if txn.ops > 0 {
            if new > 0 {
                let Some(count) = &count else {
                    bail!("etcd: new machines without the machine count");
                };
                let (c, p) = self.count_ops(count, new);
                for v in &c {
                    txn.compare_value(v)?;
                }
                for v in &p {
                    txn.op_value(v)?;
                }
            }
            if txn.ops > 120 || bytes > BATCH_BYTES {
                return Ok(None);
            }
            let a: TxnAnswer =
                serde_json::from_slice(&self.post_bytes("/v3/kv/txn", &txn.finish())?)
                    .context("etcd: writing machine records")?;
            if !a.succeeded {
                return Ok(None);
            }
            txn_revision = Some(revision(&a.header)?);
        }
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        for (m, rev) in keep {
            if let Some(rev) = rev.or(txn_revision).filter(|&r| r > 0) {
                recent.put(m.id.clone(), (m, rev));
            }
        }
        Ok(Some(results))
    }
}

impl Etcd {
    /// Machine `id`'s record at `mkey` with its `mod_revision` (0: none yet), and the
    /// machine count, in one read.
    fn machine_with_count(&self, mkey: &str, id: &str) -> Result<(Option<Machine>, i64, Count)> {
        let (mut got, count) = self.read_with_count(&[mkey.to_string()])?;
        Ok(match got.pop().flatten() {
            Some((v, rev)) => (
                Some(
                    serde_json::from_slice::<Machine>(&v)
                        .with_context(|| format!("etcd: reading machine {id}"))?,
                ),
                rev,
                count,
            ),
            None => (None, 0, count),
        })
    }
}

impl Etcd {
    /// Records one report: read, apply, a transaction that writes it only if the record is
    /// unchanged; a lost race reads again ([`CONFLICT_TRIES`] times).
    fn record_one(&self, r: &Report, origin: &Origin) -> Result<Recorded> {
        let _ = self.recent().take(&r.machine.id);
        let mkey = self.key(&format!("machines/{}", r.machine.id));
        let dkey = |id: &str| self.key(&format!("details/{}/{id}", r.machine.id));
        for attempt in 0..CONFLICT_TRIES {
            if attempt > 0 {
                backoff(attempt);
            }
            let (old, rev, count) = self.machine_with_count(&mkey, &r.machine.id)?;
            if old.is_none() && count.total >= self.opts.max_machines {
                return Ok(Recorded::Full(self.full()));
            }
            let created = old.is_none();
            let (m, applied) = model::apply(old, r, origin);
            let Applied::Recorded { store, drop } = applied else {
                return Ok(Recorded::Duplicate);
            };
            let mut compare = vec![compare_mod(&mkey, rev)];
            let mut ops = vec![json!({"request_put": {
                "key": b64(mkey.as_bytes()),
                "value": b64(&serde_json::to_vec(&m)?),
            }})];
            for id in drop {
                ops.push(json!({"request_delete_range": {"key": b64(dkey(&id).as_bytes())}}));
            }
            if let Some(id) = store {
                ops.push(json!({"request_put": {
                    "key": b64(dkey(&id).as_bytes()),
                    "value": b64(&model::detail_json(r)?),
                }}));
            }
            if created {
                let (c, p) = self.count_ops(&count, 1);
                compare.extend(c);
                ops.extend(p);
            }
            let txn = json!({"compare": compare, "success": ops});
            let a: TxnAnswer = serde_json::from_slice(&self.post("/v3/kv/txn", &txn)?)
                .with_context(|| format!("etcd: writing machine {}", r.machine.id))?;
            if a.succeeded {
                if let Some(rev) = revision(&a.header).ok().filter(|&r| r > 0) {
                    self.recent().put(m.id.clone(), (m, rev));
                }
                return Ok(Recorded::New);
            }
        }
        bail!(
            "etcd: machine {}'s record kept changing under report {} ({CONFLICT_TRIES} tries)",
            r.machine.id,
            r.id
        )
    }
}

impl Records for Etcd {
    /// Reports of different machines in one read and one transaction each batch: the
    /// records read together (a txn of ranges), the reports applied, then one txn that
    /// writes them all only if none of the records changed meanwhile. When one did (another
    /// replica wrote it), or the batch does not fit one transaction, the reports of it are
    /// recorded one by one.
    fn record_batch(&self, batch: &[(&Report, &Origin)]) -> Vec<Result<Recorded>> {
        let mut out: Vec<Option<Result<Recorded>>> = batch.iter().map(|_| None).collect();
        let mut left: Vec<usize> = (0..batch.len()).collect();
        while !left.is_empty() {
            // A chunk: one report per machine (a second one of a machine waits for the next).
            let mut seen = std::collections::HashSet::new();
            let (chunk, rest): (Vec<usize>, Vec<usize>) = left
                .iter()
                .partition(|&&i| seen.insert(batch[i].0.machine.id.as_str()));
            left = rest;
            for part in chunk.chunks(BATCH) {
                let reports: Vec<(&Report, &Origin)> = part.iter().map(|&i| batch[i]).collect();
                match self.record_together(&reports) {
                    Ok(Some(rs)) => {
                        for (&i, r) in part.iter().zip(rs) {
                            out[i] = Some(Ok(r));
                        }
                    }
                    Ok(None) => {
                        for &i in part {
                            out[i] = Some(self.record_one(batch[i].0, batch[i].1));
                        }
                    }
                    Err(e) => {
                        let msg = format!("{e:#}");
                        for &i in part {
                            out[i] = Some(Err(anyhow!(msg.clone())));
                        }
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(anyhow!("a report of the batch was not recorded"))))
            .collect()
    }

    /// Transactions of different writers run at once; one takes [`BATCH`] reports.
    fn commits(&self) -> Commits {
        Commits {
            concurrent: true,
            max_reports: Some(BATCH),
        }
    }

    fn machine_count(&self) -> Result<u64> {
        Ok(self.read_with_count(&[])?.1.total)
    }

    fn machine(&self, id: &str) -> Result<Option<Machine>> {
        let Some((v, _)) = self.get(&self.key(&format!("machines/{id}")))? else {
            return Ok(None);
        };
        let mut m: Machine =
            serde_json::from_slice(&v).with_context(|| format!("etcd: reading machine {id}"))?;
        let mut details = std::collections::HashMap::new();
        let dprefix = self.key(&format!("details/{id}/"));
        for (k, v) in self.scan(&dprefix)? {
            details.insert(k[dprefix.len()..].to_string(), v);
        }
        for s in m.boots.iter_mut().flat_map(|b| b.stages.iter_mut()) {
            if let Some(v) = details.get(&s.report_id) {
                s.detail = Some(serde_json::from_slice::<Detail>(v).with_context(|| {
                    format!("etcd: reading report {} of machine {id}", s.report_id)
                })?);
            }
        }
        Ok(Some(m))
    }

    fn update(
        &self,
        id: &str,
        f: &mut dyn FnMut(Option<Machine>) -> Option<Machine>,
    ) -> Result<Option<Machine>> {
        let _ = self.recent().take(id);
        let mkey = self.key(&format!("machines/{id}"));
        for attempt in 0..CONFLICT_TRIES {
            if attempt > 0 {
                backoff(attempt);
            }
            let (old, rev, count) = self.machine_with_count(&mkey, id)?;
            let Some(m) = f(old.clone()) else {
                return Ok(old);
            };
            if old.is_some() {
                if self.put_if(&mkey, rev, &serde_json::to_vec(&m)?, None)? {
                    return Ok(Some(m));
                }
                continue;
            }
            if count.total >= self.opts.max_machines {
                return Err(self.full().into());
            }
            let (mut compare, mut ops) = self.count_ops(&count, 1);
            compare.push(compare_mod(&mkey, 0));
            ops.push(json!({"request_put": {"key": b64(mkey.as_bytes()),
                "value": b64(&serde_json::to_vec(&m)?)}}));
            let a: TxnAnswer = serde_json::from_slice(
                &self.post("/v3/kv/txn", &json!({"compare": compare, "success": ops}))?,
            )
            .with_context(|| format!("etcd: writing machine {id}"))?;
            if a.succeeded {
                return Ok(Some(m));
            }
        }
        bail!("etcd: machine {id}'s record kept changing ({CONFLICT_TRIES} tries)")
    }

    /// One txn, only if the record and the count's shard it takes one from are unchanged:
    /// the record and its details deleted, that shard one less (a lost race reads again).
    fn remove(&self, id: &str) -> Result<Option<Machine>> {
        let _ = self.recent().take(id);
        let mkey = self.key(&format!("machines/{id}"));
        let dprefix = self.key(&format!("details/{id}/"));
        for attempt in 0..CONFLICT_TRIES {
            if attempt > 0 {
                backoff(attempt);
            }
            let (old, rev, count) = self.machine_with_count(&mkey, id)?;
            let Some(m) = old else {
                return Ok(None);
            };
            let mine = my_shard();
            let Some(i) = std::iter::once(mine)
                .chain(0..COUNT_SHARDS)
                .find(|&i| count.shards[i].0 > 0)
            else {
                bail!("etcd: machine {id} is recorded but the machine count is 0");
            };
            let (n, srev) = count.shards[i];
            let shard = self.shard_key(i);
            let txn = json!({
                "compare": [compare_mod(&mkey, rev), compare_mod(&shard, srev)],
                "success": [
                    {"request_delete_range": {"key": b64(mkey.as_bytes())}},
                    {"request_delete_range": {"key": b64(dprefix.as_bytes()),
                        "range_end": b64(&prefix_end(&dprefix))}},
                    {"request_put": {"key": b64(shard.as_bytes()),
                        "value": b64((n - 1).to_string().as_bytes())}},
                ],
            });
            let a: TxnAnswer = serde_json::from_slice(&self.post("/v3/kv/txn", &txn)?)
                .with_context(|| format!("etcd: removing machine {id}"))?;
            if a.succeeded {
                return Ok(Some(m));
            }
        }
        bail!("etcd: machine {id}'s record kept changing ({CONFLICT_TRIES} tries)")
    }

    fn each_machine(
        &self,
        filter: &Filter,
        after: Option<&str>,
        visit: &mut dyn FnMut(Machine) -> bool,
    ) -> Result<()> {
        let prefix = self.key("machines/");
        let from = after.map(|a| format!("{prefix}{a}"));
        self.scan_each(&prefix, from.as_deref(), &mut |k, v| {
            let m: Machine =
                serde_json::from_slice(&v).with_context(|| format!("etcd: reading {k}"))?;
            Ok(!filter.matches(&m) || visit(m))
        })
    }
}

impl BootTokens for Etcd {
    /// Put under a lease that ends when the record may be forgotten: etcd removes it.
    fn put_boot_token(&self, key: &str, t: &BootToken, now: u64) -> Result<()> {
        let ttl = t.forget_after().saturating_sub(now).max(1);
        let lease: LeaseAnswer = serde_json::from_slice(
            &self.post("/v3/lease/grant", &json!({"TTL": ttl.to_string()}))?,
        )
        .context("etcd: granting a lease for a boot token")?;
        let k = self.key(&format!("boot-tokens/{key}"));
        self.post(
            "/v3/kv/put",
            &json!({"key": b64(k.as_bytes()), "value": b64(&serde_json::to_vec(t)?),
                "lease": lease.id}),
        )
        .context("etcd: writing a boot token")?;
        Ok(())
    }

    /// Read, decide, then a transaction that writes the spent record only if the key's
    /// mod_revision is still the one read: of replicas spending one token at once, one
    /// transaction succeeds; the others read again and find it spent.
    fn spend_boot_token(&self, key: &str, now: u64) -> Result<Spend> {
        let k = self.key(&format!("boot-tokens/{key}"));
        for attempt in 0..CONFLICT_TRIES {
            if attempt > 0 {
                backoff(attempt);
            }
            let Some((v, rev)) = self.get_with_lease(&k)? else {
                return Ok(Spend::Refused("unknown token"));
            };
            let old: BootToken =
                serde_json::from_slice(&v.0).context("etcd: reading a boot token")?;
            let (spend, new) = Spend::decide(Some(old), now);
            let Some(new) = new else {
                return Ok(spend);
            };
            if self.put_if(&k, rev, &serde_json::to_vec(&new)?, v.1.as_deref())? {
                return Ok(spend);
            }
        }
        bail!("etcd: a boot token kept changing ({CONFLICT_TRIES} tries)")
    }

    fn forget_boot_token(&self, key: &str) -> Result<()> {
        let k = self.key(&format!("boot-tokens/{key}"));
        self.post("/v3/kv/deleterange", &json!({"key": b64(k.as_bytes())}))
            .context("etcd: forgetting a boot token")?;
        Ok(())
    }

    fn boot_token(&self, key: &str) -> Result<Option<BootToken>> {
        let k = self.key(&format!("boot-tokens/{key}"));
        match self.get(&k)? {
            None => Ok(None),
            Some((v, _)) => Ok(Some(
                serde_json::from_slice(&v).context("etcd: reading a boot token")?,
            )),
        }
    }
}

impl Rollouts for Etcd {
    fn rollout(&self, pool: &str) -> Result<Option<Rollout>> {
        let k = self.key(&format!("rollouts/{pool}"));
        match self.get(&k)? {
            None => Ok(None),
            Some((v, _)) => Ok(Some(
                serde_json::from_slice(&v).with_context(|| format!("etcd: reading {k}"))?,
            )),
        }
    }

    /// Read, decide, then a transaction that writes only if the key's mod_revision is still
    /// the one read (0: absent); a lost race reads again.
    fn update_rollout(
        &self,
        pool: &str,
        f: &mut dyn FnMut(Option<Rollout>) -> Option<Rollout>,
    ) -> Result<Option<Rollout>> {
        let k = self.key(&format!("rollouts/{pool}"));
        for attempt in 0..CONFLICT_TRIES {
            if attempt > 0 {
                backoff(attempt);
            }
            let (old, rev) = match self.get(&k)? {
                None => (None, 0),
                Some((v, rev)) => (
                    Some(
                        serde_json::from_slice::<Rollout>(&v)
                            .with_context(|| format!("etcd: reading {k}"))?,
                    ),
                    rev,
                ),
            };
            let Some(new) = f(old.clone()) else {
                return Ok(old);
            };
            if self.put_if(&k, rev, &serde_json::to_vec(&new)?, None)? {
                return Ok(Some(new));
            }
        }
        bail!("etcd: pool {pool}'s rollout kept changing ({CONFLICT_TRIES} tries)")
    }
}

impl Store for Etcd {
    fn health(&self) -> &Health {
        &self.health
    }

    fn probe(&self) {
        self.probe_members()
    }
}
