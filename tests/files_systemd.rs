//! systemd units, presets, masks; kernel argument helper; the `agent run --stage files`
//! command line.

mod files_common;

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use files_common::*;

#[test]
fn units_dropins_presets_and_masks() {
    must_be_root();
    let root = TempDir::new("units");
    let sd = root.join("/etc/systemd/system");
    std::fs::create_dir_all(sd.join("multi-user.target.wants")).unwrap();
    std::fs::create_dir_all(sd.join("timers.target.requires")).unwrap();
    symlink(
        "/usr/lib/systemd/system/old.service",
        sd.join("multi-user.target.wants/old.service"),
    )
    .unwrap();
    symlink("/x", sd.join("timers.target.requires/old.service")).unwrap();
    symlink("/dev/null", sd.join("was-masked.service")).unwrap();
    std::fs::write(sd.join("to-mask.service"), "[Unit]\n").unwrap();
    std::fs::create_dir_all(root.join("/etc/systemd/system-preset")).unwrap();
    std::fs::write(
        root.join("/etc/systemd/system-preset/20-agent.preset"),
        "enable keep.service\nenable old.service\n",
    )
    .unwrap();
    let c = config(
        r#"{"ignition":{"version":"3.6.0"},"systemd":{"units":[
            {"name":"z-app.service","enabled":true,"contents":"[Service]\nExecStart=/bin/true\n",
             "dropins":[{"name":"10-env.conf","contents":"[Service]\nEnvironment=A=1\n"}]},
            {"name":"old.service","enabled":false},
            {"name":"a.timer","enabled":true},
            {"name":"to-mask.service","mask":true},
            {"name":"was-masked.service","mask":false},
            {"name":"sshd.service","dropins":[{"name":"x.conf","contents":"[Unit]\n"}]}]}}"#,
    );
    run(&c, root.path()).unwrap();
    assert_eq!(
        std::fs::read_to_string(sd.join("z-app.service")).unwrap(),
        "[Service]\nExecStart=/bin/true\n"
    );
    assert_eq!(
        std::fs::read_to_string(sd.join("z-app.service.d/10-env.conf")).unwrap(),
        "[Service]\nEnvironment=A=1\n"
    );
    assert!(sd.join("sshd.service.d/x.conf").is_file());
    assert!(!sd.join("sshd.service").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("/etc/systemd/system-preset/20-agent.preset")).unwrap(),
        "enable a.timer\nenable keep.service\ndisable old.service\nenable z-app.service\n"
    );
    assert!(std::fs::symlink_metadata(sd.join("multi-user.target.wants/old.service")).is_err());
    assert!(std::fs::symlink_metadata(sd.join("timers.target.requires/old.service")).is_err());
    assert_eq!(
        std::fs::read_link(sd.join("to-mask.service")).unwrap(),
        PathBuf::from("/dev/null")
    );
    assert!(std::fs::symlink_metadata(sd.join("was-masked.service")).is_err());
}

#[test]
fn kernel_arguments_go_to_the_helper() {
    must_be_root();
    let root = TempDir::new("kargs");
    let tools = TempDir::new("kargs-tools");
    let helper = tools.join("helper");
    let log = tools.join("args");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > {}\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let c = config(
        r#"{"ignition":{"version":"3.6.0"},"kernelArguments":{"shouldExist":["quiet","a=b c"],"shouldNotExist":["debug"]}}"#,
    );
    let e = format!("{:#}", run(&c, root.path()).unwrap_err());
    assert!(e.contains("--kargs-helper"), "{e}");
    let opts = agent::stages::files::Options {
        kargs_helper: Some(helper.clone()),
        ..Default::default()
    };
    run_opts(&c, root.path(), &opts).unwrap();
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!(
            "--root\n{}\n--should-exist\nquiet\n--should-exist\na=b c\n--should-not-exist\ndebug\n",
            root.path().display()
        )
    );
    // No changes asked: no helper needed.
    let none = config(r#"{"ignition":{"version":"3.6.0"}}"#);
    run(&none, root.path()).unwrap();
}

#[test]
fn the_command_line_runs_the_files_stage() {
    must_be_root();
    let root = TempDir::new("cli");
    let state = TempDir::new("cli-state");
    std::fs::write(
        state.join("config.json"),
        r#"{"ignition":{"version":"3.6.0"},"storage":{"files":[{"path":"/etc/issue","contents":{"source":"data:,hi"}}]}}"#,
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["run", "--stage", "files", "--root"])
        .arg(root.path())
        .arg("--state-dir")
        .arg(state.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(root.join("/etc/issue")).unwrap(), b"hi");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("/etc/.agent-result.json")).unwrap())
            .unwrap();
    assert!(v["userConfigProvided"].is_null(), "no marker: unknown");
}
