//! Integration tests: Config parsing, validation and merging: the generated corpus
//! (tests/configs), merge properties, Ignition parity and the shared real-world corpus.
//!
//! One test binary (`cargo test --test config`); each file below is a module of it.

#[path = "../support/mod.rs"]
mod support;

mod corpus;
mod merge_props;
mod parity;
mod real_world_corpus;
