//! `agent pointer`: the pointer config a machine boots with. It merges the server's
//! `/ignition` with the pool's bearer token in an `Authorization` header and trusts the
//! server's CA.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::tokens::cmd::Tokens;
use spec::config::{self, Config, Version};

/// The pointer config a machine boots with: merge the server's /ignition with the bearer
/// header, trusting the server's CA.
pub fn pointer_config(url: &str, token: &str, ca_pem: Option<&[u8]>) -> Result<Vec<u8>> {
    use spec::config::types::{HttpHeader, Resource};
    use spec::encoding::data_url::base64_encode;
    let mut c = Config::default();
    c.ignition.config.merge.push(Resource {
        source: Some(url.to_string()),
        http_headers: vec![HttpHeader {
            name: "Authorization".into(),
            value: Some(format!("Bearer {token}")),
        }],
        ..Default::default()
    });
    if let Some(pem) = ca_pem {
        c.ignition
            .security
            .tls
            .certificate_authorities
            .push(Resource {
                source: Some(format!(
                    "data:text/plain;charset=utf-8;base64,{}",
                    base64_encode(pem)
                )),
                ..Default::default()
            });
    }
    let report = config::check(&c);
    if report.has_errors() {
        bail!("pointer config is invalid: {report}");
    }
    let v = Version::new(spec::config::version::minimum(&c).minor.max(1));
    config::to_json_pretty(&c, v).map_err(|e| anyhow::anyhow!(e))
}

/// Prints on stdout the pointer config for `pool` (its current token from `tokens`) and the
/// server's `/ignition` at `url`, trusting the CA certificate in the file `ca` if given.
pub fn print(tokens: &Tokens, pool: &str, url: &str, ca: Option<&Path>) -> Result<()> {
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        bail!("--url must be an http(s) URL, got {url:?}");
    }
    let tok = tokens.current(pool)?;
    let tok = &tok;
    let ca = match ca {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let out = pointer_config(url, tok, ca.as_deref())?;
    std::io::stdout()
        .write_all(&out)
        .context("writing to stdout")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer() {
        let b = pointer_config(
            "https://mcs:22623/ignition",
            "tok_abcdefghijklmnop",
            Some(b"-----BEGIN CERTIFICATE-----\n"),
        )
        .unwrap();
        let p = config::parse(&b).unwrap();
        assert_eq!(p.version, Version::new(1));
        let m = &p.config.ignition.config.merge[0];
        assert_eq!(
            m.http_headers[0].value.as_deref(),
            Some("Bearer tok_abcdefghijklmnop")
        );
        assert!(
            p.config.ignition.security.tls.certificate_authorities[0]
                .source
                .as_deref()
                .unwrap()
                .starts_with("data:")
        );
    }
}
