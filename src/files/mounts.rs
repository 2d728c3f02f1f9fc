//! Mounting the config's filesystems under the target root for the files stage: shallowest
//! first with their `mountOptions`, through a guard that unmounts deepest first (explicitly
//! with `close()`, or from `Drop` on failure: [`crate::mounts::Mounts`]). The directories created as mount points are
//! remembered: like Ignition, the files stage gives those inside a user's home to that user.

use std::os::fd::AsRawFd;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use log::info;
use sys_mount::{Mount, MountFlags};

use super::resolve::{Root, elements};
use crate::mounts::Mounts;
use spec::config::types::Filesystem;

/// Filesystems mounted by the stage; unmounts them (deepest first) on close or drop.
pub struct MountGuard {
    mounts: Mounts,
    /// Logical paths of the directories created as (or on the way to) mount points.
    created: Vec<String>,
}

/// Splits `mountOptions` into mount flags and the data string for the filesystem.
pub fn split_options(opts: &[String]) -> (MountFlags, String) {
    let mut flags = MountFlags::empty();
    let mut data: Vec<&str> = Vec::new();
    for o in opts
        .iter()
        .flat_map(|o| o.split(','))
        .filter(|o| !o.is_empty())
    {
        match o {
            "ro" => flags |= MountFlags::RDONLY,
            "rw" => flags &= !MountFlags::RDONLY,
            "nosuid" => flags |= MountFlags::NOSUID,
            "nodev" => flags |= MountFlags::NODEV,
            "noexec" => flags |= MountFlags::NOEXEC,
            "sync" => flags |= MountFlags::SYNCHRONOUS,
            "dirsync" => flags |= MountFlags::DIRSYNC,
            "noatime" => flags |= MountFlags::NOATIME,
            "nodiratime" => flags |= MountFlags::NODIRATIME,
            "relatime" => flags |= MountFlags::RELATIME,
            "strictatime" => flags |= MountFlags::STRICTATIME,
            "suid" | "dev" | "exec" | "async" | "atime" | "diratime" | "defaults" => {}
            other => data.push(other),
        }
    }
    (flags, data.join(","))
}

/// Whether the files stage mounts `f`: it has a `path` and a format that can be mounted. Like
/// Ignition's mount stage, a `swap` or `none` filesystem is never mounted, whatever its path.
pub fn mountable(f: &Filesystem) -> bool {
    f.path.as_deref().is_some_and(|p| !p.is_empty())
        && f.format
            .as_deref()
            .is_some_and(|t| !matches!(t, "" | "swap" | "none"))
}

impl MountGuard {
    /// Mounts every filesystem that has a `path` (and a mountable format), shallowest first.
    /// A filesystem mounted on the root itself (`path: "/"`) makes `root` open it again, so
    /// that what follows is written into that filesystem, not into the directory under it.
    pub fn mount_all(root: &mut Root, filesystems: &[Filesystem]) -> Result<MountGuard> {
        let mut fss: Vec<&Filesystem> = filesystems.iter().filter(|f| mountable(f)).collect();
        fss.sort_by_key(|f| elements(f.path.as_deref().unwrap_or("/")).len());
        let mut guard = MountGuard {
            mounts: Mounts::default(),
            created: Vec::new(),
        };
        for f in fss {
            guard.mount_one(root, f)?;
            if elements(f.path.as_deref().unwrap_or("/")).is_empty() {
                root.reopen()?;
            }
        }
        Ok(guard)
    }

    fn mount_one(&mut self, root: &Root, f: &Filesystem) -> Result<()> {
        let path = f.path.as_deref().unwrap_or("/");
        let elems = elements(path);
        if elems.iter().any(|e| e == "..") {
            bail!("mount path {path} of {} is not normalised", f.device);
        }
        // The mount point must be reached through real directories only: it is opened from
        // the root's descriptor with no link followed (missing directories made on the way),
        // and the filesystem is mounted on that descriptor (`/proc/self/fd/N`), so no swap
        // of a directory for a link can move the mount out of the root.
        let dir = root
            .open_dir(&elems, true, &mut self.created)
            .with_context(|| format!("mount path {path} of {}", f.device))?
            .expect("missing directories are created");
        let target = root.host_path(&elems);
        let fd_path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        // Without /proc (never in an initramfs) the path, checked just now, is used.
        let mount_at = if fd_path.exists() { &fd_path } else { &target };
        let (flags, data) = split_options(&f.mount_options);
        let mut b = Mount::builder().flags(flags);
        if !data.is_empty() {
            b = b.data(&data);
        }
        let fstype = f
            .format
            .as_deref()
            .filter(|t| !t.is_empty() && *t != "none");
        if let Some(t) = fstype {
            b = b.fstype(t);
        }
        let m = b.mount(&f.device, mount_at).with_context(|| {
            format!(
                "mounting {} ({}) at {} with options {:?}",
                f.device,
                fstype.unwrap_or("auto"),
                target.display(),
                f.mount_options
            )
        })?;
        // `Mount` does not unmount on drop: the guard owns unmounting.
        drop(m);
        info!("mounted {} at {}", f.device, target.display());
        // The mount point's parent, reached as the mount point was (no link followed); none
        // for a filesystem mounted on the root itself.
        let at = elems.split_last().and_then(|(name, parent)| {
            let fd = root
                .open_dir(parent, false, &mut Vec::new())
                .ok()
                .flatten()?;
            Some((fd, name.clone()))
        });
        self.mounts.push(target, at);
        Ok(())
    }

    /// Mount points, shallowest first.
    pub fn mounted(&self) -> &[PathBuf] {
        self.mounts.mounted()
    }

    /// Logical paths of the directories this guard created for mount points, shallowest
    /// first (what Ignition's mount stage records as "notated directories").
    pub fn created_dirs(&self) -> &[String] {
        &self.created
    }

    /// Unmounts everything, deepest first; reports the first failure after trying all.
    pub fn close(self) -> Result<()> {
        self.mounts.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_split_into_flags_and_data() {
        let (f, d) = split_options(&["ro,noatime".into(), "discard".into(), "commit=30".into()]);
        assert!(f.contains(MountFlags::RDONLY | MountFlags::NOATIME));
        assert_eq!(d, "discard,commit=30");
        let (f, d) = split_options(&[]);
        assert!(f.is_empty() && d.is_empty());
    }

    #[test]
    fn swap_and_none_are_never_mounted() {
        let fs = |format: &str, path: Option<&str>| Filesystem {
            device: "/dev/x".into(),
            format: Some(format.into()),
            path: path.map(Into::into),
            ..Default::default()
        };
        assert!(mountable(&fs("ext4", Some("/var"))));
        assert!(!mountable(&fs("ext4", None)));
        assert!(!mountable(&fs("ext4", Some(""))));
        assert!(!mountable(&fs("swap", Some("/swap"))));
        assert!(!mountable(&fs("none", Some("/erased"))));
        assert!(!mountable(&fs("", Some("/x"))));
    }
}
