//! The HTTP fetcher against a fault-injecting server on 127.0.0.1: retry schedule, final
//! statuses, header time-outs, resets and short bodies, redirects, atomic placement.

use crate::support;

use std::time::{Duration, Instant};

use agent::fetch::{Fetcher, Options};
use spec::config::types::HttpHeader;
use support::TempDir;
use support::faulty_http::{Behavior, Server, generated};
use support::fetch::resource;

fn opts(headers: Option<i64>, total: Option<i64>) -> Options {
    Options {
        http_response_headers: headers,
        http_total: total,
        ..Default::default()
    }
}

/// Checks that the gaps between requests follow 100, 200, 400, ... ms within 20% (plus 20 ms
/// for scheduling).
fn check_schedule(reqs: &[support::faulty_http::Request], n: usize) -> Result<(), String> {
    if reqs.len() != n + 1 {
        return Err(format!("{} requests, expected {}", reqs.len(), n + 1));
    }
    for i in 0..n {
        let gap = reqs[i + 1].at.duration_since(reqs[i].at).as_secs_f64();
        let want = (0.1 * 2f64.powi(i as i32)).min(5.0);
        if gap < want * 0.95 || gap > want * 1.2 + 0.02 {
            return Err(format!("gap {i}: {gap:.3}s, expected {want:.3}s ±20%"));
        }
    }
    Ok(())
}

#[test]
fn retries_5xx_on_the_seed_schedule() {
    // A wrong schedule fails every time; a machine stalled by other work fails once. So the
    // measurement gets three chances.
    let mut errors = Vec::new();
    for _ in 0..3 {
        let s = Server::start();
        s.route(
            "/c",
            vec![
                Behavior::Status(500),
                Behavior::Status(503),
                Behavior::Status(502),
                Behavior::Status(504),
                Behavior::Ok(b"done".to_vec()),
            ],
        );
        let f = Fetcher::new(opts(None, None));
        assert_eq!(f.fetch_bytes(&resource(&s.url("/c"))).unwrap(), b"done");
        match check_schedule(&s.requests("/c"), 4) {
            Ok(()) => return,
            Err(e) => errors.push(e),
        }
    }
    panic!("retry schedule off in 3 runs: {errors:?}");
}

#[test]
fn status_below_500_is_final() {
    let s = Server::start();
    for (i, code) in [404u16, 403, 400, 410].into_iter().enumerate() {
        let path = format!("/x{i}");
        s.route(
            &path,
            vec![Behavior::Status(code), Behavior::Ok(b"late".to_vec())],
        );
        let e = Fetcher::new(opts(None, None))
            .fetch_bytes(&resource(&s.url(&path)))
            .unwrap_err();
        assert!(format!("{e:#}").contains(&code.to_string()), "{e:#}");
        assert_eq!(s.requests(&path).len(), 1, "{code} was retried");
    }
}

#[test]
fn header_timeout_retries() {
    let s = Server::start();
    s.route(
        "/slow",
        vec![Behavior::NoHeaders, Behavior::Ok(b"finally".to_vec())],
    );
    let t = Instant::now();
    let f = Fetcher::new(opts(Some(1), None));
    assert_eq!(
        f.fetch_bytes(&resource(&s.url("/slow"))).unwrap(),
        b"finally"
    );
    // The first attempt waited out its 1 s header time-out (a lower bound the clock cannot
    // undercut; no upper bound: a loaded machine may be slow), then it was asked again.
    assert!(
        t.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(s.requests("/slow").len(), 2);
}

#[test]
fn reset_and_short_bodies_retry_and_never_reach_the_target() {
    let body = generated(300_000);
    let s = Server::start();
    s.route(
        "/f",
        vec![
            Behavior::ResetMidBody(body.clone(), 100_000),
            Behavior::ShortBody(body.clone(), 200_000),
            Behavior::Ok(body.clone()),
        ],
    );
    let dir = TempDir::new("fetch-reset");
    let dest = dir.join("out");
    let mut r = resource(&s.url("/f"));
    r.verification.hash = Some(format!("sha512-{}", agent::fetch::sha512_hex(&body)));
    let n = Fetcher::new(opts(None, None))
        .fetch_to_file(&r, &dest, 0o600)
        .unwrap();
    assert_eq!(n, body.len() as u64);
    assert_eq!(std::fs::read(&dest).unwrap(), body);
    assert_eq!(s.requests("/f").len(), 3);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "temp left"
    );
}

#[test]
fn always_short_body_fails_within_total_and_leaves_nothing() {
    let body = generated(50_000);
    let s = Server::start();
    s.route("/short", vec![Behavior::ShortBody(body, 10_000)]);
    let dir = TempDir::new("fetch-short");
    let dest = dir.join("out");
    let e = Fetcher::new(opts(None, Some(2)))
        .fetch_to_file(&resource(&s.url("/short")), &dest, 0o644)
        .unwrap_err();
    // Ended by httpTotal (2 s), which the error names.
    assert!(format!("{e:#}").contains("httpTotal"), "{e:#}");
    assert!(!dest.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn hash_mismatch_is_final_and_leaves_nothing() {
    let s = Server::start();
    s.route("/h", vec![Behavior::Ok(b"tampered".to_vec())]);
    let dir = TempDir::new("fetch-hash");
    let dest = dir.join("out");
    let mut r = resource(&s.url("/h"));
    r.verification.hash = Some(format!("sha512-{}", agent::fetch::sha512_hex(b"genuine")));
    let e = Fetcher::new(opts(None, None))
        .fetch_to_file(&r, &dest, 0o644)
        .unwrap_err();
    assert!(format!("{e:#}").contains("hash mismatch"), "{e:#}");
    assert_eq!(s.requests("/h").len(), 1);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn headers_override_defaults_and_are_dropped_after_redirect() {
    let s = Server::start();
    s.route("/a", vec![Behavior::Redirect("/b".into())]);
    s.route("/b", vec![Behavior::Ok(b"moved".to_vec())]);
    let mut r = resource(&s.url("/a"));
    r.http_headers = vec![
        HttpHeader {
            name: "X-Token".into(),
            value: Some("secret".into()),
        },
        HttpHeader {
            name: "User-Agent".into(),
            value: Some("custom-agent".into()),
        },
    ];
    assert_eq!(
        Fetcher::new(opts(None, None)).fetch_bytes(&r).unwrap(),
        b"moved"
    );
    let a = &s.requests("/a")[0];
    assert_eq!(a.header("x-token"), Some("secret"));
    assert_eq!(a.header("user-agent"), Some("custom-agent"));
    let b = &s.requests("/b")[0];
    assert_eq!(b.header("x-token"), None);
    assert_eq!(
        b.header("user-agent"),
        Some(agent::fetch::http::user_agent())
    );
}

#[test]
fn gzip_streams_through_decompression_and_hash() {
    use std::io::Write;
    let plain = generated(1_000_000);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&plain).unwrap();
    let z = gz.finish().unwrap();
    let s = Server::start();
    s.route("/z", vec![Behavior::Ok(z)]);
    let mut r = resource(&s.url("/z"));
    r.compression = Some("gzip".into());
    r.verification.hash = Some(format!("sha512-{}", agent::fetch::sha512_hex(&plain)));
    let mut out = Vec::new();
    let n = Fetcher::new(opts(None, None))
        .fetch_to(&r, &mut out)
        .unwrap();
    assert_eq!(n, plain.len() as u64);
    assert!(out == plain);
}

#[test]
fn cli_logs_every_retry_with_reason_and_delay() {
    let s = Server::start();
    s.route(
        "/r",
        vec![
            Behavior::Status(503),
            Behavior::Status(500),
            Behavior::Ok(b"ok".to_vec()),
        ],
    );
    let dir = TempDir::new("fetch-cli");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["fetch", &s.url("/r"), "--output"])
        .arg(dir.join("o"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("HTTP 503") && err.contains("retrying in 100ms"),
        "{err}"
    );
    assert!(
        err.contains("HTTP 500") && err.contains("retrying in 200ms"),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.join("o")).unwrap(), b"ok");
}

#[test]
fn fetch_to_a_plain_writer_cannot_retry_after_writing() {
    // Contents are written in chunks of 256 KiB: the reset comes after the first was written.
    let body = generated(600_000);
    let s = Server::start();
    s.route(
        "/w",
        vec![
            Behavior::ResetMidBody(body.clone(), 400_000),
            Behavior::Ok(body.clone()),
        ],
    );
    let mut out = Vec::new();
    let e = Fetcher::new(opts(None, None))
        .fetch_to(&resource(&s.url("/w")), &mut out)
        .unwrap_err();
    assert!(format!("{e:#}").contains("part of the contents"), "{e:#}");
    assert_eq!(
        s.requests("/w").len(),
        1,
        "retried after bytes were written"
    );
}
