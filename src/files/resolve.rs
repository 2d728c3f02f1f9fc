//! Root-confined path resolution.
//!
//! A config path names a place in the target system. It is resolved inside the target root
//! (`--root`): symlinks are followed on every element but the last; on the root filesystem an
//! absolute link target is re-rooted (a link to `/etc` means `<root>/etc`) and `..` stops at
//! the root; on any other mounted filesystem (the deepest config filesystem whose mount path
//! contains the entry's path) following a link or `..` out of that filesystem is an error.
//!
//! Resolution walks the existing tree with `lstat`/`readlink`, one element at a time, with a
//! hop limit; elements that do not exist yet are taken literally (they will be created as
//! directories). The result names the place by its *logical* path (inside the root), which is
//! also the key used to detect two entries that resolve to the same place.

use std::collections::HashSet;
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};

/// Symlinks followed for one path before giving up (the kernel's own limit).
pub const MAX_HOPS: usize = 40;

/// The target root and the mount paths of the config's filesystems.
#[derive(Debug)]
pub struct Root {
    pub host: PathBuf,
    /// Mount paths of the config's filesystems as element lists ("/" excluded).
    mounts: Vec<Vec<String>>,
    /// Host paths seen to be real directories (saves an lstat per element per entry);
    /// cleared whenever the stage removes a node.
    known_dirs: Mutex<HashSet<PathBuf>>,
}

/// Where a config path lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Logical elements of the parent directory, all existing directories or missing.
    pub parent: Vec<String>,
    /// The last element, not followed.
    pub name: String,
}

impl Resolved {
    /// The logical path inside the root, e.g. `/etc/hostname`.
    pub fn logical(&self) -> String {
        logical(self.parent.iter().chain(std::iter::once(&self.name)))
    }
}

/// Joins elements into an absolute logical path.
pub fn logical<'a>(elems: impl IntoIterator<Item = &'a String>) -> String {
    let mut s = String::new();
    for e in elems {
        s.push('/');
        s.push_str(e);
    }
    if s.is_empty() { "/".into() } else { s }
}

/// Splits a path into its normal elements (`.` and empty ones dropped, `..` kept).
pub fn elements(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|e| !e.is_empty() && *e != ".")
        .map(str::to_string)
        .collect()
}

impl Root {
    pub fn new(host: impl Into<PathBuf>, mount_paths: &[String]) -> Self {
        let mut mounts: Vec<Vec<String>> = mount_paths
            .iter()
            .map(|p| elements(p))
            .filter(|e| !e.is_empty())
            .collect();
        mounts.sort();
        mounts.dedup();
        Root {
            host: host.into(),
            mounts,
            known_dirs: Mutex::new(HashSet::new()),
        }
    }

    fn is_known_dir(&self, p: &Path) -> bool {
        self.known_dirs.lock().is_ok_and(|k| k.contains(p))
    }

    fn remember_dir(&self, p: PathBuf) {
        if let Ok(mut k) = self.known_dirs.lock() {
            k.insert(p);
        }
    }

    /// Forgets what is known about directories (after removing something).
    pub fn forget_dirs(&self) {
        if let Ok(mut k) = self.known_dirs.lock() {
            k.clear();
        }
    }

    /// The host path of logical elements.
    pub fn host_path<S: AsRef<str>>(&self, elems: &[S]) -> PathBuf {
        let mut p = self.host.clone();
        for e in elems {
            p.push(e.as_ref());
        }
        p
    }

    /// The mount (as elements) of the filesystem holding `elems`: the deepest config mount
    /// path that contains it, or the root (empty).
    pub fn filesystem_of(&self, elems: &[String]) -> Vec<String> {
        self.mounts
            .iter()
            .filter(|m| elems.starts_with(m))
            .max_by_key(|m| m.len())
            .cloned()
            .unwrap_or_default()
    }

    /// Resolves a config path (absolute) to its place inside the root.
    pub fn resolve(&self, path: &str) -> Result<Resolved> {
        self.resolve_memo(path, None)
    }

    /// [`Root::resolve`] for many paths while nothing is created or removed: `missing`
    /// remembers the host paths found missing, so the elements they share are looked at
    /// once (10,000 files under one new directory: one lstat, not 10,000).
    pub fn resolve_all<'p>(
        &self,
        paths: impl IntoIterator<Item = &'p str>,
    ) -> Result<Vec<Resolved>> {
        let mut missing = HashSet::new();
        paths
            .into_iter()
            .map(|p| self.resolve_memo(p, Some(&mut missing)))
            .collect()
    }

    fn resolve_memo(&self, path: &str, missing: Option<&mut HashSet<PathBuf>>) -> Result<Resolved> {
        // What no system call would take, said before anything is written (the walk does not
        // look below a missing element, so it would not find out).
        if path.contains('\0') {
            bail!("{path:?}: a path cannot contain a NUL byte");
        }
        let limit = nix::libc::PATH_MAX as usize;
        let n = self.host.as_os_str().len() + path.len();
        if n >= limit {
            bail!(
                "{path}: too long: {n} bytes under the root {} (the system's limit is {limit})",
                self.host.display()
            );
        }
        let mut elems = elements(path);
        if elems.iter().any(|e| e == "..") {
            bail!("{path}: path is not normalised");
        }
        let Some(name) = elems.pop() else {
            bail!("{path}: the root directory itself cannot be an entry");
        };
        let fs = self.filesystem_of(&{
            let mut all = elems.clone();
            all.push(name.clone());
            all
        });
        let parent = self.resolve_dir(path, elems, &fs, missing)?;
        Ok(Resolved { parent, name })
    }

    /// Resolves the directory elements `queue` (following every symlink) for `path`, confined
    /// to the filesystem mounted at `fs` (empty: the root filesystem).
    ///
    /// Below a missing element nothing exists: it is not looked at (until a `..` of a link
    /// target climbs back above it). `missing` (see [`Root::resolve_all`]) also remembers
    /// missing paths across calls.
    fn resolve_dir(
        &self,
        path: &str,
        queue: Vec<String>,
        fs: &[String],
        mut missing: Option<&mut HashSet<PathBuf>>,
    ) -> Result<Vec<String>> {
        let fs_name = logical(fs.iter());
        let mut queue: VecDeque<String> = queue.into();
        let mut cur: Vec<String> = Vec::new();
        let mut hops = 0;
        // The depth of the first missing element of `cur`, if any.
        let mut missing_at: Option<usize> = None;
        // Once the walk has entered the filesystem it may not leave it again.
        let mut inside = fs.is_empty();
        while let Some(e) = queue.pop_front() {
            if e == ".." {
                cur.pop();
                if missing_at.is_some_and(|m| cur.len() < m) {
                    missing_at = None;
                }
                if inside && !cur.starts_with(fs) {
                    bail!("{path}: \"..\" leaves the filesystem mounted at {fs_name}");
                }
                continue;
            }
            cur.push(e);
            if !inside && cur.as_slice() == fs {
                inside = true;
            }
            if missing_at.is_some() {
                continue;
            }
            let host = self.host_path(&cur);
            if self.is_known_dir(&host) {
                continue;
            }
            if missing.as_ref().is_some_and(|m| m.contains(&host)) {
                missing_at = Some(cur.len());
                continue;
            }
            let md = match std::fs::symlink_metadata(&host) {
                Ok(md) => md,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    missing_at = Some(cur.len());
                    if let Some(m) = missing.as_mut() {
                        m.insert(host);
                    }
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("inspecting {}", host.display())),
            };
            let ft = md.file_type();
            if ft.is_dir() {
                self.remember_dir(host);
                continue;
            }
            if !ft.is_symlink() {
                bail!(
                    "{path}: {} is a {} and not a directory",
                    logical(cur.iter()),
                    kind_name(&ft)
                );
            }
            hops += 1;
            if hops > MAX_HOPS {
                bail!("{path}: more than {MAX_HOPS} symbolic links (a loop?)");
            }
            let target = std::fs::read_link(&host)
                .with_context(|| format!("reading link {}", host.display()))?;
            let target = target
                .to_str()
                .with_context(|| format!("link {} has a non-UTF-8 target", host.display()))?
                .to_string();
            let link_at = logical(cur.iter());
            cur.pop();
            if target.starts_with('/') {
                cur.clear();
            }
            if !fs.is_empty() {
                // The lexical destination of this link must stay inside the filesystem.
                let mut dest = cur.clone();
                for t in elements(&target) {
                    if t == ".." {
                        if dest.pop().is_none() || !dest.starts_with(fs) {
                            bail!(
                                "{path}: symlink {link_at} -> {target} leaves the filesystem mounted at {fs_name}"
                            );
                        }
                    } else {
                        dest.push(t);
                    }
                }
                if !dest.starts_with(fs) {
                    bail!(
                        "{path}: symlink {link_at} -> {target} leaves the filesystem mounted at {fs_name}"
                    );
                }
            }
            for t in elements(&target).into_iter().rev() {
                queue.push_front(t);
            }
        }
        Ok(cur)
    }

    /// Creates the missing directories of `parent` (mode 0755, root-owned); returns the
    /// logical paths created, shallowest first.
    pub fn create_parents(&self, parent: &[String]) -> Result<Vec<String>> {
        let mut created = Vec::new();
        for i in 1..=parent.len() {
            let host = self.host_path(&parent[..i]);
            if self.is_known_dir(&host) {
                continue;
            }
            match std::fs::symlink_metadata(&host) {
                Ok(md) if md.is_dir() => {
                    self.remember_dir(host);
                    continue;
                }
                Ok(_) => bail!("{} exists and is not a directory", host.display()),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    match nix::unistd::mkdir(&host, nix::sys::stat::Mode::from_bits_truncate(0o755))
                    {
                        Ok(()) => {}
                        // Another writer got there first: fine if it is a directory.
                        Err(nix::errno::Errno::EEXIST) if host.is_dir() => continue,
                        Err(e) => {
                            return Err(e)
                                .with_context(|| format!("creating directory {}", host.display()));
                        }
                    }
                    // mkdir applies the umask: set the mode explicitly.
                    std::fs::set_permissions(
                        &host,
                        std::os::unix::fs::PermissionsExt::from_mode(0o755),
                    )
                    .with_context(|| format!("setting mode of {}", host.display()))?;
                    self.remember_dir(host);
                    created.push(logical(parent[..i].iter()));
                }
                Err(e) => return Err(e).with_context(|| format!("inspecting {}", host.display())),
            }
        }
        Ok(created)
    }
}

/// A short name for a node kind, for messages.
pub fn kind_name(ft: &std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symbolic link"
    } else if ft.is_file() {
        "regular file"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

/// Whether `p` is a mount point (its device differs from its parent's).
pub fn is_mount_point(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Some(parent)) = (std::fs::symlink_metadata(p), p.parent()) else {
        return false;
    };
    std::fs::symlink_metadata(parent).is_ok_and(|b| a.dev() != b.dev() || a.ino() == b.ino())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "agent-resolve-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn nul_bytes_and_overlong_paths_are_errors_even_below_missing_directories() {
        let d = tmp("bad-paths");
        let r = Root::new(&d, &[]);
        let e = r.resolve_all(["/new/a\0b/f"]).unwrap_err().to_string();
        assert!(e.contains("NUL"), "{e}");
        let long = format!("/new/{}/f", "x/".repeat(2100));
        let e = r.resolve_all([long.as_str()]).unwrap_err().to_string();
        assert!(e.contains("too long"), "{e}");
        assert!(r.resolve("/new/dir/f").is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn follows_parent_links_inside_root() {
        let d = tmp("parent");
        std::fs::create_dir_all(d.join("real/etc")).unwrap();
        symlink("/real/etc", d.join("etc")).unwrap();
        symlink("../real", d.join("rel")).unwrap();
        let r = Root::new(&d, &[]);
        assert_eq!(r.resolve("/etc/x").unwrap().logical(), "/real/etc/x");
        assert_eq!(r.resolve("/rel/etc/x").unwrap().logical(), "/real/etc/x");
        // The last element is never followed.
        assert_eq!(r.resolve("/etc").unwrap().logical(), "/etc");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn dotdot_stops_at_root() {
        let d = tmp("dotdot");
        symlink("../../../../..", d.join("up")).unwrap();
        symlink("/../../tmp", d.join("abs")).unwrap();
        let r = Root::new(&d, &[]);
        assert_eq!(r.resolve("/up/etc/x").unwrap().logical(), "/etc/x");
        assert_eq!(r.resolve("/abs/x").unwrap().logical(), "/tmp/x");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn refuses_leaving_a_mounted_filesystem() {
        let d = tmp("leave");
        std::fs::create_dir_all(d.join("var/lib")).unwrap();
        std::fs::create_dir_all(d.join("etc")).unwrap();
        symlink("/etc", d.join("var/abs")).unwrap();
        symlink("../../etc", d.join("var/lib/rel")).unwrap();
        symlink("/var/lib", d.join("var/inside")).unwrap();
        symlink("lib", d.join("var/relinside")).unwrap();
        let r = Root::new(&d, &["/var".into()]);
        let e = r.resolve("/var/abs/x").unwrap_err().to_string();
        assert!(e.contains("leaves the filesystem mounted at /var"), "{e}");
        assert!(r.resolve("/var/lib/rel/x").is_err());
        assert_eq!(r.resolve("/var/inside/x").unwrap().logical(), "/var/lib/x");
        assert_eq!(
            r.resolve("/var/relinside/x").unwrap().logical(),
            "/var/lib/x"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn non_directory_and_loops() {
        let d = tmp("nondir");
        std::fs::write(d.join("f"), "x").unwrap();
        symlink("loop", d.join("loop")).unwrap();
        let r = Root::new(&d, &[]);
        assert!(
            r.resolve("/f/x")
                .unwrap_err()
                .to_string()
                .contains("not a directory")
        );
        assert!(r.resolve("/loop/x").unwrap_err().to_string().contains("40"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn filesystem_is_the_deepest_mount() {
        let r = Root::new("/x", &["/var".into(), "/var/lib".into(), "/".into()]);
        assert_eq!(
            r.filesystem_of(&elements("/var/lib/a")),
            elements("/var/lib")
        );
        assert_eq!(r.filesystem_of(&elements("/var/x")), elements("/var"));
        assert!(r.filesystem_of(&elements("/variable")).is_empty());
    }
}
