//! Bearer tokens through a full TTL with a fake clock (the binary's test clock file):
//! rotation at TTL/2, overlap, expiry, revocation, shared state between replicas, the
//! `agent token` and `agent pointer` commands.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::serve::*;

fn agent(args: &[&str], clock: &Path) -> String {
    let out = Command::new(AGENT)
        .args(args)
        .env("AGENT_SERVE_TEST_CLOCK", clock)
        .output()
        .expect("running agent");
    assert!(
        out.status.success(),
        "agent {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn current_token(tokens: &Path, clock: &Path, pool: &str) -> Option<String> {
    let out = agent(
        &[
            "token",
            "show",
            "--token-dir",
            tokens.to_str().unwrap(),
            "--reveal",
        ],
        clock,
    );
    out.lines().find_map(|l| {
        let f: Vec<&str> = l.split('\t').collect();
        (f.len() == 3 && f[0] == pool && f[1] == "token").then(|| f[2].to_string())
    })
}

/// Sets the fake clock atomically (the server reads it on every check).
fn set_clock(clock: &Path, t: u64) {
    let tmp = clock.with_extension("tmp");
    std::fs::write(&tmp, t.to_string()).unwrap();
    std::fs::rename(&tmp, clock).unwrap();
}

fn ign(s: &Server, tok: &str) -> u16 {
    s.get_h("/ignition", &[("Authorization", &format!("Bearer {tok}"))])
        .status
}

#[test]
fn tokens_through_a_full_ttl() {
    let t = TempDir::new("tokens");
    let src = t.path().join("src");
    let clock = t.path().join("clock");
    set_clock(&clock, 1000000);
    write(&src.join("pools/worker.ign"), &worker_config("w"));
    write(&src.join("pools/master.ign"), &worker_config("m"));
    let envs = [("AGENT_SERVE_TEST_CLOCK", clock.to_str().unwrap())];
    let s = serve_args(&src)
        .poll_1s()
        .arg("--token-ttl", "100s")
        .start_env(&envs);
    // The store is in the server's state directory, never in the source.
    let tokens = s.state_dir.join("tokens");
    let t1 = current_token(&tokens, &clock, "worker").expect("a token is issued at start");
    assert!(!src.join("tokens").exists());
    assert_eq!(ign(&s, &t1), 200);
    let r = s.get_h("/ignition", &[("Authorization", &format!("Bearer {t1}"))]);
    assert_eq!(
        r.body,
        s.get("/config/worker").body,
        "/ignition serves the token's pool"
    );
    let r = s.get_h(
        "/ignition",
        &[
            ("Authorization", &format!("Bearer {t1}")),
            (
                "Accept",
                "application/vnd.coreos.ignition+json;version=3.4.0",
            ),
        ],
    );
    assert!(r.text().contains("\"3.4.0\""));
    // The state file holds hashes only.
    let state = std::fs::read_to_string(tokens.join("..data/state.json")).unwrap();
    assert!(!state.contains(&t1));

    // Just before TTL/2: no rotation.
    set_clock(&clock, 1000049);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        current_token(&tokens, &clock, "worker").as_deref(),
        Some(t1.as_str())
    );
    // At TTL/2: rotated, both valid.
    set_clock(&clock, 1000050);
    s.wait_for("rotation", 10, |_| {
        current_token(&tokens, &clock, "worker").as_deref() != Some(t1.as_str())
    });
    let t2 = current_token(&tokens, &clock, "worker").unwrap();
    s.wait_for("the server to load the rotated token", 5, |s| {
        ign(s, &t2) == 200
    });
    assert_eq!(ign(&s, &t1), 200, "previous token still valid");
    assert_eq!(ign(&s, &t2), 200);
    let show = agent(
        &[
            "token",
            "show",
            "--token-dir",
            tokens.to_str().unwrap(),
            "--pool",
            "worker",
        ],
        &clock,
    );
    assert!(
        show.contains("worker\tcurrent") && show.contains("worker\tprevious"),
        "{show}"
    );
    assert!(!show.contains(&t2), "show without --reveal prints no token");
    // At TTL: the first token expires at once (5xx so a machine retries), the second rotates.
    set_clock(&clock, 1000100);
    assert_eq!(ign(&s, &t1), 503);
    assert_eq!(ign(&s, &t2), 200);
    s.wait_for("second rotation", 10, |_| {
        current_token(&tokens, &clock, "worker").as_deref() != Some(t2.as_str())
    });
    let t3 = current_token(&tokens, &clock, "worker").unwrap();
    s.wait_for("the server to load the rotated token", 5, |s| {
        ign(s, &t3) == 200
    });
    assert_eq!(ign(&s, &t3), 200);
    let m = s.get("/metrics").text();
    assert!(m.contains("agent_serve_token_rotations_total 4"), "{m}");

    // A second replica sharing the token directory (--token-dir) accepts the same tokens;
    // with --require-token /config/<pool> needs the pool's own token.
    let s2 = serve_args(&src)
        .poll_1s()
        .arg("--token-dir", tokens.to_str().unwrap())
        .arg("--token-ttl", "100s")
        .switch("--require-token")
        .start_env(&envs);
    assert_eq!(ign(&s2, &t3), 200);
    let mt = current_token(&tokens, &clock, "master").unwrap();
    assert_eq!(s2.get("/config/master").status, 401);
    assert_eq!(
        s2.get_h(
            "/config/master",
            &[("Authorization", &format!("Bearer {mt}"))]
        )
        .status,
        200
    );
    assert_eq!(
        s2.get_h(
            "/config/master",
            &[("Authorization", &format!("Bearer {t3}"))]
        )
        .status,
        403
    );
    assert_eq!(
        s2.get_h(
            "/config/master",
            &[("Authorization", "Bearer ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ")]
        )
        .status,
        503
    );

    // The pointer config a machine boots with.
    let ca = t.path().join("ca.pem");
    write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    );
    let url = s.url("/ignition");
    let ptr = agent(
        &[
            "pointer",
            "--pool",
            "worker",
            "--url",
            &url,
            "--ca",
            ca.to_str().unwrap(),
            "--token-dir",
            tokens.to_str().unwrap(),
        ],
        &clock,
    );
    let p = spec::config::parse(ptr.as_bytes()).unwrap();
    let m = &p.config.ignition.config.merge[0];
    assert_eq!(m.source.as_deref(), Some(url.as_str()));
    let auth = m.http_headers[0].value.clone().unwrap();
    assert_eq!(auth, format!("Bearer {t3}"));
    assert!(
        p.config.ignition.security.tls.certificate_authorities[0]
            .source
            .as_deref()
            .unwrap()
            .starts_with("data:")
    );
    assert_eq!(
        s.get_h("/ignition", &[("Authorization", &auth)]).status,
        200
    );

    // `agent token revoke`: every master token is gone at once; the server issues a new one.
    agent(
        &[
            "token",
            "revoke",
            "--token-dir",
            tokens.to_str().unwrap(),
            "--pool",
            "master",
        ],
        &clock,
    );
    // Replicas notice the store change by inotify on the token directory.
    s.wait_for("the revocation to reach the server", 5, |s| {
        ign(s, &mt) == 503
    });
    s.wait_for("a new master token", 10, |_| {
        current_token(&tokens, &clock, "master").is_some_and(|t| t != mt)
    });

    // The pool leaves the source: its tokens are revoked at once.
    std::fs::remove_file(src.join("pools/worker.ign")).unwrap();
    s.wait_for("revocation", 10, |_| {
        current_token(&tokens, &clock, "worker").is_none()
    });
    assert_eq!(ign(&s, &t3), 503);
    let show = agent(
        &["token", "show", "--token-dir", tokens.to_str().unwrap()],
        &clock,
    );
    assert!(!show.contains("worker"), "{show}");
}

/// A store an older server left in the source (`SOURCE/tokens`, its old default) moves to the
/// state directory once, with a log line; its tokens stay valid and leave the source tree.
#[test]
fn an_old_store_in_the_source_moves_to_the_state_dir_once() {
    let t = TempDir::new("tokens-migrate");
    let src = t.path().join("src");
    let state = t.path().join("state");
    let clock = t.path().join("clock");
    set_clock(&clock, 1000000);
    write(&src.join("pools/worker.ign"), &worker_config("w"));
    let envs = [("AGENT_SERVE_TEST_CLOCK", clock.to_str().unwrap())];
    let old = src.join("tokens");
    // The old layout, as an older server wrote it by default.
    let tok = {
        let s = serve_args(&src)
            .arg("--token-dir", old.to_str().unwrap())
            .start_env(&envs);
        let tok = current_token(&old, &clock, "worker").expect("a token");
        assert_eq!(ign(&s, &tok), 200);
        tok
    };
    assert!(old.join("..data").exists());
    let log = t.path().join("serve.log");
    let s = serve_args(&src)
        .arg("--state-dir", state.to_str().unwrap())
        .start_logged(&envs, Some(&log));
    assert_eq!(ign(&s, &tok), 200, "the moved token is still valid");
    assert!(!old.exists(), "the plaintext tokens left the source");
    let new = state.join("tokens");
    assert_eq!(
        current_token(&new, &clock, "worker").as_deref(),
        Some(tok.as_str())
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.matches("moved the token store").count(),
        1,
        "one log line: {text}"
    );
    drop(s);
    // Once: a store left in the source again (a restored backup) does not replace the state
    // directory's.
    std::fs::create_dir_all(&old).unwrap();
    let s = serve_args(&src)
        .arg("--state-dir", state.to_str().unwrap())
        .arg("--token-dir", old.to_str().unwrap())
        .start_env(&envs);
    let other = current_token(&old, &clock, "worker").unwrap();
    drop(s);
    let s = serve_args(&src)
        .arg("--state-dir", state.to_str().unwrap())
        .start_env(&envs);
    assert_eq!(ign(&s, &tok), 200);
    assert_ne!(other, tok);
    assert_ne!(
        ign(&s, &other),
        200,
        "the store in the source is not taken twice"
    );
    assert!(old.exists());
}
