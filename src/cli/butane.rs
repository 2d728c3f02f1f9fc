//! `agent butane`: translate a Butane config to Ignition JSON, as Butane does (docs/butane.md).
//! Also [`DirFiles`], the `--files-dir` reader the pure `butane` crate reads local files through.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use clap::Args;

#[derive(Debug, Args)]
pub struct ButaneArgs {
    /// Butane config to translate; "-" or nothing reads standard input.
    pub file: Option<PathBuf>,
    /// Write the Ignition config here instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Directory that `local`, `contents_local`, `ssh_authorized_keys_local` and
    /// `storage.trees` paths are relative to (nothing outside it is read).
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

/// Local files for Butane, confined to one directory: a path that leaves it (by `..`, or,
/// with `confine_symlinks`, through a symlink) is refused.
pub struct DirFiles {
    pub root: PathBuf,
    /// Also refuse paths whose real location (symlinks resolved) is outside `root`
    /// (`agent serve`; Butane itself checks the path text only).
    pub confine_symlinks: bool,
}

fn clean(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c.as_os_str()),
        }
    }
    out
}

impl DirFiles {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirFiles {
            root: root.into(),
            confine_symlinks: false,
        }
    }

    fn resolve(&self, rel: &str) -> Result<PathBuf, String> {
        let base = std::path::absolute(&self.root).map_err(|e| e.to_string())?;
        let base = clean(&base);
        let joined = clean(&base.join(rel.trim_start_matches('/')));
        if joined != base && !joined.starts_with(&base) {
            return Err("local file path traverses outside the files directory".into());
        }
        if self.confine_symlinks
            && let (Ok(real), Ok(real_base)) = (joined.canonicalize(), base.canonicalize())
            && !real.starts_with(&real_base)
        {
            return Err("local file path traverses outside the files directory".into());
        }
        Ok(joined)
    }
}

impl butane::FilesDir for DirFiles {
    fn read(&self, rel: &str) -> Result<Vec<u8>, String> {
        let p = self.resolve(rel)?;
        let shown = self.root.join(rel);
        let meta = std::fs::metadata(&p)
            .map_err(|e| format!("open {}: {}", shown.display(), os_msg(&e)))?;
        if meta.len() > crate::limits::DEFAULT_MAX_CONFIG_SIZE {
            return Err(format!(
                "{}: larger than {} bytes",
                shown.display(),
                crate::limits::DEFAULT_MAX_CONFIG_SIZE
            ));
        }
        std::fs::read(&p).map_err(|e| format!("read {}: {}", shown.display(), os_msg(&e)))
    }

    fn walk(&self, rel: &str) -> Result<Vec<butane::TreeEntry>, String> {
        let base = self.resolve(rel)?;
        let meta = std::fs::metadata(&base)
            .map_err(|e| format!("stat {}: {}", base.display(), os_msg(&e)))?;
        if !meta.is_dir() {
            return Err("tree local must be a directory".into());
        }
        let mut out = Vec::new();
        walk_dir(&base, "", &mut out, 0)?;
        Ok(out)
    }
}

fn os_msg(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        _ => e.to_string(),
    }
}

fn walk_dir(
    dir: &Path,
    prefix: &str,
    out: &mut Vec<butane::TreeEntry>,
    depth: usize,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if depth > 64 {
        return Err(format!("{}: tree nested too deep", dir.display()));
    }
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    names.sort();
    for name in names {
        let p = dir.join(&name);
        let rel = format!("{prefix}{}", name.to_string_lossy());
        let meta = std::fs::symlink_metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            walk_dir(&p, &format!("{rel}/"), out, depth + 1)?;
        } else if ft.is_file() {
            if meta.len() > crate::limits::DEFAULT_MAX_CONFIG_SIZE {
                return Err(format!("{}: file too large", p.display()));
            }
            let contents = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            out.push(butane::TreeEntry::File {
                rel,
                contents,
                executable: meta.permissions().mode() & 0o111 != 0,
            });
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            out.push(butane::TreeEntry::Symlink {
                rel,
                target: target.to_string_lossy().into_owned(),
            });
        } else {
            return Err(format!("{}: file type not supported", p.display()));
        }
    }
    Ok(())
}

pub fn butane(a: ButaneArgs) -> i32 {
    let limit = a
        .max_config_size
        .unwrap_or(crate::limits::DEFAULT_MAX_CONFIG_SIZE);
    let bytes = match &a.file {
        None => super::validate::read_stdin_bounded(limit),
        Some(p) if p.as_os_str() == "-" => super::validate::read_stdin_bounded(limit),
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
