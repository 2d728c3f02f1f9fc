//! The process support shared by the provisioning agent and the config server: the one
//! subprocess wrapper and atomic writes (`util`), the logger (`logging`), the limits on what
//! is read into memory (`limits`), the kernel command line (`cmdline`), signal-time clean-up
//! of temporary files (`signals`), and Butane's `--files-dir` reader (`butane_files`).
//!
//! It knows nothing of disks, platforms or the server: both sides build on it, neither is
//! reachable from it.

// Outside tests a failure carries context (anyhow) instead of a panic; see clippy.toml.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod butane_files;
pub mod cmdline;
pub mod limits;
pub mod logging;
pub mod signals;
pub mod util;
