//! A small, strict HTTP/1.1 server over std::net, with rustls for TLS.
//!
//! Thread per connection (small stacks; threads are cheap next to the 5,000 connections we
//! must hold), keep-alive and pipelining, and hard limits: header bytes and count, a deadline
//! for a whole request head once its first byte arrived (slow headers), an idle time-out
//! between requests, a write time-out, and a connection cap. Only GET and HEAD carry meaning
//! here: a request with a body is answered and the connection closed.

use std::io::{IoSlice, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub thread_stack: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            thread_stack: 256 * 1024,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub close: bool,
    pub has_body: bool,
}

impl Request {
    /// All values of a header joined with ", " (None when absent).
    pub fn header(&self, name: &str) -> Option<String> {
        let mut it = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str());
        let first = it.next()?;
        let mut s = first.to_string();
        for v in it {
            s.push_str(", ");
            s.push_str(v);
        }
        Some(s)
    }

    /// The single value of a header that must not repeat.
    pub fn header_one(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A query parameter (no percent-decoding: our parameters are plain numbers).
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == name).then_some(v)
        })
    }
}

#[derive(Debug, Clone)]
pub enum Body {
    Empty,
    Shared(Arc<[u8]>),
    Owned(Vec<u8>),
}

impl Body {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Body::Empty => &[],
            Body::Shared(b) => b,
            Body::Owned(b) => b,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Body,
    /// Labels for metrics and the access log.
    pub pool: String,
    pub version: String,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Body::Empty,
            pool: "-".into(),
            version: "-".into(),
        }
    }
    pub fn text(status: u16, msg: impl Into<String>) -> Self {
        let mut r = Response::new(status);
        let mut m = msg.into();
        m.push('\n');
        r.body = Body::Owned(m.into_bytes());
        r.headers
            .push(("Content-Type", "text/plain; charset=utf-8".into()));
        r
    }
    pub fn header(mut self, k: &'static str, v: impl Into<String>) -> Self {
        self.headers.push((k, v.into()));
        self
    }
}

pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: &Request) -> Response;
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

/// An HTTP connection's byte stream: plain TCP or TLS over TCP.
pub trait Stream: Read + Write {
    fn tcp(&self) -> &TcpStream;
}

impl Stream for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Stream for rustls::StreamOwned<rustls::ServerConnection, TcpStream> {
    fn tcp(&self) -> &TcpStream {
        &self.sock
    }
}

/// The server shared by every listener.
pub struct Server {
    pub limits: Limits,
    pub handler: Arc<dyn Handler>,
    pub open: Arc<AtomicUsize>,
    pub shutdown: Arc<AtomicBool>,
    pub rejected: Arc<std::sync::atomic::AtomicU64>,
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

/// Wakes a thread blocked in accept() on `l` (used at shutdown).
pub fn stop_listener(l: &TcpListener) {
    let _ = nix::sys::socket::shutdown(l.as_raw_fd(), nix::sys::socket::Shutdown::Both);
}

struct Guard(Arc<AtomicUsize>);
impl Drop for Guard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Server {
    /// Accepts connections until shutdown.
    pub fn run(self: &Arc<Self>, listener: TcpListener, tls: Option<Arc<rustls::ServerConfig>>) {
        loop {
            let (sock, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) => {
                    if self.shutdown.load(Ordering::SeqCst) {
                        return;
                    }
                    // EMFILE and friends: back off briefly instead of spinning.
                    log::warn!("accepting a connection: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if self.shutdown.load(Ordering::SeqCst) {
                return;
            }
            if self.open.fetch_add(1, Ordering::SeqCst) >= self.limits.max_connections {
                self.open.fetch_sub(1, Ordering::SeqCst);
                self.rejected.fetch_add(1, Ordering::Relaxed);
                let _ = sock.set_nonblocking(true);
                let _ = (&sock).write(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
                );
                continue;
            }
            let guard = Guard(self.open.clone());
            let me = self.clone();
            let tls = tls.clone();
            let spawned = std::thread::Builder::new()
                .name("conn".into())
                .stack_size(self.limits.thread_stack)
                .spawn(move || {
                    let _guard = guard;
                    me.connection(sock, peer, tls);
                });
            if let Err(e) = spawned {
                log::warn!("starting a connection thread: {e}");
            }
        }
    }

    fn connection(
        &self,
        sock: TcpStream,
        peer: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) {
        let _ = sock.set_nodelay(true);
        // Room for a whole ~50 KiB config in one write (fewer wake-ups than autotuning's
        // 16 KiB start).
        let _ =
            nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::SndBuf, &(256 * 1024));
        let _ = sock.set_write_timeout(Some(self.limits.idle_timeout));
        match tls {
            None => self.serve(sock, peer),
            Some(cfg) => {
                let Ok(conn) = rustls::ServerConnection::new(cfg) else {
                    return;
                };
                let mut s = rustls::StreamOwned::new(conn, sock);
                // The handshake must finish within the header time-out.
                let deadline = Instant::now() + self.limits.header_timeout;
                while s.conn.is_handshaking() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || s.sock.set_read_timeout(Some(left)).is_err() {
                        return;
                    }
                    if s.conn.complete_io(&mut s.sock).is_err() {
                        return;
                    }
                }
                self.serve(s, peer);
            }
        }
    }

    fn serve<S: Stream>(&self, mut s: S, peer: SocketAddr) {
        let mut buf: Vec<u8> = Vec::with_capacity(1024);
        loop {
            let started;
            let req = match self.read_request(&mut s, &mut buf) {
                Ok(Some((r, t))) => {
                    started = t;
                    r
                }
                Ok(None) => return,
                Err(Some(status)) => {
                    let resp = Response::new(status);
                    let n = write_response(&mut s, &resp, false, false).unwrap_or(0);
                    self.handler.done(None, &resp, n, Duration::ZERO, peer);
                    return;
                }
                Err(None) => return,
            };
            let resp = self.handler.handle(&req);
            let keep = !req.close && !req.has_body && !self.shutdown.load(Ordering::SeqCst);
            let head = req.method == "HEAD";
            let res = write_response(&mut s, &resp, keep, head);
            let took = started.elapsed();
            match res {
                Ok(n) => self.handler.done(Some(&req), &resp, n, took, peer),
                Err(_) => {
                    self.handler.done(Some(&req), &resp, 0, took, peer);
                    return;
                }
            }
            if !keep {
                let _ = s.flush();
                return;
            }
        }
    }

    /// Reads one request head. Ok(None): the peer went away or stayed idle (close quietly);
    /// Err(Some(status)): answer with that status and close; Err(None): close quietly.
    fn read_request<S: Stream>(
        &self,
        s: &mut S,
        buf: &mut Vec<u8>,
    ) -> Result<Option<(Request, Instant)>, Option<u16>> {
        let lim = &self.limits;
        let idle_deadline = Instant::now() + lim.idle_timeout;
        let mut head_deadline: Option<Instant> = None;
        let mut started = Instant::now();
        if !buf.is_empty() {
            head_deadline = Some(Instant::now() + lim.header_timeout);
        }
        let mut tmp = [0u8; 4096];
        loop {
            if let Some(end) = find_head_end(buf, lim.max_header_bytes) {
                let head = buf[..end].to_vec();
                buf.drain(..end + 4);
                return parse_head(&head, lim.max_headers)
                    .map(|r| Some((r, started)))
                    .map_err(Some);
            }
            if buf.len() >= lim.max_header_bytes {
                return Err(Some(431));
            }
            let now = Instant::now();
            let timeout = match head_deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(now);
                    if left.is_zero() {
                        return Err(Some(408));
                    }
                    left
                }
                None => {
                    if self.shutdown.load(Ordering::SeqCst) {
                        return Ok(None);
                    }
                    let left = idle_deadline.saturating_duration_since(now);
                    if left.is_zero() {
                        return Ok(None);
                    }
                    // Wake up every second to notice a shutdown.
                    left.min(Duration::from_secs(1))
                }
            };
            if s.tcp().set_read_timeout(Some(timeout)).is_err() {
                return Err(None);
            }
            let want = (lim.max_header_bytes + 4 - buf.len()).min(tmp.len());
            match s.read(&mut tmp[..want]) {
                Ok(0) => return if buf.is_empty() { Ok(None) } else { Err(None) },
                Ok(n) => {
                    if head_deadline.is_none() {
                        head_deadline = Some(Instant::now() + lim.header_timeout);
                        started = Instant::now();
                    }
                    buf.extend_from_slice(&tmp[..n]);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return Err(None),
            }
        }
    }
}

fn find_head_end(buf: &[u8], max: usize) -> Option<usize> {
    let n = buf.len().min(max + 4);
    buf[..n].windows(4).position(|w| w == b"\r\n\r\n")
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parses a request head (without the final blank line); Err is the status to answer.
pub fn parse_head(head: &[u8], max_headers: usize) -> Result<Request, u16> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let line = lines.next().ok_or(400u16)?;
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    if parts.len() != 3 {
        return Err(400);
    }
    let (method, target, version) = (parts[0], parts[1], parts[2]);
    if method.is_empty() || method.len() > 16 || !method.iter().all(|b| b.is_ascii_uppercase()) {
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
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), Some(q.to_string())),
        None => (target.to_string(), None),
    };
    let mut headers = Vec::new();
    let mut close = http10;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    for l in lines {
        if headers.len() >= max_headers {
            return Err(431);
        }
        let colon = l.iter().position(|&b| b == b':').ok_or(400u16)?;
        let (name, value) = (&l[..colon], &l[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            // Also rejects obsolete line folding (a line starting with white space).
            return Err(400);
        }
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(400);
        }
        let name = String::from_utf8_lossy(name).into_owned();
        let value = String::from_utf8_lossy(value)
            .trim_matches([' ', '\t'])
            .to_string();
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
            let n: u64 = value.parse().map_err(|_| 400u16)?;
            if content_length.is_some_and(|c| c != n) {
                return Err(400);
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        }
        headers.push((name, value));
    }
    Ok(Request {
        method: String::from_utf8_lossy(method).into_owned(),
        path,
        query,
        headers,
        close,
        has_body: chunked || content_length.unwrap_or(0) > 0,
    })
}

/// Writes a response; returns the bytes written. HEAD gets GET's headers without the body.
pub fn write_response<W: Write>(
    w: &mut W,
    r: &Response,
    keep: bool,
    head: bool,
) -> std::io::Result<usize> {
    let body = r.body.bytes();
    let mut h = String::with_capacity(256);
    h.push_str("HTTP/1.1 ");
    h.push_str(&r.status.to_string());
    h.push(' ');
    h.push_str(reason(r.status));
    h.push_str("\r\nDate: ");
    h.push_str(&http_date_now());
    if r.status != 304 {
        h.push_str("\r\nContent-Length: ");
        h.push_str(&body.len().to_string());
    }
    for (k, v) in &r.headers {
        h.push_str("\r\n");
        h.push_str(k);
        h.push_str(": ");
        h.push_str(v);
    }
    if !keep {
        h.push_str("\r\nConnection: close");
    }
    h.push_str("\r\n\r\n");
    let body: &[u8] = if head || r.status == 304 { &[] } else { body };
    write_all_vectored(w, h.as_bytes(), body)?;
    w.flush()?;
    Ok(h.len() + body.len())
}

fn write_all_vectored<W: Write>(w: &mut W, a: &[u8], b: &[u8]) -> std::io::Result<()> {
    let mut bufs = [IoSlice::new(a), IoSlice::new(b)];
    let mut slices: &mut [IoSlice] = &mut bufs;
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match w.write_vectored(slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// RFC 9110 IMF-fixdate of `secs` since the epoch.
pub fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let t = crate::util::utc(secs);
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

fn http_date_now() -> String {
    use std::cell::RefCell;
    thread_local! {
        static CACHE: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != now || c.1.is_empty() {
            *c = (now, http_date(now));
        }
        c.1.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(r.path, "/config/worker");
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
            (b"GET /\x7f HTTP/1.1", 400),
        ] {
            assert_eq!(
                parse_head(bad, 64).unwrap_err(),
                want,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let many: String = (0..10).map(|i| format!("\r\nH{i}: v")).collect();
        assert_eq!(
            parse_head(format!("GET / HTTP/1.1{many}").as_bytes(), 5).unwrap_err(),
            431
        );
    }
}
