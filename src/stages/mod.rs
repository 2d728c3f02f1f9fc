//! The provisioning stages, run in order: `fetch` (get and render the config), `disks`
//! (partitions, RAID, LUKS, filesystems) and `files` (the new root's contents). Each is a
//! function of the config and the [`Context`]; what one stage leaves for the next goes
//! through the state directory ([`crate::state`]).

pub mod context;
pub mod disks;
pub mod fetch;
pub mod files;

pub use context::{Context, FilesOptions, Stage};

use anyhow::Result;

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
