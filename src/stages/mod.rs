//! The provisioning stages, run in order: `fetch` (get and render the config), `disks`
//! (partitions, RAID, LUKS, filesystems) and `files` (the new root's contents). Each is a
//! function of the config and the [`Context`]; what one stage leaves for the next goes
//! through the state directory ([`crate::state`]).

pub mod context;
pub mod disks;
pub mod fetch;
pub mod files;

pub use context::{Context, FilesOptions, ReportStep, Stage};

use std::time::Instant;

use anyhow::Result;

use crate::report::{self, Changes, Delivered, Outcome, ReportStage, StageOutcome};

/// Runs `stages` in the order given. The log is kept in `<state-dir>/agent.log` too; after
/// each stage a report goes to the report URL if there is one (`crate::report`,
/// docs/reports.md; offline, it is queued for the next stage), and a failed stage prints its
/// summary on the console.
pub fn run(stages: &[Stage], ctx: &Context) -> Result<()> {
    let state = ctx.state();
    if state.create().is_ok()
        && let Err(e) = runtime::logging::tee_to(&state.log_path())
    {
        log::warn!("keeping the log in {}: {e}", state.log_path().display());
    }
    let cmdline = runtime::cmdline::read(&ctx.endpoints.kernel_cmdline).unwrap_or_default();
    let target = || report::target(&state, &cmdline, &ctx.endpoints, ctx.limits);
    for (i, &stage) in stages.iter().enumerate() {
        runtime::logging::set_stage(stage.name());
        // The initramfs runs one stage per unit: a run of fetch or disks alone is a part of
        // the boot, not its end; the files stage, or the last of several, ends it.
        let final_ = i + 1 == stages.len() && (stage == Stage::Files || stages.len() > 1);
        let t0 = Instant::now();
        let karg = runtime::cmdline::value(&cmdline, report::KARG_REPORT_URL);
        if stage == Stage::Fetch && !ctx.offline && karg.is_some_and(|u| !u.is_empty()) {
            // Only agent.report.url is known before the fetch.
            if let Some(t) = target() {
                let o = outcome(
                    ctx,
                    stage,
                    StageOutcome::Started,
                    false,
                    t0,
                    Changes::default(),
                    None,
                );
                report::deliver(&t, &state, &report::build(&t, o));
            }
        }
        // The files stage sends its own report while the new root is mounted.
        let files_target = if stage == Stage::Files {
            target()
        } else {
            None
        };
        let files_reports = files_target.is_some();
        let r = (|| -> Result<Changes> {
            Ok(match stage {
                Stage::Fetch => {
                    fetch::run(ctx)?;
                    Changes::default()
                }
                // The platform prepares the fetcher of every stage (the fetch stage: in its run).
                Stage::Disks => {
                    let ctx = ctx.prepared()?;
                    disks::run(&ctx.state().read_rendered()?, &ctx)?.changes
                }
                Stage::Files => {
                    let mut ctx = ctx.prepared()?;
                    ctx.files.report = files_target.map(|target| ReportStep {
                        target,
                        final_,
                        started: t0,
                    });
                    files::run(&ctx.state().read_rendered()?, &ctx)?;
                    Changes::default()
                }
            })
        })();
        report_status(ctx, stage, r.as_ref().err());
        match &r {
            Ok(_) if files_reports => {}
            Ok(changes) => {
                if let Some(t) = target() {
                    let o = outcome(
                        ctx,
                        stage,
                        StageOutcome::Ok,
                        final_,
                        t0,
                        changes.clone(),
                        None,
                    );
                    let r = report::build(&t, o);
                    if ctx.offline {
                        // No network to send it with: the next stage sends it.
                        if let Err(e) = report::queue::push(&state.reports_dir(), &t, &r) {
                            log::warn!("queueing the {} report: {e:#}", stage.name());
                        }
                    } else {
                        report::deliver(&t, &state, &r);
                    }
                }
            }
            // The offline pass that needs the network has not failed: the online pass follows.
            Err(e) if e.downcast_ref::<crate::fetch::NeedsNetwork>().is_some() => {}
            Err(e) => {
                let sent = match target() {
                    Some(t) => {
                        let o = outcome(
                            ctx,
                            stage,
                            StageOutcome::Failed,
                            final_,
                            t0,
                            Changes::default(),
                            Some(e),
                        );
                        let url = report::redact::url(&t.url);
                        match report::deliver(&t, &state, &report::build(&t, o)) {
                            Delivered::Sent => format!("sent to {url}"),
                            Delivered::Queued(d) => format!("queued in {} for {url}", d.display()),
                            Delivered::Refused => format!("not taken by {url} (see the log)"),
                        }
                    }
                    None => "none (no report URL: agent.report.url= or the config server's)".into(),
                };
                let lines = report::summary::lines(stage.name(), e, &state.log_path(), &sent);
                report::summary::print(&lines, runtime::logging::kmsg());
            }
        }
        r?;
    }
    Ok(())
}

fn outcome<'a>(
    ctx: &'a Context,
    stage: Stage,
    outcome: StageOutcome,
    final_: bool,
    t0: Instant,
    changes: Changes,
    error: Option<&'a anyhow::Error>,
) -> Outcome<'a> {
    Outcome {
        stage: match stage {
            Stage::Fetch => ReportStage::Fetch,
            Stage::Disks => ReportStage::Disks,
            Stage::Files => ReportStage::Files,
        },
        outcome,
        final_,
        duration: t0.elapsed(),
        changes,
        error,
        platform: ctx.platform.as_deref(),
    }
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
