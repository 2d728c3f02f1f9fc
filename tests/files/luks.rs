//! The LUKS volumes the disks stage recorded in the state directory, persisted into the target
//! root by the files stage: `/etc/luks/<name>` and `/etc/crypttab`, byte for byte, with their
//! modes and owners, through the files writer (root-confined, atomic, relabelled). The state
//! files are written here by hand in their documented format (`agent::state`), so the test
//! also pins that format. (Making and opening the volumes needs dm-crypt: vm-tests 08/09.)

use crate::support;

use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use support::files::*;

fn empty() -> spec::config::Config {
    config(r#"{"ignition":{"version":"3.4.0"}}"#)
}

/// Records a volume as the disks stage does: `luks/<name>.json` and, with a key,
/// `luks/<name>.key`.
fn record(state: &Path, name: &str, uuid: &str, key: Option<&[u8]>, discard: bool, netdev: bool) {
    let dir = state.join("luks");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let json = serde_json::json!({
        "name": name, "uuid": uuid, "key_file": key.is_some(), "discard": discard, "netdev": netdev
    });
    std::fs::write(dir.join(format!("{name}.json")), json.to_string()).unwrap();
    if let Some(k) = key {
        std::fs::write(dir.join(format!("{name}.key")), k).unwrap();
    }
}

fn run_in(root: &Path, state: &Path) -> anyhow::Result<()> {
    run_ctx(&empty(), &ctx(root, state))
}

fn owner(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid())
}

/// Names in `dir` starting with '.' (temporary files left behind).
fn dot_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with('.')
                && !n.starts_with(".ignition-result")
                && !n.starts_with(".agent-result")
        })
        .collect()
}

const KEY: &[u8] = &[0, 1, 2, 255, b'\n', b'k'];

#[test]
#[ignore = "needs root: make test-root"]
fn key_files_and_crypttab_are_written_byte_for_byte() {
    must_be_root();
    let (root, state) = (TempDir::new("luks-root"), TempDir::new("luks-state"));
    std::fs::create_dir_all(root.join("/etc")).unwrap();
    // An existing crypttab (mode 0600, someone else's): its other lines are kept, the line of
    // the same name replaced; it ends up 0644, root's.
    let crypttab = root.join("/etc/crypttab");
    std::fs::write(
        &crypttab,
        "# comment\nkeep UUID=k none luks\ndata UUID=old /etc/luks/data luks\n",
    )
    .unwrap();
    std::fs::set_permissions(&crypttab, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&crypttab, Some(1000), Some(1000)).unwrap();
    record(state.path(), "data", "u-1", Some(KEY), true, false);
    record(state.path(), "tangvol", "u-2", None, false, true);
    for pass in 0..2 {
        // Twice: the same result (idempotent).
        run_in(root.path(), state.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&crypttab).unwrap(),
            "# comment\nkeep UUID=k none luks\ndata UUID=u-1 /etc/luks/data luks,discard\n\
             tangvol UUID=u-2 none luks,_netdev\n",
            "pass {pass}"
        );
        assert_eq!(mode(&crypttab), 0o644);
        assert_eq!(owner(&crypttab), (0, 0));
        let keys = root.join("/etc/luks");
        assert!(std::fs::symlink_metadata(&keys).unwrap().is_dir());
        assert_eq!(mode(&keys), 0o700);
        assert_eq!(owner(&keys), (0, 0));
        assert_eq!(std::fs::read(keys.join("data")).unwrap(), KEY);
        assert_eq!(mode(&keys.join("data")), 0o600);
        assert_eq!(owner(&keys.join("data")), (0, 0));
        // A volume bound to clevis has no key file.
        assert!(!keys.join("tangvol").exists());
        assert_eq!(
            std::fs::read_dir(&keys).unwrap().count(),
            1,
            "only the key file in /etc/luks"
        );
        assert!(dot_files(&keys).is_empty(), "{:?}", dot_files(&keys));
        assert!(dot_files(&root.join("/etc")).is_empty());
    }
    // The state files are left as they were.
    assert_eq!(std::fs::read(state.join("luks/data.key")).unwrap(), KEY);
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_new_root_gets_crypttab_only_for_recorded_volumes() {
    must_be_root();
    let (root, state) = (TempDir::new("luks-root"), TempDir::new("luks-state"));
    // Nothing recorded: neither file.
    run_in(root.path(), state.path()).unwrap();
    assert!(!root.join("/etc/crypttab").exists());
    assert!(!root.join("/etc/luks").exists());
    // Only a clevis-bound volume: a crypttab line, no key directory.
    record(state.path(), "tangvol", "u-2", None, false, true);
    run_in(root.path(), state.path()).unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("/etc/crypttab")).unwrap(),
        "tangvol UUID=u-2 none luks,_netdev\n"
    );
    assert_eq!(mode(&root.join("/etc/crypttab")), 0o644);
    assert!(!root.join("/etc/luks").exists());
}

#[test]
#[ignore = "needs root: make test-root"]
fn paths_resolve_inside_the_root() {
    must_be_root();
    let (root, state) = (TempDir::new("luks-root"), TempDir::new("luks-state"));
    // /etc is a link to an absolute path: it means <root>/sysconf, never the host's.
    let name = format!("vol{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    std::fs::create_dir_all(root.join("/sysconf")).unwrap();
    symlink("/sysconf", root.join("/etc")).unwrap();
    record(state.path(), &name, "u-3", Some(b"secret"), false, false);
    run_in(root.path(), state.path()).unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("/sysconf/crypttab")).unwrap(),
        format!("{name} UUID=u-3 /etc/luks/{name} luks\n")
    );
    assert_eq!(
        std::fs::read(root.join(&format!("/sysconf/luks/{name}"))).unwrap(),
        b"secret"
    );
    assert_eq!(mode(&root.join("/sysconf/luks")), 0o700);
    assert_eq!(mode(&root.join(&format!("/sysconf/luks/{name}"))), 0o600);
    assert!(!Path::new("/sysconf").exists());
}

#[test]
#[ignore = "needs root: make test-root"]
fn links_and_directories_in_place_of_the_files_are_refused() {
    must_be_root();
    let state = TempDir::new("luks-state");
    record(state.path(), "data", "u-1", Some(b"k"), false, false);
    let outside = TempDir::new("luks-outside");
    std::fs::write(outside.join("crypttab"), "theirs\n").unwrap();

    // /etc/crypttab a symlink (here to a file outside the root): refused, nothing written
    // through it.
    let root = TempDir::new("luks-root");
    std::fs::create_dir_all(root.join("/etc")).unwrap();
    symlink(outside.join("crypttab"), root.join("/etc/crypttab")).unwrap();
    let err = format!("{:#}", run_in(root.path(), state.path()).unwrap_err());
    assert!(
        err.contains("/etc/crypttab") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("crypttab")).unwrap(),
        "theirs\n"
    );
    assert!(
        std::fs::symlink_metadata(root.join("/etc/crypttab"))
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // /etc/luks a symlink: refused (the key directory is not replaced).
    let root = TempDir::new("luks-root");
    std::fs::create_dir_all(root.join("/etc")).unwrap();
    symlink(outside.path(), root.join("/etc/luks")).unwrap();
    let err = format!("{:#}", run_in(root.path(), state.path()).unwrap_err());
    assert!(
        err.contains("/etc/luks") && err.contains("symbolic link"),
        "{err}"
    );
    assert!(!outside.join("data").exists());

    // A key path that is a symlink or a directory: refused, left as it is.
    for kind in ["symbolic link", "directory"] {
        let root = TempDir::new("luks-root");
        std::fs::create_dir_all(root.join("/etc/luks")).unwrap();
        let key = root.join("/etc/luks/data");
        if kind == "symbolic link" {
            symlink(outside.join("crypttab"), &key).unwrap();
        } else {
            std::fs::create_dir_all(key.join("inside")).unwrap();
        }
        let err = format!("{:#}", run_in(root.path(), state.path()).unwrap_err());
        assert!(
            err.contains("/etc/luks/data") && err.contains(kind),
            "{err}"
        );
        if kind == "directory" {
            assert!(key.join("inside").is_dir());
        }
        assert_eq!(
            std::fs::read_to_string(outside.join("crypttab")).unwrap(),
            "theirs\n"
        );
    }
}

const POLICY: &str = "/etc/selinux/default/contexts/files";

fn label(p: &Path) -> Option<String> {
    runtime::util::run(
        "getfattr",
        &[
            "--only-values",
            "-h",
            "-n",
            "security.selinux",
            p.to_str().unwrap(),
        ],
    )
    .ok()
    .map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .trim_end_matches('\0')
            .to_string()
    })
}

#[test]
#[ignore = "needs root: make test-root"]
fn key_files_and_crypttab_are_relabelled() {
    must_be_root();
    assert!(
        Path::new(POLICY).join("file_contexts").is_file(),
        "{POLICY}/file_contexts missing: install selinux-policy-default"
    );
    // xattrs: an ext4 root on a loop device.
    let lo = Loop::ext4(32, None);
    let root = TempDir::new("luks-selinux");
    let _m = TestMount::new(&lo.dev, root.path());
    let state = TempDir::new("luks-state");
    std::fs::create_dir_all(root.join("/etc/selinux/default/contexts/files")).unwrap();
    std::fs::write(
        root.join("/etc/selinux/config"),
        "SELINUX=enforcing\nSELINUXTYPE=default\n",
    )
    .unwrap();
    for f in [
        "file_contexts",
        "file_contexts.homedirs",
        "file_contexts.subs_dist",
    ] {
        let from = Path::new(POLICY).join(f);
        if from.exists() {
            std::fs::copy(
                &from,
                root.join(&format!("/etc/selinux/default/contexts/files/{f}")),
            )
            .unwrap();
        }
    }
    std::fs::create_dir_all(root.join("/etc/untouched")).unwrap();
    record(state.path(), "data", "u-1", Some(b"k"), false, false);
    run_in(root.path(), state.path()).unwrap();
    for p in ["/etc/crypttab", "/etc/luks", "/etc/luks/data"] {
        let l = label(&root.join(p)).unwrap_or_default();
        assert!(l.contains(":object_r:"), "{p}: label {l:?}");
    }
    assert_eq!(label(&root.join("/etc/untouched")), None);
}
