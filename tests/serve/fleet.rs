//! The fleet side of `agent serve` (issue 28, docs/reports.md), over real sockets on
//! 127.0.0.1: machines POST reports to /report; the admin listener alone serves the
//! inventory (`/machines`, `/machines/<id>`, the page at `/ui/`), behind the admin token when
//! one is set; the page checked in a real browser (headless Chromium), its screenshots kept
//! in target/artifacts/.

use crate::etcd_cluster;
use crate::support;

use support::serve::*;

fn source(t: &TempDir) -> std::path::PathBuf {
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("worker"));
    write(&src.join("pools/infra.ign"), &worker_config("infra"));
    src
}

fn post(addr: std::net::SocketAddr, body: &str, auth: Option<&str>) -> Resp {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    request(
        addr,
        &format!(
            "POST /report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// GET with the listener's own address as Host (the admin listener answers no other).
fn get(addr: std::net::SocketAddr, path: &str, auth: Option<&str>) -> Resp {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"),
    )
}

/// `method path` on `addr` with `headers` (Host among them, if any) and no body.
fn raw(addr: std::net::SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut r = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
    request(addr, &r)
}

#[test]
fn reports_build_the_inventory_that_only_the_admin_listener_serves() {
    let t = TempDir::new("fleet");
    let src = source(&t);
    let s = serve_args(&src).quiet().start();
    let http = s.addr_of("http");
    let admin = s.addr_of("admin");

    // One machine provisions, one fails in the disks stage.
    let a = "4c4c4544-0000-0000-0000-00000000000a";
    let b = "4c4c4544-0000-0000-0000-00000000000b";
    for (i, (stage, last)) in [("fetch", false), ("disks", false), ("files", true)]
        .iter()
        .enumerate()
    {
        let r = post(
            http,
            &agent_report(&format!("a{i}"), a, stage, "ok", *last, None),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(
        post(
            http,
            &agent_report("b0", b, "fetch", "ok", false, None),
            None
        )
        .status,
        200
    );
    let failed = agent_report(
        "b1",
        b,
        "disks",
        "failed",
        false,
        Some("disks: mkfs.xfs on /dev/vdb failed: device busy"),
    );
    assert_eq!(post(http, &failed, None).status, 200);
    // A retry of the same report is stored once.
    let r = post(http, &failed, None);
    assert_eq!(r.status, 200);
    assert!(r.text().contains("duplicate"), "{}", r.text());
    // Bad reports: named field, nothing stored.
    let r = post(http, "{\"format\":1}", None);
    assert_eq!(r.status, 400, "{}", r.text());
    let r = post(http, "not json", None);
    assert_eq!(r.status, 400);
    assert_eq!(get(http, "/report", None).status, 405);

    // The machine-facing listener never serves the inventory.
    for p in [
        "/machines",
        "/machines/".to_string().as_str(),
        "/ui/",
        "/ui/machines/x",
    ] {
        assert_eq!(get(http, p, None).status, 404, "{p}");
    }

    // The admin listener (loopback, no token set): the inventory.
    let r = get(admin, "/machines", None);
    assert_eq!(r.status, 200, "{}", r.text());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let ms = v["machines"].as_array().unwrap();
    assert_eq!(ms.len(), 2);
    let state = |id: &str| {
        ms.iter()
            .find(|m| m["id"] == id)
            .map(|m| m["state"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(state(a), "provisioned");
    assert_eq!(state(b), "failed");
    let r = get(admin, "/machines?state=failed", None);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["machines"].as_array().unwrap().len(), 1);
    assert_eq!(get(admin, "/machines?state=bogus", None).status, 400);
    let r = get(admin, &format!("/machines/{b}"), None);
    assert_eq!(r.status, 200);
    let text = r.text();
    assert!(
        text.contains("device busy") && text.contains("mkfs.xfs: /dev/vdb"),
        "{text}"
    );
    assert_eq!(get(admin, "/machines/nope", None).status, 404);
    assert_eq!(get(admin, "/machines/..%2f..%2fetc", None).status, 404);

    // Metrics: reports by result, machines by state and pool.
    let m = get(http, "/metrics", None).text();
    assert!(
        m.contains("agent_serve_reports_total{result=\"recorded\"} 5"),
        "{m}"
    );
    assert!(
        m.contains("agent_serve_reports_total{result=\"duplicate\"} 1"),
        "{m}"
    );
    // Counted on a thread of their own: a scrape shows the counts once they are there; on the
    // admin listener only (what machines report is no label on the machine-facing one).
    s.wait_for(
        "machines by state and pool in the admin /metrics",
        30,
        |_| {
            get(admin, "/metrics", None)
                .text()
                .contains("agent_serve_machines{state=\"failed\",pool=\"worker\"} 1")
        },
    );
    assert!(
        !get(http, "/metrics", None)
            .text()
            .contains("agent_serve_machines")
    );

    // The command line reads the same inventory.
    let agent = |args: &[&str]| {
        let out = std::process::Command::new(AGENT)
            .arg("machines")
            .args(["--server", &format!("http://{admin}")])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let list = agent(&["list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with(&format!("{a}\tprovisioned\tworker"))),
        "{list}"
    );
    assert!(
        list.lines()
            .any(|l| l.starts_with(&format!("{b}\tfailed\tworker"))),
        "{list}"
    );
    let failed_only = agent(&["list", "--state", "failed"]);
    assert_eq!(
        failed_only.lines().count(),
        2,
        "header and one machine: {failed_only}"
    );
    let show = agent(&["show", b]);
    assert!(
        show.contains("error: disks: mkfs.xfs on /dev/vdb failed: device busy"),
        "{show}"
    );
    assert!(show.contains("| mkfs.xfs: /dev/vdb: device busy"), "{show}");

    // The page, in a real browser: rows, states, the error; a machine's page with its log.
    let dom = support::browser::dump_dom(&format!("http://{admin}/ui/"));
    assert!(
        dom.contains(&format!("data-machine=\"{a}\" data-state=\"provisioned\"")),
        "{dom}"
    );
    assert!(
        dom.contains(&format!("data-machine=\"{b}\" data-state=\"failed\"")),
        "{dom}"
    );
    assert!(
        dom.contains("mkfs.xfs on /dev/vdb failed: device busy"),
        "{dom}"
    );
    assert!(
        dom.contains("data-pool=\"worker\"") && dom.contains("data-pool=\"infra\""),
        "{dom}"
    );
    let one = support::browser::dump_dom(&format!("http://{admin}/ui/machines/{b}"));
    assert!(one.contains("data-error=\"disks\""), "{one}");
    assert!(one.contains("mkfs.xfs: /dev/vdb: device busy"), "{one}");
    assert!(one.contains("partition created: /dev/vda4"), "{one}");
    for (name, url, w, h) in [
        ("ui-machines", format!("http://{admin}/ui/"), 1280, 800),
        ("ui-machines-phone", format!("http://{admin}/ui/"), 390, 844),
        (
            "ui-machine-failed",
            format!("http://{admin}/ui/machines/{b}"),
            1280,
            900,
        ),
    ] {
        let p = support::browser::screenshot(&url, name, w, h);
        eprintln!("screenshot: {}", p.display());
    }
}

#[test]
fn the_admin_token_guards_the_inventory_and_machine_tokens_do_not_open_it() {
    let t = TempDir::new("fleet-admin");
    let src = source(&t);
    let token_file = t.path().join("admin.token");
    let admin_token = "0123456789abcdef0123456789abcdef";
    write(&token_file, &format!("{admin_token}\n"));
    let s = serve_args(&src)
        .quiet()
        .arg("--admin-token-file", &token_file)
        .start();
    let http = s.addr_of("http");
    let admin = s.addr_of("admin");
    // A machine's token (the legacy store's, for pool worker) authenticates its report...
    let machine_token = token_of(&s, "worker");
    let body = agent_report("r1", "m-1", "fetch", "ok", false, None)
        .replace("\"pool\":\"worker\"", "\"pool\":\"infra\"");
    let r = post(http, &body, Some(&format!("Bearer {machine_token}")));
    assert_eq!(r.status, 200, "{}", r.text());
    // ...but does not open the inventory; nothing without the admin token does.
    assert_eq!(get(admin, "/machines", None).status, 401);
    assert_eq!(
        get(admin, "/machines", Some(&format!("Bearer {machine_token}"))).status,
        401
    );
    assert_eq!(
        get(admin, "/ui/", Some("Bearer wrong-wrong-wrong-wrong")).status,
        401
    );
    let r = get(admin, "/machines", Some(&format!("Bearer {admin_token}")));
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let m = &v["machines"][0];
    // The pool comes from the token, not from the body.
    assert_eq!(m["pool"], "worker");
    assert_eq!(m["authenticated"], true);
    // The command line needs it too.
    let out = std::process::Command::new(AGENT)
        .args(["machines", "list", "--server", &format!("http://{admin}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--admin-token-file"));
    let out = std::process::Command::new(AGENT)
        .args([
            "machines",
            "list",
            "--server",
            &format!("http://{admin}"),
            "--admin-token-file",
        ])
        .arg(&token_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("m-1\tprovisioning\tworker"));
    // A browser's Basic prompt: any user, the token as password.
    let basic = spec::encoding::data_url::base64_encode(format!("ops:{admin_token}").as_bytes());
    assert_eq!(
        get(admin, "/ui/", Some(&format!("Basic {basic}"))).status,
        200
    );
    // A malformed machine token is refused outright (an unknown well-formed one is 503, as
    // for a config: a booting machine's token may not be known yet).
    assert_eq!(
        post(
            http,
            &agent_report("r2", "m-1", "disks", "ok", false, None),
            Some("Bearer nope")
        )
        .status,
        401
    );
}

#[test]
fn an_admin_listener_off_loopback_needs_a_token() {
    let t = TempDir::new("fleet-off-loopback");
    let src = source(&t);
    let out = serve_args(&src)
        .arg("--admin-listen", "0.0.0.0:0")
        .arg("--state-dir", t.path().join("state"))
        .command()
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admin-token-file"), "{err}");
}

/// `agent run` against `agent serve` (issue 28's loop closed): a machine that provisions and
/// one whose files stage fails both appear in the inventory with the right state, pool and
/// config, stage durations, and (for the failure) the error — authenticated by the token
/// their pointer config carries.
#[test]
#[ignore = "needs root: make test-root"]
fn agent_run_reports_land_in_the_inventory() {
    support::root::must_be_root();
    let t = TempDir::new("fleet-e2e");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("e2e"));
    // A pool whose file cannot be fetched (nothing listens; httpTotal bounds the retries):
    // its files stage fails.
    write(
        &src.join("pools/broken.ign"),
        r#"{"ignition":{"version":"3.1.0","timeouts":{"httpTotal":3}},"storage":{"files":[{"path":"/etc/app.conf","contents":{"source":"http://127.0.0.1:9/absent?token=querysecret"}}]}}"#,
    );
    let s = serve_args(&src).quiet().start();
    let http = s.addr_of("http");
    let admin = s.addr_of("admin");
    let run = |pool: &str, uuid: &str| {
        let token = token_of(&s, pool);
        let dir = TempDir::new("fleet-e2e-run");
        let root = dir.path().join("root");
        let state = dir.path().join("state");
        let dmi = dir.path().join("dmi");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&dmi).unwrap();
        std::fs::write(dmi.join("product_uuid"), format!("{uuid}\n")).unwrap();
        let cfg = dir.path().join("pointer.ign");
        std::fs::write(
            &cfg,
            serde_json::json!({"ignition": {"version": "3.4.0", "config": {"merge": [
                {"source": format!("http://{http}/config/{pool}"),
                 "httpHeaders": [{"name": "Authorization", "value": format!("Bearer {token}")}]}
            ]}}})
            .to_string(),
        )
        .unwrap();
        let cmdline = dir.path().join("cmdline");
        std::fs::write(&cmdline, "quiet").unwrap();
        let out = std::process::Command::new(AGENT)
            .args(["run", "--root"])
            .arg(&root)
            .arg("--state-dir")
            .arg(&state)
            .arg("--config-file")
            .arg(&cfg)
            .arg("--test-kernel-cmdline-file")
            .arg(&cmdline)
            .args(["--system-config-dir", "/nonexistent"])
            .arg("--test-dmi-dir")
            .arg(&dmi)
            .output()
            .unwrap();
        (out, dir)
    };
    let good = "4c4c4544-0000-0000-0000-0000000000e1";
    let bad = "4c4c4544-0000-0000-0000-0000000000e2";
    let (out, _d1) = run("worker", good);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, _d2) = run("broken", bad);
    assert!(!out.status.success());

    let r = get(admin, &format!("/machines/{good}"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let m: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(m["state"], "provisioned");
    assert_eq!(m["pool"], "worker");
    assert_eq!(m["authenticated"], true);
    let served = get(http, "/config/worker", None);
    assert_eq!(
        m["config"]["name"].as_str(),
        served.header("x-agent-config"),
        "the config the machine applied is the one served"
    );
    let stages: Vec<String> = m["boots"][0]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}:{}",
                s["stage"].as_str().unwrap(),
                s["outcome"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(stages, ["fetch:ok", "disks:ok", "files:ok"]);

    let r = get(admin, &format!("/machines/{bad}"), None);
    let m: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(m["state"], "failed", "{m}");
    assert_eq!(m["pool"], "broken");
    let files = m["boots"][0]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "files")
        .unwrap()
        .clone();
    assert_eq!(files["outcome"], "failed");
    let err = files["error"].as_str().unwrap();
    assert!(
        err.contains("/etc/app.conf") || err.contains("127.0.0.1:9"),
        "{err}"
    );
    assert!(
        !r.text().contains("querysecret"),
        "no query string in the inventory"
    );
    assert!(!files["detail"]["logTail"].as_array().unwrap().is_empty());
}

/// The inventory's `name` gauge or counter, from the admin listener (its own event loop).
fn admin_metric(admin: std::net::SocketAddr, name: &str) -> Option<u64> {
    get(admin, "/metrics", None)
        .text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// `agent serve` on `src` with the inventory on `cluster` (and `extra` flags).
fn start_on_etcd(src: &std::path::Path, cluster: &etcd_cluster::Cluster, extra: &[&str]) -> Server {
    serve_args(src)
        .quiet()
        .arg("--inventory-store", "etcd")
        .arg("--etcd-endpoints", cluster.clients.join(","))
        .with(extra)
        .start()
}

/// The store is called off the event loop (docs/reports.md, "The report queue"): with every
/// member of the etcd cluster stopped (SIGSTOP) a report waits for the store, unanswered,
/// while a config fetch on the same (and only) event loop is answered; once the members go
/// on, the report is answered and stored. On the old code the loop itself waited for etcd.
#[test]
fn a_stalled_store_holds_the_report_not_the_event_loop() {
    use std::io::{Read, Write};
    let Some(etcd) = etcd_cluster::etcd_binary() else {
        return;
    };
    let cluster = etcd_cluster::Cluster::start(&etcd);
    let t = TempDir::new("fleet-stalled");
    let src = source(&t);
    let s = start_on_etcd(&src, &cluster, &["--threads", "1"]);
    let http = s.addr_of("http");
    let admin = s.addr_of("admin");
    let m = "4c4c4544-0000-0000-0000-0000000000c1";
    // The store works.
    let r = post(
        http,
        &agent_report("c0", m, "fetch", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());

    for i in 0..3 {
        cluster.stop(i);
    }
    let body = agent_report("c1", m, "disks", "ok", false, None);
    let mut pending = std::net::TcpStream::connect(http).unwrap();
    write!(
        pending,
        "POST /report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // The report has reached the store's writers (the admin listener runs a loop of its own).
    s.wait_for("the report to wait for the stopped store", 30, |_| {
        admin_metric(admin, "agent_serve_reports_waiting") == Some(1)
    });
    // The event loop that read it answers a config fetch meanwhile.
    let r = get(http, "/config/worker", None);
    assert_eq!(r.status, 200, "{}", r.text());
    // ... and the report is still unanswered.
    pending.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    match pending.read(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!(
            "the report was answered while the store was stopped: {other:?} {:?}",
            String::from_utf8_lossy(&buf)
        ),
    }

    for i in 0..3 {
        cluster.resume(i);
    }
    pending.set_nonblocking(false).unwrap();
    // A bound, not a measurement: the store's own bound on a report is about a minute.
    pending
        .set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    let mut out = Vec::new();
    pending.read_to_end(&mut out).unwrap();
    let r = parse_response(&out, false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("\"new\""), "{}", r.text());
    let r = get(admin, &format!("/machines/{m}"), None);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let stages: Vec<_> = v["boots"][0]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(stages, ["fetch", "disks"], "{v}");
    assert_eq!(admin_metric(admin, "agent_serve_reports_waiting"), Some(0));
}

/// The report body limit is `--max-body-bytes` (docs/reports.md, "Limits"), not a second fixed
/// 256 KiB behind it: raised, a larger report is taken; past it, 413 names the flag.
#[test]
fn the_report_body_limit_is_the_flag() {
    let t = TempDir::new("fleet-body-limit");
    let src = source(&t);
    let s = serve_args(&src)
        .quiet()
        .arg("--max-body-bytes", "400000")
        .start();
    let http = s.addr_of("http");
    let report_of = |id: &str, paths: usize| {
        let mut v: serde_json::Value = serde_json::from_str(&agent_report(
            id,
            "4c4c4544-0000-0000-0000-0000000000d1",
            "files",
            "ok",
            true,
            None,
        ))
        .unwrap();
        v["changes"]["paths"] = (0..paths)
            .map(|i| format!("/var/lib/{i:04}/{}", "p".repeat(3000)))
            .collect();
        v.to_string()
    };
    let big = report_of("d1", 100);
    assert!(
        big.len() > 256 * 1024 && big.len() < 400_000,
        "{}",
        big.len()
    );
    let r = post(http, &big, None);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(http, &report_of("d2", 140), None);
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("--max-body-bytes"), "{}", r.text());
}

/// `--max-machines` (docs/reports.md, "Limits"): at the limit a report of a new machine is
/// answered 507 naming the flag (a 5xx: the agent keeps it queued), nothing of it is stored,
/// a known machine's reports are still recorded, and the refusal is counted in /metrics.
/// `/machines` answers a page at a time (`?limit=`, `?after=`, `next`); `agent machines list`
/// reads them.
#[test]
fn the_machine_limit_is_the_flag_and_listings_page() {
    let t = TempDir::new("fleet-max-machines");
    let src = source(&t);
    let s = serve_args(&src).quiet().arg("--max-machines", "2").start();
    let http = s.addr_of("http");
    let admin = s.addr_of("admin");
    for m in ["m-1", "m-2"] {
        let r = post(
            http,
            &agent_report(&format!("{m}-a"), m, "fetch", "ok", false, None),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let r = post(
        http,
        &agent_report("m-3-a", "m-3", "fetch", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 507, "{}", r.text());
    assert!(r.text().contains("--max-machines"), "{}", r.text());
    assert!(r.text().contains("m-3"), "{}", r.text());
    let r = post(
        http,
        &agent_report("m-1-b", "m-1", "disks", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let listing: serde_json::Value =
        serde_json::from_str(&get(admin, "/machines", None).text()).unwrap();
    let ids: Vec<&str> = listing["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m-1", "m-2"]);
    assert_eq!(
        admin_metric(admin, "agent_serve_reports_total{result=\"full\"}"),
        Some(1)
    );
    assert_eq!(get(admin, "/machines/m-3", None).status, 404);

    let page = |q: &str| -> serde_json::Value {
        let r = get(admin, &format!("/machines?{q}"), None);
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_str(&r.text()).unwrap()
    };
    let first = page("limit=1");
    assert_eq!(first["machines"].as_array().unwrap().len(), 1);
    assert_eq!(first["machines"][0]["id"], "m-1");
    assert_eq!(first["next"], "m-1");
    let second = page("limit=1&after=m-1");
    assert_eq!(second["machines"][0]["id"], "m-2");
    assert!(second["next"].is_null(), "{second}");
    for bad in ["limit=0", "limit=10001", "limit=x", "after=%2F"] {
        let r = get(admin, &format!("/machines?{bad}"), None);
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
    // `agent machines list` follows the pages (one machine each here) and prints them as
    // they come: as text, and as one JSON document equal to the server's whole listing.
    let list = |extra: &[&str]| {
        let out = std::process::Command::new(AGENT)
            .args(["machines", "--server", &format!("http://{admin}"), "list"])
            .args(extra)
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{listed}");
        listed
    };
    for size in ["1", "1000"] {
        let listed = list(&["--page-size", size]);
        let rows: Vec<&str> = listed
            .lines()
            .skip(1)
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        assert_eq!(rows, ["m-1", "m-2"], "{listed}");
        let json: serde_json::Value =
            serde_json::from_str(&list(&["--page-size", size, "--json"])).unwrap();
        assert_eq!(json["machines"], listing["machines"], "--page-size {size}");
    }
    let empty: serde_json::Value =
        serde_json::from_str(&list(&["--pool", "none", "--json"])).unwrap();
    assert_eq!(empty, serde_json::json!({ "machines": [] }));
}

/// The admin listener answers no other web page (docs/reports.md, "Reading the inventory"),
/// checked as the attack ran, in a real browser: a page on another 127.0.0.1 port submits a
/// form and sends fetch() requests to reprovision machines, and a page under another name
/// that resolves to 127.0.0.1 (DNS rebinding) reads the inventory. Neither works; the
/// command line's reprovision (same origin, X-Agent-Admin) still does; no answer may be
/// framed.
#[test]
fn the_admin_listener_answers_no_other_page_in_a_real_browser() {
    let t = TempDir::new("fleet-csrf");
    let src = source(&t);
    let s = serve_args(&src)
        .quiet()
        .arg("--admin-host", "inventory.example")
        .start();
    let (http, admin) = (s.addr_of("http"), s.addr_of("admin"));
    let machines = ["m-form", "m-fetch", "m-header", "m-raw", "m-cli"];
    for m in machines {
        let r = post(
            http,
            &agent_report(&format!("r-{m}"), m, "fetch", "ok", false, None),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let reprovision = |m: &str| -> serde_json::Value {
        let r = get(admin, &format!("/machines/{m}"), None);
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["reprovision"].clone()
    };

    // The attacker's page, on another port of 127.0.0.1: an auto-submitting form (into a
    // frame, so the page stays) and two fetch() calls, one a "simple" request, one with the
    // header the admin listener asks for (which needs a CORS preflight). Each reports back
    // to the attacker's server once done, so the test knows the attack ran.
    let target = format!("http://{admin}");
    let page = format!(
        r#"<!doctype html><html><body>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" target="sink" enctype="text/plain" action="{target}/machines/m-form/reprovision"><input name="a" value="b"></form>
<script>
function mark(what) {{ var i = new Image(); i.src = "/done?" + what; document.body.append(what + ";"); }}
document.getElementById("sink").onload = function () {{ mark("form"); }};
document.getElementById("f").submit();
fetch("{target}/machines/m-fetch/reprovision", {{method: "POST", mode: "no-cors", body: "x"}})
  .then(function () {{ mark("fetch"); }}, function () {{ mark("fetch-failed"); }});
fetch("{target}/machines/m-header/reprovision", {{method: "POST", headers: {{"X-Agent-Admin": "1"}}, body: "{{}}"}})
  .then(function () {{ mark("header"); }}, function () {{ mark("header-failed"); }});
</script></body></html>"#
    );
    let attacker = Canned::start("127.0.0.1:0", move |head| {
        if head.starts_with("GET / ") {
            (200, "text/html; charset=utf-8", page.clone().into_bytes())
        } else {
            (200, "text/plain", Vec::new())
        }
    });
    let dom = support::browser::run_page(
        &format!("http://{}/", attacker.addr),
        std::time::Duration::from_secs(10),
        &[],
    );
    let seen: Vec<String> = attacker
        .seen()
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    for mark in [
        "GET /done?form ",
        "GET /done?fetch ",
        "GET /done?header-failed ",
    ] {
        assert!(
            seen.iter().any(|r| r.starts_with(mark)),
            "the attack's {mark:?} did not run: {seen:?}\n{dom}"
        );
    }
    for m in ["m-form", "m-fetch", "m-header"] {
        assert!(
            reprovision(m).is_null(),
            "{m} was marked for reprovision by another page"
        );
    }

    // DNS rebinding: a name of the attacker's that resolves to 127.0.0.1, in the browser.
    let rebound = support::browser::run_page(
        &format!("http://rebind.attacker.example:{}/machines", admin.port()),
        std::time::Duration::from_secs(2),
        &[("rebind.attacker.example", "127.0.0.1")],
    );
    assert!(!rebound.contains("m-form"), "{rebound}");
    assert!(rebound.contains("--admin-host"), "{rebound}");
    // The same over a plain socket, and the names it does answer to.
    let host = format!("rebind.attacker.example:{}", admin.port());
    let r = raw(admin, "GET", "/machines", &[("Host", &host)]);
    assert_eq!(r.status, 421);
    assert!(r.text().contains("--admin-host NAME"), "{}", r.text());
    assert_eq!(raw(admin, "GET", "/ui/", &[]).status, 421, "no Host");
    for ok in [
        format!("localhost:{}", admin.port()),
        admin.to_string(),
        "inventory.example".into(),
        "Inventory.Example:8443".into(),
    ] {
        assert_eq!(
            raw(admin, "GET", "/machines", &[("Host", &ok)]).status,
            200,
            "{ok}"
        );
    }

    // State-changing requests: X-Agent-Admin, and the listener's own Origin when one is sent.
    let me = admin.to_string();
    let other = format!("http://{}", attacker.addr);
    let r = raw(
        admin,
        "POST",
        "/machines/m-raw/reprovision",
        &[("Host", &me)],
    );
    assert_eq!(r.status, 403);
    assert!(r.text().contains("X-Agent-Admin: 1"), "{}", r.text());
    let r = raw(
        admin,
        "POST",
        "/machines/m-raw/reprovision",
        &[("Host", &me), ("X-Agent-Admin", "1"), ("Origin", &other)],
    );
    assert_eq!(r.status, 403, "{}", r.text());
    let r = raw(
        admin,
        "POST",
        "/machines/m-raw/reprovision",
        &[
            ("Host", &me),
            ("X-Agent-Admin", "1"),
            ("Sec-Fetch-Site", "same-site"),
        ],
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(reprovision("m-raw").is_null());
    let own = format!("http://{admin}");
    let r = raw(
        admin,
        "POST",
        "/machines/m-raw/reprovision",
        &[("Host", &me), ("X-Agent-Admin", "1"), ("Origin", &own)],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!reprovision("m-raw").is_null());
    // The command line sends what it needs.
    let out = std::process::Command::new(AGENT)
        .args(["machines", "--server", &own, "reprovision", "m-cli"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!reprovision("m-cli").is_null());

    // No answer may be framed; the page still runs no script.
    for path in ["/ui/", "/machines", "/nope"] {
        let r = get(admin, path, None);
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{path}");
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"),
            "{path}: {csp}"
        );
    }
}

/// Another program holds the admin port before `agent serve` starts (any local user can bind
/// 127.0.0.1:22625): the server serves machines all the same, says so in /status, and binds
/// the admin port once it is free; `agent machines` with the admin token sends the holder
/// nothing it can use (read here: what it received) and takes no answer from it.
#[test]
fn a_program_on_the_admin_port_gets_no_token_and_machines_are_still_served() {
    use std::io::BufRead;
    let t = TempDir::new("fleet-squat");
    let src = source(&t);
    let token_file = t.path().join("admin.token");
    let admin_token = "squatted-0123456789abcdef-token";
    write(&token_file, &format!("{admin_token}\n"));
    let squatter = Canned::start("127.0.0.1:0", |head| {
        let body: &[u8] = if head.starts_with("GET /auth/challenge") {
            br#"{"nonce": "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff0011223344556677"}"#
        } else {
            br#"{"machines": [{"id": "forged-machine", "state": "provisioned"}]}"#
        };
        (200, "application/json", body.to_vec())
    });
    let admin = squatter.addr;
    let log = t.path().join("serve.log");
    let mut child = serve_args(&src)
        .quiet()
        .arg("--admin-listen", admin.to_string())
        .arg("--admin-token-file", &token_file)
        .arg("--state-dir", t.path().join("state"))
        .command()
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let line = |what: &str| {
        rx.recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!(
                    "agent serve gave no {what} line: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
    };
    let first = line("listening");
    let http: std::net::SocketAddr = first
        .strip_prefix("listening http://")
        .unwrap_or_else(|| panic!("{first}"))
        .parse()
        .unwrap();
    let s = Server {
        child,
        addr: http,
        scheme: "http".into(),
        listeners: vec![("http".into(), http)],
        state: None,
        state_dir: t.path().join("state"),
    };
    let loaded = line("source loaded");
    assert!(loaded.starts_with("source loaded"), "{loaded}");

    // The machine listener is up, and /status tells why the admin listener is not.
    assert_eq!(get(http, "/healthz", None).status, 200);
    assert_eq!(get(http, "/config/worker", None).status, 200);
    let status = s.status();
    assert_eq!(status["admin"]["bound"], false, "{status}");
    let why = status["admin"]["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("--admin-listen") && why.contains("in use"),
        "{why}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("without the admin listener"), "{logged}");

    // The command line, with the token, against the program holding the port.
    let machines = |args: &[&str]| {
        std::process::Command::new(AGENT)
            .args([
                "machines",
                "--server",
                &format!("http://{admin}"),
                "--admin-token-file",
            ])
            .arg(&token_file)
            .args(args)
            .output()
            .unwrap()
    };
    for args in [&["list"][..], &["show", "m-1"], &["reprovision", "m-1"]] {
        let out = machines(args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!out.status.success(), "{args:?}: {stdout}");
        assert!(!stdout.contains("forged-machine"), "{args:?}: {stdout}");
        assert!(
            stderr.contains("does not prove the server holds the admin token"),
            "{args:?}: {stderr}"
        );
    }
    let received: Vec<u8> = squatter.seen().concat();
    let text = String::from_utf8_lossy(&received);
    assert!(text.contains("GET /auth/challenge"), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("authorization: agent-hmac nonce="),
        "{text}"
    );
    for secret in [
        admin_token.to_string(),
        spec::encoding::data_url::base64_encode(admin_token.as_bytes()),
        spec::encoding::data_url::base64_encode(format!(":{admin_token}").as_bytes()),
    ] {
        assert!(
            !text.contains(&secret),
            "the token reached the port's holder: {text}"
        );
    }

    // The port free again: the admin listener binds it (tried every 5 s), and the command
    // line's requests and the server's proofs pass.
    drop(squatter);
    let bound = line("listening admin");
    assert_eq!(bound, format!("listening admin http://{admin}"));
    assert_eq!(s.status()["admin"]["bound"], true);
    let r = post(
        http,
        &agent_report("r1", "m-1", "fetch", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let out = machines(&["list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("m-1\tprovisioning\tworker"));
    let out = machines(&["reprovision", "m-1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("installs again"));
    // Bearer still opens it (curl, a Prometheus scrape): where the listener is trusted.
    let r = get(admin, "/metrics", Some(&format!("Bearer {admin_token}")));
    assert_eq!(r.status, 200);
}

/// Reports naming 500 pools the source does not serve: no report's pool becomes a label on
/// the machine listener's /metrics (which anyone who reaches it may read), which stays the
/// size it was; the admin /metrics has the machine counts, with those pools summed as one.
#[test]
fn report_pools_are_no_labels_on_the_machine_listener() {
    let t = TempDir::new("fleet-pool-labels");
    let src = source(&t);
    let s = serve_args(&src).quiet().start();
    let (http, admin) = (s.addr_of("http"), s.addr_of("admin"));
    let before = get(http, "/metrics", None).body.len();
    for i in 0..500 {
        let body = agent_report(
            &format!("r-{i}"),
            &format!("m-{i}"),
            "fetch",
            "ok",
            false,
            None,
        )
        .replace("\"pool\":\"worker\"", &format!("\"pool\":\"made-up-{i}\""));
        let r = post(http, &body, None);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let r = post(
        http,
        &agent_report("r-w", "m-w", "fetch", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 200);
    // Counted on a thread of their own, every 5 s at most: the first scrape asks.
    s.wait_for("the admin /metrics to count 501 machines", 30, |_| {
        get(admin, "/metrics", None)
            .text()
            .lines()
            .filter_map(|l| l.strip_prefix("agent_serve_machines{"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum::<u64>()
            == 501
    });
    let m = get(http, "/metrics", None).text();
    assert!(!m.contains("made-up-"), "{m}");
    assert!(!m.contains("agent_serve_machines"), "{m}");
    let a = get(admin, "/metrics", None).text();
    assert!(
        a.contains("agent_serve_machines{state=\"provisioning\",pool=\"(other)\"} 500"),
        "{a}"
    );
    assert!(
        a.contains("agent_serve_machines{state=\"provisioning\",pool=\"worker\"} 1"),
        "{a}"
    );
    assert!(!a.contains("made-up-"), "{a}");
    // Its size: the same lines as before the reports, with larger counts (and the requests'
    // own series: pool "-" for reports). docs/reports.md gives the bound.
    eprintln!("machine /metrics: {before} bytes before, {} after", m.len());
    assert!(m.len() < 16 * 1024, "{} bytes", m.len());
}

/// What machines reported is printed with its control characters escaped: a hostname or an
/// error holding an OSC title sequence, a line break with a forged row, a right-to-left
/// override. The answer comes from a test server (no token: any listener is believed), as
/// a record holding those bytes would.
#[test]
fn machines_list_and_show_print_reported_text_escaped() {
    let evil = "host\u{1b}]0;pwned\u{7}\nforged-row\tprovisioned\u{202e}txt.exe\u{9b}";
    let machine = serde_json::json!({
        "id": "m-1", "state": "failed", "pool": "worker", "lastSeen": "1970-01-01T00:00:00Z",
        "config": {"name": "c\u{1b}[2J", "hash": null},
        "identity": {"hostname": evil, "platform": "qemu"},
        "authenticated": false,
        "boots": [{"bootId": "b\u{2066}1", "stages": [{"stage": "disks", "outcome": "failed",
            "durationMs": 1, "error": evil, "detail": {"logTail": [evil]}}]}],
    });
    let list = serde_json::json!({"machines": [machine.clone()]}).to_string();
    let one = machine.to_string();
    let server = Canned::start("127.0.0.1:0", move |head| {
        let body = if head.starts_with("GET /machines?") {
            list.clone()
        } else {
            one.clone()
        };
        (200, "application/json", body.into_bytes())
    });
    let run = |args: &[&str]| {
        let out = std::process::Command::new(AGENT)
            .args(["machines", "--server", &format!("http://{}", server.addr)])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    for args in [
        &["list"][..],
        &["show", "m-1"],
        &["--json", "list"],
        &["--json", "show", "m-1"],
    ] {
        let out = run(args);
        for bad in ['\u{1b}', '\u{7}', '\u{202e}', '\u{2066}', '\u{9b}'] {
            assert!(!out.contains(bad), "{args:?}: {bad:?} printed raw: {out:?}");
        }
        assert!(
            !out.lines().any(|l| l.starts_with("forged-row")),
            "{args:?}: a forged line: {out}"
        );
        if args[0] != "--json" {
            assert!(
                out.contains(r"host\x1b]0;pwned\x07\nforged-row\tprovisioned\u{202e}txt.exe\u{9b}"),
                "{args:?}: {out}"
            );
        } else {
            // Still JSON, with the same strings.
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            let host = if args[1] == "list" {
                &v["machines"][0]["identity"]["hostname"]
            } else {
                &v["identity"]["hostname"]
            };
            assert_eq!(host, evil, "{out}");
        }
    }
    let list = run(&["list"]);
    assert_eq!(list.lines().count(), 2, "header and one row: {list}");
    assert!(list.contains("1970-01-01T00:00:00Z"), "{list}");
    let show = run(&["show", "m-1"]);
    assert!(show.contains(r"boot b\u{2066}1"), "{show}");
    assert!(show.contains("disks\tfailed\t1 ms"), "{show}");
}

/// The server's resident memory (KiB).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Reports parked while the store cannot take them stay within the documented bound
/// (docs/reports.md, "The report queue": the bodies being read and 32 MiB of queued bodies,
/// about as much again parsed): 1,700 connections of 245 KiB reports against a stopped etcd
/// (416 MiB sent) keep the server's growth under 160 MiB (it was 530–710 MiB), and once the
/// store is back a report is recorded.
#[test]
fn parked_reports_stay_within_their_memory_bound() {
    use std::io::Write;
    let Some(etcd) = etcd_cluster::etcd_binary() else {
        return;
    };
    let lim = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, lim.1, lim.1)
        .unwrap();
    let cluster = etcd_cluster::Cluster::start(&etcd);
    let t = TempDir::new("fleet-parked");
    let src = source(&t);
    let s = start_on_etcd(&src, &cluster, &["--defer-accept", "0"]);
    let http = s.addr_of("http");
    let pid = s.child.id();
    let r = post(
        http,
        &agent_report("p0", "m-p0", "fetch", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let base = rss_kib(pid);
    for i in 0..3 {
        cluster.stop(i);
    }
    // 245 KiB reports: log lines (50 x 1,000) and paths (48 x 4,000).
    let big = |i: usize| {
        let mut v: serde_json::Value = serde_json::from_str(&agent_report(
            &format!("p{i}"),
            &format!("m-p{i}"),
            "files",
            "failed",
            true,
            Some("x"),
        ))
        .unwrap();
        v["logTail"] = serde_json::json!(vec!["l".repeat(1000); 50]);
        v["changes"]["paths"] = serde_json::json!(vec!["p".repeat(4000); 48]);
        let body = v.to_string();
        format!(
            "POST /report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    let one = big(1);
    assert!(
        one.len() > 236 * 1024 && one.len() < 256 * 1024,
        "{}",
        one.len()
    );
    let mut conns: Vec<(std::net::TcpStream, Vec<u8>, usize)> = Vec::new();
    let mut peak = base;
    for i in 1..=1700 {
        let c = std::net::TcpStream::connect(http).unwrap();
        c.set_nonblocking(true).unwrap();
        conns.push((c, big(i), 0));
        if i % 50 == 0 {
            peak = peak.max(rss_kib(pid));
        }
    }
    // Push every body as far as the server takes it, for at most 30 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let mut moved = false;
        for (c, body, at) in &mut conns {
            while *at < body.len() {
                match c.write(&body[*at..]) {
                    Ok(n) if n > 0 => {
                        *at += n;
                        moved = true;
                    }
                    _ => break,
                }
            }
        }
        peak = peak.max(rss_kib(pid));
        if !moved {
            std::thread::sleep(std::time::Duration::from_millis(200));
            if conns.iter().all(|(_, b, at)| *at == b.len()) {
                break;
            }
        }
    }
    peak = peak.max(rss_kib(pid));
    let sent: usize = conns.iter().map(|(_, _, at)| at).sum();
    for i in 0..3 {
        cluster.resume(i);
    }
    drop(conns);
    let grew = (peak - base) / 1024;
    assert!(
        grew < 160,
        "the server grew by {grew} MiB ({} MiB sent to it)",
        sent >> 20
    );
    // Back: a report is recorded (bounded: the store's own bound on a report is a minute).
    let after = agent_report("p-after", "m-after", "fetch", "ok", false, None);
    let raw = format!(
        "POST /report HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{after}",
        after.len()
    );
    s.wait_for("a report recorded after the store came back", 120, |_| {
        use std::io::Read;
        let Ok(mut c) = std::net::TcpStream::connect(http) else {
            return false;
        };
        let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(10)));
        let mut out = Vec::new();
        c.write_all(raw.as_bytes()).is_ok()
            && c.read_to_end(&mut out).is_ok()
            && out.starts_with(b"HTTP/1.1 200")
    });
    eprintln!(
        "parked reports: {} MiB sent, the server grew by {grew} MiB",
        sent >> 20
    );
}

/// A report of `machine` with a long log tail (about 46 KiB): what fills a small disk fast.
fn big_report(id: &str, machine: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&agent_report(
        id,
        machine,
        "files",
        "failed",
        true,
        Some("files: writing /etc/app.conf failed"),
    ))
    .unwrap();
    v["logTail"] = (0..50)
        .map(|i| format!("{id} line {i} {}", "x".repeat(900)))
        .collect();
    v.to_string()
}

/// A tmpfs of `size` mounted at `at` (created), unmounted (lazily) on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        support::sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
                at.to_str().unwrap(),
            ],
            None,
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the filesystem of `dir` with the file `fill` until a write fails (no space left).
fn fill_up(fill: &std::path::Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(fill).unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    let mut small = vec![0x5au8; 512];
    loop {
        if let Err(e) = f.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(nix::libc::ENOSPC), "{e}");
            break;
        }
    }
    // The last bytes, in small writes.
    while f.write_all(&small).is_ok() {
        small[0] = small[0].wrapping_add(1);
    }
    let _ = f.sync_all();
}

/// The embedded store on a full disk (a 8 MiB tmpfs as `--state-dir`, filled up): reports
/// are answered 503, `/status` shows the store down with the error and both `/metrics` say
/// `agent_serve_inventory_up 0`; once space is freed the next reports are recorded (200)
/// and the store is up again, by the same server process (it closed and opened its file
/// again, which redb repairs to its last commit), with what was recorded before still there.
/// On the old code every report after the disk was full was refused until a restart.
#[test]
#[ignore = "needs root: make test-root"]
fn the_embedded_store_recovers_from_a_full_disk_without_a_restart() {
    support::root::must_be_root();
    let t = TempDir::new("fleet-full");
    let src = source(&t);
    let state = t.path().join("state");
    let _tmpfs = Tmpfs::mount(&state, "8m");
    let s = serve_args(&src).quiet().arg("--state-dir", &state).start();
    let pid = s.child.id();
    let http = s.addr_of("http");
    let admin = s.addr_of("admin");
    let m = |i: usize| format!("4c4c4544-0000-0000-0000-{i:012x}");
    for i in 0..2 {
        let r = post(http, &big_report(&format!("before-{i}"), &m(i)), None);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let st = s.status();
    assert_eq!(st["inventory"]["ok"], true, "{st}");
    assert_eq!(st["inventory"]["failures"], 0, "{st}");

    fill_up(&state.join("fill"));
    // The next reports are refused: the first that finds no room, and every one after it.
    let mut n = 100;
    let first = (0..20)
        .find(|_| {
            n += 1;
            post(http, &big_report(&format!("full-{n}"), &m(n)), None).status == 503
        })
        .expect("a report refused on the full disk");
    for i in 0..5 {
        // Each after the store tried to open its file again (at most once a second).
        std::thread::sleep(std::time::Duration::from_millis(1100));
        n += 1;
        let r = post(http, &big_report(&format!("full-{n}"), &m(n)), None);
        assert_eq!(r.status, 503, "report {i} on the full disk: {}", r.text());
        assert!(r.text().contains("inventory store"), "{}", r.text());
    }
    let st = s.status();
    let inv = &st["inventory"];
    assert_eq!(inv["ok"], false, "{st}");
    let err = inv["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("No space left on device") && err.contains("inventory.db"),
        "{err}"
    );
    assert!(
        inv["since"]
            .as_str()
            .is_some_and(support::openapi::rfc3339_utc),
        "{st}"
    );
    assert!(inv["failures"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(s.metric("agent_serve_inventory_up"), 0);
    assert_eq!(admin_metric(admin, "agent_serve_inventory_up"), Some(0));
    assert!(admin_metric(admin, "agent_serve_inventory_failures_total").unwrap() >= 1);
    eprintln!("first refused report: number {first} after the disk filled up");

    // Space freed: the next reports are recorded, by the same process.
    std::fs::remove_file(state.join("fill")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let mut recorded = Vec::new();
    for i in 0..5 {
        n += 1;
        let r = post(http, &big_report(&format!("after-{n}"), &m(n)), None);
        assert_eq!(
            r.status,
            200,
            "report {i} after space was freed: {}",
            r.text()
        );
        recorded.push(m(n));
    }
    assert_eq!(s.child.id(), pid);
    let st = s.status();
    assert_eq!(st["inventory"]["ok"], true, "{st}");
    assert!(st["inventory"]["error"].is_null(), "{st}");
    assert_eq!(s.metric("agent_serve_inventory_up"), 1);
    assert_eq!(admin_metric(admin, "agent_serve_inventory_up"), Some(1));
    for id in [m(0), m(1)].iter().chain(&recorded) {
        let r = get(admin, &format!("/machines/{id}"), None);
        assert_eq!(r.status, 200, "{id}: {}", r.text());
    }
}

/// The etcd store's health follows the cluster: with every member stopped (SIGSTOP),
/// `/status` shows the store down (no report needed: a probe finds it) and both `/metrics`
/// say `agent_serve_inventory_up 0`; once they go on, it is up again and reports are
/// recorded. On the old code `/status` said nothing of the store.
#[test]
fn a_stopped_etcd_shows_on_status_and_so_does_its_recovery() {
    let Some(etcd) = etcd_cluster::etcd_binary() else {
        return;
    };
    let cluster = etcd_cluster::Cluster::start(&etcd);
    let t = TempDir::new("fleet-etcd-health");
    let src = source(&t);
    let s = start_on_etcd(&src, &cluster, &[]);
    let http = s.addr_of("http");
    let admin = s.addr_of("admin");
    let m = "4c4c4544-0000-0000-0000-0000000000d1";
    let r = post(
        http,
        &agent_report("d0", m, "fetch", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.status()["inventory"]["ok"], true);

    for i in 0..3 {
        cluster.stop(i);
    }
    let stopped = std::time::Instant::now();
    s.wait_for("/status to show the stopped cluster", 60, |s| {
        s.status()["inventory"]["ok"] == false
    });
    eprintln!("shown down after {:?}", stopped.elapsed());
    let st = s.status();
    let err = st["inventory"]["error"].as_str().unwrap_or_default();
    assert!(err.contains("no etcd member of"), "{st}");
    assert_eq!(s.metric("agent_serve_inventory_up"), 0);
    assert_eq!(admin_metric(admin, "agent_serve_inventory_up"), Some(0));
    assert!(s.metric("agent_serve_inventory_failures_total") >= 1);

    for i in 0..3 {
        cluster.resume(i);
    }
    s.wait_for("/status to show the cluster back", 60, |s| {
        s.status()["inventory"]["ok"] == true
    });
    assert!(s.status()["inventory"]["error"].is_null());
    assert_eq!(s.metric("agent_serve_inventory_up"), 1);
    let r = post(
        http,
        &agent_report("d1", m, "disks", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// An inventory file truncated to 0 bytes, or deleted, while the server was stopped is not
/// taken as a new, empty inventory (every machine it knew would install again): the server
/// starts, serves configs, refuses reports (503) and says why on `/status` and in its log,
/// naming `inventory.id` and `--inventory-reset`; the file is left as found. With
/// `--inventory-reset` a new, empty inventory begins (and later starts need no flag); a new
/// state directory gets a new inventory. On the old code the server made an empty inventory
/// of the empty (or missing) file.
#[test]
fn a_lost_inventory_file_is_refused_not_made_new() {
    let t = TempDir::new("fleet-lost");
    let src = source(&t);
    let state = t.path().join("state");
    let db = state.join("inventory.db");
    let log = t.path().join("serve.log");
    let start = |extra: &[&str]| {
        serve_args(&src)
            .quiet()
            .arg("--state-dir", &state)
            .with(extra)
            .start_logged(&[], Some(&log))
    };
    let m = |i: usize| format!("4c4c4544-0000-0000-0000-{i:012x}");
    let mut s = start(&[]);
    for i in 0..2 {
        let r = post(
            s.addr_of("http"),
            &agent_report(&format!("r{i}"), &m(i), "files", "ok", true, None),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(s.terminate());
    assert!(state.join("inventory.id").is_file());

    let refused = |what: &str| {
        let mut s = start(&[]);
        let st = s.status();
        let inv = &st["inventory"];
        assert_eq!(inv["ok"], false, "{st}");
        let err = inv["error"].as_str().unwrap_or_default();
        for w in [what, "inventory.id", "--inventory-reset", "install again"] {
            assert!(err.contains(w), "{w:?} in {err}");
        }
        // Configs are served; reports are refused, saying why.
        assert_eq!(s.get("/config/worker").status, 200);
        let r = post(
            s.addr_of("http"),
            &agent_report("r9", &m(9), "fetch", "ok", false, None),
            None,
        );
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(r.text().contains("--inventory-reset"), "{}", r.text());
        assert!(s.terminate());
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(
            logged.contains("inventory store unusable") && logged.contains(what),
            "{logged}"
        );
    };
    std::fs::File::create(&db).unwrap();
    refused("inventory.db is empty (0 bytes)");
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "left as found");
    std::fs::remove_file(&db).unwrap();
    refused("inventory.db is missing");
    assert!(!db.exists(), "not created");

    // --inventory-reset: a new, empty inventory; the next start needs no flag.
    let mut s = start(&["--inventory-reset"]);
    assert_eq!(s.status()["inventory"]["ok"], true);
    let r = post(
        s.addr_of("http"),
        &agent_report("r5", &m(5), "fetch", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(s.terminate());
    let s = start(&[]);
    assert_eq!(s.status()["inventory"]["ok"], true);
    let r = get(s.addr_of("admin"), "/machines", None);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let ids: Vec<_> = v["machines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, [m(5)]);
    drop(s);

    // A new state directory: a new inventory, no flag needed.
    let fresh = serve_args(&src).quiet().start();
    assert_eq!(fresh.status()["inventory"]["ok"], true);
    let r = post(
        fresh.addr_of("http"),
        &agent_report("r6", &m(6), "fetch", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// `--inventory-store=memory` (docs/serve.md, "The inventory, its stores and the page"): no
/// state directory or cluster, reports recorded and served as with the other stores (a
/// retry recognised, a new machine beyond `--max-machines` answered 507), the store up in
/// /status; a restart forgets the inventory.
#[test]
fn the_memory_store_takes_reports_and_forgets_them_on_restart() {
    let t = TempDir::new("fleet-memory");
    let src = source(&t);
    let args = [
        "--source",
        src.to_str().unwrap(),
        "--listen-http",
        "127.0.0.1:0",
        "--no-access-log",
        "--inventory-store",
        "memory",
        "--max-machines",
        "1",
    ];
    let ids = |admin| -> Vec<String> {
        let r = get(admin, "/machines", None);
        assert_eq!(r.status, 200, "{}", r.text());
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        v["machines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    };
    let mut s = Server::start(&args, &[]);
    let (http, admin) = (s.addr_of("http"), s.addr_of("admin"));
    let first = agent_report("m-1-a", "m-1", "fetch", "ok", false, None);
    let r = post(http, &first, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("new"), "{}", r.text());
    let r = post(http, &first, None);
    assert!(r.text().contains("duplicate"), "{}", r.text());
    let r = post(
        http,
        &agent_report("m-2-a", "m-2", "fetch", "ok", false, None),
        None,
    );
    assert_eq!(r.status, 507, "{}", r.text());
    assert!(r.text().contains("--max-machines"), "{}", r.text());
    assert_eq!(ids(admin), ["m-1"]);
    let r = get(admin, "/machines/m-1", None);
    assert_eq!(r.status, 200, "{}", r.text());
    let st = s.status();
    assert_eq!(st["inventory"]["ok"], true, "{st}");
    assert!(s.terminate(), "the server stops");
    drop(s);
    let s = Server::start(&args, &[]);
    assert!(ids(s.addr_of("admin")).is_empty(), "kept across a restart");
}
