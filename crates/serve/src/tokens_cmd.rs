//! `agent token`: show the bearer tokens. With a key (`--token-key`, as the servers use) the
//! tokens are computed from the key and the source, exactly as every replica computes them;
//! with the legacy token store ([`super::tokens::Store`]) they are read from it, and `rotate`
//! and `revoke` change it (the servers sharing the store pick the change up).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::source;
use super::tokens::{self, Key, Schedule, Store};

/// Where `agent token` and `agent pointer` get tokens from.
pub enum Tokens {
    /// The legacy shared token directory.
    Store(Store),
    /// Derived from the key for the pools and configs of the source.
    Derived {
        key: Box<Key>,
        schedule: Schedule,
        source: PathBuf,
    },
}

/// One pool's derived tokens at a time.
struct PoolTokens {
    pool: String,
    config_name: String,
    config_hash: String,
    /// (role, epoch)
    epochs: Vec<(&'static str, u64)>,
    current: String,
}

fn derived(key: &Key, sch: &Schedule, src: &std::path::Path, now: u64) -> Result<Vec<PoolTokens>> {
    let g = source::load(src).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e} (derived tokens are bound to the configs of a valid source)",
            src.display()
        )
    })?;
    let e = sch.epoch(now);
    Ok(g.pools
        .values()
        .map(|p| {
            let mut epochs = vec![("current", e)];
            if e > 0 && sch.valid(e - 1, now) {
                epochs.push(("previous", e - 1));
            }
            PoolTokens {
                pool: p.name.clone(),
                config_name: p.config_name.clone(),
                config_hash: p.config_hash.clone(),
                epochs,
                current: key.token(&p.name, &p.config_hash, sch.period(), e),
            }
        })
        .collect())
}

impl Tokens {
    /// The token a machine of `pool` should boot with now.
    pub fn current(&self, pool: &str) -> Result<String> {
        match self {
            Tokens::Store(store) => {
                let s = store.read()?;
                s.plaintext.get(pool).cloned().with_context(|| {
                    format!(
                        "no token for pool {pool:?} yet (start `agent serve` or run `agent token rotate --pool {pool}`)"
                    )
                })
            }
            Tokens::Derived {
                key,
                schedule,
                source,
            } => {
                let now = tokens::default_clock().now();
                derived(key, schedule, source, now)?
                    .into_iter()
                    .find(|p| p.pool == pool)
                    .map(|p| p.current)
                    .with_context(|| format!("pool {pool:?} is not in {}", source.display()))
            }
        }
    }
}

/// One token of `agent token show`.
struct Shown {
    pool: String,
    role: &'static str,
    hash: String,
    config: Option<String>,
    created: u64,
    expires: u64,
    valid: bool,
}

/// RFC 3339 in UTC, seconds.
fn rfc3339(secs: u64) -> String {
    let t = runtime::util::utc(secs);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

/// `agent token show`: every pool's tokens (or only `pool`'s), a line each (pool,
/// current/previous, hash prefix, config, created, expires, valid/expired), or with `json`
/// one document (`{"tokens": [...], "revealed": {pool: token}}`, times in RFC 3339); with
/// `reveal`, each pool's current token in clear.
pub fn show_tokens(t: &Tokens, pool: Option<&str>, reveal: bool, json: bool) -> Result<()> {
    let now = tokens::default_clock().now();
    let mut shown = Vec::new();
    let mut revealed = BTreeMap::new();
    match t {
        Tokens::Store(store) => {
            let s = store.read()?;
            for (p, list) in &s.state.pools {
                if pool.is_some_and(|x| x != p) {
                    continue;
                }
                for (i, e) in list.iter().enumerate() {
                    shown.push(Shown {
                        pool: p.clone(),
                        role: if i == 0 { "current" } else { "previous" },
                        hash: e.hash.get(..12).unwrap_or(&e.hash).to_string(),
                        config: None,
                        created: e.created,
                        expires: e.expires,
                        valid: e.expires > now,
                    });
                }
                if reveal && let Some(t) = s.plaintext.get(p) {
                    revealed.insert(p.clone(), t.clone());
                }
            }
        }
        Tokens::Derived {
            key,
            schedule,
            source,
        } => {
            for p in derived(key, schedule, source, now)? {
                if pool.is_some_and(|x| x != p.pool) {
                    continue;
                }
                for (role, e) in &p.epochs {
                    let tok = key.token(&p.pool, &p.config_hash, schedule.period(), *e);
                    let h = spec::encoding::hex(&tokens::hash_token(&tok));
                    shown.push(Shown {
                        pool: p.pool.clone(),
                        role,
                        hash: h[..12].to_string(),
                        config: Some(p.config_name.clone()),
                        created: schedule.issued(*e),
                        expires: schedule.expires(*e),
                        valid: true,
                    });
                }
                if reveal {
                    revealed.insert(p.pool.clone(), p.current.clone());
                }
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if json {
        let list: Vec<serde_json::Value> = shown
            .iter()
            .map(|t| {
                serde_json::json!({
                    "pool": t.pool,
                    "role": t.role,
                    "hash": format!("sha256:{}", t.hash),
                    "config": t.config,
                    "created": rfc3339(t.created),
                    "expires": rfc3339(t.expires),
                    "state": if t.valid { "valid" } else { "expired" },
                })
            })
            .collect();
        let mut doc = serde_json::json!({ "tokens": list });
        if reveal {
            doc["revealed"] = serde_json::json!(revealed);
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    let mut last: Option<&str> = None;
    let print_revealed = |out: &mut std::io::StdoutLock, p: &str| -> Result<()> {
        if let Some(t) = revealed.get(p) {
            writeln!(out, "{p}\ttoken\t{t}")?;
        }
        Ok(())
    };
    for t in &shown {
        if let Some(l) = last
            && l != t.pool
        {
            print_revealed(&mut out, l)?;
        }
        last = Some(&t.pool);
        let config = t
            .config
            .as_ref()
            .map(|c| format!("\tconfig={c}"))
            .unwrap_or_default();
        writeln!(
            out,
            "{}\t{}\tsha256:{}{config}\tcreated={}\texpires={}\t{}",
            t.pool,
            t.role,
            t.hash,
            rfc3339(t.created),
            rfc3339(t.expires),
            if t.valid { "valid" } else { "expired" }
        )?;
    }
    if let Some(l) = last {
        print_revealed(&mut out, l)?;
    }
    // A pool revealed without a listed token (none can be: every stored pool has one).
    for p in revealed.keys() {
        if !shown.iter().any(|t| &t.pool == p) {
            print_revealed(&mut out, p)?;
        }
    }
    Ok(())
}

/// Refuses `rotate` and `revoke` on derived tokens, saying what does it instead.
pub fn store_only<'a>(t: &'a Tokens, what: &str) -> Result<&'a Store> {
    match t {
        Tokens::Store(s) => Ok(s),
        Tokens::Derived { .. } => bail!(
            "`agent token {what}` changes a token store; with --token-key the tokens are derived and rotate by themselves every TTL/2. To {}, {}",
            if what == "rotate" {
                "replace every token now"
            } else {
                "revoke a pool's tokens"
            },
            if what == "rotate" {
                "replace the key file (this revokes every token of the old key)"
            } else {
                "remove the pool from the source (all replicas revoke its tokens within a poll interval), or replace the key file"
            }
        ),
    }
}

/// Issues a new current token for `pool`, valid for `ttl`; the previous one stays valid until
/// it expires.
pub fn rotate(store: &Store, pool: &str, ttl: Duration) -> Result<()> {
    let now = tokens::default_clock().now();
    if !source::valid_pool_name(pool) {
        bail!("invalid pool name {pool:?}");
    }
    store.update(|s| s.rotate(pool, now, ttl.as_secs()))?;
    eprintln!("rotated the token of pool {pool}");
    Ok(())
}

/// Revokes every token of `pool` at once.
pub fn revoke(store: &Store, pool: &str) -> Result<()> {
    let n = store.update(|s| Ok(s.revoke(pool)))?;
    eprintln!("revoked {n} token(s) of pool {pool}");
    Ok(())
}
