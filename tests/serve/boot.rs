//! Network boot from `agent serve` (issue 29, docs/serve.md "Machines and network boot"),
//! over real sockets on 127.0.0.1 against the real binary: machine files select machines
//! (most specific wins, equal ones refused), per-machine placeholders filled on the config
//! tree (quotes, backslashes, newlines and `{{` land literally; data URLs, gzip'd ones
//! included), the same bytes and ETag from two servers on one source, one-time tokens
//! (second use refused, expiry), boot assets with Range (checked with curl), install once
//! and reprovision through real reports, discovery, and bad input that keeps the last good
//! generation.

use crate::support;

use crate::etcd_cluster;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use support::serve::*;

const MAC1: &str = "52:54:00:12:34:01";
const MAC2: &str = "52:54:00:12:34:02";
/// A value that would break JSON, a shell line or a template if it were pasted as text.
const NASTY: &str = "q\"uo\\te\nline2 {{.ip}} {{ end }}";
/// The same without the line break (for a unit, where a line break is a new line of it).
const NOTE: &str = "q\"uo\\te {{.ip}} {{";

fn worker_ign() -> String {
    serde_json::json!({
        "ignition": {"version": "3.3.0"},
        "storage": {"files": [
            {"path": "/etc/hostname", "mode": 420, "overwrite": true,
             "contents": {"source": "data:,%7B%7B.hostname%7D%7D%0A"}},
            {"path": "/etc/motd", "mode": 420, "overwrite": true,
             "contents": {"source": format!("data:;base64,{}", b64(b"hello {{.hostname}} at {{.ip}}\n"))}},
        ]},
        "systemd": {"units": [
            {"name": "app.service", "enabled": true,
             "contents": "[Service]\nExecStart=/bin/app --ip={{.ip}} --note={{.note}}\n[Install]\nWantedBy=multi-user.target\n"}
        ]}
    })
    .to_string()
}

fn b64(b: &[u8]) -> String {
    use std::fmt::Write;
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                let _ = write!(s, "=");
            }
        }
    }
    s
}

fn machine(mac: &str, pool: &str, values: serde_json::Value) -> String {
    serde_json::json!({"selector": {"mac": mac}, "pool": pool, "values": values}).to_string()
}

/// A source with pool `worker`, two machines, a boot profile and its assets.
fn source(t: &TempDir) -> PathBuf {
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_ign());
    write(
        &src.join("machines/node-1.json"),
        &machine(
            MAC1,
            "worker",
            serde_json::json!({"hostname": "node-1", "ip": "10.0.0.5", "note": "n1"}),
        ),
    );
    write(
        &src.join("machines/node-2.json"),
        &machine(
            "52-54-00-12-34-02",
            "worker",
            serde_json::json!({"hostname": NASTY, "ip": "10.0.0.6", "note": NOTE}),
        ),
    );
    write(
        &src.join("boot/default.json"),
        r#"{"kernel": "vmlinuz", "initrd": ["initramfs.img"], "args": ["console=ttyS0", "ignition.platform.id=metal", "ip={{.ip}}::10.0.0.1:255.255.255.0::eth0:off"]}"#,
    );
    let kernel: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::create_dir_all(src.join("boot/assets")).unwrap();
    std::fs::write(src.join("boot/assets/vmlinuz"), kernel).unwrap();
    std::fs::write(src.join("boot/assets/initramfs.img"), b"initramfs").unwrap();
    src
}

fn start(src: &Path, extra: &[&str]) -> Server {
    serve_args(src).poll_1s().quiet().with(extra).start()
}

/// GET with the server's own address as Host (so the scripts' URLs are usable as they are).
fn get(addr: SocketAddr, path: &str) -> Resp {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
}

fn post(addr: SocketAddr, path: &str, body: &str) -> Resp {
    request(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// `/ipxe` for a machine with `mac` (and the extra query), as iPXE asks after /boot.ipxe.
fn ipxe(s: &Server, query: &str) -> String {
    let r = get(s.plain(), &format!("/ipxe?{query}"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let t = r.text();
    assert!(t.starts_with("#!ipxe\n"), "{t}");
    t
}

/// The path and query of the config URL of a boot script (`agent.config.url=`, or
/// `coreos.inst.ignition_url=` with a profile's install section).
fn config_path(script: &str) -> String {
    let url = script
        .split_whitespace()
        .find_map(|w| {
            w.strip_prefix("agent.config.url=")
                .or_else(|| w.strip_prefix("coreos.inst.ignition_url="))
        })
        .unwrap_or_else(|| panic!("no agent.config.url in {script}"));
    let rest = url.strip_prefix("http://").unwrap();
    rest[rest.find('/').unwrap()..].to_string()
}

fn config_of(s: &Server, mac: &str) -> Resp {
    let script = ipxe(
        s,
        &format!("mac={}&uuid=&serial=&hostname=", mac.replace(':', "-")),
    );
    let r = get(s.plain(), &config_path(&script));
    assert_eq!(r.status, 200, "{}", r.text());
    r
}

fn decode_data_url(u: &str) -> Vec<u8> {
    let (head, data) = u.strip_prefix("data:").unwrap().split_once(',').unwrap();
    if head.ends_with(";base64") {
        let out = Command::new("base64")
            .arg("-d")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(data.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        out.stdout
    } else {
        percent_decode(data)
    }
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn file_text(cfg: &serde_json::Value, path: &str) -> String {
    let f = cfg["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("no {path}"));
    let mut data = decode_data_url(f["contents"]["source"].as_str().unwrap());
    if f["contents"]["compression"] == "gzip" {
        let mut c = Command::new("gzip")
            .arg("-dc")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(&data).unwrap();
        }
        data = c.wait_with_output().unwrap().stdout;
    }
    String::from_utf8(data).unwrap()
}

#[test]
fn boot_script_chains_with_the_machines_facts() {
    let t = TempDir::new("boot-chain");
    let s = start(&source(&t), &[]);
    let r = get(s.plain(), "/boot.ipxe");
    assert_eq!(r.status, 200);
    let addr = s.plain();
    assert_eq!(
        r.text(),
        format!(
            "#!ipxe\nchain http://{addr}/ipxe?uuid=${{uuid}}&mac=${{mac:hexhyp}}&serial=${{serial:uristring}}&hostname=${{hostname:uristring}}\n"
        )
    );
    // --public-url wins over the Host header.
    let s2 = start(&source(&t), &["--public-url", "http://boot.example:8080/"]);
    let r = get(s2.plain(), "/boot.ipxe");
    assert!(
        r.text().contains("chain http://boot.example:8080/ipxe?"),
        "{}",
        r.text()
    );
    let script = ipxe(&s2, "mac=52-54-00-12-34-01");
    assert!(
        script.contains("kernel http://boot.example:8080/assets/vmlinuz console=ttyS0 ignition.platform.id=metal ip=10.0.0.5::10.0.0.1:255.255.255.0::eth0:off agent.config.url=http://boot.example:8080/machine-config?token="),
        "{script}"
    );
    assert!(
        script.contains("\ninitrd http://boot.example:8080/assets/initramfs.img\nboot\n"),
        "{script}"
    );
}

#[test]
fn per_machine_values_land_literally_and_replicas_agree() {
    let t = TempDir::new("boot-values");
    let src = source(&t);
    let a = start(&src, &[]);
    let b = start(&src, &[]);
    let one = config_of(&a, MAC1);
    let two = config_of(&a, MAC2);
    let cfg: serde_json::Value = serde_json::from_slice(&two.body).unwrap();
    // JSON strings escaped by the serializer; data URLs decoded, filled, re-encoded.
    assert_eq!(file_text(&cfg, "/etc/hostname"), format!("{NASTY}\n"));
    assert_eq!(
        file_text(&cfg, "/etc/motd"),
        format!("hello {NASTY} at 10.0.0.6\n")
    );
    let unit = cfg["systemd"]["units"][0]["contents"].as_str().unwrap();
    assert_eq!(
        unit,
        format!(
            "[Service]\nExecStart=/bin/app --ip=10.0.0.6 --note={NOTE}\n[Install]\nWantedBy=multi-user.target\n"
        ),
        "the value's {{{{.ip}}}} is not expanded again"
    );
    let cfg1: serde_json::Value = serde_json::from_slice(&one.body).unwrap();
    assert_eq!(file_text(&cfg1, "/etc/hostname"), "node-1\n");
    assert_ne!(
        one.header("etag"),
        two.header("etag"),
        "each machine its own ETag"
    );
    assert_eq!(one.header("x-agent-pool"), Some("worker"));
    // The plain pool still serves its placeholders unfilled.
    let plain = get(a.plain(), "/config/worker");
    assert!(plain.text().contains("{{.ip}}"));
    // Another server on the same source: the same bytes and ETag for each machine.
    for (mac, mine) in [(MAC1, &one), (MAC2, &two)] {
        let theirs = config_of(&b, mac);
        assert_eq!(theirs.body, mine.body, "{mac}");
        assert_eq!(theirs.header("etag"), mine.header("etag"));
        assert!(mine.header("etag").unwrap().starts_with('"'));
    }
}

/// Number values land as written in the machine file (docs/serve.md: "a number as its JSON
/// text"), in the config and in the kernel arguments: `1e2`, a 23-digit integer, `-0.0`,
/// `1.50`. On the old code they were printed as floats: `100.0`, `1.2345678901234568e22`,
/// `1.5`.
#[test]
fn number_values_keep_their_json_text() {
    let t = TempDir::new("boot-numbers");
    let src = source(&t);
    std::fs::remove_file(src.join("machines/node-2.json")).unwrap();
    write(
        &src.join("machines/node-1.json"),
        r#"{"selector": {"mac": "52:54:00:12:34:01"}, "pool": "worker",
            "values": {"hostname": 1e2, "ip": 12345678901234567890123, "note": -0.0, "d": 1.50}}"#,
    );
    write(
        &src.join("boot/default.json"),
        r#"{"kernel": "vmlinuz", "initrd": ["initramfs.img"], "args": ["a={{.hostname}}", "b={{.ip}}", "c={{.note}}", "d={{.d}}"]}"#,
    );
    let s = start(&src, &[]);
    let script = ipxe(&s, "mac=52-54-00-12-34-01");
    assert!(
        script.contains(" a=1e2 b=12345678901234567890123 c=-0.0 d=1.50 agent.config.url="),
        "{script}"
    );
    let r = get(s.plain(), &config_path(&script));
    assert_eq!(r.status, 200, "{}", r.text());
    let cfg: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(file_text(&cfg, "/etc/hostname"), "1e2\n");
    assert_eq!(
        file_text(&cfg, "/etc/motd"),
        "hello 1e2 at 12345678901234567890123\n"
    );
    let unit = cfg["systemd"]["units"][0]["contents"].as_str().unwrap();
    assert!(
        unit.contains("--ip=12345678901234567890123 --note=-0.0\n"),
        "{unit}"
    );
}

#[test]
fn butane_gzip_data_urls_are_filled() {
    let t = TempDir::new("boot-gzip");
    let src = source(&t);
    std::fs::remove_file(src.join("pools/worker.ign")).unwrap();
    let long = "line {{.hostname}} of a long enough file to be compressed\n".repeat(40);
    write(
        &src.join("pools/worker.bu"),
        &format!(
            "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/long\n      contents:\n        inline: {}\n",
            serde_json::to_string(&long).unwrap()
        ),
    );
    let s = start(&src, &[]);
    let plain: serde_json::Value =
        serde_json::from_slice(&get(s.plain(), "/config/worker").body).unwrap();
    let f = &plain["storage"]["files"][0];
    assert_eq!(
        f["contents"]["compression"], "gzip",
        "Butane compressed it: {f}"
    );
    let cfg: serde_json::Value = serde_json::from_slice(&config_of(&s, MAC2).body).unwrap();
    assert_eq!(
        file_text(&cfg, "/etc/long"),
        long.replace("{{.hostname}}", NASTY)
    );
}

#[test]
fn most_specific_selector_wins() {
    let t = TempDir::new("boot-select");
    let src = source(&t);
    write(&src.join("pools/infra.ign"), &worker_config("infra"));
    write(
        &src.join("machines/rack-r1.json"),
        r#"{"selector": {"labels": {"rack": "r1"}}, "pool": "infra", "values": {"ip": "10.0.1.1"}}"#,
    );
    write(
        &src.join("machines/node-1-r1.json"),
        &serde_json::json!({"selector": {"mac": MAC1, "labels": {"rack": "r1"}}, "pool": "infra", "values": {"ip": "10.0.1.2"}})
            .to_string(),
    );
    write(
        &src.join("machines/by-uuid.json"),
        r#"{"selector": {"uuid": "4C4C4544-0042-3510-8052-B4C04F4E4D32"}, "pool": "infra", "values": {"ip": "10.0.1.3"}}"#,
    );
    let s = start(&src, &[]);
    let pool_of = |q: &str| {
        let p = config_path(&ipxe(&s, q));
        let r = get(s.plain(), &p);
        assert_eq!(r.status, 200);
        r.header("x-agent-pool").unwrap().to_string()
    };
    assert_eq!(pool_of("mac=52-54-00-12-34-01"), "worker");
    assert_eq!(
        pool_of("mac=52-54-00-12-34-01&label.rack=r1"),
        "infra",
        "two keys beat one"
    );
    assert_eq!(pool_of("mac=52-54-00-99-99-99&label.rack=r1"), "infra");
    assert_eq!(
        pool_of("mac=52-54-00-99-99-98&uuid=4c4c4544-0042-3510-8052-b4c04f4e4d32"),
        "infra"
    );
    // A MAC selector and a UUID selector both matching one machine, equally: refused.
    let r = ipxe(
        &s,
        "mac=52-54-00-12-34-01&uuid=4c4c4544-0042-3510-8052-b4c04f4e4d32",
    );
    assert!(!r.contains("kernel"), "{r}");
    assert!(
        r.contains("machines/by-uuid.json") && r.contains("machines/node-1.json"),
        "{r}"
    );
}

#[test]
fn one_time_token_is_spent_and_expires() {
    let t = TempDir::new("boot-token");
    // Expiry is kept to the second: a TTL of 3 s leaves the first fetch at least 2 s.
    let s = start(&source(&t), &["--boot-token-ttl", "3s"]);
    let p = config_path(&ipxe(&s, "mac=52-54-00-12-34-01"));
    assert_eq!(get(s.plain(), &p).status, 200);
    let again = get(s.plain(), &p);
    assert_eq!(again.status, 403, "second use refused");
    assert!(again.text().contains("already used"), "{}", again.text());
    // Another machine's token, fetched only after its TTL (3 s) has passed.
    let issued = SystemTime::now();
    let p2 = config_path(&ipxe(&s, "mac=52-54-00-12-34-02"));
    while issued.elapsed().unwrap() < Duration::from_millis(4100) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let late = get(s.plain(), &p2);
    assert_eq!(late.status, 403, "{}", late.text());
    assert!(late.text().contains("expired"), "{}", late.text());
    // Unknown and malformed tokens.
    let r = get(
        s.plain(),
        "/machine-config?token=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    );
    assert_eq!(r.status, 403);
    assert_eq!(get(s.plain(), "/machine-config?token=x").status, 401);
    assert_eq!(get(s.plain(), "/machine-config").status, 401);
}

fn curl(args: &[&str]) -> (String, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "-D", "/dev/stderr"])
        .args(args)
        .output()
        .expect("curl is required for this test (apt-get install curl)");
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.stdout,
    )
}

#[test]
fn assets_with_range_checked_with_curl() {
    let t = TempDir::new("boot-assets");
    let src = source(&t);
    let s = start(&src, &[]);
    let kernel = std::fs::read(src.join("boot/assets/vmlinuz")).unwrap();
    let url = format!("http://{}/assets/vmlinuz", s.plain());
    let (h, body) = curl(&[&url]);
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert!(h.contains("Accept-Ranges: bytes"), "{h}");
    assert!(
        h.contains(&format!("Content-Length: {}", kernel.len())),
        "{h}"
    );
    assert_eq!(body, kernel);
    let (h, body) = curl(&["-r", "1000-1999", &url]);
    assert!(h.starts_with("HTTP/1.1 206 Partial Content"), "{h}");
    assert!(
        h.contains(&format!("Content-Range: bytes 1000-1999/{}", kernel.len())),
        "{h}"
    );
    assert_eq!(body, &kernel[1000..2000]);
    let (h, body) = curl(&["-r", "-100", &url]);
    assert!(h.starts_with("HTTP/1.1 206"), "{h}");
    assert_eq!(body, &kernel[kernel.len() - 100..]);
    let (_, body) = curl(&["-r", "299990-", &url]);
    assert_eq!(body, &kernel[299_990..]);
    let (h, _) = curl(&["-r", "400000-", &url]);
    assert!(h.starts_with("HTTP/1.1 416"), "{h}");
    assert!(
        h.contains(&format!("Content-Range: bytes */{}", kernel.len())),
        "{h}"
    );
    // Several ranges: the whole file.
    let (h, body) = curl(&["-r", "0-9,20-29", &url]);
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    assert_eq!(body, kernel);
    // A resumed download (curl -C) gets the rest.
    let part = t.path().join("part");
    std::fs::write(&part, &kernel[..123_456]).unwrap();
    let out = Command::new("curl")
        .args(["-s", "-C", "-", "-o", part.to_str().unwrap(), &url])
        .status()
        .unwrap();
    assert!(out.success());
    assert_eq!(std::fs::read(&part).unwrap(), kernel);
    // HEAD, If-None-Match, unknown asset.
    let (h, body) = curl(&["-I", &url]);
    assert!(
        h.contains(&format!("Content-Length: {}", kernel.len())),
        "{h}"
    );
    assert!(body.is_empty() || String::from_utf8_lossy(&body).starts_with("HTTP/1.1 200"));
    let etag = h
        .lines()
        .find_map(|l| l.strip_prefix("ETag: "))
        .unwrap()
        .trim()
        .to_string();
    let (h, _) = curl(&["-H", &format!("If-None-Match: {etag}"), &url]);
    assert!(h.starts_with("HTTP/1.1 304"), "{h}");
    let (h, _) = curl(&[&format!("http://{}/assets/nope", s.plain())]);
    assert!(h.starts_with("HTTP/1.1 404"), "{h}");
}

/// A report of machine `id` as docs/reports.md defines it.
fn report(id: &str, rid: &str, boot: &str, stage: &str, last: bool) -> String {
    serde_json::json!({
        "format": 1, "id": rid, "boot_id": boot, "sent": "2026-11-27T05:40:12Z",
        "machine": {"id": id, "uuid": null, "serial": null, "macs": [MAC1],
                    "platform": "metal", "instance_id": null, "hostname": "node-1"},
        "agent": "0.1.0",
        "config": {"pool": "worker", "name": "worker", "hash": "sha256-00"},
        "stage": stage, "outcome": "ok", "final": last, "duration_ms": 10,
        "changes": {}, "error": null, "log_tail": []
    })
    .to_string()
}

/// Installs machine `MAC1` as the agent would: /ipxe, the config, the reports (to the URL
/// the config response named); returns that URL.
fn install(s: &Server, boot: &str) -> String {
    let script = ipxe(
        s,
        "mac=52-54-00-12-34-01&uuid=00000000-0000-0000-0000-000000000000",
    );
    assert!(script.contains("\nkernel "), "{script}");
    let r = get(s.plain(), &config_path(&script));
    assert_eq!(r.status, 200);
    let report_url = r.header("x-agent-report-url").unwrap().to_string();
    assert!(report_url.starts_with("/report?token="), "{report_url}");
    let id = "mac-52:54:00:12:34:01";
    for (i, (stage, last)) in [("fetch", false), ("disks", false), ("files", true)]
        .iter()
        .enumerate()
    {
        let r = post(
            s.plain(),
            &report_url,
            &report(id, &format!("{boot}-{i}"), boot, stage, *last),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    report_url
}

fn admin_get(s: &Server, path: &str) -> serde_json::Value {
    let r = get(s.addr_of("admin"), path);
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).unwrap()
}

fn local_boot(script: &str) -> bool {
    script.lines().any(|l| l == "exit") && !script.contains("kernel")
}

#[test]
fn install_once_then_reprovision() {
    let t = TempDir::new("boot-once");
    let s = start(&source(&t), &[]);
    let q = "mac=52-54-00-12-34-01&uuid=00000000-0000-0000-0000-000000000000";
    install(&s, "boot-1");
    let id = "mac-52:54:00:12:34:01";
    let m = admin_get(&s, &format!("/machines/{id}"));
    assert_eq!(m["state"], "provisioned");
    assert_eq!(
        m["authenticated"], true,
        "reports authenticated by the boot token: {m}"
    );
    assert_eq!(m["pool"], "worker");
    assert_eq!(m["machineFile"], "node-1");
    // Installed: its next network boot goes to the local disk.
    assert!(local_boot(&ipxe(&s, q)), "{}", ipxe(&s, q));
    // The other machine still installs.
    assert!(ipxe(&s, "mac=52-54-00-12-34-02").contains("\nkernel "));
    // agent machines reprovision ID: it installs again, once.
    let out = Command::new(AGENT)
        .args([
            "machines",
            "--server",
            &format!("http://{}", s.addr_of("admin")),
            "reprovision",
            id,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("installs again"));
    assert!(
        ipxe(&s, q).contains("\nkernel "),
        "reprovision asked for: install"
    );
    let page = get(s.addr_of("admin"), &format!("/ui/machines/{id}")).text();
    assert!(page.contains("reprovision asked for at"), "{page}");
    assert!(page.contains("machines/node-1.json"), "{page}");
    install(&s, "boot-2");
    assert!(local_boot(&ipxe(&s, q)), "installed again: local disk");
    assert!(admin_get(&s, &format!("/machines/{id}"))["reprovision"].is_null());
    // Unknown machine for reprovision; wrong method.
    let admin = s.addr_of("admin");
    let r = request(
        admin,
        &format!(
            "POST /machines/nope/reprovision HTTP/1.1\r\nHost: {admin}\r\nX-Agent-Admin: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    );
    assert_eq!(r.status, 404);
    assert_eq!(
        get(s.addr_of("admin"), &format!("/machines/{id}/reprovision")).status,
        405
    );
    // A report with another machine's report credential is refused, whatever the flags:
    // a credential changes only the record of the machine it was issued for.
    let script = ipxe(&s, "mac=52-54-00-12-34-02");
    let r = get(s.plain(), &config_path(&script));
    let url = r.header("x-agent-report-url").unwrap().to_string();
    let before = admin_get(&s, &format!("/machines/{id}"));
    let r = post(
        s.plain(),
        &url,
        &report(id, "stray-1", "boot-3", "fetch", false),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("another machine"), "{}", r.text());
    assert_eq!(admin_get(&s, &format!("/machines/{id}")), before);
}

#[test]
fn discovery_registers_or_boots_a_pool() {
    let t = TempDir::new("boot-discovery");
    let src = source(&t);
    let s = start(&src, &[]);
    let script = ipxe(&s, "mac=52-54-00-aa-bb-cc&serial=SN%201");
    assert!(!script.contains("kernel"), "{script}");
    assert!(
        script.contains("chain --replace"),
        "waits and asks again: {script}"
    );
    let ms = admin_get(&s, "/machines?state=unassigned");
    let list = ms["machines"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{ms}");
    assert_eq!(list[0]["id"], "mac-52:54:00:aa:bb:cc");
    assert_eq!(list[0]["identity"]["serial"], "SN 1");
    let page = get(s.addr_of("admin"), "/ui/");
    assert!(page.text().contains("unassigned"), "the page shows it");
    // --discovery pool:worker: unknown machines install that pool's config.
    let d = start(&src, &["--discovery", "pool:worker"]);
    let script = ipxe(&d, "mac=52-54-00-aa-bb-cd");
    let r = get(d.plain(), &config_path(&script));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-agent-pool"), Some("worker"));
    assert!(
        r.text().contains("{{.ip}}"),
        "the pool's config, no machine values"
    );
}

/// Waits until the server reports a rejected generation whose error contains each of
/// `want`, and checks that the last good generation is still served.
fn rejected(s: &Server, good: &str, want: &[&str]) {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let st = s.status();
        let err = st["sources"][0]["error"].as_str().unwrap_or("").to_string();
        if want.iter().all(|w| err.contains(w)) {
            assert_eq!(st["sources"][0]["active"]["generation"], good, "{st}");
            break;
        }
        assert!(Instant::now() < end, "no error with {want:?}: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Still booting and serving machines from the last good generation.
    let cfg = config_of(s, MAC1);
    assert!(String::from_utf8_lossy(&cfg.body).contains("10.0.0.5"));
}

/// Boot assets are held in memory: a `boot/assets/` over the total limit is refused by its
/// sizes before a byte is read (sparse files here: 5 × 1 GiB on no disk), and a FIFO or a
/// link out of the source is refused without being opened; the last good generation stays.
#[test]
fn oversized_fifo_or_outside_assets_keep_the_last_good_generation() {
    let t = TempDir::new("boot-assets-bad");
    let src = source(&t);
    let s = start(&src, &[]);
    let good = s.status()["sources"][0]["active"]["generation"]
        .as_str()
        .unwrap()
        .to_string();
    let assets = src.join("boot/assets");
    for i in 0..5 {
        let f = std::fs::File::create(assets.join(format!("big{i}.img"))).unwrap();
        f.set_len(1 << 30).unwrap();
    }
    rejected(&s, &good, &["MiB of assets, more than the 4096 MiB limit"]);
    for i in 0..5 {
        std::fs::remove_file(assets.join(format!("big{i}.img"))).unwrap();
    }
    nix::unistd::mkfifo(
        &assets.join("pipe.img"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    rejected(&s, &good, &["pipe.img is a FIFO"]);
    std::fs::remove_file(assets.join("pipe.img")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", assets.join("out.img")).unwrap();
    rejected(
        &s,
        &good,
        &["out.img is a symbolic link to a place outside the source"],
    );
}

#[test]
fn bad_input_keeps_the_last_good_generation() {
    let t = TempDir::new("boot-bad");
    let src = source(&t);
    let s = start(&src, &[]);
    let good = s.status()["sources"][0]["active"]["generation"]
        .as_str()
        .unwrap()
        .to_string();
    let put = |rel: &str, text: &str| {
        let p = src.join(rel);
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
    };
    let node1 = std::fs::read_to_string(src.join("machines/node-1.json")).unwrap();
    let pool = worker_ign();
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "machines/node-1.json",
            "{\"selector\": {\"mac\": ".into(),
            vec!["machines/node-1.json: invalid JSON at line 1"],
        ),
        (
            "machines/node-3.json",
            machine(MAC1, "worker", serde_json::json!({"hostname": "x", "ip": "y", "note": "z"})),
            vec!["machines/node-1.json and machines/node-3.json select the same machines"],
        ),
        (
            "pools/worker.ign",
            pool.replacen("\"mode\"", "\"{{.hostname}}\"", 1),
            vec![
                "pools/worker.ign: $.storage.files.0.…",
                "a placeholder may stand only in a string value, not in a key",
                "machine node-1",
            ],
        ),
        (
            "machines/node-1.json",
            machine(MAC1, "worker", serde_json::json!({"hostname": "node-1", "note": "n"})),
            vec![
                "pools/worker.ign: $.storage.files.1.contents.source: placeholder {{.ip}}",
                "machine node-1 (machines/node-1.json) has no value \"ip\"",
            ],
        ),
        (
            "machines/node-1.json",
            machine(
                MAC1,
                "worker",
                serde_json::json!({"hostname": {"nested": "json"}, "ip": "1", "note": "n"}),
            ),
            vec!["machines/node-1.json: $.values.hostname must be a string, a number or a boolean"],
        ),
        (
            "machines/node-1.json",
            r#"{"selector": {"mac": "52:54:00:12:34:01"}, "pool": "worker", "values": {"hostname": "\ud800", "ip": "1", "note": "n"}}"#.into(),
            vec!["machines/node-1.json: invalid JSON"],
        ),
        (
            "machines/node-1.json",
            r#"{"selector": {"mac": "52:54:00:12:34:01"}, "pool": "worker", "valuez": {}}"#.into(),
            vec!["machines/node-1.json: unknown key"],
        ),
        (
            "machines/node-1.json",
            machine(
                MAC1,
                "worker",
                serde_json::json!({"hostname": "n", "ip": "1", "note": "a\nb"}),
            ),
            vec![
                "pool worker filled for machine node-1 (machines/node-1.json) is invalid",
                "$.systemd.units.0.contents",
            ],
        ),
        (
            "machines/node-1.json",
            machine(
                MAC1,
                "worker",
                serde_json::json!({"hostname": "n", "ip": "10.0.0.5 rd.break", "note": "n"}),
            ),
            vec![
                "boot/default.json: $.args.2 filled for machine node-1 (machines/node-1.json) is not one kernel argument",
            ],
        ),
        (
            "machines/node-1.json",
            machine(MAC1, "nope", serde_json::json!({})),
            vec!["machines/node-1.json: pool \"nope\" is not in the source"],
        ),
        // iPXE expands ${serial} (what the machine says, spaces and all) in the kernel line
        // before the kernel gets it: a value may not bring it there.
        (
            "machines/node-1.json",
            machine(
                MAC1,
                "worker",
                serde_json::json!({"hostname": "n", "ip": "${serial}", "note": "n"}),
            ),
            vec![
                "boot/default.json: $.args.2 filled for machine node-1 (machines/node-1.json): value \"ip\" (\"${serial}\")",
                "iPXE expands",
                "a value may not bring iPXE syntax into a kernel argument",
            ],
        ),
    ];
    for (rel, text, want) in cases {
        let before = std::fs::read_to_string(src.join(rel)).ok();
        put(rel, &text);
        rejected(&s, &good, &want);
        match before {
            Some(b) => put(rel, &b),
            None => std::fs::remove_file(src.join(rel)).unwrap(),
        }
        s.wait_for("the good generation again", 30, |s| {
            let st = s.status();
            st["sources"][0]["error"].is_null()
                && st["sources"][0]["assigned"]["generation"] == good.as_str()
        });
    }
    assert_eq!(
        std::fs::read_to_string(src.join("machines/node-1.json")).unwrap(),
        node1
    );
}

#[test]
fn machines_survive_a_restart_on_a_broken_source() {
    let t = TempDir::new("boot-restart");
    let src = source(&t);
    let state = t.path().join("state");
    let args = ["--state-dir", state.to_str().unwrap()];
    let mut s = start(&src, &args);
    let before = config_of(&s, MAC2);
    assert!(s.terminate());
    // The source breaks while the server is down: a restarted server boots machines from
    // its checkpoint.
    write(&src.join("machines/node-1.json"), "{");
    let s = start(&src, &args);
    let after = config_of(&s, MAC2);
    assert_eq!(after.body, before.body);
    assert_eq!(after.header("etag"), before.header("etag"));
    let r = get(s.plain(), "/assets/initramfs.img");
    assert_eq!(r.body, b"initramfs");
}

/// A real 3-member etcd cluster on 127.0.0.1 (the serve crate's test support), or None
/// when etcd is missing outside CI; its client URLs as `--etcd-endpoints`.
fn etcd() -> Option<(etcd_cluster::Cluster, String)> {
    let bin = etcd_cluster::etcd_binary()?;
    let c = etcd_cluster::Cluster::start(&bin);
    let urls = c.clients.join(",");
    Some((c, urls))
}

/// Two replicas on one etcd store: a token that one replica issued is spent by a fetch
/// from the other, and refused on its second use from either; the install done through one
/// sends the machine to its local disk on the other.
#[test]
fn replicas_on_etcd_share_tokens_and_installs() {
    let Some((_cluster, urls)) = etcd() else {
        return;
    };
    let t = TempDir::new("boot-etcd-replicas");
    let src = source(&t);
    let args = ["--inventory-store", "etcd", "--etcd-endpoints", &urls];
    let a = start(&src, &args);
    let b = start(&src, &args);
    let script = ipxe(&a, "mac=52-54-00-12-34-02");
    let p = config_path(&script);
    let got = get(b.plain(), &p);
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(get(a.plain(), &p).status, 403, "spent on the other replica");
    assert_eq!(get(b.plain(), &p).status, 403);
    install(&a, "boot-1");
    let q = "mac=52-54-00-12-34-01";
    assert!(local_boot(&ipxe(&b, q)), "{}", ipxe(&b, q));
}

/// `/ipxe` and `/machine-config` wait on the store (a token written, a record read and
/// updated, a token spent): they are answered off the event loop (crate `serve`'s jobs).
/// With the etcd store stopped (SIGSTOP) an `/ipxe` request waits, unanswered, while a
/// config fetch on the same (and only) event loop is answered; once etcd goes on, the boot
/// script comes. On the old code the loop itself waited for etcd (and the gauge was not
/// there).
#[test]
fn a_stalled_store_holds_the_boot_request_not_the_event_loop() {
    use std::io::{Read, Write};
    let Some((cluster, urls)) = etcd() else {
        return;
    };
    let t = TempDir::new("boot-stalled");
    let src = source(&t);
    let s = start(
        &src,
        &[
            "--threads",
            "1",
            "--inventory-store",
            "etcd",
            "--etcd-endpoints",
            &urls,
        ],
    );
    let http = s.plain();
    let admin = s.addr_of("admin");
    let waiting = || {
        get(admin, "/metrics").text().lines().find_map(|l| {
            l.strip_prefix("agent_serve_boot_requests_waiting ")?
                .parse::<u64>()
                .ok()
        })
    };
    // The store works.
    ipxe(&s, "mac=52-54-00-12-34-01");
    for i in 0..3 {
        cluster.stop(i);
    }
    let mut pending = std::net::TcpStream::connect(http).unwrap();
    write!(
        pending,
        "GET /ipxe?mac=52-54-00-12-34-02 HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    s.wait_for("the boot request to wait for the stopped store", 30, |_| {
        waiting() == Some(1)
    });
    // The event loop that read it answers a config fetch meanwhile ...
    let r = get(http, "/config/worker");
    assert_eq!(r.status, 200, "{}", r.text());
    // ... and the boot request is still unanswered.
    pending.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let early = pending.read(&mut buf);
    for i in 0..3 {
        cluster.resume(i);
    }
    match early {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!(
            "the boot request was answered while the store was stopped: {other:?} {:?}",
            String::from_utf8_lossy(&buf)
        ),
    }
    pending.set_nonblocking(false).unwrap();
    // A bound, not a measurement: the store's own bound on a call is about a minute.
    pending
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut out = Vec::new();
    pending.read_to_end(&mut out).unwrap();
    let r = parse_response(&out, false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().starts_with("#!ipxe\n"), "{}", r.text());
    assert!(r.text().contains("/machine-config?token="), "{}", r.text());
    // The job lowers the gauge just after it hands the answer back, so the client may read
    // the answer first.
    s.wait_for("the boot gauge to fall back to 0", 30, |_| {
        waiting() == Some(0)
    });
}

/// A token is never in the server's log (access log included) nor in the inventory: log
/// lines name the first 8 hex digits of its hash.
#[test]
fn tokens_are_never_logged() {
    let t = TempDir::new("boot-log");
    let src = source(&t);
    let log = t.path().join("serve.log");
    let s = serve_args(&src).start_logged(&[], Some(&log));
    install(&s, "boot-1");
    let script = ipxe(&s, "mac=52-54-00-12-34-02");
    let p = config_path(&script);
    assert_eq!(get(s.plain(), &p).status, 200);
    assert_eq!(get(s.plain(), &p).status, 403);
    let token = p.split("token=").nth(1).unwrap().to_string();
    let inventory = get(s.addr_of("admin"), "/machines").text();
    drop(s);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("\"path\":\"/machine-config\""), "{text}");
    assert!(text.contains("token already used"), "{text}");
    assert!(!text.contains(&token), "the token is in the log:\n{text}");
    assert!(
        !text.contains(&token[..12]),
        "part of the token is in the log:\n{text}"
    );
    assert!(!inventory.contains(&token[..12]), "{inventory}");
}

/// The real agent, as the initramfs runs it after iPXE: `agent.config.url=` from the boot
/// script on its kernel command line, the metal platform; it fetches its machine's config
/// with the one-time token, writes its values into the root, and reports to the URL the
/// config named: the inventory has it provisioned, authenticated, and its next network boot
/// goes to the local disk.
#[test]
#[ignore = "needs root: make test-root"]
fn agent_run_from_an_ipxe_script_installs_once() {
    support::root::must_be_root();
    let t = TempDir::new("boot-agent");
    let s = start(&source(&t), &[]);
    let uuid = "4c4c4544-0000-0000-0000-0000000000b1";
    let q = format!("mac=52-54-00-12-34-02&uuid={uuid}");
    let script = ipxe(&s, &q);
    let url = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("agent.config.url="))
        .unwrap()
        .to_string();
    let dir = TempDir::new("boot-agent-run");
    let root = dir.path().join("root");
    let dmi = dir.path().join("dmi");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&dmi).unwrap();
    std::fs::write(dmi.join("product_uuid"), format!("{uuid}\n")).unwrap();
    let cmdline = dir.path().join("cmdline");
    std::fs::write(&cmdline, format!("console=ttyS0 agent.config.url={url}")).unwrap();
    let out = Command::new(AGENT)
        .args(["run", "--platform", "metal", "--root"])
        .arg(&root)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--test-kernel-cmdline-file")
        .arg(&cmdline)
        .args(["--system-config-dir", "/nonexistent"])
        .arg("--test-dmi-dir")
        .arg(&dmi)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/hostname")).unwrap(),
        format!("{NASTY}\n")
    );
    let m = admin_get(&s, &format!("/machines/{uuid}"));
    assert_eq!(m["state"], "provisioned", "{m}");
    assert_eq!(m["authenticated"], true, "{m}");
    assert_eq!(m["pool"], "worker");
    assert!(local_boot(&ipxe(&s, &q)));
    // The token was spent by the agent's fetch.
    let p = url[url.find("/machine-config").unwrap()..].to_string();
    assert_eq!(get(s.plain(), &p).status, 403);
}

/// A report of machine `id` with the given stage, outcome and fields replaced by `extra`.
fn report_with(
    id: &str,
    rid: &str,
    boot: &str,
    stage: &str,
    outcome: &str,
    last: bool,
    extra: serde_json::Value,
) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(&report(id, rid, boot, stage, last)).unwrap();
    v["outcome"] = outcome.into();
    if outcome == "failed" {
        v["error"] = "forged".into();
    }
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v.to_string()
}

/// What a machine's record says of its identity and install, compared before and after.
fn standing(s: &Server, id: &str) -> serde_json::Value {
    let m = admin_get(s, &format!("/machines/{id}"));
    serde_json::json!({"state": m["state"], "pool": m["pool"], "hostname": m["identity"]["hostname"],
        "authenticated": m["authenticated"], "trust": m["trust"], "installed": m["installed"],
        "reprovision": m["reprovision"], "machineFile": m["machineFile"]})
}

fn reprovision(s: &Server, id: &str) {
    let out = Command::new(AGENT)
        .args([
            "machines",
            "--server",
            &format!("http://{}", s.addr_of("admin")),
            "reprovision",
            id,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn forged_reports_leave_install_state_and_identity_alone() {
    let t = TempDir::new("boot-forged");
    let s = start(&source(&t), &[]);
    let q = "mac=52-54-00-12-34-01&uuid=00000000-0000-0000-0000-000000000000";
    let id = "mac-52:54:00:12:34:01";
    // Before its first boot: a forged final `files ok` does not mark it installed.
    let forged_ok = |rid: &str, boot: &str| {
        report_with(id, rid, boot, "files", "ok", true, serde_json::json!({}))
    };
    let r = post(s.plain(), "/report", &forged_ok("early-1", "forged-0"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        ipxe(&s, q).contains("\nkernel "),
        "a forged report installed it"
    );
    let boot1_url = install(&s, "boot-1");
    assert!(local_boot(&ipxe(&s, q)));
    let installed = standing(&s, id);
    assert_eq!(installed["trust"], "machine", "{installed}");
    assert_eq!(installed["installed"]["bootId"], "boot-1", "{installed}");
    // A forged failure of a new boot, another hostname and pool in its body: history only.
    let forged = report_with(
        id,
        "forged-1",
        "forged",
        "fetch",
        "failed",
        false,
        serde_json::json!({"machine": {"id": id, "hostname": "evil", "macs": [MAC1]},
            "config": {"pool": "infra", "name": "x", "hash": "sha256-00"}}),
    );
    let r = post(s.plain(), "/report", &forged);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(standing(&s, id), installed);
    assert!(
        local_boot(&ipxe(&s, q)),
        "a forged failure made it install again"
    );
    let m = admin_get(&s, &format!("/machines/{id}"));
    let last = &m["boots"].as_array().unwrap().last().unwrap()["stages"][0];
    assert_eq!(
        (last["trust"].as_str(), last["counts"].as_bool()),
        (Some("none"), Some(false)),
        "{m}"
    );
    // Reprovision asked for: a forged final `files ok` does not cancel it ...
    reprovision(&s, id);
    let pending = standing(&s, id);
    let r = post(s.plain(), "/report", &forged_ok("forged-2", "forged-2"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(standing(&s, id), pending);
    // ... nor does a report queued in the earlier boot, with that boot's credential.
    let r = post(s.plain(), &boot1_url, &forged_ok("late-1", "boot-1"));
    assert!(matches!(r.status, 200 | 401), "{} {}", r.status, r.text());
    assert_eq!(standing(&s, id)["reprovision"], pending["reprovision"]);
    assert!(
        ipxe(&s, q).contains("\nkernel "),
        "the reprovision was cancelled"
    );
    // A boot that began since ends it.
    install(&s, "boot-2");
    assert!(local_boot(&ipxe(&s, q)));
    assert!(standing(&s, id)["reprovision"].is_null());
}

#[test]
fn a_boot_token_or_another_machines_credential_proves_nothing() {
    let t = TempDir::new("boot-bypass");
    let s = start(&source(&t), &["--require-token"]);
    let id1 = "mac-52:54:00:12:34:01";
    let id2 = "mac-52:54:00:12:34:02";
    install(&s, "boot-1");
    let before = standing(&s, id1);
    // An unspent boot token of another machine (anyone can ask /ipxe for any MAC) ...
    let script = ipxe(&s, "mac=52-54-00-12-34-02");
    let boot_token = config_path(&script)
        .split("token=")
        .nth(1)
        .unwrap()
        .to_string();
    let forged = report_with(
        id1,
        "bypass-1",
        "forged",
        "fetch",
        "failed",
        false,
        serde_json::json!({}),
    );
    let r = post(s.plain(), &format!("/report?token={boot_token}"), &forged);
    assert_eq!(r.status, 401, "{}", r.text());
    // ... nor for its own machine: a boot token fetches a config, it authenticates no report.
    let own = report_with(
        id2,
        "bypass-2",
        "forged",
        "files",
        "ok",
        true,
        serde_json::json!({}),
    );
    let r = post(s.plain(), &format!("/report?token={boot_token}"), &own);
    assert_eq!(r.status, 401, "{}", r.text());
    // Spent: the report credential it gave is machine 2's, refused for machine 1 (403).
    let r = get(s.plain(), &config_path(&script));
    assert_eq!(r.status, 200);
    let url = r.header("x-agent-report-url").unwrap().to_string();
    assert!(
        !url.contains(&boot_token),
        "the report credential is the boot token: {url}"
    );
    let r = post(s.plain(), &url, &forged);
    assert_eq!(r.status, 403, "{}", r.text());
    // The spent boot token is no report credential either.
    let r = post(s.plain(), &format!("/report?token={boot_token}"), &own);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(standing(&s, id1), before);
    // Without a token: refused (--require-token).
    assert_eq!(post(s.plain(), "/report", &forged).status, 401);
    assert_eq!(standing(&s, id1), before);
}

#[test]
fn a_machine_has_one_boot_token_at_a_time() {
    let t = TempDir::new("boot-one-token");
    let s = start(&source(&t), &[]);
    // The same request again: the same answer (one token) ...
    let q = "mac=52-54-00-12-34-01";
    let a = ipxe(&s, q);
    assert_eq!(ipxe(&s, q), a, "a repeated request minted another token");
    // ... and asked differently, each answer's token replaces the one before.
    let scripts: Vec<String> = (0..40)
        .map(|i| ipxe(&s, &format!("{q}&hostname=h{i}")))
        .collect();
    let paths: Vec<String> = std::iter::once(&a)
        .chain(&scripts)
        .map(|s| config_path(s))
        .collect();
    let unique: std::collections::HashSet<&String> = paths.iter().collect();
    assert_eq!(unique.len(), paths.len());
    for p in &paths[..paths.len() - 1] {
        let r = get(s.plain(), p);
        assert_eq!(
            r.status,
            403,
            "an earlier token still fetches the config: {}",
            r.text()
        );
    }
    assert_eq!(get(s.plain(), paths.last().unwrap()).status, 200);
}

#[test]
fn report_credentials_are_checked_off_the_event_loop() {
    use std::io::Write;
    let Some((cluster, urls)) = etcd() else {
        return;
    };
    let t = TempDir::new("boot-report-off-loop");
    let s = start(
        &source(&t),
        &[
            "--threads",
            "1",
            "--inventory-store",
            "etcd",
            "--etcd-endpoints",
            &urls,
        ],
    );
    let http = s.plain();
    assert_eq!(get(http, "/healthz").status, 200);
    for i in 0..3 {
        cluster.stop(i);
    }
    // Reports with tokens the store must be asked about, on the one event loop.
    let body = report("mac-52:54:00:12:34:01", "off-loop-1", "b", "fetch", false);
    let mut pending = Vec::new();
    for i in 0..8 {
        let mut c = std::net::TcpStream::connect(http).unwrap();
        write!(
            c,
            "POST /report?token=unknown-token-{i:0>12} HTTP/1.1\r\nHost: {http}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        pending.push(c);
    }
    std::thread::sleep(Duration::from_millis(300));
    // The loop answers meanwhile: the best of three /healthz within 100 ms (it was a
    // minute when the loop read the store itself).
    let best = (0..3)
        .map(|_| {
            let t0 = Instant::now();
            assert_eq!(get(http, "/healthz").status, 200);
            t0.elapsed()
        })
        .min()
        .unwrap();
    for i in 0..3 {
        cluster.resume(i);
    }
    assert!(
        best < Duration::from_millis(100),
        "/healthz took {best:?} while reports waited on the store"
    );
    drop(pending);
}

#[test]
fn a_client_looping_on_ipxe_does_not_starve_a_machine() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let t = TempDir::new("boot-flood");
    let s = start(&source(&t), &["--max-connections", "2000"]);
    let http = s.plain();
    install(&s, "boot-1");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let asked = std::sync::Arc::new(AtomicU64::new(0));
    // 300 keep-alive connections asking /ipxe for the installed machine, as fast as they
    // are answered, until the machine is done (or 60 s).
    let flood: Vec<_> = (0..300)
        .map(|_| {
            let (stop, asked) = (stop.clone(), asked.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                let Ok(mut c) = std::net::TcpStream::connect(http) else {
                    return;
                };
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let req =
                    format!("GET /ipxe?mac=52-54-00-12-34-01 HTTP/1.1\r\nHost: {http}\r\n\r\n");
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    if c.write_all(req.as_bytes()).is_err()
                        || !matches!(c.read(&mut buf), Ok(n) if n > 0)
                    {
                        let Ok(n) = std::net::TcpStream::connect(http) else {
                            return;
                        };
                        c = n;
                        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        continue;
                    }
                    asked.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    while asked.load(Ordering::Relaxed) < 3000 {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The real machine, from another address: each of its boots gets a kernel and its config.
    let from = |path: &str| {
        let sock = socket2_connect("127.0.0.2", http);
        request_on(
            sock,
            format!("GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"),
        )
    };
    let mut done = 0;
    for i in 0..20 {
        let r = from(&format!("/ipxe?mac=52-54-00-12-34-02&hostname=boot{i}"));
        if r.status != 200 || !r.text().contains("\nkernel ") {
            continue;
        }
        if from(&config_path(&r.text())).status == 200 {
            done += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.join().unwrap();
    }
    let n = asked.load(Ordering::Relaxed);
    assert_eq!(
        done, 20,
        "the machine completed {done} of 20 boots while {n} /ipxe looped"
    );
}

/// A TCP connection to `to` from the loopback address `from`.
fn socket2_connect(from: &str, to: SocketAddr) -> std::net::TcpStream {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, SockaddrIn, bind, connect, socket};
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    let ip: std::net::Ipv4Addr = from.parse().unwrap();
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::from(std::net::SocketAddrV4::new(ip, 0)),
    )
    .unwrap();
    let SocketAddr::V4(to) = to else {
        panic!("{to}")
    };
    connect(fd.as_raw_fd(), &SockaddrIn::from(to)).unwrap();
    std::net::TcpStream::from(fd)
}

/// The kernel line of a boot script with its boot token replaced by `TOKEN` and the server's
/// address by `BASE`.
fn kernel_line(script: &str, base: SocketAddr) -> String {
    let line = script
        .lines()
        .find(|l| l.starts_with("kernel "))
        .unwrap_or_else(|| panic!("no kernel line in {script}"));
    let line = line.replace(&format!("http://{base}"), "BASE");
    let at = line.find("?token=").expect("a token") + "?token=".len();
    let end = line[at..].find(' ').map_or(line.len(), |e| at + e);
    format!("{}TOKEN{}", &line[..at], &line[end..])
}

/// A source whose pool `worker` installs an image from the assets (its profile's `install`
/// section, the config URL where coreos-installer takes it) and whose pool `flat` boots
/// Flatcar's way, the config URL placed by `{{.config_url}}`, with tokens of two uses.
fn install_source(t: &TempDir) -> PathBuf {
    let src = source(t);
    let hash = format!("sha512-{}", "0f".repeat(64));
    write(
        &src.join("boot/worker.json"),
        &serde_json::json!({
            "kernel": "vmlinuz", "initrd": ["initramfs.img"], "args": ["console=ttyS0"],
            "install": {
                "image": "os.raw.xz", "hash": hash, "overwrite": true, "skipReboot": true,
                "disk": {"transport": "nvme", "sizeMin": "100G", "sizeMax": 2000000000000u64,
                         "model": "SAMSUNG*", "removable": false},
            },
        })
        .to_string(),
    );
    write(&src.join("pools/flat.ign"), &worker_config("flat"));
    write(
        &src.join("boot/flat.json"),
        r#"{"kernel": "vmlinuz", "tokenUses": 2, "args": ["flatcar.first_boot=1", "flatcar.config.url={{.config_url}}", "flatcar.oem.id=pxe"]}"#,
    );
    write(
        &src.join("machines/node-3.json"),
        &machine("52:54:00:12:34:03", "flat", serde_json::json!({})),
    );
    std::fs::write(src.join("boot/assets/os.raw.xz"), b"not really an image").unwrap();
    src
}

#[test]
fn install_profiles_render_their_kernel_arguments() {
    let t = TempDir::new("boot-install-kargs");
    let s = start(&install_source(&t), &[]);
    let hash = format!("sha512-{}", "0f".repeat(64));
    assert_eq!(
        kernel_line(&ipxe(&s, "mac=52-54-00-12-34-01"), s.plain()),
        format!(
            "kernel BASE/assets/vmlinuz console=ttyS0 agent.install.disk.size_min=100G \
             agent.install.disk.size_max=2000000000000 agent.install.disk.model=SAMSUNG* \
             agent.install.disk.transport=nvme agent.install.disk.removable=no \
             coreos.inst.image_url=BASE/assets/os.raw.xz agent.install.image_hash={hash} \
             coreos.inst.ignition_url=BASE/machine-config?token=TOKEN agent.install.overwrite \
             coreos.inst.skip_reboot"
        )
    );
    assert_eq!(
        kernel_line(&ipxe(&s, "mac=52-54-00-12-34-03"), s.plain()),
        "kernel BASE/assets/vmlinuz flatcar.first_boot=1 \
         flatcar.config.url=BASE/machine-config?token=TOKEN flatcar.oem.id=pxe"
    );
    // The image in the kernel arguments is the asset the server serves.
    let r = get(s.plain(), "/assets/os.raw.xz");
    assert_eq!(r.body, b"not really an image");
}

#[test]
fn a_token_of_two_uses_is_spent_twice_then_refused() {
    let t = TempDir::new("boot-token-uses");
    let s = start(&install_source(&t), &[]);
    let script = ipxe(&s, "mac=52-54-00-12-34-03");
    let url = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("flatcar.config.url="))
        .unwrap();
    let p = &url[url.find("/machine-config").unwrap()..];
    let mut credentials = Vec::new();
    for _ in 0..2 {
        let r = get(s.plain(), p);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains("flat"), "{}", r.text());
        credentials.push(r.header("x-agent-report-url").unwrap().to_string());
    }
    assert_ne!(
        credentials[0], credentials[1],
        "each fetch has its own credential"
    );
    let third = get(s.plain(), p);
    assert_eq!(third.status, 403, "{}", third.text());
    assert!(third.text().contains("already used"), "{}", third.text());
    // A profile without tokenUses: one use.
    let p1 = config_path(&ipxe(&s, "mac=52-54-00-12-34-02"));
    assert_eq!(get(s.plain(), &p1).status, 200);
    assert_eq!(get(s.plain(), &p1).status, 403);
}

#[test]
fn a_bad_install_section_keeps_the_last_good_generation() {
    let t = TempDir::new("boot-install-bad");
    let src = install_source(&t);
    let s = start(&src, &[]);
    let good = s.status()["sources"][0]["active"]["generation"]
        .as_str()
        .unwrap()
        .to_string();
    for (profile, want) in [
        (
            r#"{"kernel": "vmlinuz", "install": {"image": "os.raw.xz", "disk": {"device": "sda"}}}"#,
            "boot/worker.json: $.install: the image would not be verified",
        ),
        (
            r#"{"kernel": "vmlinuz", "tokenUses": 11}"#,
            "boot/worker.json: $.tokenUses must be a whole number from 1 to 10",
        ),
        (
            r#"{"kernel": "vmlinuz", "install": {"image": "gone.raw", "insecure": true, "disk": {"device": "sda"}}}"#,
            "boot/assets/gone.raw does not exist",
        ),
    ] {
        write(&src.join("boot/worker.json"), profile);
        rejected(&s, &good, &[want]);
    }
}

/// The network install as the inventory shows it: the live boot's `install` report (with
/// the credential of its config fetch) makes the machine `installed` and its next `/ipxe`
/// the local disk; the installed system's first boot `provisioned`; its `running` report
/// `running`, with the kernel it named. With `--running-deadline 1s`, a machine installed
/// that never reports running is `unresponsive` once the second has passed (and listed so
/// by `?state=unresponsive`); a running report with another machine's credential is
/// refused.
#[test]
fn installed_provisioned_then_running_or_unresponsive() {
    let t = TempDir::new("boot-running");
    let s = start(&install_source(&t), &["--running-deadline", "1s"]);
    let fetch = |q: &str| {
        let script = ipxe(&s, q);
        let r = get(s.plain(), &config_path(&script));
        assert_eq!(r.status, 200, "{}", r.text());
        r.header("x-agent-report-url").unwrap().to_string()
    };
    let send = |url: &str, id: &str, rid: &str, boot: &str, stage: &str, extra| {
        post(
            s.plain(),
            url,
            &report_with(id, rid, boot, stage, "ok", true, extra),
        )
    };
    let state = |id: &str| admin_get(&s, &format!("/machines/{id}"))["state"].clone();
    let q1 = "mac=52-54-00-12-34-01";
    let id1 = "mac-52:54:00:12:34:01";
    let url1 = fetch(q1);
    let r = send(&url1, id1, "i1", "live-1", "install", serde_json::json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(state(id1), "installed");
    assert!(local_boot(&ipxe(&s, q1)), "installed: the local disk");
    // The installed system's first boot reports with the credential the install left it.
    for (i, stage) in ["fetch", "disks", "files"].iter().enumerate() {
        let r = post(
            s.plain(),
            &url1,
            &report(id1, &format!("p{i}"), "first-1", stage, *stage == "files"),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(state(id1), "provisioned");
    // Another machine's credential cannot say it came up.
    let id2 = "mac-52:54:00:12:34:02";
    let url2 = fetch("mac=52-54-00-12-34-02");
    let r = send(
        &url2,
        id1,
        "forged",
        "first-1",
        "running",
        serde_json::json!({}),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    let r = send(
        &url1,
        id1,
        "run1",
        "first-1",
        "running",
        serde_json::json!({"kernel": "6.1.0-13-amd64"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let m = admin_get(&s, &format!("/machines/{id1}"));
    assert_eq!(m["state"], "running", "{m}");
    assert_eq!(
        m["boots"].as_array().unwrap().last().unwrap()["kernel"],
        "6.1.0-13-amd64"
    );
    // Machine 2 installs and never comes up: unresponsive after the deadline, at read time.
    let r = send(&url2, id2, "i2", "live-2", "install", serde_json::json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    let end = Instant::now() + Duration::from_secs(20);
    while state(id2) != "unresponsive" {
        assert!(Instant::now() < end, "never unresponsive: {}", state(id2));
        std::thread::sleep(Duration::from_millis(200));
    }
    let ids = |st: &str| -> Vec<String> {
        admin_get(&s, &format!("/machines?state={st}"))["machines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids("unresponsive"), [id2]);
    assert_eq!(ids("running"), [id1]);
    assert!(ids("installed").is_empty());
    // Without a deadline the same record is installed.
    let plain = start(&install_source(&TempDir::new("boot-running-2")), &[]);
    let u = {
        let script = ipxe(&plain, q1);
        let r = get(plain.plain(), &config_path(&script));
        r.header("x-agent-report-url").unwrap().to_string()
    };
    let r = post(
        plain.plain(),
        &u,
        &report_with(
            id1,
            "i1",
            "live-1",
            "install",
            "ok",
            true,
            serde_json::json!({}),
        ),
    );
    assert_eq!(r.status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        admin_get(&plain, &format!("/machines/{id1}"))["state"],
        "installed"
    );
}

/// The installed system says it came up: `agent run` from an iPXE script leaves in the root
/// what sends the `running` report (`/var/lib/agent/running.json` 0600 with the report URL
/// and the machine's credential, the agent binary, `agent-report-running.service` enabled,
/// which `systemd-analyze verify` passes); the binary it left, run as the unit runs it,
/// makes the machine `running` with the boot id and kernel of this system, and removes the
/// state file; run again, it has nothing to send.
#[test]
#[ignore = "needs root: make test-root"]
fn the_installed_system_reports_running_from_the_root() {
    support::root::must_be_root();
    let t = TempDir::new("boot-running-root");
    let s = start(&source(&t), &[]);
    let uuid = "4c4c4544-0000-0000-0000-0000000000b2";
    let script = ipxe(&s, &format!("mac=52-54-00-12-34-01&uuid={uuid}"));
    let url = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("agent.config.url="))
        .unwrap()
        .to_string();
    let dir = TempDir::new("boot-running-run");
    let root = dir.path().join("root");
    let dmi = dir.path().join("dmi");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&dmi).unwrap();
    std::fs::write(dmi.join("product_uuid"), format!("{uuid}\n")).unwrap();
    let cmdline = dir.path().join("cmdline");
    std::fs::write(&cmdline, format!("agent.config.url={url}")).unwrap();
    let out = Command::new(AGENT)
        .args(["run", "--platform", "metal", "--root"])
        .arg(&root)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--test-kernel-cmdline-file")
        .arg(&cmdline)
        .args(["--system-config-dir", "/nonexistent"])
        .arg("--test-dmi-dir")
        .arg(&dmi)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let m = admin_get(&s, &format!("/machines/{uuid}"));
    assert_eq!(m["state"], "provisioned", "{m}");

    let state = root.join("var/lib/agent/running.json");
    let pending: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    let report_url = pending["url"].as_str().unwrap();
    assert!(
        report_url.starts_with(&format!("http://{}/report?token=", s.plain())),
        "{pending}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o600);
    assert_eq!(mode(&root.join("var/lib/agent/agent")), 0o755);
    let unit_path = root.join("etc/systemd/system/agent-report-running.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    assert!(
        unit.contains(
            "ExecStart=/var/lib/agent/agent report-running --state /var/lib/agent/running.json"
        ),
        "{unit}"
    );
    assert!(unit.contains("ConditionPathExists=/var/lib/agent/running.json"));
    assert_eq!(
        std::fs::read_link(
            root.join("etc/systemd/system/multi-user.target.wants/agent-report-running.service")
        )
        .unwrap(),
        Path::new("/etc/systemd/system/agent-report-running.service")
    );
    support::need("systemd-analyze", "ship.apt");
    // Verified against the root, which gets what it needs of a system for that: the host's
    // units (the targets it is ordered against) and the shell and rm its commands run.
    let sys = dir.path().join("verify-root");
    for (from, to) in [
        ("/usr/lib/systemd/system", "usr/lib/systemd"),
        ("/usr/bin/dash", "usr/bin"),
        ("/usr/bin/rm", "usr/bin"),
    ] {
        std::fs::create_dir_all(sys.join(to)).unwrap();
        let st = Command::new("cp")
            .args(["-a", from])
            .arg(sys.join(to))
            .status()
            .unwrap();
        assert!(st.success(), "cp {from}");
    }
    std::os::unix::fs::symlink("usr/bin", sys.join("bin")).unwrap();
    std::os::unix::fs::symlink("dash", sys.join("usr/bin/sh")).unwrap();
    for d in ["etc", "var"] {
        let st = Command::new("cp")
            .arg("-a")
            .arg(root.join(d))
            .arg(&sys)
            .status()
            .unwrap();
        assert!(st.success());
    }
    let unit_path = sys.join("etc/systemd/system/agent-report-running.service");
    let v = Command::new("systemd-analyze")
        .arg(format!("--root={}", sys.display()))
        .args(["verify", "--man=no"])
        .arg(&unit_path)
        .output()
        .unwrap();
    let verr = String::from_utf8_lossy(&v.stderr);
    assert!(
        v.status.success() && !verr.contains("agent-report-running"),
        "systemd-analyze verify: {verr}"
    );

    // The unit's command, with the binary the files stage left.
    let send = || {
        Command::new(root.join("var/lib/agent/agent"))
            .args(["report-running", "--state"])
            .arg(&state)
            .arg("--test-dmi-dir")
            .arg(&dmi)
            .output()
            .unwrap()
    };
    let out = send();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(!state.exists(), "sent once: the state file is gone");
    let m = admin_get(&s, &format!("/machines/{uuid}"));
    assert_eq!(m["state"], "running", "{m}");
    let boot = m["boots"].as_array().unwrap().last().unwrap().clone();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(boot["bootId"], boot_id.trim(), "{m}");
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(boot["kernel"], kernel.trim(), "{m}");
    let out = send();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no running report to send"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
