//! `agent serve` as a multi-replica service on 127.0.0.1: three replicas, each with its own
//! checkpoint directory and nothing writable shared, reading one source and one key file.
//! Tokens derived from the key agree on every replica through a whole TTL (the binary's test
//! clock file drives time); a config change keeps old tokens on the old payload until they
//! expire; removing a pool revokes its tokens; a restart on a broken source or with a corrupt
//! checkpoint serves lastKnownGood; a rolling restart with a bad push in the middle loses no
//! request of a client that retries as Ignition does. Token secrets never reach logs,
//! /status or /metrics, and checkpoint files are 0600.

use crate::support;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use support::serve::*;

/// An epoch boundary for the 100 s TTL (period 50 s) the tests use.
const T0: u64 = 1_000_000;
const TTL: &str = "100s";
const KEY: &str = "c2VjcmV0LWtleS1mb3ItdGhlLXJlcGxpY2EtdGVzdHMtMDEyMzQ1Njc4OQ==\n";

/// Sets the fake clock atomically (servers and `agent token` read it on every check).
fn set_clock(clock: &Path, t: u64) {
    let tmp = clock.with_extension("tmp");
    std::fs::write(&tmp, t.to_string()).unwrap();
    std::fs::rename(&tmp, clock).unwrap();
}

struct Env {
    t: TempDir,
    src: PathBuf,
    key: PathBuf,
    clock: PathBuf,
}

impl Env {
    fn new(tag: &str) -> Env {
        let t = TempDir::new(tag);
        let src = t.path().join("src");
        let key = t.path().join("secret/token.key");
        let clock = t.path().join("clock");
        write(&key, KEY);
        set_clock(&clock, T0);
        write(&src.join("pools/worker.ign"), &worker_config("w1"));
        write(&src.join("pools/master.ign"), &worker_config("m1"));
        Env { t, src, key, clock }
    }

    fn state(&self, i: usize) -> PathBuf {
        self.t.path().join(format!("state-{i}"))
    }

    fn log(&self, i: usize) -> PathBuf {
        self.t.path().join(format!("replica-{i}.log"))
    }

    /// Starts replica `i` (its own state dir and log); `extra` adds flags.
    fn start(&self, i: usize, extra: &[&str]) -> Server {
        let state = self.state(i);
        let args = serve_args(&self.src)
            .poll_1s()
            .arg("--token-ttl", TTL)
            .arg("--token-clock-skew", "10s")
            .arg("--token-key", &self.key)
            .arg("--state-dir", &state)
            .arg("--soak", "1s")
            .with(extra);
        // Each run logs to a file of its own, appended to the replica's log by keep_log.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .unwrap();
        let tmp_log = self.t.path().join(format!("replica-{i}.cur.log"));
        args.start_logged(
            &[("AGENT_SERVE_TEST_CLOCK", self.clock.to_str().unwrap())],
            Some(&tmp_log),
        )
    }

    /// Moves the current log of replica `i` into its cumulative log.
    fn keep_log(&self, i: usize) {
        let cur = self.t.path().join(format!("replica-{i}.cur.log"));
        if let Ok(b) = std::fs::read(&cur) {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(self.log(i))
                .unwrap();
            f.write_all(&b).unwrap();
            std::fs::remove_file(&cur).unwrap();
        }
    }

    fn agent(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(AGENT)
            .args(args)
            .env("AGENT_SERVE_TEST_CLOCK", &self.clock)
            .output()
            .expect("running agent");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The current token of `pool`, as `agent token show --reveal` computes it from the key.
    fn token(&self, pool: &str) -> String {
        let (ok, out, err) = self.agent(&[
            "token",
            "show",
            "--source",
            self.src.to_str().unwrap(),
            "--token-key",
            self.key.to_str().unwrap(),
            "--token-ttl",
            TTL,
            "--reveal",
        ]);
        assert!(ok, "agent token show: {err}");
        out.lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f.len() == 3 && f[0] == pool && f[1] == "token").then(|| f[2].to_string())
            })
            .unwrap_or_else(|| panic!("no token for {pool} in {out}"))
    }
}

fn ign(s: &Server, tok: &str) -> Resp {
    s.get_h("/ignition", &[("Authorization", &format!("Bearer {tok}"))])
}

fn marker(r: &Resp) -> String {
    let t = r.text();
    let i = t
        .find("data:,")
        .unwrap_or_else(|| panic!("no marker in {t}"));
    t[i + 6..].split('"').next().unwrap().to_string()
}

/// Waits (bounded) until every replica's /status satisfies `f`.
fn wait_all(rs: &[Server], what: &str, f: impl Fn(&serde_json::Value) -> bool) {
    for (i, r) in rs.iter().enumerate() {
        r.wait_for(&format!("{what} on replica {i}"), 20, |s| f(&s.status()));
    }
}

fn served_generation(st: &serde_json::Value) -> String {
    st["sources"][0]["active"]["generation"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn assigned_generation(st: &serde_json::Value) -> String {
    st["sources"][0]["assigned"]["generation"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Every file under `dir` (recursively) must be 0600 and every directory 0700, and none may
/// hold one of `secrets`.
fn check_state_dir(dir: &Path, secrets: &[&str]) -> usize {
    let mut n = 0;
    let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "{}", dir.display());
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let md = std::fs::symlink_metadata(&p).unwrap();
        if md.is_dir() {
            n += check_state_dir(&p, secrets);
        } else {
            assert_eq!(md.permissions().mode() & 0o777, 0o600, "{}", p.display());
            let b = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
            for s in secrets {
                assert!(!b.contains(s), "a secret in {}", p.display());
            }
            n += 1;
        }
    }
    n
}

#[test]
fn three_replicas_agree_on_tokens_through_a_ttl() {
    let env = Env::new("replicas");
    let rs: Vec<Server> = (0..3).map(|i| env.start(i, &[])).collect();
    wait_all(&rs, "a generation", |st| !served_generation(st).is_empty());

    // One key, one source: every replica reports the same key id and generation.
    let ids: Vec<String> = rs
        .iter()
        .map(|r| r.status()["tokens"]["keyId"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.iter().all(|i| i == &ids[0]), "{ids:?}");

    // A token from any replica's key works on every replica, with byte-identical payloads.
    let w1 = env.token("worker");
    let m1 = env.token("master");
    let first = ign(&rs[0], &w1);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(marker(&first), "w1");
    for r in &rs {
        let a = ign(r, &w1);
        assert_eq!(a.status, 200);
        assert_eq!(a.body, first.body, "payloads differ between replicas");
        assert_eq!(a.header("ETag"), first.header("ETag"));
        assert_eq!(marker(&ign(r, &m1)), "m1");
    }
    // `agent pointer` computes the same token from the key.
    let (ok, ptr, err) = env.agent(&[
        "pointer",
        "--pool",
        "worker",
        "--url",
        "https://mcs.example:22623/ignition",
        "--source",
        env.src.to_str().unwrap(),
        "--token-key",
        env.key.to_str().unwrap(),
        "--token-ttl",
        TTL,
    ]);
    assert!(ok, "agent pointer: {err}");
    let p = spec::config::parse(ptr.as_bytes()).unwrap();
    assert_eq!(
        p.config.ignition.config.merge[0].http_headers[0].value,
        Some(format!("Bearer {w1}"))
    );
    // `agent token rotate|revoke` have nothing to change with derived tokens, and say why.
    let (ok, _, err) = env.agent(&[
        "token",
        "revoke",
        "--source",
        env.src.to_str().unwrap(),
        "--token-key",
        env.key.to_str().unwrap(),
        "--pool",
        "worker",
    ]);
    assert!(
        !ok && err.contains("remove the pool from the source"),
        "{err}"
    );
    // A token from another key is unknown everywhere (5xx so a machine retries).
    let other_key = env.t.path().join("other.key");
    write(&other_key, "another-key-another-key-another-key-0123456789");
    let (ok, out, err) = env.agent(&[
        "token",
        "show",
        "--source",
        env.src.to_str().unwrap(),
        "--token-key",
        other_key.to_str().unwrap(),
        "--token-ttl",
        TTL,
        "--reveal",
    ]);
    assert!(ok, "{err}");
    let foreign = out
        .lines()
        .find_map(|l| l.strip_prefix("worker\ttoken\t"))
        .unwrap()
        .to_string();
    assert_ne!(foreign, w1);
    for r in &rs {
        assert_eq!(ign(r, &foreign).status, 503);
    }
    // A missing key file is a clear error.
    let (ok, _, err) = env.agent(&[
        "token",
        "show",
        "--source",
        env.src.to_str().unwrap(),
        "--token-key",
        "/nonexistent/key",
    ]);
    assert!(!ok && err.contains("--token-key"), "{err}");

    // Just before TTL/2: the same token is current; at TTL/2 it rotates and both are
    // accepted everywhere (the previous one until its own TTL).
    set_clock(&env.clock, T0 + 49);
    assert_eq!(env.token("worker"), w1);
    set_clock(&env.clock, T0 + 50);
    let w2 = env.token("worker");
    assert_ne!(w2, w1, "rotation after TTL/2");
    for r in &rs {
        assert_eq!(ign(r, &w1).status, 200);
        assert_eq!(ign(r, &w2).status, 200);
    }
    set_clock(&env.clock, T0 + 99);
    for r in &rs {
        assert_eq!(
            ign(r, &w1).status,
            200,
            "the previous token lives its full TTL"
        );
    }
    // At TTL: w1 expires on all three at once; w2 is still valid, w3 is current.
    set_clock(&env.clock, T0 + 100);
    let w3 = env.token("worker");
    for r in &rs {
        assert_eq!(ign(r, &w1).status, 503);
        assert_eq!(ign(r, &w2).status, 200);
        assert_eq!(ign(r, &w3).status, 200);
    }
    // Clock-skew tolerance: the next token (made by a host whose clock is ahead) is accepted
    // 10 s (--token-clock-skew) before its epoch starts, not earlier.
    set_clock(&env.clock, T0 + 150);
    let w4 = env.token("worker");
    set_clock(&env.clock, T0 + 139);
    for r in &rs {
        assert_eq!(ign(r, &w4).status, 503, "too early even with the skew");
    }
    set_clock(&env.clock, T0 + 140);
    for r in &rs {
        assert_eq!(ign(r, &w4).status, 200, "within the skew");
    }

    // A config change: new tokens name the new config, old tokens keep the old payload on
    // every replica until they expire.
    set_clock(&env.clock, T0 + 160);
    let old = env.token("worker");
    assert_eq!(old, w4);
    let tmp = env.src.join("pools/.worker.ign.tmp");
    write(&tmp, &worker_config("w2"));
    std::fs::rename(&tmp, env.src.join("pools/worker.ign")).unwrap();
    for (i, r) in rs.iter().enumerate() {
        r.wait_for(&format!("the new config on replica {i}"), 20, |s| {
            marker(&s.get("/config/worker")) == "w2"
        });
    }
    let new = env.token("worker");
    assert_ne!(new, old, "a new token for the new config");
    let old_body = ign(&rs[0], &old).body;
    let new_body = ign(&rs[0], &new).body;
    for r in &rs {
        let a = ign(r, &old);
        assert_eq!(a.status, 200);
        assert_eq!(marker(&a), "w1", "an old token serves the old payload");
        assert_eq!(a.body, old_body);
        let b = ign(r, &new);
        assert_eq!(marker(&b), "w2");
        assert_eq!(b.body, new_body);
        // w3 (also of the old config, previous epoch) keeps its payload too.
        assert_eq!(marker(&ign(r, &w3)), "w1");
        let st = r.status();
        let kept = st["tokens"]["retainedPayloads"].as_array().unwrap();
        assert_eq!(kept.len(), 1, "{st}");
        assert_eq!(kept[0]["pool"], "worker");
        assert_eq!(
            kept[0]["tokensExpire"],
            runtime::util::rfc3339(T0 + 150 + 100)
        );
    }
    // The old token's own TTL: refused on all three; the new one still works; the old payload
    // is pruned.
    set_clock(&env.clock, T0 + 250);
    let new2 = env.token("worker");
    for r in &rs {
        assert_eq!(ign(r, &old).status, 503);
        assert_eq!(
            ign(r, &new).status,
            503,
            "new was made in the same epoch as old"
        );
        assert_eq!(marker(&ign(r, &new2)), "w2");
    }
    wait_all(&rs, "the old payload pruned", |st| {
        st["tokens"]["retainedPayloads"]
            .as_array()
            .is_some_and(|a| a.is_empty())
    });
    for (i, r) in rs.iter().enumerate() {
        // Only the live configs (worker w2 and master m1) stay checkpointed.
        r.wait_for(
            &format!("old config file pruned on replica {i}"),
            20,
            |_| {
                std::fs::read_dir(env.state(i).join("configs"))
                    .unwrap()
                    .count()
                    == 2
            },
        );
    }

    // Removing a pool revokes its tokens on all three as soon as each has loaded the
    // generation without it (within one poll interval; inotify is faster).
    let m = env.token("master");
    for r in &rs {
        assert_eq!(ign(r, &m).status, 200);
    }
    std::fs::remove_file(env.src.join("pools/master.ign")).unwrap();
    for (i, r) in rs.iter().enumerate() {
        r.wait_for(&format!("master gone on replica {i}"), 20, |s| {
            s.get("/config/master").status == 404
        });
        assert_eq!(ign(r, &m).status, 503, "replica {i}: revoked");
        assert_eq!(ign(r, &m1).status, 503);
        assert_eq!(marker(&ign(r, &new2)), "w2");
    }

    // Secrets: no token and no key byte in logs, /status, /metrics or the checkpoint.
    let key = KEY.trim();
    let secrets = [
        w1.as_str(),
        w2.as_str(),
        w3.as_str(),
        w4.as_str(),
        new.as_str(),
        new2.as_str(),
        m.as_str(),
        m1.as_str(),
        key,
    ];
    let mut rs = rs;
    for (i, r) in rs.iter_mut().enumerate() {
        let st = String::from_utf8(r.get("/status").body).unwrap();
        let me = String::from_utf8(r.get("/metrics").body).unwrap();
        assert!(r.terminate());
        env.keep_log(i);
        let log = std::fs::read_to_string(env.log(i)).unwrap();
        assert!(log.contains("/ignition"), "the access log is on");
        for s in secrets {
            assert!(!st.contains(s), "a secret in /status of replica {i}");
            assert!(!me.contains(s), "a secret in /metrics of replica {i}");
            assert!(!log.contains(s), "a secret in the log of replica {i}");
        }
        assert!(check_state_dir(&env.state(i), &secrets) >= 4);
    }
}

#[test]
fn restart_on_a_broken_source_serves_last_known_good() {
    let env = Env::new("restart");
    let mut s = env.start(0, &[]);
    s.wait_for("a generation", 20, |s| s.get("/readyz").status == 200);
    // Soak (1 s of the test clock): the generation becomes lastKnownGood.
    set_clock(&env.clock, T0 + 5);
    s.wait_for("lastKnownGood", 20, |s| {
        !s.status()["sources"][0]["lastKnownGood"].is_null()
    });
    let good_gen = served_generation(&s.status());
    let tok = env.token("worker");
    let payload = ign(&s, &tok);
    assert_eq!(payload.status, 200);
    let config = s.get("/config/worker").body;
    assert!(s.terminate());
    assert!(env.state(0).join("lastKnownGood.json").exists());

    let check_serves_lkg = |s: &Server, why: &str| {
        assert_eq!(s.get("/readyz").status, 200, "{why}: ready");
        let st = s.status();
        assert_eq!(served_generation(&st), good_gen, "{why}: {st}");
        let err = st["sources"][0]["error"].as_str().unwrap_or("");
        assert!(err.contains(why), "{why}: /status error {err:?}");
        assert_eq!(
            st["sources"][0]["lastKnownGood"]["generation"], good_gen,
            "{st}"
        );
        assert_eq!(st["checkpoint"]["restored"]["lastKnownGood"], good_gen);
        let r = ign(s, &tok);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, payload.body, "the same bytes as before the restart");
        assert_eq!(s.get("/config/worker").body, config);
    };

    // 1. Invalid JSON in the source.
    write(&env.src.join("pools/worker.ign"), "{\"ignition\": ");
    let mut s = env.start(0, &[]);
    check_serves_lkg(&s, "worker");
    assert!(s.terminate());

    // 2. The pools directory removed.
    std::fs::remove_dir_all(env.src.join("pools")).unwrap();
    let mut s = env.start(0, &[]);
    check_serves_lkg(&s, "pools");
    assert!(s.terminate());

    // 3. A corrupt lastKnownGood checkpoint on top: refused with a clear error, and nothing
    // else is lost (the active record still serves the same generation).
    std::fs::write(
        env.state(0).join("lastKnownGood.json"),
        "{\"format\":1,\"gen",
    )
    .unwrap();
    let mut s = env.start(0, &[]);
    assert_eq!(s.get("/readyz").status, 200);
    let st = s.status();
    assert_eq!(served_generation(&st), good_gen, "{st}");
    let errs = st["checkpoint"]["errors"].to_string();
    assert!(
        errs.contains("lastKnownGood.json is not valid JSON"),
        "{errs}"
    );
    assert_eq!(ign(&s, &tok).body, payload.body);
    assert!(s.terminate());
    env.keep_log(0);
    let log = std::fs::read_to_string(env.log(0)).unwrap();
    assert!(
        log.contains("lastKnownGood.json is not valid JSON"),
        "{log}"
    );

    // 4. A corrupt config file: every record that needs it is refused, the server starts and
    // says so; with a good source again it serves that and checkpoints afresh.
    let cfgs: Vec<PathBuf> = std::fs::read_dir(env.state(0).join("configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for c in &cfgs {
        std::fs::write(c, "{}").unwrap();
    }
    let mut s = env.start(0, &[]);
    assert_eq!(s.get("/readyz").status, 503, "nothing trustworthy to serve");
    let errs = s.status()["checkpoint"]["errors"].to_string();
    assert!(errs.contains("does not match its hash"), "{errs}");
    assert!(s.terminate());
    write(&env.src.join("pools/worker.ign"), &worker_config("w1"));
    write(&env.src.join("pools/master.ign"), &worker_config("m1"));
    let s = env.start(0, &[]);
    assert_eq!(s.get("/readyz").status, 200);
    assert_eq!(ign(&s, &tok).body, payload.body);
    set_clock(&env.clock, T0 + 10);
    s.wait_for("a fresh lastKnownGood", 20, |s| {
        !s.status()["sources"][0]["lastKnownGood"].is_null()
    });
    s.wait_for("rewritten config files", 20, |_| {
        std::fs::read_dir(env.state(0).join("configs"))
            .unwrap()
            .all(|e| std::fs::read(e.unwrap().path()).unwrap() != b"{}")
    });

    // 5. The source reset to empty resets lastKnownGood (in /status and on disk).
    std::fs::remove_file(env.src.join("pools/worker.ign")).unwrap();
    std::fs::remove_file(env.src.join("pools/master.ign")).unwrap();
    s.wait_for("lastKnownGood reset", 20, |s| {
        let st = s.status();
        st["sources"][0]["lastKnownGood"].is_null() && st["sources"][0]["error"].is_null()
    });
    s.wait_for("lastKnownGood.json removed", 20, |_| {
        !env.state(0).join("lastKnownGood.json").exists()
    });
    assert_eq!(
        ign(&s, &tok).status,
        503,
        "the pool left: its tokens are revoked"
    );
    check_state_dir(&env.state(0), &[tok.as_str(), KEY.trim()]);
}

/// One request as Ignition makes it through a load balancer: on a connection error or a 5xx
/// it backs off (doubling, capped) and tries again, at most `TRIES` times; each try goes to
/// the next live replica.
fn fetch_like_ignition(
    backends: &RwLock<Vec<SocketAddr>>,
    next: &AtomicUsize,
    tok: &str,
) -> Result<Vec<u8>, String> {
    const TRIES: usize = 12;
    let mut backoff = Duration::from_millis(50);
    let mut last = String::new();
    for _ in 0..TRIES {
        let addr = {
            let b = backends.read().unwrap();
            b[next.fetch_add(1, Ordering::Relaxed) % b.len()]
        };
        let raw = format!(
            "GET /ignition HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\nConnection: close\r\n\r\n"
        );
        match try_request(addr, raw.as_bytes()) {
            Ok(r) if r.status == 200 => return Ok(r.body),
            Ok(r) if r.status >= 500 => last = format!("{addr}: {}", r.status),
            Ok(r) => return Err(format!("{addr}: {} {}", r.status, r.text())),
            Err(e) => last = format!("{addr}: {e}"),
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_millis(800));
    }
    Err(format!("gave up after {TRIES} tries: {last}"))
}

/// A request that reports connection errors instead of panicking.
fn try_request(addr: SocketAddr, raw: &[u8]) -> std::io::Result<Resp> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(raw)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    if !out.windows(4).any(|w| w == b"\r\n\r\n") {
        return Err(std::io::Error::other("connection closed without an answer"));
    }
    Ok(parse_response(&out, false))
}

#[test]
fn rolling_restart_with_a_bad_push_loses_no_request() {
    let env = Env::new("rolling");
    let mut rs: Vec<Server> = (0..3).map(|i| env.start(i, &[])).collect();
    wait_all(&rs, "a generation", |st| !served_generation(st).is_empty());
    set_clock(&env.clock, T0 + 5);
    wait_all(&rs, "lastKnownGood", |st| {
        !st["sources"][0]["lastKnownGood"].is_null()
    });
    let tok = env.token("worker");
    let good = ign(&rs[0], &tok).body;

    let backends = Arc::new(RwLock::new(
        rs.iter().map(|r| r.plain()).collect::<Vec<_>>(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (backends, stop, next, tok, good) = (
                backends.clone(),
                stop.clone(),
                next.clone(),
                tok.clone(),
                good.clone(),
            );
            std::thread::spawn(move || {
                let (mut ok, mut failed) = (0usize, Vec::new());
                // Bounded: stops when told, or after 20,000 requests.
                for _ in 0..20_000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    match fetch_like_ignition(&backends, &next, &tok) {
                        Ok(b) if b == good => ok += 1,
                        Ok(b) => failed.push(format!(
                            "unexpected payload {}",
                            String::from_utf8_lossy(&b)
                        )),
                        Err(e) => failed.push(e),
                    }
                }
                (ok, failed)
            })
        })
        .collect();

    for i in 0..3 {
        if i == 1 {
            // The bad push, between the first and the second restart.
            let tmp = env.src.join("pools/.worker.tmp");
            write(
                &tmp,
                "{\"ignition\": {\"version\": \"3.0.0\"}, \"storage\": 7}",
            );
            std::fs::rename(&tmp, env.src.join("pools/worker.ign")).unwrap();
            wait_all(&rs, "the bad push reported", |st| {
                !st["sources"][0]["error"].is_null()
            });
        }
        // Out of the balancer, stop, start on the same state dir, back in.
        {
            let mut b = backends.write().unwrap();
            b.retain(|a| *a != rs[i].plain());
        }
        assert!(rs[i].terminate(), "replica {i} stops gracefully");
        env.keep_log(i);
        rs[i] = env.start(i, &[]);
        assert_eq!(
            rs[i].get("/readyz").status,
            200,
            "replica {i} ready at once"
        );
        backends.write().unwrap().push(rs[i].plain());
        // Let the stream run against the new set for a while (bounded).
        std::thread::sleep(Duration::from_millis(500));
    }
    for r in &rs {
        let st = r.status();
        assert!(!st["sources"][0]["error"].is_null(), "{st}");
        assert_eq!(ign(r, &tok).body, good);
    }
    // The push fixed: every replica takes it.
    let tmp = env.src.join("pools/.worker.tmp");
    write(&tmp, &worker_config("w1"));
    std::fs::rename(&tmp, env.src.join("pools/worker.ign")).unwrap();
    wait_all(&rs, "the fixed source", |st| {
        st["sources"][0]["error"].is_null() && assigned_generation(st) == served_generation(st)
    });
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    let (mut ok, mut failed) = (0, Vec::new());
    for c in clients {
        let (o, f) = c.join().unwrap();
        ok += o;
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "{} failed requests: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(ok > 50, "only {ok} requests made");
}
