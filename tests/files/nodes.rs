//! Files, directories and links in a temporary target root: REFERENCE §4 rule by rule.

use crate::support;

use std::os::unix::fs::{MetadataExt, symlink};

use support::files::*;

fn cfg(storage: &str) -> spec::config::Config {
    config(&format!(
        r#"{{"ignition":{{"version":"3.6.0"}},"storage":{storage}}}"#
    ))
}

#[test]
#[ignore = "needs root: make test-root"]
fn creates_files_directories_and_links_with_modes() {
    must_be_root();
    let root = TempDir::new("basic");
    let c = cfg(&format!(
        r#"{{"files":[
            {{"path":"/etc/motd","contents":{{"source":"{}"}}}},
            {{"path":"/usr/local/bin/suid","mode":3565,"contents":{{"source":"data:,x"}}}},
            {{"path":"/empty"}}],
          "directories":[{{"path":"/var/lib/d","mode":448}}, {{"path":"/srv"}}],
          "links":[{{"path":"/etc/localtime","target":"../usr/share/zoneinfo/UTC"}}]}}"#,
        data_url(b"hello\n")
    ));
    run(&c, root.path()).unwrap();
    assert_eq!(std::fs::read(root.join("/etc/motd")).unwrap(), b"hello\n");
    assert_eq!(mode(&root.join("/etc/motd")), 0o644);
    assert_eq!(mode(&root.join("/etc")), 0o755, "implicit parents get 0755");
    assert_eq!(
        mode(&root.join("/usr/local/bin/suid")),
        0o6755,
        "setuid/setgid kept (3.6)"
    );
    assert_eq!(std::fs::read(root.join("/empty")).unwrap(), b"");
    assert_eq!(mode(&root.join("/var/lib/d")), 0o700);
    assert_eq!(mode(&root.join("/srv")), 0o755);
    assert_eq!(
        std::fs::read_link(root.join("/etc/localtime"))
            .unwrap()
            .to_str(),
        Some("../usr/share/zoneinfo/UTC"),
        "symlink targets are written verbatim"
    );
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(root.join("/etc"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("agent-tmp"))
        .collect();
    assert!(leftovers.is_empty());
    // The result file, where Ignition writes it and with its fields; the name earlier
    // releases used is a relative symlink to it.
    let res = root.join("/etc/.ignition-result.json");
    assert_eq!(mode(&res), 0o600);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&res).unwrap()).unwrap();
    assert!(v["provisioningDate"].as_str().unwrap().ends_with('Z'));
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(v["provisioningBootID"].as_str(), Some(boot_id.trim()));
    assert!(v.as_object().unwrap().contains_key("userConfigProvided"));
    assert!(v.get("previousReport").is_none());
    assert_eq!(
        std::fs::read_link(root.join("/etc/.agent-result.json"))
            .unwrap()
            .to_str(),
        Some(".ignition-result.json")
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn older_spec_masks_special_mode_bits() {
    must_be_root();
    let root = TempDir::new("oldmode");
    let c = config(
        r#"{"ignition":{"version":"3.5.0"},"storage":{"files":[{"path":"/f","mode":2541,"contents":{"source":"data:,x"}}]}}"#,
    );
    run(&c, root.path()).unwrap();
    assert_eq!(mode(&root.join("/f")), 0o755);
}

#[test]
#[ignore = "needs root: make test-root"]
fn parent_symlink_is_followed_inside_the_root() {
    must_be_root();
    let root = TempDir::new("parentlink");
    std::fs::create_dir_all(root.join("/real/etc")).unwrap();
    symlink("/real/etc", root.join("/etc")).unwrap();
    symlink("../../../../..", root.join("/up")).unwrap();
    let c = cfg(
        r#"{"files":[{"path":"/etc/hostname","contents":{"source":"data:,box"}},
                     {"path":"/up/up/escape","contents":{"source":"data:,no"}}]}"#,
    );
    run(&c, root.path()).unwrap();
    assert_eq!(
        std::fs::read(root.join("/real/etc/hostname")).unwrap(),
        b"box"
    );
    assert!(
        std::fs::symlink_metadata(root.join("/etc"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // `..` stops at the root: the file lands at <root>/escape, never outside.
    assert_eq!(std::fs::read(root.join("/escape")).unwrap(), b"no");
    assert!(!root.path().parent().unwrap().join("escape").exists());
    // The result file followed /etc too.
    assert!(root.join("/real/etc/.ignition-result.json").exists());
    assert!(root.join("/real/etc/.agent-result.json").exists());
}

#[test]
#[ignore = "needs root: make test-root"]
fn duplicates_resolving_to_the_same_place_are_an_error() {
    must_be_root();
    let root = TempDir::new("dups");
    std::fs::create_dir_all(root.join("/b")).unwrap();
    symlink("/b", root.join("/a")).unwrap();
    let c = cfg(
        r#"{"files":[{"path":"/a/x","contents":{"source":"data:,1"}},
                     {"path":"/b/x","contents":{"source":"data:,2"}}]}"#,
    );
    let e = format!("{:#}", run(&c, root.path()).unwrap_err());
    assert!(e.contains("/a/x") && e.contains("/b/x"), "{e}");
    assert!(!root.join("/b/x").exists(), "nothing written");
}

#[test]
#[ignore = "needs root: make test-root"]
fn overwrite_rules_for_every_kind_of_node() {
    must_be_root();
    let root = TempDir::new("overwrite");
    let r = |p: &str| root.join(p);
    std::fs::write(r("/keep"), "old").unwrap();
    std::fs::write(r("/target"), "target").unwrap();
    symlink("/target", r("/sym")).unwrap();
    std::fs::create_dir(r("/emptydir")).unwrap();
    std::fs::create_dir_all(r("/fulldir/sub")).unwrap();
    std::fs::write(r("/fulldir/sub/f"), "x").unwrap();
    std::fs::write(r("/wasfile"), "x").unwrap();
    std::fs::create_dir(r("/existingdir")).unwrap();
    symlink("/somewhere", r("/samelink")).unwrap();
    let c = cfg(r#"{"files":[
              {"path":"/keep","mode":384},
              {"path":"/sym","overwrite":true,"contents":{"source":"data:,new"}},
              {"path":"/emptydir","overwrite":true,"contents":{"source":"data:,was-empty-dir"}},
              {"path":"/fulldir","overwrite":true,"contents":{"source":"data:,was-full-dir"}}],
            "directories":[{"path":"/wasfile","overwrite":true},{"path":"/existingdir","mode":488}],
            "links":[{"path":"/samelink","target":"/somewhere"}]}"#);
    run(&c, root.path()).unwrap();
    assert_eq!(
        std::fs::read(r("/keep")).unwrap(),
        b"old",
        "no contents: only mode applies"
    );
    assert_eq!(mode(&r("/keep")), 0o600);
    assert!(
        std::fs::symlink_metadata(r("/sym")).unwrap().is_file(),
        "symlink replaced"
    );
    assert_eq!(std::fs::read(r("/sym")).unwrap(), b"new");
    assert_eq!(
        std::fs::read(r("/target")).unwrap(),
        b"target",
        "link target untouched"
    );
    assert_eq!(std::fs::read(r("/emptydir")).unwrap(), b"was-empty-dir");
    assert_eq!(std::fs::read(r("/fulldir")).unwrap(), b"was-full-dir");
    assert!(r("/wasfile").is_dir());
    assert_eq!(mode(&r("/existingdir")), 0o750);

    // overwrite false refuses every other existing node.
    for (existing, entry) in [
        (
            "/keep",
            r#"{"files":[{"path":"/keep","contents":{"source":"data:,x"}}]}"#,
        ),
        ("/sym", r#"{"directories":[{"path":"/sym"}]}"#),
        ("/wasfile", r#"{"files":[{"path":"/wasfile"}]}"#),
        (
            "/samelink",
            r#"{"links":[{"path":"/samelink","target":"/elsewhere"}]}"#,
        ),
        ("/target", r#"{"links":[{"path":"/target","target":"/x"}]}"#),
    ] {
        let e = format!("{:#}", run(&cfg(entry), root.path()).unwrap_err());
        assert!(
            e.contains("overwrite is false") && e.contains(existing),
            "{e}"
        );
    }
}

#[test]
#[ignore = "needs root: make test-root"]
fn append_creates_missing_files_and_appends_to_existing_ones() {
    must_be_root();
    let root = TempDir::new("append");
    std::fs::write(root.join("/log"), "one\n").unwrap();
    let c = cfg(r#"{"files":[
              {"path":"/new","append":[{"source":"data:,a"},{"source":"data:,b"}]},
              {"path":"/log","append":[{"source":"data:,two%0A"}]},
              {"path":"/both","contents":{"source":"data:,c"},"append":[{"source":"data:,d"}]}]}"#);
    run(&c, root.path()).unwrap();
    assert_eq!(std::fs::read(root.join("/new")).unwrap(), b"ab");
    assert_eq!(std::fs::read(root.join("/log")).unwrap(), b"one\ntwo\n");
    assert_eq!(std::fs::read(root.join("/both")).unwrap(), b"cd");
}

#[test]
#[ignore = "needs root: make test-root"]
fn compressed_and_hashed_contents() {
    must_be_root();
    let root = TempDir::new("hash");
    let big: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let c = cfg(&format!(
        r#"{{"files":[
            {{"path":"/a","contents":{{"source":"{}","compression":"gzip","verification":{{"hash":"{}"}}}}}},
            {{"path":"/b","contents":{{"source":"{}","verification":{{"hash":"{}"}}}},
              "append":[{{"source":"{}","compression":"gzip","verification":{{"hash":"{}"}}}}]}}]}}"#,
        data_url(&gzip(&big)),
        sha512(&big),
        data_url(b"plain"),
        sha256(b"plain"),
        data_url(&gzip(b"+more")),
        sha512(b"+more"),
    ));
    run(&c, root.path()).unwrap();
    assert_eq!(std::fs::read(root.join("/a")).unwrap(), big);
    assert_eq!(std::fs::read(root.join("/b")).unwrap(), b"plain+more");
}

#[test]
#[ignore = "needs root: make test-root"]
fn wrong_hash_writes_nothing() {
    must_be_root();
    let root = TempDir::new("badhash");
    std::fs::create_dir(root.join("/etc")).unwrap();
    std::fs::write(root.join("/etc/old"), "old").unwrap();
    let new = cfg(&format!(
        r#"{{"files":[{{"path":"/etc/new","contents":{{"source":"{}","compression":"gzip","verification":{{"hash":"{}"}}}}}}]}}"#,
        data_url(&gzip(b"real")),
        sha512(b"other"),
    ));
    let e = format!("{:#}", run(&new, root.path()).unwrap_err());
    assert!(e.contains("hash mismatch"), "{e}");
    assert!(!root.join("/etc/new").exists());
    // A bad append: the existing file is not replaced.
    let old = cfg(&format!(
        r#"{{"files":[{{"path":"/etc/old","overwrite":true,"contents":{{"source":"data:,x"}},
              "append":[{{"source":"data:,y","verification":{{"hash":"{}"}}}}]}}]}}"#,
        sha256(b"not y"),
    ));
    let e = format!("{:#}", run(&old, root.path()).unwrap_err());
    assert!(
        e.contains("hash mismatch") && e.contains("append[0]"),
        "{e}"
    );
    assert_eq!(std::fs::read(root.join("/etc/old")).unwrap(), b"old");
    let names: Vec<String> = std::fs::read_dir(root.join("/etc"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["old"], "no temporary file left");
}

#[test]
#[ignore = "needs root: make test-root"]
fn hard_links_come_last_and_may_point_at_dangling_symlinks() {
    must_be_root();
    let root = TempDir::new("hard");
    let c = cfg(
        r#"{"files":[{"path":"/data/f","contents":{"source":"data:,x"}}],
            "links":[
              {"path":"/a/hard","target":"/data/f","hard":true},
              {"path":"/h/dangle-hard","target":"/dangling","hard":true},
              {"path":"/dangling","target":"/does/not/exist"}]}"#,
    );
    run(&c, root.path()).unwrap();
    let f = std::fs::metadata(root.join("/data/f")).unwrap();
    let h = std::fs::metadata(root.join("/a/hard")).unwrap();
    assert_eq!(f.ino(), h.ino());
    let d = std::fs::symlink_metadata(root.join("/dangling")).unwrap();
    let dh = std::fs::symlink_metadata(root.join("/h/dangle-hard")).unwrap();
    assert!(dh.file_type().is_symlink());
    assert_eq!(d.ino(), dh.ino(), "a hard link to the symlink itself");
}

#[test]
#[ignore = "needs root: make test-root"]
fn owners_by_name_come_from_the_target_root() {
    must_be_root();
    let root = TempDir::new("owners");
    std::fs::create_dir(root.join("/etc")).unwrap();
    // Names that do not exist on the host, and "root" mapped to a different id than the host's.
    std::fs::write(
        root.join("/etc/passwd"),
        "root:x:0:0::/root:/bin/sh\nzed-agent-test:x:4242:4343::/home/zed:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(
        root.join("/etc/group"),
        "root:x:0:\nzgrp-agent-test:x:4343:\n",
    )
    .unwrap();
    let c = cfg(
        r#"{"files":[{"path":"/home/zed/f","user":{"name":"zed-agent-test"},"group":{"name":"zgrp-agent-test"},"mode":420,"contents":{"source":"data:,x"}},
                     {"path":"/byid","user":{"id":7},"group":{"id":8}}],
            "directories":[{"path":"/home/zed/d","user":{"name":"zed-agent-test"}}],
            "links":[{"path":"/home/zed/l","target":"f","user":{"name":"zed-agent-test"},"group":{"name":"zgrp-agent-test"}}]}"#,
    );
    run(&c, root.path()).unwrap();
    let m = std::fs::metadata(root.join("/home/zed/f")).unwrap();
    assert_eq!((m.uid(), m.gid()), (4242, 4343));
    assert_eq!(
        std::fs::metadata(root.join("/home/zed/d")).unwrap().uid(),
        4242
    );
    let l = std::fs::symlink_metadata(root.join("/home/zed/l")).unwrap();
    assert_eq!((l.uid(), l.gid()), (4242, 4343));
    let b = std::fs::metadata(root.join("/byid")).unwrap();
    assert_eq!((b.uid(), b.gid()), (7, 8));

    let missing = cfg(r#"{"files":[{"path":"/x","user":{"name":"nobody-agent-test"}}]}"#);
    let e = format!("{:#}", run(&missing, root.path()).unwrap_err());
    assert!(
        e.contains("nobody-agent-test") && e.contains("/etc/passwd"),
        "{e}"
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_second_run_nests_the_previous_report() {
    must_be_root();
    let root = TempDir::new("rerun");
    let state = TempDir::new("rerun-state");
    std::fs::write(
        state.join("fetch.json"),
        r#"{"userConfigProvided":true,"source":"test","platform":null,"configs":[]}"#,
    )
    .unwrap();
    let c = cfg(r#"{"files":[{"path":"/f"}]}"#);
    let ctx = ctx(root.path(), state.path());
    run_ctx(&c, &ctx).unwrap();
    run_ctx(&c, &ctx).unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("/etc/.ignition-result.json")).unwrap())
            .unwrap();
    assert_eq!(v["userConfigProvided"], serde_json::json!(true));
    assert_eq!(
        v["previousReport"]["userConfigProvided"],
        serde_json::json!(true)
    );
    assert!(v["previousReport"].get("previousReport").is_none());
}

#[test]
#[ignore = "needs root: make test-root"]
fn a_report_of_an_earlier_release_becomes_the_previous_report() {
    must_be_root();
    let root = TempDir::new("rerun-old");
    std::fs::create_dir(root.join("/etc")).unwrap();
    std::fs::write(
        root.join("/etc/.agent-result.json"),
        r#"{"provisioningDate":"2020-01-02T03:04:05Z","userConfigProvided":false}"#,
    )
    .unwrap();
    run(&cfg(r#"{"files":[{"path":"/f"}]}"#), root.path()).unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("/etc/.ignition-result.json")).unwrap())
            .unwrap();
    assert_eq!(
        v["previousReport"]["provisioningDate"],
        serde_json::json!("2020-01-02T03:04:05Z")
    );
    // The old name now points at the new report.
    assert_eq!(
        std::fs::read_link(root.join("/etc/.agent-result.json"))
            .unwrap()
            .to_str(),
        Some(".ignition-result.json")
    );
}

/// The uid/gid a config owner means in a root whose databases are `passwd`/`group` text.
fn expected_id(owner: &spec::config::types::NodeUser, db: &str) -> Option<u32> {
    if let Some(id) = owner.id {
        return Some(id as u32);
    }
    let name = owner.name.as_deref()?;
    db.lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f[0] == name)
        .map(|f| f[2].parse().unwrap())
}

#[test]
#[ignore = "needs root: make test-root"]
fn owners_set_by_the_config_are_never_left_at_root() {
    must_be_root();
    let root = TempDir::new("owners-all");
    std::fs::create_dir_all(root.join("/etc")).unwrap();
    let passwd_db = "root:x:0:0::/root:/bin/sh\numa-agent-test:x:4501:4601::/home/uma:/bin/sh\n\
                     vic-agent-test:x:4502:4602::/home/vic:/bin/sh\n";
    let group_db = "root:x:0:\nugrp-agent-test:x:4601:\nvgrp-agent-test:x:4602:\n";
    std::fs::write(root.join("/etc/passwd"), passwd_db).unwrap();
    std::fs::write(root.join("/etc/group"), group_db).unwrap();
    // Existing root-owned nodes that the config takes over in every way it can.
    std::fs::create_dir_all(root.join("/srv/kept-dir")).unwrap();
    std::fs::write(root.join("/srv/kept"), "old").unwrap();
    std::fs::write(root.join("/srv/appended"), "a").unwrap();
    std::fs::write(root.join("/srv/replaced"), "old").unwrap();
    let c = cfg(r#"{"files":[
              {"path":"/srv/new-by-id","user":{"id":4501},"group":{"id":4602},"contents":{"source":"data:,x"}},
              {"path":"/srv/new-by-name","user":{"name":"vic-agent-test"},"group":{"name":"ugrp-agent-test"}},
              {"path":"/srv/new-user-only","user":{"name":"uma-agent-test"}},
              {"path":"/srv/new-group-only","group":{"id":4602}},
              {"path":"/srv/kept","user":{"id":4502},"group":{"name":"vgrp-agent-test"}},
              {"path":"/srv/appended","user":{"name":"uma-agent-test"},"group":{"id":4601},"append":[{"source":"data:,b"}]},
              {"path":"/srv/replaced","overwrite":true,"user":{"id":4501},"group":{"name":"ugrp-agent-test"},"contents":{"source":"data:,new"}},
              {"path":"/srv/d/deep/file","user":{"name":"vic-agent-test"},"group":{"name":"vgrp-agent-test"}}],
            "directories":[
              {"path":"/srv/dir-by-name","user":{"name":"uma-agent-test"},"group":{"name":"vgrp-agent-test"}},
              {"path":"/srv/dir-by-id","user":{"id":4502},"group":{"id":4601},"mode":448},
              {"path":"/srv/kept-dir","user":{"id":4501},"group":{"id":4601}}],
            "links":[
              {"path":"/srv/link-by-name","target":"kept","user":{"name":"vic-agent-test"},"group":{"name":"vgrp-agent-test"}},
              {"path":"/srv/link-by-id","target":"/nowhere","user":{"id":4501},"group":{"id":4602}}]}"#);
    run(&c, root.path()).unwrap();
    let st = &c.storage;
    let nodes = st
        .files
        .iter()
        .map(|f| (&f.path, &f.user, &f.group))
        .chain(st.directories.iter().map(|d| (&d.path, &d.user, &d.group)))
        .chain(st.links.iter().map(|l| (&l.path, &l.user, &l.group)));
    let mut checked = 0;
    for (path, user, group) in nodes {
        let m = std::fs::symlink_metadata(root.join(path)).unwrap();
        // Unset owners are root's (new nodes) or unchanged (existing root-owned ones).
        let want_uid = expected_id(user, passwd_db).unwrap_or(0);
        let want_gid = expected_id(group, group_db).unwrap_or(0);
        assert_eq!((m.uid(), m.gid()), (want_uid, want_gid), "{path}");
        assert!(
            (user.id.is_none() && user.name.is_none()) || m.uid() != 0,
            "{path}: user left at root"
        );
        assert!(
            (group.id.is_none() && group.name.is_none()) || m.gid() != 0,
            "{path}: group left at root"
        );
        checked += 1;
    }
    assert_eq!(checked, 13);
    assert_eq!(std::fs::read(root.join("/srv/appended")).unwrap(), b"ab");
    // Implicit parents are root's, like Ignition's.
    assert_eq!(
        std::fs::metadata(root.join("/srv/d/deep")).unwrap().uid(),
        0
    );
}

#[test]
#[ignore = "needs root: make test-root"]
fn an_owner_id_chown_would_read_as_minus_one_is_refused() {
    must_be_root();
    let root = TempDir::new("owners-minus-one");
    std::fs::create_dir_all(root.join("/etc")).unwrap();
    std::fs::write(
        root.join("/etc/passwd"),
        "root:x:0:0::/root:/bin/sh\nminus-agent-test:x:4294967295:0::/:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(
        root.join("/etc/group"),
        "root:x:0:\nminus-agent-test:x:4294967295:\n",
    )
    .unwrap();
    // Validation rejects 4294967295; the files stage must refuse it on its own too rather
    // than leave the node owned by root. Each kind of node, user and group, by id and by name.
    let base = cfg(r#"{"files":[{"path":"/f","contents":{"source":"data:,x"}}],
            "directories":[{"path":"/d"}],
            "links":[{"path":"/l","target":"f"}]}"#);
    type Set = fn(&mut spec::config::Config, spec::config::types::NodeUser);
    let setters: [(&str, Set); 6] = [
        ("/f", |c, o| c.storage.files[0].user = o),
        ("/f", |c, o| c.storage.files[0].group = o),
        ("/d", |c, o| c.storage.directories[0].user = o),
        ("/d", |c, o| c.storage.directories[0].group = o),
        ("/l", |c, o| c.storage.links[0].user = o),
        ("/l", |c, o| c.storage.links[0].group = o),
    ];
    let owners = [
        spec::config::types::NodeUser {
            id: Some(4_294_967_295),
            name: None,
        },
        spec::config::types::NodeUser {
            id: None,
            name: Some("minus-agent-test".into()),
        },
    ];
    for (path, set) in setters {
        for o in &owners {
            let mut c = base.clone();
            set(&mut c, o.clone());
            let e = format!("{:#}", run(&c, root.path()).unwrap_err());
            assert!(
                e.contains(path) && e.contains("4294967295"),
                "{path} {o:?}: {e}"
            );
            assert!(
                std::fs::symlink_metadata(root.join(path)).is_err(),
                "{path} {o:?}: nothing written"
            );
            for p in ["/f", "/d", "/l"] {
                let _ = std::fs::remove_dir(root.join(p));
                let _ = std::fs::remove_file(root.join(p));
            }
        }
    }
}
