//! Filesystems.

use super::common::{V, hex_len, is_uuid, path_ok};
use crate::config::diag::Path;
use crate::config::types::*;

const FS_FORMATS: &[&str] = &["ext4", "xfs", "btrfs", "vfat", "swap", "none"];

fn label_max(format: &str) -> Option<usize> {
    match format {
        "xfs" => Some(12),
        "vfat" => Some(11),
        "swap" => Some(15),
        "btrfs" => Some(256),
        "ext4" => Some(16),
        _ => None,
    }
}

pub(super) fn filesystem(v: &mut V, f: &Filesystem, p: &Path) {
    if let Err(e) = path_ok(&f.device) {
        v.err(p.key("device"), e);
    }
    match f.format.as_deref() {
        Some(fmt) if !fmt.is_empty() => {
            if !FS_FORMATS.contains(&fmt) {
                v.err(
                    p.key("format"),
                    format!("unsupported filesystem format {fmt:?}"),
                );
            }
            if let (Some(l), Some(max)) = (&f.label, label_max(fmt))
                && l.len() > max
            {
                v.err(
                    p.key("label"),
                    format!("{fmt} labels are limited to {max} characters (bytes)"),
                );
            }
            if let Some(u) = &f.uuid {
                let ok = if fmt == "vfat" {
                    let h = u.replace('-', "");
                    hex_len(&h, 8)
                } else {
                    is_uuid(u)
                };
                if !ok {
                    v.warn(
                        p.key("uuid"),
                        format!("{u:?} is not a {fmt} UUID: mkfs will refuse it"),
                    );
                }
            }
        }
        _ => {
            let set = |x: &Option<String>| x.as_deref().is_some_and(|s| !s.is_empty());
            let others = set(&f.path)
                || set(&f.label)
                || set(&f.uuid)
                || f.wipe_filesystem == Some(true)
                || !f.options.is_empty()
                || !f.mount_options.is_empty();
            if others {
                v.err(
                    p.key("format"),
                    "format is required when path, label, uuid, wipeFilesystem, options or mountOptions are set",
                );
            }
        }
    }
    if let Some(mp) = &f.path
        && let Err(e) = path_ok(mp)
    {
        v.err(p.key("path"), e);
    }
}
