//! The hypervisor-channel platforms (docs/platforms.md, "Hypervisor channels") where this
//! machine can run a piece of them: the binary refusing `vmware` off VMware (without touching
//! the backdoor) and the channels whose kernel module is not there; and the files a
//! platform's provider leaves for the target root (Ignition's provider output files:
//! Hyper-V's KVP pool files), which the fetch stage records in the state directory
//! (`tests/fetch/stage.rs` checks that with the test-dummy platform) and the files stage
//! writes (here).

use crate::support;

use std::process::{Command, Output};

use agent::platform::hyperv::{Item, pool_files};
use agent::state::StateDir;
use support::files::*;

/// `agent run --stage fetch --platform NAME` with an empty kernel command line.
fn fetch_with_platform(name: &str) -> Output {
    let state = TempDir::new("channels-state");
    let sysdir = TempDir::new("channels-sysdir");
    let karg = TempDir::new("channels-cmdline");
    std::fs::write(karg.join("cmdline"), "quiet").unwrap();
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["run", "--stage", "fetch", "--platform", name, "--state-dir"])
        .arg(state.path())
        .arg("--system-config-dir")
        .arg(sysdir.path())
        .arg("--test-kernel-cmdline-file")
        .arg(karg.join("cmdline"))
        .env_remove("AGENT_SYSTEM_CONFIG_DIR")
        .output()
        .unwrap()
}

#[cfg(target_arch = "x86_64")]
#[test]
fn vmware_off_vmware_is_refused_by_its_cpuid_signature() {
    if agent::platform::vmware::hypervisor_vendor().as_deref() == Some("VMwareVMware") {
        return; // a VMware machine: nothing to refuse
    }
    let out = fetch_with_platform("vmware");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("fetching config from platform vmware: not a VMware virtual machine"),
        "{stderr}"
    );
}

#[test]
fn channels_without_their_kernel_module_say_so() {
    // No z/VM reader or BlueField driver on an x86_64 test machine: the module load fails
    // (or modprobe is missing) before any device is touched.
    for (platform, module) in [("zvm", "vmur"), ("nvidiabluefield", "mlxbf_bootctl")] {
        let out = fetch_with_platform(platform);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{platform}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "fetching config from platform {platform}: loading the {module} kernel module"
            )),
            "{platform}: {stderr}"
        );
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn qemu_without_fw_cfg_and_its_module_failing_to_load_is_an_error() {
    // As Ignition: without /sys/firmware/qemu_fw_cfg the module is loaded, and a failed load
    // is an error, not "no config". The load fails for real: in a mount namespace whose
    // module tree is empty (or without any module tree or modprobe, as on the CI machine).
    let state = TempDir::new("qemu-state");
    let sysdir = TempDir::new("qemu-sysdir");
    std::fs::write(sysdir.join("cmdline"), "quiet").unwrap();
    let absent = sysdir.join("no-fw-cfg");
    let script = "if [ -d /usr/lib/modules ]; then mount -t tmpfs none /usr/lib/modules || exit 99; fi; exec \"$0\" \"$@\"";
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(env!("CARGO_BIN_EXE_agent"))
        .args([
            "run",
            "--stage",
            "fetch",
            "--platform",
            "qemu",
            "--state-dir",
        ])
        .arg(state.path())
        .arg("--system-config-dir")
        .arg(sysdir.path())
        .arg("--test-kernel-cmdline-file")
        .arg(sysdir.join("cmdline"))
        .arg("--test-qemu-fw-cfg-dir")
        .arg(&absent)
        .env_remove("AGENT_SYSTEM_CONFIG_DIR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "fetching config from platform qemu: qemu: loading the QEMU firmware config module (qemu_fw_cfg)"
        ),
        "{stderr}"
    );
    assert!(!state.join("config.json").exists());
}

#[test]
#[ignore = "needs root: make test-root"]
fn the_files_stage_writes_the_providers_files() {
    must_be_root();
    let root = TempDir::new("provider-files-root");
    let state = TempDir::new("provider-files-state");
    let items = [
        Item {
            pool: 0,
            key: "ignition.config".into(),
            value: "{}".into(),
        },
        Item {
            pool: 3,
            key: "HostName".into(),
            value: "h".into(),
        },
    ];
    let files = pool_files(&items);
    StateDir::new(state.path())
        .write_provider_files(&files)
        .unwrap();
    // An older pool file is replaced.
    std::fs::create_dir_all(root.join("/var/lib/hyperv")).unwrap();
    std::fs::write(root.join("/var/lib/hyperv/.kvp_pool_0"), b"stale").unwrap();
    let c = config(r#"{"ignition":{"version":"3.4.0"}}"#);
    run_ctx(&c, &ctx(root.path(), state.path())).unwrap();
    for f in &files {
        let p = root.join(&f.path);
        assert_eq!(std::fs::read(&p).unwrap(), f.contents, "{}", f.path);
        assert_eq!(mode(&p), 0o600, "{}", f.path);
    }
    assert_eq!(
        std::fs::read(root.join("/var/lib/hyperv/.kvp_pool_1")).unwrap(),
        b""
    );
    assert_eq!(mode(&root.join("/var/lib/hyperv")), 0o755);
}

#[test]
#[ignore = "needs root: make test-root"]
fn no_recorded_files_write_nothing() {
    must_be_root();
    let root = TempDir::new("provider-files-none");
    let state = TempDir::new("provider-files-none-state");
    let c = config(r#"{"ignition":{"version":"3.4.0"}}"#);
    run_ctx(&c, &ctx(root.path(), state.path())).unwrap();
    assert!(!root.join("/var/lib/hyperv").exists());
}
