//! `agent serve --openshift` over real HTTP on 127.0.0.1: every served config carries the
//! files the OpenShift Machine Config Server writes, byte for byte as its code writes them
//! (recorded from that code in tests/mcs_fixtures/node_files.jsonl), in place of the agent's
//! node file; `Accept: …;version=2.2.0` gets the MCS converter's 2.2 document of the same
//! config, byte for byte, and a config 2.2 cannot express gets a 406 naming its fields.

use crate::support;

use std::path::Path;

use support::serve::*;

const IGN: &str = "application/vnd.coreos.ignition+json";
const ANNOTATIONS: &str = "/etc/machine-config-daemon/node-annotations.json";
const KUBECONFIG: &str = "/etc/kubernetes/kubeconfig";

/// The recorded node-file cases with a kubeconfig and a 2.2 document that every 2.2 machine
/// gets the same way (no file the converter would drop).
fn cases() -> Vec<serde_json::Value> {
    include_str!("../mcs_fixtures/node_files.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| {
            let files = r["config"]["storage"]["files"].as_array();
            r["kubeconfig"].as_str().is_some_and(|k| !k.is_empty())
                && r["v22"].is_string()
                && files.is_some_and(|f| !f.is_empty())
                && files
                    .unwrap()
                    .iter()
                    .all(|f| f.get("contents").is_some() || f.get("append").is_some())
                && r["config"]["storage"]["disks"].is_null()
        })
        .collect()
}

fn start(src: &Path, extra: &[&str]) -> Server {
    let mut args = vec![
        "--source",
        src.to_str().unwrap(),
        "--listen-http",
        "127.0.0.1:0",
        "--no-access-log",
    ];
    args.extend_from_slice(extra);
    Server::start(&args, &[])
}

fn files_of(body: &[u8]) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    v["storage"]["files"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The served 3.x config ends with the MCS's two files, as its `appendNodeAnnotations` and
/// `appendKubeConfig` write them (path, mode 420, overwrite, the percent-encoded `data:,`
/// source: the recorded bytes); the agent's own node file is not there; a 2.2 request gets
/// the converter's document byte for byte; 2.0 and 2.1 are refused. Before: no such files,
/// and every 2.x request was a 400.
#[test]
fn served_configs_carry_the_mcs_files_and_2_2_is_the_converters() {
    let cases = cases();
    assert!(cases.len() >= 3, "{}", cases.len());
    for rec in cases.iter().take(3) {
        let t = TempDir::new("openshift");
        let src = t.path().join("src");
        write(&src.join("pools/worker.ign"), &rec["config"].to_string());
        let kc = t.path().join("kubeconfig");
        write(&kc, rec["kubeconfig"].as_str().unwrap());
        let name = format!("worker={}", rec["name"].as_str().unwrap());
        let s = start(
            &src,
            &[
                "--openshift",
                "--kubeconfig",
                kc.to_str().unwrap(),
                "--openshift-config-name",
                &name,
            ],
        );

        let r = s.get_h(
            "/config/worker",
            &[("Accept", &format!("{IGN};version=3.5.0"))],
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let files = files_of(&r.body);
        let want = rec["files"].as_array().unwrap();
        assert!(files.len() >= 2);
        let tail = &files[files.len() - 2..];
        for (got, want) in tail.iter().zip(want) {
            for k in ["path", "mode", "overwrite"] {
                assert_eq!(got[k], want[k], "{k}");
            }
            assert_eq!(got["contents"]["source"], want["contents"]["source"]);
        }
        assert_eq!(tail[0]["path"], ANNOTATIONS);
        assert_eq!(tail[1]["path"], KUBECONFIG);
        assert!(
            files
                .iter()
                .all(|f| f["path"] != "/etc/agent/node-config.json")
        );

        let r = s.get_h(
            "/config/worker",
            &[("Accept", &format!("{IGN};version=2.2.0"))],
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), rec["v22"].as_str().unwrap());
        assert_eq!(
            r.header("content-type"),
            Some(&*format!("{IGN};version=2.2.0"))
        );
        // A newer 2.x is served 2.2, as the MCS does.
        let r2 = s.get_h(
            "/config/worker",
            &[("Accept", &format!("{IGN};version=2.4.0"))],
        );
        assert_eq!(r2.body, r.body);
        let r = s.get_h(
            "/config/worker",
            &[("Accept", &format!("{IGN};version=2.1.0"))],
        );
        assert_eq!(r.status, 400, "{}", r.text());
    }
}

/// A config 2.2 cannot express: 406 naming every field; the 3.x document still carries the
/// MCS files, the node annotations naming the pool's config (X-Agent-Config) when no
/// rendered name is given, and no kubeconfig file without --kubeconfig.
#[test]
fn what_2_2_cannot_express_is_named() {
    let t = TempDir::new("openshift-406");
    let src = t.path().join("src");
    write(
        &src.join("pools/infra.ign"),
        r#"{"ignition":{"version":"3.3.0"},"kernelArguments":{"shouldExist":["nosmt"]},
            "storage":{"luks":[{"name":"data","device":"/dev/vdz"}],
                       "files":[{"path":"/etc/empty"}]}}"#,
    );
    let s = start(&src, &["--openshift"]);
    let r = s.get_h(
        "/config/infra",
        &[("Accept", &format!("{IGN};version=2.2.0"))],
    );
    assert_eq!(r.status, 406, "{}", r.text());
    let e = r.text();
    for want in ["$.kernelArguments", "$.storage.luks"] {
        assert!(e.contains(want), "{want} in {e}");
    }
    // A file without contents is written as the converter writes it (an empty file).
    assert!(!e.contains("$.storage.files"), "{e}");
    let r = s.get("/config/infra");
    assert_eq!(r.status, 200);
    let config = r.header("x-agent-config").unwrap().to_string();
    let files = files_of(&r.body);
    let last = files.last().unwrap();
    assert_eq!(last["path"], ANNOTATIONS);
    let want = format!(
        "{{\"machineconfiguration.openshift.io/currentConfig\":\"{config}\",\
         \"machineconfiguration.openshift.io/desiredConfig\":\"{config}\",\
         \"machineconfiguration.openshift.io/firstPivotConfig\":\"{config}\",\
         \"machineconfiguration.openshift.io/state\":\"Done\"}}"
    );
    let mut enc = String::from("data:,");
    for b in want.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            enc.push(b as char);
        } else {
            enc.push_str(&format!("%{b:02X}"));
        }
    }
    assert_eq!(last["contents"]["source"], enc.as_str());
    assert!(files.iter().all(|f| f["path"] != KUBECONFIG));
}

/// Without --openshift: the agent's node file, and 2.x refused as before.
#[test]
fn without_the_mode_nothing_changes() {
    let t = TempDir::new("openshift-off");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("w"));
    let s = start(&src, &[]);
    let r = s.get_h(
        "/config/worker",
        &[("Accept", &format!("{IGN};version=2.2.0"))],
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("--openshift"), "{}", r.text());
    let files = files_of(&s.get("/config/worker").body);
    assert!(
        files
            .iter()
            .any(|f| f["path"] == "/etc/agent/node-config.json")
    );
    assert!(files.iter().all(|f| f["path"] != ANNOTATIONS));
}

/// The mode's flags without the mode, and a kubeconfig too large to serve, are start-up
/// errors naming the flag.
#[test]
fn mode_flags_are_checked_at_start() {
    let t = TempDir::new("openshift-flags");
    let src = t.path().join("src");
    write(&src.join("pools/worker.ign"), &worker_config("w"));
    let kc = t.path().join("kubeconfig");
    std::fs::write(&kc, vec![b'a'; (1 << 20) + 1]).unwrap();
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(AGENT)
            .args([
                "serve",
                "--source",
                src.to_str().unwrap(),
                "--listen-http",
                "127.0.0.1:0",
            ])
            .args(["--state-dir", t.path().join("state").to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run(&["--kubeconfig", kc.to_str().unwrap()]);
    assert!(e.contains("need --openshift"), "{e}");
    let e = run(&["--openshift", "--kubeconfig", kc.to_str().unwrap()]);
    assert!(e.contains("--kubeconfig") && e.contains("1048576"), "{e}");
    // A FIFO or a device is refused at once, never opened to block on or read without end.
    let fifo = t.path().join("kubeconfig.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let e = run(&["--openshift", "--kubeconfig", fifo.to_str().unwrap()]);
    assert!(e.contains("not a regular file"), "{e}");
    let e = run(&["--openshift", "--kubeconfig", "/dev/zero"]);
    assert!(e.contains("not a regular file"), "{e}");
    let e = run(&["--openshift", "--openshift-config-name", "worker=Bad_Name"]);
    assert!(e.contains("Kubernetes object name"), "{e}");
}
