//! `agent token`: show, rotate and revoke the bearer tokens in a token store
//! ([`super::tokens::Store`]) outside a running server; the servers sharing the store pick
//! the change up.

use std::io::Write;
use std::time::Duration;

use anyhow::{Result, bail};

use super::source;
use super::tokens::{self, Store};

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
