//! The etcd store: the inventory in an etcd v3 cluster, through its JSON gateway
//! (`POST /v3/kv/range`, `/v3/kv/txn`; keys and values in base64), so replicas of the server
//! share one inventory. Plain blocking HTTP with ureq, no async runtime, no gRPC stack.
//!
//! Keys, under the prefix (default `/agent/inventory/`):
//! - `machines/<machine id>`: the record (JSON);
//! - `details/<machine id>/<report id>`: a report's changes and log tail (JSON).
//!
//! Recording a report is optimistic read-modify-write: range the record (its `mod_revision`),
//! [`apply`](super::model::apply) the report, then one txn that puts the record and the
//! details only if the record's `mod_revision` is unchanged (0: still absent). A lost race
//! reads again ([`CONFLICT_TRIES`] times). Retried reports are recognised by the record's
//! recent ids, so a txn that committed but whose answer was lost (a member killed mid-request)
//! is not applied twice when it is retried on the next member.
//!
//! Members: each request goes to the member that answered last; on a connection failure, a
//! time-out or a 5xx answer it goes to the next, [`ROUNDS`] times round the list, waiting
//! [`ROUND_PAUSE`] (doubling) between rounds, so a leader election (about 1 s) is ridden out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use serde_json::{Value, json};
use spec::encoding::data_url::{base64_decode, base64_encode};

use super::model::{self, Applied, Detail, Filter, Machine, Origin, Report};
use super::store::{BootToken, Recorded, Spend, Store};

/// Time to connect to a member.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time for a whole request to a member (connect, send, answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Times round the member list before a request fails.
pub const ROUNDS: u32 = 4;
/// Pause after the first round without an answer; doubles each round (0.25 + 0.5 + 1 s).
pub const ROUND_PAUSE: Duration = Duration::from_millis(250);
/// Read-modify-write attempts of one report when other writers keep changing the record.
pub const CONFLICT_TRIES: u32 = 32;
/// Writer threads of the server, each with one batch in flight to the cluster.
pub const WRITERS: usize = 16;
/// Reports written in one transaction at most (etcd's `--max-txn-ops` is 128 by default: a
/// report is two or three operations).
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
}

impl EtcdOptions {
    pub fn new(endpoints: Vec<String>) -> EtcdOptions {
        EtcdOptions {
            endpoints,
            prefix: "/agent/inventory/".into(),
        }
    }
}

pub struct Etcd {
    opts: EtcdOptions,
    agent: ureq::Agent,
    /// The member that answered last.
    current: AtomicUsize,
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
            .max_idle_connections(WRITERS * 2)
            .max_idle_connections_per_host(WRITERS)
            .build()
            .into();
        Ok(Etcd {
            opts,
            agent,
            current: AtomicUsize::new(0),
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

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.opts.prefix)
    }

    fn post_once(&self, endpoint: &str, path: &str, body: &Value) -> Result<Value, Failed> {
        let url = format!("{}{path}", endpoint.trim_end_matches('/'));
        let body = serde_json::to_vec(body).map_err(|e| Failed {
            retry: false,
            err: e.into(),
        })?;
        let mut resp = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(&body[..])
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
        serde_json::from_slice(&text).map_err(|e| Failed {
            retry: false,
            err: anyhow!("etcd: POST {url}: the answer is not JSON: {e}"),
        })
    }

    /// POSTs to the current member, moving on to the next on failure (module docs).
    fn post(&self, path: &str, body: &Value) -> Result<Value> {
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
                    Ok(v) => return Ok(v),
                    Err(Failed { retry: false, err }) => return Err(err),
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
        Err(last
            .unwrap_or_else(|| anyhow!("no etcd member"))
            .context(format!(
                "no etcd member of {} answered ({ROUNDS} rounds)",
                self.opts.endpoints.join(",")
            )))
    }

    /// Reads one key: its value and mod_revision (0: absent).
    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, i64)>> {
        Ok(self.get_with_lease(key)?.map(|((v, _), rev)| (v, rev)))
    }

    /// Every key/value under `prefix`, a page at a time.
    fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let end = b64(&prefix_end(prefix));
        let mut from = prefix.as_bytes().to_vec();
        let mut out = Vec::new();
        loop {
            let a: RangeAnswer = serde_json::from_value(self.post(
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
                out.push((String::from_utf8_lossy(&k).into_owned(), v));
            }
            if !a.more || got == 0 {
                return Ok(out);
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
        let a: TxnAnswer = serde_json::from_value(self.post("/v3/kv/txn", &txn)?)
            .with_context(|| format!("etcd: writing {key}"))?;
        Ok(a.succeeded)
    }

    /// [`Etcd::get`] with the key's lease: ((value, lease), mod_revision).
    #[allow(clippy::type_complexity)]
    fn get_with_lease(&self, key: &str) -> Result<Option<((Vec<u8>, Option<String>), i64)>> {
        let a: RangeAnswer = serde_json::from_value(
            self.post("/v3/kv/range", &json!({"key": b64(key.as_bytes())}))?,
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
    /// `record_all`). Ok(None): not done, record them one by one (a record changed meanwhile,
    /// or they do not fit one transaction).
    fn record_together(&self, batch: &[(&Report, &Origin)]) -> Result<Option<Vec<Recorded>>> {
        if batch.len() == 1 {
            return Ok(None);
        }
        let mkey = |r: &Report| self.key(&format!("machines/{}", r.machine.id));
        let reads: Vec<Value> = batch
            .iter()
            .map(|(r, _)| json!({"request_range": {"key": b64(mkey(r).as_bytes())}}))
            .collect();
        let a: TxnAnswer = serde_json::from_value(
            self.post("/v3/kv/txn", &json!({"compare": [], "success": reads}))?,
        )
        .context("etcd: reading machine records")?;
        if a.responses.len() != batch.len() {
            bail!(
                "etcd: {} answers to {} reads of machine records",
                a.responses.len(),
                batch.len()
            );
        }
        let (mut compare, mut ops, mut results) = (Vec::new(), Vec::new(), Vec::new());
        let mut bytes = 0;
        for ((r, origin), resp) in batch.iter().zip(a.responses) {
            let kv = resp.response_range.and_then(|a| a.kvs.into_iter().next());
            let (old, rev) = match kv {
                Some(kv) => {
                    let v = base64_decode(kv.value.as_bytes())
                        .with_context(|| format!("etcd: the record of machine {}", r.machine.id))?;
                    let rev = kv.mod_revision.as_deref().unwrap_or("0").parse::<i64>()?;
                    let m = serde_json::from_slice::<Machine>(&v)
                        .with_context(|| format!("etcd: reading machine {}", r.machine.id))?;
                    (Some(m), rev)
                }
                None => (None, 0),
            };
            let (m, applied) = model::apply(old, r, origin);
            let Applied::Recorded { store, drop } = applied else {
                results.push(Recorded::Duplicate);
                continue;
            };
            let key = mkey(r);
            compare.push(json!({"key": b64(key.as_bytes()), "target": "MOD",
                "result": "EQUAL", "mod_revision": rev.to_string()}));
            let record = serde_json::to_vec(&m)?;
            bytes += record.len();
            ops.push(json!({"request_put": {"key": b64(key.as_bytes()), "value": b64(&record)}}));
            let dkey = |id: &str| self.key(&format!("details/{}/{id}", r.machine.id));
            for id in drop {
                ops.push(json!({"request_delete_range": {"key": b64(dkey(&id).as_bytes())}}));
            }
            if let Some(id) = store {
                let d = serde_json::to_vec(&model::detail(r))?;
                bytes += d.len();
                ops.push(
                    json!({"request_put": {"key": b64(dkey(&id).as_bytes()), "value": b64(&d)}}),
                );
            }
            results.push(Recorded::New);
        }
        if ops.is_empty() {
            return Ok(Some(results));
        }
        if ops.len() > 120 || bytes > BATCH_BYTES {
            return Ok(None);
        }
        let a: TxnAnswer = serde_json::from_value(
            self.post("/v3/kv/txn", &json!({"compare": compare, "success": ops}))?,
        )
        .context("etcd: writing machine records")?;
        Ok(a.succeeded.then_some(results))
    }
}

impl Etcd {
    /// Machine `id`'s record at `mkey` with its `mod_revision` (0: none yet).
    fn machine_at(&self, mkey: &str, id: &str) -> Result<(Option<Machine>, i64)> {
        Ok(match self.get(mkey)? {
            Some((v, rev)) => (
                Some(
                    serde_json::from_slice::<Machine>(&v)
                        .with_context(|| format!("etcd: reading machine {id}"))?,
                ),
                rev,
            ),
            None => (None, 0),
        })
    }
}

impl Store for Etcd {
    fn record(&self, r: &Report, origin: &Origin) -> Result<Recorded> {
        let mkey = self.key(&format!("machines/{}", r.machine.id));
        let dkey = |id: &str| self.key(&format!("details/{}/{id}", r.machine.id));
        for attempt in 0..CONFLICT_TRIES {
            if attempt > 0 {
                backoff(attempt);
            }
            let (old, rev) = self.machine_at(&mkey, &r.machine.id)?;
            let (m, applied) = model::apply(old, r, origin);
            let Applied::Recorded { store, drop } = applied else {
                return Ok(Recorded::Duplicate);
            };
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
                    "value": b64(&serde_json::to_vec(&model::detail(r))?),
                }}));
            }
            let txn = json!({
                "compare": [{
                    "key": b64(mkey.as_bytes()),
                    "target": "MOD",
                    "result": "EQUAL",
                    "mod_revision": rev.to_string(),
                }],
                "success": ops,
            });
            let a: TxnAnswer = serde_json::from_value(self.post("/v3/kv/txn", &txn)?)
                .with_context(|| format!("etcd: writing machine {}", r.machine.id))?;
            if a.succeeded {
                return Ok(Recorded::New);
            }
        }
        bail!(
            "etcd: machine {}'s record kept changing under report {} ({CONFLICT_TRIES} tries)",
            r.machine.id,
            r.id
        )
    }

    /// Reports of different machines in one read and one transaction each batch: the
    /// records read together (a txn of ranges), the reports applied, then one txn that
    /// writes them all only if none of the records changed meanwhile. When one did (another
    /// replica wrote it), or the batch does not fit one transaction, the reports of it are
    /// recorded one by one ([`Store::record`]).
    fn record_all(&self, batch: &[(&Report, &Origin)]) -> Vec<Result<Recorded>> {
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
                            out[i] = Some(self.record(batch[i].0, batch[i].1));
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

    /// [`BATCH`] reports of one machine each in flight per writer.
    fn writers(&self) -> (usize, usize) {
        (WRITERS, BATCH)
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
        let mkey = self.key(&format!("machines/{id}"));
        for attempt in 0..CONFLICT_TRIES {
            if attempt > 0 {
                backoff(attempt);
            }
            let (old, rev) = self.machine_at(&mkey, id)?;
            let Some(m) = f(old.clone()) else {
                return Ok(old);
            };
            if self.put_if(&mkey, rev, &serde_json::to_vec(&m)?, None)? {
                return Ok(Some(m));
            }
        }
        bail!("etcd: machine {id}'s record kept changing ({CONFLICT_TRIES} tries)")
    }

    /// Put under a lease that ends when the record may be forgotten: etcd removes it.
    fn put_boot_token(&self, key: &str, t: &BootToken, now: u64) -> Result<()> {
        let ttl = t.forget_after().saturating_sub(now).max(1);
        let lease: LeaseAnswer =
            serde_json::from_value(self.post("/v3/lease/grant", &json!({"TTL": ttl.to_string()}))?)
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

    fn boot_token(&self, key: &str) -> Result<Option<BootToken>> {
        let k = self.key(&format!("boot-tokens/{key}"));
        match self.get(&k)? {
            None => Ok(None),
            Some((v, _)) => Ok(Some(
                serde_json::from_slice(&v).context("etcd: reading a boot token")?,
            )),
        }
    }

    fn machines(&self, filter: &Filter) -> Result<Vec<Machine>> {
        let mut out = Vec::new();
        for (k, v) in self.scan(&self.key("machines/"))? {
            let m: Machine =
                serde_json::from_slice(&v).with_context(|| format!("etcd: reading {k}"))?;
            if filter.matches(&m) {
                out.push(m);
            }
        }
        Ok(out)
    }
}
