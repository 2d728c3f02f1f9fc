//! The provisioning stages, run in order: `fetch` (get and render the config), `disks`
//! (partitions, RAID, LUKS, filesystems) and `files` (the new root's contents). Each is one
//! function, `run(input, &Context, &mut dyn Reporter) -> Result<Outcome>`: its input (the
//! config sources, or the rendered config), the [`Context`], and the [`Reporter`] it tells
//! when its work is done; what one stage leaves for the next goes through the state
//! directory ([`crate::state`]).

pub mod context;
pub mod disks;
pub mod fetch;
pub mod files;

pub use context::{Context, FilesOptions, NoReports, Outcome, Reporter, Stage};

use std::time::Instant;

use anyhow::Result;

use crate::report::{self, Changes, Delivered, ReportStage, StageOutcome, Target};

/// Runs `stages` in the order given, the fetch stage from `sources`, the others on the
/// rendered config it left; stops at the first that fails or needs the network. The log is
/// kept in `<state-dir>/agent.log` too; each stage's report goes to the report URL if there
/// is one (`crate::report`, docs/reports.md; offline, it is queued for the next stage)
/// through the [`Reporter`] it is given, and a failed stage prints its summary on the
/// console.
pub fn run(stages: &[Stage], sources: &fetch::Sources, ctx: &Context) -> Result<Outcome> {
    let state = ctx.state();
    if state.create().is_ok()
        && let Err(e) = runtime::logging::tee_to(&state.log_path())
    {
        log::warn!("keeping the log in {}: {e}", state.log_path().display());
    }
    let cmdline = runtime::cmdline::read(&ctx.endpoints.kernel_cmdline).unwrap_or_default();
    for (i, &stage) in stages.iter().enumerate() {
        runtime::logging::set_stage(stage.name());
        let mut reporter = StageReporter {
            ctx,
            cmdline: &cmdline,
            stage,
            // The initramfs runs one stage per unit: a run of fetch or disks alone is a part
            // of the boot, not its end; the files stage, or the last of several, ends it.
            final_: i + 1 == stages.len() && (stage == Stage::Files || stages.len() > 1),
            started: Instant::now(),
        };
        let karg = runtime::cmdline::value(&cmdline, report::KARG_REPORT_URL);
        if stage == Stage::Fetch && !ctx.offline && karg.is_some_and(|u| !u.is_empty()) {
            // Only agent.report.url is known before the fetch.
            reporter.started_report();
        }
        let r = match stage {
            Stage::Fetch => fetch::run(sources, ctx, &mut reporter),
            // The platform prepares the fetcher of every stage (the fetch stage: in its run).
            Stage::Disks => ctx
                .prepared()
                .and_then(|ctx| disks::run(&ctx.state().read_rendered()?, &ctx, &mut reporter)),
            Stage::Files => ctx
                .prepared()
                .and_then(|ctx| files::run(&ctx.state().read_rendered()?, &ctx, &mut reporter)),
        };
        report_status(ctx, stage, r.as_ref().err());
        match r {
            Ok(Outcome::Done) => {}
            // The offline pass that needs the network has not failed: the online pass follows.
            Ok(needs @ Outcome::NeedsNetwork(_)) => return Ok(needs),
            Err(e) => {
                reporter.failed(&e);
                return Err(e);
            }
        }
    }
    Ok(Outcome::Done)
}

/// The runner's [`Reporter`] of one stage: the report target is looked up when a report is
/// made (the fetch stage leaves what it is made of in the state directory).
struct StageReporter<'a> {
    ctx: &'a Context,
    cmdline: &'a str,
    stage: Stage,
    final_: bool,
    started: Instant,
}

impl StageReporter<'_> {
    fn report_target(&self) -> Option<Target> {
        let c = self.ctx;
        report::target(&c.state(), self.cmdline, &c.endpoints, c.limits)
    }

    /// The fetch stage's "started" report (before anything is fetched).
    fn started_report(&self) {
        if let Some(t) = self.report_target() {
            let o = self.outcome(StageOutcome::Started, false, Changes::default(), None);
            report::deliver(&t, &self.ctx.state(), &report::build(&t, o));
        }
    }

    /// A failed stage: its report (sent or queued) and the console summary naming where it went.
    fn failed(&self, e: &anyhow::Error) {
        let state = self.ctx.state();
        let sent = match self.report_target() {
            Some(t) => {
                let o = self.outcome(
                    StageOutcome::Failed,
                    self.final_,
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
        let lines = report::summary::lines(self.stage.name(), e, &state.log_path(), &sent);
        report::summary::print(&lines, runtime::logging::kmsg());
    }

    fn outcome<'e>(
        &'e self,
        outcome: StageOutcome,
        final_: bool,
        changes: Changes,
        error: Option<&'e anyhow::Error>,
    ) -> report::Outcome<'e> {
        report::Outcome {
            stage: match self.stage {
                Stage::Fetch => ReportStage::Fetch,
                Stage::Disks => ReportStage::Disks,
                Stage::Files => ReportStage::Files,
            },
            outcome,
            final_,
            duration: self.started.elapsed(),
            changes,
            error,
            platform: self.ctx.platform.as_deref(),
        }
    }
}

impl Reporter for StageReporter<'_> {
    fn done(&mut self, changes: Changes) -> Option<Delivered> {
        let t = self.report_target()?;
        let state = self.ctx.state();
        let o = self.outcome(StageOutcome::Ok, self.final_, changes, None);
        let r = report::build(&t, o);
        // Offline there is no network to send it with: the next stage sends it. The files
        // stage, the last with the queue at hand, always tries.
        if self.ctx.offline && self.stage != Stage::Files {
            if let Err(e) = report::queue::push(&state.reports_dir(), &t, &r) {
                log::warn!("queueing the {} report: {e:#}", self.stage.name());
            }
            return Some(Delivered::Queued(state.reports_dir()));
        }
        Some(report::deliver(&t, &state, &r))
    }

    fn target(&self) -> Option<Target> {
        self.report_target()
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
