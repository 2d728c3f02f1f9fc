//! Which node a config device path names: a node or link that exists, or a partition that a
//! plan creates, recreates or resizes (its node, or a `/dev/disk/by-partlabel/` or
//! `by-partuuid/` link resolved against the planned table: no udev needed); and whether the
//! plan makes a device (a changed partition, or an array or volume it creates or opens), which
//! decides whether what is on it is judged now or once it exists.
//!
//! [`Devices`] is computed once from the disks' plans and handed to each layer (RAID, LUKS,
//! filesystems), which adds the devices it makes itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use super::kernel;
use super::plan::{Action, DiskPlan};

/// Waits (at most `timeout`) for a config device path and resolves it to its node.
pub fn resolve(path: &str, timeout: Duration) -> Result<PathBuf> {
    let p = PathBuf::from(path);
    kernel::wait_for(std::slice::from_ref(&p), timeout)?;
    std::fs::canonicalize(&p).with_context(|| format!("resolving {path}"))
}

/// Resolves a config device path to its node, which must be a block device.
pub fn block_device(path: &str) -> Result<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let dev = std::fs::canonicalize(path).with_context(|| format!("resolving {path}"))?;
    let md = std::fs::metadata(&dev).with_context(|| format!("reading {}", dev.display()))?;
    if !md.file_type().is_block_device() {
        bail!("{path} is not a block device");
    }
    Ok(dev)
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

/// One partition of a planned disk.
#[derive(Debug, Clone)]
struct Planned {
    node: PathBuf,
    /// The plan creates, recreates or resizes it.
    changed: bool,
    /// Its name and GUID in the planned table (none when the plan deletes it).
    name: Option<String>,
    guid: Option<String>,
}

/// The devices of a plan: the partitions of its disks as planned, in disk and table order, and
/// the arrays and volumes it creates or opens (they exist, or hold their final contents, only
/// once that is done).
#[derive(Debug, Clone, Default)]
pub struct Devices {
    parts: Vec<Planned>,
    made: Vec<PathBuf>,
}

impl Devices {
    /// The partitions of the planned disks, each given by its kernel name ("loop3") and plan.
    pub fn planned<'a>(disks: impl IntoIterator<Item = (&'a str, &'a DiskPlan)>) -> Devices {
        let parts = disks
            .into_iter()
            .flat_map(|(name, plan)| {
                plan.parts.iter().map(move |p| Planned {
                    node: PathBuf::from("/dev").join(kernel::part_name(name, p.number)),
                    changed: plan.changes()
                        && !matches!(p.action, Action::Keep | Action::Unlisted | Action::Absent),
                    name: p.new.as_ref().map(|e| e.name.clone()),
                    guid: p.new.as_ref().map(|e| e.guid.to_string()),
                })
            })
            .collect();
        Devices {
            parts,
            made: Vec::new(),
        }
    }

    /// Records an array or volume that the plan creates or opens, named by its path.
    pub fn add_made(&mut self, path: PathBuf) {
        self.made.push(path);
    }

    /// The planned partition that a device path names: its node path (also when the node does
    /// not exist yet), or a /dev/disk/by-partlabel or by-partuuid link resolved against the
    /// planned table.
    fn partition(&self, device: &str) -> Option<&Planned> {
        let canon = std::fs::canonicalize(device).ok();
        let by = |prefix: &str| device.strip_prefix(prefix).map(udev_unescape);
        let (plabel, puuid) = (by("/dev/disk/by-partlabel/"), by("/dev/disk/by-partuuid/"));
        self.parts.iter().find(|p| {
            let by_link = canon.is_none()
                && p.name.is_some()
                && (plabel.is_some() && plabel == p.name
                    || puuid.as_deref().is_some_and(|u| {
                        p.guid.as_deref().is_some_and(|g| u.eq_ignore_ascii_case(g))
                    }));
            canon.as_deref() == Some(p.node.as_path()) || Path::new(device) == p.node || by_link
        })
    }

    /// Whether the device is a partition that the plan creates, recreates or resizes, or one
    /// whose node only appears once the partitioning has told the kernel about it.
    pub fn touched_by_partitioning(&self, device: &str) -> bool {
        self.partition(device)
            .is_some_and(|p| p.changed || !Path::new(device).exists() || !p.node.exists())
    }

    /// Whether the plan makes the device: touched by the partitioning, or an array or volume
    /// recorded with [`Devices::add_made`].
    pub fn made_by_plan(&self, device: &str) -> bool {
        self.touched_by_partitioning(device) || self.made.iter().any(|m| m == Path::new(device))
    }

    /// Resolves a device: an existing path, else a planned partition's node, else waits (at
    /// most `timeout`).
    pub fn resolve(&self, device: &str, timeout: Duration) -> Result<PathBuf> {
        if !Path::new(device).exists()
            && let Some(p) = self.partition(device)
        {
            kernel::wait_for(std::slice::from_ref(&p.node), timeout)?;
            return Ok(p.node.clone());
        }
        resolve(device, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A disk whose one new partition is named with a space; no node of it exists (the name is
    /// made up), so it counts as made by the partitioning however it is named.
    #[test]
    fn planned_partitions_and_made_devices() {
        use crate::blockdev::gpt::Geometry;
        use crate::blockdev::plan::{Spec, plan};
        let guid = uuid::Uuid::from_u128(0xabcdef);
        let spec = Spec {
            number: 1,
            label: Some("my data".into()),
            size_mib: Some(10),
            guid: Some(guid),
            should_exist: true,
            ..Default::default()
        };
        let g = Geometry::new(512, 100 << 20).unwrap();
        let disk = plan(None, &g, false, &[spec], &mut uuid::Uuid::new_v4).unwrap();
        let mut d = Devices::planned([("agentfake9", &disk)]);
        let upper = guid.to_string().to_uppercase();
        for named in [
            "/dev/agentfake9p1".to_string(),
            "/dev/disk/by-partlabel/my\\x20data".into(),
            format!("/dev/disk/by-partuuid/{upper}"),
        ] {
            assert!(d.touched_by_partitioning(&named), "{named}");
            assert!(d.made_by_plan(&named), "{named}");
        }
        for other in [
            "/dev/agentfake9p2",
            "/dev/disk/by-partlabel/my data2",
            "/dev/disk/by-partuuid/00000000-0000-0000-0000-000000000001",
            "/dev/md/data",
        ] {
            assert!(!d.made_by_plan(other), "{other}");
        }
        d.add_made(PathBuf::from("/dev/md/data"));
        assert!(d.made_by_plan("/dev/md/data"));
        assert!(!d.touched_by_partitioning("/dev/md/data"));
    }

    #[test]
    fn udev_escapes() {
        assert_eq!(udev_unescape("EFI\\x20System"), "EFI System");
        assert_eq!(udev_unescape("plain\\xZZ"), "plain\\xZZ");
    }
}
