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
    /// Print the verdict and every diagnostic as one JSON document on stdout
    /// (`{"valid", "format", "diagnostics": [{"severity", "path", "line", "column",
    /// "message"}]}`) instead of lines on stderr; the exit code is the same.
    #[arg(long)]
    pub json: bool,
}

/// One diagnostic of `--json`.
fn diag_json(
    error: bool,
    path: String,
    pos: Option<(usize, usize)>,
    message: &str,
) -> serde_json::Value {
    serde_json::json!({
        "severity": if error { "error" } else { "warning" },
        "path": path,
        "line": pos.map(|p| p.0),
        "column": pos.map(|p| p.1),
        "message": message,
    })
}

/// The `--json` document on stdout; `code` returned.
fn print_json(code: i32, format: &str, diagnostics: Vec<serde_json::Value>) -> i32 {
    let doc = serde_json::json!({
        "valid": code == 0,
        "format": format,
        "diagnostics": diagnostics,
    });
    match serde_json::to_string_pretty(&doc) {
        Ok(t) => println!("{t}"),
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    }
    code
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
        let (code, report) = match butane::translate(&bytes, &opts) {
            Ok(out) => (0, out.report),
            Err(report) => (1, report),
        };
        if a.json {
            let d = report
                .diags
                .iter()
                .map(|d| {
                    diag_json(
                        d.error,
                        d.path.clone(),
                        d.pos.map(|p| (p.line, p.col)),
                        &d.message,
                    )
                })
                .collect();
            return print_json(code, "butane", d);
        }
        eprint!("{report}");
        return code;
    }
    if a.json {
        let (code, diags) = match spec::config::parse(&bytes) {
            Ok(p) => (0, p.warnings.diagnostics),
            Err(report) => (1, report.diagnostics),
        };
        let d = diags
            .iter()
            .map(|d| {
                diag_json(
                    d.severity == spec::config::Severity::Error,
                    d.path.to_string(),
                    d.line_col,
                    &d.message,
                )
            })
            .collect();
        return print_json(code, "ignition", d);
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
