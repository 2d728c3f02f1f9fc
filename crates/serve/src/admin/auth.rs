//! Who the admin listener answers (docs/reports.md, "Reading the inventory"):
//!
//! - [`Hosts`]: a request's `Host` must name the listener (its bound address, `localhost:PORT`,
//!   or a `--admin-host` name), so a page on another name that resolves to this host (DNS
//!   rebinding) reads nothing; a state-changing request's `Origin`, when there is one, must
//!   be the listener's too.
//! - [`ADMIN_HEADER`]: a state-changing request (anything but GET and HEAD) must carry
//!   `X-Agent-Admin: 1`, which no cross-origin form or fetch can send without a CORS
//!   preflight (never granted here).
//! - [`Challenges`]: the admin token proven without sending it. The client asks
//!   `GET /auth/challenge` for a nonce, sends `Authorization: Agent-HMAC nonce=N, mac=M` with
//!   `M` = [`request_mac`] of the token, the nonce, the method and the target, and the
//!   server answers with [`PROOF_HEADER`] = [`answer_proof`] of the token, the request and
//!   the answer. A listener that does not hold the token (another process on the admin port)
//!   learns neither the token nor anything it can replay, and cannot make an answer the
//!   client takes. `agent machines` authenticates this way only.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};

use sha2::{Digest, Sha256};

/// The header a state-changing request must carry (with the value `1`).
pub const ADMIN_HEADER: &str = "X-Agent-Admin";
/// The answer's proof of the token, for a request authenticated with [`AUTH_SCHEME`].
pub const PROOF_HEADER: &str = "X-Agent-Admin-Proof";
/// The `Authorization` scheme of the challenge-response.
pub const AUTH_SCHEME: &str = "Agent-HMAC";
/// Where a client asks for a nonce (no credential needed).
pub const CHALLENGE_PATH: &str = "/auth/challenge";
/// How long a nonce may be used, in seconds (once).
pub const NONCE_TTL: u64 = 60;
/// Spent nonces remembered at most (each only within [`NONCE_TTL`]; only requests that
/// passed the token's check add one).
const SPENT_MAX: usize = 100_000;

/// The `Host` values the admin listener answers to.
#[derive(Debug, Clone)]
pub struct Hosts {
    /// `host:port` forms that must match exactly (lowercase): the bound address, and the
    /// loopback names for the bound port.
    exact: Vec<String>,
    /// `--admin-host` names: with a port, exactly; without one, on any port.
    names: Vec<String>,
}

impl Hosts {
    /// For a listener bound to `bound`, with the `--admin-host` names `names` (checked by
    /// [`parse_admin_host`]).
    pub fn new(bound: SocketAddr, names: &[String]) -> Hosts {
        let port = bound.port();
        let mut exact = vec![format!("localhost:{port}")];
        let ip = bound.ip();
        if ip.is_unspecified() {
            // Any address: the loopback ones are this host's own; the others are named with
            // --admin-host (0.0.0.0 itself is never a Host to trust).
            exact.push(format!("127.0.0.1:{port}"));
            exact.push(format!("[::1]:{port}"));
        } else {
            exact.push(SocketAddr::new(ip, port).to_string());
        }
        Hosts {
            exact,
            names: names.iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }

    /// Whether `host` (a `Host` header's value) names this listener.
    pub fn allows(&self, host: &str) -> bool {
        let h = host.trim().to_ascii_lowercase();
        if h.is_empty() {
            return false;
        }
        let (host, port) = split_port(&h);
        // No port: the default one (a listener on port 80).
        if self.exact.contains(&h) || (port.is_none() && self.exact.contains(&format!("{h}:80"))) {
            return true;
        }
        self.names.iter().any(|n| {
            let (name, want) = split_port(n);
            name == host && (want.is_none() || want == port)
        })
    }

    /// Whether `origin` (an `Origin` header's value) is this listener's: `http://` or
    /// `https://` (a TLS proxy in front) and a host it [`allows`](Hosts::allows) (without a
    /// port: the scheme's default).
    pub fn allows_origin(&self, origin: &str) -> bool {
        let o = origin.trim().to_ascii_lowercase();
        let (rest, default_port) = if let Some(r) = o.strip_prefix("http://") {
            (r, 80)
        } else if let Some(r) = o.strip_prefix("https://") {
            (r, 443)
        } else {
            return false;
        };
        if rest.is_empty() || rest.contains('/') {
            return false;
        }
        match split_port(rest) {
            (_, Some(_)) => self.allows(rest),
            (host, None) => self.allows(&format!("{host}:{default_port}")),
        }
    }

    /// The host forms accepted, for messages.
    pub fn describe(&self) -> String {
        let mut all = self.exact.clone();
        all.extend(self.names.iter().cloned());
        all.join(", ")
    }
}

/// `host[:port]` (IPv6 in brackets) as host and port; a port that is not a number is part of
/// the host (and matches nothing).
fn split_port(s: &str) -> (&str, Option<&str>) {
    let at = if s.starts_with('[') {
        s.find("]:").map(|i| i + 1)
    } else {
        s.rfind(':')
    };
    match at {
        Some(i) if s.len() > i + 1 && s[i + 1..].bytes().all(|b| b.is_ascii_digit()) => {
            (&s[..i], Some(&s[i + 1..]))
        }
        _ => (s, None),
    }
}

/// `--admin-host NAME`: a DNS name or IP address (IPv6 in brackets), optionally with
/// `:PORT`; stored lowercase.
pub fn parse_admin_host(s: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "invalid --admin-host {s:?}: a host name or IP address (IPv6 in brackets), optionally with :PORT"
        )
    };
    let s = s.trim().to_ascii_lowercase();
    let (host, port) = if let Some(r) = s.strip_prefix('[') {
        let (ip, after) = r.split_once(']').ok_or_else(bad)?;
        ip.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(bad)?),
        };
        (format!("[{ip}]"), port)
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (s.clone(), None),
        }
    };
    if let Some(p) = port
        && p.parse::<u16>().is_err()
    {
        return Err(bad());
    }
    let name_ok = host.starts_with('[')
        || (!host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            }));
    if !name_ok {
        return Err(bad());
    }
    Ok(s)
}

/// HMAC-SHA256 of `parts`, each followed by a line break, under `key`; hex.
fn mac(key: &[u8], parts: &[&str]) -> String {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let mut ctx = ring::hmac::Context::with_key(&k);
    for p in parts {
        ctx.update(p.as_bytes());
        ctx.update(b"\n");
    }
    spec::encoding::hex(ctx.sign().as_ref())
}

/// What a client sends to prove it holds `token`: the MAC of the server's `nonce`, the
/// request's `method` and its `target` (path and query as sent).
pub fn request_mac(token: &str, nonce: &str, method: &str, target: &str) -> String {
    mac(
        token.as_bytes(),
        &["agent-serve-admin request", nonce, method, target],
    )
}

/// What the server sends to prove it holds `token`: the MAC of the request (its nonce and
/// MAC) and of the answer (its status and body).
pub fn answer_proof(
    token: &str,
    nonce: &str,
    request_mac: &str,
    status: u16,
    body: &[u8],
) -> String {
    let digest = spec::encoding::hex(&Sha256::digest(body));
    mac(
        token.as_bytes(),
        &[
            "agent-serve-admin answer",
            nonce,
            request_mac,
            &status.to_string(),
            &digest,
        ],
    )
}

/// The nonces of the challenge-response: made from the time and random bytes, and signed
/// with a key of this process, so the server keeps none it handed out (any client may ask
/// for them); each is taken once ([`Challenges::check`] remembers spent ones while they are
/// valid).
pub struct Challenges {
    key: ring::hmac::Key,
    spent: Mutex<HashMap<String, u64>>,
}

/// A request authenticated by the challenge-response: what its answer's proof covers.
#[derive(Debug, Clone)]
pub struct Proven {
    pub nonce: String,
    pub mac: String,
}

impl Challenges {
    pub fn new() -> anyhow::Result<Challenges> {
        use ring::rand::SecureRandom;
        let mut k = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut k)
            .map_err(|_| anyhow::anyhow!("reading random bytes for the admin nonces"))?;
        Ok(Challenges {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &k),
            spent: Mutex::default(),
        })
    }

    /// A new nonce (hex: the time, 16 random bytes, their signature).
    pub fn issue(&self, now: u64) -> String {
        use ring::rand::SecureRandom;
        let mut r = [0u8; 16];
        // SystemRandom does not fail once the key was made; a zero nonce is still unique
        // by its time and signed.
        let _ = ring::rand::SystemRandom::new().fill(&mut r);
        let mut body = now.to_be_bytes().to_vec();
        body.extend_from_slice(&r);
        let tag = ring::hmac::sign(&self.key, &body);
        body.extend_from_slice(&tag.as_ref()[..16]);
        spec::encoding::hex(&body)
    }

    /// Checks `authorization` (`Agent-HMAC nonce=N, mac=M`) for `method target` against
    /// `token`: the nonce is one of ours, not older than [`NONCE_TTL`], not spent; the MAC
    /// is the token's. Err: why not (said to the client).
    pub fn check(
        &self,
        token: &str,
        authorization: &str,
        method: &str,
        target: &str,
        now: u64,
    ) -> Result<Proven, &'static str> {
        let rest = authorization
            .strip_prefix(AUTH_SCHEME)
            .and_then(|r| r.strip_prefix(' '))
            .ok_or("not an Agent-HMAC authorization")?;
        let (mut nonce, mut given) = (None, None);
        for part in rest.split(',') {
            match part.trim().split_once('=') {
                Some(("nonce", v)) => nonce = Some(v.trim_matches('"')),
                Some(("mac", v)) => given = Some(v.trim_matches('"')),
                _ => {}
            }
        }
        let (Some(nonce), Some(given)) = (nonce, given) else {
            return Err("the Agent-HMAC authorization needs nonce= and mac=");
        };
        let raw = unhex(nonce).ok_or("the nonce is not one this server made")?;
        if raw.len() != 40
            || !ct_eq16(
                &ring::hmac::sign(&self.key, &raw[..24]).as_ref()[..16],
                &raw[24..],
            )
        {
            return Err("the nonce is not one this server made");
        }
        let made = u64::from_be_bytes(raw[..8].try_into().unwrap_or_default());
        if made > now + 1 || now.saturating_sub(made) > NONCE_TTL {
            return Err("the nonce has expired: ask /auth/challenge for a new one");
        }
        let want = request_mac(token, nonce, method, target);
        let same = {
            let (a, b): ([u8; 32], [u8; 32]) = (
                Sha256::digest(want.as_bytes()).into(),
                Sha256::digest(given.to_ascii_lowercase().as_bytes()).into(),
            );
            crate::tokens::ct_eq(&a, &b)
        };
        if !same {
            return Err("the admin token does not match");
        }
        let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        // Spent by its bytes: the same nonce in another spelling is the same nonce.
        let key = spec::encoding::hex(&raw);
        if spent.contains_key(&key) {
            return Err("the nonce was used already: ask /auth/challenge for a new one");
        }
        if spent.len() >= SPENT_MAX {
            spent.retain(|_, t| now.saturating_sub(*t) <= NONCE_TTL);
            if spent.len() >= SPENT_MAX {
                return Err("too many admin requests in the last minute: retry");
            }
        }
        spent.insert(key, made);
        Ok(Proven {
            nonce: nonce.to_string(),
            mac: want,
        })
    }
}

fn ct_eq16(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 256 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_the_listeners_own() {
        let names = ["inventory.example".to_string(), "ops.example:8443".into()];
        let on_loopback = Hosts::new("127.0.0.1:22625".parse().unwrap(), &names);
        let on_any = Hosts::new("0.0.0.0:22625".parse().unwrap(), &[]);
        let on_v6 = Hosts::new("[::1]:22625".parse().unwrap(), &[]);
        let on_80 = Hosts::new("127.0.0.1:80".parse().unwrap(), &[]);
        for (hosts, host, ok) in [
            (&on_loopback, "127.0.0.1:22625", true),
            (&on_loopback, "localhost:22625", true),
            (&on_loopback, "LOCALHOST:22625", true),
            (&on_loopback, "inventory.example", true),
            (&on_loopback, "inventory.example:9999", true),
            (&on_loopback, "ops.example:8443", true),
            (&on_loopback, "ops.example", false),
            (&on_loopback, "ops.example:443", false),
            (&on_loopback, "127.0.0.1:22626", false),
            (&on_loopback, "127.0.0.1", false),
            (&on_loopback, "localhost", false),
            (&on_loopback, "rebind.attacker.example:22625", false),
            (&on_loopback, "inventory.example.attacker.example", false),
            (&on_loopback, "", false),
            (&on_any, "127.0.0.1:22625", true),
            (&on_any, "[::1]:22625", true),
            (&on_any, "0.0.0.0:22625", false),
            (&on_any, "10.0.0.5:22625", false),
            (&on_v6, "[::1]:22625", true),
            (&on_v6, "127.0.0.1:22625", false),
            (&on_80, "127.0.0.1", true),
            (&on_80, "localhost", true),
        ] {
            assert_eq!(hosts.allows(host), ok, "{host:?} on {hosts:?}");
        }
        for (origin, ok) in [
            ("http://127.0.0.1:22625", true),
            ("http://localhost:22625", true),
            ("https://inventory.example", true),
            ("http://127.0.0.1:8000", false),
            ("http://127.0.0.1", false),
            ("null", false),
            ("file://", false),
            ("http://127.0.0.1:22625/x", false),
            ("http://rebind.attacker.example:22625", false),
        ] {
            assert_eq!(on_loopback.allows_origin(origin), ok, "{origin:?}");
        }
        assert!(on_80.allows_origin("http://127.0.0.1"));
    }

    #[test]
    fn admin_host_names_are_checked() {
        for (given, want) in [
            ("Inventory.Example", Some("inventory.example")),
            ("inventory.example:8443", Some("inventory.example:8443")),
            ("10.0.0.5", Some("10.0.0.5")),
            ("[fd00::1]", Some("[fd00::1]")),
            ("[fd00::1]:22625", Some("[fd00::1]:22625")),
            ("", None),
            ("a..b", None),
            ("name:port", None),
            ("name:99999", None),
            ("http://name", None),
            ("[fd00::1", None),
            ("[nope]", None),
            ("a b", None),
        ] {
            assert_eq!(parse_admin_host(given).ok().as_deref(), want, "{given:?}");
        }
        assert!(
            parse_admin_host("a b")
                .unwrap_err()
                .contains("--admin-host")
        );
    }

    /// The challenge-response: the right token's MAC of the request passes once; another
    /// token, another request, a nonce of another process, an expired or a spent nonce do
    /// not; the answer's proof is the token's and the answer's.
    #[test]
    fn a_nonce_proves_the_token_once() {
        let c = Challenges::new().unwrap();
        let token = "0123456789abcdef0123";
        let now = 1_000_000;
        let auth = |nonce: &str, mac: &str| format!("{AUTH_SCHEME} nonce={nonce}, mac={mac}");
        let n = c.issue(now);
        let mac = request_mac(token, &n, "GET", "/machines?limit=5");
        let ok = auth(&n, &mac);
        assert_eq!(
            c.check(
                "another-token-0000000",
                &ok,
                "GET",
                "/machines?limit=5",
                now
            )
            .unwrap_err(),
            "the admin token does not match"
        );
        assert!(
            c.check(token, &ok, "POST", "/machines?limit=5", now)
                .is_err()
        );
        assert!(c.check(token, &ok, "GET", "/machines", now).is_err());
        let p = c
            .check(token, &ok, "GET", "/machines?limit=5", now + 3)
            .unwrap();
        assert_eq!(p.mac, mac);
        assert!(
            c.check(token, &ok, "GET", "/machines?limit=5", now + 3)
                .unwrap_err()
                .contains("used already")
        );
        // The same nonce spelt in capitals is the same nonce.
        let upper = n.to_ascii_uppercase();
        let again = auth(&upper, &request_mac(token, &upper, "GET", "/"));
        assert!(c.check(token, &again, "GET", "/", now).is_err());
        // Expired; from another process (another key); malformed.
        let old = c.issue(now - NONCE_TTL - 1);
        let late = auth(&old, &request_mac(token, &old, "GET", "/"));
        assert!(
            c.check(token, &late, "GET", "/", now)
                .unwrap_err()
                .contains("expired")
        );
        let foreign = Challenges::new().unwrap().issue(now);
        let other = auth(&foreign, &request_mac(token, &foreign, "GET", "/"));
        assert!(c.check(token, &other, "GET", "/", now).is_err());
        for bad in [
            "Agent-HMAC",
            "Agent-HMAC nonce=zz, mac=00",
            "Bearer x",
            "Agent-HMAC mac=00",
        ] {
            assert!(c.check(token, bad, "GET", "/", now).is_err(), "{bad}");
        }
        // The answer's proof covers the request and the answer.
        let proof = answer_proof(token, &p.nonce, &p.mac, 200, b"{}");
        assert_ne!(proof, answer_proof(token, &p.nonce, &p.mac, 200, b"{ }"));
        assert_ne!(proof, answer_proof(token, &p.nonce, &p.mac, 404, b"{}"));
        assert_ne!(
            proof,
            answer_proof("another-token-0000000", &p.nonce, &p.mac, 200, b"{}")
        );
    }
}
