//! `ignition.proxy`: which proxy (if any) a URL goes through. `noProxy` entries are IP
//! addresses, CIDR ranges, domains (matching the domain and its subdomains), `.domain`
//! (subdomains only) or `*` (nothing is proxied).
//!
//! `https` goes through the proxy in a CONNECT tunnel (ureq). Plain `http` is sent to the
//! proxy itself in absolute form (`GET http://host:port/path HTTP/1.1`), as Go and curl do
//! and as proxies expect (many refuse CONNECT to ports other than 443): [`ProxyResolver`]
//! sends every connection to the proxy and [`AbsoluteFormConnector`] rewrites the request
//! target, adding `Proxy-Authorization` when the proxy URL carries credentials.

use std::fmt;
use std::net::IpAddr;

use ureq::config::Config as UreqConfig;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, NextTimeout, Transport,
};

use spec::config::types::Proxy;

/// Scheme and host of a URL (`[v6]` brackets and port stripped, lower-case).
pub fn scheme_host(url: &str) -> Option<(String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        hostport.split(':').next()?
    };
    Some((scheme.to_ascii_lowercase(), host.to_ascii_lowercase()))
}

/// The proxy URL for `url`, if any.
pub fn proxy_for<'p>(p: &'p Proxy, url: &str) -> Option<&'p str> {
    let (scheme, host) = scheme_host(url)?;
    let proxy = match scheme.as_str() {
        "http" => p.http_proxy.as_deref(),
        "https" => p.https_proxy.as_deref(),
        _ => None,
    }
    .filter(|s| !s.is_empty())?;
    if p.no_proxy.iter().any(|e| no_proxy_matches(e, &host)) {
        return None;
    }
    Some(proxy)
}

/// Whether the `noProxy` entry `entry` covers `host`.
pub fn no_proxy_matches(entry: &str, host: &str) -> bool {
    let e = entry.trim().to_ascii_lowercase();
    if e.is_empty() {
        return false;
    }
    if e == "*" {
        return true;
    }
    let host_ip: Option<IpAddr> = host.parse().ok();
    if let Some((net, bits)) = e.split_once('/') {
        let (Ok(net), Ok(bits), Some(ip)) = (net.parse::<IpAddr>(), bits.parse::<u32>(), host_ip)
        else {
            return false;
        };
        return in_cidr(ip, net, bits);
    }
    if let Ok(ip) = e
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return host_ip == Some(ip);
    }
    // Domains may carry a port; we match on the host only.
    let e = e.rsplit_once(':').map_or(e.as_str(), |(h, _)| h);
    if let Some(suffix) = e.strip_prefix('.') {
        return host.ends_with(&format!(".{suffix}"));
    }
    let e = e.strip_prefix("*.").unwrap_or(e);
    host == e || host.ends_with(&format!(".{e}"))
}

/// Resolves every URL to the proxy's address, so that connections go to the proxy.
#[derive(Debug)]
pub struct ProxyResolver {
    proxy: Uri,
    inner: DefaultResolver,
}

impl ProxyResolver {
    /// `proxy` is the proxy's `http://host:port` (no credentials).
    pub fn new(proxy: Uri) -> Self {
        ProxyResolver {
            proxy,
            inner: DefaultResolver::default(),
        }
    }
}

impl Resolver for ProxyResolver {
    fn resolve(
        &self,
        _target: &Uri,
        config: &UreqConfig,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        self.inner.resolve(&self.proxy, config, timeout)
    }
}

/// Wraps the connection to the proxy so the request goes out in absolute form.
pub struct AbsoluteFormConnector {
    /// `Proxy-Authorization` value, if the proxy URL has credentials.
    auth: Option<String>,
}

impl AbsoluteFormConnector {
    pub fn new(username: Option<&str>, password: Option<&str>) -> Self {
        let auth = (username.is_some() || password.is_some()).then(|| {
            let raw = format!("{}:{}", username.unwrap_or(""), password.unwrap_or(""));
            format!("Basic {}", spec::encoding::base64_encode(raw.as_bytes()))
        });
        AbsoluteFormConnector { auth }
    }
}

impl fmt::Debug for AbsoluteFormConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AbsoluteFormConnector")
    }
}

impl<In: Transport> Connector<In> for AbsoluteFormConnector {
    type Out = Either<In, AbsoluteForm>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(t) = chained else {
            return Ok(None);
        };
        if details.needs_tls() {
            // Never send an https URL to the proxy in the clear.
            return Err(ureq::Error::BadUri(format!(
                "{}: https through an HTTP proxy needs a CONNECT tunnel",
                details.uri
            )));
        }
        let authority = details
            .uri
            .authority()
            .ok_or_else(|| ureq::Error::BadUri(format!("{}: no host", details.uri)))?;
        Ok(Some(Either::B(AbsoluteForm {
            inner: Box::new(t),
            origin: format!("http://{authority}"),
            auth: self.auth.clone(),
            sent_head: false,
        })))
    }
}

/// A connection to an HTTP proxy carrying one request in absolute form.
pub struct AbsoluteForm {
    inner: Box<dyn Transport>,
    origin: String,
    auth: Option<String>,
    sent_head: bool,
}

impl fmt::Debug for AbsoluteForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbsoluteForm")
            .field("origin", &self.origin)
            .finish()
    }
}

impl Transport for AbsoluteForm {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        if self.sent_head {
            return self.inner.transmit_output(amount, timeout);
        }
        self.sent_head = true;
        let head = self.inner.buffers().output()[..amount].to_vec();
        let out = absolute_form(&head, &self.origin, self.auth.as_deref());
        let room = self.inner.buffers().output().len().max(1);
        for chunk in out.chunks(room) {
            self.inner.buffers().output()[..chunk.len()].copy_from_slice(chunk);
            self.inner.transmit_output(chunk.len(), timeout)?;
        }
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }
}

/// Rewrites the request line at the start of `head` from origin form (`GET /p HTTP/1.1`) to
/// absolute form (`GET http://host:port/p HTTP/1.1`) and adds `Proxy-Authorization`.
pub fn absolute_form(head: &[u8], origin: &str, auth: Option<&str>) -> Vec<u8> {
    let Some(sp) = head.iter().position(|&b| b == b' ') else {
        return head.to_vec();
    };
    let mut out = Vec::with_capacity(head.len() + origin.len() + 64);
    out.extend_from_slice(&head[..=sp]);
    let rest = &head[sp + 1..];
    if rest.first() == Some(&b'/') {
        out.extend_from_slice(origin.as_bytes());
    }
    match (auth, rest.windows(2).position(|w| w == b"\r\n")) {
        (Some(a), Some(eol)) => {
            out.extend_from_slice(&rest[..eol + 2]);
            out.extend_from_slice(format!("Proxy-Authorization: {a}\r\n").as_bytes());
            out.extend_from_slice(&rest[eol + 2..]);
        }
        _ => out.extend_from_slice(rest),
    }
    out
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u32) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) if bits <= 32 => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) if bits <= 128 => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_table() {
        let cases = [
            ("*", "anything.example", true),
            ("10.0.0.1", "10.0.0.1", true),
            ("10.0.0.1", "10.0.0.2", false),
            ("10.0.0.0/8", "10.2.3.4", true),
            ("10.0.0.0/8", "11.2.3.4", false),
            ("10.0.0.0/8", "example.com", false),
            ("fd00::/8", "fd12::1", true),
            ("::1", "::1", true),
            ("example.com", "example.com", true),
            ("example.com", "a.example.com", true),
            ("example.com", "badexample.com", false),
            (".example.com", "a.example.com", true),
            (".example.com", "example.com", false),
            ("example.com:8080", "example.com", true),
            ("", "example.com", false),
        ];
        for (entry, host, want) in cases {
            assert_eq!(no_proxy_matches(entry, host), want, "{entry} vs {host}");
        }
    }

    #[test]
    fn absolute_form_request_line() {
        let head = b"GET /a/b?c=1 HTTP/1.1\r\nhost: h:81\r\n\r\n";
        assert_eq!(
            absolute_form(head, "http://h:81", None),
            b"GET http://h:81/a/b?c=1 HTTP/1.1\r\nhost: h:81\r\n\r\n"
        );
        assert_eq!(
            String::from_utf8(absolute_form(head, "http://h:81", Some("Basic dTpw"))).unwrap(),
            "GET http://h:81/a/b?c=1 HTTP/1.1\r\nProxy-Authorization: Basic dTpw\r\nhost: h:81\r\n\r\n"
        );
        // Already absolute, or not a request line: unchanged.
        let abs = b"GET http://x/ HTTP/1.1\r\n\r\n";
        assert_eq!(absolute_form(abs, "http://h", None), abs);
        assert_eq!(absolute_form(b"garbage", "http://h", None), b"garbage");
        let c = AbsoluteFormConnector::new(Some("user"), Some("pass"));
        assert_eq!(c.auth.as_deref(), Some("Basic dXNlcjpwYXNz"));
        assert_eq!(AbsoluteFormConnector::new(None, None).auth, None);
    }

    #[test]
    fn proxy_choice() {
        let p = Proxy {
            http_proxy: Some("http://proxy:3128".into()),
            https_proxy: None,
            no_proxy: vec!["internal.lan".into()],
        };
        assert_eq!(proxy_for(&p, "http://x.org/a"), Some("http://proxy:3128"));
        assert_eq!(proxy_for(&p, "https://x.org/a"), None);
        assert_eq!(proxy_for(&p, "http://a.internal.lan:80/a"), None);
        assert_eq!(
            scheme_host("http://u:p@[::1]:80/x"),
            Some(("http".into(), "::1".into()))
        );
    }
}
