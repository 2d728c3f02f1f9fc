//! Integration tests: The platforms: HTTP metadata services (in network namespaces), config drives
//! on loop devices, hypervisor channels, the metadata client, and the waits without end.
//!
//! One test binary (`cargo test --test platform`); each file below is a module of it.

#[path = "../support/mod.rs"]
mod support;

mod channels;
mod drives;
mod http;
mod metadata;
mod waits;
