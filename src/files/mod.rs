//! Writing into the target root: root-confined path resolution (`resolve`), the node writers
//! for files, directories and links (`nodes`), owners from the target's own user database
//! (`owners`), mounting the config's filesystems (`mounts`), systemd units (`systemd`), users
//! and groups (`passwd`), kernel arguments (`kargs`), the LUKS volumes' key files and
//! `/etc/crypttab` (`luks`), SELinux relabelling (`selinux`) and the result file (`result`).

pub mod kargs;
pub mod luks;
pub mod mounts;
pub mod nodes;
pub mod owners;
pub mod passwd;
pub mod resolve;
pub mod result;
pub mod selinux;
pub mod systemd;

use std::path::Path;
use std::sync::Mutex;

use anyhow::Result;

use crate::fetch::Fetcher;
use owners::Owners;
use resolve::Root;

/// Writes nodes into one target root and remembers what it touched.
pub struct Writer<'a> {
    pub root: Root,
    pub fetcher: &'a Fetcher,
    owners: Option<Owners>,
    /// Logical paths created or changed (for SELinux relabelling); writers may run in
    /// parallel, hence the lock.
    touched: Mutex<Vec<String>>,
    /// Directories the stage created as mount points (logical paths): those inside a
    /// user's home are given to that user once the user exists.
    mount_dirs: Vec<String>,
    /// The process's umask, read once (from /proc/self/status, without changing it).
    umask: std::sync::OnceLock<u32>,
}

impl<'a> Writer<'a> {
    pub fn new(root: Root, fetcher: &'a Fetcher) -> Self {
        Writer {
            root,
            fetcher,
            owners: None,
            touched: Mutex::new(Vec::new()),
            mount_dirs: Vec::new(),
            umask: std::sync::OnceLock::new(),
        }
    }

    /// The process's umask; 0o777 (nothing is assumed) when it cannot be read.
    pub(crate) fn umask(&self) -> u32 {
        *self.umask.get_or_init(|| {
            std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Umask:"))
                        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
                })
                .unwrap_or(0o777)
        })
    }

    /// Records the directories created as mount points (see `mounts::MountGuard`).
    pub fn set_mount_dirs(&mut self, dirs: Vec<String>) {
        self.mount_dirs = dirs;
    }

    pub fn host(&self) -> &Path {
        &self.root.host
    }

    /// The target's users and groups, read once (and again after `forget_owners`).
    pub fn owners(&mut self) -> Result<&Owners> {
        if self.owners.is_none() {
            self.owners = Some(Owners::load(&self.root)?);
        }
        Ok(self.owners.as_ref().expect("just loaded"))
    }

    /// Drops the cached user database (after users or groups changed).
    pub fn forget_owners(&mut self) {
        self.owners = None;
    }

    pub fn touch(&self, logical: String) {
        if let Ok(mut t) = self.touched.lock() {
            t.push(logical);
        }
    }

    /// Logical paths created or changed so far.
    pub fn touched(&self) -> Vec<String> {
        self.touched.lock().map(|t| t.clone()).unwrap_or_default()
    }
}
