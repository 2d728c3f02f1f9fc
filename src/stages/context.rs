//! What every stage is given besides its input: the [`Context`] (root, state directory,
//! platform, limits, endpoints, the files stage's command-line settings) and a [`Reporter`];
//! what every stage returns, its [`Outcome`]; and the list of [`Stage`]s. Below the stages,
//! which all use it.

use std::path::PathBuf;

use anyhow::Result;

use crate::endpoints::Endpoints;
use crate::files::passwd::SshKeysFile;
use crate::report::{Changes, Delivered};
use crate::state::StateDir;
use runtime::limits::Limits;
use spec::config::Config;

/// Everything a stage needs besides its input (the fetch stage's config sources, the
/// rendered config of the others).
#[derive(Debug, Clone)]
pub struct Context {
    pub root: PathBuf,
    pub state_dir: PathBuf,
    pub platform: Option<String>,
    /// Fail (with the neednet marker) instead of fetching anything over the network.
    pub offline: bool,
    /// Memory limits and redirect policy of every fetch (flags and kernel arguments).
    pub limits: Limits,
    /// Where the services and files are, and the device time-out (built-in values, kernel
    /// arguments, flags); a stage fetches with them as its platform prepared them
    /// ([`Context::prepared`]).
    pub endpoints: Endpoints,
    /// Command-line settings of the files stage.
    pub files: FilesOptions,
}

impl Context {
    /// The state directory: what one stage leaves for the next (`crate::state`).
    pub fn state(&self) -> StateDir<'_> {
        StateDir::new(&self.state_dir)
    }

    /// Fetch options for what a stage fetches for `config`: its timeouts, proxy and CAs
    /// (`ignition.security.tls.certificateAuthorities`), and this run's [`Context::limits`] and
    /// [`Context::endpoints`]. The CAs are loaded here, so a stage calls this before it changes
    /// anything: a CA that cannot be had fails the stage with nothing done. In the rendered
    /// config the fetch stage left they are `data:` URLs (it fetched them once,
    /// [`crate::fetch::inline_cas`]), so the later stages need no network for them.
    pub fn fetch_options(&self, config: &Config) -> Result<crate::fetch::Options> {
        let base = crate::fetch::Options {
            limits: self.limits,
            endpoints: self.endpoints.clone(),
            ..Default::default()
        };
        crate::fetch::Options::from_config_with_cas(config, &base)
    }

    /// This context with its endpoints prepared by the platform
    /// ([`crate::platform::prepare`]), as every stage fetches with them.
    pub fn prepared(&self) -> Result<Context> {
        let mut c = self.clone();
        crate::platform::prepare(self.platform.as_deref(), self.offline, &mut c.endpoints)?;
        Ok(c)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Fetch,
    Disks,
    Files,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Fetch => "fetch",
            Stage::Disks => "disks",
            Stage::Files => "files",
        }
    }
}

/// How a stage ended when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Outcome {
    /// The stage did its work (and told its [`Reporter`]).
    Done,
    /// Offline (`--offline`), the config needs the network: the stage changed nothing but
    /// the state directory's `neednet` marker, and is to run again once the network is up.
    /// The text says what needs it (as the log shows it).
    NeedsNetwork(String),
}

/// Where a stage's report goes (docs/reports.md). The runner ([`crate::stages::run`])
/// hands each stage one; the stage calls [`Reporter::done`] once its work is done and
/// before it lets go of what it worked on (the files stage: while the new root is still
/// mounted). A failure is reported by the runner.
pub trait Reporter {
    /// The stage's work is done, having changed `changes`: its report is sent (or queued)
    /// now. None: no report goes anywhere this boot.
    fn done(&mut self, changes: Changes) -> Option<Delivered>;
    /// Where this boot's reports go (None: nowhere), for what the files stage leaves in the
    /// root to send the installed system's `running` report.
    fn target(&self) -> Option<crate::report::Target> {
        None
    }
}

/// No reports (a stage run on its own, as tests do).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoReports;

impl Reporter for NoReports {
    fn done(&mut self, _: Changes) -> Option<Delivered> {
        None
    }
}

/// Settings of the files stage that come from the command line (carried in
/// [`Context::files`]; `stages::files::Options`).
#[derive(Debug, Clone, Default)]
pub struct FilesOptions {
    /// Distro helper that applies kernel argument changes.
    pub kargs_helper: Option<PathBuf>,
    /// Where SSH keys are written in each home.
    pub ssh_keys_file: SshKeysFile,
    /// Test builds only: open directories element by element with `O_NOFOLLOW`, as on a
    /// kernel without `openat2` (see `files::resolve`).
    #[cfg(feature = "test-hooks")]
    pub no_openat2: bool,
}
