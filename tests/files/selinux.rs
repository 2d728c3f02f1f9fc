//! SELinux relabelling against a real policy (Debian's selinux-policy-default), on a target
//! root that is an ext4 filesystem on a loop device (security.selinux xattrs work there even
//! with no SELinux LSM active).

use crate::support;

use std::path::Path;

use support::files::*;

const POLICY: &str = "/etc/selinux/default/contexts/files";

fn label(p: &Path) -> String {
    let out = runtime::util::run(
        "getfattr",
        &[
            "--only-values",
            "-h",
            "-n",
            "security.selinux",
            p.to_str().unwrap(),
        ],
    )
    .expect("getfattr (install attr)");
    String::from_utf8_lossy(&out.stdout)
        .trim_end_matches('\0')
        .to_string()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn relabels_what_the_stage_wrote_with_the_target_policy() {
    must_be_root();
    assert!(
        Path::new(POLICY).join("file_contexts").is_file(),
        "{POLICY}/file_contexts missing: install selinux-policy-default"
    );
    assert!(
        runtime::util::have_program("setfiles") || Path::new("/usr/sbin/setfiles").exists(),
        "setfiles missing: install policycoreutils"
    );
    let lo = Loop::ext4(32, None);
    let root = TempDir::new("selinux");
    let _m = TestMount::new(&lo.dev, root.path());
    std::fs::create_dir_all(root.join("/etc/selinux")).unwrap();
    std::fs::write(
        root.join("/etc/selinux/config"),
        "SELINUX=enforcing\nSELINUXTYPE=default\n",
    )
    .unwrap();
    copy_dir(
        Path::new(POLICY),
        &root.join("/etc/selinux/default/contexts/files"),
    );
    std::fs::create_dir_all(root.join("/srv/untouched")).unwrap();
    let c = config(
        r#"{"ignition":{"version":"3.6.0"},
            "storage":{"files":[{"path":"/etc/hostname","contents":{"source":"data:,box"}},
                                {"path":"/usr/local/bin/tool","mode":493,"contents":{"source":"data:,x"}}]},
            "systemd":{"units":[{"name":"app.service","contents":"[Service]\n"}]}}"#,
    );
    run(&c, root.path()).unwrap();
    assert!(label(&root.join("/etc/hostname")).contains(":object_r:net_conf_t:"));
    assert!(label(&root.join("/usr/local/bin/tool")).contains(":object_r:bin_t:"));
    assert!(label(&root.join("/usr/local/bin")).contains(":object_r:bin_t:"));
    assert!(label(&root.join("/etc/.ignition-result.json")).contains(":object_r:etc_t:"));
    let unit = label(&root.join("/etc/systemd/system/app.service"));
    assert!(unit.contains(":object_r:systemd_unit_t:"), "{unit}");
    // The selinux crate reads the same label.
    let ctx = selinux::SecurityContext::of_path(root.join("/etc/hostname"), false, false)
        .unwrap()
        .expect("a label");
    assert!(String::from_utf8_lossy(ctx.as_bytes()).contains("net_conf_t"));
    // Paths the stage did not touch keep no label.
    let out = runtime::util::run(
        "getfattr",
        &[
            "-n",
            "security.selinux",
            root.join("/srv/untouched").to_str().unwrap(),
        ],
    );
    assert!(out.is_err(), "untouched paths are not relabelled");
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_target_without_selinux_is_relabelled_nothing() {
    must_be_root();
    let lo = Loop::ext4(16, None);
    let root = TempDir::new("noselinux");
    let _m = TestMount::new(&lo.dev, root.path());
    let c = config(
        r#"{"ignition":{"version":"3.6.0"},"storage":{"files":[{"path":"/etc/hostname","contents":{"source":"data:,box"}}]}}"#,
    );
    run(&c, root.path()).unwrap();
    let out = runtime::util::run(
        "getfattr",
        &[
            "-n",
            "security.selinux",
            root.join("/etc/hostname").to_str().unwrap(),
        ],
    );
    assert!(out.is_err(), "no label without a target policy");
}
