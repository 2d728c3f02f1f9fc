//! Responses: [`Response`] and its [`Body`], the response head, shared bodies in sealed
//! memfds ([`FileBody`]) and each event loop's cache of whole responses ([`Wholes`]), sent
//! with sendfile(2).

use std::any::Any;
use std::io::{IoSlice, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

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
    /// A range of a shared body (a `Range` request for a boot asset): no copy.
    Slice {
        bytes: Arc<[u8]>,
        start: usize,
        end: usize,
    },
    /// No answer yet: it comes later, from another thread ([`Response::later`]). Never
    /// written: the event loop takes it out of the response the handler gave.
    Later(Later),
}

impl Body {
    /// The body's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Body::Empty | Body::Later(_) => 0,
            Body::Shared(b) => b.len(),
            Body::File(f) => f.bytes.len(),
            Body::Owned(b) => b.len(),
            Body::Slice { start, end, .. } => end - start,
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
            Body::Empty | Body::Spliced { .. } | Body::Later(_) => &[],
            Body::Shared(b) => b,
            Body::File(f) => &f.bytes,
            Body::Owned(b) => b,
            Body::Slice { bytes, start, end } => &bytes[*start..*end],
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
    pub(super) fn slices_from<'a>(
        &'a self,
        mut pos: usize,
        max: usize,
        out: &mut [IoSlice<'a>],
    ) -> usize {
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
/// keep-alive and for closing answers each (see [`Wholes`]): responses with the same head (the
/// same second of `Date`) go out in one call instead of a send for the head and a sendfile
/// for the body (measured: that send was 8% of the server's CPU time).
#[derive(Debug)]
pub struct FileBody {
    pub bytes: Arc<[u8]>,
    pub(super) fd: std::os::fd::OwnedFd,
}

/// A whole response: its head and a sealed memfd holding head and body. The head is that of
/// a response of `status` and header `lines` at second `date_secs` (see [`response_head`]),
/// which is how the next response finds it without making its own head.
#[derive(Debug)]
pub(super) struct Whole {
    status: u16,
    date_secs: u64,
    lines: String,
    pub(super) head: Vec<u8>,
    pub(super) fd: std::os::fd::OwnedFd,
    made: Instant,
    /// Head and body.
    len: usize,
}

/// Whole responses each event loop keeps, and their bytes at most.
pub(super) const WHOLES_KEPT: usize = 16;
const WHOLES_BUDGET: usize = 16 * 1024 * 1024;

/// A cached whole response: its body (which the entry does not keep alive, only its
/// address: a `Weak` keeps the address from being reused by another body while the entry
/// lives) and `keep`, and the response.
type WholeEntry = ((Weak<FileBody>, bool), Arc<Whole>);

/// One event loop's whole responses by (body, keep), least recently used first. Per loop:
/// sending one takes no lock and touches no reference count that another event loop
/// touches on every request.
#[derive(Debug, Default)]
pub(super) struct Wholes(Vec<WholeEntry>);

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
        Some(FileBody { bytes, fd })
    }
}

impl Wholes {
    /// The whole response of `r` with body `body` at second `date_secs` (whose `Date` is
    /// `date`): this loop's cached one when its head is the same, else a new one, made at
    /// most twice a second per body and `keep` (a head that changes more often, which the
    /// server's own responses never do, is sent apart). None also for a body over the
    /// cache's budget.
    pub(super) fn get<L>(
        &mut self,
        body: &Arc<FileBody>,
        r: &Response<L>,
        keep: bool,
        (date_secs, date): (u64, &str),
        now: Instant,
    ) -> Option<Arc<Whole>> {
        if body.bytes.len() + r.lines.len() + 256 > WHOLES_BUDGET {
            return None;
        }
        let ws = &mut self.0;
        let is = |k: &(Weak<FileBody>, bool)| {
            k.1 == keep && std::ptr::eq(k.0.as_ptr(), Arc::as_ptr(body))
        };
        let last = ws.len().checked_sub(1);
        let at = match last {
            // The one used last: most often the one wanted.
            Some(l) if is(&ws[l].0) => Some(l),
            _ => ws.iter().position(|(k, _)| is(k)),
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
        response_head(r, keep, body.bytes.len(), date, &mut head);
        let len = head.len() + body.bytes.len();
        let w = Arc::new(Whole {
            status: r.status,
            date_secs,
            lines: r.lines.clone(),
            fd: sealed_memfd(&[&head, &body.bytes])?,
            head,
            made: now,
            len,
        });
        let mut held: usize = ws.iter().map(|(_, w)| w.len).sum();
        while !ws.is_empty() && (ws.len() >= WHOLES_KEPT || held + len > WHOLES_BUDGET) {
            held -= ws.remove(0).1.len;
        }
        ws.push(((Arc::downgrade(body), keep), w.clone()));
        Some(w)
    }
}

/// What the application labels its responses with (for its metrics and access log, say):
/// its own type, which the server only keeps with the response and hands back to
/// [`Handler::done`](crate::Handler::done). `()` for none.
pub trait Labels: Default + Clone + std::fmt::Debug + Send + 'static {
    /// Back to the default, keeping what buffers it has (a response's labels are cleared
    /// for each request of a connection).
    fn clear(&mut self) {
        *self = Self::default();
    }
}

impl Labels for () {}

/// A response, labelled by the application with an `L` ([`Labels`]). An event loop answers
/// each of a connection's requests into the same `Response`, which keeps its buffers (see
/// [`Request`]).
#[derive(Debug, Clone)]
pub struct Response<L = ()> {
    pub status: u16,
    /// The header lines, each `Name: value` and CRLF.
    pub(super) lines: String,
    pub body: Body,
    /// The application's labels.
    pub labels: L,
}

/// Where the answer to a deferred request goes: the event loop that owns the connection
/// (its reply, made by the loop). Sent once, from any thread.
pub trait Answer<L>: Send {
    fn send_boxed(self: Box<Self>, resp: Response<L>);
}

/// The answer to a request its handler deferred ([`Response::later`]), which any thread
/// may send: it goes to the event loop that owns the connection (through that loop's inbox
/// and event fd) and is written from there. Dropped unsent, it answers 500. A reply whose
/// connection is gone (closed, or answered 503 at the answer time-out) is dropped.
pub struct Reply<L = ()>(Box<dyn Answer<L>>);

impl<L> Reply<L> {
    pub fn new(a: impl Answer<L> + 'static) -> Reply<L> {
        Reply(Box::new(a))
    }

    pub fn send(self, resp: Response<L>) {
        self.0.send_boxed(resp)
    }
}

/// What a handler that answers later gives the event loop: called once, on the loop, with
/// the [`Reply`] that answers the request from any thread.
pub type Deferred<L = ()> = Box<dyn FnOnce(Reply<L>) + Send>;

/// A [`Deferred`] held by a response's body ([`Body::Later`]): taken once; a clone holds
/// none. A `Deferred<L>` of the response's labels, boxed as `Any` so that a body does not
/// name the labels (nor grow: one pointer).
#[derive(Default)]
pub struct Later(Option<Box<dyn Any + Send>>);

impl Clone for Later {
    fn clone(&self) -> Self {
        Later(None)
    }
}

impl std::fmt::Debug for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Later(..)" } else { "Now" })
    }
}

impl<L: Labels> Response<L> {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            lines: String::new(),
            body: Body::Empty,
            labels: L::default(),
        }
    }

    /// Answers later, from another thread: the event loop calls `f` with a
    /// [`Reply`] once the handler returns, parks the connection (it reads
    /// nothing more from it, and it keeps its connection slot), and writes whatever
    /// `Reply::send` gives it. The connection's deadline meanwhile is the answer time-out
    /// ([`Limits::answer_timeout`](super::Limits::answer_timeout)), after which it is
    /// answered 503 and a late reply is dropped. The rest of this response is ignored; its
    /// body is [`Body::Later`] until then.
    pub fn later(&mut self, f: impl FnOnce(Reply<L>) + Send + 'static) {
        let f: Deferred<L> = Box::new(f);
        self.body = Body::Later(Later(Some(Box::new(f))));
    }

    /// Takes what [`Response::later`] was given, if this response has it.
    pub(super) fn take_later(&mut self) -> Option<Deferred<L>> {
        let Body::Later(Later(f)) = &mut self.body else {
            return None;
        };
        f.take()?.downcast::<Deferred<L>>().ok().map(|f| *f)
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
        self.labels.clear();
    }

    /// Replaces the header line `from` (with its CRLF) by `to` (with its CRLF), if there is one.
    pub fn replace_line(&mut self, from: &str, to: &str) {
        if let Some(at) = self.lines.find(from) {
            self.lines.replace_range(at..at + from.len(), to);
        }
    }

    /// The value of header `k` (the first one).
    pub fn header_value(&self, k: &str) -> Option<&str> {
        self.lines.split("\r\n").find_map(|l| {
            let (n, v) = l.split_once(": ")?;
            n.eq_ignore_ascii_case(k).then_some(v)
        })
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        413 => "Content Too Large",
        416 => "Range Not Satisfiable",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// Writes the response head for `r` into `h`; `content_length` is the body's whole length
/// (sent for HEAD too; none for 304).
pub(super) fn response_head<L>(
    r: &Response<L>,
    keep: bool,
    content_length: usize,
    date: &str,
    h: &mut Vec<u8>,
) {
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

/// sendfile(2) of `count` bytes of `f` from `offset` into `sock`; the bytes written.
pub(super) fn sendfile(
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

/// RFC 9110 IMF-fixdate of `secs` since the epoch.
pub fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // The civil date of a day count (Howard Hinnant's `civil_from_days`).
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        // 1970-01-01 was a Thursday.
        DAYS[((days + 4) % 7) as usize],
        day,
        MONTHS[month as usize - 1],
        year,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
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

    /// An application's labels: cleared by `reset` with what they hold.
    #[derive(Debug, Clone, Default)]
    struct Pool(String);

    impl Labels for Pool {
        fn clear(&mut self) {
            self.0.clear();
        }
    }

    #[test]
    fn response_reset_and_headers() {
        let mut r = Response::<Pool>::text(503, "busy").header("Retry-After", "1");
        r.labels.0.push_str("worker");
        r.later(|_| {});
        assert_eq!(r.header_value("retry-after"), Some("1"));
        assert_eq!(r.labels.0, "worker");
        assert!(r.clone().take_later().is_none());
        assert!(r.take_later().is_some() && r.take_later().is_none());
        r.later(|_| {});
        r.reset(404);
        assert_eq!(
            (r.status, &r.labels.0[..], r.header_value("retry-after")),
            (404, "", None)
        );
        assert!(r.take_later().is_none());
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
        let f = Arc::new(FileBody::new(Arc::from(&b"the body"[..])).unwrap());
        let mut ws = Wholes::default();
        let mut r = Response::<()>::new(200);
        r.add_header("ETag", "\"a\"");
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let w1 = ws.get(&f, &r, true, (100, "D100"), t0).unwrap();
        let mut head = Vec::new();
        response_head(&r, true, 8, "D100", &mut head);
        assert_eq!(w1.head, head);
        let stored = std::fs::read(format!("/proc/self/fd/{}", w1.fd.as_raw_fd())).unwrap();
        assert_eq!(stored, [&head[..], b"the body"].concat());
        let again = ws.get(&f, &r, true, (100, "D100"), t0 + ms(10)).unwrap();
        assert!(Arc::ptr_eq(&w1, &again));
        // The next second: sent apart until the last one is half a second old.
        assert!(ws.get(&f, &r, true, (101, "D101"), t0 + ms(100)).is_none());
        let w2 = ws.get(&f, &r, true, (101, "D101"), t0 + ms(600)).unwrap();
        assert!(String::from_utf8_lossy(&w2.head).contains("\r\nDate: D101\r\n"));
        // Other header lines or status are another head too.
        r.add_header("X-Other", "1");
        assert!(ws.get(&f, &r, true, (101, "D101"), t0 + ms(700)).is_none());
        r.reset(200);
        assert!(ws.get(&f, &r, true, (101, "D101"), t0 + ms(700)).is_none());
        // Closing responses are kept apart from keep-alive ones.
        let c = ws.get(&f, &r, false, (101, "D101"), t0 + ms(700)).unwrap();
        assert!(String::from_utf8_lossy(&c.head).ends_with("Connection: close\r\n\r\n"));
    }
}
