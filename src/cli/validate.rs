//! `agent validate`: check a config, print its errors and warnings.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Config file to check; "-" or nothing reads standard input.
    pub file: Option<PathBuf>,
    /// Largest config read (bytes, or with K/M/G: 64M); default 64 MiB.
    #[arg(long, value_name = "BYTES", value_parser = super::run::parse_size_arg)]
    pub max_config_size: Option<u64>,
    /// For a Butane config: the directory its local file references are relative to.
    #[arg(short = 'd', long, value_name = "DIR")]
    pub files_dir: Option<std::path::PathBuf>,
}

pub fn validate(a: ValidateArgs) -> i32 {
    let limit = a
        .max_config_size
        .unwrap_or(runtime::limits::DEFAULT_MAX_CONFIG_SIZE);
    let bytes = match super::butane::read_input(a.file.as_deref(), limit) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    // A Butane config (YAML with variant and version, told apart by content, not by name)
    // is translated as `agent butane` would, then its errors and warnings are printed.
    if butane::looks_like_butane(&bytes) {
        let files = a.files_dir.as_ref().map(super::butane::DirFiles::new);
        let opts = butane::Options {
            files_dir: files.as_ref().map(|f| f as &dyn butane::FilesDir),
            max_size: usize::try_from(limit).unwrap_or(usize::MAX),
            agent_checks: true,
            ..Default::default()
        };
        return match butane::translate(&bytes, &opts) {
            Ok(out) => {
                eprint!("{}", out.report);
                0
            }
            Err(report) => {
                eprint!("{report}");
                1
            }
        };
    }
    match spec::config::parse(&bytes) {
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
