//! The disks stage: partitions (GPT), then RAID arrays, then LUKS volumes, then filesystems.
//!
//! Everything is planned first (`plan`): the new partition table of every disk, computed whole in
//! memory and checked, and what happens to every array, volume and filesystem (what sits on a
//! device that the plan itself creates is decided once that device exists). Only then is
//! anything written (`apply`): one table write per disk, partition nodes updated with BLKPG,
//! nodes waited for; arrays created or assembled (`blockdev::raid`); volumes formatted or reused
//! and opened (`blockdev::luks`, records and keys left in the state directory for the files
//! stage, `crate::state`); then filesystems wiped/created in parallel (`blockdev::filesystem`).
//! A failure while partitioning, or an array refused after partitioning, puts every table back
//! as it was.
//!
//! Each layer lives in `blockdev` (`partitions`, `raid`, `luks`, `filesystem`), and the stage
//! asks each one in turn, once to plan and once to carry the plan out, handing it plain values:
//! the config's entries, the layer's part of the plan, and the devices the layers below make
//! (`blockdev::devices`: which node a config device names, also a partition the plan has yet
//! to create). No layer calls back into the stage. `plan.rs` puts the plan together and prints
//! it; `apply.rs` carries it out, layer by layer, with the failpoints and times between them.
//!
//! `--device-timeout` / `agent.device_timeout=` bounds every wait for a device node (default
//! 30 s); test builds have failpoints (see `blockdev::failpoint`).

mod apply;
mod plan;
mod report;

use std::time::{Duration, Instant};

use anyhow::Result;

use super::context::{Context, Outcome, Reporter};
use crate::fetch::Fetcher;
use spec::config::Config;

pub use crate::blockdev::filesystem::FsWork;
pub use crate::blockdev::luks::LuksWork;
pub use crate::blockdev::partitions::DiskWork;
pub use crate::blockdev::raid::RaidWork;
pub use apply::{apply, apply_with};
pub use plan::{StagePlan, plan};
pub use report::Report;

/// Runs the stage: plans, logs the plan, carries it out, and reports what it changed.
pub fn run(config: &Config, ctx: &Context, reporter: &mut dyn Reporter) -> Result<Outcome> {
    let r = run_timed(config, ctx)?;
    reporter.done(r.changes);
    Ok(Outcome::Done)
}

/// [`run`] without the report: the times of the run (all zero when there is nothing to do)
/// and what it changed.
fn run_timed(config: &Config, ctx: &Context) -> Result<Report> {
    let t0 = Instant::now();
    // The config's CAs first (for LUKS key files over https): one that cannot be had fails
    // the stage before any disk is touched.
    let fetcher = Fetcher::new(ctx.fetch_options(config)?);
    let p = plan(config, ctx.endpoints.device_timeout)?;
    let planning = t0.elapsed();
    if p.disks.is_empty() && p.raids.is_empty() && p.luks.is_empty() && p.filesystems.is_empty() {
        log::info!("nothing to do");
        return Ok(Report::default());
    }
    for line in p.to_string().lines() {
        log::info!("plan: {line}");
    }
    let mut r = apply_with(&p, &ctx.state(), &fetcher)?;
    r.total = t0.elapsed();
    r.planning = planning;
    r.changes.partitions = partition_changes(&p);
    log::info!(
        "done in {:.1} ms (external tools {:.1} ms summed, filesystem phase {:.1} ms, own overhead {:.1} ms)",
        ms(r.total),
        ms(r.tools),
        ms(r.fs_phase),
        ms(r.total.saturating_sub(r.fs_phase))
    );
    log::info!(
        "overhead: planning {:.1} ms, partitioning {:.1} ms (of which table write + fsync {:.1} ms), probing {:.1} ms",
        ms(r.planning),
        ms(r.partitioning),
        ms(r.table_io),
        ms(r.probing)
    );
    Ok(r)
}

/// The partitions of the plan by what happened to them (`/dev/<node>`); a resized one is
/// kept, a re-created one created.
fn partition_changes(p: &StagePlan) -> crate::report::Partitions {
    use crate::blockdev::plan::Action;
    let mut out = crate::report::Partitions::default();
    for d in &p.disks {
        for part in &d.plan.parts {
            let node = format!(
                "/dev/{}",
                crate::blockdev::kernel::part_name(&d.name, part.number)
            );
            match part.action {
                Action::Create | Action::Recreate => out.created.push(node),
                Action::Keep | Action::Resize => out.kept.push(node),
                Action::Delete => out.deleted.push(node),
                Action::Absent | Action::Unlisted => {}
            }
        }
    }
    out
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
