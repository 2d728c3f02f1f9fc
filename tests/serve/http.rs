//! `agent serve` over real HTTP on 127.0.0.1: endpoints, Accept negotiation, etcd_index,
//! determinism, AtomicWriter updates under load, broken generations, hostile input.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use spec::config;
use support::serve::*;

const IGN: &str = "application/vnd.coreos.ignition+json";

fn plain_source(t: &TempDir) -> std::path::PathBuf {
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("worker-one"));
    // A fragmented pool: merged in file-name order.
    write(
        &src.join("pools/infra/10-base.ign"),
        r#"{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"/etc/a","contents":{"source":"data:,base"}}]}}"#,
    );
    write(
        &src.join("pools/infra/20-override.ign"),
        r#"{"ignition":{"version":"3.3.0"},"kernelArguments":{"shouldExist":["quiet"]},"storage":{"files":[{"path":"/etc/a","contents":{"source":"data:,override"}}]}}"#,
    );
    write(&src.join("pools/infra/README.txt"), "not a fragment");
    write(&src.join("pools/..hidden.ign"), "garbage");
    write(
        &src.join("pools/master.ign"),
        r#"{"ignition":{"version":"3.0.0"},"systemd":{"units":[{"name":"etcd-member.service","enabled":true,
            "contents":"[Service]\nExecStart=/usr/bin/etcd --name etcd-{{.etcd_index}}\n",
            "dropins":[{"name":"10-index.conf","contents":"[Service]\nEnvironment=ETCD_INDEX={{.etcd_index}}\n"}]}]}}"#,
    );
    src
}

fn start_plain(src: &Path, extra: &[&str]) -> Server {
    serve_args(src).poll_1s().with(extra).start()
}

#[test]
fn endpoints_and_statuses() {
    let t = TempDir::new("endpoints");
    let src = plain_source(&t);
    let s = start_plain(&src, &[]);

    assert_eq!(s.get("/healthz").status, 200);
    assert_eq!(s.get("/readyz").status, 200);

    let r = s.get("/config/worker");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-length").unwrap(),
        r.body.len().to_string()
    );
    let etag = r.header("etag").unwrap().to_string();
    assert!(
        etag.starts_with('"') && etag.ends_with('"'),
        "strong ETag: {etag}"
    );
    // Which config this is and where to report (docs/reports.md), never the token.
    assert_eq!(r.header("x-agent-pool"), Some("worker"));
    assert!(r.header("x-agent-config").unwrap().starts_with("worker-"));
    let h = r.header("x-agent-config-hash").unwrap();
    assert!(h.starts_with("sha256-") && h.len() == 7 + 64, "{h}");
    assert_eq!(r.header("x-agent-report-url"), Some("/report"));
    let p = config::parse(&r.body).unwrap();
    assert_eq!(
        p.version,
        config::Version::new(0),
        "default: oldest expressing version"
    );
    let files: Vec<&str> = p
        .config
        .storage
        .files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert!(files.contains(&"/etc/marker"));
    // The node-agent file names the config it was generated from.
    let nf = p
        .config
        .storage
        .files
        .iter()
        .find(|f| f.path == "/etc/agent/node-config.json")
        .expect("node-agent file");
    let data = spec::encoding::data_url::decode(nf.contents.source.as_deref().unwrap()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&data).unwrap();
    assert!(v["currentConfig"].as_str().unwrap().starts_with("worker-"));
    assert_eq!(v["currentConfig"], v["desiredConfig"]);

    // HEAD: same headers, no body.
    let h = request(
        s.addr,
        "HEAD /config/worker HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(h.status, 200);
    assert!(h.body.is_empty());
    assert_eq!(
        h.header("content-length").unwrap(),
        r.body.len().to_string()
    );
    assert_eq!(h.header("etag").unwrap(), etag);

    // Conditional GET.
    let c = s.get_h("/config/worker", &[("If-None-Match", &etag)]);
    assert_eq!(c.status, 304);
    assert!(c.body.is_empty());
    assert_eq!(c.header("etag"), Some(etag.as_str()));
    // If-None-Match compares weakly (RFC 9110): a W/ tag or one in a list matches too.
    let weak = format!("\"nope\", W/{etag}");
    assert_eq!(
        s.get_h("/config/worker", &[("If-None-Match", &weak)])
            .status,
        304
    );
    assert_eq!(
        s.get_h("/config/worker", &[("If-None-Match", "\"nope\"")])
            .status,
        200
    );

    // Fragments merged in file-name order; non-.ign and `..` names skipped.
    let r = s.get("/config/infra");
    assert_eq!(r.status, 200);
    let p = config::parse(&r.body).unwrap();
    let a = p
        .config
        .storage
        .files
        .iter()
        .find(|f| f.path == "/etc/a")
        .unwrap();
    assert_eq!(a.contents.source.as_deref(), Some("data:,override"));
    assert_eq!(p.version, config::Version::new(3));

    // Unknown pool: 404 with an empty body; other methods 405.
    let r = s.get("/config/nope");
    assert_eq!((r.status, r.body.len()), (404, 0));
    for m in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let r = request(
            s.addr,
            &format!(
                "{m} /config/worker HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(r.status, 405, "{m}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
    }
    assert_eq!(s.get("/nothing").status, 404);

    // Pool names cannot reach outside pools/.
    for p in [
        "/config/../pools/worker",
        "/config/..",
        "/config/.",
        "/config/..hidden",
        "/config/worker/../worker",
        "/config/..%2fsrc%2fpools%2fworker",
        "/config/%2e%2e/etc/passwd",
        "/config/",
        "/config//worker",
        "/config/worker.ign",
        "/config/infra/10-base.ign",
    ] {
        let r = s.get(p);
        assert_eq!((r.status, r.body.len()), (404, 0), "{p}");
    }

    // /status and /metrics.
    let st = s.status();
    let src0 = &st["sources"][0];
    assert_eq!(src0["assigned"]["generation"], src0["active"]["generation"]);
    assert!(src0["error"].is_null());
    assert!(src0["lastKnownGood"].is_null(), "not soaked yet");
    let m = s.get("/metrics").text();
    assert!(
        m.contains("agent_serve_requests_total{pool=\"worker\",status=\"200\",version=\"3.0.0\"}"),
        "{m}"
    );
    assert!(
        m.contains("agent_serve_requests_total{pool=\"-\",status=\"404\""),
        "{m}"
    );
    assert!(m.contains("agent_serve_request_duration_seconds_bucket"));
    assert!(m.contains("agent_serve_reloads_total 1"));
}

#[test]
fn accept_negotiation() {
    let t = TempDir::new("accept");
    let src = plain_source(&t);
    let s = start_plain(&src, &[]);
    // infra needs 3.3 (kernelArguments).
    let cases: &[(Option<String>, u16, Option<&str>)] = &[
        (None, 200, Some("3.3.0")),
        (Some("*/*".into()), 200, Some("3.3.0")),
        (Some(format!("{IGN};version=3.3.0")), 200, Some("3.3.0")),
        (Some(format!("{IGN};version=3.5.0")), 200, Some("3.5.0")),
        (Some(format!("{IGN};version=3.6.0")), 200, Some("3.6.0")),
        (Some(format!("{IGN};version=3.12.0")), 200, Some("3.6.0")),
        (Some(format!("{IGN};version=3.1.0")), 406, None),
        (Some(format!("{IGN};version=3.0.0")), 406, None),
        (Some(format!("{IGN};version=2.2.0")), 400, None),
        (Some(format!("{IGN};version=4.0.0")), 400, None),
        (
            Some(format!(
                "{IGN};version=2.2.0;q=0.1, {IGN};version=3.4.0;q=0.8"
            )),
            200,
            Some("3.4.0"),
        ),
        (
            Some(format!("{IGN};version=3.4.0;q=0.2, {IGN};version=3.1.0")),
            406,
            None,
        ),
        (Some(format!("{IGN};version=banana")), 200, Some("3.3.0")),
        (Some("\u{1}\u{2}".into()), 400, None), // control characters: malformed request
        (Some(";;;===,,,".into()), 200, Some("3.3.0")),
    ];
    for (accept, want, ver) in cases {
        let r = match accept {
            Some(a) => s.get_h("/config/infra", &[("Accept", a)]),
            None => s.get("/config/infra"),
        };
        assert_eq!(r.status, *want, "Accept {accept:?}: {}", r.text());
        if let Some(v) = ver {
            let p = config::parse(&r.body).unwrap();
            assert_eq!(p.version.to_string(), *v, "Accept {accept:?}");
            assert!(r.header("content-type").unwrap().ends_with(v));
        } else if *want == 406 {
            assert!(r.text().contains("cannot be expressed"), "{}", r.text());
            assert!(r.text().contains("kernelArguments"), "{}", r.text());
        }
    }
}

#[test]
fn etcd_index_for_master() {
    let t = TempDir::new("etcd");
    let src = plain_source(&t);
    let s = start_plain(&src, &[]);
    let r = s.get("/config/master?etcd_index=3");
    assert_eq!(r.status, 200);
    let txt = r.text();
    assert!(txt.contains("--name etcd-3"), "{txt}");
    assert!(txt.contains("ETCD_INDEX=3"), "{txt}");
    assert!(!txt.contains("etcd_index"), "{txt}");
    let plain = s.get("/config/master");
    assert!(plain.text().contains("{{.etcd_index}}"));
    assert_ne!(plain.header("etag"), r.header("etag"));
    for bad in ["x", "-1", "", "99999999999", "1%200"] {
        assert_eq!(
            s.get(&format!("/config/master?etcd_index={bad}")).status,
            400,
            "{bad}"
        );
    }
    // Other pools ignore the parameter.
    let w = s.get("/config/worker?etcd_index=3");
    assert_eq!(w.body, s.get("/config/worker").body);
}

#[test]
fn deterministic_across_replicas() {
    let t = TempDir::new("determinism");
    let src = plain_source(&t);
    let a = start_plain(&src, &[]);
    let b = start_plain(&src, &[]);
    for pool in ["worker", "infra", "master"] {
        for accept in [None, Some(format!("{IGN};version=3.6.0"))] {
            let h: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", a.as_str())).collect();
            let ra = a.get_h(&format!("/config/{pool}"), &h);
            let rb = b.get_h(&format!("/config/{pool}"), &h);
            assert_eq!(ra.status, 200);
            assert_eq!(ra.body, rb.body, "{pool}");
            assert_eq!(ra.header("etag"), rb.header("etag"));
        }
    }
}

/// Writes generation `n` into an AtomicWriter volume at `vol` and swaps `..data` to it,
/// removing the previous generation directory (as the kubelet does).
fn atomic_write(vol: &Path, n: usize, pools: &[(&str, String)]) {
    let gen_name = format!("..gen_{n:05}");
    let gen_dir = vol.join(&gen_name);
    for (p, c) in pools {
        // Two fragments per pool, both carrying the generation marker.
        write(&gen_dir.join(format!("pools/{p}/10-a.ign")), c);
        write(
            &gen_dir.join(format!("pools/{p}/20-b.ign")),
            &format!(
                r#"{{"ignition":{{"version":"3.0.0"}},"storage":{{"files":[{{"path":"/etc/second","contents":{{"source":"data:,gen-{n}"}}}}]}}}}"#
            ),
        );
    }
    let old = std::fs::read_link(vol.join("..data")).ok();
    let tmp = vol.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&gen_name, &tmp).unwrap();
    std::fs::rename(&tmp, vol.join("..data")).unwrap();
    if std::fs::symlink_metadata(vol.join("pools")).is_err() {
        std::os::unix::fs::symlink("..data/pools", vol.join("pools")).unwrap();
    }
    if let Some(o) = old {
        let _ = std::fs::remove_dir_all(vol.join(o));
    }
}

fn markers(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find("gen-") {
        let tail = &rest[i + 4..];
        let end = tail
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn atomic_writer_updates_never_mix_generations() {
    let t = TempDir::new("atomic");
    let vol = t.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    let tokens = t.path().join("tokens");
    atomic_write(&vol, 0, &[("worker", worker_config("gen-0"))]);
    let s = start_plain(&vol, &["--token-dir", tokens.to_str().unwrap()]);
    assert_eq!(s.get("/config/worker").status, 200);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = s.addr;
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = std::collections::BTreeSet::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) && n < 5000 {
                    let r = request(
                        addr,
                        "GET /config/worker HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    );
                    assert_eq!(r.status, 200, "{}", r.text());
                    let m = markers(&r.text());
                    assert_eq!(m.len(), 2, "{}", r.text());
                    assert_eq!(m[0], m[1], "response mixes two generations: {m:?}");
                    seen.insert(m[0].clone());
                    n += 1;
                }
                (n, seen)
            })
        })
        .collect();
    for n in 1..=25 {
        atomic_write(&vol, n, &[("worker", worker_config(&format!("gen-{n}")))]);
        std::thread::sleep(Duration::from_millis(40));
    }
    // The last generation becomes active.
    s.wait_for("the last generation", 15, |s| {
        markers(&s.get("/config/worker").text()) == ["25", "25"]
    });
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut total = 0;
    let mut gens = std::collections::BTreeSet::new();
    for c in clients {
        let (n, seen) = c.join().unwrap();
        total += n;
        gens.extend(seen);
    }
    assert!(total > 20, "clients made {total} requests");
    assert!(gens.len() > 1, "saw generations {gens:?}");
    let st = s.status();
    assert!(st["sources"][0]["error"].is_null(), "{st}");
}

#[test]
fn broken_generation_keeps_last_good() {
    let t = TempDir::new("broken");
    let vol = t.path().join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    let tokens = t.path().join("tokens");
    atomic_write(&vol, 1, &[("worker", worker_config("gen-1"))]);
    // --soak 1s: generation 1 becomes lastKnownGood quickly.
    let s = start_plain(
        &vol,
        &["--soak", "1s", "--token-dir", tokens.to_str().unwrap()],
    );
    let good = s.get("/config/worker");
    assert_eq!(good.status, 200);
    s.wait_for("lastKnownGood", 10, |s| {
        !s.status()["sources"][0]["lastKnownGood"].is_null()
    });

    // A valid generation 2, then a broken generation 3 before 2 has soaked... with a 1s soak
    // it may soak; either way the broken one must never be served.
    atomic_write(
        &vol,
        3,
        &[(
            "worker",
            r#"{"ignition":{"version":"3.0.0"},"storage":{"files":[{"path":"relative"}]}}"#.into(),
        )],
    );
    s.wait_for("the error in /status", 10, |s| {
        !s.status()["sources"][0]["error"].is_null()
    });
    let st = s.status();
    let src = &st["sources"][0];
    assert_ne!(
        src["assigned"]["generation"], src["active"]["generation"],
        "{st}"
    );
    assert!(src["error"].as_str().unwrap().contains("path"), "{st}");
    assert_eq!(
        src["active"]["generation"],
        src["lastKnownGood"]["generation"]
    );
    let r = s.get("/config/worker");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body, good.body,
        "the last good generation keeps being served"
    );
    assert_eq!(s.get("/readyz").status, 200);
    let m = s.get("/metrics").text();
    assert!(m.contains("agent_serve_reload_failures_total 1"), "{m}");

    // Invalid JSON too.
    atomic_write(&vol, 4, &[("worker", "{not json".into())]);
    s.wait_for("generation 4 rejected", 10, |s| {
        s.status()["sources"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid JSON"))
    });
    assert_eq!(s.get("/config/worker").body, good.body);

    // Fixed: served again, error cleared.
    atomic_write(&vol, 5, &[("worker", worker_config("gen-5"))]);
    s.wait_for("generation 5", 10, |s| {
        s.get("/config/worker").text().contains("gen-5")
    });
    assert!(s.status()["sources"][0]["error"].is_null());
}

#[test]
fn no_valid_generation_is_not_ready() {
    let t = TempDir::new("notready");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), "{}");
    let s = start_plain(&src, &[]);
    assert_eq!(s.get("/healthz").status, 200);
    assert_eq!(s.get("/readyz").status, 503);
    assert_eq!(s.get("/config/worker").status, 503);
    assert!(!s.status()["sources"][0]["error"].is_null());
    // Fix it in place (plain tree): noticed by inotify.
    write(&src.join("pools/worker.ign"), &worker_config("fixed"));
    s.wait_for("ready", 10, |s| s.get("/readyz").status == 200);
    assert_eq!(s.get("/config/worker").status, 200);
}

#[test]
fn hostile_input() {
    let t = TempDir::new("hostile");
    let src = plain_source(&t);
    let s = start_plain(
        &src,
        &[
            "--header-timeout",
            "1s",
            "--idle-timeout",
            "2s",
            "--max-header-bytes",
            "8192",
        ],
    );

    // Slow headers: a head that never completes is cut off after the header time-out (1 s)
    // while its lines still trickle in (every line does not restart the clock): the answer
    // arrives before the client has sent its 20 lines, at least 3 s of them.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(b"GET /config/worker HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut out = Vec::new();
    let mut answered_while_sending = false;
    let mut buf = [0u8; 4096];
    c.set_nonblocking(true).unwrap();
    for _ in 0..20 {
        if c.write_all(b"X-Slow: 1\r\n").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
        if let Ok(n @ 1..) = c.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
            answered_while_sending = true;
            break;
        }
    }
    assert!(
        answered_while_sending,
        "no answer while the head was still arriving"
    );
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = c.read_to_end(&mut out);
    let txt = String::from_utf8_lossy(&out);
    assert!(txt.starts_with("HTTP/1.1 408"), "{txt}");

    // Huge header → 431.
    let big = format!(
        "GET /config/worker HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(20_000)
    );
    let r = request(s.addr, &big);
    assert_eq!(r.status, 431);
    // Too many headers → 431.
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let r = request(
        s.addr,
        &format!("GET /healthz HTTP/1.1\r\n{many}Connection: close\r\n\r\n"),
    );
    assert_eq!(r.status, 431);
    // Garbage → 400; HTTP/2 preface → 505 or 400.
    assert_eq!(request(s.addr, "\x16\x03\x01garbage\r\n\r\n").status, 400);
    assert_eq!(
        request_bytes(s.addr, b"GET / HTTP/1.1\r\nX: \x00\r\n\r\n").status,
        400
    );
    let r = request(s.addr, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    assert!(r.status == 400 || r.status == 505);

    // Idle keep-alive connections are closed after the idle time-out.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let t0 = Instant::now();
    let mut out = Vec::new();
    // Closed by the server (the read time-out would be an error), not before the idle
    // time-out (2 s).
    c.read_to_end(&mut out)
        .expect("the server closes the idle connection");
    assert!(t0.elapsed() >= Duration::from_millis(1500));
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));

    // Keep-alive with pipelining: two responses on one connection.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /config/worker HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let txt = String::from_utf8_lossy(&out);
    assert_eq!(txt.matches("HTTP/1.1 200").count(), 2, "{txt}");

    // Bad tokens on /ignition: malformed → 401, unknown → 5xx.
    for h in [
        "",
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer short",
        "Bearer a b c d e f g h i j k",
    ] {
        let r = s.get_h("/ignition", &[("Authorization", h)]);
        assert_eq!(r.status, 401, "{h:?}");
    }
    assert_eq!(s.get("/ignition").status, 401);
    let r = s.get_h(
        "/ignition",
        &[(
            "Authorization",
            "Bearer AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        )],
    );
    assert_eq!(r.status, 503);
    assert!(r.header("retry-after").is_some());

    // The server is still healthy after all that.
    assert_eq!(s.get("/healthz").status, 200);
}

// The connection limit (eviction of silent connections, refusal when every connection is
// busy, the per-address cap) is tested in tests/serve/limits.rs.

#[test]
fn sigterm_is_graceful_and_sighup_reloads() {
    let t = TempDir::new("signals");
    let src = plain_source(&t);
    let mut s = start_plain(&src, &["--poll-interval", "1h"]);
    let pid = nix::unistd::Pid::from_raw(s.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        s.get("/healthz").status,
        200,
        "SIGHUP does not stop the server"
    );
    // A request in flight on a keep-alive connection still completes.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 256];
    let n = c.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(s.terminate(), "clean exit on SIGTERM");
}

/// The source watcher sleeps until the source changes, a signal or the next poll: an idle
/// server's watcher does not wake at all between polls (it woke every 25 ms once, then four
/// times a second to renew its watches). Counts the thread's voluntary switches, which do
/// not depend on the machine's speed.
#[test]
fn an_idle_watcher_sleeps() {
    let t = TempDir::new("idle-watch");
    let src = plain_source(&t);
    let s = start_plain(&src, &["--no-access-log", "--poll-interval", "1h"]);
    let woke = watcher_wakes_in_2s(&s);
    assert!(woke <= 2, "the idle watcher woke {woke} times in 2 s");
    assert_eq!(s.get("/healthz").status, 200);
    // Still watching: a new pool is served without waiting for the poll.
    write(&src.join("pools/late.ign"), &worker_config("late"));
    s.wait_for("the new pool", 20, |s| s.get("/config/late").status == 200);
    // A pool directory made since is watched too: a fragment written into it later is seen.
    std::fs::create_dir(src.join("pools/later")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    write(
        &src.join("pools/later/10-base.ign"),
        &worker_config("later"),
    );
    s.wait_for("the pool in a new directory", 20, |s| {
        s.get("/config/later").status == 200
    });
    // `--poll-interval 0` polls four times a second at most, never in a loop.
    let t0 = TempDir::new("zero-poll");
    let src0 = plain_source(&t0);
    let s0 = start_plain(&src0, &["--no-access-log", "--poll-interval", "0"]);
    let (woke, ran) = watcher_in_2s(&s0);
    assert!(
        woke <= 12,
        "with --poll-interval 0 the watcher woke {woke} times in 2 s"
    );
    // A loop never sleeps (so it counts no wake-ups) but runs: ~8 loads of this source take a
    // few milliseconds, a loop most of the 2 s.
    assert!(
        ran < Duration::from_millis(500),
        "with --poll-interval 0 the watcher ran {ran:?} of 2 s"
    );
    assert_eq!(s0.get("/config/worker").status, 200);
}

fn watcher_wakes_in_2s(s: &Server) -> u64 {
    watcher_in_2s(s).0
}

/// How often the server's `watch` thread went to sleep and woke in 2 s (its voluntary
/// context switches, half a second after it is found), and how long it ran meanwhile.
fn watcher_in_2s(s: &Server) -> (u64, Duration) {
    // The watcher starts just after the server prints `listening`: look for up to 10 s.
    let find = || {
        std::fs::read_dir(format!("/proc/{}/task", s.child.id()))
            .unwrap()
            .flatten()
            .find(|e| {
                std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "watch")
            })
            .map(|e| e.path())
    };
    let task = (0..100)
        .find_map(|_| {
            find().or_else(|| {
                std::thread::sleep(Duration::from_millis(100));
                None
            })
        })
        .expect("a thread named watch");
    let switches = || -> u64 {
        let st = std::fs::read_to_string(task.join("status")).unwrap();
        st.lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let ran = || -> u64 {
        let st = std::fs::read_to_string(task.join("schedstat")).unwrap();
        st.split_whitespace().next().unwrap().parse().unwrap()
    };
    std::thread::sleep(Duration::from_millis(500));
    let (before, ran_before) = (switches(), ran());
    std::thread::sleep(Duration::from_secs(2));
    (
        switches() - before,
        Duration::from_nanos(ran() - ran_before),
    )
}

#[test]
fn small_thundering_herd() {
    let t = TempDir::new("herd");
    let src = plain_source(&t);
    let s = start_plain(&src, &["--no-access-log"]);
    let want = s.get("/config/worker").body;
    let addr = s.addr;
    // 500 connections open at once, then every one sends its request.
    let threads: Vec<_> = (0..25)
        .map(|_| {
            let want = want.clone();
            std::thread::spawn(move || {
                let conns: Vec<TcpStream> =
                    (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
                let mut ok = 0;
                for mut c in conns {
                    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                    c.write_all(
                        b"GET /config/worker HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    )
                    .unwrap();
                    let mut out = Vec::new();
                    c.read_to_end(&mut out).unwrap();
                    let r = parse_response(&out, false);
                    assert_eq!(r.status, 200);
                    assert_eq!(r.body, want);
                    ok += 1;
                }
                ok
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 500);
}

#[test]
fn access_log_lines() {
    let t = TempDir::new("accesslog");
    let src = plain_source(&t);
    let log = t.path().join("stderr.log");
    let s = serve_args(&src).start_logged(&[], Some(&log));
    let secret = "SECRETtokenSECRETtokenSECRET";
    assert_eq!(
        s.get_h(
            "/ignition",
            &[("Authorization", &format!("Bearer {secret}"))]
        )
        .status,
        503
    );
    assert_eq!(
        s.get_h(
            "/config/infra",
            &[(
                "Accept",
                "application/vnd.coreos.ignition+json;version=3.4.0"
            )]
        )
        .status,
        200
    );
    let mut lines = Vec::new();
    for _ in 0..50 {
        let text = std::fs::read_to_string(&log).unwrap();
        lines = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .collect();
        if lines.len() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !std::fs::read_to_string(&log).unwrap().contains(secret),
        "a token reached the log"
    );
    let cfg = lines
        .iter()
        .find(|l| l["path"] == "/config/infra")
        .expect("a JSON line for the request");
    assert_eq!(cfg["pool"], "infra");
    assert_eq!(cfg["status"], 200);
    assert_eq!(cfg["version"], "3.4.0");
    assert!(cfg["bytes"].as_u64().unwrap() > 100);
    assert!(cfg["durationMs"].is_number());
    // RFC 3339 in UTC, to the millisecond, as every time the server writes.
    let time = cfg["time"].as_str().expect("time is a string");
    assert!(
        time.len() == 24 && time.ends_with('Z') && time.as_bytes()[19] == b'.',
        "{time}"
    );
    assert!(time.starts_with("20"), "{time}");
    assert!(
        lines
            .iter()
            .any(|l| l["path"] == "/ignition" && l["status"] == 503)
    );
}

/// `--access-log FILE`: the access log apart from the server's log, one JSON line per
/// request appended to the file; stderr keeps the server's own lines only. `--log-format
/// json` makes those JSON too, each with its level.
#[test]
fn access_log_to_a_file_apart_from_the_server_log() {
    let t = TempDir::new("accesslog-file");
    let src = plain_source(&t);
    let log = t.path().join("stderr.log");
    let access = t.path().join("access.log");
    std::fs::write(&access, "an earlier line\n").unwrap();
    let s = serve_args(&src)
        .arg("--access-log", access.to_str().unwrap())
        .start_logged(&[], Some(&log));
    assert_eq!(s.get("/config/infra").status, 200);
    assert_eq!(s.get("/config/nosuchpool").status, 404);
    let mut lines = Vec::new();
    for _ in 0..50 {
        lines = std::fs::read_to_string(&access)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        if lines.len() >= 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(lines[0], "an earlier line", "appended, not replaced");
    let reqs: Vec<serde_json::Value> = lines[1..]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert!(
        reqs.iter()
            .any(|r| r["path"] == "/config/infra" && r["status"] == 200)
    );
    assert!(
        reqs.iter()
            .any(|r| r["path"] == "/config/nosuchpool" && r["status"] == 404)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("\"path\""),
        "no access line on stderr: {text}"
    );
    assert!(
        text.contains("listening"),
        "the server's own log stays: {text}"
    );
    drop(s);
    // An access log that cannot be opened (no such directory, a FIFO nobody reads) stops the
    // server at start, naming the flag, without waiting.
    let fifo = t.path().join("access.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for bad in [t.path().join("no/such/dir/a.log"), fifo] {
        let out = std::process::Command::new(AGENT)
            .args(["serve", "--source", src.to_str().unwrap()])
            .args(["--listen-http", "127.0.0.1:0", "--admin-listen", "off"])
            .args(["--state-dir", t.path().join("st").to_str().unwrap()])
            .args(["--access-log", bad.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--access-log"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A config far larger than the socket buffers, read slowly through a small receive buffer,
/// twice on one keep-alive connection (the second request pipelined behind the first): the
/// pre-rendered body goes out with sendfile in many partial writes, and every byte arrives
/// in order, the second response right after the first.
#[test]
fn large_config_to_a_slow_reader() {
    let t = TempDir::new("large");
    let src = t.path().join("src");
    // 3 MiB of varied bytes: a send resumes at many offsets.
    let mut x: u32 = 1;
    let data: Vec<u8> = (0..3 << 20)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect();
    let cfg = serde_json::json!({"ignition": {"version": "3.0.0"}, "storage": {"files": [
        {"path": "/etc/large", "contents": {"source":
            format!("data:;base64,{}", spec::encoding::data_url::base64_encode(&data))}}]}});
    write(&src.join("pools/worker.ign"), &cfg.to_string());
    let s = start_plain(&src, &["--no-access-log"]);

    let mut c = TcpStream::connect(s.addr).unwrap();
    nix::sys::socket::setsockopt(&c, nix::sys::socket::sockopt::RcvBuf, &65536).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(
        b"GET /config/worker HTTP/1.1\r\nHost: x\r\n\r\nGET /config/worker HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    for i in 0.. {
        assert!(i < 1_000_000, "the connection never closed");
        let n = c.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if i % 32 == 0 {
            // Let the server's side of the connection fill up now and then.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let first = parse_response(&out, false);
    assert_eq!(first.status, 200);
    let head_len = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let second = parse_response(&out[head_len + first.body.len()..], false);
    assert_eq!(second.status, 200);
    assert_eq!(second.body, first.body);
    assert_eq!(
        out.len(),
        2 * head_len + 2 * first.body.len() + "Connection: close\r\n".len(),
        "nothing more than the two responses"
    );
    let p = config::parse(&first.body).unwrap();
    let f = p
        .config
        .storage
        .files
        .iter()
        .find(|f| f.path == "/etc/large")
        .unwrap();
    let got = spec::encoding::data_url::decode(f.contents.source.as_deref().unwrap()).unwrap();
    assert!(got == data, "the file's bytes came through unchanged");

    // Clients that reset the connection in the middle of the body: the server carries on.
    for _ in 0..8 {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.write_all(b"GET /config/worker HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 4096];
        c.read_exact(&mut buf).unwrap();
        // SO_LINGER 0: the close is a reset.
        nix::sys::socket::setsockopt(
            &c,
            nix::sys::socket::sockopt::Linger,
            &nix::libc::linger {
                l_onoff: 1,
                l_linger: 0,
            },
        )
        .unwrap();
        drop(c);
    }
    assert_eq!(s.get("/config/worker").body, first.body);
}
