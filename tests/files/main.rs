//! Integration tests: The files stage on a temporary target root: nodes, users, systemd units,
//! mounts, LUKS records, SELinux labels, and a root that cannot be raced out of.
//!
//! One test binary (`cargo test --test files`); each file below is a module of it.

#[path = "../support/mod.rs"]
mod support;

mod luks;
mod mounts;
mod nodes;
mod passwd;
mod race;
mod selinux;
mod systemd;
