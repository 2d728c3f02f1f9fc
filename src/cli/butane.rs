//! `agent butane`: translate a Butane config to Ignition JSON, as Butane does (docs/butane.md).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct ButaneArgs {
    /// Butane config to translate; "-" or nothing reads standard input.
    pub file: Option<PathBuf>,
    /// Write the Ignition config here instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Directory that `local`, `contents_local`, `ssh_authorized_keys_local` and
    /// `storage.trees` paths are relative to (a path may not leave it; a symlink inside it is
    /// followed, as Butane does, even to a file outside it).
    #[arg(short = 'd', long, value_name = "DIR")]
    pub files_dir: Option<PathBuf>,
    /// Fail on warnings.
    #[arg(short, long)]
    pub strict: bool,
    /// Indented output.
    #[arg(short, long)]
    pub pretty: bool,
    /// Largest config read (bytes, or with K/M/G: 64M); default 64 MiB.
    #[arg(long, value_name = "BYTES", value_parser = super::run::parse_size_arg)]
    pub max_config_size: Option<u64>,
}

pub use crate::butane_files::DirFiles;

/// The input of `agent butane` and `agent validate`: FILE, or standard input for "-" or
/// nothing; at most `limit` bytes.
pub(super) fn read_input(file: Option<&std::path::Path>, limit: u64) -> Result<Vec<u8>, String> {
    match file {
        None => crate::limits::read_bounded(
            std::io::stdin().lock(),
            limit,
            "config from standard input",
        ),
        Some(p) if p.as_os_str() == "-" => crate::limits::read_bounded(
            std::io::stdin().lock(),
            limit,
            "config from standard input",
        ),
        Some(p) => {
            crate::limits::read_file_bounded(p, limit, &format!("config file {}", p.display()))
        }
    }
    .map_err(|e| format!("{e:#}"))
}

pub fn butane(a: ButaneArgs) -> i32 {
    let limit = a
        .max_config_size
        .unwrap_or(crate::limits::DEFAULT_MAX_CONFIG_SIZE);
    let bytes = match read_input(a.file.as_deref(), limit) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let files = a.files_dir.as_ref().map(DirFiles::new);
    let opts = butane::Options {
        files_dir: files.as_ref().map(|f| f as &dyn butane::FilesDir),
        strict: a.strict,
        pretty: a.pretty,
        max_size: usize::try_from(limit).unwrap_or(usize::MAX),
        ..Default::default()
    };
    match butane::translate(&bytes, &opts) {
        Ok(out) => {
            eprint!("{}", out.report);
            let written = match &a.output {
                Some(p) => crate::util::write_atomic(p, &out.json, 0o644)
                    .map_err(|e| format!("writing {}: {e:#}", p.display())),
                None => std::io::stdout()
                    .lock()
                    .write_all(&out.json)
                    .map_err(|e| format!("writing standard output: {e}")),
            };
            match written {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{e}");
                    2
                }
            }
        }
        Err(report) => {
            eprint!("{report}");
            1
        }
    }
}
