//! The `ignition` section (config references, CAs, timeouts, proxies) and resources, which
//! storage uses too (file contents and appends, LUKS key files).

use std::collections::HashSet;

use super::common::{V, hex_len, unique};
use crate::config::diag::Path;
use crate::config::types::*;

/// Schemes a resource `source` may use.
pub const SCHEMES: &[&str] = &["http", "https", "tftp", "s3", "gs", "data", "arn"];

pub(super) fn ignition(v: &mut V, ign: &Ignition, p: &Path) {
    let merge = p.key("config").key("merge");
    for (i, r) in ign.config.merge.iter().enumerate() {
        let rp = merge.index(i);
        resource(v, r, &rp);
        if r.url().is_none() {
            v.err(rp.key("source"), "merge references need a source");
        }
    }
    resource(v, &ign.config.replace, &p.key("config").key("replace"));
    unique(
        v,
        &merge,
        ign.config.merge.iter().map(|r| r.source.clone()),
        "source",
    );
    let cas = &ign.security.tls.certificate_authorities;
    let cap = p.key("security").key("tls").key("certificateAuthorities");
    for (i, r) in cas.iter().enumerate() {
        resource(v, r, &cap.index(i));
        if r.url().is_none() {
            v.err(
                cap.index(i).key("source"),
                "certificate authorities need a source",
            );
        }
    }
    unique(v, &cap, cas.iter().map(|r| r.source.clone()), "source");
    let t = &ign.timeouts;
    for (name, val) in [
        ("httpResponseHeaders", t.http_response_headers),
        ("httpTotal", t.http_total),
    ] {
        if val.is_some_and(|x| x < 0) {
            v.warn(
                p.key("timeouts").key(name),
                "a negative timeout means no limit",
            );
        }
    }
    for (name, val) in [
        ("httpProxy", &ign.proxy.http_proxy),
        ("httpsProxy", &ign.proxy.https_proxy),
    ] {
        if let Some(u) = val
            && !(u.starts_with("http://") || u.starts_with("https://"))
        {
            v.err(
                p.key("proxy").key(name),
                "proxy must be an http:// or https:// URL",
            );
        }
    }
    if ign
        .proxy
        .https_proxy
        .as_deref()
        .is_some_and(|u| u.starts_with("http://"))
    {
        v.warn(
            p.key("proxy").key("httpsProxy"),
            "insecure plaintext HTTP proxy specified for HTTPS resources",
        );
    }
}

pub(super) fn resource(v: &mut V, r: &Resource, p: &Path) {
    if r.source.as_deref() == Some("") {
        // `"source": ""`: empty contents (valid where a source is optional).
        if !r.http_headers.is_empty() {
            v.err(
                p.key("httpHeaders"),
                "httpHeaders need an http or https source",
            );
        }
    } else if let Some(src) = &r.source {
        match src.split_once(':') {
            Some((scheme, _)) if SCHEMES.contains(&scheme) => {
                if scheme == "data"
                    && let Err(e) = crate::encoding::data_url::check(src)
                {
                    v.err(p.key("source"), format!("{e:#}"));
                }
                if matches!(scheme, "s3" | "gs")
                    && src
                        .split_once("://")
                        .is_none_or(|(_, rest)| rest.split('/').next().unwrap_or("").is_empty())
                {
                    v.err(
                        p.key("source"),
                        format!("{scheme} URL needs a bucket: {scheme}://bucket/key"),
                    );
                }
                if !r.http_headers.is_empty() && !matches!(scheme, "http" | "https") {
                    v.err(
                        p.key("httpHeaders"),
                        "httpHeaders are only allowed with http and https sources",
                    );
                }
            }
            Some((scheme, _)) => v.err(
                p.key("source"),
                format!("unsupported URL scheme {scheme:?}"),
            ),
            None => v.err(p.key("source"), "source must be a URL"),
        }
    } else if !r.http_headers.is_empty() {
        v.err(
            p.key("httpHeaders"),
            "httpHeaders need an http or https source",
        );
    }
    if let Some(c) = &r.compression
        && !c.is_empty()
        && c != "gzip"
    {
        v.err(
            p.key("compression"),
            format!("unsupported compression {c:?}: only \"gzip\""),
        );
    }
    if r.verification.hash.is_some() && r.source.is_none() {
        v.err(
            p.key("verification").key("hash"),
            "source must be specified if verification is specified",
        );
    }
    if let Some(h) = &r.verification.hash {
        let ok = match h.split_once('-') {
            Some(("sha512", hex)) => hex_len(hex, 128),
            Some(("sha256", hex)) => hex_len(hex, 64),
            Some((f, _)) => {
                v.err(
                    p.key("verification").key("hash"),
                    format!("unsupported hash function {f:?}: use sha512 or sha256"),
                );
                true
            }
            None => false,
        };
        if !ok {
            v.err(
                p.key("verification").key("hash"),
                "hash must be sha512-<128 hex digits> or sha256-<64 hex digits>",
            );
        }
    }
    let mut names = HashSet::new();
    for (i, h) in r.http_headers.iter().enumerate() {
        if h.name.is_empty() {
            v.err(
                p.key("httpHeaders").index(i).key("name"),
                "header name must not be empty",
            );
        } else if !names.insert(h.name.as_str()) {
            v.err(
                p.key("httpHeaders").index(i).key("name"),
                format!("duplicate header {:?}", h.name),
            );
        }
        if h.value.as_deref() == Some("") {
            v.err(
                p.key("httpHeaders").index(i).key("value"),
                "header value must not be empty (leave it out to remove a header from a parent config)",
            );
        }
    }
}
