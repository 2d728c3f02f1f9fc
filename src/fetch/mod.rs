//! Fetching resources (configs, CAs, file contents): one fetcher per URL scheme behind the
//! [`Scheme`] trait, the retry policy in [`retry`], and decompression, hashing and atomic
//! placement in one place here. Contents stream: memory stays flat whatever the size.

pub mod clients;
pub mod command;
pub mod fetcher;
pub mod http;
pub mod lowport;
pub mod metadata_client;
pub mod options;
pub mod proxy;
pub mod retry;
pub mod s3;
pub mod stream;
pub mod tftp;
pub mod tls;

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use sha2::Digest;

use fetcher::{CHUNK, Chunks, HASH_QUEUE};
use retry::Failure;
use runtime::limits::TooLarge;
use spec::config::types::{Config, Resource};

pub use fetcher::{AgentHeaders, Fetcher, Scheme, check_tls_downgrade, short};
pub use options::{CaCache, DEFAULT_HEADER_TIMEOUT, Options, Refused};

impl Options {
    /// Like [`Options::from_config`], with `security.tls.certificateAuthorities` fetched
    /// (using the config's own timeouts and proxy, and `base`'s offline mode, endpoints,
    /// limits and CAs) and added. Every CA must be a PEM bundle of X.509 certificates: one
    /// that cannot be fetched or parsed is an error here, before whatever uses the options
    /// has done anything.
    pub fn from_config_with_cas(c: &Config, base: &Options) -> Result<Self> {
        let mut o = Options::from_config(c).with_base(base);
        let pems = fetch_cas(c, &o)?;
        o.ca_pems.extend(pems);
        Ok(o)
    }
}

/// Fetches the CAs of `c` (`ignition.security.tls.certificateAuthorities`) with `opts`, in
/// order, and checks that each is a usable PEM bundle (as Ignition parses them when it loads
/// them: a bad CA fails the stage before it does anything).
pub fn fetch_cas(c: &Config, opts: &Options) -> Result<Vec<Vec<u8>>> {
    let cas = &c.ignition.security.tls.certificate_authorities;
    if cas.is_empty() {
        return Ok(Vec::new());
    }
    let f = Fetcher::new(opts.clone());
    let mut out = Vec::with_capacity(cas.len());
    for ca in cas {
        let src = ca.source.as_deref().unwrap_or("");
        if let Some(pem) = opts.ca_cache.get(ca) {
            out.push(pem);
            continue;
        }
        let pem = f.fetch_bytes_as(ca, "certificate authority").map_err(|e| {
            runtime::limits::context_unless_too_large(e, || {
                format!("fetching certificate authority {}", short(src))
            })
        })?;
        tls::client_config(std::slice::from_ref(&pem))
            .with_context(|| format!("certificate authority {}", short(src)))?;
        log::info!(
            "fetched certificate authority from {} (sha512 {})",
            short(src),
            sha512_hex(&pem)
        );
        opts.ca_cache.put(ca, &pem);
        out.push(pem);
    }
    Ok(out)
}

/// Fetches the CAs of `c` once (with `opts`, see [`fetch_cas`]) and puts each in the config
/// as a `data:` URL, without `httpHeaders` and `compression` (its `verification` holds for
/// the decompressed bytes, so it stays): what Ignition's fetch stage does to the config it
/// caches (`RewriteCAsWithDataUrls`), so that the later stages trust the same CAs without
/// fetching them again. Two CAs with the same bytes become one entry.
pub fn inline_cas(c: &mut Config, opts: &Options) -> Result<()> {
    let pems = fetch_cas(c, opts)?;
    let cas = std::mem::take(&mut c.ignition.security.tls.certificate_authorities);
    let mut out: Vec<Resource> = Vec::with_capacity(cas.len());
    for (mut ca, pem) in cas.into_iter().zip(pems) {
        let url = format!(
            "data:;base64,{}",
            spec::encoding::data_url::base64_encode(&pem)
        );
        if out
            .iter()
            .any(|o| o.source.as_deref() == Some(url.as_str()))
        {
            continue;
        }
        ca.source = Some(url);
        ca.http_headers.clear();
        ca.compression = None;
        out.push(ca);
    }
    c.ignition.security.tls.certificate_authorities = out;
    Ok(())
}

/// A fetch refused because it needs the network and the fetcher is offline (made by
/// [`Options::needs_network`], which records it in [`Options::refused`]: the fetch stage
/// turns that into a marker file and a distinct exit code).
#[derive(Debug, thiserror::Error)]
#[error("fetching {0} needs the network (offline mode)")]
pub struct NeedsNetwork(pub String);

struct DataScheme;

impl Scheme for DataScheme {
    fn open<'u>(
        &self,
        _: &Fetcher,
        url: &'u str,
        _: &Resource,
        _: Option<Duration>,
    ) -> Result<Box<dyn Read + 'u>, Failure> {
        use spec::encoding::data_url::{Payload, payload};
        match payload(url)
            .context("decoding data URL")
            .map_err(Failure::Fatal)?
        {
            // Decoded straight into the reader's buffer: no copy of the whole payload.
            Payload::Base64(d) => Ok(Box::new(Base64Body {
                d,
                carry: [0; 3],
                carry_at: 3,
            })),
            Payload::Bytes(b) => Ok(Box::new(io::Cursor::new(b))),
        }
    }
    fn needs_network(&self) -> bool {
        false
    }
}

/// A base64 data URL's contents, decoded as they are read.
struct Base64Body<'u> {
    d: spec::encoding::data_url::Base64Decoder<'u>,
    /// One decoded group for reads of fewer than 3 bytes; `carry_at` is where its unread
    /// bytes start (3: none).
    carry: [u8; 3],
    carry_at: usize,
}

impl Read for Base64Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.carry_at == 3 && buf.len() < 3 && !self.d.is_empty() {
            let n = self.d.decode_into(&mut self.carry);
            self.carry.copy_within(..n, 3 - n);
            self.carry_at = 3 - n;
        }
        if self.carry_at < 3 {
            let n = buf.len().min(3 - self.carry_at);
            buf[..n].copy_from_slice(&self.carry[self.carry_at..self.carry_at + n]);
            self.carry_at += n;
            return Ok(n);
        }
        Ok(self.d.decode_into(buf))
    }
}

/// The fetcher for `url`'s scheme.
pub fn scheme_for(url: &str) -> Result<&'static dyn Scheme> {
    let scheme = url
        .split_once(':')
        .map(|(s, _)| s.to_ascii_lowercase())
        .with_context(|| format!("invalid source URL {:?}", short(url)))?;
    Ok(match scheme.as_str() {
        "data" => &DataScheme,
        "http" | "https" => &http::Http,
        "tftp" => &tftp::Tftp,
        "s3" | "arn" => &s3::S3,
        "gs" => &s3::Gs,
        other => bail!("unsupported URL scheme {other:?} in {}", short(url)),
    })
}

/// Whether fetching `url` needs the network.
pub fn needs_network(url: &str) -> bool {
    scheme_for(url).map(|s| s.needs_network()).unwrap_or(false)
}

impl Fetcher {
    /// Fetches a resource into memory: decompressed and verified. For configs, CAs and key
    /// files. More than `opts.limits.max_config_size` bytes (after decompression) is refused
    /// with [`TooLarge`] as soon as it arrives.
    pub fn fetch_bytes(&self, r: &Resource) -> Result<Vec<u8>> {
        self.fetch_bytes_as(r, "resource")
    }

    /// [`Fetcher::fetch_bytes`] naming what is fetched ("config", "key file") in a
    /// [`TooLarge`] error: "config from URL: larger than the 64 MiB limit (…)".
    pub fn fetch_bytes_as(&self, r: &Resource, kind: &str) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.fetch_into(
            r,
            &mut Out::Vec {
                v: &mut v,
                limit: self.opts.limits.max_config_size,
                kind,
            },
        )?;
        Ok(v)
    }

    /// Streams a resource, decompressed and verified, into `out`; returns the bytes written.
    /// Once bytes have been written a failure is final (they cannot be taken back): prefer
    /// [`Fetcher::fetch_to_file`], which retries from scratch and places the file atomically.
    pub fn fetch_to(&self, r: &Resource, out: &mut dyn Write) -> Result<u64> {
        self.fetch_into(r, &mut Out::Writer(out, 0))
    }

    /// Fetches a resource into a temporary file beside `dest`; the returned guard commits it
    /// (fsync, rename) or removes it when dropped. Nothing appears at `dest` unless the
    /// contents were complete and verified and the caller commits.
    pub fn download(&self, r: &Resource, dest: &Path) -> Result<Download> {
        let dir = dest.parent().unwrap_or(Path::new("."));
        let name = dest
            .file_name()
            .with_context(|| format!("{} has no file name", dest.display()))?
            .to_string_lossy();
        let tmp = dir.join(format!(".{name}.agent-tmp{}", std::process::id()));
        let (file, temp) = runtime::signals::Temp::create(&tmp, |p| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(p)
        })
        .with_context(|| format!("creating {}", tmp.display()))?;
        let mut d = Download {
            file: Some(file),
            temp,
            dest: dest.to_path_buf(),
            size: 0,
        };
        let f = d.file.as_mut().expect("file present");
        d.size = self.fetch_into(r, &mut Out::File(f))?;
        Ok(d)
    }

    /// Fetches a resource to `dest` with `mode`, atomically; returns the size written.
    pub fn fetch_to_file(&self, r: &Resource, dest: &Path, mode: u32) -> Result<u64> {
        let d = self.download(r, dest)?;
        d.file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting mode of {}", d.temp_path().display()))?;
        let n = d.size;
        d.commit()?;
        Ok(n)
    }

    fn fetch_into(&self, r: &Resource, out: &mut Out) -> Result<u64> {
        let Some(url) = r.url() else {
            // No source, or `"source": ""`: empty contents. A hash given for them must still
            // be the hash of nothing.
            if r.verification.hash.is_some() {
                let plain = Resource {
                    compression: None,
                    ..r.clone()
                };
                return copy_verified(
                    &self.chunks,
                    "(empty source)",
                    &plain,
                    Box::new(io::empty()),
                    out,
                )
                .map_err(|(Failure::Retry(e) | Failure::Fatal(e))| e);
            }
            return Ok(0);
        };
        let scheme = scheme_for(url)?;
        if self.opts.offline && scheme.needs_network() {
            return Err(self.opts.needs_network(short(url)));
        }
        let what = short(url);
        let total = if scheme.needs_network() {
            self.opts.total_timeout()
        } else {
            None
        };
        retry::run(&what, total, self.clock(), |left| {
            if !out.rewind().map_err(Failure::Fatal)? {
                return Err(Failure::fatal(anyhow!(
                    "{what}: failed after part of the contents was written"
                )));
            }
            let body = scheme.open(self, url, r, left)?;
            copy_verified(&self.chunks, url, r, body, out)
        })
        .map_err(|e| runtime::limits::context_unless_too_large(e, || format!("fetching {what}")))
    }
}

/// A fetched file waiting beside its target; see [`Fetcher::download`]. Its temporary file
/// is removed when the download is dropped uncommitted, or on SIGINT/SIGTERM/SIGHUP.
pub struct Download {
    file: Option<File>,
    temp: runtime::signals::Temp,
    dest: PathBuf,
    size: u64,
}

impl Download {
    /// The temporary file (to set owner, mode or labels before the commit).
    pub fn file(&self) -> &File {
        self.file.as_ref().expect("file present until commit")
    }
    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    /// fsyncs the contents and renames them over the target.
    pub fn commit(mut self) -> Result<()> {
        let f = self.file.take().expect("file present until commit");
        let tmp = self.temp.path().to_path_buf();
        f.sync_all()
            .with_context(|| format!("syncing {}", tmp.display()))?;
        drop(f);
        std::fs::rename(&tmp, &self.dest)
            .with_context(|| format!("renaming {} to {}", tmp.display(), self.dest.display()))?;
        self.temp.disarm();
        Ok(())
    }
}

/// Where fetched contents go; rewound before each attempt when possible.
enum Out<'a> {
    /// Into memory, at most `limit` bytes; `kind` names the contents in errors.
    Vec {
        v: &'a mut Vec<u8>,
        limit: u64,
        kind: &'a str,
    },
    File(&'a mut File),
    Writer(&'a mut dyn Write, u64),
}

impl Out<'_> {
    /// Empties the output for a new attempt; false when that is impossible.
    fn rewind(&mut self) -> Result<bool> {
        match self {
            Out::Vec { v, .. } => v.clear(),
            Out::File(f) => {
                f.set_len(0).context("truncating temporary file")?;
                f.rewind().context("rewinding temporary file")?;
            }
            Out::Writer(_, n) => return Ok(*n == 0),
        }
        Ok(true)
    }
}

impl Write for Out<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Out::Vec { v, .. } => v.write(buf),
            Out::File(f) => f.write(buf),
            Out::Writer(w, n) => {
                let k = w.write(buf)?;
                *n += k as u64;
                Ok(k)
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::Vec { .. } => Ok(()),
            Out::File(f) => f.flush(),
            Out::Writer(w, _) => w.flush(),
        }
    }
}

/// Remembers whether a read error came from the transport (retry) rather than from
/// decompression (final).
/// Into memory, the raw (compressed) bytes are bounded too: a gzip stream that never produces
/// output (endless empty members) ends at the limit like any other.
struct Transport<'u> {
    inner: Box<dyn Read + 'u>,
    failed: Rc<Cell<bool>>,
    raw: u64,
    /// The size limit of raw bytes, when fetching into memory; set `over` when passed.
    limit: Option<u64>,
    over: Rc<Cell<bool>>,
}

impl Read for Transport<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = self
            .inner
            .read(buf)
            .inspect_err(|_| self.failed.set(true))?;
        self.raw += k as u64;
        if self.limit.is_some_and(|l| self.raw > l) {
            self.over.set(true);
            return Err(io::Error::other("size limit passed"));
        }
        Ok(k)
    }
}

/// A SHA-2 state. The `sha2` crate's SHA-NI/AVX2 code (the package is built at opt-level 3)
/// hashes as fast as ring's assembly here: 580 MiB/s SHA-512, 1.7 GiB/s SHA-256 on the CI
/// machine, both measured side by side (faster than `sha512sum`/`sha256sum`).
enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(data),
            Hasher::Sha512(h) => h.update(data),
        }
    }
    fn finish_hex(self) -> String {
        match self {
            Hasher::Sha256(h) => hex(&h.finalize()),
            Hasher::Sha512(h) => hex(&h.finalize()),
        }
    }
}

/// A hash to check: the hasher, the function's name and the expected hex digest.
struct Expected {
    hasher: Hasher,
    func: String,
    want: String,
}

/// Parses `verification.hash` into a hasher and the expected hex digest.
fn hasher_for(r: &Resource) -> Result<Option<Expected>> {
    let Some(h) = &r.verification.hash else {
        return Ok(None);
    };
    let (func, want) = h.split_once('-').context("malformed hash")?;
    let hasher = match func {
        "sha512" => Hasher::Sha512(sha2::Sha512::new()),
        "sha256" => Hasher::Sha256(sha2::Sha256::new()),
        other => bail!("unsupported hash function {other}"),
    };
    Ok(Some(Expected {
        hasher,
        func: func.to_string(),
        want: want.to_string(),
    }))
}

const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Where the hash of a download is computed: on this thread for the first chunk, on a
/// thread of its own once the body is longer than one chunk (hashing then overlaps with
/// reading and writing).
enum Hashing<'scope> {
    None,
    Inline(Expected),
    Thread {
        to_hash: std::sync::mpsc::SyncSender<(Vec<u8>, usize)>,
        reuse: std::sync::mpsc::Receiver<Vec<u8>>,
        digest: std::thread::ScopedJoinHandle<'scope, String>,
        func: String,
        want: String,
    },
}

/// Streams one attempt's body through decompression and hashing into `out`.
///
/// Each chunk is read (network, decompression), written, then hashed. With a hash to check
/// and a body of more than one chunk, hashing moves to a second thread fed through a
/// bounded queue, so that it overlaps with the download instead of following it. The hash
/// is checked before `Ok` is returned; the caller commits nothing before that.
fn copy_verified(
    chunks: &Chunks,
    url: &str,
    r: &Resource,
    body: Box<dyn Read + '_>,
    out: &mut Out,
) -> Result<u64, Failure> {
    let failed = Rc::new(Cell::new(false));
    let over = Rc::new(Cell::new(false));
    let (limit, kind) = match out {
        Out::Vec { limit, kind, .. } => (Some(*limit), *kind),
        _ => (None, ""),
    };
    let too_large = || {
        Failure::fatal(TooLarge {
            what: format!("{kind} from {}", short(url)),
            limit: limit.unwrap_or_default(),
        })
    };
    let transport = Transport {
        inner: body,
        failed: failed.clone(),
        raw: 0,
        limit,
        over: over.clone(),
    };
    let mut reader: Box<dyn Read + '_> = match r.compression.as_deref() {
        None | Some("") => Box::new(transport),
        Some("gzip") => Box::new(flate2::read::MultiGzDecoder::new(transport)),
        Some(other) => return Err(Failure::fatal(anyhow!("unsupported compression {other:?}"))),
    };
    let expected = hasher_for(r).map_err(Failure::Fatal)?;
    std::thread::scope(|scope| {
        let mut hashing = match expected {
            Some(e) => Hashing::Inline(e),
            None => Hashing::None,
        };
        let mut n: u64 = 0;
        let start = Instant::now();
        let mut next_report = start + PROGRESS_EVERY;
        let mut buf = chunks.take();
        let result = loop {
            // Fill the chunk (fewer writes and hand-overs), stopping at the end of the body.
            let mut k = 0;
            let mut err = None;
            while k < CHUNK {
                match reader.read(&mut buf[k..]) {
                    Ok(0) => break,
                    Ok(m) => k += m,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) if over.get() => {
                        err = Some(too_large());
                        break;
                    }
                    Err(e) if failed.get() => {
                        let at = n + k as u64;
                        err = Some(Failure::retry(
                            anyhow!(e).context(format!("reading body after {at} bytes")),
                        ));
                        break;
                    }
                    Err(e) => {
                        err = Some(Failure::fatal(
                            anyhow!(e).context("decompressing gzip data"),
                        ));
                        break;
                    }
                }
            }
            if let Some(e) = err {
                break Err(e);
            }
            if k == 0 {
                break Ok(());
            }
            if limit.is_some_and(|l| n + k as u64 > l) {
                break Err(too_large());
            }
            if let Err(e) = out.write_all(&buf[..k]).context("writing fetched data") {
                break Err(Failure::Fatal(e));
            }
            n += k as u64;
            match &mut hashing {
                Hashing::None => {}
                Hashing::Inline(e) if n == k as u64 && k < CHUNK => {
                    // The whole body in one chunk: no thread for it.
                    e.hasher.update(&buf[..k]);
                }
                Hashing::Inline(_) => {
                    let Hashing::Inline(e) = std::mem::replace(&mut hashing, Hashing::None) else {
                        unreachable!("matched above")
                    };
                    match start_hashing(scope, e) {
                        Ok(h) => hashing = h,
                        Err(e) => break Err(e),
                    }
                }
                Hashing::Thread { .. } => {}
            }
            if let Hashing::Thread { to_hash, reuse, .. } = &hashing {
                let next = reuse.try_recv().unwrap_or_else(|_| chunks.take());
                let full = std::mem::replace(&mut buf, next);
                if to_hash.send((full, k)).is_err() {
                    break Err(Failure::fatal(anyhow!("the hashing thread stopped")));
                }
            }
            let now = Instant::now();
            if now >= next_report {
                let secs = now.duration_since(start).as_secs_f64();
                log::info!(
                    "{}: {} MiB so far ({:.1} MiB/s)",
                    short(url),
                    n >> 20,
                    n as f64 / 1048576.0 / secs
                );
                next_report = now + PROGRESS_EVERY;
            }
        };
        chunks.keep(buf);
        // The end of the body (or an error): the hashing thread drains its queue and gives
        // the digest; its buffers are kept for the next download.
        let got = match hashing {
            Hashing::None => None,
            Hashing::Inline(e) => Some((e.hasher.finish_hex(), e.func, e.want)),
            Hashing::Thread {
                to_hash,
                reuse,
                digest,
                func,
                want,
            } => {
                drop(to_hash);
                let d = digest.join();
                for b in reuse.try_iter() {
                    chunks.keep(b);
                }
                match d {
                    Ok(d) => Some((d, func, want)),
                    Err(_) => return Err(Failure::fatal(anyhow!("the hashing thread panicked"))),
                }
            }
        };
        result?;
        if let Some((got, func, want)) = got
            && !got.eq_ignore_ascii_case(&want)
        {
            return Err(Failure::fatal(anyhow!(
                "hash mismatch: expected {func}-{want}, got {func}-{got}"
            )));
        }
        out.flush()
            .context("flushing fetched data")
            .map_err(Failure::Fatal)?;
        Ok(n)
    })
}

/// Moves hashing to a thread of its own: chunks in, emptied chunks back for reuse, the digest
/// at the end.
fn start_hashing<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    e: Expected,
) -> Result<Hashing<'scope>, Failure> {
    let Expected {
        mut hasher,
        func,
        want,
    } = e;
    let (to_hash, chunks) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(HASH_QUEUE);
    let (give_back, reuse) = std::sync::mpsc::channel::<Vec<u8>>();
    let digest = std::thread::Builder::new()
        .name("hash".into())
        .spawn_scoped(scope, move || {
            for (chunk, k) in chunks {
                hasher.update(&chunk[..k]);
                // The reader may be gone (an error): the chunk is then dropped.
                let _ = give_back.send(chunk);
            }
            hasher.finish_hex()
        })
        .map_err(|e| Failure::fatal(anyhow!(e).context("starting the hashing thread")))?;
    Ok(Hashing::Thread {
        to_hash,
        reuse,
        digest,
        func,
        want,
    })
}

/// Checks `verification.hash` against the decompressed data.
pub fn verify(r: &Resource, data: &[u8]) -> Result<()> {
    let Some(h) = &r.verification.hash else {
        return Ok(());
    };
    let (func, want) = h.split_once('-').context("malformed hash")?;
    let got = match func {
        "sha512" => hex(&sha2::Sha512::digest(data)),
        "sha256" => hex(&sha2::Sha256::digest(data)),
        other => bail!("unsupported hash function {other}"),
    };
    if !got.eq_ignore_ascii_case(want) {
        bail!("hash mismatch: expected {func}-{want}, got {func}-{got}");
    }
    Ok(())
}

pub use spec::encoding::hex;

/// SHA-512 of `data` as hex, for logs.
pub fn sha512_hex(data: &[u8]) -> String {
    hex(&sha2::Sha512::digest(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::limits::Limits;

    fn res(src: &str) -> Resource {
        Resource {
            source: Some(src.into()),
            ..Default::default()
        }
    }

    #[test]
    fn base64_body_reads_in_any_sizes() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let url = format!("data:;base64,{}", base64ish(&bytes));
        let open = || {
            DataScheme
                .open(&Fetcher::new(Options::default()), &url, &res(&url), None)
                .ok()
                .unwrap()
        };
        // Byte by byte (reads shorter than a group), and in odd sizes.
        for step in [1, 2, 4, 5, 7, 100] {
            let mut body = open();
            let mut got = Vec::new();
            let mut buf = vec![0u8; step];
            loop {
                let n = body.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, bytes, "step {step}");
        }
    }

    #[test]
    fn data_gzip_and_hash() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"hello world").unwrap();
        let z = gz.finish().unwrap();
        let b64 = base64ish(&z);
        let mut r = res(&format!("data:;base64,{b64}"));
        r.compression = Some("gzip".into());
        r.verification.hash = Some(format!(
            "sha256-{}",
            hex(&sha2::Sha256::digest(b"hello world"))
        ));
        let f = Fetcher::new(Options::default());
        assert_eq!(f.fetch_bytes(&r).unwrap(), b"hello world");
        r.verification.hash = Some(format!("sha512-{}", sha512_hex(b"other")));
        let e = format!("{:#}", f.fetch_bytes(&r).unwrap_err());
        assert!(e.contains("hash mismatch"), "{e}");
        // The error names the data URL by its header and size, never its contents.
        assert!(!e.contains(&b64), "{e}");
        assert!(
            e.contains(&format!("data:;base64,… ({} bytes)", b64.len())),
            "{e}"
        );
    }

    #[test]
    fn a_data_urls_payload_is_never_shown() {
        assert_eq!(fetcher::short("data:,secret%20pw"), "data:,… (11 bytes)");
        assert_eq!(
            fetcher::short("data:text/plain;base64,c2VjcmV0"),
            "data:text/plain;base64,… (8 bytes)"
        );
        assert_eq!(fetcher::short("data:nocomma"), "data:,… (7 bytes)");
        assert_eq!(fetcher::short("https://h/x.ign"), "https://h/x.ign");
    }

    fn limited(max: u64) -> Fetcher {
        Fetcher::new(Options {
            limits: Limits {
                max_config_size: max,
                ..Limits::BUILTIN
            },
            ..Default::default()
        })
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn in_memory_fetches_stop_at_the_size_limit() {
        let f = limited(4);
        assert_eq!(
            f.fetch_bytes_as(&res("data:,abcd"), "config").unwrap(),
            b"abcd"
        );
        let e = f.fetch_bytes_as(&res("data:,abcde"), "config").unwrap_err();
        assert!(e.downcast_ref::<TooLarge>().is_some(), "{e:#}");
        assert_eq!(
            format!("{e:#}"),
            "config from data:,… (5 bytes): larger than the 4 bytes limit (--max-config-size / agent.max_config_size=)"
        );
        // Counted after decompression: 64 KiB of zeros, well under 1 KiB compressed, do not
        // fit a 1 KiB limit.
        let bomb = gzip(&[0u8; 64 * 1024]);
        let mut r = res(&format!("data:;base64,{}", base64ish(&bomb)));
        r.compression = Some("gzip".into());
        assert!(bomb.len() < 1024);
        let e = limited(1024).fetch_bytes(&r).unwrap_err();
        assert!(e.downcast_ref::<TooLarge>().is_some(), "{e:#}");
        // Raw bytes count too: empty gzip members produce nothing, forever.
        let empty = gzip(b"").repeat(200);
        let mut r = res(&format!("data:;base64,{}", base64ish(&empty)));
        r.compression = Some("gzip".into());
        assert!(limited(1 << 20).fetch_bytes(&r).unwrap().is_empty());
        let e = limited(1024).fetch_bytes(&r).unwrap_err();
        assert!(e.downcast_ref::<TooLarge>().is_some(), "{e:#}");
        // Streaming to a writer has no limit.
        let mut sink = Vec::new();
        assert_eq!(
            limited(1).fetch_to(&res("data:,abcde"), &mut sink).unwrap(),
            5
        );
    }

    #[test]
    fn fetch_to_file_places_only_verified_contents() {
        let dir = std::env::temp_dir().join(format!("agent-fetch-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dest = dir.join("f");
        let f = Fetcher::new(Options::default());
        let mut r = res("data:,abc");
        r.verification.hash = Some(format!("sha256-{}", hex(&sha2::Sha256::digest(b"xyz"))));
        assert!(f.fetch_to_file(&r, &dest, 0o640).is_err());
        assert!(!dest.exists());
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "temp file left"
        );
        r.verification.hash = None;
        assert_eq!(f.fetch_to_file(&r, &dest, 0o640).unwrap(), 3);
        assert_eq!(std::fs::read(&dest).unwrap(), b"abc");
        let mode = std::fs::metadata(&dest).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fetcher_can_be_shared_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Fetcher>();
    }

    #[test]
    fn offline_refuses_network_schemes() {
        let f = Fetcher::new(Options {
            offline: true,
            ..Default::default()
        });
        assert_eq!(f.opts.refused.first(), None);
        let e = f.fetch_bytes(&res("http://example.com/x")).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "fetching http://example.com/x needs the network (offline mode)"
        );
        assert_eq!(
            f.opts.refused.first().as_deref(),
            Some("http://example.com/x")
        );
        assert_eq!(f.fetch_bytes(&res("data:,x")).unwrap(), b"x");
        assert!(f.fetch_bytes(&res("ftp://x/y")).is_err());
    }

    fn base64ish(b: &[u8]) -> String {
        const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for c in b.chunks(3) {
            let v = (c[0] as u32) << 16
                | (*c.get(1).unwrap_or(&0) as u32) << 8
                | *c.get(2).unwrap_or(&0) as u32;
            for i in 0..4 {
                if i <= c.len() {
                    s.push(T[(v >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    s.push('=');
                }
            }
        }
        s
    }
}
