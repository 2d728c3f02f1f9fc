//! agent: a first-boot provisioning agent for Linux machines (Ignition spec 3.x configs) and
//! the config server that hands each booting machine its pool's config.

// Outside tests a failure carries context (anyhow) instead of a panic; see clippy.toml.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod blockdev;
pub mod cli;
pub mod endpoints;
pub mod fetch;
pub mod files;
pub mod install;
pub mod metadata;
pub mod mounts;
pub mod network;
pub mod platform;
pub mod report;
pub mod stages;
pub mod state;
