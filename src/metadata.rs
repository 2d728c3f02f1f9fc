//! A client for the HTTP metadata services of clouds (a link-local web server that answers
//! the instance about itself), independent of any one platform.
//!
//! Some services first hand out a session token, which every later request must carry: a
//! [`TokenHandshake`] says how to ask for it (method, path, headers) and in which header to
//! send it. [`AWS_IMDSV2`] is the AWS instance metadata service's (PUT `/latest/api/token`,
//! then `X-aws-ec2-metadata-token`), used today for the instance role credentials of S3;
//! with `fallback_without_token` a service that answers no token is asked without one
//! (IMDSv1). Services that want a fixed header instead (`Metadata-Flavor: Google`) use
//! [`Client::with_header`].
//!
//! Requests are bounded (2 s each, no redirects): a machine that is not on the platform must
//! not wait for a service that is not there.

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result};

/// Per-request time limit (connect, headers and body).
pub const TIMEOUT: Duration = Duration::from_secs(2);

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
    /// When no token is handed out (old service, or the handshake fails), ask without one
    /// instead of failing.
    pub fallback_without_token: bool,
}

/// AWS instance metadata service v2: PUT `/latest/api/token` for a token valid 6 hours,
/// then send it in `X-aws-ec2-metadata-token`; without a token, IMDSv1 (no header).
pub const AWS_IMDSV2: TokenHandshake = TokenHandshake {
    method: "PUT",
    path: "/latest/api/token",
    headers: &[("X-aws-ec2-metadata-token-ttl-seconds", "21600")],
    send_as: "X-aws-ec2-metadata-token",
    fallback_without_token: true,
};

/// A metadata service at one base URL. The token (if any) is asked for once, on the first
/// request, and reused.
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
                .and_then(|mut r| Ok(r.body_mut().read_to_string()?))
                .map(|t| t.trim().to_string());
            match got {
                Ok(t) if !t.is_empty() => Some(t),
                Ok(_) => {
                    log::debug!("metadata service {url}: empty token");
                    None
                }
                Err(e) => {
                    log::debug!("metadata service {url}: no token ({e:#})");
                    None
                }
            }
        });
        match token {
            Some(t) => Ok(Some(t)),
            None if h.fallback_without_token => Ok(None),
            None => anyhow::bail!(
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
