//! `agent report drain --dir DIR`: sends the provisioning reports queued in DIR (as the files
//! stage leaves them in the new root for `agent-report.service`, or `<state-dir>/reports`),
//! oldest first; exit 0 when every one was sent (the directory is removed then), 1 when some
//! are still queued.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub action: ReportAction,
}

#[derive(Debug, Subcommand)]
pub enum ReportAction {
    /// Send the queued reports in DIR, oldest first; remove DIR once all are sent (exit 1
    /// while some are left).
    Drain {
        /// The queue directory.
        #[arg(long, default_value = "/var/lib/agent/reports")]
        dir: PathBuf,
    },
}

pub fn run(a: ReportArgs) -> anyhow::Result<()> {
    match a.action {
        ReportAction::Drain { dir } => crate::report::queue::drain_dir(&dir),
    }
}
