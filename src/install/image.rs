//! Streaming an OS image onto a disk: fetch (with resume) → hash → decompress → write, in
//! three threads joined by bounded queues, so memory stays at [`BUFFER_LIMIT`] plus the
//! decompressor's window ([`DECODER_MEMORY_LIMIT`]) whatever the size of the image.
//!
//! - The reader thread fetches the image (compressed, as published) in [`READ_CHUNK`]s and
//!   hashes what it receives: the `--image-hash` (SHA-256/512) and the BLAKE2b-512 of a
//!   minisign signature are over the *compressed* stream, as coreos-installer checks the
//!   signature of the file it downloads. A dropped connection is resumed where it stopped
//!   (HTTP `Range`; other schemes: fetched again and the bytes already had skipped), and
//!   hashing simply goes on.
//! - This thread decompresses (gzip, xz or zstd by their magic bytes; else raw) into aligned
//!   [`WRITE_CHUNK`]s.
//! - The writer thread writes them with `O_DIRECT` at their offset, except the first MiB,
//!   which it keeps: that is written last, once every byte is on the disk and verified, so
//!   that a half-written image has no partition table and is never booted.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nix::errno::Errno;
use sha2::Digest;

use super::signature::Blake2b512;
use crate::blockdev::kernel;
use crate::fetch::retry::Failure;
use crate::fetch::{Fetcher, short};

/// Compressed bytes per read of the image.
pub const READ_CHUNK: usize = 1 << 20;
/// Read chunks queued for the decompressor at most.
pub const READ_QUEUE: usize = 4;
/// Decompressed bytes per write.
pub const WRITE_CHUNK: usize = 4 << 20;
/// Write chunks queued for the writer at most.
pub const WRITE_QUEUE: usize = 2;
/// The first MiB of the image, held back until the end.
pub const FIRST: usize = 1 << 20;
/// Every buffer of an install at once: the read chunks (queued, in the reader's and in the
/// decompressor's hands), the write chunks likewise, and the held-back first MiB: 23 MiB
/// and 20 KiB of alignment slack.
pub const BUFFER_LIMIT: usize =
    (READ_QUEUE + 2) * READ_CHUNK + (WRITE_QUEUE + 2) * (WRITE_CHUNK + ALIGN) + FIRST + ALIGN;
// docs/limits.md says under 24 MiB.
const _: () = assert!(BUFFER_LIMIT < 24 << 20);

/// The most memory the xz decoder may use (its dictionary: 64 MiB for `xz -9`); zstd's
/// window is bounded by libzstd's default limit, 128 MiB (window log 27: `zstd --long=27`
/// at most).
pub const DECODER_MEMORY_LIMIT: u64 = 128 << 20;
/// Alignment of the write buffers (O_DIRECT needs the logical block size at most).
const ALIGN: usize = 4096;

const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Where the image comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A URL the provisioning fetcher takes (http, https, tftp, s3, gs, data).
    Url(String),
    /// A local file.
    File(PathBuf),
}

impl Source {
    pub fn describe(&self) -> String {
        match self {
            Source::Url(u) => short(u),
            Source::File(p) => p.display().to_string(),
        }
    }

    /// The name, for the suffix check.
    fn name(&self) -> String {
        match self {
            Source::Url(u) => u.split(['?', '#']).next().unwrap_or(u).to_string(),
            Source::File(p) => p.display().to_string(),
        }
    }
}

/// The compression of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Raw,
    Gzip,
    Xz,
    Zstd,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Raw => "raw",
            Format::Gzip => "gzip",
            Format::Xz => "xz",
            Format::Zstd => "zstd",
        }
    }

    /// By the first bytes of the stream.
    pub fn from_magic(b: &[u8]) -> Format {
        if b.starts_with(&[0x1f, 0x8b]) {
            Format::Gzip
        } else if b.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Format::Xz
        } else if b.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Format::Zstd
        } else {
            Format::Raw
        }
    }

    /// By the name's suffix, when it names one.
    pub fn from_suffix(name: &str) -> Option<Format> {
        let n = name.to_ascii_lowercase();
        [
            (".gz", Format::Gzip),
            (".xz", Format::Xz),
            (".zst", Format::Zstd),
        ]
        .into_iter()
        .find(|(s, _)| n.ends_with(s))
        .map(|(_, f)| f)
    }
}

/// What the reader computes over the compressed stream.
#[derive(Debug, Clone, Default)]
pub struct Digests {
    /// (function, hex digest) of `--image-hash`'s function.
    pub hash: Option<(String, String)>,
    pub blake2b: Option<[u8; 64]>,
    /// Compressed bytes received.
    pub raw: u64,
    /// Connections resumed.
    pub resumed: u32,
}

/// The hash `--image-hash` asks for.
pub enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    /// From Ignition's syntax, `sha256-HEX` / `sha512-HEX`: the hasher and the expected hex.
    pub fn parse(h: &str) -> Result<(Hasher, String)> {
        let (func, want) = h
            .split_once('-')
            .with_context(|| format!("--image-hash {h:?}: not sha256-HEX or sha512-HEX"))?;
        let (hasher, len) = match func {
            "sha256" => (Hasher::Sha256(sha2::Sha256::new()), 64),
            "sha512" => (Hasher::Sha512(sha2::Sha512::new()), 128),
            other => bail!("--image-hash: unsupported hash function {other:?} (sha256 or sha512)"),
        };
        if want.len() != len || !want.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("--image-hash: a {func} digest is {len} hex digits");
        }
        Ok((hasher, want.to_ascii_lowercase()))
    }
    fn func(&self) -> &'static str {
        match self {
            Hasher::Sha256(_) => "sha256",
            Hasher::Sha512(_) => "sha512",
        }
    }
    fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(b),
            Hasher::Sha512(h) => h.update(b),
        }
    }
    fn finish(self) -> String {
        match self {
            Hasher::Sha256(h) => spec::encoding::hex(&h.finalize()),
            Hasher::Sha512(h) => spec::encoding::hex(&h.finalize()),
        }
    }
}

/// How the image is read.
pub struct Reading<'a> {
    pub source: &'a Source,
    pub fetcher: &'a Fetcher,
    pub hasher: Option<Hasher>,
    pub blake2b: bool,
    /// Failed attempts allowed before giving up (each resumes where the last stopped).
    pub retries: u32,
}

/// A buffer whose slice `[off, off + len)` is aligned to [`ALIGN`], without unsafe code: a
/// vector a little larger than asked, and the aligned part of it.
pub struct Aligned {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    pub fn new(len: usize) -> Aligned {
        let v = vec![0u8; len + ALIGN];
        let off = v.as_ptr().align_offset(ALIGN);
        Aligned { v, off, len }
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

enum Msg {
    Data(Vec<u8>, usize),
    End,
}

/// The reader thread's side of the queue, as a `BufRead` for the decompressors.
struct Chunks {
    rx: Receiver<Msg>,
    back: SyncSender<Vec<u8>>,
    cur: Vec<u8>,
    len: usize,
    pos: usize,
    ended: bool,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Chunks {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.len && !self.ended {
            match self.rx.recv() {
                Ok(Msg::Data(b, n)) => {
                    let old = std::mem::replace(&mut self.cur, b);
                    // (The first `cur` is an empty vector: not a buffer to read into.)
                    if old.len() == READ_CHUNK {
                        let _ = self.back.try_send(old);
                    }
                    self.len = n;
                    self.pos = 0;
                }
                Ok(Msg::End) => self.ended = true,
                // The reader stopped with an error: the caller asks it which.
                Err(_) => return Err(io::Error::other(ReaderFailed)),
            }
        }
        Ok(&self.cur[self.pos..self.len])
    }
    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.len);
    }
}

#[derive(Debug, thiserror::Error)]
#[error("reading the image failed")]
struct ReaderFailed;

/// The next step of the pipeline stopped (its own error is the one reported).
#[derive(Debug, thiserror::Error)]
#[error("the next step of the install stopped")]
struct Stopped;

/// Reads the image through `r.fetcher`, hashing and queueing it; resumes after a failure.
fn reader(r: Reading, tx: SyncSender<Msg>, back: Receiver<Vec<u8>>) -> Result<Digests> {
    let what = r.source.describe();
    let mut hasher = r.hasher;
    let mut b2 = r.blake2b.then(Blake2b512::default);
    let mut offset: u64 = 0;
    let mut failures = 0u32;
    let mut resumed = 0u32;
    let clock = r.fetcher.clock();
    let total = r.fetcher.opts.total_timeout();
    let mut send = |buf: Vec<u8>, k: usize, offset: &mut u64| -> Result<(), Failure> {
        if let Some(h) = hasher.as_mut() {
            h.update(&buf[..k]);
        }
        if let Some(h) = b2.as_mut() {
            h.update(&buf[..k]);
        }
        *offset += k as u64;
        tx.send(Msg::Data(buf, k))
            .map_err(|_| Failure::Fatal(anyhow::Error::new(Stopped)))
    };
    crate::fetch::retry::run(&what, total, clock, |left| {
        let mut attempt = || -> Result<(), Failure> {
            let mut body = open_at(r.source, r.fetcher, offset, left)?;
            if offset > 0 {
                resumed += 1;
                log::info!("{what}: resuming at byte {offset}");
            }
            loop {
                let mut buf = back.try_recv().unwrap_or_else(|_| vec![0u8; READ_CHUNK]);
                let mut k = 0;
                let mut err = None;
                while k < READ_CHUNK {
                    match body.read(&mut buf[k..]) {
                        Ok(0) => break,
                        Ok(m) => k += m,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            err = Some(e);
                            break;
                        }
                    }
                }
                let at = offset + k as u64;
                let eof = err.is_none() && k < READ_CHUNK;
                if k > 0 {
                    send(buf, k, &mut offset)?;
                }
                if let Some(e) = err {
                    let e = anyhow!(e).context(format!("reading {what} after {at} bytes"));
                    return Err(match r.source {
                        Source::File(_) => Failure::Fatal(e),
                        Source::Url(_) => Failure::Retry(e),
                    });
                }
                if eof {
                    return Ok(());
                }
            }
        };
        match attempt() {
            Err(Failure::Retry(e)) => {
                failures += 1;
                if failures > r.retries {
                    return Err(Failure::Fatal(e.context(format!(
                        "giving up after {failures} failed attempts (--fetch-retries {})",
                        r.retries
                    ))));
                }
                Err(Failure::Retry(e))
            }
            other => other,
        }
    })?;
    let _ = tx.send(Msg::End);
    Ok(Digests {
        hash: hasher.map(|h| (h.func().to_string(), h.finish())),
        blake2b: b2.map(Blake2b512::finalize),
        raw: offset,
        resumed,
    })
}

/// One attempt: the image from byte `offset` on.
fn open_at<'a>(
    src: &'a Source,
    f: &'a Fetcher,
    offset: u64,
    left: Option<Duration>,
) -> Result<Box<dyn Read + 'a>, Failure> {
    let skip =
        |mut body: Box<dyn Read + 'a>, n: u64, what: &str| -> Result<Box<dyn Read + 'a>, Failure> {
            if n > 0 {
                let got = io::copy(&mut (&mut body).take(n), &mut io::sink()).map_err(|e| {
                    Failure::retry(anyhow!(e).context(format!("skipping to byte {n} of {what}")))
                })?;
                if got != n {
                    return Err(Failure::retry(anyhow!(
                        "{what} ended at byte {got}, before byte {n}"
                    )));
                }
            }
            Ok(body)
        };
    match src {
        Source::File(p) => {
            let mut file = File::open(p)
                .with_context(|| format!("opening {}", p.display()))
                .map_err(Failure::Fatal)?;
            if offset > 0 {
                io::Seek::seek(&mut file, io::SeekFrom::Start(offset))
                    .with_context(|| format!("seeking in {}", p.display()))
                    .map_err(Failure::Fatal)?;
            }
            Ok(Box::new(file))
        }
        Source::Url(u) => {
            let scheme = crate::fetch::scheme_for(u).map_err(Failure::Fatal)?;
            let is_http = {
                let l = u.to_ascii_lowercase();
                l.starts_with("http://") || l.starts_with("https://")
            };
            if f.opts.offline && scheme.needs_network() {
                return Err(Failure::Fatal(f.opts.needs_network(short(u))));
            }
            if !is_http || offset == 0 {
                let res = spec::config::types::Resource {
                    source: Some(u.clone()),
                    ..Default::default()
                };
                // The resource is only needed for the call.
                let body = scheme.open(f, u, &res, left)?;
                return skip(body, offset, &short(u));
            }
            let range = [("Range".to_string(), format!("bytes={offset}-"))];
            let reply = crate::fetch::http::send(f, "GET", u, &range, false, left)?;
            match reply.status {
                // The rest, from `offset`.
                206 => Ok(reply.body),
                // The server ignores ranges: the whole image again, the start skipped.
                200 => {
                    log::info!(
                        "{}: the server ignores Range; skipping {offset} bytes",
                        short(u)
                    );
                    skip(reply.body, offset, &short(u))
                }
                500..=599 => Err(Failure::retry(anyhow!("{}", reply.describe()))),
                _ => Err(Failure::fatal(anyhow!("{}", reply.describe()))),
            }
        }
    }
}

/// The disk being written.
pub struct Target<'a> {
    /// Opened with O_DIRECT.
    pub direct: &'a File,
    /// The same disk without O_DIRECT, for a last piece shorter than a logical block.
    pub plain: &'a File,
    pub size: u64,
    pub sector: u64,
    pub name: &'a str,
}

/// What was written.
pub struct Written {
    pub format: Format,
    pub digests: Digests,
    /// Bytes of the decompressed image.
    pub bytes: u64,
    /// The image's first MiB (or less, if the image is smaller), not yet on the disk.
    pub first: Aligned,
    pub first_len: usize,
    /// Bytes of zeros the device zeroed instead of being written.
    pub zeroed: u64,
    pub elapsed: Duration,
}

/// Streams the image onto `t`, all but its first MiB; the digests are returned for the caller
/// to check before [`write_first`].
pub fn stream(r: Reading, t: &Target) -> Result<Written> {
    let start = Instant::now();
    let source_name = r.source.name();
    let what = r.source.describe();
    std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<Msg>(READ_QUEUE);
        let (back_tx, back_rx) = sync_channel::<Vec<u8>>(2);
        let reader = std::thread::Builder::new()
            .name("image-read".into())
            .spawn_scoped(scope, move || reader(r, tx, back_rx))
            .context("starting the image reader")?;
        let (wtx, wrx) = sync_channel::<(Aligned, usize)>(WRITE_QUEUE);
        let (wback_tx, wback_rx) = sync_channel::<Aligned>(WRITE_QUEUE + 2);
        let writer = std::thread::Builder::new()
            .name("image-write".into())
            .spawn_scoped(scope, move || writer(t, wrx, wback_tx))
            .context("starting the image writer")?;
        let mut chunks = Chunks {
            rx,
            back: back_tx,
            cur: Vec::new(),
            len: 0,
            pos: 0,
            ended: false,
        };
        let decoded = decode(&mut chunks, &source_name, wtx, wback_rx);
        drop(chunks);
        let read = reader
            .join()
            .map_err(|_| anyhow!("the image reader panicked"))?;
        let written = writer
            .join()
            .map_err(|_| anyhow!("the image writer panicked"))?;
        // The cause is the first failure that is not a step stopping because the next one
        // did: a read error stops the decompressor, a decompression error the reader, a
        // write error both.
        let stopped = |e: &anyhow::Error| e.is::<Stopped>();
        let decoded = decoded.with_context(|| format!("decompressing {what}"));
        let digests = match read {
            Err(e) if stopped(&e) => None,
            r => Some(r?),
        };
        let format = match decoded {
            Err(e) if stopped(&e) => None,
            r => Some(r?),
        };
        let (bytes, first, first_len, zeroed) = written?;
        let (Some(digests), Some(format)) = (digests, format) else {
            bail!("the install stopped without an error (a bug)");
        };
        Ok(Written {
            format,
            digests,
            bytes,
            first,
            first_len,
            zeroed,
            elapsed: start.elapsed(),
        })
    })
}

/// Decompresses `input` into write chunks for the writer; returns the format.
fn decode(
    input: &mut Chunks,
    name: &str,
    out: SyncSender<(Aligned, usize)>,
    back: Receiver<Aligned>,
) -> Result<Format> {
    let head = match input.fill_buf() {
        Ok(h) => h,
        Err(e) if e.get_ref().is_some_and(|e| e.is::<ReaderFailed>()) => return Ok(Format::Raw),
        Err(e) => return Err(e.into()),
    };
    if head.is_empty() {
        bail!("the image is empty");
    }
    let format = Format::from_magic(head);
    if let Some(named) = Format::from_suffix(name)
        && named != format
    {
        bail!(
            "{name} is named as {} but its contents are {} (by their first bytes): a wrong or damaged file",
            named.name(),
            if format == Format::Raw {
                "not compressed"
            } else {
                format.name()
            }
        );
    }
    log::info!("image format: {}", format.name());
    let mut dec: Box<dyn Read + '_> = match format {
        Format::Raw => Box::new(&mut *input),
        Format::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(&mut *input)),
        Format::Xz => {
            let s = liblzma::stream::Stream::new_stream_decoder(
                DECODER_MEMORY_LIMIT,
                liblzma::stream::CONCATENATED,
            )
            .context("starting the xz decoder")?;
            Box::new(liblzma::bufread::XzDecoder::new_stream(&mut *input, s))
        }
        Format::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(&mut *input)
                .context("starting the zstd decoder")?,
        ),
    };
    loop {
        let mut buf = back
            .try_recv()
            .unwrap_or_else(|_| Aligned::new(WRITE_CHUNK));
        let mut k = 0;
        let b = buf.as_mut_slice();
        while k < WRITE_CHUNK {
            match dec.read(&mut b[k..]) {
                Ok(0) => break,
                Ok(m) => k += m,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The reader's own error is the one reported.
                Err(e) if e.get_ref().is_some_and(|e| e.is::<ReaderFailed>()) => return Ok(format),
                Err(e) => {
                    let memory = e.to_string().contains("memory");
                    let e = anyhow!(e).context(format!("{} data", format.name()));
                    return Err(if memory {
                        e.context(format!(
                            "the image needs more memory to decompress than the {} MiB the decoder may use",
                            DECODER_MEMORY_LIMIT >> 20
                        ))
                    } else {
                        e
                    });
                }
            }
        }
        // A send fails when the writer stopped: its error is the one reported.
        if k > 0 && out.send((buf, k)).is_err() {
            return Err(anyhow::Error::new(Stopped));
        }
        if k < WRITE_CHUNK {
            break;
        }
    }
    drop(dec);
    // Nothing may follow the compressed image.
    let rest = input.fill_buf().map(|b| b.len()).unwrap_or(0);
    if rest > 0 {
        bail!("data follows the end of the {} stream", format.name());
    }
    Ok(format)
}

/// Writes each chunk at its offset, keeping the first MiB; returns (bytes, first MiB, its
/// length, bytes zeroed by the device).
fn writer(
    t: &Target,
    rx: Receiver<(Aligned, usize)>,
    back: SyncSender<Aligned>,
) -> Result<(u64, Aligned, usize, u64)> {
    let mut first = Aligned::new(FIRST);
    let mut first_len = 0;
    let mut off: u64 = 0;
    let mut zeros = Zeros {
        device: true,
        bytes: 0,
    };
    let start = Instant::now();
    let mut next_report = start + PROGRESS_EVERY;
    for (buf, k) in rx {
        let end = off + k as u64;
        if end > t.size {
            bail!(
                "the image is larger than /dev/{} ({} bytes): {end} bytes so far",
                t.name,
                t.size
            );
        }
        let data = &buf.as_slice()[..k];
        // The part of the first MiB: kept.
        let mut from = 0usize;
        if off < FIRST as u64 {
            let n = (FIRST - off as usize).min(k);
            first.as_mut_slice()[off as usize..off as usize + n].copy_from_slice(&data[..n]);
            first_len = off as usize + n;
            from = n;
        }
        let rest = &data[from..];
        let at = off + from as u64;
        if !rest.is_empty() {
            let aligned = rest.len() - rest.len() % t.sector as usize;
            if aligned > 0 {
                put(t, &rest[..aligned], at, &mut zeros)
                    .with_context(|| format!("writing /dev/{} at byte {at}", t.name))?;
            }
            if aligned < rest.len() {
                let a = at + aligned as u64;
                t.plain
                    .write_all_at(&rest[aligned..], a)
                    .with_context(|| format!("writing /dev/{} at byte {a}", t.name))?;
            }
        }
        off = end;
        let _ = back.try_send(buf);
        let now = Instant::now();
        if now >= next_report {
            let secs = now.duration_since(start).as_secs_f64();
            log::info!(
                "written {} MiB to /dev/{} ({:.1} MiB/s)",
                off >> 20,
                t.name,
                off as f64 / 1048576.0 / secs
            );
            next_report = now + PROGRESS_EVERY;
        }
    }
    t.plain
        .sync_all()
        .with_context(|| format!("syncing /dev/{}", t.name))?;
    Ok((off, first, first_len, zeros.bytes))
}

/// The runs of zeros the device zeroed instead of being written.
struct Zeros {
    /// Whether the device can (false after it said it cannot).
    device: bool,
    /// Bytes zeroed so.
    bytes: u64,
}

/// Zero runs shorter than this are written like the rest.
const ZERO_RUN: usize = 1 << 20;

/// Writes `data` (whole logical blocks) at `at` with O_DIRECT; each whole [`ZERO_RUN`] of it
/// that is all zeros (an image's free space) is zeroed by the device instead
/// ([`kernel::zero_out`]), which reads back the same and writes nothing on a device that can.
fn put(t: &Target, data: &[u8], at: u64, z: &mut Zeros) -> io::Result<()> {
    let mut i = 0;
    while i < data.len() {
        let zero =
            |j: usize| z.device && j + ZERO_RUN <= data.len() && all_zero(&data[j..j + ZERO_RUN]);
        let run_zero = zero(i);
        let mut j = i + ZERO_RUN.min(data.len() - i);
        while j < data.len() && zero(j) == run_zero {
            j += ZERO_RUN.min(data.len() - j);
        }
        if run_zero {
            match kernel::zero_out(t.direct, at + i as u64, (j - i) as u64) {
                Ok(()) => {
                    z.bytes += (j - i) as u64;
                    i = j;
                    continue;
                }
                Err(Errno::ENOTTY | Errno::EOPNOTSUPP | Errno::EINVAL) => {
                    log::debug!("/dev/{}: no BLKZEROOUT, zeros are written", t.name);
                    z.device = false;
                }
                Err(e) => return Err(e.into()),
            }
        }
        t.direct.write_all_at(&data[i..j], at + i as u64)?;
        i = j;
    }
    Ok(())
}

/// Whether `b` holds only zero bytes (4 KiB at a time: the OR of each block vectorises).
fn all_zero(b: &[u8]) -> bool {
    b.chunks(4096)
        .all(|c| c.iter().fold(0u8, |a, &x| a | x) == 0)
}

/// Writes the held-back first MiB and syncs: the image becomes bootable.
pub fn write_first(t: &Target, w: &Written) -> Result<()> {
    let n = w.first_len;
    let aligned = n - n % t.sector as usize;
    let data = w.first.as_slice();
    if aligned > 0 {
        t.direct
            .write_all_at(&data[..aligned], 0)
            .with_context(|| format!("writing the first MiB of /dev/{}", t.name))?;
    }
    if aligned < n {
        t.plain
            .write_all_at(&data[aligned..n], aligned as u64)
            .with_context(|| format!("writing the first MiB of /dev/{}", t.name))?;
    }
    t.plain
        .sync_all()
        .with_context(|| format!("syncing /dev/{}", t.name))
}

/// Zeroes `[at, at + len)` of the disk (clipped to its size), with O_DIRECT, then syncs.
pub fn zero(t: &Target, at: u64, len: u64) -> Result<()> {
    let end = (at + len).min(t.size);
    let z = Aligned::new(FIRST);
    let mut o = at;
    while o < end {
        let n = ((end - o) as usize).min(FIRST);
        let aligned = n - n % t.sector as usize;
        if aligned > 0 {
            t.direct
                .write_all_at(&z.as_slice()[..aligned], o)
                .with_context(|| format!("zeroing /dev/{} at byte {o}", t.name))?;
        }
        if aligned < n {
            t.plain
                .write_all_at(&z.as_slice()[aligned..n], o + aligned as u64)
                .with_context(|| format!("zeroing /dev/{} at byte {o}", t.name))?;
        }
        o += n as u64;
    }
    t.plain
        .sync_all()
        .with_context(|| format!("syncing /dev/{}", t.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_magic_and_suffix() {
        assert_eq!(Format::from_magic(&[0x1f, 0x8b, 8]), Format::Gzip);
        assert_eq!(Format::from_magic(b"\xfd7zXZ\0\0"), Format::Xz);
        assert_eq!(
            Format::from_magic(&[0x28, 0xb5, 0x2f, 0xfd, 0]),
            Format::Zstd
        );
        assert_eq!(Format::from_magic(&[0xeb, 0x63, 0x90]), Format::Raw);
        assert_eq!(Format::from_magic(&[]), Format::Raw);
        assert_eq!(
            Format::from_suffix("http://h/fcos.raw.XZ"),
            Some(Format::Xz)
        );
        assert_eq!(Format::from_suffix("img.zst"), Some(Format::Zstd));
        assert_eq!(Format::from_suffix("img.raw"), None);
    }

    #[test]
    fn zero_runs_on_a_file_that_cannot_zero_are_written() {
        // A regular file has no BLKZEROOUT: the zeros are written and the data lands as given.
        let path = std::env::temp_dir().join(format!("agent-put-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.set_len(8 << 20).unwrap();
        f.write_all_at(&vec![0xa5; 8 << 20], 0).unwrap();
        let mut data = vec![0u8; 5 << 20];
        data[(1 << 20) + 7] = 1;
        data[(4 << 20) + 512..].fill(2);
        let t = Target {
            direct: &f,
            plain: &f,
            size: 8 << 20,
            sector: 512,
            name: "test",
        };
        let mut z = Zeros {
            device: true,
            bytes: 0,
        };
        put(&t, &data, 1 << 20, &mut z).unwrap();
        assert!(!z.device, "a regular file cannot zero a range");
        assert_eq!(z.bytes, 0);
        let back = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(back[..1 << 20].iter().all(|&b| b == 0xa5));
        assert_eq!(&back[1 << 20..6 << 20], &data[..]);
        assert!(back[6 << 20..].iter().all(|&b| b == 0xa5));
    }

    #[test]
    fn all_zero_finds_a_single_byte() {
        let mut b = vec![0u8; ZERO_RUN];
        assert!(all_zero(&b));
        for at in [0, 4095, 4096, ZERO_RUN - 1] {
            b[at] = 1;
            assert!(!all_zero(&b), "byte {at}");
            b[at] = 0;
        }
    }

    #[test]
    fn hashes_in_ignitions_syntax() {
        assert!(Hasher::parse(&format!("sha256-{}", "a".repeat(64))).is_ok());
        assert!(Hasher::parse(&format!("sha512-{}", "A".repeat(128))).is_ok());
        for bad in [
            "sha256",
            "md5-00",
            "sha256-xyz",
            &format!("sha512-{}", "a".repeat(64)),
        ] {
            assert!(Hasher::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        for n in [1, 4096, FIRST] {
            let mut a = Aligned::new(n);
            assert_eq!(a.as_slice().as_ptr() as usize % ALIGN, 0);
            assert_eq!(a.as_mut_slice().len(), n);
        }
    }
}
