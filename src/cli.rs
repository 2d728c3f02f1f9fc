//! The command line: clap definitions and one handler per subcommand.

use std::io::Read;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::stages::{self, Stage};

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
    /// Also write log lines to /dev/kmsg (in the initramfs).
    #[arg(long, global = true)]
    pub log_kmsg: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a config: prints each error and warning on stderr; exit 0 valid, 1 invalid.
    Validate(ValidateArgs),
    /// Run provisioning stages (default: fetch, disks, files).
    Run(RunArgs),
    /// Print the plan of the disks stage (partitions, RAID arrays, LUKS volumes, filesystems:
    /// create, reuse or wipe each) without touching any disk.
    Plan(PlanArgs),
    /// Print the versions of the agent and of the libraries it is built with.
    Info,
    /// Fetch one resource (URL) to a file, verified, with the provisioning fetcher.
    Fetch(crate::fetch::command::FetchArgs),
    /// Serve machine configs to booting machines (the MachineConfigServer).
    Serve(crate::serve::ServeArgs),
    /// Show, rotate or revoke the config server's bearer tokens.
    Token(crate::serve::TokenArgs),
    /// Print the pointer config a machine boots with (merge URL, bearer header, CA).
    Pointer(crate::serve::PointerArgs),
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Config file to check; "-" or nothing reads standard input.
    pub file: Option<PathBuf>,
    /// Largest config read (bytes, or with K/M/G: 64M); default 64 MiB.
    #[arg(long, value_name = "BYTES", value_parser = crate::limits::parse_size_arg)]
    pub max_config_size: Option<u64>,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Config to plan for; default: the rendered config in the state directory.
    #[arg(long)]
    pub config_file: Option<PathBuf>,
    /// Where the fetch stage left the rendered config.
    #[arg(long, default_value = "/run/agent")]
    pub state_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Stage to run; repeat to run several, in the order given.
    #[arg(long = "stage", value_enum)]
    pub stages: Vec<Stage>,
    /// Root of the system being provisioned.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Read the user config from this file ("-" for stdin).
    #[arg(long)]
    pub config_file: Option<PathBuf>,
    /// Fetch the user config from this URL.
    #[arg(long, conflicts_with = "config_file")]
    pub config_url: Option<String>,
    /// Platform the machine runs on (file, metal, qemu, ...).
    #[arg(long)]
    pub platform: Option<String>,
    /// Where stages keep their state (the rendered config).
    #[arg(long, default_value = "/run/agent")]
    pub state_dir: PathBuf,
    /// Directory of system base configs (base.d/*.ign, base.platform.d/<platform>/*.ign).
    #[arg(
        long,
        env = "AGENT_SYSTEM_CONFIG_DIR",
        default_value = "/usr/lib/agent"
    )]
    pub system_config_dir: PathBuf,
    /// Fetch stage: never use the network; if the config needs it, write <state-dir>/neednet
    /// and exit with code 3.
    #[arg(long)]
    pub offline: bool,
    /// Distro helper for kernel argument changes (files stage); run as
    /// `HELPER --root R [--should-exist A]... [--should-not-exist B]...`.
    #[arg(long)]
    pub kargs_helper: Option<PathBuf>,
    /// Where users' SSH keys are written (files stage).
    #[arg(long, value_enum, default_value = "fragment")]
    pub ssh_keys_file: crate::files::passwd::SshKeysFile,
    /// Largest config, CA bundle, key file or user data held in memory (bytes, or with K/M/G:
    /// 64M), after decompression; default 64 MiB, or kernel argument agent.max_config_size=.
    #[arg(long, value_name = "BYTES", value_parser = crate::limits::parse_size_arg)]
    pub max_config_size: Option<u64>,
    /// Most configs fetched through merge/replace references while rendering one config (all
    /// levels); default 64, or kernel argument agent.max_config_refs=.
    #[arg(long, value_name = "N")]
    pub max_config_refs: Option<usize>,
    /// Fail on a redirect from https to http (default: follow it with a warning); also kernel
    /// argument agent.refuse_tls_downgrade.
    #[arg(long)]
    pub refuse_tls_downgrade: bool,
}

/// Runs the command; returns the process exit code.
pub fn dispatch(cli: Cli) -> i32 {
    let verbosity = if cli.quiet {
        -1
    } else {
        cli.verbose.min(3) as i8
    };
    crate::logging::init(verbosity, cli.log_kmsg);
    let result = match cli.command {
        Command::Validate(a) => return validate(a),
        // SIGINT, SIGTERM and SIGHUP remove temporary files and exit 128+signal.
        Command::Run(a) => crate::signals::install().and_then(|()| run(a)),
        Command::Plan(a) => plan(a),
        Command::Info => info(),
        Command::Fetch(a) => {
            crate::signals::install().and_then(|()| crate::fetch::command::main(a))
        }
        Command::Serve(a) => crate::serve::main(a),
        Command::Token(a) => crate::serve::token_main(a),
        Command::Pointer(a) => crate::serve::pointer_main(a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            log::error!("{e:#}");
            if e.downcast_ref::<crate::fetch::NeedsNetwork>().is_some() {
                return stages::fetch::EXIT_NEEDS_NETWORK;
            }
            1
        }
    }
}

fn validate(a: ValidateArgs) -> i32 {
    let limit = a
        .max_config_size
        .unwrap_or(crate::limits::DEFAULT_MAX_CONFIG_SIZE);
    let bytes = match &a.file {
        None => read_stdin_bounded(limit),
        Some(p) if p.as_os_str() == "-" => read_stdin_bounded(limit),
        Some(p) => {
            crate::limits::read_file_bounded(p, limit, &format!("config file {}", p.display()))
                .map_err(|e| format!("{e:#}"))
        }
    };
    let bytes = match bytes {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    match crate::config::parse(&bytes) {
        Ok(p) => {
            for w in &p.warnings.diagnostics {
                eprintln!("{w}");
            }
            0
        }
        Err(report) => {
            for d in &report.diagnostics {
                eprintln!("{d}");
            }
            1
        }
    }
}

fn info() -> anyhow::Result<()> {
    println!("agent {}", env!("CARGO_PKG_VERSION"));
    println!(
        "config spec versions: 3.0.0 - {}",
        crate::config::Version::NEWEST
    );
    match libblkid_rs::get_library_version() {
        Ok((_, version, date)) => println!("libblkid {version} ({date})"),
        Err(e) => println!("libblkid: version unknown ({e})"),
    }
    let selinux = match selinux::kernel_support() {
        selinux::KernelSupport::Unsupported => "not supported by the running kernel",
        selinux::KernelSupport::SELinux => "supported by the running kernel",
        _ => "supported by the running kernel (MLS)",
    };
    println!("libselinux: SELinux {selinux}");
    Ok(())
}

fn read_stdin_bounded(limit: u64) -> Result<Vec<u8>, String> {
    crate::limits::read_bounded(std::io::stdin().lock(), limit, "config from standard input")
        .map_err(|e| format!("{e:#}"))
}

fn read_stdin() -> Result<Vec<u8>, String> {
    let mut b = Vec::new();
    std::io::stdin()
        .read_to_end(&mut b)
        .map_err(|e| format!("reading standard input: {e}"))?;
    Ok(b)
}

fn plan(a: PlanArgs) -> anyhow::Result<()> {
    // Default: the rendered config the fetch stage leaves in the state directory.
    let config = match &a.config_file {
        None => crate::state::StateDir::new(&a.state_dir).read_rendered()?,
        Some(path) => {
            let bytes = if path.as_os_str() == "-" {
                read_stdin().map_err(anyhow::Error::msg)?
            } else {
                std::fs::read(path)
                    .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?
            };
            crate::config::parse(&bytes)
                .map(|p| p.config)
                .map_err(|r| anyhow::anyhow!("config {} is invalid:\n{r}", path.display()))?
        }
    };
    crate::logging::set_stage("disks");
    let p = stages::disks::plan(&config)?;
    print!("{p}");
    Ok(())
}

fn run(a: RunArgs) -> anyhow::Result<()> {
    let stages = if a.stages.is_empty() {
        vec![Stage::Fetch, Stage::Disks, Stage::Files]
    } else {
        a.stages
    };
    // Kernel arguments set the limits; a flag wins over a kernel argument.
    let mut limits = crate::limits::Limits::BUILTIN.with_cmdline(&stages::fetch::read_cmdline()?)?;
    if let Some(n) = a.max_config_size {
        limits.max_config_size = n;
    }
    if let Some(n) = a.max_config_refs {
        limits.max_config_refs = n;
    }
    limits.refuse_tls_downgrade |= a.refuse_tls_downgrade;
    let ctx = stages::Context {
        root: a.root,
        state_dir: a.state_dir,
        platform: a.platform,
        config_file: a.config_file,
        config_url: a.config_url,
        system_config_dir: a.system_config_dir,
        offline: a.offline,
        limits,
        files: stages::files::Options {
            kargs_helper: a.kargs_helper,
            ssh_keys_file: a.ssh_keys_file,
        },
    };
    stages::run(&stages, &ctx)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
