//! systemd units, presets, masks; kernel argument helper; the `agent run --stage files`
//! command line.

use crate::support;

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use support::files::*;

const PRESETS: &str = "/etc/systemd/system-preset/20-ignition.preset";
const COMPAT_PRESETS: &str = "/etc/systemd/system-preset/20-agent.preset";

#[test]
#[ignore = "needs root: make test-root"]
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
    for f in [PRESETS, COMPAT_PRESETS] {
        std::fs::write(root.join(f), "enable keep.service\nenable old.service\n").unwrap();
    }
    let c = config(
        r#"{"ignition":{"version":"3.6.0"},"systemd":{"units":[
            {"name":"z-app.service","enabled":true,"contents":"[Service]\nExecStart=/bin/true\n",
             "dropins":[{"name":"10-env.conf","contents":"[Service]\nEnvironment=A=1\n"}]},
            {"name":"old.service","enabled":false},
            {"name":"a.timer","enabled":true},
            {"name":"echo@.service","contents":"[Service]\nExecStart=/bin/echo %i\n"},
            {"name":"echo@bar.service","enabled":true,
             "dropins":[{"name":"i.conf","contents":"[Unit]\n"}]},
            {"name":"echo@foo.service","enabled":true},
            {"name":"to-mask.service","mask":true},
            {"name":"was-masked.service","mask":false},
            {"name":"bar.service","enabled":true,"mask":false},
            {"name":"empty.service","contents":""},
            {"name":"zincati.service","dropins":[{"name":"empty.conf","contents":""}]},
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
    // Drop-ins keep Ignition's paths, also for an instance.
    assert!(sd.join("sshd.service.d/x.conf").is_file());
    assert!(sd.join("echo@bar.service.d/i.conf").is_file());
    assert!(!sd.join("sshd.service").exists());
    // Like Ignition: an empty unit is not written, an empty drop-in is.
    assert!(!sd.join("empty.service").exists());
    assert_eq!(
        std::fs::read(sd.join("zincati.service.d/empty.conf")).unwrap(),
        b""
    );
    // Ignition's preset file: lines of other units stay, ours replace those for the same
    // units and follow sorted by Ignition's key; instances are grouped under their template.
    assert_eq!(
        std::fs::read_to_string(root.join(PRESETS)).unwrap(),
        "enable keep.service\nenable a.timer\nenable bar.service\n\
         enable echo@.service bar foo\ndisable old.service\nenable z-app.service\n"
    );
    assert_eq!(mode(&root.join(PRESETS)), 0o644);
    // The earlier agent layout, one line per unit, kept beside it.
    assert_eq!(
        std::fs::read_to_string(root.join(COMPAT_PRESETS)).unwrap(),
        "enable a.timer\nenable bar.service\nenable echo@bar.service\nenable echo@foo.service\n\
         enable keep.service\ndisable old.service\nenable z-app.service\n"
    );
    assert!(std::fs::symlink_metadata(sd.join("multi-user.target.wants/old.service")).is_err());
    assert!(std::fs::symlink_metadata(sd.join("timers.target.requires/old.service")).is_err());
    assert_eq!(
        std::fs::read_link(sd.join("to-mask.service")).unwrap(),
        PathBuf::from("/dev/null")
    );
    // Unmasked; an unmasked unit that was not masked is left alone (nothing created).
    assert!(std::fs::symlink_metadata(sd.join("was-masked.service")).is_err());
    assert!(std::fs::symlink_metadata(sd.join("bar.service")).is_err());
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_fresh_root_gets_exactly_ignitions_preset_file_and_a_rerun_converges() {
    must_be_root();
    let root = TempDir::new("units-fresh");
    let c = config(
        r#"{"ignition":{"version":"3.0.0"},"systemd":{"units":[
            {"name":"example.service","enabled":true,
             "contents":"[Service]\nType=oneshot\nExecStart=/usr/bin/echo Hello World\n\n[Install]\nWantedBy=multi-user.target"},
            {"name":"d.service","enabled":false},
            {"name":"c.service","enabled":true},
            {"name":"b.socket","enabled":true}]}}"#,
    );
    let want = "enable b.socket\nenable c.service\ndisable d.service\nenable example.service\n";
    for _ in 0..2 {
        run(&c, root.path()).unwrap();
        assert_eq!(std::fs::read_to_string(root.join(PRESETS)).unwrap(), want);
        assert_eq!(
            std::fs::read_to_string(root.join(COMPAT_PRESETS)).unwrap(),
            want,
            "without instances both files have the same lines"
        );
    }
    // No enablement in the config: no preset file.
    let bare = TempDir::new("units-bare");
    run(
        &config(r#"{"ignition":{"version":"3.6.0"},"systemd":{"units":[{"name":"m.service","mask":true}]}}"#),
        bare.path(),
    )
    .unwrap();
    assert!(!bare.join(PRESETS).exists() && !bare.join(COMPAT_PRESETS).exists());
}

#[test]
#[ignore = "needs root: make test-root"]
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
#[ignore = "needs root: make test-root"]
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
        serde_json::from_slice(&std::fs::read(root.join("/etc/.ignition-result.json")).unwrap())
            .unwrap();
    assert!(v["userConfigProvided"].is_null(), "no marker: unknown");
}
