//! Integration tests: Fetching configs and resources: the HTTP fetcher, real servers (HTTPS, TFTP,
//! S3), the fetch stage through the binary, the config's CAs in every stage, hostile servers.
//!
//! One test binary (`cargo test --test fetch`); each file below is a module of it.

#[path = "../support/mod.rs"]
mod support;

mod cas_stages;
mod compat;
mod hardening;
mod http;
mod remote;
mod stage;
