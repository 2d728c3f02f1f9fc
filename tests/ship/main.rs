//! Integration tests: What ships: the OCI image, `make install` and the Debian package, deploy/ as
//! an operator applies it.
//!
//! One test binary (`cargo test --test ship`); each file below is a module of it.

#[path = "../support/mod.rs"]
mod support;

mod deploy;
mod image;
mod package;
