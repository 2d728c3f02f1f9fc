//! Mounts that are undone: a list of mounted filesystems unmounted deepest first, explicitly
//! with [`Mounts::close`] or from `Drop` after a failure. Each is unmounted through the
//! descriptor of its mount point's parent when it has one (so a directory swapped for a link
//! meanwhile cannot make it unmount something else), by path (`UMOUNT_NOFOLLOW`) otherwise.
//!
//! Below its two users: the files stage's mounts under the target root
//! ([`crate::files::mounts`]) and a platform's read-only config drive
//! ([`crate::platform::drive`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use log::{info, warn};
use nix::mount::MntFlags;
use sys_mount::{Mount, MountFlags};

/// Filesystems mounted, shallowest first; unmounted deepest first on close or drop.
#[derive(Default)]
pub struct Mounts {
    mounted: Vec<PathBuf>,
    /// For each of `mounted`, the mount point's parent directory (opened without following
    /// links) and the mount point's name, when the mounter had them. (The parent, not the
    /// mount itself: a descriptor inside the mount would keep it busy.)
    parents: Vec<Option<(OwnedFd, String)>>,
}

impl Mounts {
    /// Records a mount made at `target`, to be unmounted through `parent` when given.
    pub fn push(&mut self, target: PathBuf, parent: Option<(OwnedFd, String)>) {
        self.mounted.push(target);
        self.parents.push(parent);
    }

    /// Mounts `device` (filesystem type `fstype`, filesystem options `data`) read-only,
    /// nosuid, nodev and noexec at the existing directory `target`, e.g. a platform's config
    /// drive; unmounted on close or drop.
    pub fn mount_readonly(
        device: &Path,
        fstype: &str,
        data: &str,
        target: &Path,
    ) -> Result<Mounts> {
        let mut b = Mount::builder()
            .flags(MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC)
            .fstype(fstype);
        if !data.is_empty() {
            b = b.data(data);
        }
        let m = b.mount(device, target).with_context(|| {
            format!(
                "mounting {} ({fstype}) read-only at {}",
                device.display(),
                target.display()
            )
        })?;
        // `Mount` does not unmount on drop: the list owns unmounting.
        drop(m);
        info!(
            "mounted {} ({fstype}) read-only at {}",
            device.display(),
            target.display()
        );
        let mut mounts = Mounts::default();
        mounts.push(target.to_path_buf(), None);
        Ok(mounts)
    }

    /// Mount points, shallowest first.
    pub fn mounted(&self) -> &[PathBuf] {
        &self.mounted
    }

    /// Unmounts everything, deepest first; reports the first failure after trying all.
    pub fn close(mut self) -> Result<()> {
        self.unmount_all()
    }

    fn unmount_all(&mut self) -> Result<()> {
        let mut first: Option<anyhow::Error> = None;
        while let Some(p) = self.mounted.pop() {
            let at = self.parents.pop().flatten();
            let by_fd = at
                .as_ref()
                .map(|(fd, name)| PathBuf::from(format!("/proc/self/fd/{}/{name}", fd.as_raw_fd())))
                .filter(|p| p.exists());
            // A probe (blkid) or a child forked elsewhere can hold it busy for a moment.
            // (nix's flag: sys-mount's `UnmountFlags::NOFOLLOW` is O_NOFOLLOW, which umount2
            // refuses.)
            let r = runtime::util::retry_while_errno(nix::libc::EBUSY, || {
                match &by_fd {
                    Some(f) => nix::mount::umount2(f, MntFlags::empty()),
                    None => nix::mount::umount2(&p, MntFlags::UMOUNT_NOFOLLOW),
                }
                .map_err(std::io::Error::from)
            });
            drop(at);
            if let Err(e) = r {
                let err = anyhow::anyhow!("unmounting {}: {e}", p.display());
                warn!("{err}");
                first.get_or_insert(err);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        if !self.mounted.is_empty() {
            warn!("unmounting filesystems after a failure");
            let _ = self.unmount_all();
        }
    }
}
