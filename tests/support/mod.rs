//! The one test-support module. The integration tests are one binary per area
//! (`tests/<area>/main.rs`, its files modules of it: `cargo test --test serve boot::`); each
//! area's main.rs has `#[path = "../support/mod.rs"] mod support;` and its files take what
//! they need from here (`use crate::support;`).
//! - [`tmp`]: [`TempDir`], [`mounted_under`];
//! - [`root`]: what the tests that need root share: [`root::must_be_root`], [`root::Loop`];
//! - [`fetch`], [`faulty_http`]: daemons, TFTP, the fault-injecting HTTP(S) server;
//! - [`pki`]: every test certificate (a CA and its leaves, self-signed ones);
//! - [`files`]: running the files stage on a temporary root, data URLs, hashes;
//! - [`netns`]: a network namespace of the test's own, for servers on a platform's real address;
//! - [`serve`]: an `agent serve` child, a raw HTTP/1.1 client, TLS;
//! - [`browser`]: headless Chromium for the server's web page;
//! - [`openapi`]: answers checked against docs/openapi.json's schemas.
//!
//! Tests that need root are `#[ignore = "needs root: make test-root"]`: `cargo test` (and
//! `make test-pure`) runs the rest as any user; `make test-root` runs only them and
//! `make test` (as root) runs everything. As non-root they fail at their guard, never skip.
//! The checks against the shared corpus (`../shared/corpus`, outside the repository) are
//! `#[ignore]`d with a reason the same way: without the corpus they fail, never pass, and
//! `make test` leaves them out by name (fails in CI); see the Makefile.

// Each area uses only part of it.
#![allow(dead_code, unused_imports)]

pub mod browser;
pub mod faulty_http;
pub mod fetch;
pub mod files;
pub mod netns;
pub mod openapi;
pub mod pki;
pub mod root;
pub mod serve;
pub mod tmp;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

pub use tmp::{TempDir, mounted_under};

/// Fails with a clear message when `tool` (a program on PATH, or an absolute path) is missing;
/// `list` is the `.ci/packages/` file that installs it.
pub fn need(tool: &str, list: &str) {
    assert!(
        (tool.starts_with('/') && Path::new(tool).exists()) || runtime::util::have_program(tool),
        "{tool} is missing: install the packages in .ci/packages/{list}"
    );
}

/// Runs `program args` with `stdin` (or nothing) on its standard input; fails the test with
/// its stderr unless it succeeds; returns its stdout.
pub fn sh(program: &str, args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {program}: {e} (see .ci/packages/*.apt)"));
    if let Some(b) = stdin {
        child.stdin.take().unwrap().write_all(b).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the agent binary with `args` and `stdin` (empty if none); returns (exit code, stderr).
pub fn run_agent(args: &[&str], stdin: Option<&[u8]>) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running agent");
    let input = stdin.unwrap_or(b"").to_vec();
    let mut pipe = child.stdin.take().unwrap();
    // A writer thread: the agent may stop reading (and exit) before taking all of it.
    std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
