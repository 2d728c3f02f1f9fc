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
    /// openshift: write the Ignition config, never a MachineConfig (fields only a
    /// MachineConfig carries, `openshift.*`, then warn "field ignored in raw mode").
    #[arg(short, long)]
    pub raw: bool,
    /// Check the config (errors, warnings, exit status) without writing any output.
    #[arg(short, long)]
    pub check: bool,
    /// Print the version (and the Butane release translated as) and exit.
    #[arg(short = 'V', long)]
    pub version: bool,
    /// One line per error or warning (`error at $.path, line L col C: message`) instead of
    /// Butane's snippets of the source.
    #[arg(long)]
    pub raw_errors: bool,
    /// Colour the snippets: auto (a terminal, and NO_COLOR unset), always, never.
    #[arg(long, value_name = "WHEN", default_value = "auto", default_missing_value = "always", num_args = 0..=1, value_parser = ["auto", "always", "yes", "never", "no"])]
    pub color: String,
    /// Largest config read (bytes, or with K/M/G: 64M); default 64 MiB.
    #[arg(long, value_name = "BYTES", value_parser = super::run::parse_size_arg)]
    pub max_config_size: Option<u64>,
}

pub use runtime::butane_files::DirFiles;

/// The input of `agent butane` and `agent validate`: FILE, or standard input for "-" or
/// nothing; at most `limit` bytes.
pub(super) fn read_input(file: Option<&std::path::Path>, limit: u64) -> Result<Vec<u8>, String> {
    match file {
        None => runtime::limits::read_bounded(
            std::io::stdin().lock(),
            limit,
            "config from standard input",
        ),
        Some(p) if p.as_os_str() == "-" => runtime::limits::read_bounded(
            std::io::stdin().lock(),
            limit,
            "config from standard input",
        ),
        Some(p) => {
            runtime::limits::read_file_bounded(p, limit, &format!("config file {}", p.display()))
        }
    }
    .map_err(|e| format!("{e:#}"))
}

pub fn butane(a: ButaneArgs) -> i32 {
    if a.version {
        println!(
            "agent butane {} (translates as Butane v0.29.0)",
            env!("CARGO_PKG_VERSION")
        );
        return 0;
    }
    let limit = a
        .max_config_size
        .unwrap_or(runtime::limits::DEFAULT_MAX_CONFIG_SIZE);
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
        machine_config: !a.raw,
        max_size: usize::try_from(limit).unwrap_or(usize::MAX),
        ..Default::default()
    };
    use std::io::IsTerminal;
    let colorize = match a.color.as_str() {
        "always" | "yes" => true,
        "never" | "no" => false,
        _ => std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal(),
    };
    let name = match a.file.as_deref() {
        None => "<stdin>".to_string(),
        Some(p) if p.as_os_str() == "-" => "<stdin>".to_string(),
        Some(p) => p.display().to_string(),
    };
    let show = |r: &butane::Report| {
        if a.raw_errors {
            eprint!("{r}");
        } else {
            eprint!("{}", pretty_report(r, &name, &bytes, colorize));
        }
    };
    match butane::translate(&bytes, &opts) {
        Ok(out) if a.check => {
            show(&out.report);
            0
        }
        Ok(out) => {
            show(&out.report);
            let written = match &a.output {
                Some(p) => runtime::util::write_atomic(p, &out.json, 0o644)
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
            show(&report);
            1
        }
    }
}

/// Butane's default error format (its internal/report package): each entry with the YAML
/// path, the file, line and column, two lines of context either side and the value
/// underlined; entries without a position (or with one outside the text) as one line;
/// a blank line between entries.
pub fn pretty_report(r: &butane::Report, file: &str, source: &[u8], color: bool) -> String {
    const RED: &str = "\x1b[1;31m";
    const YELLOW: &str = "\x1b[1;33m";
    const BLUE: &str = "\x1b[1;34m";
    const RESET: &str = "\x1b[0m";
    let paint = |t: &str, code: &str| {
        if color {
            format!("{code}{t}{RESET}")
        } else {
            t.to_string()
        }
    };
    let text = String::from_utf8_lossy(source);
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = String::new();
    for (i, d) in r.diags.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let Some(p) = d.pos else {
            out.push_str(&format!("{d}\n"));
            continue;
        };
        let (line, col) = (p.line, p.col);
        if line < 1 || line > lines.len() || col < 1 || col > lines[line - 1].len() {
            out.push_str(&format!("{d}\n"));
            continue;
        }
        let kind = if d.error { "error" } else { "warning" };
        let kind = paint(kind, if d.error { RED } else { YELLOW });
        let path = if d.path.is_empty() {
            String::new()
        } else {
            format!("[{}]", d.path)
        };
        out.push_str(&format!("{kind}{path}:\n"));
        out.push_str(&format!("  {} {file}:{line}:{col}\n", paint("-->", BLUE)));
        let first = line.saturating_sub(2).max(1);
        let last = (line + 2).min(lines.len());
        let gutter = last.to_string().len();
        let pad = " ".repeat(gutter);
        out.push_str(&format!(" {pad} |\n"));
        for n in first..=last {
            let num = paint(&format!("{n:>gutter$}"), BLUE);
            out.push_str(&format!(" {num} | {}\n", lines[n - 1]));
            if n == line {
                let l = lines[n - 1];
                let start = col - 1;
                let rest = l.get(start..).unwrap_or("");
                let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
                let carets = paint(&"^".repeat(len), BLUE);
                out.push_str(&format!(
                    " {pad} | {}{carets} {}\n",
                    " ".repeat(start),
                    d.message
                ));
            }
        }
        out.push_str(&format!(" {pad} |\n"));
    }
    out
}
