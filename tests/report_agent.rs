//! The agent's provisioning reports (docs/reports.md) against a small real HTTP server on
//! 127.0.0.1 (`support/report_server.py`: serves a config with the X-Agent-* headers, records
//! the reports POSTed to it): success, each failure kind, the queue while the server is down
//! (drained by the next stage and by `agent report drain` from the root), secrets never in a
//! report, and the console summary of a failure.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use support::TempDir;
use support::fetch::{Daemon, free_tcp_port, spawn, wait_tcp};
use support::root::must_be_root;

const TOKEN: &str = "tok_Zq8secretBearerValue";

/// The report server: its port, and where it keeps what it got.
struct Server {
    port: u16,
    out: TempDir,
    _d: Daemon,
}

impl Server {
    /// Serves `config` at /ignition naming `report_url`; on `port` (None: a free one).
    fn start(port: Option<u16>, config: Option<&Value>, report_url: &str) -> Server {
        let port = port.unwrap_or_else(free_tcp_port);
        let out = TempDir::new("reports-got");
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/report_server.py"
        );
        let mut args = vec![port.to_string(), out.path().display().to_string()];
        if let Some(c) = config {
            let f = out.join("served.ign");
            std::fs::write(&f, serde_json::to_vec(c).unwrap()).unwrap();
            args.push(f.display().to_string());
            args.push(report_url.to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let log = out.join("server.log");
        let d = spawn("python3", &[&[script][..], &args].concat(), &log);
        wait_tcp(port, Duration::from_secs(10));
        Server { port, out, _d: d }
    }

    fn url(&self, p: &str) -> String {
        format!("http://127.0.0.1:{}{p}", self.port)
    }

    /// The reports received, in order, with the Authorization header of each.
    fn reports(&self) -> Vec<(Value, String)> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.out.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        v.sort();
        v.iter()
            .map(|p| {
                let body = std::fs::read(p).unwrap();
                let auth = std::fs::read_to_string(p.with_extension("auth")).unwrap();
                (serde_json::from_slice(&body).unwrap(), auth)
            })
            .collect()
    }

    /// Every stored report's bytes.
    fn raw(&self) -> Vec<String> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(self.out.path()).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                v.push(std::fs::read_to_string(p).unwrap());
            }
        }
        v
    }
}

/// A pointer config: merge `url` with the bearer token (as `agent pointer` writes it).
fn pointer(url: &str) -> Value {
    json!({"ignition": {"version": "3.4.0", "config": {"merge": [
        {"source": url, "httpHeaders": [{"name": "Authorization", "value": format!("Bearer {TOKEN}")}]}
    ]}}})
}

struct Run {
    out: Output,
    root: TempDir,
    state: TempDir,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
}

/// `agent run` with `config` as its config file, the kernel command line `cmdline`, in a
/// fresh root and state directory (or `state` if given), and `extra` flags.
fn agent_run(config: &Value, cmdline: &str, extra: &[&str], state: Option<TempDir>) -> Run {
    agent_run_in(config, cmdline, extra, state, None)
}

/// [`agent_run`] into `root` (a root an earlier run used) when given.
fn agent_run_in(
    config: &Value,
    cmdline: &str,
    extra: &[&str],
    state: Option<TempDir>,
    root: Option<TempDir>,
) -> Run {
    let root = root.unwrap_or_else(|| TempDir::new("report-root"));
    let state = state.unwrap_or_else(|| TempDir::new("report-state"));
    let cfg = state.join("user.ign");
    std::fs::write(&cfg, serde_json::to_vec(config).unwrap()).unwrap();
    let cmd = state.join("cmdline");
    std::fs::write(&cmd, cmdline).unwrap();
    let out = Command::new(support::serve::AGENT)
        .args(["run", "--root"])
        .arg(root.path())
        .arg("--state-dir")
        .arg(state.path())
        .arg("--config-file")
        .arg(&cfg)
        .arg("--test-kernel-cmdline-file")
        .arg(&cmd)
        .args(["--system-config-dir", "/nonexistent"])
        .args(extra)
        .output()
        .unwrap();
    Run { out, root, state }
}

fn stages(reports: &[(Value, String)]) -> Vec<String> {
    reports
        .iter()
        .map(|(r, _)| {
            format!(
                "{}:{}",
                r["stage"].as_str().unwrap(),
                r["outcome"].as_str().unwrap()
            )
        })
        .collect()
}

/// The console summary in `stderr`: its lines, from the FAILED line to the report line.
fn summary(stderr: &str) -> Vec<String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("agent: the ") && l.ends_with("stage FAILED"))
        .unwrap_or_else(|| panic!("no summary in:\n{stderr}"));
    let end = start
        + lines[start..]
            .iter()
            .position(|l| l.starts_with("  report:"))
            .unwrap();
    lines[start..=end].iter().map(|s| s.to_string()).collect()
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_provisioned_machine_sends_three_reports_with_what_changed() {
    must_be_root();
    let served = json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [
        {"path": "/etc/hello", "mode": 420, "contents": {"source": "data:,hi"}}
    ]}});
    let s = Server::start(None, Some(&served), "/report");
    let run = agent_run(&pointer(&s.url("/ignition")), "quiet", &[], None);
    assert!(run.out.status.success(), "{}", run.stderr());
    let got = s.reports();
    assert_eq!(
        stages(&got),
        ["fetch:ok", "disks:ok", "files:ok"],
        "{}",
        run.stderr()
    );
    for (r, auth) in &got {
        assert_eq!(auth, &format!("Bearer {TOKEN}"));
        assert_eq!(r["format"], 1);
        assert_eq!(r["config"]["pool"], "worker");
        assert_eq!(r["config"]["name"], "worker-cfg");
        assert!(r["config"]["hash"].as_str().unwrap().starts_with("sha256-"));
        assert!(!r["machine"]["id"].as_str().unwrap().is_empty());
        assert_eq!(r["agent"], env!("CARGO_PKG_VERSION"));
        assert!(r["error"].is_null() && r["log_tail"].as_array().unwrap().is_empty());
    }
    let files = &got[2].0;
    assert_eq!(files["final"], true);
    assert_eq!(got[0].0["final"], false);
    let paths: Vec<&str> = files["changes"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(paths.contains(&"/etc/hello"), "{paths:?}");
    // The token is kept for reports only, 0600, never in a report.
    let auth = run.state.join("report-auth");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&auth).unwrap().permissions().mode() & 0o777,
        0o600
    );
    for raw in s.raw() {
        assert!(!raw.contains(TOKEN));
    }
    assert!(!run.stderr().contains(TOKEN));
    // Nothing queued, nothing installed; the log is kept in the state dir and in the root.
    assert!(!run.root.join("var/lib/agent/reports").exists());
    assert!(run.state.join("agent.log").exists());
    let log = std::fs::read_to_string(run.root.join("var/log/agent/agent.log")).unwrap();
    assert!(log.contains("fetch report sent"), "{log}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_fetch_failure_is_reported_to_the_kernel_argument_url() {
    must_be_root();
    let s = Server::start(None, None, "");
    let missing = s.url("/missing.ign?sig=querysecret");
    let run = agent_run(
        &json!({"ignition": {"version": "3.4.0", "config": {"replace": {"source": missing}}}}),
        &format!("quiet agent.report.url={}", s.url("/report")),
        &[],
        None,
    );
    assert!(!run.out.status.success());
    let got = s.reports();
    assert_eq!(
        stages(&got),
        ["fetch:started", "fetch:failed"],
        "{}",
        run.stderr()
    );
    let failed = &got[1].0;
    let err = failed["error"].as_str().unwrap();
    assert!(
        err.contains("/missing.ign?…") && err.contains("404"),
        "{err}"
    );
    assert!(!failed["log_tail"].as_array().unwrap().is_empty());
    assert_eq!(got[1].1, "", "no token without a served config");
    for raw in s.raw() {
        assert!(!raw.contains("querysecret"), "{raw}");
    }
    let sum = summary(&run.stderr());
    assert!(sum.len() <= 20, "{sum:#?}");
    let sum = sum.join("\n");
    assert!(sum.contains("the fetch stage FAILED"), "{sum}");
    assert!(
        sum.contains("/missing.ign?…") && !sum.contains("querysecret"),
        "{sum}"
    );
    assert!(sum.contains("agent.log"), "{sum}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_disks_failure_is_reported_with_its_device() {
    must_be_root();
    let served = json!({"ignition": {"version": "3.4.0"}, "storage": {"disks": [
        {"device": "/dev/agent-report-test-absent", "partitions": [{"label": "x"}]}
    ]}});
    let s = Server::start(None, Some(&served), "/report");
    let run = agent_run(
        &pointer(&s.url("/ignition")),
        "quiet",
        &["--device-timeout", "0.2"],
        None,
    );
    assert!(!run.out.status.success());
    let got = s.reports();
    assert_eq!(
        stages(&got),
        ["fetch:ok", "disks:failed"],
        "{}",
        run.stderr()
    );
    let r = &got[1].0;
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("/dev/agent-report-test-absent"),
        "{r}"
    );
    assert!(!r["log_tail"].as_array().unwrap().is_empty());
    let sum = summary(&run.stderr());
    assert!(sum.len() <= 20, "{sum:#?}");
    let sum = sum.join("\n");
    assert!(sum.contains("the disks stage FAILED"), "{sum}");
    assert!(sum.contains("/dev/agent-report-test-absent"), "{sum}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_files_failure_is_reported_and_its_log_kept_in_the_root() {
    must_be_root();
    let s0 = Server::start(None, None, "");
    let bad = s0.url("/absent/app.conf?token=querysecret2");
    let served = json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [
        {"path": "/etc/app.conf", "contents": {"source": bad}}
    ]}});
    let s = Server::start(None, Some(&served), "/report");
    let run = agent_run(&pointer(&s.url("/ignition")), "quiet", &[], None);
    assert!(!run.out.status.success());
    let got = s.reports();
    assert_eq!(
        stages(&got),
        ["fetch:ok", "disks:ok", "files:failed"],
        "{}",
        run.stderr()
    );
    let r = &got[2].0;
    let err = r["error"].as_str().unwrap();
    assert!(err.contains("/absent/app.conf?…"), "{err}");
    assert!(!r["log_tail"].as_array().unwrap().is_empty());
    for raw in s.raw() {
        assert!(!raw.contains("querysecret2"), "{raw}");
    }
    let sum = summary(&run.stderr());
    assert!(sum.len() <= 20, "{sum:#?}");
    let sum = sum.join("\n");
    assert!(
        sum.contains("the files stage FAILED") && sum.contains("/etc/app.conf"),
        "{sum}"
    );
    let log = std::fs::read_to_string(run.root.join("var/log/agent/agent.log")).unwrap();
    assert!(log.contains("/etc/app.conf"), "{log}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_stage_run_alone_reports_the_runs_log_tail_not_only_its_own() {
    must_be_root();
    // In the initramfs each stage is its own process: the failing files stage's report must
    // still carry the lines the fetch and disks stages logged before it (agent.log's tail).
    let s0 = Server::start(None, None, "");
    let bad = s0.url("/absent/split.conf");
    let served = json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [
        {"path": "/etc/split.conf", "contents": {"source": bad}}
    ]}});
    let s = Server::start(None, Some(&served), "/report");
    let first = agent_run(
        &pointer(&s.url("/ignition")),
        "quiet",
        &["--stage", "fetch", "--stage", "disks"],
        None,
    );
    assert!(first.out.status.success(), "{}", first.stderr());
    let Run { root, state, .. } = first;
    let run = agent_run_in(
        &pointer(&s.url("/ignition")),
        "quiet",
        &["--stage", "files"],
        Some(state),
        Some(root),
    );
    assert!(!run.out.status.success());
    let got = s.reports();
    assert_eq!(
        stages(&got),
        ["fetch:ok", "disks:ok", "files:failed"],
        "{}",
        run.stderr()
    );
    let tail: Vec<&str> = got[2].0["log_tail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        tail.iter().any(|l| l.starts_with("agent[fetch]")),
        "no fetch stage line in the files stage's tail: {tail:#?}"
    );
    assert!(tail.len() <= 50, "{}", tail.len());
}

#[test]
#[ignore = "needs root: make test-root"]
fn reports_wait_in_the_queue_until_the_server_is_back() {
    must_be_root();
    // The config server names a report server that is down.
    let down = free_tcp_port();
    let report_url = format!("http://127.0.0.1:{down}/report");
    let served = json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [
        {"path": "/etc/hello", "contents": {"source": "data:,hi"}}
    ]}});
    let s = Server::start(None, Some(&served), &report_url);
    let run = agent_run(&pointer(&s.url("/ignition")), "quiet", &[], None);
    assert!(run.out.status.success(), "{}", run.stderr());
    // Queued in the state dir, and installed in the root with the binary and the unit.
    let queued = |d: &Path| {
        std::fs::read_dir(d)
            .map(|rd| {
                rd.filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "json")
                })
                .count()
            })
            .unwrap_or(0)
    };
    assert_eq!(queued(&run.state.join("reports")), 3, "{}", run.stderr());
    let rq = run.root.join("var/lib/agent/reports");
    assert_eq!(queued(&rq), 3);
    assert!(run.root.join("var/lib/agent/agent").exists());
    let unit =
        std::fs::read_to_string(run.root.join("etc/systemd/system/agent-report.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/var/lib/agent/agent report drain --dir /var/lib/agent/reports")
    );
    assert_eq!(
        std::fs::read_link(
            run.root
                .join("etc/systemd/system/multi-user.target.wants/agent-report.service")
        )
        .unwrap(),
        Path::new("/etc/systemd/system/agent-report.service")
    );
    // The server is back: `agent report drain` (as the unit runs it) sends them all.
    let back = Server::start(Some(down), None, "");
    let out = Command::new(support::serve::AGENT)
        .args(["report", "drain", "--dir"])
        .arg(&rq)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = back.reports();
    assert_eq!(stages(&got), ["fetch:ok", "disks:ok", "files:ok"]);
    assert!(got.iter().all(|(_, a)| a == &format!("Bearer {TOKEN}")));
    assert!(!rq.exists(), "the queue is removed once sent");
}

#[test]
#[ignore = "needs root: make test-root"]
fn the_next_stage_sends_the_queue_first() {
    must_be_root();
    let down = free_tcp_port();
    let s = Server::start(
        None,
        Some(&json!({"ignition": {"version": "3.4.0"}})),
        &format!("http://127.0.0.1:{down}/report"),
    );
    let first = agent_run(
        &pointer(&s.url("/ignition")),
        "quiet",
        &["--stage", "fetch"],
        None,
    );
    assert!(first.out.status.success(), "{}", first.stderr());
    let back = Server::start(Some(down), None, "");
    let state = first.state;
    let second = agent_run(
        &pointer(&s.url("/ignition")),
        "quiet",
        &["--stage", "disks"],
        Some(state),
    );
    assert!(second.out.status.success(), "{}", second.stderr());
    let got = back.reports();
    assert_eq!(
        stages(&got),
        ["fetch:ok", "disks:ok"],
        "{}",
        second.stderr()
    );
    // A run of one stage that is not files (the initramfs's units) does not end the boot.
    assert_eq!(got[1].0["final"], false);
}

#[test]
#[ignore = "needs root: make test-root"]
fn secrets_never_reach_a_report() {
    must_be_root();
    let s0 = Server::start(None, None, "");
    let secrets = [
        TOKEN,
        "SECRETCONTENTS42",
        "$6$saltsalt$Q9hashhashhash",
        "hdrsecretvalue77",
        "querysecret99",
        "c2VjcmV0Y29udGVudHMy",
    ];
    let served = json!({"ignition": {"version": "3.4.0"},
    "passwd": {"users": [{"name": "core", "passwordHash": secrets[2]}]},
    "storage": {"files": [
        {"path": "/etc/a", "contents": {"source": "data:,SECRETCONTENTS42"}},
        {"path": "/etc/b", "contents": {"source": format!("data:;base64,{}", secrets[5])}},
        {"path": "/etc/c", "contents": {
            "source": s0.url("/absent?sig=querysecret99"),
            "httpHeaders": [{"name": "X-Api-Key", "value": "hdrsecretvalue77"}]}}
    ]}});
    let s = Server::start(None, Some(&served), "/report");
    // Once sent, and once queued (another run against a server that is down).
    let run = agent_run(&pointer(&s.url("/ignition")), "quiet", &["-v"], None);
    assert!(!run.out.status.success());
    assert_eq!(
        stages(&s.reports()),
        ["fetch:ok", "disks:ok", "files:failed"],
        "{}",
        run.stderr()
    );
    let down = free_tcp_port();
    let s2 = Server::start(
        None,
        Some(&served),
        &format!("http://127.0.0.1:{down}/report"),
    );
    let run2 = agent_run(&pointer(&s2.url("/ignition")), "quiet", &["-v"], None);
    assert!(!run2.out.status.success());
    let mut stored = s.raw();
    for e in std::fs::read_dir(run2.state.join("reports")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            stored.push(std::fs::read_to_string(p).unwrap());
        }
    }
    assert_eq!(stored.len(), 6);
    for r in &stored {
        for s in secrets {
            assert!(!r.contains(s), "{s} in a report: {r}");
        }
    }
    // The failure (useradd, whose command line the log shows with the hash) is in the
    // report, redacted.
    assert!(
        run.stderr().contains(secrets[2]),
        "the test must put the hash in the log"
    );
    assert!(
        stored
            .iter()
            .any(|r| r.contains("creating user core") && r.contains("<password hash>")),
        "{stored:#?}"
    );
    // And the console summary is free of them too.
    let sum = summary(&run.stderr()).join("\n");
    for s in secrets {
        assert!(!sum.contains(s), "{s} in the summary: {sum}");
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn the_disks_report_lists_partitions_and_filesystems() {
    must_be_root();
    let l = support::root::Loop::new(64);
    let p1 = format!("{}p1", l.dev());
    let p2 = format!("{}p2", l.dev());
    let storage = |parts: Value, fss: Value| {
        json!({"ignition": {"version": "3.4.0"}, "storage": {
            "disks": [{"device": l.dev(), "partitions": parts}], "filesystems": fss}})
    };
    // First boot: two partitions and a filesystem made.
    let s = Server::start(
        None,
        Some(&storage(
            json!([{"number": 1, "sizeMiB": 16}, {"number": 2, "sizeMiB": 16}]),
            json!([{"device": p1, "format": "ext4", "label": "data"}]),
        )),
        "/report",
    );
    let run = agent_run(
        &pointer(&s.url("/ignition")),
        "quiet",
        &["--stage", "fetch", "--stage", "disks"],
        None,
    );
    assert!(run.out.status.success(), "{}", run.stderr());
    let got = s.reports();
    assert_eq!(stages(&got), ["fetch:ok", "disks:ok"], "{}", run.stderr());
    let c = &got[1].0["changes"];
    assert_eq!(c["partitions"]["created"], json!([p1, p2]), "{c}");
    assert_eq!(
        c["filesystems"]["made"],
        json!([format!("{p1} (ext4)")]),
        "{c}"
    );
    // Again: partition 1 and its filesystem kept, partition 2 deleted.
    let s = Server::start(
        None,
        Some(&storage(
            json!([{"number": 1, "sizeMiB": 16}, {"number": 2, "shouldExist": false, "wipePartitionEntry": true}]),
            json!([{"device": p1, "format": "ext4", "label": "data"}]),
        )),
        "/report",
    );
    let run = agent_run(
        &pointer(&s.url("/ignition")),
        "quiet",
        &["--stage", "fetch", "--stage", "disks"],
        None,
    );
    assert!(run.out.status.success(), "{}", run.stderr());
    let c = &s.reports()[1].0["changes"];
    assert_eq!(c["partitions"]["kept"], json!([p1]), "{c}");
    assert_eq!(c["partitions"]["deleted"], json!([p2]), "{c}");
    assert_eq!(
        c["filesystems"]["reused"],
        json!([format!("{p1} (ext4)")]),
        "{c}"
    );
    assert_eq!(s.reports()[1].0["final"], true);
}
