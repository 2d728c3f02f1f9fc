//! The pure layer of the agent (see ARCHITECTURE.md): Ignition spec 3.x configs as data.
//!
//! - [`json`]: a JSON parser that keeps byte offsets (line/column in errors), rejects duplicate
//!   keys and bounds nesting;
//! - [`encoding`]: hex, base64 and `data:` URLs, one copy each;
//! - [`config`]: the model (each field declared once), decoding, validation, merging and the
//!   spec-version table.
//!
//! Nothing here does I/O: no files, no network, no processes, no clock. The agent, the config
//! server, the fuzzers and (later) the Butane translator all use this crate.

// Outside tests a failure carries context (anyhow) instead of a panic; see clippy.toml.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod config;
pub mod encoding;
pub mod json;
pub mod work;
