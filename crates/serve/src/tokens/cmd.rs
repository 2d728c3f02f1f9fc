//! `agent token`: show the bearer tokens. With a key (`--token-key`, as the servers use) the
//! tokens are computed from the key and the source, exactly as every replica computes them;
//! with the legacy token store ([`crate::tokens::Store`]) they are read from it, and `rotate`
//! and `revoke` change it (the servers sharing the store pick the change up).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::source;
use crate::tokens::{self, Key, Schedule, Store};

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
    role: &'static str,
    hash: String,
    config: Option<String>,
    created: u64,
    expires: u64,
    valid: bool,
}

/// A pool's tokens, and its current token in clear when revealed.
struct PoolShown {
    pool: String,
    tokens: Vec<Shown>,
    revealed: Option<String>,
}

/// `agent token show`: every pool's tokens (or only `pool`'s), a line each (pool,
/// current/previous, hash prefix, config, created, expires, valid/expired), or with `json`
/// one document (`{"tokens": [...], "revealed": {pool: token}}`, times in RFC 3339); with
/// `reveal`, each pool's current token in clear.
pub fn show_tokens(t: &Tokens, pool: Option<&str>, reveal: bool, json: bool) -> Result<()> {
    let now = tokens::default_clock().now();
    let mut pools = Vec::new();
    match t {
        Tokens::Store(store) => {
            let s = store.read()?;
            for (p, list) in &s.state.pools {
                if pool.is_some_and(|x| x != p) {
                    continue;
                }
                let tokens = list
                    .iter()
                    .enumerate()
                    .map(|(i, e)| Shown {
                        role: if i == 0 { "current" } else { "previous" },
                        hash: e.hash.get(..12).unwrap_or(&e.hash).to_string(),
                        config: None,
                        created: e.created,
                        expires: e.expires,
                        valid: e.expires > now,
                    })
                    .collect();
                let revealed = s.plaintext.get(p).filter(|_| reveal).cloned();
                pools.push(PoolShown {
                    pool: p.clone(),
                    tokens,
                    revealed,
                });
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
                let tokens = p
                    .epochs
                    .iter()
                    .map(|(role, e)| {
                        let tok = key.token(&p.pool, &p.config_hash, schedule.period(), *e);
                        let h = spec::encoding::hex(&tokens::hash_token(&tok));
                        Shown {
                            role,
                            hash: h[..12].to_string(),
                            config: Some(p.config_name.clone()),
                            created: schedule.issued(*e),
                            expires: schedule.expires(*e),
                            valid: true,
                        }
                    })
                    .collect();
                pools.push(PoolShown {
                    revealed: reveal.then(|| p.current.clone()),
                    pool: p.pool,
                    tokens,
                });
            }
        }
    }
    let state = |t: &Shown| if t.valid { "valid" } else { "expired" };
    let time = runtime::util::rfc3339;
    let mut out = std::io::stdout().lock();
    if json {
        let list: Vec<serde_json::Value> = pools
            .iter()
            .flat_map(|p| p.tokens.iter().map(move |t| (&p.pool, t)))
            .map(|(pool, t)| {
                serde_json::json!({
                    "pool": pool,
                    "role": t.role,
                    "hash": format!("sha256:{}", t.hash),
                    "config": t.config,
                    "created": time(t.created),
                    "expires": time(t.expires),
                    "state": state(t),
                })
            })
            .collect();
        let mut doc = serde_json::json!({ "tokens": list });
        if reveal {
            let r: BTreeMap<&str, &str> = pools
                .iter()
                .filter_map(|p| Some((p.pool.as_str(), p.revealed.as_deref()?)))
                .collect();
            doc["revealed"] = serde_json::json!(r);
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    for p in &pools {
        for t in &p.tokens {
            let config = t
                .config
                .as_ref()
                .map(|c| format!("\tconfig={c}"))
                .unwrap_or_default();
            writeln!(
                out,
                "{}\t{}\tsha256:{}{config}\tcreated={}\texpires={}\t{}",
                p.pool,
                t.role,
                t.hash,
                time(t.created),
                time(t.expires),
                state(t)
            )?;
        }
        if let Some(tok) = &p.revealed {
            writeln!(out, "{}\ttoken\t{tok}", p.pool)?;
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
