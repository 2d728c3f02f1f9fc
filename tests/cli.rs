//! The command line as operators meet it: log lines the journal can filter by priority, and
//! the JSON log format.

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};

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
    (st.code().unwrap_or(-1), std::fs::read_to_string(&path).unwrap())
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
