//! Butane's `--files-dir`: local files (`local`, `contents_local`, `ssh_authorized_keys_local`,
//! `storage.trees`) read from one directory for the pure `butane` crate, through its
//! `FilesDir` trait; used by `agent butane`, `agent validate` and `agent serve` (a pool's
//! directory). Nothing outside the directory is read.

use std::path::{Component, Path, PathBuf};

use butane::{LocalError, TreeEntry};

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
    fn read(&self, rel: &str, max: u64) -> Result<Vec<u8>, LocalError> {
        let p = self.resolve(rel)?;
        let shown = self.root.join(rel);
        read_regular(&p, &shown, max, true)
    }

    fn walk(&self, rel: &str, max_file: u64, max_total: u64) -> Result<Vec<TreeEntry>, LocalError> {
        let base = self.resolve(rel)?;
        let meta = std::fs::metadata(&base)
            .map_err(|e| format!("stat {}: {}", base.display(), os_msg(&e)))?;
        if !meta.is_dir() {
            return Err("tree local must be a directory".to_string().into());
        }
        // Go's filepath.Walk lstats the root: a root that is a symlink (to a directory, as
        // the stat above saw) is one symlink, not followed.
        if let Ok(l) = std::fs::symlink_metadata(&base)
            && l.file_type().is_symlink()
        {
            let target = std::fs::read_link(&base)
                .map_err(|e| format!("{}: {e}", base.display()))?
                .to_string_lossy()
                .into_owned();
            return Ok(vec![TreeEntry::Symlink {
                rel: String::new(),
                target,
            }]);
        }
        let mut out = vec![TreeEntry::Dir { rel: String::new() }];
        let mut walk = Walk {
            out: &mut out,
            max_file,
            max_total,
            total: 0,
        };
        walk.dir(&base, "", 0)?;
        Ok(out)
    }
}

fn os_msg(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        _ => e.to_string(),
    }
}

/// Reads `path` if it is a regular file of at most `max` bytes. Anything else is refused
/// before it is read: a FIFO (which would block), a device (`/dev/zero` reads forever), a
/// socket, a directory. The file is opened non-blocking and checked again through the
/// descriptor, so swapping in a FIFO after the check cannot block either; and no more than
/// `max` + 1 bytes are read even if the file grows meanwhile. `follow`: a symlink is followed
/// (as Butane does for `local`); without it a symlink is refused (a tree's files, found by
/// `lstat`, are opened as what was found).
fn read_regular(path: &Path, shown: &Path, max: u64, follow: bool) -> Result<Vec<u8>, LocalError> {
    use crate::util::OpenRegularError;
    use std::io::Read;
    let (f, len) = crate::util::open_regular(path, follow).map_err(|e| match e {
        OpenRegularError::Io(e) => format!("open {}: {}", shown.display(), os_msg(&e)),
        OpenRegularError::NotRegular(kind) => format!(
            "{}: {kind}: only regular files are read as local files",
            shown.display()
        ),
    })?;
    if len > max {
        return Err(LocalError::TooLarge {
            size: len,
            total: false,
        });
    }
    let mut data = Vec::with_capacity(usize::try_from(len.min(max)).unwrap_or(0));
    f.take(max.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| format!("read {}: {}", shown.display(), os_msg(&e)))?;
    if data.len() as u64 > max {
        return Err(LocalError::TooLarge {
            size: data.len() as u64,
            total: false,
        });
    }
    Ok(data)
}

/// One walk of a tree: its entries, and the bytes they hold so far (contents and paths)
/// against `max_total`.
struct Walk<'a> {
    out: &'a mut Vec<TreeEntry>,
    max_file: u64,
    max_total: u64,
    total: u64,
}

impl Walk<'_> {
    fn count(&mut self, n: usize) -> Result<(), LocalError> {
        self.total = self.total.saturating_add(n as u64);
        if self.total > self.max_total {
            return Err(LocalError::TooLarge {
                size: self.total,
                total: true,
            });
        }
        Ok(())
    }

    fn dir(&mut self, dir: &Path, prefix: &str, depth: usize) -> Result<(), LocalError> {
        use std::os::unix::fs::PermissionsExt;
        if depth > 64 {
            return Err(format!("{}: tree nested too deep", dir.display()).into());
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
            self.count(rel.len())?;
            let meta =
                std::fs::symlink_metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            let ft = meta.file_type();
            if ft.is_dir() {
                self.out.push(TreeEntry::Dir { rel: rel.clone() });
                self.dir(&p, &format!("{rel}/"), depth + 1)?;
            } else if ft.is_file() {
                let max = self.max_file.min(self.max_total.saturating_sub(self.total));
                let contents = match read_regular(&p, &p, max, false) {
                    Err(LocalError::TooLarge { size, .. }) if max < self.max_file => {
                        return Err(LocalError::TooLarge {
                            size: self.total.saturating_add(size),
                            total: true,
                        });
                    }
                    r => r?,
                };
                self.count(contents.len())?;
                self.out.push(TreeEntry::File {
                    rel,
                    contents,
                    executable: meta.permissions().mode() & 0o111 != 0,
                });
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                let target = target.to_string_lossy().into_owned();
                self.count(target.len())?;
                self.out.push(TreeEntry::Symlink { rel, target });
            } else {
                return Err(format!(
                    "{}: file type not supported (only regular files, directories and symlinks)",
                    p.display()
                )
                .into());
            }
        }
        Ok(())
    }
}
