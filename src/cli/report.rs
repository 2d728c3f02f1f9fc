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

/// `agent report-running`.
#[derive(Debug, Args)]
pub struct ReportRunningArgs {
    /// Where the report goes (written by the files stage); removed once it is sent.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/var/lib/agent/running.json"
    )]
    pub state: PathBuf,
    /// Tries before giving up (the file stays for the next boot).
    #[arg(long, value_name = "N", default_value = "10")]
    pub tries: u32,
    /// The pause after the first failed try (it doubles after each, at most 60 s).
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = super::run::parse_seconds_arg)]
    pub retry_pause: std::time::Duration,
    /// Test builds only: the SMBIOS directory (/sys/class/dmi/id) the report's machine
    /// identity comes from.
    #[cfg(feature = "test-hooks")]
    #[arg(long, hide = true, value_name = "DIR")]
    pub test_dmi_dir: Option<PathBuf>,
}

pub fn running(a: ReportRunningArgs) -> anyhow::Result<()> {
    #[allow(unused_mut)]
    let mut endpoints = crate::endpoints::Endpoints::builtin();
    #[cfg(feature = "test-hooks")]
    if let Some(d) = a.test_dmi_dir {
        endpoints.dmi_dir = d;
    }
    crate::report::running::send_pending(
        &a.state,
        endpoints,
        crate::report::running::Retry {
            tries: a.tries,
            pause: a.retry_pause,
        },
    )
}
