//! Bearer tokens for `/ignition` (seed: ignition-server-tokens.txt).
//!
//! One token per pool. A token is rotated once it has lived TTL/2; the previous one stays
//! valid until its own TTL, so two coexist for TTL/2. Expired tokens are removed, and a
//! pool's tokens are revoked at once when the pool leaves the source.
//!
//! State lives in a directory every replica sees (default `SOURCE/tokens`), written with the
//! AtomicWriter protocol (`..data` → `..<stamp>` swapped by rename) under an flock:
//! `state.json` holds only SHA-256 hashes with creation and expiry times; `<pool>.token`
//! (mode 0600) holds the plaintext of the pool's current token, for `agent pointer` only.
//! The server verifies against hashes, in constant time, and never logs a token.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::encoding::hex;

/// Default token lifetime: 11 hours.
pub const DEFAULT_TTL: u64 = 11 * 3600;

/// Unix time in seconds, injectable for tests.
pub trait Clock: Send + Sync {
    fn now(&self) -> u64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }
}

/// A clock tests step by hand.
#[derive(Default)]
pub struct FakeClock(pub AtomicU64);

impl FakeClock {
    pub fn new(t: u64) -> Self {
        FakeClock(AtomicU64::new(t))
    }
    pub fn set(&self, t: u64) {
        self.0.store(t, Ordering::SeqCst)
    }
    pub fn advance(&self, d: u64) {
        self.0.fetch_add(d, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Test hook for driving the binary through a TTL: the clock reads unix seconds from the file
/// named by `AGENT_SERVE_TEST_CLOCK` (undocumented on purpose; never set it in production).
pub struct FileClock(pub PathBuf);

impl Clock for FileClock {
    fn now(&self) -> u64 {
        for _ in 0..5 {
            if let Some(t) = std::fs::read_to_string(&self.0)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return t;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        SystemClock.now()
    }
}

/// The clock the server uses.
pub fn default_clock() -> Box<dyn Clock> {
    // Test builds only (feature `test-hooks`): the shipped binary does not read the variable.
    #[cfg(feature = "test-hooks")]
    if let Some(p) = std::env::var_os("AGENT_SERVE_TEST_CLOCK") {
        return Box::new(FileClock(p.into()));
    }
    Box::new(SystemClock)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenEntry {
    /// Hex SHA-256 of the token.
    pub hash: String,
    pub created: u64,
    pub expires: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Pool → tokens, newest first (the first one is current).
    pub pools: BTreeMap<String, Vec<TokenEntry>>,
}

/// State plus the plaintext of each pool's current token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    pub state: State,
    pub plaintext: BTreeMap<String, String>,
}

/// What a reconcile did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    pub created: usize,
    pub rotated: usize,
    pub expired: usize,
    pub revoked: usize,
}

impl Reconciled {
    pub fn changed(&self) -> bool {
        self.created + self.rotated + self.expired + self.revoked > 0
    }
}

/// A new random token: 32 bytes from the kernel, URL-safe base64 without padding.
pub fn new_token() -> Result<String> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(crate::encoding::data_url::base64_encode(&b)
        .trim_end_matches('=')
        .replace('+', "-")
        .replace('/', "_"))
}

pub fn hash_token(t: &str) -> [u8; 32] {
    Sha256::digest(t.as_bytes()).into()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Constant-time equality of two digests.
pub fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut d = 0u8;
    for i in 0..32 {
        d |= a[i] ^ b[i];
    }
    std::hint::black_box(d) == 0
}

impl Stored {
    fn issue(&mut self, pool: &str, now: u64, ttl: u64) -> Result<()> {
        let t = new_token()?;
        let e = TokenEntry {
            hash: hex(&hash_token(&t)),
            created: now,
            expires: now.saturating_add(ttl),
        };
        self.state
            .pools
            .entry(pool.to_string())
            .or_default()
            .insert(0, e);
        self.plaintext.insert(pool.to_string(), t);
        Ok(())
    }

    /// Brings the tokens in line with the pools being served at `now`.
    pub fn reconcile(&mut self, pools: &[String], now: u64, ttl: u64) -> Result<Reconciled> {
        let mut r = Reconciled::default();
        let gone: Vec<String> = self
            .state
            .pools
            .keys()
            .filter(|p| !pools.contains(p))
            .cloned()
            .collect();
        for p in gone {
            r.revoked += self.state.pools.remove(&p).map_or(0, |v| v.len());
            self.plaintext.remove(&p);
        }
        self.plaintext.retain(|p, _| pools.contains(p));
        for p in pools {
            let list = self.state.pools.entry(p.clone()).or_default();
            let before = list.len();
            list.retain(|e| e.expires > now);
            r.expired += before - list.len();
            match list.first() {
                None => {
                    self.issue(p, now, ttl)?;
                    r.created += 1;
                }
                Some(cur) if now >= cur.created.saturating_add(ttl / 2) => {
                    self.issue(p, now, ttl)?;
                    r.rotated += 1;
                }
                Some(_) => {}
            }
            // A current token without its plaintext (e.g. lost file) cannot be handed out:
            // issue a fresh one; the old one stays valid until its TTL.
            if !self.plaintext.contains_key(p) {
                self.issue(p, now, ttl)?;
                r.rotated += 1;
            }
        }
        Ok(r)
    }

    /// Forces a new current token for `pool` (the previous stays valid until its TTL).
    pub fn rotate(&mut self, pool: &str, now: u64, ttl: u64) -> Result<()> {
        self.issue(pool, now, ttl)
    }

    /// Removes every token of `pool` at once.
    pub fn revoke(&mut self, pool: &str) -> usize {
        self.plaintext.remove(pool);
        self.state.pools.remove(pool).map_or(0, |v| v.len())
    }

    /// The index the server checks requests against.
    pub fn index(&self) -> Index {
        let mut entries = Vec::new();
        for (p, list) in &self.state.pools {
            for e in list {
                if let Some(h) = unhex(&e.hash) {
                    entries.push((p.clone(), h, e.expires));
                }
            }
        }
        Index { entries }
    }
}

/// Hashes of every live token, for request checks.
#[derive(Debug, Default, Clone)]
pub struct Index {
    entries: Vec<(String, [u8; 32], u64)>,
}

impl Index {
    /// The pool a token belongs to, if it is known and not expired. Compares against every
    /// entry (no early exit) so timing does not reveal which prefix matched.
    pub fn lookup(&self, token: &str, now: u64) -> Option<&str> {
        let h = hash_token(token);
        let mut found = None;
        for (p, eh, exp) in &self.entries {
            if ct_eq(&h, eh) && *exp > now {
                found = Some(p.as_str());
            }
        }
        found
    }
}

/// Why an `Authorization` header was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthError {
    /// Missing or not `Bearer <token>` with a token of the expected shape: 401.
    Malformed,
}

/// Extracts the token from an `Authorization: Bearer <token>` header.
pub fn parse_bearer(h: Option<&str>) -> Result<&str, AuthError> {
    let h = h.ok_or(AuthError::Malformed)?;
    let (scheme, tok) = h.trim().split_once(' ').ok_or(AuthError::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Malformed);
    }
    let tok = tok.trim();
    let ok = (16..=512).contains(&tok.len())
        && tok
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b));
    if ok {
        Ok(tok)
    } else {
        Err(AuthError::Malformed)
    }
}

/// The token directory, written with the AtomicWriter protocol.
pub struct Store {
    pub dir: PathBuf,
}

/// An exclusive lock on the store; released on drop.
pub struct Lock {
    _flock: nix::fcntl::Flock<std::fs::File>,
}

impl Store {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Store { dir: dir.into() }
    }

    /// Takes the store's lock (an flock on `DIR/.lock`), creating the directory if needed.
    pub fn lock(&self) -> Result<Lock> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let p = self.dir.join(".lock");
        // Opened read-only once it exists: closing it then raises no inotify write event, so
        // watchers of the directory (replicas) are not woken by a mere lock.
        let f = match std::fs::File::open(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&p)
                    .with_context(|| format!("creating {}", p.display()))?;
                std::fs::File::open(&p).with_context(|| format!("opening {}", p.display()))?
            }
            Err(e) => return Err(e).with_context(|| format!("opening {}", p.display())),
        };
        let flock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .with_context(|| format!("locking {}", p.display()))?;
        Ok(Lock { _flock: flock })
    }

    /// Reads the current generation (empty when there is none yet).
    pub fn read(&self) -> Result<Stored> {
        for _ in 0..8 {
            let data = self.dir.join("..data");
            if std::fs::symlink_metadata(&data).is_err() {
                return Ok(Stored::default());
            }
            let before = std::fs::read_link(&data).ok();
            let res = self.read_gen(&data);
            // Only trust a read whose generation was not swapped away (and possibly
            // half-removed) meanwhile.
            if std::fs::read_link(&data).ok() != before {
                continue;
            }
            match res {
                Ok(s) => return Ok(s),
                Err(e)
                    if e.chain().any(|c| {
                        c.downcast_ref::<std::io::Error>()
                            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
                    }) =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        }
        bail!("{} kept changing while being read", self.dir.display())
    }

    fn read_gen(&self, data: &Path) -> Result<Stored> {
        let root =
            std::fs::canonicalize(data).with_context(|| format!("resolving {}", data.display()))?;
        let sp = root.join("state.json");
        let bytes = std::fs::read(&sp).with_context(|| format!("reading {}", sp.display()))?;
        let state: State =
            serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", sp.display()))?;
        let mut plaintext = BTreeMap::new();
        for p in state.pools.keys() {
            let tp = root.join(format!("{p}.token"));
            match std::fs::read_to_string(&tp) {
                Ok(t) => {
                    plaintext.insert(p.clone(), t.trim().to_string());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("reading {}", tp.display())),
            }
        }
        Ok(Stored { state, plaintext })
    }

    /// Writes a new generation: a fresh `..<stamp>` directory, `..data_tmp` → it, renamed over
    /// `..data`, then the previous directory removed. Call with the lock held.
    pub fn write(&self, s: &Stored, _lock: &Lock) -> Result<()> {
        let stamp = format!(
            "..{}.{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
            std::process::id()
        );
        let gen_dir = self.dir.join(&stamp);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&gen_dir)
            .with_context(|| format!("creating {}", gen_dir.display()))?;
        let json = serde_json::to_vec_pretty(&s.state).context("serializing token state")?;
        crate::util::write_atomic(&gen_dir.join("state.json"), &json, 0o600)?;
        for (p, t) in &s.plaintext {
            crate::util::write_atomic(&gen_dir.join(format!("{p}.token")), t.as_bytes(), 0o600)?;
        }
        let old = std::fs::read_link(self.dir.join("..data")).ok();
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&stamp, &tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        std::fs::rename(&tmp, self.dir.join("..data"))
            .with_context(|| format!("renaming {} over ..data", tmp.display()))?;
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        if let Some(old) = old
            && old != Path::new(&stamp)
        {
            let od = self.dir.join(&old);
            if old.to_str().is_some_and(|s| s.starts_with("..")) {
                let _ = std::fs::remove_dir_all(&od);
            }
        }
        let _ = std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700));
        Ok(())
    }

    /// Read-modify-write under the lock.
    pub fn update<T>(&self, f: impl FnOnce(&mut Stored) -> Result<T>) -> Result<T> {
        let lock = self.lock()?;
        let mut s = self.read()?;
        let before = s.clone();
        let out = f(&mut s)?;
        if s != before {
            self.write(&s, &lock)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3600;

    #[test]
    fn bearer_parsing() {
        assert!(parse_bearer(None).is_err());
        assert!(parse_bearer(Some("")).is_err());
        assert!(parse_bearer(Some("Basic abcdefghijklmnopq")).is_err());
        assert!(parse_bearer(Some("Bearer")).is_err());
        assert!(parse_bearer(Some("Bearer short")).is_err());
        assert!(parse_bearer(Some("Bearer has space inside token")).is_err());
        assert!(parse_bearer(Some("Bearer bad\u{7f}chars-xxxxxxxxxxxxxxx")).is_err());
        assert_eq!(
            parse_bearer(Some("Bearer abcdefghijklmnop_-")),
            Ok("abcdefghijklmnop_-")
        );
        assert!(parse_bearer(Some("bearer abcdefghijklmnop")).is_ok());
    }

    #[test]
    fn full_ttl_with_fake_clock() {
        let clock = FakeClock::new(1_000_000);
        let ttl = 11 * H;
        let pools = vec!["worker".to_string(), "master".to_string()];
        let mut s = Stored::default();
        let r = s.reconcile(&pools, clock.now(), ttl).unwrap();
        assert_eq!(r.created, 2);
        let t1 = s.plaintext["worker"].clone();
        assert_eq!(s.index().lookup(&t1, clock.now()), Some("worker"));
        assert_eq!(s.index().lookup("not-a-known-token-xx", clock.now()), None);

        // Just before TTL/2: nothing happens.
        clock.advance(ttl / 2 - 1);
        assert!(!s.reconcile(&pools, clock.now(), ttl).unwrap().changed());
        // At TTL/2: rotated; both valid.
        clock.advance(1);
        let r = s.reconcile(&pools, clock.now(), ttl).unwrap();
        assert_eq!(r.rotated, 2);
        let t2 = s.plaintext["worker"].clone();
        assert_ne!(t1, t2);
        assert_eq!(s.state.pools["worker"].len(), 2);
        let idx = s.index();
        assert_eq!(idx.lookup(&t1, clock.now()), Some("worker"));
        assert_eq!(idx.lookup(&t2, clock.now()), Some("worker"));
        // t1 is still valid until its own TTL.
        clock.advance(ttl / 2 - 1);
        assert_eq!(s.index().lookup(&t1, clock.now()), Some("worker"));
        // At TTL: t1 expires (even before a reconcile removes it), t2 rotates.
        clock.advance(1);
        assert_eq!(s.index().lookup(&t1, clock.now()), None);
        let r = s.reconcile(&pools, clock.now(), ttl).unwrap();
        assert_eq!(r.expired, 2);
        assert_eq!(r.rotated, 2);
        let t3 = s.plaintext["worker"].clone();
        assert_eq!(s.state.pools["worker"].len(), 2);
        assert_eq!(s.index().lookup(&t2, clock.now()), Some("worker"));
        assert_eq!(s.index().lookup(&t3, clock.now()), Some("worker"));
        // Pool removed from the source: its tokens are revoked at once.
        let r = s
            .reconcile(&["master".to_string()], clock.now(), ttl)
            .unwrap();
        assert_eq!(r.revoked, 2);
        assert_eq!(s.index().lookup(&t3, clock.now()), None);
        assert!(!s.plaintext.contains_key("worker"));
    }

    #[test]
    fn store_round_trip_and_atomic_swap() {
        let dir = std::env::temp_dir().join(format!("agent-tokens-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let st = Store::new(&dir);
        assert_eq!(st.read().unwrap(), Stored::default());
        let pools = vec!["worker".to_string()];
        st.update(|s| s.reconcile(&pools, 100, 11 * H)).unwrap();
        let a = st.read().unwrap();
        assert_eq!(a.state.pools["worker"].len(), 1);
        let first = std::fs::read_link(dir.join("..data")).unwrap();
        st.update(|s| s.rotate("worker", 200, 11 * H)).unwrap();
        let b = st.read().unwrap();
        assert_eq!(b.state.pools["worker"].len(), 2);
        let second = std::fs::read_link(dir.join("..data")).unwrap();
        assert_ne!(first, second);
        assert!(!dir.join(&first).exists(), "old generation removed");
        // The state file holds no plaintext.
        let state = std::fs::read_to_string(dir.join("..data/state.json")).unwrap();
        assert!(!state.contains(&b.plaintext["worker"]));
        let mode = std::fs::metadata(dir.join("..data/worker.token")).unwrap();
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
