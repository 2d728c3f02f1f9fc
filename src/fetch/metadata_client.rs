//! The lowest layer of the metadata services: how a service hands out session tokens
//! ([`TokenHandshake`]: AWS IMDSv2 with its IMDSv1 fallback, Akamai), what a token may look
//! like ([`check_token`]), and a small best-effort [`Client`] for metadata other than the user
//! data (the S3 instance role's credentials, the AWS region): each request bounded by
//! [`TIMEOUT`], no redirects, no retries, so that a machine that is not on the platform does
//! not wait for a service that is not there.
//!
//! The user data itself is fetched by [`crate::metadata`] (above the fetcher, with its retry
//! policy), which re-exports these.

use std::net::{Ipv6Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Per-request time limit of [`Client`] (connect, headers and body).
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// Longest session token accepted (AWS's are 56 bytes, Akamai's 64).
pub const MAX_TOKEN_LEN: usize = 4096;

/// How a metadata service issues its session token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenHandshake {
    /// Method of the token request ("PUT").
    pub method: &'static str,
    /// Path of the token request, from the service's base URL.
    pub path: &'static str,
    /// Headers of the token request (e.g. the token's lifetime).
    pub headers: &'static [(&'static str, &'static str)],
    /// Header every later request carries the token in.
    pub send_as: &'static str,
    /// Statuses of the token request that mean the service hands out no tokens: the later
    /// requests go without one (AWS: IMDSv1). Empty: a token is required.
    pub without_token_on: &'static [u16],
}

/// AWS instance metadata service v2: PUT `/latest/api/token` for a token valid 6 hours,
/// then send it in `X-aws-ec2-metadata-token`. As in Ignition, only a 404 means no IMDSv2
/// (IMDSv1, without a token); any other error status (403 when IMDS is off, 405) fails.
pub const AWS_IMDSV2: TokenHandshake = TokenHandshake {
    method: "PUT",
    path: "/latest/api/token",
    headers: &[("X-aws-ec2-metadata-token-ttl-seconds", "21600")],
    send_as: "X-aws-ec2-metadata-token",
    without_token_on: &[404],
};

/// Akamai (Linode) metadata service: PUT `/v1/token` for a token valid 300 s, then
/// `Metadata-Token`. No fallback.
pub const AKAMAI_TOKEN: TokenHandshake = TokenHandshake {
    method: "PUT",
    path: "/v1/token",
    headers: &[
        ("Accept", "text/plain"),
        ("Metadata-Token-Expiry-Seconds", "300"),
    ],
    send_as: "Metadata-Token",
    without_token_on: &[],
};

/// A session token as the service sent it: trimmed, non-empty, printable ASCII (it goes into
/// a header).
pub fn check_token(body: &[u8]) -> Result<String> {
    let t = body.trim_ascii();
    if t.is_empty() {
        bail!("the service answered an empty token");
    }
    if let Some(bad) = t.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        bail!(
            "the service answered a malformed token ({} bytes; byte {bad} is {:#04x}, a token is printable ASCII without spaces)",
            t.len(),
            t[bad]
        );
    }
    Ok(String::from_utf8_lossy(t).into_owned())
}

/// A metadata service at one base URL, for metadata other than the user data (S3 instance
/// role credentials, the AWS region): each request bounded by [`TIMEOUT`], not retried. The
/// token (if any) is asked for once, on the first request, and reused; when the handshake
/// allows going without one, any failure of the token request means no token.
pub struct Client {
    base: String,
    agent: ureq::Agent,
    headers: Vec<(String, String)>,
    handshake: Option<TokenHandshake>,
    token: OnceLock<Option<String>>,
}

impl Client {
    /// A client of the service at `base` (`http://169.254.169.254`), without a handshake.
    pub fn new(base: &str) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .max_redirects(0)
            .build()
            .into();
        Client {
            base: base.trim_end_matches('/').to_string(),
            agent,
            headers: Vec::new(),
            handshake: None,
            token: OnceLock::new(),
        }
    }

    /// Ask for a session token first, as `h` says.
    pub fn with_token_handshake(mut self, h: TokenHandshake) -> Client {
        self.handshake = Some(h);
        self
    }

    /// Send this header with every request (e.g. `Metadata-Flavor: Google`).
    pub fn with_header(mut self, name: &str, value: &str) -> Client {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The session token: None without a handshake, or when the service gave none and the
    /// handshake allows asking without one.
    fn token(&self) -> Result<Option<&str>> {
        let Some(h) = self.handshake else {
            return Ok(None);
        };
        let token = self.token.get_or_init(|| {
            let url = format!("{}{}", self.base, h.path);
            let mut req = ureq::http::Request::builder().method(h.method).uri(&url);
            for (k, v) in self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())) {
                req = req.header(k, v);
            }
            for (k, v) in h.headers {
                req = req.header(*k, *v);
            }
            // An empty body with `Content-Length: 0`, as IMDS expects of its PUT.
            let got = req
                .body(&b""[..])
                .map_err(anyhow::Error::from)
                .and_then(|r| Ok(self.agent.run(r)?))
                .and_then(|mut r| Ok(r.body_mut().read_to_vec()?))
                .and_then(|b| check_token(&b));
            match got {
                Ok(t) => Some(t),
                Err(e) => {
                    log::debug!("metadata service {url}: no token ({e:#})");
                    None
                }
            }
        });
        match token {
            Some(t) => Ok(Some(t)),
            None if !h.without_token_on.is_empty() => Ok(None),
            None => bail!(
                "metadata service {}: no session token from {} {}",
                self.base,
                h.method,
                h.path
            ),
        }
    }

    /// GETs `path` (from the base URL) as text; any status but 2xx is an error.
    pub fn get(&self, path: &str) -> Result<String> {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.get(&url);
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        if let (Some(h), Some(t)) = (self.handshake, self.token()?) {
            req = req.header(h.send_as, t);
        }
        let mut resp = req
            .call()
            .with_context(|| format!("metadata service {path}"))?;
        resp.body_mut()
            .read_to_string()
            .with_context(|| format!("reading {path}"))
    }
}

/// A resolver for a fetcher bound to one interface ([`crate::fetch::Fetcher::fork_scoped`]):
/// as ureq's own, and an IPv6 link-local address (fe80::/10) gets the interface as its scope
/// (without one the kernel refuses to connect to it).
#[derive(Debug)]
pub struct ScopedResolver(pub u32);

/// Whether `ip` is an IPv6 link-local unicast address (fe80::/10).
pub fn is_link_local_v6(ip: &Ipv6Addr) -> bool {
    ip.segments()[0] & 0xffc0 == 0xfe80
}

impl ureq::unversioned::resolver::Resolver for ScopedResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let mut addrs = ureq::unversioned::resolver::DefaultResolver::default()
            .resolve(uri, config, timeout)?;
        for a in addrs.iter_mut() {
            if let SocketAddr::V6(v6) = a
                && is_link_local_v6(v6.ip())
                && v6.scope_id() == 0
            {
                v6.set_scope_id(self.0);
            }
        }
        Ok(addrs)
    }
}

/// The interfaces that are up, not loopback, and have an IPv6 address (of any scope), with
/// their indexes, in the order the kernel lists them: where Ignition asks OpenStack's
/// link-local metadata address (`findInterfacesWithIPv6`).
pub fn ipv6_interfaces() -> Vec<(String, u32)> {
    use nix::net::if_::InterfaceFlags;
    let mut out: Vec<(String, u32)> = Vec::new();
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return out;
    };
    for a in addrs {
        if !a.flags.contains(InterfaceFlags::IFF_UP)
            || a.flags.contains(InterfaceFlags::IFF_LOOPBACK)
        {
            continue;
        }
        let v6 = a
            .address
            .as_ref()
            .and_then(|s| s.as_sockaddr_in6())
            .is_some();
        if !v6 || out.iter().any(|(n, _)| *n == a.interface_name) {
            continue;
        }
        if let Ok(i) = nix::net::if_::if_nametoindex(a.interface_name.as_str()) {
            out.push((a.interface_name, i));
        }
    }
    out
}

/// AWS credentials of the instance role.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
    pub token: Option<String>,
    pub region: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ureq::unversioned::resolver::Resolver;

    #[test]
    fn link_local_addresses_get_the_interface_as_scope() {
        assert!(is_link_local_v6(&"fe80::a9fe:a9fe".parse().unwrap()));
        assert!(is_link_local_v6(&"febf::1".parse().unwrap()));
        assert!(!is_link_local_v6(&"fec0::1".parse().unwrap()));
        assert!(!is_link_local_v6(&"fd00:42::42".parse().unwrap()));
        let config = ureq::config::Config::default();
        let resolve = |url: &str| {
            let uri: ureq::http::Uri = url.parse().unwrap();
            ScopedResolver(7)
                .resolve(&uri, &config, Default::default())
                .unwrap()
                .to_vec()
        };
        assert_eq!(
            resolve("http://[fe80::a9fe:a9fe]/openstack/latest/user_data"),
            ["[fe80::a9fe:a9fe%7]:80".parse::<SocketAddr>().unwrap()]
        );
        // Other addresses as they are.
        assert_eq!(
            resolve("http://[fd00:42::42]:8080/"),
            ["[fd00:42::42]:8080".parse::<SocketAddr>().unwrap()]
        );
        assert_eq!(
            resolve("http://169.254.169.254/"),
            ["169.254.169.254:80".parse::<SocketAddr>().unwrap()]
        );
    }
}
