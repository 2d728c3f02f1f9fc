//! Butane's `--files-dir`: local files (`local`, `contents_local`, `ssh_authorized_keys_local`,
//! `storage.trees`) read from one directory for the pure `butane` crate, through its
//! `FilesDir` trait; used by `agent butane`, `agent validate` and `agent serve` (a pool's
//! directory). Nothing outside the directory is read.

use std::path::{Component, Path, PathBuf};

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
