//! The command line, every clap type of the program in one tree (no other module uses
//! clap): [`Cli`] and [`Command`] here, each subcommand's flags and handler in its own file
//! (`validate`, `run`, `plan`, `report`, `fetch`, `serve`, `token` for `token` and `pointer`). A
//! handler turns the flags into plain values (`stages::Context`, `serve::Options`,
//! `fetch::Options`, ...) and calls the module that does the work.

mod butane;
mod delete_config;
mod fetch;
#[cfg(feature = "docs")]
mod generate_docs;
mod install;
#[cfg(feature = "serve")]
mod machines;
mod network_generate;
mod plan;
mod report;
#[cfg(feature = "serve")]
mod rollout;
mod run;
#[cfg(feature = "serve")]
mod serve;
#[cfg(feature = "serve")]
mod token;
mod validate;

use clap::{Parser, Subcommand};

pub use self::butane::{ButaneArgs, DirFiles};
pub use self::delete_config::DeleteConfigArgs;
pub use self::fetch::FetchArgs;
#[cfg(feature = "docs")]
pub use self::generate_docs::GenerateDocsArgs;
pub use self::install::{InstallArgs, SelectorArgs};
#[cfg(feature = "serve")]
pub use self::machines::{MachinesAction, MachinesArgs};
pub use self::network_generate::NetworkGenerateArgs;
pub use self::plan::PlanArgs;
pub use self::report::{ReportAction, ReportArgs, ReportRunningArgs};
#[cfg(feature = "serve")]
pub use self::rollout::{RolloutAction, RolloutArgs};
pub use self::run::RunArgs;
#[cfg(feature = "serve")]
pub use self::serve::ServeArgs;
#[cfg(feature = "serve")]
pub use self::token::{PointerArgs, TokenAction, TokenArgs, TokenStoreArgs};
pub use self::validate::ValidateArgs;
use crate::stages;
pub use crate::stages::fetch::config_file_as_ignition;

#[derive(Debug, Parser)]
#[command(
    name = "agent",
    version,
    about = "Provision a Linux machine from an Ignition 3.x config, or serve configs to machines"
)]
pub struct Cli {
    /// More output (repeat for trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Also write log lines to /dev/kmsg (in the initramfs: `agent --log-kmsg run ...`; for
    /// run, fetch and report only).
    #[arg(long)]
    pub log_kmsg: bool,
    /// Log lines as `text` (agent[stage] level: message) or `json` (one object per line:
    /// time, level, stage, message). Under systemd each line carries its priority.
    #[arg(long, global = true, default_value = "text", value_name = "FORMAT")]
    pub log_format: runtime::logging::Format,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a config: prints each error and warning on stderr; exit 0 valid, 1 invalid.
    Validate(ValidateArgs),
    /// Translate a Butane config (YAML) to an Ignition config, as Butane does: exit 0
    /// translated, 1 invalid (errors, or warnings with --strict).
    Butane(ButaneArgs),
    /// Run provisioning stages (default: fetch, disks, files).
    Run(RunArgs),
    /// Print the plan of the disks stage (partitions, RAID arrays, LUKS volumes, filesystems:
    /// create, reuse or wipe each) without touching any disk.
    Plan(PlanArgs),
    /// Provisioning reports: `drain` sends the ones queued in a directory (what
    /// agent-report.service runs in the provisioned system).
    Report(ReportArgs),
    /// Tell the config server that the installed system came up: the `running` report (boot
    /// id, kernel) to where /var/lib/agent/running.json says, once (what
    /// agent-report-running.service runs).
    ReportRunning(ReportRunningArgs),
    /// Print the versions of the agent and of the libraries it is built with.
    Info(InfoArgs),
    /// Fetch one resource (URL) to a file, verified, with the provisioning fetcher.
    Fetch(FetchArgs),
    /// Write an OS image (raw, gzip, xz or zstd; hash- or signature-checked) to a disk, given
    /// or chosen by what it is, and the Ignition config its first boot reads.
    Install(Box<InstallArgs>),
    /// After provisioning, delete the config from a platform that keeps handing it to the
    /// machine (VMware guestinfo, VirtualBox guest properties); elsewhere nothing.
    DeleteConfig(DeleteConfigArgs),
    /// Write systemd-networkd files for the network of the kernel command line (dracut's ip=,
    /// bond=, vlan=, bridge=, nameserver=, rd.route=, ifname=); without ip= nothing.
    NetworkGenerate(NetworkGenerateArgs),
    /// Serve machine configs to booting machines (the MachineConfigServer).
    #[cfg(feature = "serve")]
    Serve(Box<ServeArgs>),
    /// Show, rotate or revoke the config server's bearer tokens.
    #[cfg(feature = "serve")]
    Token(TokenArgs),
    /// Print the pointer config a machine boots with (merge URL, bearer header, CA).
    #[cfg(feature = "serve")]
    Pointer(PointerArgs),
    /// The config server's machine inventory: what each machine reported (list, show ID),
    /// from its admin listener.
    #[cfg(feature = "serve")]
    Machines(MachinesArgs),
    /// A pool's rollout on the config server (status, pause, resume, promote, abort), from
    /// its admin listener.
    #[cfg(feature = "serve")]
    Rollout(RolloutArgs),
    /// Write the man pages and the bash, zsh and fish completions into a directory
    /// (packaging: `make man completions`).
    #[cfg(feature = "docs")]
    #[command(hide = true)]
    GenerateDocs(GenerateDocsArgs),
}

/// Runs the command; returns the process exit code.
pub fn dispatch(cli: Cli) -> i32 {
    let verbosity = if cli.quiet {
        -1
    } else {
        cli.verbose.min(3) as i8
    };
    if cli.log_kmsg
        && !matches!(
            cli.command,
            Command::Run(_) | Command::Fetch(_) | Command::Report(_) | Command::ReportRunning(_)
        )
    {
        eprintln!(
            "error: --log-kmsg is for the provisioning commands (run, fetch, report), which run in the initramfs"
        );
        return 2;
    }
    runtime::logging::init_with(verbosity, cli.log_kmsg, cli.log_format);
    // The agent's log lines never carry a secret (URL userinfo and queries, password hashes,
    // credentials: `report::redact`), whoever logs them. The config server keeps its own.
    #[cfg(feature = "serve")]
    let serving = matches!(cli.command, Command::Serve(_));
    #[cfg(not(feature = "serve"))]
    let serving = false;
    if !serving {
        runtime::logging::set_redactor(crate::report::redact::text);
    }
    let result = match cli.command {
        Command::Validate(a) => return validate::validate(a),
        Command::Butane(a) => return butane::butane(a),
        // SIGINT, SIGTERM and SIGHUP remove temporary files and exit 128+signal.
        Command::Run(a) => match runtime::signals::install().and_then(|()| run::run(a)) {
            // The offline pass asks for the network with its exit code (dracut/30agent).
            Ok(stages::Outcome::NeedsNetwork(why)) => {
                log::error!("{why}");
                return stages::fetch::EXIT_NEEDS_NETWORK;
            }
            r => r.map(|_| ()),
        },
        Command::Plan(a) => plan::plan(a),
        Command::Report(a) => report::run(a),
        Command::ReportRunning(a) => report::running(a),
        Command::Info(a) => info(a),
        Command::Fetch(a) => runtime::signals::install().and_then(|()| fetch::run(a)),
        Command::Install(a) => runtime::signals::install().and_then(|()| install::run(*a)),
        Command::DeleteConfig(a) => delete_config::run(a),
        Command::NetworkGenerate(a) => network_generate::run(a),
        #[cfg(feature = "serve")]
        Command::Serve(a) => serve::run(*a),
        #[cfg(feature = "serve")]
        Command::Token(a) => token::token_main(a),
        #[cfg(feature = "serve")]
        Command::Pointer(a) => token::pointer_main(a),
        #[cfg(feature = "serve")]
        Command::Machines(a) => machines::run(a),
        #[cfg(feature = "serve")]
        Command::Rollout(a) => rollout::run(a),
        #[cfg(feature = "docs")]
        Command::GenerateDocs(a) => generate_docs::run(a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            log::error!("{e:#}");
            1
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    /// One JSON object: agent, specVersions {min, max}, libblkid {version, date},
    /// selinux {kernelSupport: unsupported | selinux | mls}.
    #[arg(long)]
    pub json: bool,
}

fn info(a: InfoArgs) -> anyhow::Result<()> {
    let newest = spec::config::Version::NEWEST.to_string();
    let blkid = libblkid_rs::get_library_version();
    let ks = selinux::kernel_support();
    let support = match ks {
        selinux::KernelSupport::Unsupported => "unsupported",
        selinux::KernelSupport::SELinux => "selinux",
        _ => "mls",
    };
    let said = match ks {
        selinux::KernelSupport::Unsupported => "not supported by the running kernel",
        selinux::KernelSupport::SELinux => "supported by the running kernel",
        _ => "supported by the running kernel (MLS)",
    };
    if a.json {
        let (version, date) = match &blkid {
            Ok((_, v, d)) => (Some(v.to_string()), Some(d.to_string())),
            Err(_) => (None, None),
        };
        let doc = serde_json::json!({
            "agent": env!("CARGO_PKG_VERSION"),
            "specVersions": {"min": "3.0.0", "max": newest},
            "libblkid": {"version": version, "date": date},
            "selinux": {"kernelSupport": support},
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!("agent {}", env!("CARGO_PKG_VERSION"));
    println!("config spec versions: 3.0.0 - {newest}");
    match blkid {
        Ok((_, version, date)) => println!("libblkid {version} ({date})"),
        Err(e) => println!("libblkid: version unknown ({e})"),
    }
    println!("libselinux: SELinux {said}");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
