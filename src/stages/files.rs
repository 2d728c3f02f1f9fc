//! The files stage. (Work in progress: see the files stage issue.)

use anyhow::{Result, bail};

use super::Context;
use crate::config::Config;

pub fn run(_config: &Config, _ctx: &Context) -> Result<()> {
    bail!("the files stage is not implemented yet")
}
