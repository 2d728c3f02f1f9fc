//! The disks stage. (Work in progress: see the disks stage issue.)

use anyhow::{Result, bail};

use super::Context;
use crate::config::Config;

pub fn run(_config: &Config, _ctx: &Context) -> Result<()> {
    bail!("the disks stage is not implemented yet")
}
