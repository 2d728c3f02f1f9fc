//! Integration tests: `agent butane`: the command line, local files, the shared corpus and the
//! comparison with real Butane (tests/butane_diff).
//!
//! One test binary (`cargo test --test butane`); each file below is a module of it.

mod cli;
mod corpus;
mod diff;
mod local;
