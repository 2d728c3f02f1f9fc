//! Mounting config filesystems under the root (real ext4 on loop devices), confinement of
//! symlinks to a non-root filesystem, and unmounting also on failure.

use crate::support;

use std::os::unix::fs::symlink;

use support::files::*;

fn fs_cfg(dev: &str, path: &str, opts: &str, storage_rest: &str) -> spec::config::Config {
    config(&format!(
        r#"{{"ignition":{{"version":"3.6.0"}},"storage":{{
            "filesystems":[{{"device":"{dev}","format":"ext4","path":"{path}","mountOptions":[{opts}]}}]
            {storage_rest}}}}}"#
    ))
}

#[test]
#[ignore = "needs root: make test-root"]
fn writes_onto_a_mounted_filesystem_and_unmounts() {
    must_be_root();
    let seed = TempDir::new("seed");
    std::fs::create_dir_all(seed.join("/lib")).unwrap();
    symlink("/var/lib", seed.join("/abs-inside")).unwrap();
    let lo = Loop::ext4(16, Some(seed.path()));
    let root = TempDir::new("mroot");
    let c = fs_cfg(
        &lo.dev,
        "/var",
        r#""noatime","commit=30""#,
        r#","files":[{"path":"/var/lib/app/conf","contents":{"source":"data:,on-var"}},
                     {"path":"/var/abs-inside/x","contents":{"source":"data:,x"}},
                     {"path":"/etc/on-root","contents":{"source":"data:,r"}}]"#,
    );
    run(&c, root.path()).unwrap();
    assert!(
        !mounted_under(root.path()),
        "everything unmounted at the end"
    );
    assert!(root.join("/etc/on-root").exists());
    assert!(
        !root.join("/var/lib/app/conf").exists(),
        "written on the filesystem, not on the root"
    );
    let check = TempDir::new("check");
    let _m = TestMount::new(&lo.dev, check.path());
    assert_eq!(
        std::fs::read(check.join("/lib/app/conf")).unwrap(),
        b"on-var"
    );
    assert_eq!(std::fs::read(check.join("/lib/x")).unwrap(), b"x");
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_link_leaving_a_non_root_filesystem_fails_and_still_unmounts() {
    must_be_root();
    let seed = TempDir::new("seed2");
    symlink("/etc", seed.join("/out-abs")).unwrap();
    symlink("../etc", seed.join("/out-rel")).unwrap();
    let lo = Loop::ext4(16, Some(seed.path()));
    let root = TempDir::new("mroot2");
    std::fs::create_dir(root.join("/etc")).unwrap();
    for target in ["/var/out-abs/x", "/var/out-rel/x"] {
        let c = fs_cfg(
            &lo.dev,
            "/var",
            "",
            &format!(r#","files":[{{"path":"{target}","contents":{{"source":"data:,x"}}}}]"#),
        );
        let e = format!("{:#}", run(&c, root.path()).unwrap_err());
        assert!(
            e.contains("leaves the filesystem mounted at /var"),
            "{target}: {e}"
        );
        assert!(!mounted_under(root.path()), "unmounted after the failure");
        assert!(!root.join("/etc/x").exists());
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_mount_path_through_a_symlink_or_a_file_is_an_error() {
    must_be_root();
    let lo = Loop::ext4(16, None);
    let root = TempDir::new("mroot3");
    std::fs::create_dir(root.join("/real")).unwrap();
    symlink("/real", root.join("/mnt")).unwrap();
    std::fs::write(root.join("/file"), "").unwrap();
    for path in ["/mnt/data", "/file/data"] {
        let c = fs_cfg(&lo.dev, path, "", "");
        let e = format!("{:#}", run(&c, root.path()).unwrap_err());
        assert!(e.contains("not a directory"), "{path}: {e}");
        assert!(!mounted_under(root.path()));
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn nested_mounts_shallowest_first() {
    must_be_root();
    let outer = Loop::ext4(16, None);
    let inner = Loop::ext4(16, None);
    let root = TempDir::new("nested");
    let c = config(&format!(
        r#"{{"ignition":{{"version":"3.6.0"}},"storage":{{
            "filesystems":[
              {{"device":"{}","format":"ext4","path":"/var/lib"}},
              {{"device":"{}","format":"ext4","path":"/var"}}],
            "files":[{{"path":"/var/lib/f","contents":{{"source":"data:,inner"}}}},
                     {{"path":"/var/g","contents":{{"source":"data:,outer"}}}}]}}}}"#,
        inner.dev, outer.dev
    ));
    run(&c, root.path()).unwrap();
    assert!(!mounted_under(root.path()));
    let check = TempDir::new("check2");
    {
        let _m = TestMount::new(&inner.dev, check.path());
        assert_eq!(std::fs::read(check.join("/f")).unwrap(), b"inner");
    }
    let _m = TestMount::new(&outer.dev, check.path());
    assert_eq!(std::fs::read(check.join("/g")).unwrap(), b"outer");
    assert!(
        check.join("/lib").is_dir(),
        "mount point made on the outer filesystem"
    );
}

/// A directory above a mount point swapped for a link to a directory outside the root (that
/// has a mount of its own at the same name) after the stage mounted: unmounting goes through
/// the descriptor of the mount point's parent, so the stage unmounts its own filesystem and
/// never the outside one (unmounting by host path would follow the link).
#[test]
#[ignore = "needs root: make test-root"]
fn unmounting_follows_no_link_swapped_in_after_mounting() {
    must_be_root();
    let root = TempDir::new("mswap");
    let outside = TempDir::new("mswap-outside");
    std::fs::create_dir_all(outside.join("/m")).unwrap();
    let outside_m = outside.join("/m");
    runtime::util::run(
        "mount",
        &["-t", "tmpfs", "tmpfs", outside_m.to_str().unwrap()],
    )
    .unwrap();
    let _outside_mount = TestMount(outside_m.clone());
    let mut r = agent::files::resolve::Root::open(root.path(), &["/a/m".into()]).unwrap();
    let fs = spec::config::types::Filesystem {
        device: "tmpfs".into(),
        format: Some("tmpfs".into()),
        path: Some("/a/m".into()),
        ..Default::default()
    };
    let g = agent::files::mounts::MountGuard::mount_all(&mut r, &[fs]).unwrap();
    assert!(mounted_under(&root.join("/a/m")));
    std::fs::rename(root.join("/a"), root.join("/a2")).unwrap();
    symlink(outside.path(), root.join("/a")).unwrap();
    g.close().unwrap();
    assert!(
        mounted_under(&outside_m),
        "the outside mount was unmounted through the swapped link"
    );
    assert!(
        !mounted_under(&root.join("/a2/m")),
        "the stage's own mount is gone"
    );
}

/// A filesystem mounted on the root itself: what the stage writes afterwards lands in that
/// filesystem (the root is opened again), not in the directory hidden under the mount.
#[test]
#[ignore = "needs root: make test-root"]
fn writes_after_mounting_on_the_root_land_in_that_filesystem() {
    must_be_root();
    let root = TempDir::new("mroot");
    let mut r = agent::files::resolve::Root::open(root.path(), &["/".into()]).unwrap();
    let fs = spec::config::types::Filesystem {
        device: "tmpfs".into(),
        format: Some("tmpfs".into()),
        path: Some("/".into()),
        ..Default::default()
    };
    let g = agent::files::mounts::MountGuard::mount_all(&mut r, &[fs]).unwrap();
    assert!(mounted_under(root.path()));
    r.open_dir(&["etc".into()], true, &mut Vec::new())
        .unwrap()
        .unwrap();
    assert!(
        root.join("/etc").is_dir(),
        "/etc was made under the mount, not in the mounted filesystem"
    );
    // The root's descriptor is now inside the mount (as the stage's writer, dropped before
    // the stage unmounts).
    drop(r);
    g.close().unwrap();
    assert!(!root.join("/etc").exists(), "/etc was in the tmpfs");
}
