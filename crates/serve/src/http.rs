//! A small, strict HTTP/1.1 server on epoll, with rustls for TLS.
//!
//! A few event-loop threads (`threads`, one per CPU by default) own every connection; every
//! socket is non-blocking, so no thread ever waits on one client. A connection that has not
//! sent anything costs a socket and a small struct, not a thread, so a flood of silent
//! connections cannot exhaust threads or memory. Each loop accepts from the shared listeners
//! (`EPOLLEXCLUSIVE`), reads until a whole request head is there, answers it from the
//! handler (which never blocks on the network), and writes the response as far as the socket
//! takes it, finishing later on `EPOLLOUT`. Keep-alive and pipelining are supported.
//!
//! Limits (documented in docs/serve.md):
//! - `header_timeout` runs from accept (TLS handshake included) until the whole first head is
//!   read, and from the first byte of each later head; a silent connection is closed then, a
//!   partial head is answered 408.
//! - `idle_timeout` between requests on a keep-alive connection.
//! - The minimum send rate: a response in progress must have `min_send_rate` bytes a second
//!   acknowledged by its client in every `send_window` (the socket's unacknowledged bytes do
//!   not count), or the connection is reset.
//! - `max_connections` is global. At the limit the connection that has waited longest without
//!   a whole request head (new and silent, mid-handshake, slow headers, idle keep-alive,
//!   lingering after a close) is evicted to make room: silent connections, from one address
//!   or many, cannot crowd out clients that send requests. When there is none, the slowest
//!   response waiting for its client is evicted. Only when neither is left is a new one
//!   refused, in the listener's own protocol: a plain 503, or over TLS a 503 after the
//!   handshake (a bounded number at a time; beyond that a bare close).
//! - Memory per connection is bounded whatever the response: bodies are shared, never
//!   copied per connection; TLS is encrypted one record at a time as the socket takes it.
//! - `max_connections_per_address` (0 = off) refuses connections over a per-address cap. A
//!   connection stops counting against its address once it has sent its last response (while
//!   it lingers, below); lingering connections have the same cap of their own, beyond which
//!   the connection is closed at once.
//! - Heads are checked as they arrive: a malformed request line or a bare LF/CR line ending is
//!   answered 400 at once; more than `max_header_bytes` → 431; more than `max_headers` → 431.
//!   Only GET and HEAD carry meaning here: a request with a body is answered and the
//!   connection closed (the body is never read).
//!
//! After a response that closes the connection the server half-closes and drains what the
//! client still sends for a moment ("lingering close"), so the client reads the response
//! instead of a reset.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::io::{IoSlice, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

thread_local! {
    /// Each event loop's read buffer: zeroed once, not on every read (measured: zeroing a
    /// 16 KiB array per read was 40% of the loop's own CPU time).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; 16 * 1024]);
}

/// Longest method name accepted.
const MAX_METHOD: usize = 16;
/// How often each event loop checks its connections' deadlines.
const SWEEP: Duration = Duration::from_millis(100);
/// Times an event loop yields the CPU and looks for events again before it sleeps.
const SPIN: usize = 5;
/// Connections accepted per listener wake-up before other events get a turn.
const ACCEPT_BATCH: usize = 128;
/// Event tokens at or above this are listeners.
const LISTENER_BASE: u64 = u64::MAX - 64;
/// Descriptors an event loop holds besides its connections, at most: its epoll set and
/// eventfd, its whole-response memfds and its pipes (`super::pipes`).
pub const LOOP_FDS: usize = 2 + WHOLES_KEPT + super::pipes::MAX_FDS;

/// The event token of a loop's inbox (connections other loops handed to it).
const INBOX: u64 = LISTENER_BASE - 1;
/// SO_SNDBUF of a connection (the kernel doubles it).
const SNDBUF: usize = 256 * 1024;
/// Bytes drained from a lingering connection before it is closed anyway.
const LINGER_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub max_headers: usize,
    /// From accept (and from the first byte of each later head) to the end of the head.
    pub header_timeout: Duration,
    /// Between requests on a keep-alive connection.
    pub idle_timeout: Duration,
    /// The minimum send rate, in bytes per second: a response in progress that delivers less
    /// than this times `send_window` in any window of `send_window` is dropped.
    pub min_send_rate: usize,
    pub send_window: Duration,
    pub max_connections: usize,
    /// 0: no per-address cap.
    pub max_connections_per_address: usize,
    /// How long a closing connection is drained before it is closed (lingering close).
    pub linger: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            min_send_rate: 4096,
            send_window: Duration::from_secs(10),
            max_connections: 10_000,
            max_connections_per_address: 0,
            linger: Duration::from_secs(2),
        }
    }
}

impl Limits {
    /// Refused connections answered at the same time (the 503 and, on TLS, its handshake);
    /// beyond this they are closed without an answer.
    pub fn reject_budget(&self) -> usize {
        (self.max_connections / 8).clamp(16, 1024)
    }
}

/// Connection counters shared with the metrics.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections holding a slot of `max_connections`.
    pub open: AtomicUsize,
    /// Connections refused (connection limit with nothing to evict, or per-address cap).
    pub rejected: AtomicU64,
    /// Connections closed to make room for a new one at the connection limit.
    pub evicted: AtomicU64,
    /// Connections closed because no whole request head (or TLS handshake) arrived within
    /// the header time-out.
    pub header_timeouts: AtomicU64,
    /// Responses dropped for delivering less than the minimum send rate.
    pub too_slow: AtomicU64,
    /// Per event loop: the connections it has, with those handed to it and not yet taken
    /// (set when the loops start).
    pub loops: std::sync::OnceLock<Arc<[AtomicUsize]>>,
}

/// A byte range of a request's text.
type Span = (usize, usize);

/// A parsed request head: its text, kept once, and where each part of it is. An event loop
/// parses each of a connection's heads into the same `Request`, which keeps its buffers, so a
/// keep-alive request allocates nothing (measured: the method, path and every header name
/// and value in strings of their own were a tenth of the loop's own CPU time per request).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The head, invalid UTF-8 replaced.
    text: String,
    method: Span,
    path: Span,
    query: Option<Span>,
    /// Each header's name and value (trimmed).
    headers: Vec<(Span, Span)>,
    pub close: bool,
    pub has_body: bool,
}

/// Headers a request may carry once only: a second one is answered 400.
const SINGLE: [&str; 2] = ["authorization", "host"];

/// Above this, a connection's request drops its buffers once a smaller head comes, so one
/// large head does not hold memory for the rest of the connection.
const REQUEST_KEPT: usize = 4096;

impl Request {
    fn at(&self, s: Span) -> &str {
        &self.text[s.0..s.1]
    }

    pub fn method(&self) -> &str {
        self.at(self.method)
    }

    pub fn path(&self) -> &str {
        self.at(self.path)
    }

    pub fn query(&self) -> Option<&str> {
        self.query.map(|q| self.at(q))
    }

    /// Each header's name and value, in the order sent.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.headers.iter().map(|&(n, v)| (self.at(n), self.at(v)))
    }

    /// All values of a header joined with ", " (None when absent).
    pub fn header(&self, name: &str) -> Option<String> {
        let mut it = self
            .headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v);
        let first = it.next()?;
        let mut s = first.to_string();
        for v in it {
            s.push_str(", ");
            s.push_str(v);
        }
        Some(s)
    }

    /// The single value of a header that must not repeat (a request with two
    /// `Authorization` or `Host` headers is refused when parsed).
    pub fn header_one(&self, name: &str) -> Option<&str> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// A query parameter (no percent-decoding: our parameters are plain numbers).
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query()?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == name).then_some(v)
        })
    }

    /// Parses a request head (without the final blank line) into this request, reusing its
    /// buffers; Err is the status to answer. Lines end in CRLF; a bare LF or CR is malformed
    /// (400).
    fn parse(&mut self, head: &[u8], max_headers: usize) -> Result<(), u16> {
        if head.len() <= REQUEST_KEPT && self.text.capacity() > REQUEST_KEPT {
            *self = Request::default();
        }
        self.text.clear();
        self.headers.clear();
        match std::str::from_utf8(head) {
            Ok(s) => self.text.push_str(s),
            Err(_) => {
                // The request line as sent (its target must be UTF-8): checked before the
                // replacement below would make any target valid. Header values keep theirs.
                let (first, _) = Lines { text: head, at: 0 }.next().ok_or(400u16)??;
                parse_request_line(first)?;
                self.text.push_str(&String::from_utf8_lossy(head))
            }
        }
        // The delimiters are ASCII: positions found in the bytes are character boundaries.
        let text = self.text.as_bytes();
        let mut lines = Lines { text, at: 0 };
        let (line, _) = lines.next().ok_or(400u16)??;
        let (method, target, http10) = parse_request_line(line)?;
        self.method = (0, method.len());
        let t0 = method.len() + 1;
        let (path, query) = match target.find('?') {
            Some(q) => ((t0, t0 + q), Some((t0 + q + 1, t0 + target.len()))),
            None => ((t0, t0 + target.len()), None),
        };
        self.path = path;
        self.query = query;
        let mut close = http10;
        let mut content_length: Option<u64> = None;
        let mut chunked = false;
        for l in lines {
            let (l, start) = l?;
            if self.headers.len() >= max_headers {
                return Err(431);
            }
            let colon = l.iter().position(|&b| b == b':').ok_or(400u16)?;
            let (name, value) = (&l[..colon], &l[colon + 1..]);
            if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
                // Also rejects obsolete line folding (a line starting with white space).
                return Err(400);
            }
            // Control characters, a stray CR among them.
            if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
                return Err(400);
            }
            let lead = value
                .iter()
                .take_while(|&&b| b == b' ' || b == b'\t')
                .count();
            let trail = value[lead..]
                .iter()
                .rev()
                .take_while(|&&b| b == b' ' || b == b'\t')
                .count();
            let v0 = start + colon + 1 + lead;
            let span = (
                (start, start + colon),
                (v0, v0 + value.len() - lead - trail),
            );
            let (name, value) = (
                &self.text[span.0.0..span.0.1],
                &self.text[span.1.0..span.1.1],
            );
            if name.eq_ignore_ascii_case("connection") {
                for t in value.split(',') {
                    let t = t.trim();
                    if t.eq_ignore_ascii_case("close") {
                        close = true;
                    } else if t.eq_ignore_ascii_case("keep-alive") && http10 {
                        close = false;
                    }
                }
            } else if name.eq_ignore_ascii_case("content-length") {
                // 1*DIGIT (RFC 9110 §8.6): no sign, which Rust's parse would take.
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(400);
                }
                let n: u64 = value.parse().map_err(|_| 400u16)?;
                if content_length.is_some_and(|c| c != n) {
                    return Err(400);
                }
                content_length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = true;
            } else if SINGLE.iter().any(|h| name.eq_ignore_ascii_case(h))
                && self
                    .headers
                    .iter()
                    .any(|&(n, _)| self.text[n.0..n.1].eq_ignore_ascii_case(name))
            {
                // Two credentials or two hosts: which one counts would be a guess.
                return Err(400);
            }
            self.headers.push(span);
        }
        self.close = close;
        self.has_body = chunked || content_length.unwrap_or(0) > 0;
        Ok(())
    }
}

/// Parses a request head (without the final blank line) into a new [`Request`]; Err is the
/// status to answer. The event loops parse into a reused one; this is the entry point for
/// the fuzz target (`fuzz/fuzz_targets/http_head.rs`).
pub fn parse_head(head: &[u8], max_headers: usize) -> Result<Request, u16> {
    let mut r = Request::default();
    r.parse(head, max_headers)?;
    Ok(r)
}

/// The lines of a head and where each starts: every line but the last ends in CRLF (a bare LF
/// is Err(400)); the last has no line end (a CR there is Err(400)). A CR inside a line is
/// left to the line's own checks, which refuse control characters.
struct Lines<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = Result<(&'a [u8], usize), u16>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.at;
        if start > self.text.len() {
            return None;
        }
        let rest = &self.text[start..];
        Some(match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.at = start + n + 1;
                match rest[..n].strip_suffix(b"\r") {
                    Some(l) => Ok((l, start)),
                    None => Err(400),
                }
            }
            None => {
                self.at = self.text.len() + 1;
                if rest.last() == Some(&b'\r') {
                    Err(400)
                } else {
                    Ok((rest, start))
                }
            }
        })
    }
}

#[derive(Debug, Clone)]
pub enum Body {
    Empty,
    Shared(Arc<[u8]>),
    /// A shared body that plain HTTP sends with sendfile(2) from a sealed memfd.
    File(Arc<FileBody>),
    Owned(Vec<u8>),
    /// Shared segments with the same short text between each two (a template filled in for
    /// one request: the etcd index). Many responses share the segments; each holds only its
    /// text, so a response in progress never holds a copy of the document.
    Spliced {
        segs: Arc<[Box<[u8]>]>,
        fill: Box<[u8]>,
    },
}

impl Body {
    /// The body's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Body::Empty => 0,
            Body::Shared(b) => b.len(),
            Body::File(f) => f.bytes.len(),
            Body::Owned(b) => b.len(),
            Body::Spliced { segs, fill } => {
                segs.iter().map(|s| s.len()).sum::<usize>()
                    + segs.len().saturating_sub(1) * fill.len()
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes in order, as the contiguous pieces it holds.
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let one: &[u8] = match self {
            Body::Empty | Body::Spliced { .. } => &[],
            Body::Shared(b) => b,
            Body::File(f) => &f.bytes,
            Body::Owned(b) => b,
        };
        let (segs, fill) = match self {
            Body::Spliced { segs, fill } => (&segs[..], &fill[..]),
            _ => (&[][..], &[][..]),
        };
        let spliced = segs
            .iter()
            .enumerate()
            .flat_map(move |(i, s)| [(i > 0).then_some(fill), Some(&s[..])])
            .flatten();
        std::iter::once(one)
            .chain(spliced)
            .filter(|p| !p.is_empty())
    }

    /// The whole body in one buffer (for tests and small bodies).
    pub fn to_vec(&self) -> Vec<u8> {
        self.pieces().flat_map(|p| p.iter().copied()).collect()
    }

    /// Fills `out` with the body's bytes from `pos` on, as slices of its pieces, at most
    /// `max` bytes (as many pieces as `out` has room for); returns how many it filled.
    fn slices_from<'a>(&'a self, mut pos: usize, max: usize, out: &mut [IoSlice<'a>]) -> usize {
        let (mut left, mut n) = (max, 0);
        for p in self.pieces() {
            if left == 0 || n == out.len() {
                break;
            }
            if pos >= p.len() {
                pos -= p.len();
                continue;
            }
            let take = (p.len() - pos).min(left);
            out[n] = IoSlice::new(&p[pos..pos + take]);
            n += 1;
            left -= take;
            pos = 0;
        }
        n
    }
}

/// A pre-rendered body that many responses share, with the same bytes in a sealed memfd:
/// plain HTTP sends it with sendfile(2), so the kernel takes the pages as they are instead
/// of copying the body into every socket buffer (measured: that copy was a fifth of the
/// server's CPU time per ~50 KiB config). TLS encrypts from `bytes`.
///
/// Each event loop also keeps the last whole response (head and body) in a memfd for
/// keep-alive and for closing answers each (see `whole`): responses with the same head (the
/// same second of `Date`) go out in one call instead of a send for the head and a sendfile
/// for the body (measured: that send was 8% of the server's CPU time).
#[derive(Debug)]
pub struct FileBody {
    pub bytes: Arc<[u8]>,
    fd: std::os::fd::OwnedFd,
    /// Its key in each thread's cache of whole responses.
    id: u64,
}

/// A whole response: its head and a sealed memfd holding head and body. The head is that of
/// a response of `status` and header `lines` at second `date_secs` (see [`response_head`]),
/// which is how the next response finds it without making its own head.
#[derive(Debug)]
struct Whole {
    status: u16,
    date_secs: u64,
    lines: String,
    head: Vec<u8>,
    fd: std::os::fd::OwnedFd,
    made: Instant,
    /// Head and body.
    len: usize,
}

static NEXT_BODY: AtomicU64 = AtomicU64::new(0);

/// Whole responses each thread keeps, and their bytes at most.
const WHOLES_KEPT: usize = 16;
const WHOLES_BUDGET: usize = 16 * 1024 * 1024;

/// A cached whole response: its body's id and `keep`, and the response.
type WholeEntry = ((u64, bool), Arc<Whole>);

thread_local! {
    /// This thread's whole responses by (body, keep), least recently used first. Per
    /// thread: sending one takes no lock and touches no reference count that another
    /// event loop touches on every request.
    static WHOLES: std::cell::RefCell<Vec<WholeEntry>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A sealed memfd holding `parts` one after another; None when none can be made.
fn sealed_memfd(parts: &[&[u8]]) -> Option<std::os::fd::OwnedFd> {
    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let fd = memfd_create(
        "agent-serve-body",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .ok()?;
    let mut f = std::fs::File::from(fd);
    for p in parts {
        f.write_all(p).ok()?;
    }
    // Immutable from now on: responses in flight may still reference its pages.
    fcntl(
        &f,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_WRITE
                | SealFlag::F_SEAL_SEAL,
        ),
    )
    .ok()?;
    Some(f.into())
}

impl FileBody {
    /// None when no memfd can be made (the body is then written from memory as before).
    pub fn new(bytes: Arc<[u8]>) -> Option<FileBody> {
        let fd = sealed_memfd(&[&bytes])?;
        Some(FileBody {
            bytes,
            fd,
            id: NEXT_BODY.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The whole response of `r` with this body at second `date_secs` (whose `Date` is
    /// `date`): this thread's cached one when its head is the same, else a new one, made at
    /// most twice a second per body and `keep` (a head that changes more often, which the
    /// server's own responses never do, is sent apart). None also for a body over the
    /// cache's budget.
    fn whole(
        &self,
        r: &Response,
        keep: bool,
        (date_secs, date): (u64, &str),
        now: Instant,
    ) -> Option<Arc<Whole>> {
        if self.bytes.len() + r.lines.len() + 256 > WHOLES_BUDGET {
            return None;
        }
        WHOLES.with_borrow_mut(|ws| {
            let last = ws.len().checked_sub(1);
            let at = match last {
                // The one used last: most often the one wanted.
                Some(l) if ws[l].0 == (self.id, keep) => Some(l),
                _ => ws.iter().position(|(k, _)| *k == (self.id, keep)),
            };
            if let Some(i) = at {
                let w = &ws[i].1;
                let same = w.status == r.status && w.date_secs == date_secs && w.lines == r.lines;
                if same || now.duration_since(w.made) < Duration::from_millis(500) {
                    let w = same.then(|| w.clone());
                    if Some(i) != last {
                        let e = ws.remove(i);
                        ws.push(e);
                    }
                    return w;
                }
                ws.remove(i);
            }
            // Made in an earlier second: their `Date` is over, no head matches them again.
            ws.retain(|(_, w)| now.saturating_duration_since(w.made) < Duration::from_secs(2));
            let mut head = Vec::new();
            response_head(r, keep, self.bytes.len(), date, &mut head);
            let len = head.len() + self.bytes.len();
            let w = Arc::new(Whole {
                status: r.status,
                date_secs,
                lines: r.lines.clone(),
                fd: sealed_memfd(&[&head, &self.bytes])?,
                head,
                made: now,
                len,
            });
            let mut held: usize = ws.iter().map(|(_, w)| w.len).sum();
            while !ws.is_empty() && (ws.len() >= WHOLES_KEPT || held + len > WHOLES_BUDGET) {
                held -= ws.remove(0).1.len;
            }
            ws.push(((self.id, keep), w.clone()));
            Some(w)
        })
    }
}

/// A response. An event loop answers each of a connection's requests into the same
/// `Response`, which keeps its buffers (see [`Request`]).
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// The header lines, each `Name: value` and CRLF.
    lines: String,
    pub body: Body,
    /// Labels for metrics and the access log: the pool ("-" when none, kept as empty) and
    /// the spec version.
    pool: String,
    pub version: Cow<'static, str>,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            lines: String::new(),
            body: Body::Empty,
            pool: String::new(),
            version: Cow::Borrowed("-"),
        }
    }

    pub fn text(status: u16, msg: impl Into<String>) -> Self {
        let mut r = Response::new(status);
        let mut m = msg.into();
        m.push('\n');
        r.body = Body::Owned(m.into_bytes());
        r.add_header("Content-Type", "text/plain; charset=utf-8");
        r
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.add_header(k, v);
        self
    }

    pub fn add_header(&mut self, k: &str, v: &str) {
        self.lines.push_str(k);
        self.lines.push_str(": ");
        self.lines.push_str(v);
        self.lines.push_str("\r\n");
    }

    /// Header lines made beforehand: each `Name: value` and CRLF.
    pub fn add_lines(&mut self, lines: &str) {
        debug_assert!(lines.is_empty() || lines.ends_with("\r\n"));
        self.lines.push_str(lines);
    }

    /// A new answer of `status` in this response's buffers.
    pub fn reset(&mut self, status: u16) {
        self.status = status;
        self.lines.clear();
        self.body = Body::Empty;
        self.pool.clear();
        self.version = Cow::Borrowed("-");
    }

    /// The value of header `k` (the first one).
    pub fn header_value(&self, k: &str) -> Option<&str> {
        self.lines.split("\r\n").find_map(|l| {
            let (n, v) = l.split_once(": ")?;
            n.eq_ignore_ascii_case(k).then_some(v)
        })
    }

    pub fn pool(&self) -> &str {
        if self.pool.is_empty() {
            "-"
        } else {
            &self.pool
        }
    }

    pub fn set_pool(&mut self, pool: &str) {
        self.pool.clear();
        self.pool.push_str(pool);
    }
}

pub trait Handler: Send + Sync + 'static {
    /// Answers `req` in `out`, which comes as `Response::new(200)` would (with buffers kept
    /// from earlier answers).
    fn handle(&self, req: &Request, out: &mut Response);
    /// Called after each response is written (metrics, access log).
    fn done(
        &self,
        req: Option<&Request>,
        resp: &Response,
        bytes: usize,
        took: Duration,
        peer: SocketAddr,
    );
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// A listening socket and, for HTTPS, its TLS configuration.
pub struct Listener {
    pub sock: TcpListener,
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Binds a listening socket with a deep backlog (a thundering herd of booting machines).
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    use nix::sys::socket::{Backlog, listen};
    // std sets SO_REUSEADDR; calling listen() again on Linux raises the backlog.
    let l = TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
    listen(&l, Backlog::new(4096).unwrap_or(Backlog::MAXCONN))
        .with_context(|| format!("listening on {addr}"))?;
    Ok(l)
}

/// Stops a listening socket from taking new connections (used at shutdown).
pub fn stop_listener(l: &TcpListener) {
    let _ = nix::sys::socket::shutdown(l.as_raw_fd(), nix::sys::socket::Shutdown::Both);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One part of the server's waiting set. Each thread uses one part (picked once per
/// thread), so event loops do not take turns at one lock on every request.
#[derive(Default)]
#[repr(align(128))]
struct WaitPart(Mutex<BTreeSet<(u64, RawFd)>>);

const WAIT_PARTS: usize = 8;

/// A waiting connection's entry: its part, when it started waiting, its socket.
#[derive(Debug, Clone, Copy)]
struct WaitKey {
    part: usize,
    at: u64,
    fd: RawFd,
}

/// A connection's entry among the responses waiting for their client: its part, its socket.
#[derive(Debug, Clone, Copy)]
struct SlowKey {
    part: usize,
    fd: RawFd,
}

/// One part of the server's set of responses waiting for their client: per socket, when its
/// response was queued (on the clock of `Server::waiting`) and the bytes of it the socket
/// took so far (kept by its owner).
#[derive(Default)]
#[repr(align(128))]
struct SlowPart(Mutex<HashMap<RawFd, (u64, Arc<AtomicUsize>)>>);

/// The server shared by every event loop.
pub struct Server {
    limits: Limits,
    handler: Arc<dyn Handler>,
    stats: Arc<ConnStats>,
    shutdown: Arc<AtomicBool>,
    /// Connections waiting for a request head (the eviction candidates), in parts: when
    /// each started waiting, and its socket. A connection's owner removes its entry (under
    /// its part's lock) before it closes the socket, so an evicting thread may shut the
    /// socket down while holding every part's lock.
    waiting: [WaitPart; WAIT_PARTS],
    /// The clock of `waiting`.
    born: Instant,
    /// Responses the socket took only part of, waiting for their client: the candidates for
    /// eviction when no connection is waiting for a request head, slowest first. The same
    /// rule as for `waiting`: the owner removes its entry before it closes the socket.
    slow: [SlowPart; WAIT_PARTS],
    /// Per client address: connections counted against the cap, and lingering ones.
    per_address: Mutex<HashMap<IpAddr, AddressCount>>,
    /// Refused connections still being answered.
    rejecting: AtomicUsize,
}

impl Server {
    pub fn new(
        limits: Limits,
        handler: Arc<dyn Handler>,
        stats: Arc<ConnStats>,
        shutdown: Arc<AtomicBool>,
    ) -> Arc<Self> {
        Arc::new(Server {
            limits,
            handler,
            stats,
            shutdown,
            waiting: Default::default(),
            born: Instant::now(),
            slow: Default::default(),
            per_address: Mutex::new(HashMap::new()),
            rejecting: AtomicUsize::new(0),
        })
    }

    /// Starts `threads` event loops serving `listeners`. They return once shutdown is set and
    /// their connections are finished.
    pub fn start(
        self: &Arc<Self>,
        listeners: &[Listener],
        threads: usize,
    ) -> Result<Vec<std::thread::JoinHandle<()>>> {
        if listeners.len() as u64 >= u64::MAX - LISTENER_BASE {
            anyhow::bail!("too many listeners");
        }
        for l in listeners {
            l.sock
                .set_nonblocking(true)
                .context("making a listener non-blocking")?;
        }
        let threads = threads.max(1);
        let mut links = Vec::new();
        for _ in 0..threads {
            links.push(Link {
                inbox: Mutex::new(Inbox::default()),
                wake: nix::sys::eventfd::EventFd::from_flags(
                    nix::sys::eventfd::EfdFlags::EFD_CLOEXEC
                        | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
                )
                .context("creating an event fd")?,
            });
        }
        let links: Arc<[Link]> = links.into();
        let loads: Arc<[AtomicUsize]> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
        if self.stats.loops.set(loads.clone()).is_err() {
            anyhow::bail!("the server's loops were started before");
        }
        let mut handles = Vec::new();
        for i in 0..threads {
            let mut ls = Vec::new();
            for l in listeners {
                ls.push((
                    l.sock.try_clone().context("cloning a listener")?,
                    l.tls.clone(),
                ));
            }
            let epoll =
                Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).context("creating an epoll set")?;
            epoll
                .add(&links[i].wake, EpollEvent::new(EpollFlags::EPOLLIN, INBOX))
                .context("watching an event fd")?;
            let mut shard = Shard {
                srv: self.clone(),
                links: links.clone(),
                loads: loads.clone(),
                me: i,
                now: Instant::now(),
                date: String::new(),
                date_secs: 0,
                epoll,
                listeners: ls,
                listening: false,
                paused_until: None,
                slots: Vec::new(),
                free: Vec::new(),
                live: 0,
                draining: false,
                last_accept_warning: None,
            };
            shard.listen(true).context("watching the listeners")?;
            handles.push(
                std::thread::Builder::new()
                    .name(format!("serve-{i}"))
                    .spawn(move || shard.run())
                    .context("starting an event-loop thread")?,
            );
        }
        Ok(handles)
    }

    /// Registers a connection as waiting for a head; returns its key.
    fn wait_enter(&self, fd: RawFd, now: Instant) -> WaitKey {
        let k = WaitKey {
            part: super::thread_part(WAIT_PARTS),
            at: now.saturating_duration_since(self.born).as_nanos() as u64,
            fd,
        };
        lock(&self.waiting[k.part].0).insert((k.at, k.fd));
        k
    }

    /// Unregisters a waiting connection. false: it was evicted meanwhile (its slot already
    /// went to another connection and its socket is shut down).
    fn wait_leave(&self, k: WaitKey) -> bool {
        lock(&self.waiting[k.part].0).remove(&(k.at, k.fd))
    }

    /// Evicts the connection that has waited longest for a request head and releases its
    /// slot. false: every connection is busy with a request.
    fn evict_oldest(&self) -> bool {
        // Every part, always in this order (a thread holds at most one part otherwise).
        let mut parts: Vec<_> = self.waiting.iter().map(|p| lock(&p.0)).collect();
        let Some((oldest, part)) = parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((*p.first()?, i)))
            .min()
        else {
            return false;
        };
        parts[part].remove(&oldest);
        // Its owner cannot close the socket before taking the lock we hold (see `waiting`);
        // shutting it down wakes the owner, which then closes it.
        let _ = nix::sys::socket::shutdown(oldest.1, nix::sys::socket::Shutdown::Both);
        drop(parts);
        self.stats.open.fetch_sub(1, Ordering::SeqCst);
        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Registers a response queued at `queued` that waits for its client, with the counter
    /// of its bytes the socket took; returns its key.
    fn slow_enter(&self, fd: RawFd, queued: Instant, sent: Arc<AtomicUsize>) -> SlowKey {
        let k = SlowKey {
            part: super::thread_part(WAIT_PARTS),
            fd,
        };
        let at = queued.saturating_duration_since(self.born).as_nanos() as u64;
        lock(&self.slow[k.part].0).insert(fd, (at, sent));
        k
    }

    /// Unregisters a waiting response. false: it was evicted meanwhile.
    fn slow_leave(&self, k: SlowKey) -> bool {
        lock(&self.slow[k.part].0).remove(&k.fd).is_some()
    }

    /// Evicts the slowest response waiting for its client and releases its slot: the one
    /// whose client acknowledged the fewest bytes per second since it was queued (counted
    /// over at least a second, so a response just queued is not the slowest for having had
    /// no time). false: none is waiting.
    fn evict_slowest(&self) -> bool {
        let mut parts: Vec<_> = self.slow.iter().map(|p| lock(&p.0)).collect();
        let now = self.born.elapsed().as_nanos() as u64;
        let rate = |fd: RawFd, at: u64, sent: &AtomicUsize| {
            // The socket is open: its owner closes it only after removing its entry, under
            // the lock held here.
            let delivered = sent.load(Ordering::Relaxed).saturating_sub(unacked_fd(fd));
            let secs = (now.saturating_sub(at) as f64 / 1e9).max(1.0);
            delivered as f64 / secs
        };
        let Some((_, part, fd)) = parts
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.iter()
                    .map(move |(&fd, (at, sent))| (rate(fd, *at, sent), i, fd))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
        else {
            return false;
        };
        parts[part].remove(&fd);
        // As in `evict_oldest`: the owner closes it once it sees the shutdown.
        abort_on_close(fd);
        let _ = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Both);
        drop(parts);
        self.stats.open.fetch_sub(1, Ordering::SeqCst);
        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Takes a connection slot, evicting at the limit a connection waiting for a request
    /// head or, when there is none, the slowest response waiting for its client.
    fn acquire_slot(&self) -> bool {
        if self.stats.open.fetch_add(1, Ordering::SeqCst) < self.limits.max_connections {
            return true;
        }
        if self.evict_oldest() || self.evict_slowest() {
            return true;
        }
        self.stats.open.fetch_sub(1, Ordering::SeqCst);
        false
    }

    fn address_acquire(&self, ip: IpAddr) -> bool {
        let cap = self.limits.max_connections_per_address;
        if cap == 0 {
            return true;
        }
        let mut m = lock(&self.per_address);
        let n = m.entry(ip).or_default();
        if n.active >= cap {
            return false;
        }
        n.active += 1;
        true
    }

    /// Gives back what `hold` holds of `ip`'s counts.
    fn address_release(&self, ip: IpAddr, hold: AddressHold) {
        let mut m = lock(&self.per_address);
        if let Some(n) = m.get_mut(&ip) {
            match hold {
                AddressHold::None => {}
                AddressHold::Active => n.active -= 1,
                AddressHold::Lingering => n.lingering -= 1,
            }
            if n.active == 0 && n.lingering == 0 {
                m.remove(&ip);
            }
        }
    }

    /// A counted connection has sent its last answer: it stops counting against the cap and
    /// may linger, unless its address already has `cap` lingering connections (false: close
    /// it at once).
    fn address_linger(&self, ip: IpAddr) -> bool {
        let cap = self.limits.max_connections_per_address;
        let mut m = lock(&self.per_address);
        let Some(n) = m.get_mut(&ip) else {
            return false;
        };
        n.active -= 1;
        // Not lingering: the entry stays, it still counts `cap` lingering connections.
        let linger = n.lingering < cap;
        if linger {
            n.lingering += 1;
        }
        linger
    }
}

/// One client address's connections under `max_connections_per_address`.
#[derive(Debug, Default)]
struct AddressCount {
    /// Counted against the cap: every connection until its last answer is sent.
    active: usize,
    /// Lingering after their last answer (at most the cap more).
    lingering: usize,
}

/// What a connection holds of its address's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddressHold {
    None,
    Active,
    Lingering,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for (the rest of) a request head, or for the TLS handshake.
    Head,
    /// A response is being written.
    Writing,
    /// The last response is written and the write side shut: draining until the peer closes.
    Linger,
}

/// What to report to the handler once a response is written.
struct Finished {
    /// The response answers the connection's `req` (not a malformed or refused one).
    has_req: bool,
    bytes: usize,
    started: Instant,
}

/// Where the scan for the end of a request head stands.
#[derive(Debug, Default, Clone)]
struct ScanState {
    /// Start of the request line (after ignored empty lines), once known.
    start: Option<usize>,
    /// Bytes before this were checked.
    pos: usize,
    /// The request line is complete and valid.
    line_ok: bool,
}

struct Conn {
    sock: TcpStream,
    peer: SocketAddr,
    tls: Option<Box<rustls::ServerConnection>>,
    /// Received plaintext not yet consumed.
    buf: Vec<u8>,
    scan: ScanState,
    phase: Phase,
    deadline: Instant,
    /// When the first byte of the current head arrived.
    head_start: Option<Instant>,
    /// Requests answered on this connection.
    served: u64,
    /// Key in the server's waiting set while waiting for a head.
    waiting: Option<WaitKey>,
    /// Holds a slot of max_connections.
    counted: bool,
    /// What it counts for in the per-address map.
    address: AddressHold,
    /// A refused connection: answered 503 and closed.
    reject: bool,
    eof: bool,
    close_after: bool,
    /// Plain output: response head and body, and how much of both is written.
    out_head: Vec<u8>,
    out_body: Body,
    /// Plain output of a shared body: head and body in one memfd (see [`FileBody`]).
    out_whole: Option<Arc<Whole>>,
    /// How much of head and body is written (TLS: handed to rustls).
    out_pos: usize,
    /// TLS: bytes of the current response the socket took (plain: `out_pos`).
    sent: usize,
    /// Bytes of the current response the client had acknowledged when the current window of
    /// the minimum send rate began.
    delivered: usize,
    /// TLS: the close_notify of a closing response is queued.
    notified: bool,
    /// Key in the server's set of responses waiting for their client, while in it.
    slow: Option<SlowKey>,
    /// When the current response was queued.
    queued: Instant,
    /// The socket bytes of the current response, for the evicting thread (see
    /// `Server::evict_slowest`); made when a response first waits for its client.
    shared_sent: Option<Arc<AtomicUsize>>,
    finished: Option<Finished>,
    /// The current request and its response, in buffers kept from one to the next.
    req: Request,
    resp: Response,
    interest: Option<EpollFlags>,
    lingered: usize,
}

struct Slot {
    epoch: u32,
    conn: Option<Box<Conn>>,
}

/// A connection one event loop accepted and hands to another.
type Handoff = (TcpStream, SocketAddr, Option<Arc<rustls::ServerConfig>>);

/// What the event loops see of each other, to keep their connections even: whichever loop
/// wakes for the listener accepts, so one loop could end up with most of a burst of new
/// connections (measured: a 90/10 split of wrk's 100 keep-alive connections cut throughput
/// by a fifth) while the other idles.
struct Link {
    inbox: Mutex<Inbox>,
    /// Written after a push to the inbox; watched by the loop.
    wake: nix::sys::eventfd::EventFd,
}

#[derive(Default)]
struct Inbox {
    handed: Vec<Handoff>,
    /// The loop has returned (shutdown): nothing more may be handed to it.
    closed: bool,
}

/// One event loop.
struct Shard {
    srv: Arc<Server>,
    /// Every loop's link and connection count (`ConnStats::loops`), and which is this loop's.
    links: Arc<[Link]>,
    loads: Arc<[AtomicUsize]>,
    me: usize,
    /// When the current batch of events arrived, and its `Date` (see `tick`).
    now: Instant,
    date: String,
    date_secs: u64,
    epoll: Epoll,
    listeners: Vec<(TcpListener, Option<Arc<rustls::ServerConfig>>)>,
    listening: bool,
    paused_until: Option<Instant>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    live: usize,
    draining: bool,
    last_accept_warning: Option<Instant>,
}

fn token(idx: usize, epoch: u32) -> u64 {
    ((epoch as u64) << 32) | idx as u64
}

/// What the scan of a request head found.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    More,
    Bad(u16),
    /// The head is `buf[start..end]`; the next request starts at `next`.
    Head {
        start: usize,
        end: usize,
        next: usize,
    },
}

/// Scans `buf` for a whole request head, resuming where the previous scan stopped. Empty
/// lines before the request line are ignored (RFC 9112 §2.2). Every line must end in CRLF: a
/// bare LF or CR is answered 400 as soon as it is seen, and the request line is checked as
/// soon as it is complete (its start even before), so malformed input never waits for the
/// header time-out.
fn scan_head(buf: &[u8], st: &mut ScanState, max: usize) -> Scan {
    let start = match st.start {
        Some(s) => s,
        None => {
            let mut s = 0;
            while buf.len() >= s + 2 && buf[s] == b'\r' && buf[s + 1] == b'\n' {
                s += 2;
            }
            if s > max {
                return Scan::Bad(400);
            }
            if s == buf.len() || (s + 1 == buf.len() && buf[s] == b'\r') {
                return Scan::More;
            }
            st.start = Some(s);
            st.pos = s;
            s
        }
    };
    let limit = (start + max + 4).min(buf.len());
    let mut i = st.pos;
    while i < limit {
        match buf[i] {
            b'\n' => {
                if i == start || buf[i - 1] != b'\r' {
                    return Scan::Bad(400);
                }
                if !st.line_ok {
                    if let Err(s) = parse_request_line(&buf[start..i - 1]) {
                        return Scan::Bad(s);
                    }
                    st.line_ok = true;
                }
                if i >= start + 3 && &buf[i - 3..=i] == b"\r\n\r\n" {
                    return Scan::Head {
                        start,
                        end: i - 3,
                        next: i + 1,
                    };
                }
            }
            b'\r' if i + 1 < buf.len() && buf[i + 1] != b'\n' => return Scan::Bad(400),
            _ => {}
        }
        i += 1;
    }
    // A CR at the very end is decided when its next byte arrives.
    st.pos = if i > start && buf[i - 1] == b'\r' {
        i - 1
    } else {
        i
    };
    if !st.line_ok
        && let Err(s) = check_line_prefix(&buf[start..limit])
    {
        return Scan::Bad(s);
    }
    if buf.len() - start >= max + 4 {
        return Scan::Bad(if st.line_ok { 431 } else { 414 });
    }
    Scan::More
}

/// Writes the response head for `r` into `h`; `content_length` is the body's whole length
/// (sent for HEAD too; none for 304).
fn response_head(r: &Response, keep: bool, content_length: usize, date: &str, h: &mut Vec<u8>) {
    h.clear();
    h.extend_from_slice(b"HTTP/1.1 ");
    push_number(h, r.status.into());
    h.push(b' ');
    h.extend_from_slice(reason(r.status).as_bytes());
    h.extend_from_slice(b"\r\nDate: ");
    h.extend_from_slice(date.as_bytes());
    if r.status != 304 {
        h.extend_from_slice(b"\r\nContent-Length: ");
        push_number(h, content_length);
    }
    h.extend_from_slice(b"\r\n");
    h.extend_from_slice(r.lines.as_bytes());
    if !keep {
        h.extend_from_slice(b"Connection: close\r\n");
    }
    h.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal.
fn push_number(h: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    h.extend_from_slice(&digits[at..]);
}

/// Writes rustls's pending records. Ok(true): all written; Ok(false): the socket is full.
fn flush_tls(t: &mut rustls::ServerConnection, sock: &mut TcpStream) -> std::io::Result<bool> {
    flush_tls_counted(t, sock, &mut 0)
}

/// [`flush_tls`], adding the bytes the socket took to `sent`.
fn flush_tls_counted(
    t: &mut rustls::ServerConnection,
    sock: &mut TcpStream,
    sent: &mut usize,
) -> std::io::Result<bool> {
    while t.wants_write() {
        match t.write_tls(sock) {
            Ok(n) => *sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn would_block(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock
}

impl Shard {
    fn listen(&mut self, on: bool) -> nix::Result<()> {
        if on == self.listening {
            return Ok(());
        }
        for (i, (l, _)) in self.listeners.iter().enumerate() {
            if on {
                self.epoll.add(
                    l,
                    EpollEvent::new(
                        EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE,
                        LISTENER_BASE + i as u64,
                    ),
                )?;
            } else {
                let _ = self.epoll.delete(l);
            }
        }
        self.listening = on;
        Ok(())
    }

    fn run(mut self) {
        let mut events = vec![EpollEvent::empty(); 256];
        self.tick();
        let mut next_sweep = self.now + SWEEP;
        loop {
            let wait = next_sweep.saturating_duration_since(self.now);
            let ms = (wait.as_millis() as u16).clamp(1, SWEEP.as_millis() as u16);
            let n = match self.poll(&mut events, ms) {
                Ok(n) => n,
                Err(Errno::EINTR) => 0,
                Err(e) => {
                    log::error!("waiting for events: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    0
                }
            };
            self.tick();
            for ev in &events[..n] {
                let data = ev.data();
                if data == INBOX {
                    self.take_inbox();
                    continue;
                }
                if data >= LISTENER_BASE {
                    self.accept((data - LISTENER_BASE) as usize);
                    continue;
                }
                let (idx, epoch) = ((data & 0xffff_ffff) as usize, (data >> 32) as u32);
                let current = self
                    .slots
                    .get(idx)
                    .is_some_and(|s| s.epoch == epoch && s.conn.is_some());
                if current {
                    let readable = ev.events().intersects(
                        EpollFlags::EPOLLIN
                            | EpollFlags::EPOLLERR
                            | EpollFlags::EPOLLHUP
                            | EpollFlags::EPOLLRDHUP,
                    );
                    self.step(idx, readable);
                }
            }
            let now = self.now;
            if now >= next_sweep {
                self.take_inbox();
                self.sweep(now);
                next_sweep = now + SWEEP;
            }
            if self.paused_until.is_some_and(|t| now >= t) && !self.draining {
                self.paused_until = None;
                if let Err(e) = self.listen(true) {
                    log::error!("watching the listeners again: {e}");
                }
            }
            if self.srv.shutdown.load(Ordering::SeqCst) {
                if !self.draining {
                    self.drain();
                }
                self.take_inbox();
                if self.live == 0 {
                    let mut inbox = lock(&self.links[self.me].inbox);
                    if inbox.handed.is_empty() {
                        // Under the inbox lock: a connection is either taken or never
                        // handed here.
                        inbox.closed = true;
                        return;
                    }
                }
            }
        }
    }

    /// Reads the clocks, once per batch of events: deadlines, waiting times and the `Date`
    /// header go by this (request latencies are measured apart).
    fn tick(&mut self) {
        self.now = Instant::now();
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if secs != self.date_secs || self.date.is_empty() {
            self.date_secs = secs;
            self.date = http_date(secs);
        }
    }

    /// Waits up to `ms` for events. Before it sleeps, it gives the CPU away a few times and
    /// looks again: under load the next requests arrive within that, and a loop that does
    /// not sleep needs no wake-up, which saves both the server and its clients a switch
    /// each (measured: server CPU per request 10.1 → 8.6 µs on the serve benchmark; see
    /// README "Speed"). When no other task wants the CPU this costs a few microseconds per
    /// sleep.
    fn poll(&self, events: &mut [EpollEvent], ms: u16) -> nix::Result<usize> {
        for _ in 0..SPIN {
            let n = self.epoll.wait(events, EpollTimeout::ZERO)?;
            if n > 0 {
                return Ok(n);
            }
            std::thread::yield_now();
        }
        self.epoll.wait(events, EpollTimeout::from(ms))
    }

    /// Shutdown: stop accepting and close every connection that has no request in progress.
    fn drain(&mut self) {
        self.draining = true;
        let _ = self.listen(false);
        for idx in 0..self.slots.len() {
            let idle = self.slots[idx]
                .conn
                .as_ref()
                .is_some_and(|c| c.phase != Phase::Writing && c.head_start.is_none());
            if idle {
                self.close(idx);
            }
        }
    }

    fn accept(&mut self, li: usize) {
        for _ in 0..ACCEPT_BATCH {
            if !self.listening {
                return;
            }
            let res = self.listeners[li].0.accept();
            match res {
                Ok((sock, peer)) => {
                    let h = (sock, peer, self.listeners[li].1.clone());
                    let kept = match self.lighter() {
                        Some(to) => self.hand(to, h),
                        None => Err(h),
                    };
                    if let Err((sock, peer, tls)) = kept {
                        self.admit(sock, peer, tls);
                    }
                }
                Err(e) if would_block(&e) => return,
                Err(e) => match e.raw_os_error().map(Errno::from_raw) {
                    Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM) => {
                        // Out of descriptors or memory: make room and pause briefly.
                        self.srv.evict_oldest();
                        let now = Instant::now();
                        if self
                            .last_accept_warning
                            .is_none_or(|t| now.duration_since(t) > Duration::from_secs(10))
                        {
                            log::warn!(
                                "accepting a connection: {e} (raise the open-files limit or lower --max-connections)"
                            );
                            self.last_accept_warning = Some(now);
                        }
                        let _ = self.listen(false);
                        self.paused_until = Some(now + Duration::from_millis(100));
                        return;
                    }
                    _ => {
                        if self.srv.shutdown.load(Ordering::SeqCst) {
                            return;
                        }
                    }
                },
            }
        }
    }

    /// Loop `i`'s connection count.
    fn load(&self, i: usize) -> &AtomicUsize {
        &self.loads[i]
    }

    /// Another loop with at least two connections fewer than this one, unless shutting down.
    fn lighter(&self) -> Option<usize> {
        if self.links.len() < 2 || self.draining || self.srv.shutdown.load(Ordering::Relaxed) {
            return None;
        }
        let mine = self.load(self.me).load(Ordering::Relaxed);
        let (to, load) = (0..self.links.len())
            .filter(|&i| i != self.me)
            .map(|i| (i, self.load(i).load(Ordering::Relaxed)))
            .min_by_key(|&(_, n)| n)?;
        (load + 2 <= mine).then_some(to)
    }

    /// Gives an accepted connection to loop `to`; Err gives it back when that loop has
    /// already returned (shutdown).
    fn hand(&self, to: usize, h: Handoff) -> Result<(), Handoff> {
        let link = &self.links[to];
        {
            let mut inbox = lock(&link.inbox);
            if inbox.closed {
                return Err(h);
            }
            self.load(to).fetch_add(1, Ordering::Relaxed);
            inbox.handed.push(h);
        }
        if let Err(e) = link.wake.write(1) {
            // Cannot happen (the counter would have to reach 2^64 - 1); the loop still
            // looks at its inbox on its next sweep.
            log::error!("waking an event loop: {e}");
        }
        Ok(())
    }

    /// Admits the connections other loops handed to this one.
    fn take_inbox(&mut self) {
        let link = &self.links[self.me];
        let _ = link.wake.read();
        let handed = std::mem::take(&mut lock(&link.inbox).handed);
        let any = !handed.is_empty();
        for (sock, peer, tls) in handed {
            // Counted here by `hand` until now; counted again if it gets a slot.
            self.load(self.me).fetch_sub(1, Ordering::Relaxed);
            self.admit(sock, peer, tls);
        }
        if any && self.draining {
            // Handed over as the server began to shut down: like the rest, closed unless
            // a request is in progress.
            self.drain();
        }
    }

    /// Takes on an accepted connection.
    fn admit(&mut self, sock: TcpStream, peer: SocketAddr, tls: Option<Arc<rustls::ServerConfig>>) {
        let srv = self.srv.clone();
        if sock.set_nonblocking(true).is_err() {
            return;
        }
        let _ = sock.set_nodelay(true);
        let ip = peer.ip().to_canonical();
        let address_ok = srv.address_acquire(ip);
        let slot = address_ok && srv.acquire_slot();
        let capped = srv.limits.max_connections_per_address > 0;
        if address_ok && !slot && capped {
            srv.address_release(ip, AddressHold::Active);
        }
        if !slot {
            srv.stats.rejected.fetch_add(1, Ordering::Relaxed);
            if srv.rejecting.fetch_add(1, Ordering::SeqCst) >= srv.limits.reject_budget() {
                srv.rejecting.fetch_sub(1, Ordering::SeqCst);
                return;
            }
        } else {
            // Room for a whole config of up to ~256 KiB in one write, which the pipe path
            // (`super::pipes`) needs (measured: 64 KiB cost a config of 150 KiB a third more
            // CPU per request). A client that does not read holds up to twice this of kernel
            // memory (charged to the server's cgroup) until the minimum send rate drops it.
            let _ = nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::SndBuf, &SNDBUF);
        }
        let tls = match tls.map(rustls::ServerConnection::new) {
            None => None,
            // rustls's own buffer limit (64 KiB) stays: a response is handed to it one
            // record at a time (`flush_tls_response`).
            Some(Ok(t)) => Some(Box::new(t)),
            Some(Err(e)) => {
                log::error!("starting a TLS session: {e}");
                if slot {
                    srv.stats.open.fetch_sub(1, Ordering::SeqCst);
                    if capped {
                        srv.address_release(ip, AddressHold::Active);
                    }
                } else {
                    srv.rejecting.fetch_sub(1, Ordering::SeqCst);
                }
                return;
            }
        };
        let now = self.now;
        let mut c = Box::new(Conn {
            sock,
            peer,
            tls,
            buf: Vec::new(),
            scan: ScanState::default(),
            phase: Phase::Head,
            deadline: now + srv.limits.header_timeout,
            head_start: None,
            served: 0,
            waiting: None,
            counted: slot,
            address: if slot && capped {
                AddressHold::Active
            } else {
                AddressHold::None
            },
            reject: !slot,
            eof: false,
            close_after: false,
            out_head: Vec::new(),
            out_body: Body::Empty,
            out_whole: None,
            out_pos: 0,
            sent: 0,
            delivered: 0,
            notified: false,
            slow: None,
            queued: now,
            shared_sent: None,
            finished: None,
            req: Request::default(),
            resp: Response::new(200),
            interest: None,
            lingered: 0,
        });
        if c.reject {
            if c.tls.is_none() {
                self.queue_reject(&mut c);
            }
        } else {
            // Evictable from the first moment: it has not sent a request yet.
            self.enter_waiting(&mut c);
        }
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    epoch: 0,
                    conn: None,
                });
                self.slots.len() - 1
            }
        };
        self.slots[idx].conn = Some(c);
        self.live += 1;
        self.load(self.me).fetch_add(1, Ordering::Relaxed);
        // Most clients send their request right after connecting: try to read it now.
        self.step(idx, true);
    }

    /// Runs a connection as far as it goes and updates its epoll registration.
    fn step(&mut self, idx: usize, readable: bool) {
        let Some(mut c) = self.slots[idx].conn.take() else {
            return;
        };
        match self.drive(&mut c, readable) {
            Some(want) => {
                if c.interest != Some(want) {
                    let mut ev = EpollEvent::new(want, token(idx, self.slots[idx].epoch));
                    let res = if c.interest.is_some() {
                        self.epoll.modify(&c.sock, &mut ev)
                    } else {
                        self.epoll.add(&c.sock, ev)
                    };
                    if let Err(e) = res {
                        log::error!("watching a connection: {e}");
                        self.slots[idx].conn = Some(c);
                        self.close(idx);
                        return;
                    }
                    c.interest = Some(want);
                }
                self.slots[idx].conn = Some(c);
            }
            None => {
                self.slots[idx].conn = Some(c);
                self.close(idx);
            }
        }
    }

    fn close(&mut self, idx: usize) {
        let Some(mut c) = self.slots[idx].conn.take() else {
            return;
        };
        self.slots[idx].epoch = self.slots[idx].epoch.wrapping_add(1);
        self.free.push(idx);
        self.live -= 1;
        self.load(self.me).fetch_sub(1, Ordering::Relaxed);
        let srv = &self.srv;
        // Leave the waiting set before the socket is closed (see Server::waiting).
        if let Some(k) = c.waiting.take()
            && !srv.wait_leave(k)
        {
            c.counted = false;
        }
        if let Some(k) = c.slow.take()
            && !srv.slow_leave(k)
        {
            c.counted = false;
        }
        if c.counted {
            srv.stats.open.fetch_sub(1, Ordering::SeqCst);
        }
        if c.reject {
            srv.rejecting.fetch_sub(1, Ordering::SeqCst);
        }
        if c.address != AddressHold::None {
            srv.address_release(c.peer.ip().to_canonical(), c.address);
        }
        if let Some(f) = c.finished.take() {
            // The response could not be written.
            let req = f.has_req.then_some(&c.req);
            srv.handler
                .done(req, &c.resp, 0, f.started.elapsed(), c.peer);
        }
        drop(c);
    }

    /// Checks deadlines.
    fn sweep(&mut self, now: Instant) {
        for idx in 0..self.slots.len() {
            let Some(c) = self.slots[idx].conn.as_mut() else {
                continue;
            };
            if now < c.deadline {
                continue;
            }
            match c.phase {
                Phase::Head => {
                    let handshaking = c.tls.as_ref().is_some_and(|t| t.is_handshaking());
                    if c.served == 0 || c.head_start.is_some() {
                        self.srv
                            .stats
                            .header_timeouts
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    if c.head_start.is_some() && !handshaking && !c.reject {
                        // Slow headers: say so, then close.
                        let Some(mut c) = self.slots[idx].conn.take() else {
                            continue;
                        };
                        let ours = self.leave_waiting(&mut c);
                        if ours {
                            let started = c.head_start.unwrap_or(now);
                            c.resp.reset(408);
                            self.queue(&mut c, false, false, false, started);
                        }
                        self.slots[idx].conn = Some(c);
                        if ours {
                            self.step(idx, false);
                        } else {
                            self.close(idx);
                        }
                    } else {
                        // Silent (or idle between requests): close quietly.
                        if let Some(t) = c.tls.as_mut()
                            && !handshaking
                        {
                            t.send_close_notify();
                            let _ = flush_tls(t, &mut c.sock);
                        }
                        self.close(idx);
                    }
                }
                Phase::Writing => {
                    // The minimum send rate: each window, a response in progress must have
                    // delivered (had acknowledged by the client) `min_send_rate` bytes per
                    // second of it, or be dropped. What the socket buffers is not counted as
                    // delivered, so the buffers cannot hide a client that does not read.
                    let limits = &self.srv.limits;
                    let sent = if c.tls.is_some() { c.sent } else { c.out_pos };
                    let delivered = sent.saturating_sub(unacked(&c.sock));
                    let got = delivered.saturating_sub(c.delivered);
                    let secs = limits.send_window.as_secs_f64();
                    if (got as f64) < limits.min_send_rate as f64 * secs {
                        self.srv.stats.too_slow.fetch_add(1, Ordering::Relaxed);
                        abort_on_close(c.sock.as_raw_fd());
                        self.close(idx);
                        continue;
                    }
                    c.delivered = delivered;
                    c.deadline = now + limits.send_window;
                }
                Phase::Linger => self.close(idx),
            }
        }
    }

    /// Leaves the waiting set; false when the connection was evicted meanwhile.
    fn leave_waiting(&self, c: &mut Conn) -> bool {
        match c.waiting.take() {
            Some(k) if !self.srv.wait_leave(k) => {
                c.counted = false;
                false
            }
            _ => true,
        }
    }

    fn queue_reject(&self, c: &mut Conn) {
        c.resp = Response::text(503, "the server is at its connection limit; retry shortly")
            .header("Retry-After", "1");
        self.queue(c, false, false, false, self.now);
        // A refused connection is neither logged nor counted as a request.
        c.finished = None;
    }

    /// Queues `c.resp` and switches to writing it; `has_req`: it answers `c.req`.
    fn queue(&self, c: &mut Conn, has_req: bool, keep: bool, head_only: bool, started: Instant) {
        let body = std::mem::replace(&mut c.resp.body, Body::Empty);
        let full_len = body.len();
        let send_body = !head_only && c.resp.status != 304;
        let sent_len = if send_body { full_len } else { 0 };
        let bytes;
        match c.tls.as_mut() {
            // Encrypted as the socket takes it (`flush_tls_response`).
            Some(_) => {
                response_head(&c.resp, keep, full_len, &self.date, &mut c.out_head);
                bytes = c.out_head.len() + sent_len;
                c.out_whole = None;
                c.out_body = if send_body { body } else { Body::Empty };
            }
            None => {
                c.out_whole = match &body {
                    Body::File(f) if send_body => {
                        f.whole(&c.resp, keep, (self.date_secs, &self.date), self.now)
                    }
                    _ => None,
                };
                // A whole response has its head; only others need one made.
                match &c.out_whole {
                    Some(w) => bytes = w.head.len() + sent_len,
                    None => {
                        response_head(&c.resp, keep, full_len, &self.date, &mut c.out_head);
                        bytes = c.out_head.len() + sent_len;
                    }
                }
                c.out_body = if send_body { body } else { Body::Empty };
            }
        }
        c.out_pos = 0;
        c.sent = 0;
        c.delivered = 0;
        c.queued = self.now;
        c.notified = false;
        c.finished = Some(Finished {
            has_req,
            bytes,
            started,
        });
        c.close_after = !keep;
        c.phase = Phase::Writing;
        // The end of the first window of the minimum send rate.
        c.deadline = self.now + self.srv.limits.send_window;
    }

    /// Reads what the socket has (up to the head size limit). Err: the connection is broken.
    fn fill(&self, c: &mut Conn) -> Result<(), ()> {
        let cap = self.srv.limits.max_header_bytes + 4 + c.scan.start.unwrap_or(0);
        SCRATCH.with_borrow_mut(|tmp| self.fill_with(c, cap, tmp))
    }

    fn fill_with(&self, c: &mut Conn, cap: usize, tmp: &mut [u8]) -> Result<(), ()> {
        let before = c.buf.len();
        let chunk = tmp.len();
        while c.buf.len() < cap && !c.eof {
            match c.tls.as_mut() {
                // Never more than `cap`, and no spare capacity beyond it: a connection's
                // buffer is at most the head size limit (docs/serve.md).
                None => match c.sock.read(&mut tmp[..(cap - c.buf.len()).min(chunk)]) {
                    Ok(0) => c.eof = true,
                    Ok(n) => {
                        c.buf.reserve_exact(n);
                        c.buf.extend_from_slice(&tmp[..n]);
                        if n < tmp.len() {
                            break;
                        }
                    }
                    Err(e) if would_block(&e) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return Err(()),
                },
                Some(t) => {
                    match t.read_tls(&mut c.sock) {
                        Ok(0) => c.eof = true,
                        Ok(_) => {}
                        Err(e) if would_block(&e) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(_) => return Err(()),
                    }
                    if t.process_new_packets().is_err() {
                        // Send the alert rustls queued, then give up.
                        let _ = flush_tls(t, &mut c.sock);
                        return Err(());
                    }
                    loop {
                        match t.reader().read(tmp) {
                            Ok(0) => {
                                // close_notify: the client sends nothing more.
                                c.eof = true;
                                break;
                            }
                            Ok(n) => c.buf.extend_from_slice(&tmp[..n]),
                            Err(e) if would_block(&e) => break,
                            Err(_) => {
                                c.eof = true;
                                break;
                            }
                        }
                    }
                }
            }
        }
        if c.buf.len() > before && c.head_start.is_none() {
            // The start of the request's latency: not the batch's time, which may be a
            // while before this event's turn.
            let now = Instant::now();
            c.head_start = Some(now);
            if c.served > 0 {
                // A new head on a keep-alive connection: it has the header time-out from now.
                c.deadline = now + self.srv.limits.header_timeout;
            }
        }
        Ok(())
    }

    /// Moves a connection forward. Some(events to wait for) or None to close it.
    fn drive(&self, c: &mut Conn, mut readable: bool) -> Option<EpollFlags> {
        let srv = &self.srv;
        loop {
            match c.phase {
                Phase::Head => {
                    let mut scan = if c.buf.is_empty() {
                        Scan::More
                    } else {
                        scan_head(&c.buf, &mut c.scan, srv.limits.max_header_bytes)
                    };
                    if scan == Scan::More && readable {
                        readable = false;
                        self.fill(c).ok()?;
                        if !c.buf.is_empty() {
                            scan = scan_head(&c.buf, &mut c.scan, srv.limits.max_header_bytes);
                        }
                    }
                    if let Some(t) = c.tls.as_mut() {
                        // Handshake records (or an alert) to send.
                        let sent = flush_tls(t, &mut c.sock).ok()?;
                        if t.is_handshaking() {
                            if c.eof {
                                return None;
                            }
                            self.enter_waiting(c);
                            return Some(if sent {
                                EpollFlags::EPOLLIN
                            } else {
                                EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT
                            });
                        }
                        if c.reject {
                            // The handshake is done: answer in the listener's protocol.
                            self.queue_reject(c);
                            continue;
                        }
                        if !sent {
                            self.enter_waiting(c);
                            return Some(EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT);
                        }
                    }
                    match scan {
                        Scan::More => {
                            if c.eof || c.reject {
                                return None;
                            }
                            self.enter_waiting(c);
                            return Some(EpollFlags::EPOLLIN);
                        }
                        Scan::Bad(status) => {
                            if !self.leave_waiting(c) {
                                return None;
                            }
                            let started = c.head_start.unwrap_or_else(Instant::now);
                            c.resp.reset(status);
                            self.queue(c, false, false, false, started);
                        }
                        Scan::Head { start, end, next } => {
                            if !self.leave_waiting(c) {
                                return None;
                            }
                            let started = c.head_start.unwrap_or_else(Instant::now);
                            let parsed = c.req.parse(&c.buf[start..end], srv.limits.max_headers);
                            c.buf.drain(..next);
                            if c.buf.capacity() > REQUEST_KEPT {
                                // A large head (or leading empty lines) is not kept while its
                                // response is written: what is left is the next head's start.
                                c.buf.shrink_to(REQUEST_KEPT);
                            }
                            c.scan = ScanState::default();
                            c.head_start = None;
                            match parsed {
                                Ok(()) => {
                                    c.resp.reset(200);
                                    srv.handler.handle(&c.req, &mut c.resp);
                                    let keep = !c.req.close
                                        && !c.req.has_body
                                        && !srv.shutdown.load(Ordering::Relaxed);
                                    let head_only = c.req.method() == "HEAD";
                                    self.queue(c, true, keep, head_only, started);
                                }
                                Err(status) => {
                                    c.resp.reset(status);
                                    self.queue(c, false, false, false, started);
                                }
                            }
                        }
                    }
                }
                Phase::Writing => {
                    let done = match c.tls {
                        Some(_) => flush_tls_response(c),
                        None => flush_plain(c),
                    };
                    match done {
                        Err(_) => return None,
                        Ok(false) => {
                            // Waiting for the client: the deadline stays the end of the
                            // current window of the minimum send rate (see `sweep`), and at
                            // the connection limit it may be evicted, slowest first.
                            let sent = if c.tls.is_some() { c.sent } else { c.out_pos };
                            match (&c.slow, &c.shared_sent) {
                                (Some(_), Some(s)) => s.store(sent, Ordering::Relaxed),
                                _ if c.counted => {
                                    let s = c.shared_sent.get_or_insert_default();
                                    s.store(sent, Ordering::Relaxed);
                                    let s = s.clone();
                                    c.slow = Some(srv.slow_enter(c.sock.as_raw_fd(), c.queued, s));
                                }
                                _ => {}
                            }
                            return Some(EpollFlags::EPOLLOUT);
                        }
                        Ok(true) => {}
                    }
                    if let Some(k) = c.slow.take()
                        && !srv.slow_leave(k)
                    {
                        // Evicted meanwhile: its slot went to another connection.
                        c.counted = false;
                        return None;
                    }
                    c.out_head.clear();
                    c.out_body = Body::Empty;
                    c.out_whole = None;
                    let now = Instant::now();
                    if let Some(f) = c.finished.take() {
                        srv.handler.done(
                            f.has_req.then_some(&c.req),
                            &c.resp,
                            f.bytes,
                            now.saturating_duration_since(f.started),
                            c.peer,
                        );
                        c.served += 1;
                    }
                    if c.req.text.capacity() > REQUEST_KEPT {
                        // A large head is not kept once it is answered.
                        c.req = Request::default();
                    }
                    // No request in progress any more: evictable again, before the client
                    // can see the end of the response.
                    self.enter_waiting(c);
                    if c.close_after {
                        if c.eof {
                            return None;
                        }
                        // The client has its whole answer: a lingering connection no longer
                        // counts against its address, so a client that opens its next
                        // connection as soon as it reads the end is not refused. Lingering
                        // ones have a cap of their own (an address that leaves more open is
                        // closed on at once).
                        if c.address == AddressHold::Active {
                            if !srv.address_linger(c.peer.ip().to_canonical()) {
                                c.address = AddressHold::None;
                                return None;
                            }
                            c.address = AddressHold::Lingering;
                        }
                        // Lingering close: the client reads our answer, not a reset.
                        let _ = c.sock.shutdown(Shutdown::Write);
                        c.phase = Phase::Linger;
                        c.deadline = now + srv.limits.linger;
                        readable = true;
                        continue;
                    }
                    c.phase = Phase::Head;
                    if c.buf.is_empty() {
                        c.deadline = now + srv.limits.idle_timeout;
                    } else {
                        // The next (pipelined) request is already arriving.
                        c.head_start = Some(now);
                        c.deadline = now + srv.limits.header_timeout;
                    }
                    // Level-triggered: if more is on the socket, epoll says so.
                    readable = false;
                }
                Phase::Linger => {
                    if readable {
                        let mut tmp = [0u8; 4096];
                        loop {
                            match c.sock.read(&mut tmp) {
                                Ok(0) => return None,
                                Ok(n) => {
                                    c.lingered += n;
                                    if c.lingered > LINGER_BYTES {
                                        return None;
                                    }
                                }
                                Err(e) if would_block(&e) => break,
                                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                                Err(_) => return None,
                            }
                        }
                    }
                    self.enter_waiting(c);
                    return Some(EpollFlags::EPOLLIN);
                }
            }
        }
    }

    /// Joins the waiting set (eviction candidates) unless already in it.
    fn enter_waiting(&self, c: &mut Conn) {
        if c.waiting.is_none() && c.counted {
            c.waiting = Some(self.srv.wait_enter(c.sock.as_raw_fd(), self.now));
        }
    }
}

/// Writes the plain response. Ok(true): all written; Ok(false): the socket is full.
fn flush_plain(c: &mut Conn) -> std::io::Result<bool> {
    loop {
        let head = match &c.out_whole {
            Some(w) => &w.head,
            None => &c.out_head,
        };
        let total = head.len() + c.out_body.len();
        if c.out_pos >= total {
            return Ok(true);
        }
        let res = match (&c.out_whole, &c.out_body) {
            // From the start: through this loop's pipe copy when it keeps one (see
            // `super::pipes`); the rest of a response the socket took only part of, and
            // whatever that cannot take, from the memfd.
            (Some(w), Body::File(f)) => match (c.out_pos == 0)
                .then(|| super::pipes::send(&c.sock, w, &[&w.head, &f.bytes]))
                .flatten()
            {
                Some(r) => r.map_err(std::io::Error::from),
                None => sendfile(&c.sock, &w.fd, c.out_pos, total - c.out_pos),
            },
            (Some(w), _) => sendfile(&c.sock, &w.fd, c.out_pos, total - c.out_pos),
            // The head, held back (MSG_MORE) to leave in the same segment as the body's start.
            (None, Body::File(_)) if c.out_pos < head.len() => nix::sys::socket::send(
                c.sock.as_raw_fd(),
                &head[c.out_pos..],
                nix::sys::socket::MsgFlags::from_bits_retain(nix::libc::MSG_MORE)
                    | nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
            )
            .map_err(std::io::Error::from),
            (None, Body::File(f)) => {
                let from = c.out_pos - head.len();
                sendfile(&c.sock, &f.fd, from, f.bytes.len() - from)
            }
            // From memory: the head's rest and the body's pieces, shared, never copied.
            (None, body) => {
                let mut bufs = [IoSlice::new(&[]); 16];
                let mut n = 0;
                if c.out_pos < head.len() {
                    bufs[0] = IoSlice::new(&head[c.out_pos..]);
                    n = 1;
                }
                let from = c.out_pos.saturating_sub(head.len());
                n += body.slices_from(from, usize::MAX, &mut bufs[n..]);
                c.sock.write_vectored(&bufs[..n])
            }
        };
        match res {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => c.out_pos += n,
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Plaintext handed to rustls at a time, and only once it has sent what it held: one
/// record. A TLS connection whose client does not read holds at most this of its response,
/// encrypted (the body itself is shared and read from where it is).
const TLS_CHUNK: usize = 16 * 1024;

/// Writes the TLS response: encrypts the next [`TLS_CHUNK`] of it only once the socket has
/// taken everything before. Ok(true): all written (and the close_notify of a closing
/// response); Ok(false): the socket is full.
fn flush_tls_response(c: &mut Conn) -> std::io::Result<bool> {
    let Conn {
        tls,
        sock,
        out_head,
        out_body,
        out_pos,
        sent,
        close_after,
        notified,
        ..
    } = c;
    let Some(t) = tls.as_mut() else {
        return Ok(true);
    };
    let total = out_head.len() + out_body.len();
    loop {
        if !flush_tls_counted(t, sock, sent)? {
            return Ok(false);
        }
        if *out_pos >= total {
            if *close_after && !*notified {
                t.send_close_notify();
                *notified = true;
                continue;
            }
            return Ok(true);
        }
        let mut bufs = [IoSlice::new(&[]); 16];
        let mut n = 0;
        let mut left = TLS_CHUNK;
        if *out_pos < out_head.len() {
            let h = &out_head[*out_pos..];
            let take = h.len().min(left);
            bufs[0] = IoSlice::new(&h[..take]);
            n = 1;
            left -= take;
        }
        let from = out_pos.saturating_sub(out_head.len());
        n += out_body.slices_from(from, left, &mut bufs[n..]);
        match t.writer().write_vectored(&bufs[..n]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(w) => *out_pos += w,
            Err(e) => return Err(e),
        }
    }
}

/// Makes the close of socket `fd` a reset (SO_LINGER 0): what its send buffer still holds
/// is dropped at once, instead of the kernel going on sending it, unowned, to a client that
/// does not read (a dropped slow response).
fn abort_on_close(fd: RawFd) {
    let l = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `fd` is an open socket (its owner closes it only after leaving the sets this
    // is called under, or is the caller), and `l` is a valid linger value of the size given.
    let _ = unsafe {
        nix::libc::setsockopt(
            fd,
            nix::libc::SOL_SOCKET,
            nix::libc::SO_LINGER,
            (&raw const l).cast(),
            std::mem::size_of::<nix::libc::linger>() as nix::libc::socklen_t,
        )
    };
}

/// Bytes written to `sock` that its peer has not acknowledged yet (SIOCOUTQ); 0 when it
/// cannot be told.
fn unacked(sock: &TcpStream) -> usize {
    unacked_fd(sock.as_raw_fd())
}

/// [`unacked`] of an open socket's descriptor.
fn unacked_fd(fd: RawFd) -> usize {
    let mut n: nix::libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one c_int to the valid, exclusively borrowed `n`;
    // the caller keeps the socket open for the duration of the call.
    let r = unsafe { nix::libc::ioctl(fd, nix::libc::TIOCOUTQ, &mut n) };
    if r < 0 { 0 } else { n.max(0) as usize }
}

/// sendfile(2) of `count` bytes of `f` from `offset` into `sock`; the bytes written.
fn sendfile(
    sock: &TcpStream,
    f: &std::os::fd::OwnedFd,
    offset: usize,
    count: usize,
) -> std::io::Result<usize> {
    let mut off = offset as nix::libc::off_t;
    // SAFETY: both descriptors are open for the duration of the call (`sock` and `f` are
    // borrowed), `off` is a valid, exclusively borrowed off_t the kernel may update, and
    // sendfile touches no other memory of ours.
    let n = unsafe { nix::libc::sendfile(sock.as_raw_fd(), f.as_raw_fd(), &mut off, count) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks a complete request line (without its CRLF): `METHOD /target HTTP/1.x`.
/// Ok((method, target, is HTTP/1.0)); Err is the status to answer.
fn parse_request_line(line: &[u8]) -> Result<(&[u8], &str, bool), u16> {
    let mut parts = line.splitn(3, |&b| b == b' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(400);
    };
    if version.contains(&b' ') {
        return Err(400);
    }
    if method.is_empty()
        || method.len() > MAX_METHOD
        || !method.iter().all(|b| b.is_ascii_uppercase())
    {
        return Err(400);
    }
    let http10 = match version {
        b"HTTP/1.1" => false,
        b"HTTP/1.0" => true,
        v if v.starts_with(b"HTTP/") => return Err(505),
        _ => return Err(400),
    };
    if target.first() != Some(&b'/') || target.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(400);
    }
    let target = std::str::from_utf8(target).map_err(|_| 400u16)?;
    Ok((method, target, http10))
}

/// Checks the start of a request line that has not ended yet, so that garbage (a TLS
/// ClientHello on the plain port, binary noise) is refused at once instead of at the header
/// time-out: an upper-case method of at most 16 letters, a space, a target starting with `/`.
fn check_line_prefix(l: &[u8]) -> Result<(), u16> {
    let m_end = l.iter().position(|&b| b == b' ').unwrap_or(l.len());
    let method = &l[..m_end];
    let pending_cr = m_end == l.len() && method.last() == Some(&b'\r');
    let method = if pending_cr {
        &method[..m_end - 1]
    } else {
        method
    };
    if method.len() > MAX_METHOD || !method.iter().all(|b| b.is_ascii_uppercase()) {
        return Err(400);
    }
    if m_end < l.len() && (m_end == 0 || l.get(m_end + 1).is_some_and(|&b| b != b'/')) {
        return Err(400);
    }
    Ok(())
}

/// RFC 9110 IMF-fixdate of `secs` since the epoch.
pub fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let t = runtime::util::utc(secs);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[t.weekday as usize],
        t.day,
        MONTHS[t.month as usize - 1],
        t.year,
        t.hour,
        t.minute,
        t.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        for n in [0, 7, 10, 200, 54_609, usize::MAX] {
            let mut s = b"x".to_vec();
            push_number(&mut s, n);
            assert_eq!(s, format!("x{n}").as_bytes());
        }
    }

    #[test]
    fn dates() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(1709251200), "Fri, 01 Mar 2024 00:00:00 GMT");
    }

    #[test]
    fn heads() {
        let r = parse_head(
            b"GET /config/worker?etcd_index=2 HTTP/1.1\r\nHost: x\r\nAccept: a\r\nAccept: b",
            64,
        )
        .unwrap();
        assert_eq!(r.path(), "/config/worker");
        assert_eq!(r.query_param("etcd_index"), Some("2"));
        assert_eq!(r.header("accept").as_deref(), Some("a, b"));
        assert!(!r.close);
        let r = parse_head(b"GET / HTTP/1.0", 64).unwrap();
        assert!(r.close);
        let r = parse_head(b"GET / HTTP/1.0\r\nConnection: keep-alive", 64).unwrap();
        assert!(!r.close);
        let r = parse_head(b"POST / HTTP/1.1\r\nContent-Length: 5", 64).unwrap();
        assert!(r.has_body);
        for (bad, want) in [
            (&b"GET /"[..], 400),
            (b"GET  / HTTP/1.1", 400),
            (b"get / HTTP/1.1", 400),
            (b"GET x HTTP/1.1", 400),
            (b"GET / HTTP/2.0", 505),
            (b"GET / FOO/1.1", 400),
            (b"GET / HTTP/1.1\r\n folded: x", 400),
            (b"GET / HTTP/1.1\r\nNoColon", 400),
            (b"GET / HTTP/1.1\r\nBad Name: x", 400),
            (b"GET / HTTP/1.1\r\nX: a\x01b", 400),
            (b"GET / HTTP/1.1\r\nContent-Length: x", 400),
            (
                b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2",
                400,
            ),
            (b"GET / HTTP/1.1\r\nContent-Length: +0", 400),
            (b"GET / HTTP/1.1\r\nContent-Length: -0", 400),
            (b"GET / HTTP/1.1\r\nContent-Length: 0x1", 400),
            (b"GET / HTTP/1.1\r\nContent-Length:", 400),
            (
                b"GET / HTTP/1.1\r\nAuthorization: Bearer a\r\nauthorization: Bearer b",
                400,
            ),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHOST: a", 400),
            (b"GET /\x7f HTTP/1.1", 400),
        ] {
            assert_eq!(
                parse_head(bad, 64).unwrap_err(),
                want,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // Bare LF or CR line endings are malformed.
        assert_eq!(parse_head(b"GET / HTTP/1.1\nHost: x", 64).unwrap_err(), 400);
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nHost: x\ry", 64).unwrap_err(),
            400
        );
        let many: String = (0..10).map(|i| format!("\r\nH{i}: v")).collect();
        assert_eq!(
            parse_head(format!("GET / HTTP/1.1{many}").as_bytes(), 5).unwrap_err(),
            431
        );
    }

    /// A request parsed into one that answered another keeps nothing of it: not its query,
    /// headers, `close` or body flag, and a large head's buffers are dropped at the next
    /// small one.
    #[test]
    fn reused_request() {
        let mut r = Request::default();
        let big = format!("X: {}", "a".repeat(2 * REQUEST_KEPT));
        let first = format!("POST /a?x=1 HTTP/1.0\r\nAccept: a\r\nContent-Length: 3\r\n{big}");
        r.parse(first.as_bytes(), 64).unwrap();
        assert_eq!(
            (r.method(), r.path(), r.query()),
            ("POST", "/a", Some("x=1"))
        );
        assert!(r.close && r.has_body);
        assert!(r.text.capacity() > REQUEST_KEPT);
        r.parse(b"GET /config/w HTTP/1.1\r\nHost:  h \t", 64)
            .unwrap();
        assert_eq!(
            (r.method(), r.path(), r.query()),
            ("GET", "/config/w", None)
        );
        assert!(!r.close && !r.has_body);
        assert_eq!(r.headers().collect::<Vec<_>>(), [("Host", "h")]);
        assert_eq!(r.header("accept"), None);
        assert!(r.text.capacity() <= REQUEST_KEPT);
        // A failed parse leaves no header of the last one behind either.
        assert_eq!(r.parse(b"GET / HTTP/1.1\r\nBad Name: x", 64), Err(400));
        r.parse(b"GET / HTTP/1.1", 64).unwrap();
        assert_eq!(r.headers().count(), 0);
        // Invalid UTF-8 in a header value is replaced; the parts after it are still found.
        r.parse(b"GET /a?q=1 HTTP/1.1\r\nX-A: \xfdv\r\nX-B: w", 64)
            .unwrap();
        assert_eq!((r.path(), r.query()), ("/a", Some("q=1")));
        assert_eq!(r.header_one("x-a"), Some("\u{fffd}v"));
        assert_eq!(r.header_one("x-b"), Some("w"));
        // In the request target it is refused, as the server's scan of the raw bytes does.
        for bad in [
            &b"GET /\xff HTTP/1.1"[..],
            b"GET /a?q=\xfe HTTP/1.1\r\nX: y",
        ] {
            assert_eq!(
                r.parse(bad, 64),
                Err(400),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn response_reset_and_headers() {
        let mut r = Response::text(503, "busy").header("Retry-After", "1");
        r.set_pool("worker");
        assert_eq!(r.header_value("retry-after"), Some("1"));
        assert_eq!(r.pool(), "worker");
        r.reset(404);
        assert_eq!(
            (r.status, r.pool(), r.header_value("retry-after")),
            (404, "-", None)
        );
        assert!(r.body.is_empty());
        let mut h = Vec::new();
        response_head(&r.header("ETag", "\"e\""), false, 7, "D", &mut h);
        assert_eq!(
            String::from_utf8(h).unwrap(),
            "HTTP/1.1 404 Not Found\r\nDate: D\r\nContent-Length: 7\r\nETag: \"e\"\r\n\
             Connection: close\r\n\r\n"
        );
    }

    /// A whole response is found again for the same status, header lines and second, and
    /// made anew (at most twice a second) when one of them changes; its memfd holds exactly
    /// the head `response_head` makes and the body.
    #[test]
    fn whole_responses_follow_their_head() {
        let f = FileBody::new(Arc::from(&b"the body"[..])).unwrap();
        let mut r = Response::new(200);
        r.add_header("ETag", "\"a\"");
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let w1 = f.whole(&r, true, (100, "D100"), t0).unwrap();
        let mut head = Vec::new();
        response_head(&r, true, 8, "D100", &mut head);
        assert_eq!(w1.head, head);
        let stored = std::fs::read(format!("/proc/self/fd/{}", w1.fd.as_raw_fd())).unwrap();
        assert_eq!(stored, [&head[..], b"the body"].concat());
        let again = f.whole(&r, true, (100, "D100"), t0 + ms(10)).unwrap();
        assert!(Arc::ptr_eq(&w1, &again));
        // The next second: sent apart until the last one is half a second old.
        assert!(f.whole(&r, true, (101, "D101"), t0 + ms(100)).is_none());
        let w2 = f.whole(&r, true, (101, "D101"), t0 + ms(600)).unwrap();
        assert!(String::from_utf8_lossy(&w2.head).contains("\r\nDate: D101\r\n"));
        // Other header lines or status are another head too.
        r.add_header("X-Other", "1");
        assert!(f.whole(&r, true, (101, "D101"), t0 + ms(700)).is_none());
        r.reset(200);
        assert!(f.whole(&r, true, (101, "D101"), t0 + ms(700)).is_none());
        // Closing responses are kept apart from keep-alive ones.
        let c = f.whole(&r, false, (101, "D101"), t0 + ms(700)).unwrap();
        assert!(String::from_utf8_lossy(&c.head).ends_with("Connection: close\r\n\r\n"));
    }

    fn scan_all(input: &[u8], max: usize) -> Scan {
        scan_head(input, &mut ScanState::default(), max)
    }

    /// The scan fed one byte at a time (resuming) decides exactly as on the whole input,
    /// and at the same byte.
    fn scan_bytewise(input: &[u8], max: usize) -> (Scan, usize) {
        let mut st = ScanState::default();
        for n in 1..=input.len() {
            let r = scan_head(&input[..n], &mut st, max);
            if r != Scan::More {
                return (r, n);
            }
        }
        (Scan::More, input.len())
    }

    #[test]
    fn head_scan() {
        let ok = b"GET /x HTTP/1.1\r\nHost: y\r\n\r\nGET /z";
        let want = Scan::Head {
            start: 0,
            end: 24,
            next: 28,
        };
        assert_eq!(scan_all(ok, 1024), want);
        assert_eq!(scan_bytewise(ok, 1024), (want, 28));
        // Empty lines before the request line are skipped.
        let r = scan_all(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n", 1024);
        assert_eq!(
            r,
            Scan::Head {
                start: 4,
                end: 18,
                next: 22
            }
        );
        assert_eq!(scan_all(b"GET / HTTP/1.1\r\n", 1024), Scan::More);
        assert_eq!(scan_all(b"GET / HTTP/1.1\r", 1024), Scan::More);
        assert_eq!(scan_all(b"GE", 1024), Scan::More);
        assert_eq!(scan_all(b"\r", 1024), Scan::More);
        // Refused at the first byte that cannot start a request: (input, status, bytes needed).
        for (bad, status, at) in [
            (&b"GET / HTTP/1.1\n\n"[..], 400, 15),
            (b"GET / HTTP/1.1\r\nHost: x\n\n", 400, 24),
            (b"GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n", 400, 25),
            (b"\x16\x03\x01\x02\x00", 400, 1),
            (b"get / HTTP/1.1\r\n\r\n", 400, 1),
            (b"GET x HTTP/1.1\r\n\r\n", 400, 5),
            (b" GET / HTTP/1.1\r\n\r\n", 400, 1),
            (b"GET  / HTTP/1.1\r\n\r\n", 400, 5),
            (b"GET / HTTP/2.0\r\n\r\n", 505, 16),
            (b"GET / FOO\r\n\r\n", 400, 11),
            (b"ABCDEFGHIJKLMNOPQ / HTTP/1.1\r\n", 400, 17),
            (b"\n", 400, 1),
        ] {
            assert_eq!(
                scan_bytewise(bad, 1024),
                (Scan::Bad(status), at),
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert_eq!(scan_all(bad, 1024), Scan::Bad(status));
        }
        // Too long: 414 while still in the request line, 431 in the headers.
        let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100));
        assert_eq!(scan_all(long_line.as_bytes(), 50), Scan::Bad(414));
        let long_head = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(100));
        assert_eq!(scan_all(long_head.as_bytes(), 50), Scan::Bad(431));
        assert_eq!(scan_bytewise(long_head.as_bytes(), 50).0, Scan::Bad(431));
    }
}
