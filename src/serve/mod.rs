//! `agent serve`: the machine config server. (Work in progress: see the serve issue.)

use anyhow::{Result, bail};
use clap::Args;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Config source directory (pools/, tokens/).
    #[arg(long)]
    pub source: std::path::PathBuf,
}

pub fn main(_args: ServeArgs) -> Result<()> {
    bail!("agent serve is not implemented yet")
}
