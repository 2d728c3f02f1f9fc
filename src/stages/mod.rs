//! The provisioning stages, run in order: `fetch` (get and render the config), `disks`
//! (partitions, RAID, LUKS, filesystems) and `files` (the new root's contents). Each is a
//! function of the config and the [`Context`]; what one stage leaves for the next goes
//! through the state directory ([`crate::state`]).

pub mod disks;
pub mod fetch;
pub mod files;

use std::path::PathBuf;

use anyhow::Result;

use crate::config::Config;
use crate::endpoints::Endpoints;
use crate::limits::Limits;
use crate::state::StateDir;

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
    /// Memory limits and redirect policy of every fetch (flags and kernel arguments).
    pub limits: Limits,
    /// Where the services and files are, and the device time-out (built-in values, kernel
    /// arguments, flags); a stage fetches with them as its platform prepared them
    /// ([`Context::prepared`]).
    pub endpoints: Endpoints,
    /// Command-line settings of the files stage.
    pub files: files::Options,
}

impl Context {
    /// The state directory: what one stage leaves for the next (`crate::state`).
    pub fn state(&self) -> StateDir<'_> {
        StateDir::new(&self.state_dir)
    }

    /// Fetch options for what a stage fetches for `config`: its timeouts, proxy and CAs
    /// (`ignition.security.tls.certificateAuthorities`), and this run's [`Context::limits`] and
    /// [`Context::endpoints`]. The CAs are loaded here, so a stage calls this before it changes
    /// anything: a CA that cannot be had fails the stage with nothing done. In the rendered
    /// config the fetch stage left they are `data:` URLs (it fetched them once,
    /// [`crate::fetch::inline_cas`]), so the later stages need no network for them.
    pub fn fetch_options(&self, config: &Config) -> Result<crate::fetch::Options> {
        let base = crate::fetch::Options {
            limits: self.limits,
            endpoints: self.endpoints.clone(),
            ..Default::default()
        };
        crate::fetch::Options::from_config_with_cas(config, &base)
    }

    /// This context with its endpoints prepared by the platform
    /// ([`crate::platform::prepare`]), as every stage fetches with them.
    pub fn prepared(&self) -> Result<Context> {
        let mut c = self.clone();
        crate::platform::prepare(self.platform.as_deref(), self.offline, &mut c.endpoints)?;
        Ok(c)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        let r = (|| -> Result<()> {
            match stage {
                Stage::Fetch => fetch::run(ctx)?,
                // The platform prepares the fetcher of every stage (the fetch stage: in its run).
                Stage::Disks => {
                    let ctx = ctx.prepared()?;
                    disks::run(&ctx.state().read_rendered()?, &ctx)?;
                }
                Stage::Files => {
                    let ctx = ctx.prepared()?;
                    files::run(&ctx.state().read_rendered()?, &ctx)?
                }
            }
            Ok(())
        })();
        report_status(ctx, stage, r.as_ref().err());
        r?;
    }
    Ok(())
}

/// The platform's status hook after a stage ([`crate::platform::Provider::report_status`]),
/// as Ignition calls it after every stage: its failure is logged only. Offline (Ignition's
/// `fetch-offline`) nothing is sent.
fn report_status(ctx: &Context, stage: Stage, error: Option<&anyhow::Error>) {
    let Some(name) = ctx.platform.as_deref() else {
        return;
    };
    if ctx.offline {
        return;
    }
    let f = crate::fetch::Fetcher::new(crate::fetch::Options {
        limits: ctx.limits,
        endpoints: ctx.endpoints.clone(),
        ..Default::default()
    });
    let r = crate::platform::provider(name).and_then(|p| p.report_status(&f, stage.name(), error));
    if let Err(e) = r {
        log::error!(
            "posting the {} stage's status to platform {name}: {e:#}",
            stage.name()
        );
    }
}
