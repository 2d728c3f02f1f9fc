//! The agent's provisioning reports (docs/reports.md) against a small real HTTP server on
//! 127.0.0.1 (`support/report_server.py`: serves a config with the X-Agent-* headers, records
//! the reports POSTed to it): success, each failure kind, the queue while the server is down
//! (drained by the next stage and by `agent report drain` from the root), secrets never in a
//! report, the console, the logs or the state, the token never sent to another origin than
//! the one it was given to, a drain that reads only regular files within bounds, and the
//! console summary of a failure.

#[path = "../support/mod.rs"]
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
        let out = TempDir::new("reports-got");
        let mut args = Vec::new();
        if let Some(c) = config {
            let f = out.join("served.ign");
            std::fs::write(&f, serde_json::to_vec(c).unwrap()).unwrap();
            args.push(f.display().to_string());
            args.push(report_url.to_string());
        }
        Server::with_args(port, out, args)
    }

    /// Answers GET /ignition with a redirect to `to` (and takes reports like the others).
    fn redirecting(to: &str) -> Server {
        Server::with_args(
            None,
            TempDir::new("reports-got"),
            vec![format!("redirect:{to}")],
        )
    }

    fn with_args(port: Option<u16>, out: TempDir, extra: Vec<String>) -> Server {
        let port = port.unwrap_or_else(free_tcp_port);
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/report_server.py"
        );
        let mut args = vec![port.to_string(), out.path().display().to_string()];
        args.extend(extra);
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

    /// Every request received: "METHOD PATH AUTHORIZATION" lines.
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.out.join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
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
        assert!(r["error"].is_null() && r["logTail"].as_array().unwrap().is_empty());
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
    assert!(!failed["logTail"].as_array().unwrap().is_empty());
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
    assert!(!r["logTail"].as_array().unwrap().is_empty());
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
    assert!(!r["logTail"].as_array().unwrap().is_empty());
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
    let tail: Vec<&str> = got[2].0["logTail"]
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
    // The kernel command line names a report server that is down (it gets the token: the
    // operator named it).
    let down = free_tcp_port();
    let cmdline = format!("quiet agent.report.url=http://127.0.0.1:{down}/report");
    let served = json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [
        {"path": "/etc/hello", "contents": {"source": "data:,hi"}}
    ]}});
    let s = Server::start(None, Some(&served), "/report");
    let run = agent_run(&pointer(&s.url("/ignition")), &cmdline, &[], None);
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
    assert_eq!(queued(&run.state.join("reports")), 4, "{}", run.stderr());
    let rq = run.root.join("var/lib/agent/reports");
    assert_eq!(queued(&rq), 4);
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
    assert_eq!(
        stages(&got),
        ["fetch:started", "fetch:ok", "disks:ok", "files:ok"]
    );
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
    // The failure (useradd, whose command line the log shows) is in the report, the hash
    // redacted, as on the console.
    assert!(
        run.stderr().contains("--password <password hash>") && !run.stderr().contains(secrets[2]),
        "{}",
        run.stderr()
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

/// Every file under `dir`, recursively, with its bytes (as text, lossily).
fn files_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            out.extend(files_under(&p));
        } else if m.is_file() {
            let b = std::fs::read(&p).unwrap();
            out.push((p, String::from_utf8_lossy(&b).into_owned()));
        }
    }
    out
}

#[test]
#[ignore = "needs root: make test-root"]
fn secrets_never_reach_the_console_the_logs_or_the_state() {
    must_be_root();
    const PW: &str = "s3cretpw";
    const SIG: &str = "SECRETSIG";
    // No crypt(3) prefix: only hiding useradd's --password argument keeps it out.
    const HASH: &str = "xyHASHsecret77";
    let served = json!({"ignition": {"version": "3.4.0"},
        "passwd": {"users": [{"name": "core", "passwordHash": HASH}]}});
    let s = Server::start(None, Some(&served), "/report");
    // The merged config's URL carries a password and a signed query.
    let merged = format!("http://agent:{PW}@127.0.0.1:{}/ignition?sig={SIG}", s.port);
    // Once with the reports sent, once with them queued (the kernel's report URL is down).
    let run = agent_run(&pointer(&merged), "quiet", &["-v"], None);
    assert!(!run.out.status.success());
    assert_eq!(
        stages(&s.reports()),
        ["fetch:ok", "disks:ok", "files:failed"],
        "{}",
        run.stderr()
    );
    let down = free_tcp_port();
    let run2 = agent_run(
        &pointer(&merged),
        &format!("quiet agent.report.url=http://127.0.0.1:{down}/report"),
        &["-v"],
        None,
    );
    assert!(!run2.out.status.success());
    // The test reaches what it greps for: the config was fetched, useradd failed on the
    // hash's user, the reports were queued.
    let err = run.stderr();
    assert!(
        err.contains("creating user core") && err.contains("--password"),
        "{err}"
    );
    assert_eq!(
        files_under(&run2.state.join("reports"))
            .iter()
            .filter(|(p, _)| p.extension().is_some_and(|x| x == "json"))
            .count(),
        4,
        "{}",
        run2.stderr()
    );
    let mut places: Vec<(String, String)> = Vec::new();
    for (n, r) in [("run 1", &run), ("run 2", &run2)] {
        places.push((format!("{n}: stderr"), r.stderr()));
        places.push((
            format!("{n}: stdout"),
            String::from_utf8_lossy(&r.out.stdout).into_owned(),
        ));
        let log = r.root.join("var/log/agent/agent.log");
        places.push((
            log.display().to_string(),
            std::fs::read_to_string(&log).unwrap(),
        ));
        for (p, text) in files_under(r.state.path()) {
            let name = p.file_name().unwrap().to_str().unwrap();
            // The test's input and the rendered config are the config itself; the token's
            // own files hold the token (never the secrets below).
            if name != "user.ign" && name != "config.json" {
                places.push((p.display().to_string(), text));
            }
        }
    }
    for raw in s.raw() {
        places.push(("a report sent".into(), raw));
    }
    assert!(places.iter().any(|(p, _)| p.ends_with("fetch.json")));
    assert!(places.iter().any(|(p, _)| p.ends_with("agent.log")));
    for (place, text) in &places {
        for secret in [PW, SIG, HASH] {
            assert!(!text.contains(secret), "{secret} in {place}:\n{text}");
        }
        if !place.ends_with("report-auth") && !place.ends_with("/auth") {
            assert!(!text.contains(TOKEN), "the token in {place}:\n{text}");
        }
    }
    // What the redaction leaves says what was there.
    assert!(err.contains("http://…@127.0.0.1"), "{err}");
    assert!(err.contains("/ignition?…"), "{err}");
}

#[test]
#[ignore = "needs root: make test-root"]
fn the_token_never_follows_a_redirect_to_another_host() {
    must_be_root();
    let config = json!({"ignition": {"version": "3.4.0"}});
    // B serves the config A redirects to. First B names a relative report URL (the origin
    // first asked, A, takes the reports), then its own (it gets them, without the token).
    let port_b = free_tcp_port();
    let own = format!("http://127.0.0.1:{port_b}/report");
    for b_says in ["/report", own.as_str()] {
        let b = Server::start(Some(port_b), Some(&config), b_says);
        let a = Server::redirecting(&b.url("/ignition"));
        let run = agent_run(&pointer(&a.url("/ignition")), "quiet", &[], None);
        assert!(run.out.status.success(), "{}", run.stderr());
        assert!(
            b.requests().iter().any(|l| l.starts_with("GET /ignition")),
            "B served the config: {:?}",
            b.requests()
        );
        for l in b.requests() {
            assert!(!l.contains("Bearer"), "B got the token ({b_says}): {l}");
        }
        if b_says == "/report" {
            let got = a.reports();
            assert_eq!(stages(&got), ["fetch:ok", "disks:ok", "files:ok"]);
            assert!(
                got.iter()
                    .all(|(_, auth)| auth == &format!("Bearer {TOKEN}"))
            );
            assert!(b.reports().is_empty());
        } else {
            let got = b.reports();
            assert_eq!(stages(&got), ["fetch:ok", "disks:ok", "files:ok"]);
            assert!(got.iter().all(|(_, auth)| auth.is_empty()));
            let err = run.stderr();
            assert!(
                err.contains(&format!(
                    "reports to {own} go without the token (another origin than http://127.0.0.1:{},",
                    a.port
                )),
                "{err}"
            );
        }
        assert!(
            !std::fs::read_to_string(run.state.join("fetch.json"))
                .unwrap()
                .contains(TOKEN)
        );
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn drain_sends_only_regular_files_within_bounds() {
    must_be_root();
    let s = Server::start(None, None, "");
    let outside = TempDir::new("drain-outside");
    let secret = outside.join("secret");
    std::fs::write(&secret, "LINKEDSECRET").unwrap();
    let q = TempDir::new("drain-queue");
    std::fs::write(q.join("url"), s.url("/report")).unwrap();
    std::fs::write(q.join("auth"), format!("Bearer {TOKEN}")).unwrap();
    std::fs::write(q.join("0001-good.json"), r#"{"good": 1}"#).unwrap();
    std::os::unix::fs::symlink(&secret, q.join("0002-link.json")).unwrap();
    let st = Command::new("mkfifo")
        .arg(q.join("0003-fifo.json"))
        .status()
        .unwrap();
    assert!(st.success());
    // 3 GiB, sparse.
    std::fs::File::create(q.join("0004-big.json"))
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    std::fs::write(q.join("0005-good.json"), r#"{"good": 2}"#).unwrap();
    let drain = |dir: &Path| -> Output {
        let mut child = Command::new(support::serve::AGENT)
            .args(["report", "drain", "--dir"])
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let end = std::time::Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > end {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "agent report drain still running after 60 s:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    };
    let t0 = std::time::Instant::now();
    let out = drain(q.path());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    let got = s.reports();
    assert_eq!(
        got.iter()
            .map(|(r, _)| r["good"].clone())
            .collect::<Vec<_>>(),
        [json!(1), json!(2)],
        "{err}"
    );
    assert!(got.iter().all(|(_, a)| a == &format!("Bearer {TOKEN}")));
    for raw in s.raw() {
        assert!(!raw.contains("LINKEDSECRET"), "{raw}");
    }
    for (name, why) in [
        ("0002-link.json", "not a regular file"),
        ("0003-fifo.json", "not a regular file"),
        ("0004-big.json", "larger than the 256 KiB limit"),
    ] {
        assert!(
            err.lines().any(|l| l.contains(name) && l.contains(why)),
            "{name}: {why}:\n{err}"
        );
    }
    // The queue is gone (the bad entries with it); what the link pointed to is not.
    assert!(!q.path().exists(), "{err}");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "LINKEDSECRET");

    // An auth file that is a link: nothing is sent, the error names the file.
    let q2 = TempDir::new("drain-queue-auth");
    std::fs::write(q2.join("url"), s.url("/report")).unwrap();
    std::os::unix::fs::symlink(&secret, q2.join("auth")).unwrap();
    std::fs::write(q2.join("0001-good.json"), r#"{"good": 3}"#).unwrap();
    let out = drain(q2.path());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{}: not a regular file",
            q2.join("auth").display()
        )),
        "{err}"
    );
    assert_eq!(s.reports().len(), 2, "{err}");
    for l in s.requests() {
        assert!(!l.contains("LINKEDSECRET"), "{l}");
    }
    assert!(q2.join("0001-good.json").exists());
}
