//! The command line as operators meet it: log lines the journal can filter by priority, and
//! the JSON log format.

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};

#[path = "../support/mod.rs"]
mod support;
use support::tmp::TempDir;

/// Runs `agent ARGS` with stderr into a file; returns (exit code, stderr). `journal`: set
/// JOURNAL_STREAM to that file's device and inode, as systemd does for a unit whose stderr
/// is the journal; `Some(false)` sets it to another file's.
fn agent_stderr(dir: &TempDir, args: &[&str], journal: Option<bool>) -> (i32, String) {
    let path = dir.path().join("stderr");
    let f = std::fs::File::create(&path).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agent"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(f)
        .env_remove("JOURNAL_STREAM");
    if let Some(ours) = journal {
        let m = if ours {
            std::fs::metadata(&path).unwrap()
        } else {
            std::fs::metadata(dir.path()).unwrap()
        };
        cmd.env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino()));
    }
    let st = cmd.status().unwrap();
    (
        st.code().unwrap_or(-1),
        std::fs::read_to_string(&path).unwrap(),
    )
}

#[test]
fn under_the_journal_every_line_carries_its_priority() {
    let d = TempDir::new("cli-journal");
    let missing = d.path().join("no-such-config.ign");
    let args = ["-v", "plan", "--config-file", missing.to_str().unwrap()];
    let (code, err) = agent_stderr(&d, &args, Some(true));
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let pri = l.strip_prefix('<').and_then(|r| r.split_once('>'));
        assert!(
            matches!(pri, Some(("3" | "4" | "6" | "7", _))),
            "a line without its priority: {l:?}"
        );
    }
    let failed = lines
        .iter()
        .find(|l| l.contains("no-such-config.ign"))
        .expect("the failure is logged");
    assert!(failed.starts_with("<3>agent["), "{failed:?}");
    assert!(failed.contains("] error: "), "{failed:?}");

    // JOURNAL_STREAM naming another file (inherited by a child whose stderr is not the
    // journal): plain lines.
    let (code, err) = agent_stderr(&d, &args, Some(false));
    assert_eq!(code, 1);
    assert!(err.lines().all(|l| l.starts_with("agent[")), "{err}");
    // Without it: plain lines.
    let (_, err) = agent_stderr(&d, &args, None);
    assert!(err.lines().all(|l| l.starts_with("agent[")), "{err}");
}

#[test]
fn json_log_lines_are_one_object_each() {
    let d = TempDir::new("cli-json");
    let missing = d.path().join("quote\"and\\tab\t.ign");
    let args = [
        "--log-format",
        "json",
        "plan",
        "--config-file",
        missing.to_str().unwrap(),
    ];
    let (code, err) = agent_stderr(&d, &args, None);
    assert_eq!(code, 1, "{err}");
    let objs: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let failed = objs
        .iter()
        .find(|o| o["level"] == "error")
        .expect("an error line");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("quote\"and\\tab\t.ign"),
        "{failed}"
    );
    assert!(failed["stage"].is_string());
    let time = failed["time"].as_str().unwrap();
    assert!(
        time.len() == 24 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
        "RFC 3339 with milliseconds: {time}"
    );
    // Under the journal, the JSON object follows the priority.
    let (_, err) = agent_stderr(&d, &args, Some(true));
    let l = err.lines().find(|l| l.contains("\"error\"")).unwrap();
    let json = l.strip_prefix("<3>").expect("the error's priority");
    serde_json::from_str::<serde_json::Value>(json).unwrap();

    let (code, err) = agent_stderr(&d, &["--log-format", "yaml", "info"], None);
    assert_eq!(code, 2);
    assert!(err.contains("text or json"), "{err}");
}

/// `make demo` as a newcomer runs it, into a pipe: no terminal escapes, /status whole, a
/// failed machine beside a provisioned one, and with DEMO_KEEP=1 the server still answering
/// its page until the demo is stopped, which then cleans up.
#[test]
#[ignore = "needs root: make test-root"]
fn the_demo_runs_honestly_in_a_pipe() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::process::CommandExt;
    support::root::must_be_root();
    let mut child = Command::new("examples/demo.sh")
        .arg(env!("CARGO_BIN_EXE_agent"))
        .env("DEMO_KEEP", "1")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;
    // The demo ends on its own without DEMO_KEEP; with it, it waits: stop it whatever happens.
    struct Stop(i32);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.0),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
    let stop = Stop(pgid);
    let mut out = String::new();
    let mut page = None;
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut l = String::new();
    while lines.read_line(&mut l).unwrap() > 0 {
        out.push_str(&l);
        if let Some(u) = l.trim().strip_prefix("the fleet page:") {
            page = Some(u.trim().to_string());
            break;
        }
        l.clear();
    }
    let page = page.unwrap_or_else(|| {
        let mut e = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut e);
        panic!("the demo did not keep its server up:\n{out}\n{e}")
    });
    assert!(
        !out.contains('\u{1b}'),
        "terminal escapes into a pipe:\n{out}"
    );
    // /status: the whole JSON document.
    let st = out.split("--- GET /status").nth(1).unwrap();
    let st = &st[st.find('\n').unwrap() + 1..st.find("\n== ").unwrap()];
    let v: serde_json::Value =
        serde_json::from_str(st).unwrap_or_else(|e| panic!("/status cut short ({e}):\n{st}"));
    assert!(v["sources"][0]["pools"].is_array(), "{v}");
    // The inventory: a provisioned machine and a failed one, the failure's reason shown.
    let inv = out.split("one provisioned, one failed").nth(1).unwrap();
    assert!(
        inv.lines().any(|l| l.contains("\tprovisioned\tworker\t")),
        "{inv}"
    );
    assert!(
        inv.lines().any(|l| l.contains("\tfailed\tbroken\t")),
        "{inv}"
    );
    assert!(out.contains("hash mismatch"), "{out}");
    // The page answers while the demo keeps the server.
    let u = page.strip_prefix("http://").unwrap();
    let (addr, path) = u.split_at(u.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(
        resp.starts_with("HTTP/1.1 200"),
        "{}",
        &resp[..resp.len().min(300)]
    );
    // Stopped, it cleans up: no demo directory, no loop device on its image.
    let work = out
        .lines()
        .find_map(|l| l.strip_prefix("work directory: "))
        .expect("the demo names its work directory")
        .to_string();
    assert!(std::path::Path::new(&work).is_dir());
    drop(stop);
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "stopped by SIGTERM: {st:?}");
    assert!(!std::path::Path::new(&work).exists(), "{work} left behind");
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    assert!(
        !String::from_utf8_lossy(&loops.stdout).contains(&work),
        "a loop device on {work} left"
    );
}

/// A closed port on 127.0.0.1 (bound, then released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `agent machines` that cannot reach its server: stdout stays empty (never a table header or
/// half a JSON document), the reason goes to stderr, the exit is 1; AGENT_SERVER names the
/// server as --server does.
#[test]
fn a_failed_listing_prints_nothing_on_stdout() {
    let port = closed_port();
    let server = format!("http://127.0.0.1:{port}");
    for json in [false, true] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agent"));
        cmd.args(["machines", "list", "--server", &server]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(
            out.stdout.is_empty(),
            "stdout: {:?}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains(&server));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["machines", "list"])
        .env("AGENT_SERVER", &server)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&server),
        "AGENT_SERVER is the server: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `agent serve --help` in groups (listeners, TLS, source, tokens, inventory, network boot,
/// limits), each flag under its own; `--log-kmsg` only where it means something.
#[test]
fn serve_help_is_grouped_and_log_kmsg_is_for_provisioning() {
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let mut group = "";
    let mut seen = std::collections::BTreeMap::new();
    for l in help.lines() {
        if !l.starts_with(' ') && l.ends_with(':') {
            group = l.trim_end_matches(':');
        } else if let Some(flag) = l.trim_start().strip_prefix("--") {
            let flag = flag.split([' ', '=', '<']).next().unwrap();
            seen.insert(flag.to_string(), group.to_string());
        } else if let Some((_, flag)) = l.trim_start().split_once(", --") {
            let flag = flag.split([' ', '=', '<']).next().unwrap();
            seen.insert(flag.to_string(), group.to_string());
        }
    }
    for (flag, want) in [
        ("listen-http", "Listeners"),
        ("admin-listen", "Listeners"),
        ("tls-cert", "TLS"),
        ("source", "Source"),
        ("token-key", "Tokens"),
        ("inventory-store", "Inventory"),
        ("max-body-bytes", "Limits"),
        ("discovery", "Network boot"),
    ] {
        assert_eq!(
            seen.get(flag).map(String::as_str),
            Some(want),
            "--{flag}:\n{help}"
        );
    }
    assert!(!seen.contains_key("log-kmsg"), "{help}");
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["--log-kmsg", "machines", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log-kmsg is for"));
    assert!(out.stdout.is_empty());
}

fn agent_out(args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    use std::io::Write;
    let mut c = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut i = c.stdin.take().unwrap();
    if let Some(b) = stdin {
        i.write_all(b).unwrap();
    }
    drop(i);
    c.wait_with_output().unwrap()
}

/// `--json` on validate, info and token show: one document on stdout, the exit code as
/// without it, times in RFC 3339.
#[test]
fn json_output_of_validate_info_and_token_show() {
    // An invalid Ignition config: every diagnostic with its path, line and column.
    let bad =
        br#"{"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "relative"}]}}"#;
    let out = agent_out(&["validate", "--json"], Some(bad));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["format"], "ignition");
    let d = &v["diagnostics"][0];
    assert_eq!(d["severity"], "error");
    assert_eq!(d["path"], "$.storage.files.0.path");
    assert_eq!(d["line"], 1);
    assert!(d["column"].as_u64().unwrap() > 1);
    assert!(d["message"].as_str().unwrap().contains("absolute"), "{d}");
    // A valid Butane config.
    let bu = b"variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/motd\n";
    let out = agent_out(&["validate", "--json"], Some(bu));
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["valid"].clone(), v["format"].clone()),
        (true.into(), "butane".into())
    );
    // A read error: stdout empty.
    let out = agent_out(&["validate", "--json", "/nonexistent/config.ign"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());

    let out = agent_out(&["info", "--json"], None);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["agent"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["specVersions"]["min"], "3.0.0");
    assert!(v["selinux"]["kernelSupport"].is_string());

    let d = TempDir::new("cli-token-json");
    let store = d.path().join("tokens");
    let store = store.to_str().unwrap();
    let out = agent_out(
        &["token", "rotate", "--token-dir", store, "--pool", "worker"],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = agent_out(
        &["token", "show", "--token-dir", store, "--json", "--reveal"],
        None,
    );
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["tokens"][0];
    assert_eq!(
        (t["pool"].as_str(), t["role"].as_str()),
        (Some("worker"), Some("current"))
    );
    assert!(t["hash"].as_str().unwrap().starts_with("sha256:"));
    let created = t["created"].as_str().unwrap();
    assert!(created.len() == 20 && created.ends_with('Z'), "{created}");
    assert_eq!(t["state"], "valid");
    let tok = v["revealed"]["worker"].as_str().unwrap();
    // The text form: the same token, RFC 3339 times.
    let out = agent_out(&["token", "show", "--token-dir", store, "--reveal"], None);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("worker\ttoken\t{tok}")), "{text}");
    assert!(text.contains(&format!("created={created}")), "{text}");
}

/// `agent serve` under the journal: its own lines and its access-log lines each carry their
/// priority.
#[test]
fn the_server_under_the_journal_prefixes_every_line() {
    use std::io::{BufRead, BufReader, Read, Write};
    let d = TempDir::new("cli-serve-journal");
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("pools")).unwrap();
    std::fs::write(
        src.join("pools/worker.ign"),
        r#"{"ignition":{"version":"3.4.0"}}"#,
    )
    .unwrap();
    let errpath = d.path().join("stderr");
    let f = std::fs::File::create(&errpath).unwrap();
    let m = std::fs::metadata(&errpath).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["serve", "--source", src.to_str().unwrap()])
        .args(["--listen-http", "127.0.0.1:0", "--admin-listen", "off"])
        .args(["--state-dir", d.path().join("state").to_str().unwrap()])
        .env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino()))
        .stdout(Stdio::piped())
        .stderr(f)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    let addr = l
        .trim()
        .strip_prefix("listening http://")
        .unwrap()
        .to_string();
    // Serving once the source is loaded (the line after the listeners').
    loop {
        l.clear();
        assert!(out.read_line(&mut l).unwrap() > 0, "no source line");
        if l.starts_with("source ") {
            break;
        }
    }
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "GET /config/nosuchpool HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    let mut text = String::new();
    for _ in 0..50 {
        text = std::fs::read_to_string(&errpath).unwrap();
        if text.contains("nosuchpool") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let access = text
        .lines()
        .find(|l| l.contains("nosuchpool"))
        .expect("an access line");
    let json = access
        .strip_prefix("<6>")
        .expect("the access line's priority");
    serde_json::from_str::<serde_json::Value>(json).unwrap();
    for l in text.lines() {
        assert!(
            matches!(l.get(..3), Some("<3>" | "<4>" | "<6>" | "<7>")),
            "a line without its priority: {l:?}"
        );
    }
}

/// `agent plan --json` on a real (loop) disk: the same plan as the text, as one document,
/// and the disk untouched.
#[test]
#[ignore = "needs root: make test-root"]
fn plan_json_on_a_loop_disk() {
    support::root::must_be_root();
    let lo = support::root::Loop::new(64);
    let dev = lo.dev().to_string();
    let d = TempDir::new("cli-plan-json");
    let cfg = d.path().join("c.ign");
    std::fs::write(
        &cfg,
        format!(
            r#"{{"ignition":{{"version":"3.4.0"}},"storage":{{
              "disks":[{{"device":"{dev}","wipeTable":true,"partitions":[
                {{"number":1,"label":"data","sizeMiB":16}},{{"number":2,"label":"rest"}}]}}],
              "filesystems":[{{"device":"{dev}p1","format":"ext4","label":"data"}}]}}}}"#
        ),
    )
    .unwrap();
    let before = lo.bytes();
    let out = agent_out(
        &["plan", "--json", "--config-file", cfg.to_str().unwrap()],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let disk = &v["disks"][0];
    assert_eq!(disk["device"], dev.as_str());
    assert_eq!(disk["table"], "wipe and write a new table");
    assert_eq!(disk["sectors"], 64 * 2048);
    let parts = disk["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0]["action"], "create");
    assert_eq!(parts[0]["new"]["label"], "data");
    assert_eq!(parts[0]["new"]["size"], 16 * 2048);
    assert_eq!(parts[0]["new"]["start"], 2048);
    assert!(parts[0]["old"].is_null());
    assert_eq!(v["filesystems"][0]["device"], format!("{dev}p1").as_str());
    assert_eq!(v["filesystems"][0]["format"], "ext4");
    // The text plan says the same.
    let text = agent_out(&["plan", "--config-file", cfg.to_str().unwrap()], None);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("partition 1: create start 2048 (1 MiB) size 32768"),
        "{text}"
    );
    assert_eq!(lo.bytes(), before, "plan wrote to the disk");
}
