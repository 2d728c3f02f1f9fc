//! `http` and `https`: ureq with rustls (ring) through [`super::tls`] (system roots plus the
//! config's CAs), the config's proxy ([`super::proxy`]), redirects followed by hand so
//! `httpHeaders` are not sent again after one.
//!
//! Every request carries the headers Ignition sends ([`ACCEPT`], [`ACCEPT_ENCODING`],
//! [`user_agent`]); a config's `httpHeaders` of the same name replace them.

use std::io::Read;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{ConnectProxyConnector, Connector, TcpConnector};

use super::proxy::{AbsoluteFormConnector, ProxyResolver};
use super::retry::Failure;
use super::tls::{self, TlsConnector};
use super::{Fetcher, Scheme, short};
use crate::config::Version;
use crate::config::types::{HttpHeader, Resource};

const MAX_REDIRECTS: usize = 10;
/// The Ignition release whose fetch behaviour (headers, retries) the agent follows.
pub const IGNITION_COMPAT_VERSION: &str = "2.26.0";
/// `User-Agent`: servers written for Ignition look for the `Ignition/` prefix.
static USER_AGENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "Ignition/{IGNITION_COMPAT_VERSION} (agent/{})",
        env!("CARGO_PKG_VERSION")
    )
});
/// `Accept`: the newest config spec we read, then anything. The MachineConfigServer picks
/// the spec version of the config it serves from this header (no header: spec 2.2).
pub static ACCEPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "application/vnd.coreos.ignition+json;version={}, */*;q=0.1",
        Version::NEWEST
    )
});
/// `Accept-Encoding`: contents are hashed as served, so no transfer compression.
pub const ACCEPT_ENCODING: &str = "identity";

/// The `User-Agent` the agent sends.
pub fn user_agent() -> &'static str {
    &USER_AGENT
}

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

/// The clients of one fetcher: direct, and through the configured proxies.
pub struct Agents {
    direct: ureq::Agent,
    /// Plain http through `httpProxy` (absolute-form requests to the proxy).
    http_proxied: Option<ureq::Agent>,
    /// https through `httpsProxy` (CONNECT tunnel).
    https_proxied: Option<ureq::Agent>,
    /// Plain http from a privileged source port ([`super::lowport`]).
    low_port: ureq::Agent,
}

impl Agents {
    fn new(f: &Fetcher) -> Result<Self> {
        let tls = tls::client_config(&f.opts.ca_pems)?;
        if let Some(scope) = f.link_scope() {
            // Link-local only: no proxy, no privileged port.
            let direct = ureq::Agent::with_parts(
                agent_config(None).build(),
                ().chain(TcpConnector::default())
                    .chain(TlsConnector::new(tls.clone())),
                super::metadata_client::ScopedResolver(scope),
            );
            return Ok(Agents {
                low_port: direct.clone(),
                direct,
                http_proxied: None,
                https_proxied: None,
            });
        }
        let direct = tunnel_agent(&tls, None);
        let p = &f.opts.proxy;
        let http_proxied = match p.http_proxy.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => Some(http_proxy_agent(&tls, url)?),
            None => None,
        };
        let https_proxied = match p.https_proxy.as_deref().filter(|u| !u.is_empty()) {
            Some(url) => {
                let proxy = ureq::Proxy::new(url).with_context(|| format!("proxy {url}"))?;
                Some(tunnel_agent(&tls, Some(proxy)))
            }
            None => None,
        };
        let low_port = ureq::Agent::with_parts(
            agent_config(None)
                .max_idle_connections(0)
                .max_idle_connections_per_host(0)
                .build(),
            ().chain(super::lowport::LowPortConnector),
            DefaultResolver::default(),
        );
        Ok(Agents {
            direct,
            http_proxied,
            https_proxied,
            low_port,
        })
    }

    fn for_url(&self, f: &Fetcher, url: &str) -> &ureq::Agent {
        if f.link_scope().is_some() || super::proxy::proxy_for(&f.opts.proxy, url).is_none() {
            return &self.direct;
        }
        let https = url
            .get(..6)
            .is_some_and(|s| s.eq_ignore_ascii_case("https:"));
        let proxied = if https {
            &self.https_proxied
        } else {
            &self.http_proxied
        };
        proxied.as_ref().unwrap_or(&self.direct)
    }
}

fn agent_config(
    proxy: Option<ureq::Proxy>,
) -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(proxy)
        .user_agent(user_agent())
        .accept(ACCEPT.as_str())
        .accept_encoding(ACCEPT_ENCODING)
}

/// Direct connections, or https through `proxy` in a CONNECT tunnel.
fn tunnel_agent(tls: &Arc<rustls::ClientConfig>, proxy: Option<ureq::Proxy>) -> ureq::Agent {
    let connector =
        ().chain(ConnectProxyConnector::default())
            .chain(TcpConnector::default())
            .chain(TlsConnector::new(tls.clone()));
    ureq::Agent::with_parts(
        agent_config(proxy).build(),
        connector,
        DefaultResolver::default(),
    )
}

/// Plain http through the proxy at `url`: every connection goes to the proxy and carries
/// one request in absolute form.
fn http_proxy_agent(tls: &Arc<rustls::ClientConfig>, url: &str) -> Result<ureq::Agent> {
    let p = ureq::Proxy::new(url).with_context(|| format!("proxy {url}"))?;
    if p.protocol() != ureq::ProxyProtocol::Http {
        // Anything but a plain HTTP proxy: ureq's own handling (CONNECT).
        return Ok(tunnel_agent(tls, Some(p)));
    }
    let host = p.host();
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let endpoint: ureq::http::Uri = format!("http://{host}:{}", p.port())
        .parse()
        .with_context(|| format!("proxy {url}"))?;
    let connector =
        ().chain(TcpConnector::default())
            .chain(AbsoluteFormConnector::new(p.username(), p.password()))
            .chain(TlsConnector::new(tls.clone()));
    // One request per connection: the request target is rewritten once per connection.
    let cfg = agent_config(None)
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .build();
    Ok(ureq::Agent::with_parts(
        cfg,
        connector,
        ProxyResolver::new(endpoint),
    ))
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
    let agents = f
        .agents
        .get_or_init(|| Agents::new(f).map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| Failure::fatal(anyhow!("setting up HTTP client: {e}")))?;
    let hdr_timeout = f.opts.header_timeout();
    // ureq reads a zero duration as "no limit": keep an exhausted budget exhausted.
    let left = left.map(|d| d.max(Duration::from_millis(1)));
    let mut url = url.to_string();
    for hop in 0..=MAX_REDIRECTS {
        let agent = if low_port {
            &agents.low_port
        } else {
            agents.for_url(f, &url)
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
                super::check_tls_downgrade(f, &url, &next)?;
                log::info!(
                    "{}: HTTP {status}, redirected to {}",
                    short(&url),
                    short(&next)
                );
                url = next;
            }
            _ => {
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

#[cfg(test)]
mod tests {
    use super::resolve;

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
