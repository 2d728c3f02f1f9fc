//! The HTTP metadata services of clouds (a web server on a link-local or private address that
//! answers the instance about itself), independent of any one platform: every platform that
//! gets its config from one describes its service in a [`Service`] and calls
//! [`fetch_user_data`].
//!
//! A [`Service`] says where the user data is (base URL and path), which fixed headers every
//! request carries (`Metadata-Flavor: Google`, `Authorization: Bearer Oracle`), whether a
//! session token must be asked for first ([`TokenHandshake`]: AWS IMDSv2 with its IMDSv1
//! fallback, Akamai), which statuses mean "no user data" (an empty config, never an error or a
//! retry loop), which 4xx statuses are retried, and how the user data is encoded (base64,
//! gzip).
//!
//! [`fetch_user_data`] goes through the fetcher: its HTTP client ([`crate::fetch::http::send`]:
//! each attempt bounded by the header time-out, `timeouts.httpResponseHeaders`, 10 s) and its
//! retry policy ([`crate::fetch::retry::run_bounded`]: connection errors, time-outs and 5xx
//! retried with a back-off of 100 ms doubling to 5 s, each retry logged). The token request is
//! retried the same way. It is the one HTTP user-data path: platforms with another source
//! (OpenStack's and CloudStack's config drive, Azure's OVF CD) call [`fetch_user_data_at`]
//! with a base found at run time and [`Bounds`] (a total wait, a stop flag for a race), and
//! learn from [`ServiceError::answered`] whether the service ever answered.
//!
//! [`Client`] is a small client for other metadata (the S3 instance role credentials, the AWS
//! region): best effort, each request bounded (2 s, no redirects, no retries), so that a
//! machine that is not on the platform does not wait for a service that is not there.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use crate::fetch::Fetcher;
use crate::fetch::http::{self, Reply};
use crate::fetch::retry::{self, Failure};
// The handshakes and the small client live below the fetcher (S3 uses them too).
pub use crate::fetch::metadata_client::{
    AKAMAI_TOKEN, AWS_IMDSV2, Client, MAX_TOKEN_LEN, TIMEOUT, TokenHandshake, check_token,
    ipv6_interfaces,
};

/// How a service encodes the user data it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As uploaded.
    Plain,
    /// Standard base64, padded or not, whitespace ignored (Oracle Cloud).
    Base64,
    /// Base64, and then gzip when the decoded bytes start with gzip's magic (Akamai).
    Base64MaybeGzip,
}

/// One platform's metadata service and its user data.
#[derive(Debug, Clone, Copy)]
pub struct Service {
    /// The platform id (errors, logs, the test override in
    /// [`crate::endpoints::Endpoints::metadata`]).
    pub platform: &'static str,
    /// Built-in base URL (`http://169.254.169.254`).
    pub base: &'static str,
    /// Path of the user data, from the base URL.
    pub user_data: &'static str,
    /// Headers every request carries.
    pub headers: &'static [(&'static str, &'static str)],
    /// The session token handshake, if the service has one.
    pub handshake: Option<TokenHandshake>,
    /// Statuses of the user-data request that mean "no user data" (an empty config).
    pub absent_on: &'static [u16],
    /// 4xx statuses retried like 5xx (Oracle: 429).
    pub retry_on: &'static [u16],
    pub encoding: Encoding,
    /// Connect from a privileged source port, 1–1023 (Scaleway); needs root.
    pub low_source_port: bool,
    /// The service's IPv6 base URL, asked in parallel with `base` (Scaleway's
    /// `fd00:42::42`, an addition of the agent's): the first answer wins (user data or
    /// "none"), an error only when both fail. Its test override is platform `NAME/ipv6`.
    pub ipv6_base: Option<&'static str>,
}

impl Service {
    /// A service at `base` serving plain user data at `path`; 404 means none.
    pub const fn new(platform: &'static str, base: &'static str, path: &'static str) -> Service {
        Service {
            platform,
            base,
            user_data: path,
            headers: &[],
            handshake: None,
            absent_on: &[404],
            retry_on: &[],
            encoding: Encoding::Plain,
            low_source_port: false,
            ipv6_base: None,
        }
    }
}

/// What ends a user-data fetch besides the fetcher's own `timeouts.httpTotal` (the shorter
/// wins): for platforms that fall back to, or race against, another source.
#[derive(Clone, Copy, Default)]
pub struct Bounds<'a> {
    /// Give up after this long in all (token, retries), naming the limit.
    pub total: Option<Duration>,
    /// Give up after this long when the service has not answered any request with an HTTP
    /// status yet (Azure: no network path to IMDS, its CD is read then); once it answered,
    /// only `total` and `timeouts.httpTotal` bound the retries.
    pub unanswered: Option<Duration>,
    /// Give up at the next retry once set (a config drive answered first).
    pub stop: Option<&'a AtomicBool>,
}

/// One address a service is asked at: its base URL and, for an IPv6 link-local address, the
/// interface to ask it out of (name, index).
#[derive(Debug, Clone)]
pub struct Base {
    pub url: String,
    pub interface: Option<(String, u32)>,
}

impl Base {
    /// A base URL reached as any other.
    pub fn plain(url: &str) -> Base {
        Base {
            url: url.trim_end_matches('/').to_string(),
            interface: None,
        }
    }

    /// The base URL as logs and sources show it: `http://[fe80::a9fe:a9fe%eth0]`.
    pub fn label(&self) -> String {
        match &self.interface {
            Some((name, _)) if self.url.contains("]") => {
                self.url.replacen(']', &format!("%{name}]"), 1)
            }
            _ => self.url.clone(),
        }
    }
}

/// A failed user-data fetch, and whether the service ever answered: Azure passes over an
/// instance metadata service that never answered (no network path to it) for its
/// provisioning CD, and fails when it answered only with errors. Its text is the whole error
/// chain.
#[derive(Debug)]
pub struct ServiceError {
    pub error: anyhow::Error,
    /// Some request got an HTTP answer (any status); false: connection errors and
    /// time-outs only.
    pub answered: bool,
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for ServiceError {}

/// The user data of `svc` (None: the service says there is none), decoded, through `f`'s
/// HTTP client and retry policy. Offline, refused ([`crate::fetch::Options::needs_network`]).
pub fn fetch_user_data(f: &Fetcher, svc: &Service) -> Result<Option<Vec<u8>>> {
    let base = f.opts.endpoints.metadata_base(svc.platform, svc.base);
    fetch_user_data_at(f, svc, &base, Bounds::default()).map_err(|e| e.error)
}

/// [`fetch_user_data`] from the service at `base` (instead of `svc.base` and its test
/// override: a DHCP server, a test's server), within `bounds`. Offline, refused
/// ([`crate::fetch::Options::needs_network`]).
pub fn fetch_user_data_at(
    f: &Fetcher,
    svc: &Service,
    base: &str,
    bounds: Bounds,
) -> Result<Option<Vec<u8>>, ServiceError> {
    let base = base.trim_end_matches('/');
    if f.opts.offline {
        return Err(ServiceError {
            error: f.opts.needs_network(format!("{base}{}", svc.user_data)),
            answered: false,
        });
    }
    let mut bases = vec![Base::plain(base)];
    if let Some(v6) = svc.ipv6_base {
        let v6 = f
            .opts
            .endpoints
            .metadata_base(&format!("{}/ipv6", svc.platform), v6);
        bases.push(Base::plain(&v6));
    }
    fetch_user_data_any(f, svc, &bases, bounds).map(|(v, _)| v)
}

/// [`fetch_user_data_at`] asking each of `bases` at once (Scaleway's IPv4 and IPv6 addresses,
/// OpenStack's 169.254.169.254 and `fe80::a9fe:a9fe` on each interface, as Ignition), each
/// with its own retries: the first answer wins (user data or "none"), with the base that gave
/// it; an error only when all fail (the last error). The others are told to stop at their
/// next attempt (and die with the process at the latest).
pub fn fetch_user_data_any(
    f: &Fetcher,
    svc: &Service,
    bases: &[Base],
    bounds: Bounds,
) -> Result<(Option<Vec<u8>>, Base), ServiceError> {
    if f.opts.offline {
        return Err(ServiceError {
            error: f
                .opts
                .needs_network(format!("{}{}", bases[0].url, svc.user_data)),
            answered: false,
        });
    }
    if let [b] = bases
        && b.interface.is_none()
    {
        let answered = AtomicBool::new(false);
        return match fetch_from(f, svc, &b.url, bounds, &answered) {
            Ok(v) => Ok((v, b.clone())),
            Err(error) => Err(ServiceError {
                error,
                answered: answered.load(Ordering::SeqCst),
            }),
        };
    }
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let (total, unanswered) = (bounds.total, bounds.unanswered);
    for (i, b) in bases.iter().enumerate() {
        let f = match &b.interface {
            Some((_, index)) => f.fork_scoped(*index),
            None => f.fork(),
        };
        let (svc, tx, url) = (*svc, tx.clone(), b.url.clone());
        let (stop, answered) = (stop.clone(), answered.clone());
        std::thread::spawn(move || {
            let bounds = Bounds {
                total,
                unanswered,
                stop: Some(&stop),
            };
            let r = fetch_from(&f, &svc, &url, bounds, &answered);
            let _ = tx.send((i, r));
        });
    }
    drop(tx);
    let mut last = None;
    let mut left = bases.len();
    while left > 0 {
        // The caller's stop flag (a config drive answered first) ends the wait too.
        if bounds.stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
            stop.store(true, Ordering::SeqCst);
            return Err(ServiceError {
                error: retry::Stopped(format!("{} metadata service", svc.platform)).into(),
                answered: answered.load(Ordering::SeqCst),
            });
        }
        let (i, r) = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(got) => got,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        left -= 1;
        let b = &bases[i];
        match r {
            Ok(v) => {
                stop.store(true, Ordering::SeqCst);
                log::info!("{}: answer from {}", svc.platform, b.label());
                return Ok((v, b.clone()));
            }
            Err(e) => {
                log::warn!("{}: {}: {e:#}", svc.platform, b.label());
                last = Some(e);
            }
        }
    }
    Err(ServiceError {
        error: last.unwrap_or_else(|| anyhow!("{}: no answer", svc.platform)),
        answered: answered.load(Ordering::SeqCst),
    })
}

/// The user data from the service at `base`; `answered` is set once any request gets an
/// HTTP answer.
fn fetch_from(
    f: &Fetcher,
    svc: &Service,
    base: &str,
    bounds: Bounds,
    answered: &AtomicBool,
) -> Result<Option<Vec<u8>>> {
    let base = base.trim_end_matches('/');
    let url = format!("{base}{}", svc.user_data);
    let limit_name = format!("the wait for the {} metadata service", svc.platform);
    let retry_bounds = retry::Bounds {
        total: f.opts.total_timeout().map(|t| (t, "timeouts.httpTotal")),
        stop: bounds.stop,
    }
    .at_most(bounds.total.map(|t| (t, limit_name.as_str())));
    let mut headers: Vec<(String, String)> = svc
        .headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Some(h) = svc.handshake {
        match session_token(f, svc, base, &h, retry_bounds, answered)? {
            Some(t) => headers.push((h.send_as.to_string(), t)),
            None => log::info!(
                "{} metadata service: no session token ({} {}{} is not offered); asking without one",
                svc.platform,
                h.method,
                base,
                h.path
            ),
        }
    }
    let limit = f.opts.limits.max_config_size;
    let raw_limit = match svc.encoding {
        Encoding::Plain => limit,
        // Base64 text is a third longer than the data it carries (and may be wrapped).
        Encoding::Base64 | Encoding::Base64MaybeGzip => limit.saturating_mul(4) / 3 + 1024,
    };
    let start = f.clock().now();
    let raw = retry::run_bounded(&url, retry_bounds, f.clock(), |left| {
        if let Some(u) = bounds.unanswered
            && !answered.load(Ordering::SeqCst)
            && f.clock().now().saturating_duration_since(start) >= u
        {
            return Err(Failure::fatal(anyhow!(
                "{url}: no answer within {}s",
                u.as_secs_f64()
            )));
        }
        let r = http::send(f, "GET", &url, &headers, svc.low_source_port, left)?;
        answered.store(true, Ordering::SeqCst);
        match r.status {
            200..=299 => read_body(r, raw_limit).map(Some),
            s if svc.absent_on.contains(&s) => {
                log::info!("{}: HTTP {s}: no user data", svc.platform);
                Ok(None)
            }
            s if (500..=599).contains(&s) || svc.retry_on.contains(&s) => {
                Err(Failure::retry(anyhow!("{}", r.describe())))
            }
            _ => Err(Failure::fatal(anyhow!("{}", r.describe()))),
        }
    })
    .with_context(|| format!("{} metadata service: user data", svc.platform))?;
    let Some(raw) = raw else {
        return Ok(None);
    };
    decode(&raw, svc.encoding, limit)
        .with_context(|| format!("{} metadata service: user data from {url}", svc.platform))
        .map(Some)
}

/// Asks for a session token as `h` says: Some(token), or None when the service answers one
/// of `h.without_token_on`. Connection errors and 5xx are retried; any other answer, an empty
/// token or one that cannot be a header value is an error.
fn session_token(
    f: &Fetcher,
    svc: &Service,
    base: &str,
    h: &TokenHandshake,
    bounds: retry::Bounds,
    answered: &AtomicBool,
) -> Result<Option<String>> {
    let url = format!("{base}{}", h.path);
    // The service's fixed headers, unless the handshake sets its own (Akamai's Accept).
    let headers: Vec<(String, String)> = svc
        .headers
        .iter()
        .filter(|(k, _)| !h.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(k)))
        .chain(h.headers)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let what = format!("{} {url}", h.method);
    retry::run_bounded(&what, bounds, f.clock(), |left| {
        let r = http::send(f, h.method, &url, &headers, svc.low_source_port, left)?;
        answered.store(true, Ordering::SeqCst);
        match r.status {
            200..=299 => {
                let body = read_body(r, MAX_TOKEN_LEN as u64)?;
                check_token(&body).map(Some).map_err(Failure::Fatal)
            }
            s if h.without_token_on.contains(&s) => Ok(None),
            500..=599 => Err(Failure::retry(anyhow!("{}", r.describe()))),
            _ => Err(Failure::fatal(anyhow!("{}", r.describe()))),
        }
    })
    .with_context(|| format!("{} metadata service: session token ({what})", svc.platform))
}

/// Reads a 2xx body, at most `limit` bytes: a transport error is retried, more than `limit`
/// is final.
fn read_body(r: Reply, limit: u64) -> Result<Vec<u8>, Failure> {
    let mut v = Vec::new();
    let n = r
        .body
        .take(limit + 1)
        .read_to_end(&mut v)
        .map_err(|e| Failure::retry(anyhow!("{}: reading the body: {e}", r.url)))?;
    if n as u64 > limit {
        return Err(Failure::fatal(runtime::limits::TooLarge {
            what: format!("answer of {}", r.url),
            limit,
        }));
    }
    Ok(v)
}

/// Decodes user data as `enc` says; gzip output is bounded by `limit`.
pub fn decode(raw: &[u8], enc: Encoding, limit: u64) -> Result<Vec<u8>> {
    match enc {
        Encoding::Plain => Ok(raw.to_vec()),
        Encoding::Base64 => base64_lenient(raw),
        Encoding::Base64MaybeGzip => maybe_gunzip(base64_lenient(raw)?, limit),
    }
}

/// Standard base64 with or without `=` padding; ASCII whitespace (line breaks) ignored.
pub fn base64_lenient(raw: &[u8]) -> Result<Vec<u8>> {
    let mut s: Vec<u8> = raw
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if !s.ends_with(b"=") {
        match s.len() % 4 {
            2 => s.extend_from_slice(b"=="),
            3 => s.push(b'='),
            _ => {}
        }
    }
    spec::encoding::data_url::base64_decode(&s).context("decoding base64")
}

/// `data` gunzipped when it starts with gzip's magic bytes, else as it is.
pub fn maybe_gunzip(data: Vec<u8>, limit: u64) -> Result<Vec<u8>> {
    if !data.starts_with(&[0x1f, 0x8b]) {
        return Ok(data);
    }
    let r = flate2::read::MultiGzDecoder::new(&data[..]);
    runtime::limits::read_bounded(r, limit, "gzip-compressed user data")
        .context("decompressing gzip")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_base_shows_its_interface() {
        let b = Base {
            url: "http://[fe80::a9fe:a9fe]".into(),
            interface: Some(("eth0".into(), 2)),
        };
        assert_eq!(b.label(), "http://[fe80::a9fe:a9fe%eth0]");
        assert_eq!(
            Base::plain("http://169.254.169.254/").label(),
            "http://169.254.169.254"
        );
    }
    use std::io::Write;

    #[test]
    fn base64_padded_or_not() {
        let plain = br#"{"ignition":{"version":"3.4.0"}}"#;
        let padded = spec::encoding::data_url::base64_encode(plain);
        assert!(padded.ends_with('='), "{padded}");
        assert_eq!(base64_lenient(padded.as_bytes()).unwrap(), plain);
        let bare = padded.trim_end_matches('=');
        assert_eq!(base64_lenient(bare.as_bytes()).unwrap(), plain);
        let wrapped = format!("{}\n{}\n", &padded[..10], &padded[10..]);
        assert_eq!(base64_lenient(wrapped.as_bytes()).unwrap(), plain);
        assert!(base64_lenient(b"not base64!").is_err());
        assert!(base64_lenient(b"").unwrap().is_empty());
    }

    #[test]
    fn gzip_only_when_it_is_gzip() {
        let plain = b"{}".to_vec();
        assert_eq!(maybe_gunzip(plain.clone(), 100).unwrap(), plain);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&[b'x'; 1000]).unwrap();
        let z = gz.finish().unwrap();
        assert_eq!(maybe_gunzip(z.clone(), 1000).unwrap(), vec![b'x'; 1000]);
        let e = maybe_gunzip(z.clone(), 999).unwrap_err();
        assert!(format!("{e:#}").contains("limit"), "{e:#}");
        let b64 = spec::encoding::data_url::base64_encode(&z);
        assert_eq!(
            decode(b64.as_bytes(), Encoding::Base64MaybeGzip, 1000).unwrap(),
            vec![b'x'; 1000]
        );
        // Base64 alone leaves gzip alone.
        assert_eq!(decode(b64.as_bytes(), Encoding::Base64, 1000).unwrap(), z);
    }

    #[test]
    fn tokens() {
        assert_eq!(check_token(b" AQAEA-x_y==\n").unwrap(), "AQAEA-x_y==");
        let e = check_token(b"\n").unwrap_err();
        assert_eq!(e.to_string(), "the service answered an empty token");
        let e = check_token(b"abc\x00def").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the service answered a malformed token (7 bytes; byte 3 is 0x00, a token is printable ASCII without spaces)"
        );
        assert!(check_token("tökén".as_bytes()).is_err());
        assert!(check_token(b"two words").is_err());
    }
}
