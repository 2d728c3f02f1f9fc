//! The crate's face: what a caller passes in ([`Options`], a [`FilesDir`] for local files, the
//! [`Release`] to follow) and gets back ([`Output`], a [`Report`] of [`Diag`]s). Below the
//! translator, which reads and fills them.

use std::fmt;

use crate::yaml::{Limits, Pos};

/// Which Butane release's experimental versions to follow (they move between releases).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Butane v0.25.x: experimental variants emit spec 3.6.0-experimental.
    V0_25,
    /// Butane v0.29.x (the default): experimental variants emit spec 3.7.0-experimental.
    Newest,
}

/// Where `local:`, `contents_local:`, `ssh_authorized_keys_local:` and `storage.trees` read.
///
/// Only regular files are read (a FIFO or a device is refused, never opened for reading), and
/// never more than `max` bytes: the translation passes what is left of its bounds
/// ([`Options::max_local_file`], [`Options::max_local_total`]) and names the limit when an
/// implementation answers [`LocalError::TooLarge`].
pub trait FilesDir {
    /// The bytes of the regular file at `rel` (a slash-separated path relative to the files
    /// dir), at most `max`. Implementations refuse paths that leave the directory.
    fn read(&self, rel: &str, max: u64) -> Result<Vec<u8>, LocalError>;
    /// Every directory, regular file and symlink under directory `rel`, the root included, in
    /// lexical walk order (as Go's `filepath.Walk`), with paths relative to `rel`; a root that
    /// is a symlink to a directory is that one symlink (`rel` empty: Walk does not follow it); each file at most `max_file` bytes,
    /// all together at most `max_total`.
    fn walk(&self, rel: &str, max_file: u64, max_total: u64) -> Result<Vec<TreeEntry>, LocalError>;
}

/// Why a [`FilesDir`] read failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalError {
    /// More than the caller accepts: `size` bytes at least were found; `total` says the
    /// files of a tree together were too many bytes (not one file).
    TooLarge { size: u64, total: bool },
    /// Anything else (missing, not a regular file, outside the directory), as text.
    Other(String),
}

impl From<String> for LocalError {
    fn from(s: String) -> Self {
        LocalError::Other(s)
    }
}

#[derive(Debug, Clone)]
pub enum TreeEntry {
    File {
        rel: String,
        contents: Vec<u8>,
        executable: bool,
    },
    Symlink {
        rel: String,
        target: String,
    },
    /// A directory, the tree's root (`rel` empty) first; Butane makes directory entries of
    /// them when a tree sets `dir_mode`, `user` or `group`.
    Dir {
        rel: String,
    },
}

/// Translation options (`agent butane` flags).
pub struct Options<'a> {
    pub files_dir: Option<&'a dyn FilesDir>,
    /// Warnings fail the translation (Butane's `--strict`).
    pub strict: bool,
    /// `json.MarshalIndent(cfg, "", "  ")` instead of compact output.
    pub pretty: bool,
    /// Input size limit in bytes (`--max-config-size`).
    pub max_size: usize,
    pub limits: Limits,
    /// Which Butane release's experimental spec mapping to follow.
    pub release: Release,
    /// Largest local file read (`local`, `contents_local`, `ssh_authorized_keys_local`, each
    /// file of a tree): `max-local-file`.
    pub max_local_file: u64,
    /// Bytes of local files one translation reads, all together (a file used twice is read
    /// once), and bytes of contents it embeds from them (counting every use): `max-local-total`.
    pub max_local_total: u64,
    /// Also report the agent's own checks of the output that Ignition's validation does not
    /// make (id ranges, user and group names, masked-and-enabled units, ...): `agent validate`.
    /// Off for `agent butane`, which reports what Butane reports.
    pub agent_checks: bool,
    /// openshift: the MachineConfig (YAML) Butane writes without `--raw`, instead of the
    /// Ignition config (`butane --raw`, the default here: what the agent and its server use).
    pub machine_config: bool,
}

/// Default [`Options::max_local_file`]: 64 MiB (the agent's config size limit).
pub const MAX_LOCAL_FILE: u64 = 64 << 20;
/// Default [`Options::max_local_total`]: 256 MiB.
pub const MAX_LOCAL_TOTAL: u64 = 256 << 20;

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            files_dir: None,
            strict: false,
            pretty: false,
            max_size: 8 << 20,
            limits: Limits::default(),
            release: Release::Newest,
            max_local_file: MAX_LOCAL_FILE,
            max_local_total: MAX_LOCAL_TOTAL,
            agent_checks: false,
            machine_config: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diag {
    pub error: bool,
    /// The YAML path (`$.storage.files.0.path`), or empty for the whole document.
    pub path: String,
    pub pos: Option<Pos>,
    pub message: String,
}

impl Diag {
    pub fn error(path: &str, pos: Pos, msg: impl Into<String>) -> Diag {
        Diag {
            error: true,
            path: path.to_string(),
            pos: Some(pos),
            message: msg.into(),
        }
    }
    pub fn warning(path: &str, pos: Pos, msg: impl Into<String>) -> Diag {
        Diag {
            error: false,
            path: path.to_string(),
            pos: Some(pos),
            message: msg.into(),
        }
    }
    pub fn plain(msg: impl Into<String>) -> Diag {
        Diag {
            error: true,
            path: String::new(),
            pos: None,
            message: msg.into(),
        }
    }
}

impl fmt::Display for Diag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.error { "error" } else { "warning" };
        match (self.path.is_empty(), self.pos) {
            (false, Some(p)) => write!(
                f,
                "{kind} at {}, line {} col {}: {}",
                self.path, p.line, p.col, self.message
            ),
            (false, None) => write!(f, "{kind} at {}: {}", self.path, self.message),
            (true, Some(p)) => write!(
                f,
                "{kind} at line {} col {}: {}",
                p.line, p.col, self.message
            ),
            (true, None) => write!(f, "{kind}: {}", self.message),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub diags: Vec<Diag>,
}

impl Report {
    pub fn push(&mut self, d: Diag) {
        self.diags.push(d);
    }
    pub fn has_errors(&self) -> bool {
        self.diags.iter().any(|d| d.error)
    }
    pub fn has_warnings(&self) -> bool {
        self.diags.iter().any(|d| !d.error)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.diags {
            writeln!(f, "{d}")?;
        }
        Ok(())
    }
}

/// A translated config: the Ignition JSON (with a trailing newline, as Butane writes it), or
/// for [`Options::machine_config`] the MachineConfig YAML, and the warnings.
#[derive(Debug, Clone)]
pub struct Output {
    pub json: Vec<u8>,
    pub ign_version: String,
    pub report: Report,
}
