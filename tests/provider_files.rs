//! Files a platform's provider leaves for the target root (Ignition's provider output files:
//! Hyper-V's KVP pool files): the fetch stage records them in the state directory
//! (`tests/fetch_stage.rs` checks that with the test-dummy platform), the files stage writes
//! them here.

mod support;

use agent::platform::hyperv::{Item, pool_files};
use agent::state::StateDir;
use support::files::*;

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
    agent::stages::files::run_with(&c, &ctx(root.path(), state.path()), &Default::default())
        .unwrap();
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
    agent::stages::files::run_with(&c, &ctx(root.path(), state.path()), &Default::default())
        .unwrap();
    assert!(!root.join("/var/lib/hyperv").exists());
}
