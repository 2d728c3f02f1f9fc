//! Rollouts (docs/serve.md, "Rollouts"), against the real binary over 127.0.0.1: a herd of
//! network-booted machines (through `/ipxe`, `/machine-config` and real reports) while a
//! broken config rolls out halts it after the canaries, every other machine getting the
//! previous config; a good config widens step by step to all; pause, resume, promote and
//! abort through the admin API and `agent rollout`; a restart keeps the rollout's state; two
//! replicas on one etcd agree on every machine's config; a pool without a policy is served
//! as it always was.

use crate::etcd_cluster;
use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use support::serve::*;

fn config(marker: &str) -> String {
    serde_json::json!({
        "ignition": {"version": "3.3.0"},
        "storage": {"files": [{"path": "/etc/motd", "mode": 420, "overwrite": true,
            "contents": {"source": format!("data:,{marker}")}}]}
    })
    .to_string()
}

/// A source with pool `worker` (config `marker`), the default boot profile and its assets.
fn source(t: &TempDir, marker: &str) -> PathBuf {
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &config(marker));
    write(
        &src.join("boot/default.json"),
        r#"{"kernel": "vmlinuz", "initrd": ["initramfs.img"], "args": ["console=ttyS0"]}"#,
    );
    write(&src.join("boot/assets/vmlinuz"), "kernel");
    write(&src.join("boot/assets/initramfs.img"), "initramfs");
    src
}

/// A new config for the pool, with a rollout policy beside it (renamed into place, so the
/// watcher never reads half of either).
fn push(src: &Path, marker: &str, policy: Option<&str>) {
    let pools = src.join("pools");
    if let Some(p) = policy {
        write(&pools.join(".policy.tmp"), p);
        std::fs::rename(pools.join(".policy.tmp"), pools.join("worker.rollout.json")).unwrap();
    }
    write(&pools.join(".worker.tmp"), &config(marker));
    std::fs::rename(pools.join(".worker.tmp"), pools.join("worker.ign")).unwrap();
}

fn start(src: &Path, extra: &[&str]) -> Server {
    serve_args(src)
        .poll_1s()
        .quiet()
        .arg("--soak", "0s")
        .arg("--discovery", "pool:worker")
        .with(extra)
        .start()
}

fn get(addr: SocketAddr, path: &str) -> Resp {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
}

fn post(addr: SocketAddr, path: &str, headers: &str, body: &str) -> Resp {
    request(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// The generation the server serves and its lastKnownGood.
fn roles(s: &Server) -> (String, String) {
    let st = s.status();
    let g = |k: &str| {
        st["sources"][0][k]["generation"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    (g("active"), g("lastKnownGood"))
}

/// Waits until the served generation is lastKnownGood and not `old` (a first load, or a
/// push without a policy).
fn wait_good(s: &Server, old: &str) -> String {
    let mut id = String::new();
    s.wait_for("the generation to be served and lastKnownGood", 30, |s| {
        let (a, l) = roles(s);
        id = a.clone();
        !a.is_empty() && a == l && a != old
    });
    id
}

/// Waits until the server serves a generation other than `old`.
fn wait_active(s: &Server, old: &str) -> String {
    let mut id = String::new();
    s.wait_for("the new generation to be served", 30, |s| {
        id = roles(s).0;
        !id.is_empty() && id != old
    });
    id
}

/// A machine id from a number (the discovery pool takes any MAC).
fn mac(i: usize) -> String {
    format!("52-54-00-00-{:02x}-{:02x}", i / 256, i % 256)
}

fn machine_id(i: usize) -> String {
    format!("mac-{}", mac(i).replace('-', ":"))
}

/// Boots machine `i` as iPXE and the agent would: `/ipxe`, the config from the boot
/// script's URL; returns the marker of the config it got and the report URL.
fn boot(addr: SocketAddr, i: usize) -> (String, String) {
    let r = get(addr, &format!("/ipxe?mac={}", mac(i)));
    assert_eq!(r.status, 200, "{}", r.text());
    let script = r.text();
    let url = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("agent.config.url="))
        .unwrap_or_else(|| panic!("no config URL in {script}"));
    let rest = url.strip_prefix("http://").unwrap();
    let path = &rest[rest.find('/').unwrap()..];
    let c = get(addr, path);
    assert_eq!(c.status, 200, "{}", c.text());
    let v: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
    let src = v["storage"]["files"][0]["contents"]["source"]
        .as_str()
        .unwrap();
    (
        src.strip_prefix("data:,").unwrap().to_string(),
        c.header("x-agent-report-url").unwrap().to_string(),
    )
}

/// Reports machine `i`'s boot `boot` to `url`: fetch ok, then files ok (final) or failed.
fn report(addr: SocketAddr, url: &str, i: usize, boot: &str, ok: bool) {
    let id = machine_id(i);
    let one = |rid: &str, stage: &str, outcome: &str, last: bool, error: Option<&str>| {
        let body = serde_json::json!({
            "format": 1, "id": rid, "boot_id": boot,
            "machine": {"id": id, "macs": [mac(i).replace('-', ":")], "platform": "metal"},
            "agent": "0.1.0",
            "config": {"pool": "worker", "name": "worker", "hash": "sha256-00"},
            "stage": stage, "outcome": outcome, "final": last, "duration_ms": 10,
            "changes": {}, "error": error, "log_tail": []
        })
        .to_string();
        let r = post(addr, url, "", &body);
        assert_eq!(r.status, 200, "{}", r.text());
    };
    one(&format!("{boot}-fetch"), "fetch", "ok", false, None);
    if ok {
        one(&format!("{boot}-files"), "files", "ok", true, None);
    } else {
        one(
            &format!("{boot}-files"),
            "files",
            "failed",
            true,
            Some("files: /etc/motd: hash mismatch"),
        );
    }
}

/// The pool's rollout in `/status`.
fn rollout_status(s: &Server) -> serde_json::Value {
    s.status()["rollouts"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["pool"] == "worker").cloned())
        .unwrap_or(serde_json::Value::Null)
}

fn admin(s: &Server, method: &str, path: &str) -> Resp {
    let a = s.addr_of("admin");
    match method {
        "GET" => get(a, path),
        _ => post(a, path, "X-Agent-Admin: 1\r\n", ""),
    }
}

/// Boots machines `range` from `threads` threads at once (a herd), each reporting as
/// `ok(marker)` says; returns machine → the marker of the config it got.
fn herd(
    addrs: &[SocketAddr],
    range: std::ops::Range<usize>,
    threads: usize,
    ok: impl Fn(&str) -> bool + Send + Sync + 'static,
) -> BTreeMap<usize, String> {
    let next = Arc::new(Mutex::new(range.clone()));
    let got = Arc::new(Mutex::new(BTreeMap::new()));
    let ok = Arc::new(ok);
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (next, got, ok, addrs) = (next.clone(), got.clone(), ok.clone(), addrs.to_vec());
            std::thread::spawn(move || {
                loop {
                    let Some(i) = next.lock().unwrap().next() else {
                        return;
                    };
                    let addr = addrs[i % addrs.len()];
                    let (marker, url) = boot(addr, i);
                    report(addr, &url, i, &format!("b{i}"), ok(&marker));
                    got.lock().unwrap().insert(i, marker);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    Arc::try_unwrap(got).unwrap().into_inner().unwrap()
}

/// 200 machines boot (8 at a time) while a broken config rolls out with 3 canaries and a
/// halt after 1 failure: at most the 3 canaries get it, the rollout halts, and every other
/// machine gets the previous config and provisions; `/status`, the metrics and the admin
/// API say why (the stage, the machines and their errors). On the old code every machine
/// got the broken config.
#[test]
fn a_broken_config_halts_after_the_canaries() {
    let t = TempDir::new("rollout-broken");
    let src = source(&t, "good");
    let s = start(&src, &["--inventory-store", "memory"]);
    let g1 = wait_good(&s, "");
    push(
        &src,
        "broken",
        Some(r#"{"steps": [3, "100%"], "haltAfter": 1}"#),
    );
    wait_active(&s, &g1);
    let got = herd(&[s.plain()], 0..200, 8, |m| m != "broken");
    let broken: Vec<_> = got.iter().filter(|(_, m)| *m == "broken").collect();
    assert!(
        !broken.is_empty() && broken.len() <= 3,
        "{} machines got the broken config",
        broken.len()
    );
    assert_eq!(
        got.values().filter(|m| *m == "good").count(),
        200 - broken.len()
    );
    s.wait_for("the halt in /status", 10, |s| {
        rollout_status(s)["state"] == "halted"
    });
    let r = rollout_status(&s);
    let halt = &r["halt"];
    assert_eq!(halt["stage"], 0, "{r}");
    assert!(
        halt["reason"].as_str().unwrap().contains("failed"),
        "{halt}"
    );
    let failed: Vec<&str> = halt["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    // The canaries report at the same time: the halt names the ones that had failed when
    // it came, each of them a machine that got the broken config.
    let canaries: Vec<String> = broken.iter().map(|(i, _)| machine_id(**i)).collect();
    assert!(
        !failed.is_empty() && failed.iter().all(|f| canaries.iter().any(|c| c == f)),
        "{halt} names machines that are not the canaries {canaries:?}"
    );
    assert!(
        halt["machines"][0]["error"]
            .as_str()
            .unwrap()
            .contains("hash mismatch"),
        "{halt}"
    );
    assert!(
        halt["at"].as_str().unwrap().ends_with('Z'),
        "RFC 3339: {halt}"
    );
    // lastKnownGood stays the previous generation; the metrics say halted.
    assert_eq!(roles(&s).1, g1);
    let m = admin(&s, "GET", "/metrics").text();
    assert!(
        m.contains("agent_rollout_state{pool=\"worker\",state=\"halted\"} 1"),
        "{m}"
    );
    assert!(m.contains("outcome=\"failed\"}"), "{m}");
    let a: serde_json::Value =
        serde_json::from_slice(&admin(&s, "GET", "/rollouts/worker").body).unwrap();
    assert_eq!(a["state"], "halted", "{a}");
    // A plain fetch (no machine) gets the previous config too.
    assert!(s.get("/config/worker").text().contains("data:,good"));
    // A halted rollout is not resumed: promote or abort.
    assert_eq!(admin(&s, "POST", "/rollouts/worker/resume").status, 409);
    // The page: a banner on the first screen says which pool, stage, machines and error.
    let mut d = support::browser::Devtools::open(1366, 768);
    d.navigate(&format!("http://{}/ui/", s.addr_of("admin")));
    let b = d.eval(
        "JSON.stringify([...document.querySelectorAll('section.halted[role=alert]')].map(e => \
         ({text: e.innerText, visible: e.getBoundingClientRect().bottom <= innerHeight, \
           links: [...e.querySelectorAll('a')].map(a => a.getAttribute('href'))})))",
    );
    let b: serde_json::Value = serde_json::from_str(b.as_str().unwrap()).unwrap();
    let text = b[0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("Rollout of pool worker halted at stage 0 (3 machines)"),
        "{b}"
    );
    assert!(
        text.contains("hash mismatch") && text.contains("previous config"),
        "{b}"
    );
    assert_eq!(b[0]["visible"], true, "{b}");
    // Each failed machine named links to its page (a canary: the halt names the ones that
    // had failed when it came).
    let links: Vec<String> = b[0]["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect();
    assert!(!links.is_empty(), "{b}");
    for l in &links {
        assert!(
            canaries
                .iter()
                .any(|c| *l == format!("/ui/machines/{}", c.replace(':', "%3A"))),
            "{l} is not a canary's page: {b}"
        );
    }
    d.eval(&support::browser::axe_source());
    let v = d.eval(
        "axe.run(document, {resultTypes: ['violations']}).then(r => JSON.stringify(r.violations \
         .filter(v => v.impact === 'serious' || v.impact === 'critical').map(v => v.id)))",
    );
    assert_eq!(
        v.as_str(),
        Some("[]"),
        "axe-core on the page with the halt banner"
    );
    d.screenshot("ui-rollout-halted-1366");
}

/// A good config with steps of 2 machines, then 50 % (each stage held 4 s at least), then
/// all: the 2 canaries first (the others get the previous config meanwhile, and keep it when
/// they ask again), then the machines of the stable half the hash picks, then every
/// machine; lastKnownGood becomes the new generation when it completes.
#[test]
fn a_good_config_reaches_all_in_the_policys_steps() {
    let t = TempDir::new("rollout-good");
    let src = source(&t, "v1");
    let s = start(&src, &["--inventory-store", "memory"]);
    let g1 = wait_good(&s, "");
    push(
        &src,
        "v2",
        Some(r#"{"steps": [2, "50%"], "haltAfter": 1, "holdSeconds": 4}"#),
    );
    let g2 = wait_active(&s, &g1);
    // Canaries: the first 2 get v2, the next (before they report) v1.
    let (m0, u0) = boot(s.plain(), 0);
    let (m1, u1) = boot(s.plain(), 1);
    let (m2, u2) = boot(s.plain(), 2);
    assert_eq!((m0.as_str(), m1.as_str(), m2.as_str()), ("v2", "v2", "v1"));
    // Sticky: machine 2 asks again and gets v1 again.
    assert_eq!(boot(s.plain(), 2).0, "v1");
    report(s.plain(), &u0, 0, "b0", true);
    report(s.plain(), &u1, 1, "b1", true);
    report(s.plain(), &u2, 2, "b2", true);
    let to = rollout_status_now(&s)["to"].as_str().unwrap().to_string();
    // Held 4 s at the canaries, then 50 %: the machines whose hash is in the lower half get
    // v2 (at 50 % or after it completed); some of the others get v1 while it is at 50 %.
    s.wait_for("the 50 % stage", 15, |s| {
        rollout_status_now(s)["stage"] == 1
    });
    let got = herd(&[s.plain()], 3..43, 4, |_| true);
    for (i, m) in &got {
        if serve::source::rollout::bucket(&machine_id(*i), &to) < 5000 {
            assert_eq!(m, "v2", "machine {i} is in the 50 %");
        }
    }
    let v1 = got.values().filter(|m| *m == "v1").count();
    assert!(
        v1 > 0,
        "at 50 % some machines get the previous config: {got:?}"
    );
    s.wait_for("the rollout to complete", 20, |s| {
        rollout_status(s)["state"] == "complete"
    });
    let got = herd(&[s.plain()], 43..73, 4, |_| true);
    assert!(got.values().all(|m| m == "v2"), "{got:?}");
    s.wait_for("the new generation to become lastKnownGood", 15, |s| {
        roles(s).1 == g2
    });
    assert!(s.get("/config/worker").text().contains("data:,v2"));
}

/// The rollout from the admin API, read now (not the last tick's view).
fn rollout_status_now(s: &Server) -> serde_json::Value {
    serde_json::from_slice(&admin(s, "GET", "/rollouts/worker").body).unwrap()
}

/// Pause, resume, promote and abort, through the admin API (which needs `X-Agent-Admin`,
/// as every state change there does) and `agent rollout`.
#[test]
fn operators_pause_resume_promote_and_abort() {
    let t = TempDir::new("rollout-ops");
    let src = source(&t, "v1");
    let s = start(&src, &["--inventory-store", "memory"]);
    let g1 = wait_good(&s, "");
    push(&src, "v2", Some(r#"{"steps": [1, 2], "haltAfter": 1}"#));
    wait_active(&s, &g1);
    let server = format!("http://{}", s.addr_of("admin"));
    let agent = |args: &[&str]| {
        let o = std::process::Command::new(AGENT)
            .args(["rollout", "--server", &server])
            .args(args)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, out, err) = agent(&["status", "worker"]);
    assert!(ok, "{err}");
    assert!(out.contains("state\trolling"), "{out}");
    // The answers of a rollout under way, against docs/openapi.json (the API's document
    // test cannot make one).
    let mut doc = support::openapi::Document::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json"),
    );
    let mut check = |method: &str, path: &str, r: &Resp| {
        doc.check(method, path, r.status, r.header("content-type"), &r.body);
    };
    let r = admin(&s, "GET", "/rollouts/worker");
    assert_eq!(r.status, 200);
    check("GET", "/rollouts/worker", &r);
    let r = admin(&s, "POST", "/rollouts/worker/pause");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    check("POST", "/rollouts/worker/pause", &r);
    let r = admin(&s, "POST", "/rollouts/worker/resume");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    check("POST", "/rollouts/worker/resume", &r);
    // Without the admin header a state change is refused.
    let a = s.addr_of("admin");
    assert_eq!(post(a, "/rollouts/worker/pause", "", "").status, 403);
    let (ok, out, err) = agent(&["pause", "worker"]);
    assert!(ok && out.contains("state\tpaused"), "{out}{err}");
    assert_eq!(boot(s.plain(), 0).0, "v1", "paused: no canary");
    let (ok, _, err) = agent(&["resume", "worker"]);
    assert!(ok, "{err}");
    assert_eq!(boot(s.plain(), 1).0, "v2", "resumed: the canary");
    assert_eq!(
        boot(s.plain(), 0).0,
        "v1",
        "machine 0 keeps what it was given"
    );
    let (ok, _, err) = agent(&["abort", "worker"]);
    assert!(ok, "{err}");
    assert_eq!(boot(s.plain(), 2).0, "v1", "aborted");
    assert_eq!(boot(s.plain(), 1).0, "v1", "aborted: the canary too");
    let (ok, _, err) = agent(&["pause", "worker"]);
    assert!(!ok && err.contains("aborted"), "{err}");
    let r = admin(&s, "POST", "/rollouts/worker/pause");
    assert_eq!(r.status, 409);
    check("POST", "/rollouts/worker/pause", &r);
    let (ok, out, err) = agent(&["promote", "worker"]);
    assert!(ok && out.contains("state\tcomplete"), "{out}{err}");
    assert_eq!(boot(s.plain(), 3).0, "v2", "promoted");
    assert_eq!(boot(s.plain(), 0).0, "v2", "promoted: every machine");
    let (ok, _, err) = agent(&["status", "nope"]);
    assert!(!ok && err.contains("no rollout policy"), "{err}");
}

/// A restart in the middle keeps the rollout: the canary given the new config, the stage's
/// count (no second canary after the restart), and a machine that never reports counts as
/// failed after the policy's deadline, halting it; the halt holds after another restart.
#[test]
fn a_restart_keeps_the_rollouts_state() {
    let t = TempDir::new("rollout-restart");
    let src = source(&t, "v1");
    let state = t.path().join("state");
    let st = state.to_str().unwrap();
    let mut s = start(&src, &["--state-dir", st]);
    let g1 = wait_good(&s, "");
    push(
        &src,
        "v2",
        Some(r#"{"steps": [1], "haltAfter": 1, "reportWithinSeconds": 3}"#),
    );
    wait_active(&s, &g1);
    assert_eq!(boot(s.plain(), 0).0, "v2", "the canary");
    assert!(s.terminate());
    let mut s = start(&src, &["--state-dir", st]);
    assert_eq!(
        roles(&s).1,
        g1,
        "lastKnownGood is still the previous generation"
    );
    assert_eq!(boot(s.plain(), 1).0, "v1", "the stage is full");
    assert_eq!(
        boot(s.plain(), 0).0,
        "v2",
        "the canary keeps the new config"
    );
    s.wait_for("the silent canary to halt the rollout", 20, |s| {
        rollout_status(s)["state"] == "halted"
    });
    let r = rollout_status(&s);
    assert!(
        r["halt"]["machines"][0]["error"]
            .as_str()
            .unwrap()
            .contains("no report"),
        "{r}"
    );
    assert!(s.terminate());
    let s = start(&src, &["--state-dir", st]);
    assert_eq!(boot(s.plain(), 2).0, "v1");
    assert_eq!(boot(s.plain(), 0).0, "v1", "halted: the canary too");
    assert_eq!(rollout_status_now(&s)["state"], "halted");
}

/// Without a policy a new config goes to every machine at once, as before.
#[test]
fn a_pool_without_a_policy_is_served_as_before() {
    let t = TempDir::new("rollout-none");
    let src = source(&t, "v1");
    let s = start(&src, &["--inventory-store", "memory"]);
    let g1 = wait_good(&s, "");
    push(&src, "v2", None);
    wait_active(&s, &g1);
    let got = herd(&[s.plain()], 0..10, 2, |_| true);
    assert!(got.values().all(|m| m == "v2"), "{got:?}");
    assert_eq!(rollout_status(&s), serde_json::Value::Null);
    assert_eq!(admin(&s, "GET", "/rollouts/worker").status, 404);
}

/// Two replicas on one etcd: machines boot through either, the canary count holds for both
/// together, and the halt one replica saw holds on the other; each machine gets the same
/// config from either replica.
#[test]
fn two_replicas_on_etcd_agree_on_every_machines_config() {
    let Some(bin) = etcd_cluster::etcd_binary() else {
        return;
    };
    let cluster = etcd_cluster::Cluster::start(&bin);
    let urls = cluster.clients.join(",");
    let t = TempDir::new("rollout-etcd");
    let src = source(&t, "good");
    let etcd = ["--inventory-store", "etcd", "--etcd-endpoints", &urls];
    let a = start(&src, &etcd);
    let b = start(&src, &etcd);
    let g1 = wait_good(&a, "");
    wait_good(&b, "");
    push(&src, "broken", Some(r#"{"steps": [2], "haltAfter": 1}"#));
    wait_active(&a, &g1);
    wait_active(&b, &g1);
    let got = herd(&[a.plain(), b.plain()], 0..40, 6, |m| m != "broken");
    let broken = got.values().filter(|m| *m == "broken").count();
    assert!((1..=2).contains(&broken), "{broken} got the broken config");
    for s in [&a, &b] {
        s.wait_for("the halt on both replicas", 15, |s| {
            rollout_status(s)["state"] == "halted"
        });
    }
    // Every machine gets the same config from either replica: the previous one now, the
    // failed canaries too (the provisioned machines boot from their disks).
    let canaries: Vec<usize> = got
        .iter()
        .filter(|(_, m)| *m == "broken")
        .map(|(i, _)| *i)
        .collect();
    for i in canaries.into_iter().chain(40..44) {
        assert_eq!(boot(a.plain(), i).0, "good");
        assert_eq!(boot(b.plain(), i).0, "good");
    }
    assert_eq!(rollout_status_now(&a), rollout_status_now(&b));
}
