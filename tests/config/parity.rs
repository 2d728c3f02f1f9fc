//! Ignition parity for config rules that reach past validation (issue 16): `"source": ""` is an
//! empty file (also over an existing link, as Ignition's `links.sym.writeover` cases do), and a
//! tang entry that carries its advertisement does not make the offline pass ask for the network.

use crate::support;

use support::root::must_be_root;
use support::{TempDir, run_agent};

#[test]
#[ignore = "needs root: make test-root"]
fn empty_source_writes_an_empty_file_over_a_link() {
    must_be_root();
    let t = TempDir::new("parity-empty-source");
    let root = t.join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    std::fs::write(root.join("etc/target"), "keep me\n").unwrap();
    std::os::unix::fs::symlink("/etc/target", root.join("etc/link")).unwrap();
    let cfg = t.join("config.ign");
    std::fs::write(
        &cfg,
        r#"{"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/link", "overwrite": true, "contents": {"source": ""}},
            {"path": "/etc/appended", "append": [{"source": ""}, {"source": "data:,x"}]},
            {"path": "/etc/hashed", "contents": {"source": "", "verification": {"hash": "sha256-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}}
        ]}}"#,
    )
    .unwrap();
    let state = t.join("state");
    let sys = t.join("sys");
    std::fs::create_dir_all(&sys).unwrap();
    // The fetch and files stages on the config file, into the root.
    let provision = || {
        run_agent(
            &[
                "run",
                "--stage",
                "fetch",
                "--stage",
                "files",
                "--root",
                root.to_str().unwrap(),
                "--config-file",
                cfg.to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
                "--system-config-dir",
                sys.to_str().unwrap(),
            ],
            None,
        )
    };
    let (rc, err) = provision();
    assert_eq!(rc, 0, "{err}");
    let link = root.join("etc/link");
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.is_file(), "the link was replaced by a regular file");
    assert_eq!(meta.len(), 0);
    assert_eq!(
        std::fs::read_to_string(root.join("etc/target")).unwrap(),
        "keep me\n",
        "the link's target is untouched"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/appended")).unwrap(),
        "x"
    );
    assert_eq!(std::fs::metadata(root.join("etc/hashed")).unwrap().len(), 0);

    // A hash that is not the hash of nothing fails, and writes nothing.
    std::fs::write(
        &cfg,
        r#"{"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/badhash", "contents": {"source": "", "verification": {"hash": "sha256-0000000000000000000000000000000000000000000000000000000000000000"}}}
        ]}}"#,
    )
    .unwrap();
    let (rc, err) = provision();
    assert_ne!(rc, 0, "a wrong hash of empty contents must fail");
    assert!(err.contains("hash"), "{err}");
    assert!(!root.join("etc/badhash").exists());
}

#[test]
fn tang_with_advertisement_needs_no_network_offline() {
    let t = TempDir::new("parity-tang-offline");
    let sys = t.join("sys");
    std::fs::create_dir_all(&sys).unwrap();
    let run = |tang: &str| {
        let cfg = t.join("c.ign");
        std::fs::write(
            &cfg,
            format!(
                r#"{{"ignition": {{"version": "3.4.0"}}, "storage": {{"luks": [{{"name": "root",
                "device": "/dev/disk/by-partlabel/root", "clevis": {{"tang": [{tang}]}}}}]}}}}"#
            ),
        )
        .unwrap();
        let state = t.join(&format!("state-{}", tang.len()));
        run_agent(
            &[
                "run",
                "--stage",
                "fetch",
                "--offline",
                "--config-file",
                cfg.to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
                "--system-config-dir",
                sys.to_str().unwrap(),
            ],
            None,
        )
    };
    let adv = r#"{"url": "http://tang.example.com", "thumbprint": "x", "advertisement": "{\"payload\": \"e30\", \"protected\": \"e30\", \"signature\": \"AA\"}"}"#;
    let (rc, err) = run(adv);
    assert_eq!(rc, 0, "with an advertisement: {err}");
    let (rc, err) = run(r#"{"url": "http://tang.example.com", "thumbprint": "x"}"#);
    assert_eq!(
        rc, 3,
        "without an advertisement the offline pass asks for the network: {err}"
    );
}
