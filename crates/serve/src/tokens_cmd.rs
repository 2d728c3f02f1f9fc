//! `agent token`: show the bearer tokens. With a key (`--token-key`, as the servers use) the
//! tokens are computed from the key and the source, exactly as every replica computes them;
//! with the legacy token store ([`super::tokens::Store`]) they are read from it, and `rotate`
//! and `revoke` change it (the servers sharing the store pick the change up).

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

/// `agent token show`.
pub fn show_tokens(t: &Tokens, pool: Option<&str>, reveal: bool) -> Result<()> {
    match t {
        Tokens::Store(s) => show(s, pool, reveal),
        Tokens::Derived {
            key,
            schedule,
            source,
        } => {
            let now = tokens::default_clock().now();
            let mut out = std::io::stdout().lock();
            for p in derived(key, schedule, source, now)? {
                if pool.is_some_and(|x| x != p.pool) {
                    continue;
                }
                for (role, e) in &p.epochs {
                    let tok = key.token(&p.pool, &p.config_hash, schedule.period(), *e);
                    let h = spec::encoding::hex(&tokens::hash_token(&tok));
                    writeln!(
                        out,
                        "{}\t{role}\tsha256:{}\tconfig={}\tcreated={}\texpires={}\tvalid",
                        p.pool,
                        &h[..12],
                        p.config_name,
                        schedule.issued(*e),
                        schedule.expires(*e)
                    )?;
                }
                if reveal {
                    writeln!(out, "{}\ttoken\t{}", p.pool, p.current)?;
                }
            }
            Ok(())
        }
    }
}

/// Lists the tokens of every pool (or only `pool`): pool, current/previous, hash prefix,
/// created, expires, valid/expired; with `reveal`, each pool's current token in clear.
pub fn show(store: &Store, pool: Option<&str>, reveal: bool) -> Result<()> {
    let now = tokens::default_clock().now();
    let s = store.read()?;
    let mut out = std::io::stdout().lock();
    for (p, list) in &s.state.pools {
        if pool.is_some_and(|x| x != p) {
            continue;
        }
        for (i, e) in list.iter().enumerate() {
            let role = if i == 0 { "current" } else { "previous" };
            let state = if e.expires <= now { "expired" } else { "valid" };
            writeln!(
                out,
                "{p}\t{role}\tsha256:{}\tcreated={}\texpires={}\t{state}",
                e.hash.get(..12).unwrap_or(&e.hash),
                e.created,
                e.expires
            )?;
        }
        if reveal && let Some(t) = s.plaintext.get(p) {
            writeln!(out, "{p}\ttoken\t{t}")?;
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
