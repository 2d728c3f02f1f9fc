//! The shared real-world corpus (`../shared/corpus/`, 2,067 configs nobody on the project wrote,
//! each with the verdict of Ignition's own validator): its `check.py` runs this build's binary on
//! every entry (validate, offline fetch, files stage into a scratch root) and must end
//! `0 failed`. The corpus is not part of the repository: the test is ignored unless asked for
//! (`make test-root` asks, and leaves it out by name where the corpus is absent; see the
//! Makefile), and run without the corpus it fails, naming what is missing.

use crate::support;

use std::path::Path;
use std::process::Command;

use support::root::must_be_root;

#[test]
#[ignore = "needs root and ../shared/corpus: make test-root"]
fn shared_corpus_has_no_failures() {
    must_be_root();
    let check = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/check.py");
    assert!(
        check.exists(),
        "{} is absent: this check needs the shared corpus beside the repository",
        check.display()
    );
    let out = Command::new("python3")
        .arg(&check)
        .args(["--agent", env!("CARGO_BIN_EXE_agent"), "--jobs", "2"])
        .output()
        .expect("running python3 check.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(
        last.ends_with(" 0 failed") && out.status.success(),
        "check.py: {last}\n{stdout}\n{stderr}"
    );
}
