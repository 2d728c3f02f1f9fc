//! `http` and `https`: ureq with rustls (ring) through [`super::tls`] (system roots plus the
//! config's CAs), the config's proxy ([`super::proxy`]), redirects followed by hand so
//! `httpHeaders` are not sent again after one.
//!
//! Every request carries the headers Ignition sends ([`ACCEPT`], [`ACCEPT_ENCODING`],
//! [`user_agent`]); a config's `httpHeaders` of the same name replace them.

use std::io::Read;
use std::time::Duration;

use anyhow::{Result, anyhow};

use super::clients::Agents;
use super::fetcher::{Fetcher, Scheme, check_tls_downgrade, short};
use super::retry::Failure;
use super::tls;
use spec::config::types::{HttpHeader, Resource};

const MAX_REDIRECTS: usize = 10;

pub use super::clients::{ACCEPT, ACCEPT_ENCODING, IGNITION_COMPAT_VERSION, user_agent};

pub struct Http;

impl Scheme for Http {
    fn open(
        &self,
        f: &Fetcher,
        url: &str,
        r: &Resource,
        left: Option<Duration>,
    ) -> Result<Box<dyn Read>, Failure> {
        get(f, url, &r.http_headers, &[], left)
    }
}

/// One attempt at a GET: follows redirects (without `headers` after the first request),
/// retries are the caller's business. 2xx gives the body, 5xx asks for a retry, any other
/// status is final.
pub fn get(
    f: &Fetcher,
    url: &str,
    headers: &[HttpHeader],
    extra: &[(String, String)],
    left: Option<Duration>,
) -> Result<Box<dyn Read>, Failure> {
    let mut all = extra.to_vec();
    all.extend(
        headers
            .iter()
            .filter_map(|h| h.value.as_ref().map(|v| (h.name.clone(), v.clone()))),
    );
    let r = send(f, "GET", url, &all, false, left)?;
    match r.status {
        200..=299 => Ok(r.body),
        500..=599 => Err(Failure::retry(anyhow!("{}", r.describe()))),
        _ => Err(Failure::fatal(anyhow!("{}", r.describe()))),
    }
}

/// The final answer to one [`send`]: the URL that gave it (after redirects), its status and
/// its body (unread).
pub struct Reply {
    pub url: String,
    pub status: u16,
    pub reason: &'static str,
    pub body: Box<dyn Read>,
}

impl Reply {
    /// "URL: HTTP 404 Not Found", for errors.
    pub fn describe(&self) -> String {
        format!("{}: HTTP {} {}", short(&self.url), self.status, self.reason)
    }
}

/// One attempt at `method url` without a body (a PUT carries `Content-Length: 0`), with
/// `headers` on the first request only. A GET follows redirects; any other final status is
/// returned as it is, for the caller to judge. Transport errors: connection errors and
/// time-outs ask for a retry, a bad URL or a rejected certificate is final. Each request is
/// bounded by the fetcher's header time-out (`timeouts.httpResponseHeaders`, 10 s by default)
/// and by `left`. `low_port`: connect from a privileged source port, directly (plain http
/// only; [`super::lowport`]).
pub fn send(
    f: &Fetcher,
    method: &str,
    url: &str,
    headers: &[(String, String)],
    low_port: bool,
    left: Option<Duration>,
) -> Result<Reply, Failure> {
    send_with(f, method, url, headers, None, low_port, left)
}

/// One attempt at `POST url` with `body` (and `headers`, e.g. its `Content-Type`), redirects
/// not followed; as [`send`] otherwise. The agent's reports (`crate::report`) go this way.
pub fn post(
    f: &Fetcher,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
    left: Option<Duration>,
) -> Result<Reply, Failure> {
    send_with(f, "POST", url, headers, Some(body), false, left)
}

fn send_with(
    f: &Fetcher,
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Option<&[u8]>,
    low_port: bool,
    left: Option<Duration>,
) -> Result<Reply, Failure> {
    let agents = f
        .agents
        .get_or_init(|| Agents::new(&f.opts, f.link_scope()).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| Failure::fatal(anyhow!("setting up HTTP client: {e}")))?;
    let hdr_timeout = f.opts.header_timeout();
    // ureq reads a zero duration as "no limit": keep an exhausted budget exhausted.
    let left = left.map(|d| d.max(Duration::from_millis(1)));
    let mut url = url.to_string();
    for hop in 0..=MAX_REDIRECTS {
        let agent = if low_port {
            agents.low_port()
        } else {
            agents.for_url(&f.opts, f.link_scope(), &url)
        };
        let resp = if method == "GET" {
            let mut req = agent.get(&url);
            if hop == 0 {
                for (k, v) in headers {
                    req = req.header(k, v);
                }
            }
            bounded(req, left, hdr_timeout).call()
        } else if method == "PUT" {
            let mut req = agent.put(&url);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            bounded(req, left, hdr_timeout).send_empty()
        } else if method == "POST" {
            let mut req = agent.post(&url);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            bounded(req, left, hdr_timeout).send(body.unwrap_or_default())
        } else {
            return Err(Failure::fatal(anyhow!(
                "{}: unsupported HTTP method {method}",
                short(&url)
            )));
        }
        .map_err(|e| classify(&url, e))?;
        let status = resp.status().as_u16();
        let reason = resp.status().canonical_reason().unwrap_or("");
        match status {
            301 | 302 | 303 | 307 | 308 if method == "GET" => {
                let loc = resp
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        Failure::fatal(anyhow!("{}: HTTP {status} without Location", short(&url)))
                    })?;
                let next = resolve(&url, loc);
                check_tls_downgrade(f, &url, &next)?;
                log::info!(
                    "{}: HTTP {status}, redirected to {}",
                    short(&url),
                    short(&next)
                );
                url = next;
            }
            _ => {
                if method == "GET" && (200..300).contains(&status) {
                    keep_agent_headers(f, &url, resp.headers());
                }
                return Ok(Reply {
                    url,
                    status,
                    reason,
                    body: Box::new(resp.into_body().into_reader()),
                });
            }
        }
    }
    Err(Failure::fatal(anyhow!(
        "{}: more than {MAX_REDIRECTS} redirects",
        short(&url)
    )))
}

/// Keeps the `X-Agent-*` headers of a successful GET on the fetcher
/// ([`Fetcher::take_agent_headers`]); nothing when there are none.
fn keep_agent_headers(f: &Fetcher, url: &str, h: &ureq::http::HeaderMap) {
    let found: Vec<(String, String)> = h
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("x-agent-"))
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    if !found.is_empty()
        && let Ok(mut kept) = f.agent_headers.lock()
    {
        *kept = Some(super::fetcher::AgentHeaders {
            url: url.to_string(),
            headers: found,
        });
    }
}

fn classify(url: &str, e: ureq::Error) -> Failure {
    match e {
        ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::InvalidProxyUrl => {
            Failure::fatal(anyhow!("{}: {e}", short(url)))
        }
        // Retrying cannot change a certificate verdict: fail now, with what to change.
        ureq::Error::Rustls(ref r) if tls::is_certificate_error(r) => {
            let host = super::proxy::scheme_host(url).map_or_else(String::new, |(_, h)| h);
            Failure::fatal(anyhow!(
                "{}: TLS certificate of {host} rejected: {}; if the server is meant to be \
                 trusted, add the CA that issued its certificate (or the certificate itself, if \
                 self-signed) to ignition.security.tls.certificateAuthorities (agent fetch: \
                 --ca-file)",
                short(url),
                tls::describe(r)
            ))
        }
        _ => Failure::retry(anyhow!("{}: {e}", short(url))),
    }
}

/// One attempt's time limits on a request: `left` in all (the retry budget), the header
/// time-out for connecting and for the response head, and reads of the body.
fn bounded<B>(
    req: ureq::RequestBuilder<B>,
    left: Option<Duration>,
    header_timeout: Option<Duration>,
) -> ureq::RequestBuilder<B> {
    req.config()
        .timeout_global(left)
        .timeout_connect(header_timeout)
        .timeout_recv_response(header_timeout)
        .timeout_per_read(header_timeout.map(|t| t.max(Duration::from_secs(30))))
        .build()
}

/// Resolves a Location header against the URL it came from.
pub fn resolve(base: &str, loc: &str) -> String {
    if loc.contains("://") {
        return loc.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(l) = loc.strip_prefix("//") {
        return format!("{scheme}://{l}");
    }
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    if loc.starts_with('/') {
        return format!("{scheme}://{authority}{loc}");
    }
    let path = rest[auth_end..].split(['?', '#']).next().unwrap_or("");
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    format!("{scheme}://{authority}{dir}/{loc}")
}

/// `url` without its userinfo (`scheme://user:password@host` → `scheme://host`).
pub fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..auth_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// The origin of a URL, as a bearer token is scoped to it: `scheme://host[:port]`, scheme
/// and host in lower case, the userinfo left out, the default port (http 80, https 443)
/// not written. None for a URL without `://` or without a host.
pub fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    // `[v6]:port`, `host:port`, or either without the port.
    let (host, port) = match hostport.rfind(':') {
        Some(c) if !hostport[c..].contains(']') => (&hostport[..c], Some(&hostport[c + 1..])),
        _ => (hostport, None),
    };
    if host.is_empty() {
        return None;
    }
    let default = match scheme.as_str() {
        "http" => Some("80"),
        "https" => Some("443"),
        _ => None,
    };
    let host = host.to_ascii_lowercase();
    Some(
        match port.filter(|p| !p.is_empty() && Some(*p) != default) {
            Some(p) => format!("{scheme}://{host}:{p}"),
            None => format!("{scheme}://{host}"),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{origin, resolve, without_userinfo};

    #[test]
    fn origins() {
        let o = |u: &str| origin(u);
        assert_eq!(o("http://H:80/a").as_deref(), Some("http://h"));
        assert_eq!(o("http://h/a").as_deref(), Some("http://h"));
        assert_eq!(o("HTTPS://h:443").as_deref(), Some("https://h"));
        assert_eq!(o("https://h:8443/x?y").as_deref(), Some("https://h:8443"));
        assert_eq!(o("http://u:p@h:1/x").as_deref(), Some("http://h:1"));
        assert_eq!(
            o("http://[::1]:8080/x").as_deref(),
            Some("http://[::1]:8080")
        );
        assert_eq!(o("http://[::1]/x").as_deref(), Some("http://[::1]"));
        assert_ne!(o("http://h:1/"), o("http://h:2/"));
        assert_ne!(o("http://h/"), o("https://h/"));
        assert_eq!(o("/report"), None);
        assert_eq!(o("http:///x"), None);
        assert_eq!(without_userinfo("http://u:p@h:1/x?a@b"), "http://h:1/x?a@b");
        assert_eq!(without_userinfo("http://h/x@y"), "http://h/x@y");
    }

    #[test]
    fn redirect_targets() {
        let b = "http://h:1/a/b?q=1";
        assert_eq!(resolve(b, "https://x/y"), "https://x/y");
        assert_eq!(resolve(b, "//x/y"), "http://x/y");
        assert_eq!(resolve(b, "/c"), "http://h:1/c");
        assert_eq!(resolve(b, "c"), "http://h:1/a/c");
        assert_eq!(resolve("http://h", "c"), "http://h/c");
    }
}
