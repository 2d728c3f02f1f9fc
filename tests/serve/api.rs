//! The admin and machine APIs against their document (docs/openapi.json): every documented
//! answer of a real `agent serve` (error bodies included) is checked against the document's
//! schemas, which name every key (a key gained, lost or renamed fails); the one style they
//! share (camelCase, RFC 3339 times, a machine with no report yet `booted`, nothing
//! internal); `/machines/summary` and `DELETE /machines/<id>` with `agent machines summary`
//! and `agent machines delete`; reports as earlier agents sent them (snake_case) still taken.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::support;

use support::openapi::Document;
use support::serve::*;

const ADMIN_TOKEN: &str = "0123456789abcdef0123456789abcdef";
const MAC: &str = "52-54-00-12-34-01";

fn document() -> Document {
    Document::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json"))
}

/// A pool, a machine file selecting [`MAC`] and a boot profile with its assets.
fn source(t: &TempDir) -> PathBuf {
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("worker"));
    write(
        &src.join("machines/node-1.json"),
        &serde_json::json!({"selector": {"mac": MAC}, "pool": "worker",
            "values": {"hostname": "node-1"}})
        .to_string(),
    );
    write(
        &src.join("boot/default.json"),
        r#"{"kernel": "vmlinuz", "initrd": ["initramfs.img"], "args": ["console=ttyS0"]}"#,
    );
    write(&src.join("boot/assets/vmlinuz"), "kernel");
    write(&src.join("boot/assets/initramfs.img"), "initramfs");
    src
}

/// `method path` on `addr` (its own address as Host) with `headers` and `body`.
fn call(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    request(addr, &r)
}

/// The server under test and the document its answers are checked against.
struct Api {
    s: Server,
    d: Document,
    bearer: String,
}

impl Api {
    /// `method path` on the listener `on` ("http" or "admin"), the admin token given on the
    /// admin listener unless `headers` has an Authorization; its answer checked against
    /// the document. Panics unless the status is `want`.
    fn check(
        &mut self,
        on: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
        want: u16,
    ) -> Resp {
        let mut h: Vec<(&str, &str)> = headers.to_vec();
        if on == "admin"
            && !h
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        {
            h.push(("Authorization", &self.bearer));
        }
        let r = call(self.s.addr_of(on), method, path, &h, body);
        assert_eq!(r.status, want, "{method} {path}: {}", r.text());
        self.d
            .check(method, path, r.status, r.header("content-type"), &r.body);
        r
    }

    fn json(&mut self, on: &str, path: &str) -> serde_json::Value {
        let r = self.check(on, "GET", path, &[], "", 200);
        serde_json::from_slice(&r.body).expect("JSON")
    }
}

fn admin_args(src: &Path, t: &TempDir) -> ServeArgs {
    let token_file = t.path().join("admin.token");
    write(&token_file, &format!("{ADMIN_TOKEN}\n"));
    serve_args(src)
        .quiet()
        .arg("--admin-token-file", &token_file)
}

/// A report as the agent sends it now (camelCase), checked against the document's
/// `Report`.
fn report(d: &Document, id: &str, machine: &str, stage: &str, last: bool) -> String {
    let body = agent_report(id, machine, stage, "ok", last, None);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    if let Err(e) = d.validate(&d.schema("Report"), &v, "$") {
        panic!("the agent's report is not the document's: {e}\n{v:#}");
    }
    body
}

#[test]
fn every_documented_answer_matches_the_document() {
    let t = TempDir::new("api-doc");
    let src = source(&t);
    let s = admin_args(&src, &t).start();
    let mut api = Api {
        s,
        d: document(),
        bearer: format!("Bearer {ADMIN_TOKEN}"),
    };
    // The machine API.
    api.check("http", "GET", "/healthz", &[], "", 200);
    api.check("http", "GET", "/readyz", &[], "", 200);
    api.check("http", "GET", "/config/worker", &[], "", 200);
    api.check("http", "GET", "/config/nosuchpool", &[], "", 404);
    let pool_token = format!("Bearer {}", token_of(&api.s, "worker"));
    api.check(
        "http",
        "GET",
        "/ignition",
        &[("Authorization", &pool_token)],
        "",
        200,
    );
    api.check(
        "http",
        "GET",
        "/ignition",
        &[("Authorization", "Bearer !")],
        "",
        401,
    );
    let status = api.json("http", "/status");
    assert!(support::openapi::rfc3339_utc(
        status["inventory"]["since"].as_str().unwrap()
    ));
    let ct = [("Content-Type", "application/json")];
    let body = report(&api.d, "r-1", "m-1", "fetch", false);
    let r = api.check("http", "POST", "/report", &ct, &body, 200);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["recorded"],
        "new"
    );
    // As agents before camelCase sent it: still taken, the same record.
    let old = agent_report("r-2", "m-1", "disks", "ok", false, None)
        .replace("\"bootId\"", "\"boot_id\"")
        .replace("\"durationMs\"", "\"duration_ms\"")
        .replace("\"logTail\"", "\"log_tail\"")
        .replace("\"instanceId\"", "\"instance_id\"");
    assert!(old.contains("\"boot_id\""), "{old}");
    api.check("http", "POST", "/report", &ct, &old, 200);
    api.check("http", "POST", "/report", &ct, r#"{"format":1}"#, 400);
    // A machine that network-booted and has not reported.
    let r = call(api.s.plain(), "GET", &format!("/ipxe?mac={MAC}"), &[], "");
    assert_eq!(r.status, 200, "{}", r.text());

    // The admin API.
    api.check("admin", "GET", "/healthz", &[], "", 200);
    api.check("admin", "GET", "/auth/challenge", &[], "", 200);
    api.check(
        "admin",
        "GET",
        "/machines",
        &[("Authorization", "Bearer not-the-admin-token")],
        "",
        401,
    );
    api.check(
        "admin",
        "GET",
        "/machines/summary",
        &[("Authorization", "Bearer not-the-admin-token")],
        "",
        401,
    );
    let bogus = api
        .check("admin", "GET", "/machines?state=bogus", &[], "", 400)
        .text();
    for st in [
        "fetching",
        "provisioning",
        "provisioned",
        "failed",
        "unassigned",
        "booted",
    ] {
        assert!(bogus.contains(st), "{st} not in {bogus:?}");
    }
    let list = api.json("admin", "/machines");
    let ms = list["machines"].as_array().unwrap();
    assert_eq!(ms.len(), 2, "{list:#}");
    let booted = ms.iter().find(|m| m["id"] != "m-1").unwrap();
    assert_eq!(booted["state"], "booted", "{booted:#}");
    assert_eq!(booted["machineFile"], "node-1");
    let m1 = ms.iter().find(|m| m["id"] == "m-1").unwrap();
    assert_eq!(m1["state"], "provisioning");
    assert_eq!(m1["reports"], 2);
    assert!(support::openapi::rfc3339_utc(
        m1["lastSeen"].as_str().unwrap()
    ));
    // The same name on the page and on the command line.
    let id = booted["id"].as_str().unwrap().to_string();
    let page = call(
        api.s.addr_of("admin"),
        "GET",
        &format!("/ui/machines/{}", id.replace(':', "%3A")),
        &[("Authorization", &api.bearer)],
        "",
    );
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(
        page.text().contains("data-state=\"booted\""),
        "{}",
        page.text()
    );
    let out = std::process::Command::new(AGENT)
        .args([
            "machines",
            "list",
            "--server",
            &format!("http://{}", api.s.addr_of("admin")),
        ])
        .arg("--admin-token-file")
        .arg(t.path().join("admin.token"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.contains(&format!("{id}\tbooted\tworker")), "{out}");
    let only = api.json("admin", "/machines?state=booted");
    assert_eq!(only["machines"].as_array().unwrap().len(), 1);
    assert_eq!(only["machines"][0]["id"], booted["id"]);
    let page = api.json("admin", "/machines?limit=1");
    assert_eq!(page["next"], page["machines"][0]["id"]);
    let sum = api.json("admin", "/machines/summary");
    assert_eq!(sum["total"], 2);
    assert_eq!(sum["byState"]["booted"], 1);
    assert_eq!(sum["byState"]["provisioning"], 1);
    assert_eq!(sum["byState"]["failed"], 0);
    assert_eq!(
        sum["byPool"]["worker"],
        serde_json::json!({"booted": 1, "provisioning": 1})
    );
    let one = api.json("admin", "/machines/m-1");
    let stages = one["boots"][0]["stages"].as_array().unwrap();
    assert_eq!(
        stages[0]["detail"]["changes"]["partitions"]["created"][0],
        "/dev/vda4"
    );
    api.check("admin", "GET", "/machines/nosuch", &[], "", 404);
    let admin_h = [("X-Agent-Admin", "1")];
    let r = api.check(
        "admin",
        "POST",
        "/machines/m-1/reprovision",
        &admin_h,
        "",
        200,
    );
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert!(
        support::openapi::rfc3339_utc(v["reprovision"].as_str().unwrap()),
        "{v}"
    );
    api.check(
        "admin",
        "POST",
        "/machines/nosuch/reprovision",
        &admin_h,
        "",
        404,
    );

    // Forgetting a machine: a change, refused as every change a browser could send.
    api.check("admin", "DELETE", "/machines/m-1", &[], "", 403);
    let other_site = [("X-Agent-Admin", "1"), ("Origin", "http://evil.example")];
    api.check("admin", "DELETE", "/machines/m-1", &other_site, "", 403);
    let r = call(
        api.s.addr_of("admin"),
        "DELETE",
        "/machines/m-1",
        &admin_h,
        "",
    );
    assert_eq!(r.status, 401, "the admin token is needed: {}", r.text());
    api.check("admin", "DELETE", "/machines/m-1", &admin_h, "", 204);
    api.check("admin", "DELETE", "/machines/m-1", &admin_h, "", 404);
    // No rollout here: its 404s and 403; a rollout's own answers are checked against the
    // document by rollout::operators_pause_resume_promote_and_abort.
    let rollouts = api.json("admin", "/rollouts");
    assert_eq!(rollouts["rollouts"], serde_json::json!([]));
    api.check("admin", "GET", "/rollouts/worker", &[], "", 404);
    api.check("admin", "POST", "/rollouts/worker/pause", &admin_h, "", 404);
    api.check("admin", "POST", "/rollouts/worker/abort", &[], "", 403);
    api.check("admin", "GET", "/machines/m-1", &[], "", 404);
    let sum = api.json("admin", "/machines/summary");
    assert_eq!(
        (
            sum["total"].as_u64(),
            sum["byState"]["provisioning"].as_u64()
        ),
        (Some(1), Some(0))
    );
    let list = api.json("admin", "/machines");
    assert_eq!(list["machines"].as_array().unwrap().len(), 1, "{list:#}");
    // It reports again (a report sent before too): a new record.
    let again = report(&api.d, "r-3", "m-1", "files", true);
    api.check("http", "POST", "/report", &ct, &again, 200);
    api.check("http", "POST", "/report", &ct, &body, 200);
    let one = api.json("admin", "/machines/m-1");
    assert_eq!(
        (one["reports"].as_u64(), one["state"].as_str()),
        (Some(2), Some("provisioned"))
    );

    // A server with no valid generation (a broken pool), under --require-token: not
    // ready, and /status names no pool.
    let broken = t.path().join("broken");
    write(&broken.join("pools/worker.ign"), "{");
    let s2 = serve_args(&broken)
        .quiet()
        .switch("--require-token")
        .start();
    let ready = std::mem::replace(&mut api.s, s2);
    api.check("http", "GET", "/readyz", &[], "", 503);
    let public = api.json("http", "/status");
    assert_eq!(public["ready"], false, "{public:#}");
    drop(ready);

    let mut left = api.d.unchecked();
    left.retain(|k| {
        ![
            "GET /rollouts/{pool} → 200",
            "POST /rollouts/{pool}/{action} → 200",
            "POST /rollouts/{pool}/{action} → 409",
        ]
        .contains(&k.as_str())
    });
    assert!(left.is_empty(), "documented but never checked: {left:#?}");
}

/// The check fails when an answer changes: a key renamed, added or taken away, a time that
/// is a number, a state the document does not name.
#[test]
fn a_changed_answer_fails_the_document() {
    let t = TempDir::new("api-changed");
    let src = source(&t);
    let s = admin_args(&src, &t).start();
    let body = report(&document(), "r-1", "m-1", "files", true);
    let r = call(
        s.plain(),
        "POST",
        "/report",
        &[("Content-Type", "application/json")],
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(
        s.addr_of("admin"),
        "GET",
        "/machines/m-1",
        &[("Authorization", &format!("Bearer {ADMIN_TOKEN}"))],
        "",
    );
    assert_eq!(r.status, 200);
    let good: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let d = document();
    let schema = d.schema("Machine");
    assert_eq!(d.validate(&schema, &good, "$"), Ok(()));
    type Change = fn(&mut serde_json::Value);
    let changes: [(&str, Change); 7] = [
        ("renamed", |v| {
            let x = v.as_object_mut().unwrap().remove("lastSeen").unwrap();
            v["last_seen"] = x;
        }),
        ("added", |v| v["recentIds"] = serde_json::json!(["r-1"])),
        ("lost", |v| {
            v.as_object_mut().unwrap().remove("machineFile");
        }),
        ("epoch time", |v| {
            v["firstSeen"] = serde_json::json!(1_796_281_200u64)
        }),
        ("unknown state", |v| {
            v["state"] = serde_json::json!("unknown")
        }),
        ("a stage's key renamed", |v| {
            let s = &mut v["boots"][0]["stages"][0];
            let x = s.as_object_mut().unwrap().remove("durationMs").unwrap();
            s["duration_ms"] = x;
        }),
        ("a detail's key added", |v| {
            v["boots"][0]["stages"][0]["detail"]["detailBytes"] = serde_json::json!(1)
        }),
    ];
    for (what, change) in changes {
        let mut bad = good.clone();
        change(&mut bad);
        assert!(
            d.validate(&schema, &bad, "$").is_err(),
            "{what}: still valid"
        );
    }
    // The checker itself: a nullable field, and what RFC 3339 in UTC is.
    assert!(support::openapi::rfc3339_utc("2026-12-03T07:00:00.042Z"));
    assert!(!support::openapi::rfc3339_utc("2026-12-03T07:00:00+01:00"));
    assert!(!support::openapi::rfc3339_utc("2026-12-03 07:00:00 UTC"));
}

/// docs/openapi.json is what docs/openapi.py writes (the script is where it is edited).
#[test]
fn the_document_is_its_scripts_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("python3")
        .arg(root.join("docs/openapi.py"))
        .arg("-")
        .output()
        .expect("running python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::fs::read(root.join("docs/openapi.json")).unwrap();
    assert!(
        out.stdout == file,
        "docs/openapi.json is not docs/openapi.py's output: run python3 docs/openapi.py"
    );
}

/// `agent machines summary` and `agent machines delete`, and `--state` naming every state
/// when it is not one.
#[test]
fn the_command_line_summarises_and_deletes() {
    let t = TempDir::new("api-cli");
    let src = source(&t);
    let s = admin_args(&src, &t).start();
    for (i, m) in ["m-1", "m-2"].iter().enumerate() {
        let body = agent_report(&format!("r-{i}"), m, "files", "ok", true, None);
        let r = call(
            s.plain(),
            "POST",
            "/report",
            &[("Content-Type", "application/json")],
            &body,
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let agent = |args: &[&str]| {
        let out = std::process::Command::new(AGENT)
            .arg("machines")
            .args(args)
            .args(["--server", &format!("http://{}", s.addr_of("admin"))])
            .arg("--admin-token-file")
            .arg(t.path().join("admin.token"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = agent(&["summary"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let header: Vec<&str> = lines[0].split('\t').collect();
    assert_eq!(
        (header[0], header[header.len() - 1]),
        ("POOL", "TOTAL"),
        "{out}"
    );
    assert!(
        header.contains(&"BOOTED") && header.contains(&"UNASSIGNED"),
        "{out}"
    );
    let col = header.iter().position(|h| *h == "PROVISIONED").unwrap();
    let worker: Vec<&str> = lines[1].split('\t').collect();
    assert_eq!(
        (worker[0], worker[col], worker[header.len() - 1]),
        ("worker", "2", "2"),
        "{out}"
    );
    assert!(lines.last().unwrap().starts_with("total\t"), "{out}");
    let (ok, out, _) = agent(&["summary", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["byState"]["provisioned"], 2);

    let (ok, out, err) = agent(&["delete", "m-1"]);
    assert!(ok, "{err}");
    assert!(out.contains("m-1"), "{out}");
    let (ok, _, err) = agent(&["delete", "m-1"]);
    assert!(!ok);
    assert!(err.contains("404"), "{err}");
    let (ok, out, _) = agent(&["list"]);
    assert!(ok);
    assert!(
        !out.contains("m-1") && out.contains("m-2\tprovisioned"),
        "{out}"
    );
    let (ok, _, err) = agent(&["list", "--state", "bogus"]);
    assert!(!ok);
    for st in [
        "fetching",
        "provisioning",
        "provisioned",
        "failed",
        "unassigned",
        "booted",
    ] {
        assert!(err.contains(st), "{st} not in {err}");
    }
    let (ok, out, _) = agent(&["show", "m-2", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["firstSeen"].is_string() && v.get("first_seen").is_none(),
        "{v}"
    );
}
