//! `agent run`: run provisioning stages with the flags turned into a [`stages::Context`]
//! (limits and endpoints from flags and kernel arguments, files-stage options included).
//! Also the value parsers of flags that `plan` and `fetch` share with it.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::{Args, ValueEnum};

use crate::endpoints::Endpoints;
use crate::files::passwd::SshKeysFile;
use crate::stages::{self, Stage};

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
    #[arg(long, value_name = "NAME", value_parser = PlatformName, help = crate::platform::help())]
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
    #[arg(long, value_name = "BYTES", value_parser = parse_size_arg)]
    pub max_config_size: Option<u64>,
    /// Most configs fetched through merge/replace references while rendering one config (all
    /// levels); default 64, or kernel argument agent.max_config_refs=.
    #[arg(long, value_name = "N")]
    pub max_config_refs: Option<usize>,
    /// Fail on a redirect from https to http (default: follow it with a warning); also kernel
    /// argument agent.refuse_tls_downgrade.
    #[arg(long)]
    pub refuse_tls_downgrade: bool,
    /// An S3-compatible store for s3:// URLs (path-style: URL/bucket/key) instead of AWS S3;
    /// also kernel argument agent.s3_endpoint=.
    #[arg(long, value_name = "URL", value_parser = parse_url_arg)]
    pub s3_endpoint: Option<String>,
    /// Longest wait for a device node (seconds, fractions allowed); default 30, or kernel
    /// argument agent.device_timeout=.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds_arg)]
    pub device_timeout: Option<Duration>,
    #[cfg(feature = "test-hooks")]
    #[command(flatten)]
    pub test: TestArgs,
}

/// Runs the stages; [`stages::Outcome::NeedsNetwork`] when an offline pass needs the network.
pub fn run(a: RunArgs) -> anyhow::Result<stages::Outcome> {
    let stages = if a.stages.is_empty() {
        vec![Stage::Fetch, Stage::Disks, Stage::Files]
    } else {
        a.stages
    };
    // Kernel arguments set the limits and endpoints; a flag wins over a kernel argument.
    #[allow(unused_mut)]
    let mut endpoints = Endpoints::builtin();
    #[cfg(feature = "test-hooks")]
    {
        endpoints = a.test.doubles().apply(endpoints);
    }
    let cmdline = runtime::cmdline::read(&endpoints.kernel_cmdline)?;
    let mut endpoints = endpoints.with_cmdline(&cmdline)?;
    if let Some(u) = a.s3_endpoint {
        endpoints.s3 = Some(u);
    }
    if let Some(t) = a.device_timeout {
        endpoints.device_timeout = t;
    }
    let mut limits = runtime::limits::Limits::BUILTIN.with_cmdline(&cmdline)?;
    if let Some(n) = a.max_config_size {
        limits.max_config_size = n;
    }
    if let Some(n) = a.max_config_refs {
        limits.max_config_refs = n;
    }
    limits.refuse_tls_downgrade |= a.refuse_tls_downgrade;
    // Test builds add a field to the files options (`no_openat2`): the update fills it.
    #[allow(clippy::needless_update)]
    let ctx = stages::Context {
        root: a.root,
        state_dir: a.state_dir,
        platform: a.platform,
        offline: a.offline,
        limits,
        endpoints,
        files: stages::files::Options {
            kargs_helper: a.kargs_helper,
            ssh_keys_file: a.ssh_keys_file,
            ..Default::default()
        },
    };
    let sources = stages::fetch::Sources {
        config_file: a.config_file,
        config_url: a.config_url,
        system_config_dir: a.system_config_dir,
    };
    stages::run(&stages, &sources, &ctx)
}

/// Hidden flags of test builds (feature `test-hooks`) that point the binary at test doubles
/// ([`crate::endpoints::TestDoubles`]); they do not exist in the shipped binary.
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, Default, Args)]
pub struct TestArgs {
    /// Test builds only: read the kernel command line from this file.
    #[arg(long, hide = true, value_name = "FILE")]
    pub test_kernel_cmdline_file: Option<PathBuf>,
    /// Test builds only: QEMU's fw_cfg sysfs directory.
    #[arg(long, hide = true, value_name = "DIR")]
    pub test_qemu_fw_cfg_dir: Option<PathBuf>,
    /// Test builds only: the SMBIOS directory (/sys/class/dmi/id) a report's identity
    /// comes from.
    #[arg(long, hide = true, value_name = "DIR")]
    pub test_dmi_dir: Option<PathBuf>,
    /// Test builds only: the AWS instance metadata service.
    #[arg(long, hide = true, value_name = "URL")]
    pub test_aws_imds_url: Option<String>,
    /// Test builds only: Google Cloud Storage.
    #[arg(long, hide = true, value_name = "URL")]
    pub test_gs_endpoint: Option<String>,
    /// Test builds only: a platform's metadata service (repeatable).
    #[arg(long, hide = true, value_name = "PLATFORM=URL", value_parser = parse_metadata_arg)]
    pub test_metadata_url: Vec<(String, String)>,
}

#[cfg(feature = "test-hooks")]
impl TestArgs {
    /// The test doubles named on the command line.
    fn doubles(self) -> crate::endpoints::TestDoubles {
        crate::endpoints::TestDoubles {
            kernel_cmdline: self.test_kernel_cmdline_file,
            qemu_fw_cfg_dir: self.test_qemu_fw_cfg_dir,
            dmi_dir: self.test_dmi_dir,
            aws_imds: self.test_aws_imds_url,
            gs: self.test_gs_endpoint,
            metadata: self.test_metadata_url,
        }
    }
}

/// `--test-metadata-url PLATFORM=URL`.
#[cfg(feature = "test-hooks")]
fn parse_metadata_arg(s: &str) -> Result<(String, String), String> {
    let (p, u) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: want PLATFORM=URL"))?;
    Ok((p.to_string(), parse_url_arg(u)?))
}

// Value parsers: the domain modules' plain parsers with their errors as clap wants them.

/// [`crate::endpoints::parse_url`] (`--s3-endpoint`).
pub(super) fn parse_url_arg(s: &str) -> Result<String, String> {
    crate::endpoints::parse_url(s).map_err(|e| format!("{e:#}"))
}

/// [`crate::endpoints::parse_seconds`] (`--device-timeout`).
pub(super) fn parse_seconds_arg(s: &str) -> Result<Duration, String> {
    crate::endpoints::parse_seconds(s).map_err(|e| format!("{e:#}"))
}

/// [`runtime::limits::parse_size`] (`--max-config-size`).
pub(super) fn parse_size_arg(s: &str) -> Result<u64, String> {
    runtime::limits::parse_size(s).map_err(|e| format!("{e:#}"))
}

/// `--platform`'s value parser: a name from [`crate::platform::PLATFORMS`], else the table's
/// error ([`crate::platform::lookup`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct PlatformName;

impl TypedValueParser for PlatformName {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        let v = value.to_string_lossy();
        match crate::platform::lookup(&v) {
            Ok(p) => Ok(p.name.to_string()),
            Err(e) => {
                let flag = arg.map_or("--platform".into(), |a| a.to_string());
                Err(clap::Error::raw(
                    clap::error::ErrorKind::InvalidValue,
                    format!("invalid value for {flag}: {e:#}\n"),
                )
                .with_cmd(cmd))
            }
        }
    }
}

// The flag values of domain enums: clap's trait is implemented here so that the domain
// modules stay free of clap.

impl ValueEnum for Stage {
    fn value_variants<'a>() -> &'a [Self] {
        &[Stage::Fetch, Stage::Disks, Stage::Files]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()))
    }
}

impl ValueEnum for SshKeysFile {
    fn value_variants<'a>() -> &'a [Self] {
        &[SshKeysFile::Fragment, SshKeysFile::AuthorizedKeys]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            SshKeysFile::Fragment => PossibleValue::new("fragment").help(
                "`~/.ssh/authorized_keys.d/ignition`, Ignition's fragment (sshd reads it with an \
                 AuthorizedKeysFile drop-in or a helper that concatenates the fragments)",
            ),
            SshKeysFile::AuthorizedKeys => {
                PossibleValue::new("authorized-keys").help("`~/.ssh/authorized_keys`")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cli_takes_its_platforms_from_the_table() {
        use clap::Parser;
        let parse = |p: &str| {
            crate::cli::Cli::try_parse_from(["agent", "run", "--platform", p, "--stage", "fetch"])
        };
        assert!(parse("qemu").is_ok());
        assert!(parse("aws").is_ok());
        assert!(parse("test-dummy").is_ok());
        let e = parse("bogus").unwrap_err().to_string();
        let supported = crate::platform::names(crate::platform::Support::Implemented);
        assert!(supported.contains("aws") && supported.contains("qemu"));
        assert!(
            e.contains(&format!(
                "unsupported platform \"bogus\" (supported: {supported})"
            )),
            "{e}"
        );
        let help = crate::platform::help();
        assert!(
            help.contains(&format!("; supported: {supported} (")),
            "{help}"
        );
    }
}
