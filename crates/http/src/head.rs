//! Request heads: finding the end of one as its bytes arrive (`scan_head`, which refuses
//! malformed input at once) and parsing it into a reusable [`Request`].
//!
//! Not the `httparse` crate: `scan_head` must still read every byte as it arrives (a bare LF
//! or CR refused at once, 414 against 431, the size limit) and httparse accepts what is
//! refused here (bare LF line ends, non-ASCII bytes in the target, any method token, a second
//! Host or Authorization, any Content-Length), so every check below would stay and only the
//! line and header splitting would go, for 3.4 KB more binary (release build 4,205,864 →
//! 4,209,256 bytes) and at most 0.03–0.27 µs less per head (measured: this parser 99 ns for
//! wrk's head and 448 ns for Ignition's, httparse alone, checks not counted, 71 and 177 ns)
//! against ~10 µs of server CPU per request on the serve benchmark.

/// Longest method name accepted.
const MAX_METHOD: usize = 16;

/// A byte range of a request's text.
type Span = (usize, usize);

/// A parsed request head: its text, kept once, and where each part of it is. An event loop
/// parses each of a connection's heads into the same `Request`, which keeps its buffers, so a
/// keep-alive request allocates nothing (measured: the method, path and every header name
/// and value in strings of their own were a tenth of the loop's own CPU time per request).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The head, invalid UTF-8 replaced.
    pub(super) text: String,
    method: Span,
    path: Span,
    query: Option<Span>,
    /// Each header's name and value (trimmed).
    headers: Vec<(Span, Span)>,
    pub close: bool,
    pub has_body: bool,
    /// `Content-Length`, when given; `Transfer-Encoding` (any: only chunked exists).
    content_length: Option<u64>,
    chunked: bool,
    /// The body, once read whole (see [`Request::body_len`]); kept between requests.
    pub(super) body: Vec<u8>,
    /// The client's address (set by the event loop before the handler sees the request).
    pub peer: Option<std::net::IpAddr>,
}

/// Headers a request may carry once only: a second one is answered 400.
const SINGLE: [&str; 2] = ["authorization", "host"];

/// Above this, a connection's request drops its buffers once a smaller head comes, so one
/// large head does not hold memory for the rest of the connection.
pub(super) const REQUEST_KEPT: usize = 4096;

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

    /// The request's body (empty when it has none): read whole before the handler is called.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// How many body bytes to read before the request is answered, at most `max`: Err with
    /// the status and the reason when the body is refused (chunked: 411, too large: 413).
    pub fn body_len(&self, max: usize) -> Result<usize, (u16, String)> {
        if self.chunked {
            return Err((
                411,
                "a request body must be sent with Content-Length (chunked bodies are not accepted)"
                    .into(),
            ));
        }
        let n = self.content_length.unwrap_or(0);
        if n > max as u64 {
            return Err((
                413,
                format!(
                    "request body of {n} bytes is larger than the --max-body-bytes limit ({max} bytes)"
                ),
            ));
        }
        Ok(n as usize)
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
    pub(super) fn parse(&mut self, head: &[u8], max_headers: usize) -> Result<(), u16> {
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
        self.content_length = content_length;
        self.chunked = chunked;
        self.body.clear();
        if self.body.capacity() > REQUEST_KEPT {
            self.body = Vec::new();
        }
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

/// Where the scan for the end of a request head stands.
#[derive(Debug, Default, Clone)]
pub(super) struct ScanState {
    /// Start of the request line (after ignored empty lines), once known.
    pub(super) start: Option<usize>,
    /// Bytes before this were checked.
    pos: usize,
    /// The request line is complete and valid.
    line_ok: bool,
}

/// What the scan of a request head found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Scan {
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
pub(super) fn scan_head(buf: &[u8], st: &mut ScanState, max: usize) -> Scan {
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

#[cfg(test)]
mod tests {
    use super::*;

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
