//! `ignition.proxy`: which proxy (if any) a URL goes through. `noProxy` entries are IP
//! addresses, CIDR ranges, domains (matching the domain and its subdomains), `.domain`
//! (subdomains only) or `*` (nothing is proxied).

use std::net::IpAddr;

use crate::config::types::Proxy;

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
