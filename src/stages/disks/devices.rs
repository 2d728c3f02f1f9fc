//! The device map of the disks stage: which node a config device path names, including a
//! partition that the plan creates, recreates or resizes (its node, or a
//! `/dev/disk/by-partlabel/` or `by-partuuid/` link resolved against the planned table: no
//! udev needed), and whether the partitioning touches it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::blockdev::kernel;
use crate::blockdev::plan::{Action, DiskPlan};

/// One disk of the plan.
#[derive(Debug)]
pub struct DiskWork {
    /// As named in the config.
    pub path: String,
    /// The device node it resolves to.
    pub dev: PathBuf,
    /// Kernel name ("loop3").
    pub name: String,
    pub plan: DiskPlan,
}

/// Waits (at most `timeout`) for a config device path and resolves it to its node.
pub(super) fn resolve(path: &str, timeout: Duration) -> Result<PathBuf> {
    let p = PathBuf::from(path);
    kernel::wait_for(std::slice::from_ref(&p), timeout)?;
    std::fs::canonicalize(&p).with_context(|| format!("resolving {path}"))
}

/// Decodes udev's `\xHH` escapes in a /dev/disk/by-* link name.
fn udev_unescape(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && b.get(i + 1) == Some(&b'x')
            && let Some(h) = s.get(i + 2..i + 4)
            && let Ok(v) = u8::from_str_radix(h, 16)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The partition of a planned disk that a filesystem device names: its node path (also when the
/// node does not exist yet), or a /dev/disk/by-partlabel or by-partuuid link resolved against the
/// planned table (no udev needed). Returns the node and whether the plan changes that partition.
fn planned_partition(disks: &[DiskWork], device: &str) -> Option<(PathBuf, bool)> {
    let canon = std::fs::canonicalize(device).ok();
    let by = |prefix: &str| device.strip_prefix(prefix).map(udev_unescape);
    let (plabel, puuid) = (by("/dev/disk/by-partlabel/"), by("/dev/disk/by-partuuid/"));
    for d in disks {
        for p in &d.plan.parts {
            let node = PathBuf::from("/dev").join(kernel::part_name(&d.name, p.number));
            let by_link = canon.is_none()
                && p.new.as_ref().is_some_and(|e| {
                    plabel.as_deref() == Some(e.name.as_str())
                        || puuid
                            .as_deref()
                            .is_some_and(|u| u.eq_ignore_ascii_case(&e.guid.to_string()))
                });
            if canon.as_deref() == Some(node.as_path()) || Path::new(device) == node || by_link {
                let changed = d.plan.changes()
                    && !matches!(p.action, Action::Keep | Action::Unlisted | Action::Absent);
                return Some((node, changed));
            }
        }
    }
    None
}

/// Whether the filesystem device is a partition that the plan creates, recreates or resizes,
/// or one whose node only appears once the partitioning has told the kernel about it.
pub(super) fn touched_by_partitioning(disks: &[DiskWork], device: &str) -> bool {
    planned_partition(disks, device)
        .is_some_and(|(node, changed)| changed || !Path::new(device).exists() || !node.exists())
}

/// Resolves a filesystem device: an existing path, else a planned partition's node, else waits
/// (at most `timeout`).
pub(super) fn resolve_fs(disks: &[DiskWork], device: &str, timeout: Duration) -> Result<PathBuf> {
    if !Path::new(device).exists()
        && let Some((node, _)) = planned_partition(disks, device)
    {
        kernel::wait_for(std::slice::from_ref(&node), timeout)?;
        return Ok(node);
    }
    resolve(device, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udev_escapes() {
        assert_eq!(udev_unescape("EFI\\x20System"), "EFI System");
        assert_eq!(udev_unescape("plain\\xZZ"), "plain\\xZZ");
    }
}
