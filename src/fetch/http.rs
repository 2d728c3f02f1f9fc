//! `http` and `https`: ureq with rustls (ring), system roots plus the config's CAs, the
//! config's proxy, redirects followed by hand so `httpHeaders` are not sent again after one.

use std::io::Read;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};

use super::retry::Failure;
use super::{Fetcher, Scheme, short};
use crate::config::types::{HttpHeader, Resource};

/// System CA bundle (Debian, Fedora layouts).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];
const MAX_REDIRECTS: usize = 10;
pub const USER_AGENT: &str = concat!("agent/", env!("CARGO_PKG_VERSION"));

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

/// The clients of one fetcher: direct and through each configured proxy.
pub struct Agents {
    tls: TlsConfig,
    direct: ureq::Agent,
    proxied: Vec<(String, ureq::Agent)>,
}

impl Agents {
    fn new(f: &Fetcher) -> Result<Self> {
        let tls = tls_config(&f.opts.ca_pems)?;
        let direct = agent(&tls, None)?;
        let mut proxied = Vec::new();
        let p = &f.opts.proxy;
        for url in [&p.http_proxy, &p.https_proxy].into_iter().flatten() {
            if !url.is_empty() && !proxied.iter().any(|(u, _)| u == url) {
                let proxy = ureq::Proxy::new(url).with_context(|| format!("proxy {url}"))?;
                proxied.push((url.clone(), agent(&tls, Some(proxy))?));
            }
        }
        Ok(Agents {
            tls,
            direct,
            proxied,
        })
    }

    fn for_url(&self, f: &Fetcher, url: &str) -> &ureq::Agent {
        match super::proxy::proxy_for(&f.opts.proxy, url) {
            Some(p) => self
                .proxied
                .iter()
                .find(|(u, _)| u == p)
                .map_or(&self.direct, |(_, a)| a),
            None => &self.direct,
        }
    }

    pub fn tls(&self) -> &TlsConfig {
        &self.tls
    }
}

fn agent(tls: &TlsConfig, proxy: Option<ureq::Proxy>) -> Result<ureq::Agent> {
    let cfg = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .tls_config(tls.clone())
        .proxy(proxy)
        .user_agent(USER_AGENT)
        .accept_encoding("identity")
        .build();
    Ok(cfg.new_agent())
}

/// Trusted roots: the system bundle (Mozilla's list if there is none) plus `extra` PEMs.
pub fn tls_config(extra: &[Vec<u8>]) -> Result<TlsConfig> {
    let mut certs: Vec<Certificate<'static>> = Vec::new();
    let mut have_system = false;
    for path in SYSTEM_BUNDLES {
        if let Ok(pem) = std::fs::read(path) {
            certs.extend(parse_certs(&pem).with_context(|| format!("reading {path}"))?);
            have_system = true;
            break;
        }
    }
    let roots = if !have_system && extra.is_empty() {
        RootCerts::WebPki
    } else {
        for pem in extra {
            let c = parse_certs(pem).context("parsing certificate authority")?;
            if c.is_empty() {
                anyhow::bail!("certificate authority contains no PEM certificate");
            }
            certs.extend(c);
        }
        RootCerts::new_with_certs(&certs)
    };
    Ok(TlsConfig::builder().root_certs(roots).build())
}

fn parse_certs(pem: &[u8]) -> Result<Vec<Certificate<'static>>> {
    let mut out = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        if let PemItem::Certificate(c) = item.map_err(|e| anyhow!("{e}"))? {
            out.push(c);
        }
    }
    Ok(out)
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
        let mut req = agents.for_url(f, &url).get(&url);
        if hop == 0 {
            for (k, v) in extra {
                req = req.header(k, v);
            }
            for h in headers {
                if let Some(v) = &h.value {
                    req = req.header(&h.name, v);
                }
            }
        }
        let req = req
            .config()
            .timeout_global(left)
            .timeout_connect(hdr_timeout)
            .timeout_recv_response(hdr_timeout)
            .timeout_per_read(hdr_timeout.map(|t| t.max(Duration::from_secs(30))))
            .build();
        let resp = req.call().map_err(|e| classify(&url, e))?;
        let status = resp.status().as_u16();
        match status {
            200..=299 => return Ok(Box::new(resp.into_body().into_reader())),
            301 | 302 | 303 | 307 | 308 => {
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
            500..=599 => {
                return Err(Failure::retry(anyhow!(
                    "{}: HTTP {status} {}",
                    short(&url),
                    resp.status().canonical_reason().unwrap_or("")
                )));
            }
            _ => {
                return Err(Failure::fatal(anyhow!(
                    "{}: HTTP {status} {}",
                    short(&url),
                    resp.status().canonical_reason().unwrap_or("")
                )));
            }
        }
    }
    Err(Failure::fatal(anyhow!(
        "{}: more than {MAX_REDIRECTS} redirects",
        short(&url)
    )))
}

fn classify(url: &str, e: ureq::Error) -> Failure {
    let err = anyhow!("{}: {e}", short(url));
    match e {
        ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::InvalidProxyUrl => {
            Failure::Fatal(err)
        }
        _ => Failure::Retry(err),
    }
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
