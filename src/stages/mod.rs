//! The provisioning stages, run in order: `fetch` (get and render the config), `disks`
//! (partitions, RAID, LUKS, filesystems) and `files` (the new root's contents).

pub mod disks;
pub mod fetch;
pub mod files;

use std::path::PathBuf;

use anyhow::Result;

/// Everything a stage needs besides the config.
#[derive(Debug, Clone)]
pub struct Context {
    pub root: PathBuf,
    pub state_dir: PathBuf,
    pub platform: Option<String>,
    pub config_file: Option<PathBuf>,
    pub config_url: Option<String>,
    /// System base configs (`base.d/`, `base.platform.d/<platform>/`).
    pub system_config_dir: PathBuf,
    /// Fail (with the neednet marker) instead of fetching anything over the network.
    pub offline: bool,
}

impl Context {
    /// Where the fetch stage leaves the rendered config for later stages.
    pub fn rendered_config(&self) -> PathBuf {
        self.state_dir.join("config.json")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Stage {
    Fetch,
    Disks,
    Files,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Fetch => "fetch",
            Stage::Disks => "disks",
            Stage::Files => "files",
        }
    }
}

/// Runs `stages` in the order given.
pub fn run(stages: &[Stage], ctx: &Context) -> Result<()> {
    for &stage in stages {
        crate::logging::set_stage(stage.name());
        match stage {
            Stage::Fetch => fetch::run(ctx)?,
            // The platform prepares the fetcher of every stage (the fetch stage: in its run).
            Stage::Disks => {
                crate::platform::prepare(ctx.platform.as_deref(), ctx.offline)?;
                disks::run(&load_rendered(ctx)?, ctx)?
            }
            Stage::Files => {
                crate::platform::prepare(ctx.platform.as_deref(), ctx.offline)?;
                files::run(&load_rendered(ctx)?, ctx)?
            }
        }
    }
    Ok(())
}

/// Reads the rendered config the fetch stage left in the state directory.
pub fn load_rendered(ctx: &Context) -> Result<crate::config::Config> {
    let path = ctx.rendered_config();
    let bytes = std::fs::read(&path).map_err(|e| {
        anyhow::anyhow!(
            "reading {}: {e} (run the fetch stage first)",
            path.display()
        )
    })?;
    crate::config::parse(&bytes)
        .map(|p| p.config)
        .map_err(|r| anyhow::anyhow!("rendered config {} is invalid:\n{r}", path.display()))
}
