// Outside tests a failure carries context (anyhow) instead of a panic; see clippy.toml.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

use clap::Parser;

fn main() {
    let cli = agent::cli::Cli::parse();
    std::process::exit(agent::cli::dispatch(cli));
}
