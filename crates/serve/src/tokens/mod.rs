//! Bearer tokens for `/ignition` (seed: ignition-server-tokens.txt).
//!
//! Two modes.
//!
//! **Derived** (`--token-key FILE`, the multi-replica mode): a token is bound to a
//! (pool, config) pair and computed, never stored:
//! `base64url(HMAC-SHA256(key, "agent-serve-token/v1" ‖ pool ‖ config-hash ‖ period ‖ epoch))`
//! with `epoch = floor(now / period)`, `period = TTL/2`. Every replica (and `agent token` /
//! `agent pointer`) with the same key file and the same source computes the same tokens, so
//! nothing is written or replicated. The token of epoch `k` is handed out during
//! `[k·period, (k+1)·period)` (rotation after TTL/2) and accepted during
//! `[k·period − skew, k·period + TTL)` (the previous token stays valid until its own TTL; the
//! next one is accepted `skew` early for replicas whose clocks run behind). See [`Schedule`].
//!
//! **Store** (legacy, without `--token-key`): one random token per pool, kept in a directory
//! every replica sees (default `STATE_DIR/tokens`), written with the AtomicWriter protocol
//! (`..data` → `..<stamp>` swapped by rename) under an flock: `state.json` holds only SHA-256
//! hashes with creation and expiry times; `<pool>.token` (mode 0600) holds the plaintext of the
//! pool's current token. Such a token names a pool, not a config.
//!
//! Either way the server checks requests against SHA-256 digests in constant time and never
//! logs a token.

pub mod cmd;
pub mod pointer;
pub mod state;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use spec::encoding::hex;

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
    Ok(spec::encoding::data_url::base64_encode(&b)
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
                    entries.push(Entry {
                        digest: h,
                        grant: Grant {
                            pool: p.clone(),
                            config: None,
                        },
                        not_before: 0,
                        expires: e.expires,
                    });
                }
            }
        }
        Index { entries, epoch: 0 }
    }
}

/// What a valid token grants: a pool and, for a derived token, the config (hex SHA-256 of its
/// canonical JSON) whose payload it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub pool: String,
    /// None for a store token: it names the pool's current config, whatever it is.
    pub config: Option<String>,
}

#[derive(Debug, Clone)]
struct Entry {
    digest: [u8; 32],
    grant: Grant,
    not_before: u64,
    expires: u64,
}

/// Digests of every token that is or may become valid, for request checks.
#[derive(Debug, Default, Clone)]
pub struct Index {
    entries: Vec<Entry>,
    /// For a derived index: the epoch it was built in (it covers the epochs around it).
    pub epoch: u64,
}

impl Index {
    /// What a token grants, if it is known and valid at `now`. Compares against every entry
    /// (no early exit) so timing does not reveal which prefix matched.
    pub fn lookup(&self, token: &str, now: u64) -> Option<&Grant> {
        let h = hash_token(token);
        let mut found = None;
        for e in &self.entries {
            if ct_eq(&h, &e.digest) && e.not_before <= now && now < e.expires {
                found = Some(&e.grant);
            }
        }
        found
    }

    /// How many token digests it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Shortest token key, in bytes (after trailing whitespace is trimmed).
pub const MIN_KEY_BYTES: usize = 32;
/// Longest token key file, in bytes.
pub const MAX_KEY_BYTES: usize = 4096;
/// Default clock-skew tolerance between replicas (and `agent token`): 5 minutes.
pub const DEFAULT_SKEW: u64 = 300;

/// The secret every replica derives tokens from (a file, e.g. a Kubernetes Secret volume).
/// Its bytes never leave this value: `Debug` shows only the key id.
#[derive(Clone)]
pub struct Key {
    hmac: ring::hmac::Key,
    /// Public fingerprint: the first 8 bytes of HMAC(key, "agent-serve-key-id"), hex. Equal
    /// on two replicas exactly when their keys are equal; reveals nothing about the key.
    id: String,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({})", self.id)
    }
}

impl Key {
    /// A key from its bytes; trailing whitespace (a newline from `echo` or an editor) is not
    /// part of it.
    pub fn from_bytes(b: &[u8]) -> Result<Key> {
        let b = b.trim_ascii_end();
        if b.len() < MIN_KEY_BYTES {
            bail!(
                "the token key has {} bytes, fewer than {MIN_KEY_BYTES}: make one with `head -c 32 /dev/urandom | base64 -w0 > FILE`",
                b.len()
            );
        }
        let hmac = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b);
        let tag = ring::hmac::sign(&hmac, b"agent-serve-key-id");
        Ok(Key {
            hmac,
            id: hex(&tag.as_ref()[..8]),
        })
    }

    /// Reads the key file (at most [`MAX_KEY_BYTES`]).
    pub fn from_file(p: &Path) -> Result<Key> {
        // A Secret volume's file is a link into `..data`: resolve it, then open only a
        // regular file, without blocking (a FIFO or device is refused, never waited on).
        let real = std::fs::canonicalize(p).with_context(|| {
            format!(
                "reading the token key {} (--token-key): create it, e.g. `head -c 32 /dev/urandom | base64 -w0 > {}`, or mount the Secret that holds it",
                p.display(),
                p.display()
            )
        })?;
        let f = crate::source::open_regular(&real).with_context(|| {
            format!(
                "reading the token key {} (--token-key): create it, e.g. `head -c 32 /dev/urandom | base64 -w0 > {}`, or mount the Secret that holds it",
                p.display(),
                p.display()
            )
        })?;
        let mut b = Vec::new();
        f.take(MAX_KEY_BYTES as u64 + 1)
            .read_to_end(&mut b)
            .with_context(|| format!("reading the token key {}", p.display()))?;
        if b.len() > MAX_KEY_BYTES {
            bail!(
                "the token key {} is larger than {MAX_KEY_BYTES} bytes: is it the right file?",
                p.display()
            );
        }
        Key::from_bytes(&b).with_context(|| format!("token key {}", p.display()))
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The token of (`pool`, `config`) for `epoch` of `period` seconds.
    pub fn token(&self, pool: &str, config: &str, period: u64, epoch: u64) -> String {
        let mut ctx = ring::hmac::Context::with_key(&self.hmac);
        ctx.update(b"agent-serve-token/v1\0");
        for part in [pool.as_bytes(), config.as_bytes()] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part);
        }
        ctx.update(&period.to_be_bytes());
        ctx.update(&epoch.to_be_bytes());
        let tag = ctx.sign();
        spec::encoding::data_url::base64_encode(tag.as_ref())
            .trim_end_matches('=')
            .replace('+', "-")
            .replace('/', "_")
    }
}

/// When derived tokens are handed out and accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Token lifetime (at least 2 s).
    pub ttl: u64,
    /// Clock-skew tolerance: the next epoch's token is accepted this early. At most one
    /// period, so at any time only epochs e-1, e and (within the skew) e+1 are accepted.
    pub skew: u64,
}

impl Schedule {
    pub fn new(ttl: u64, skew: u64) -> Schedule {
        let ttl = ttl.max(2);
        Schedule {
            ttl,
            skew: skew.min(ttl / 2),
        }
    }

    /// The rotation period, TTL/2.
    pub fn period(&self) -> u64 {
        (self.ttl / 2).max(1)
    }

    /// The epoch whose token is current at `now`.
    pub fn epoch(&self, now: u64) -> u64 {
        now / self.period()
    }

    /// When the token of `epoch` becomes current.
    pub fn issued(&self, epoch: u64) -> u64 {
        epoch.saturating_mul(self.period())
    }

    /// The first second the token of `epoch` is accepted.
    pub fn not_before(&self, epoch: u64) -> u64 {
        self.issued(epoch).saturating_sub(self.skew)
    }

    /// The first second the token of `epoch` is refused again.
    pub fn expires(&self, epoch: u64) -> u64 {
        self.issued(epoch).saturating_add(self.ttl)
    }

    pub fn valid(&self, epoch: u64, now: u64) -> bool {
        self.not_before(epoch) <= now && now < self.expires(epoch)
    }
}

/// A (pool, config) pair tokens are derived for; `last_epoch` bounds a retired config (its
/// tokens of later epochs were never handed out and are refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub pool: String,
    pub config: String,
    pub last_epoch: Option<u64>,
}

/// The index of every derived token that can be valid from `now` until the next epoch
/// starts (epochs e-2 ..= e+2 around `now`'s epoch e, each checked against its own window
/// at lookup time).
pub fn derived_index(key: &Key, sch: &Schedule, targets: &[Target], now: u64) -> Index {
    let e = sch.epoch(now);
    let mut entries = Vec::new();
    for t in targets {
        for k in e.saturating_sub(2)..=e + 2 {
            if t.last_epoch.is_some_and(|l| k > l) || sch.expires(k) <= now {
                continue;
            }
            let tok = key.token(&t.pool, &t.config, sch.period(), k);
            entries.push(Entry {
                digest: hash_token(&tok),
                grant: Grant {
                    pool: t.pool.clone(),
                    config: Some(t.config.clone()),
                },
                not_before: sch.not_before(k),
                expires: sch.expires(k),
            });
        }
    }
    Index { entries, epoch: e }
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

/// Moves the token store an older server kept in the source (`from`, `SOURCE/tokens`) to
/// `to`, once: only when `to` has no generation yet. The old directory is removed, so the
/// plaintext tokens leave the source tree; a read-only source keeps it (logged). Returns
/// whether a store was moved.
pub fn migrate(from: &Path, to: &Store) -> Result<bool> {
    if std::fs::symlink_metadata(from.join("..data")).is_err() {
        return Ok(false);
    }
    let lock = to.lock()?;
    if std::fs::symlink_metadata(to.dir.join("..data")).is_ok() {
        return Ok(false);
    }
    let old = Store::new(from);
    let stored = {
        let _old_lock = old.lock()?;
        old.read()?
    };
    to.write(&stored, &lock)?;
    log::warn!(
        "moved the token store from {} to {}: tokens are no longer kept in the source",
        from.display(),
        to.dir.display()
    );
    if let Err(e) = std::fs::remove_dir_all(from) {
        log::warn!(
            "could not remove the old token store {} ({e}): remove it by hand, it holds plaintext tokens",
            from.display()
        );
    }
    Ok(true)
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
        // Never blocks opening (a FIFO put there would otherwise hang the watcher).
        let open_ro = |p: &Path| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW)
                .open(p)
        };
        let f = match open_ro(&p) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&p)
                    .with_context(|| format!("creating {}", p.display()))?;
                open_ro(&p).with_context(|| format!("opening {}", p.display()))?
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
        let bytes = crate::source::read_regular(&sp, 64 << 20)?.ok_or_else(|| {
            anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::NotFound))
                .context(format!("reading {}", sp.display()))
        })?;
        let state: State =
            serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", sp.display()))?;
        let mut plaintext = BTreeMap::new();
        for p in state.pools.keys() {
            let tp = root.join(format!("{p}.token"));
            if let Some(t) = crate::source::read_regular(&tp, 4096)? {
                let t = String::from_utf8(t)
                    .with_context(|| format!("reading {}: not UTF-8", tp.display()))?;
                plaintext.insert(p.clone(), t.trim().to_string());
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
        runtime::util::write_atomic(&gen_dir.join("state.json"), &json, 0o600)?;
        for (p, t) in &s.plaintext {
            runtime::util::write_atomic(&gen_dir.join(format!("{p}.token")), t.as_bytes(), 0o600)?;
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
        assert_eq!(
            s.index().lookup(&t1, clock.now()).map(|g| g.pool.as_str()),
            Some("worker")
        );
        assert_eq!(
            s.index()
                .lookup("not-a-known-token-xx", clock.now())
                .map(|g| g.pool.as_str()),
            None
        );

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
        assert_eq!(
            idx.lookup(&t1, clock.now()).map(|g| g.pool.as_str()),
            Some("worker")
        );
        assert_eq!(
            idx.lookup(&t2, clock.now()).map(|g| g.pool.as_str()),
            Some("worker")
        );
        // t1 is still valid until its own TTL.
        clock.advance(ttl / 2 - 1);
        assert_eq!(
            s.index().lookup(&t1, clock.now()).map(|g| g.pool.as_str()),
            Some("worker")
        );
        // At TTL: t1 expires (even before a reconcile removes it), t2 rotates.
        clock.advance(1);
        assert_eq!(
            s.index().lookup(&t1, clock.now()).map(|g| g.pool.as_str()),
            None
        );
        let r = s.reconcile(&pools, clock.now(), ttl).unwrap();
        assert_eq!(r.expired, 2);
        assert_eq!(r.rotated, 2);
        let t3 = s.plaintext["worker"].clone();
        assert_eq!(s.state.pools["worker"].len(), 2);
        assert_eq!(
            s.index().lookup(&t2, clock.now()).map(|g| g.pool.as_str()),
            Some("worker")
        );
        assert_eq!(
            s.index().lookup(&t3, clock.now()).map(|g| g.pool.as_str()),
            Some("worker")
        );
        // Pool removed from the source: its tokens are revoked at once.
        let r = s
            .reconcile(&["master".to_string()], clock.now(), ttl)
            .unwrap();
        assert_eq!(r.revoked, 2);
        assert_eq!(
            s.index().lookup(&t3, clock.now()).map(|g| g.pool.as_str()),
            None
        );
        assert!(!s.plaintext.contains_key("worker"));
    }

    fn key() -> Key {
        Key::from_bytes(b"0123456789abcdef0123456789abcdef\n").unwrap()
    }

    #[test]
    fn key_checks() {
        let e = Key::from_bytes(b"short\n").unwrap_err().to_string();
        assert!(e.contains("fewer than 32"), "{e}");
        let k = key();
        let dbg = format!("{k:?}");
        assert!(!dbg.contains("0123456789"), "{dbg}");
        assert_eq!(k.id().len(), 16);
        // Trailing whitespace is not part of the key.
        let k2 = Key::from_bytes(b"0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(k.id(), k2.id());
        assert_eq!(k.token("w", "c", 50, 1), k2.token("w", "c", 50, 1));
        let other = Key::from_bytes(b"0123456789abcdef0123456789abcdeX").unwrap();
        assert_ne!(k.id(), other.id());
        assert_ne!(k.token("w", "c", 50, 1), other.token("w", "c", 50, 1));
        let missing = Key::from_file(Path::new("/nonexistent/agent-key")).unwrap_err();
        assert!(
            format!("{missing:#}").contains("--token-key"),
            "{missing:#}"
        );
    }

    #[test]
    fn derived_tokens_bind_pool_config_and_epoch() {
        let k = key();
        let t = k.token("worker", "aa", 50, 7);
        assert_eq!(t.len(), 43);
        assert!(parse_bearer(Some(&format!("Bearer {t}"))).is_ok());
        for other in [
            k.token("master", "aa", 50, 7),
            k.token("worker", "ab", 50, 7),
            k.token("worker", "aa", 50, 8),
            k.token("worker", "aa", 51, 7),
            // Length-prefixed parts: moving a byte between pool and config changes the token.
            k.token("worke", "raa", 50, 7),
        ] {
            assert_ne!(t, other);
        }
    }

    #[test]
    fn derived_schedule_through_a_full_ttl() {
        let k = key();
        let sch = Schedule::new(100, 10);
        assert_eq!(sch.period(), 50);
        let targets = vec![Target {
            pool: "worker".into(),
            config: "c1".into(),
            last_epoch: None,
        }];
        let t0 = 1_000_000; // epoch 20000 starts here
        let e = sch.epoch(t0);
        let tok = |k_: u64| k.token("worker", "c1", 50, k_);
        let idx = derived_index(&k, &sch, &targets, t0);
        let g = |idx: &Index, t: &str, now| idx.lookup(t, now).map(|g| g.config.clone());
        assert_eq!(g(&idx, &tok(e), t0), Some(Some("c1".into())));
        assert_eq!(
            g(&idx, &tok(e - 1), t0),
            Some(Some("c1".into())),
            "previous"
        );
        assert_eq!(g(&idx, &tok(e - 2), t0), None, "expired at its TTL");
        assert_eq!(
            g(&idx, &tok(e + 1), t0),
            None,
            "next epoch, beyond the skew"
        );
        assert_eq!(
            g(&idx, &tok(e + 1), t0 + 40),
            Some(Some("c1".into())),
            "skew"
        );
        // The same index answers correctly through the next epoch.
        assert_eq!(g(&idx, &tok(e - 1), t0 + 49), Some(Some("c1".into())));
        assert_eq!(g(&idx, &tok(e - 1), t0 + 50), None);
        assert_eq!(g(&idx, &tok(e), t0 + 99), Some(Some("c1".into())));
        assert_eq!(g(&idx, &tok(e), t0 + 100), None);
        // A retired config: tokens after its last epoch are refused.
        let retired = vec![Target {
            last_epoch: Some(e),
            ..targets[0].clone()
        }];
        let idx = derived_index(&k, &sch, &retired, t0 + 60);
        assert_eq!(g(&idx, &tok(e), t0 + 60), Some(Some("c1".into())));
        assert_eq!(g(&idx, &tok(e + 1), t0 + 60), None);
        // Another key's tokens are unknown.
        let other = Key::from_bytes(&[b'x'; 32]).unwrap();
        assert_eq!(g(&idx, &other.token("worker", "c1", 50, e), t0), None);
        // Skew is at most one period.
        assert_eq!(Schedule::new(100, 1000).skew, 50);
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
