//! Installing an OS image: `agent install` (image formats, verification, resume, refusals,
//! the first-boot copy) and the install disk chosen by what it is.

#[path = "../support/mod.rs"]
mod support;

mod image;
mod select;

use std::process::{Command, Stdio};

/// Runs the agent: (exit code, stdout, stderr).
fn agent(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
