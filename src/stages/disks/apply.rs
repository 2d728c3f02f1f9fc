//! Carrying out a plan of the disks stage, one layer of `blockdev` at a time: tables written
//! (and put back on failure, also when an array is refused after partitioning), then arrays,
//! volumes (their records and keys saved in the state directory) and filesystems.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::plan::StagePlan;
use super::report::Report;
use crate::blockdev::{failpoint, filesystem, luks, partitions, raid};
use crate::fetch::{self, Fetcher};
use crate::state::StateDir;

/// Carries out a plan without RAID/LUKS state (state dir: a temporary record location is not
/// needed when the plan has no LUKS volumes).
pub fn apply(p: &StagePlan) -> Result<Report> {
    if !p.luks.is_empty() {
        bail!("internal: a plan with LUKS volumes needs apply_with (state dir and fetcher)");
    }
    apply_with(
        p,
        &StateDir::new(Path::new("/nonexistent")),
        &Fetcher::new(fetch::Options::default()),
    )
}

/// Carries out a plan; LUKS keys are fetched with `fetcher`, records and keys left in `state`.
pub fn apply_with(p: &StagePlan, state: &StateDir, fetcher: &Fetcher) -> Result<Report> {
    let t0 = Instant::now();
    let timeout = p.device_timeout;
    // New partitions held open until the stage ends (see `partitions::Partitioned`).
    let mut parts = partitions::apply(&p.disks, timeout)?;
    failpoint::hit("after-partitioning")?;
    // Arrays whose members the partitioning made: decided now, while a refusal still puts the
    // tables back.
    let raids = raid::settle(&p.raids, &p.devices, timeout)?;
    parts.commit()?;
    let partitioning = t0.elapsed();

    raid::apply_all(&raids, timeout)?;
    failpoint::hit("after-raid")?;
    luks::carry_out(&p.luks, &p.devices, fetcher, state, timeout)?;
    failpoint::hit("after-luks")?;

    let work = filesystem::decide_all(&p.filesystems, &p.devices, timeout)?;
    let probing = t0.elapsed() - partitioning;
    let t_fs = Instant::now();
    let made = filesystem::make_all(&work);
    let fs_phase = t_fs.elapsed();
    let tools = made?;
    // Every filesystem is made: the partitions may be re-read from now on.
    let table_io = parts.table_io;
    drop(parts);
    let mut changes = crate::report::Changes::default();
    for d in &work {
        let fmt = d.fs.format.as_deref().unwrap_or("?");
        let what = format!("{} ({fmt})", d.dev.display());
        match &d.action {
            filesystem::FsAction::Reuse(_) => changes.filesystems.reused.push(what),
            filesystem::FsAction::Create | filesystem::FsAction::WipeCreate(_) if fmt != "none" => {
                changes.filesystems.made.push(what)
            }
            _ => {}
        }
    }
    Ok(Report {
        changes,
        total: t0.elapsed(),
        tools,
        fs_phase,
        planning: Duration::ZERO,
        partitioning,
        probing,
        table_io,
    })
}
