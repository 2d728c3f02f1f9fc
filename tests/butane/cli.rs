//! `agent butane` and `agent validate` on Butane input, as a user runs them: stdin, files,
//! `-o`, `--files-dir`, `--strict`, `--pretty`, exit codes 0/1/2.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const AGENT: &str = env!("CARGO_BIN_EXE_agent");

fn run(args: &[&str], stdin: &str) -> Output {
    let mut c = Command::new(AGENT)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    c.wait_with_output().unwrap()
}

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn tmp(tag: &str) -> Tmp {
    let p = std::env::temp_dir().join(format!("butane-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    Tmp(p)
}

const CFG: &str = "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/motd\n      mode: 0644\n      contents:\n        local: motd\n";

#[test]
fn translates_from_stdin_and_files() {
    let t = tmp("ok");
    std::fs::write(t.0.join("motd"), "hi\n").unwrap();
    let dir = t.0.to_str().unwrap();
    let o = run(&["butane", "-d", dir, "-"], CFG);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "{\"ignition\":{\"version\":\"3.4.0\"},\"storage\":{\"files\":[{\"path\":\"/etc/motd\",\"contents\":{\"compression\":\"\",\"source\":\"data:,hi%0A\"},\"mode\":420}]}}\n"
    );
    // -o, --pretty, from a file; the output validates.
    std::fs::write(t.0.join("c.bu"), CFG).unwrap();
    let out = t.0.join("c.ign");
    let o = run(
        &[
            "butane",
            "--pretty",
            "--files-dir",
            dir,
            "-o",
            out.to_str().unwrap(),
            t.0.join("c.bu").to_str().unwrap(),
        ],
        "",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.starts_with("{\n  \"ignition\": {\n    \"version\": \"3.4.0\"\n  },"),
        "{text}"
    );
    let v = run(&["validate", out.to_str().unwrap()], "");
    assert!(v.status.success());
    // validate takes the Butane file itself, told by its content (not its name).
    std::fs::write(t.0.join("c.txt"), CFG).unwrap();
    let v = run(
        &["validate", "-d", dir, t.0.join("c.txt").to_str().unwrap()],
        "",
    );
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}

#[test]
fn errors_and_exit_codes() {
    // No files dir: error with the YAML position, exit 1.
    let o = run(&["butane", "--raw-errors"], CFG);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("error at $.storage.files.0.contents.local, line 8 col 16: local file paths are relative to a files directory"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    // A warning passes, and fails with --strict.
    let warn = "variant: fcos\nversion: 1.5.0\nstorage:\n  filez: []\n";
    let o = run(&["butane", "--raw-errors"], warn);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("warning at $.storage.filez, line 4 col 3: unused key filez")
    );
    assert_eq!(run(&["butane", "--strict"], warn).status.code(), Some(1));
    assert_eq!(
        run(
            &["validate", "-"],
            "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: x\n"
        )
        .status
        .code(),
        Some(1)
    );
    // Unreadable input: 2.
    assert_eq!(
        run(&["butane", "/nonexistent/x.bu"], "").status.code(),
        Some(2)
    );
    // A billion laughs is refused with the limit named, quickly and in bounded memory.
    let mut bomb = String::from("variant: fcos\nversion: 1.5.0\na: &a [x,x,x,x,x,x,x,x,x,x]\n");
    let mut prev = "a".to_string();
    for i in 0..9 {
        let n = format!("l{i}");
        bomb.push_str(&format!("{n}: &{n} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        prev = n;
    }
    let o = run(&["butane"], &bomb);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("max-alias-nodes"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Butane's command line: -r/--raw, -c/--check, -V/--version, --raw-errors, and its default
/// error format (the snippet of the source), as Butane v0.29.0 prints them.
#[test]
fn butane_flags() {
    let os = "variant: openshift\nversion: 4.14.0\nmetadata:\n  name: w\n  labels:\n    machineconfiguration.openshift.io/role: worker\nopenshift:\n  fips: true\n  kernel_arguments: [a, '- b']\n";
    // A MachineConfig by default (Butane v0.29.0's bytes) ...
    let o = run(&["butane"], os);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "# Generated by Butane; do not edit\napiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  labels:\n    machineconfiguration.openshift.io/role: worker\n  name: w\nspec:\n  config:\n    ignition:\n      version: 3.4.0\n  fips: true\n  kernelArguments:\n    - a\n    - '- b'\n"
    );
    // ... the Ignition config with -r, the openshift fields warned about (an error with -s).
    let o = run(&["butane", "-r", "--raw-errors"], os);
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "{\"ignition\":{\"version\":\"3.4.0\"}}\n"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning at $.openshift.fips, line 8 col 9: field ignored in raw mode"),
        "{err}"
    );
    assert_eq!(run(&["butane", "--raw", "-s"], os).status.code(), Some(1));
    // -c: the verdict, no output.
    let o = run(&["butane", "-c"], os);
    assert!(o.status.success() && o.stdout.is_empty());
    assert_eq!(
        run(&["butane", "--check"], "variant: fcos\nversion: 9.9.9\n")
            .status
            .code(),
        Some(1)
    );
    // -V needs no input.
    let o = run(&["butane", "-V"], "");
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("Butane v0.29.0"));
    // The default error format: the source around the value, underlined.
    let o = run(
        &["butane"],
        "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: a\n",
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "error[$.storage.files.0.path]:\n  --> <stdin>:5:13\n   |\n 3 | storage:\n 4 |   files:\n 5 |     - path: a\n   |             ^ path not absolute\n 6 | \n   |\n"
    );
}

/// `agent plan --config-file` takes a Butane config as `agent validate` does (it said
/// "invalid JSON" before), and refuses one that does not translate.
#[test]
fn plan_takes_butane() {
    let t = tmp("plan");
    let f = t.0.join("c.bu");
    std::fs::write(
        &f,
        "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/x\n",
    )
    .unwrap();
    let o = run(&["plan", "--config-file", f.to_str().unwrap()], "");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("invalid JSON"), "{err}");
    std::fs::write(
        &f,
        "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: x\n",
    )
    .unwrap();
    let o = run(&["plan", "--config-file", f.to_str().unwrap()], "");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("path not absolute"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `agent run --config-file` (the fetch stage, offline) renders a Butane config as Ignition.
#[test]
fn run_config_file_takes_butane() {
    let t = tmp("run");
    let (sys, state) = (t.0.join("sys"), t.0.join("state"));
    std::fs::create_dir_all(&sys).unwrap();
    let f = t.0.join("c.bu");
    std::fs::write(
        &f,
        "variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /etc/x\n",
    )
    .unwrap();
    let o = run(
        &[
            "run",
            "--stage",
            "fetch",
            "--offline",
            "--config-file",
            f.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "--system-config-dir",
            sys.to_str().unwrap(),
        ],
        "",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cfg = std::fs::read_to_string(state.join("config.json")).unwrap();
    assert!(cfg.contains("\"/etc/x\""), "{cfg}");
}
