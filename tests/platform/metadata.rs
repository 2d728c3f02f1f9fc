//! The platform-independent metadata client (`agent::platform::metadata`) against a real HTTP
//! server on 127.0.0.1: the token handshake (AWS IMDSv2 and a strict one), the IMDSv1
//! fallback, fixed headers, and errors.

use crate::support;

use agent::platform::metadata::{AWS_IMDSV2, Client, TokenHandshake};
use support::faulty_http::{Behavior, Server};

fn ok(body: &str) -> Vec<Behavior> {
    vec![Behavior::Ok(body.as_bytes().to_vec())]
}

#[test]
fn imdsv2_asks_for_a_token_once_and_sends_it() {
    let s = Server::start();
    s.route("/latest/api/token", ok("tok-123\n"));
    s.route("/latest/meta-data/a", ok("alpha"));
    s.route("/latest/meta-data/b", ok("beta"));
    let c = Client::new(&s.url("/")).with_token_handshake(AWS_IMDSV2);
    assert_eq!(c.get("/latest/meta-data/a").unwrap(), "alpha");
    assert_eq!(c.get("/latest/meta-data/b").unwrap(), "beta");
    let tok = s.requests("/latest/api/token");
    assert_eq!(tok.len(), 1, "the token is asked for once");
    assert_eq!(tok[0].method, "PUT");
    assert_eq!(
        tok[0].header("x-aws-ec2-metadata-token-ttl-seconds"),
        Some("21600")
    );
    for p in ["/latest/meta-data/a", "/latest/meta-data/b"] {
        let r = s.requests(p);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].method, "GET");
        assert_eq!(r[0].header("x-aws-ec2-metadata-token"), Some("tok-123"));
    }
}

#[test]
fn imdsv1_fallback_without_a_token() {
    let s = Server::start();
    s.route("/latest/api/token", vec![Behavior::Status(403)]);
    s.route("/latest/meta-data/a", ok("alpha"));
    let c = Client::new(&s.url("")).with_token_handshake(AWS_IMDSV2);
    assert_eq!(c.get("/latest/meta-data/a").unwrap(), "alpha");
    let r = s.requests("/latest/meta-data/a");
    assert_eq!(r[0].header("x-aws-ec2-metadata-token"), None);
    assert_eq!(s.requests("/latest/api/token").len(), 1);
}

/// A handshake without fallback (as Akamai's): no token, no request.
const STRICT: TokenHandshake = TokenHandshake {
    method: "PUT",
    path: "/v1/token",
    headers: &[("Metadata-Token-Expiry-Seconds", "3600")],
    send_as: "Metadata-Token",
    without_token_on: &[],
};

#[test]
fn a_strict_handshake_fails_without_a_token() {
    let s = Server::start();
    s.route("/v1/user-data", ok("data"));
    let c = Client::new(&s.url("")).with_token_handshake(STRICT);
    let e = c.get("/v1/user-data").unwrap_err();
    assert_eq!(
        format!("{e:#}"),
        format!(
            "metadata service {}: no session token from PUT /v1/token",
            s.url("")
        )
    );
    assert!(s.requests("/v1/user-data").is_empty());
    // With a token: the handshake's own header goes with it, fixed headers with both.
    s.route("/v1/token", ok("t0k"));
    let c = Client::new(&s.url(""))
        .with_token_handshake(STRICT)
        .with_header("Metadata-Flavor", "Test");
    assert_eq!(c.get("/v1/user-data").unwrap(), "data");
    let t = &s.requests("/v1/token")[1];
    assert_eq!(t.header("metadata-token-expiry-seconds"), Some("3600"));
    assert_eq!(t.header("metadata-flavor"), Some("Test"));
    let g = &s.requests("/v1/user-data")[0];
    assert_eq!(g.header("metadata-token"), Some("t0k"));
    assert_eq!(g.header("metadata-flavor"), Some("Test"));
}

#[test]
fn errors_name_the_path() {
    let s = Server::start();
    let c = Client::new(&s.url("")).with_header("Metadata-Flavor", "Google");
    let e = c.get("/computeMetadata/v1/instance/attributes/user-data");
    let e = format!("{:#}", e.unwrap_err());
    assert!(
        e.starts_with("metadata service /computeMetadata/v1/instance/attributes/user-data: ")
            && e.contains("404"),
        "{e}"
    );
    // Nothing listening: an error, quickly (bounded by the client's time limit).
    let dead = format!("http://127.0.0.1:{}", support::fetch::free_tcp_port());
    assert!(Client::new(&dead).get("/x").is_err());
}
