//! The storage section: each type's rules (in the files beside this one) and the rules that
//! span types: a filesystem on a disk the config partitions or wipes, the one namespace of
//! files, directories and links, and a node whose path runs through a link of the config.

use std::collections::{HashMap, HashSet};

use super::common::{V, keyed, path_ok};
use super::{disks, filesystems, luks, nodes, raid};
use crate::config::diag::Path;
use crate::config::types::*;

pub(super) fn storage(v: &mut V, s: &Storage, p: &Path) {
    keyed(
        v,
        &p.key("disks"),
        &s.disks,
        "device",
        |d| &d.device,
        disks::disk,
    );
    keyed(v, &p.key("raid"), &s.raid, "name", |r| &r.name, raid::raid);
    keyed(v, &p.key("luks"), &s.luks, "name", |l| &l.name, luks::luks);
    let list = p.key("filesystems");
    keyed(
        v,
        &list,
        &s.filesystems,
        "device",
        |f| &f.device,
        filesystems::filesystem,
    );
    filesystems_on_disks(v, s, &list);

    // Files, directories and links share one namespace.
    let mut seen: HashMap<&str, Path> = HashMap::new();
    for (list, i, path) in node_paths(s) {
        let np = p.key(list).index(i);
        if let Err(e) = path_ok(path) {
            v.err(np.key("path"), e);
        } else if let Some(prev) = seen.get(path) {
            v.err(
                np.key("path"),
                format!("duplicate path {path:?} (also at {prev})"),
            );
        } else {
            seen.insert(path, np);
        }
    }
    let links: HashSet<&str> = s.links.iter().map(|l| l.path.as_str()).collect();
    let dirs: HashSet<&str> = s.directories.iter().map(|d| d.path.as_str()).collect();
    for (i, f) in s.files.iter().enumerate() {
        crate::work::add(1);
        let fp = p.key("files").index(i);
        through_link(v, &links, &f.path, &fp, "file");
        nodes::file(v, f, &fp);
    }
    for (i, d) in s.directories.iter().enumerate() {
        let dp = p.key("directories").index(i);
        through_link(v, &links, &d.path, &dp, "directory");
        nodes::directory(v, d, &dp);
    }
    for (i, l) in s.links.iter().enumerate() {
        let lp = p.key("links").index(i);
        through_link(v, &links, &l.path, &lp, "link");
        nodes::link(v, l, &lp, &dirs);
    }
}

/// Every file, directory and link path, in that order, with its list's key and its index.
pub(super) fn node_paths(s: &Storage) -> impl Iterator<Item = (&'static str, usize, &str)> {
    let files = s.files.iter().map(|f| ("files", f.path.as_str()));
    let dirs = s
        .directories
        .iter()
        .map(|d| ("directories", d.path.as_str()));
    let links = s.links.iter().map(|l| ("links", l.path.as_str()));
    files
        .enumerate()
        .chain(dirs.enumerate())
        .chain(links.enumerate())
        .map(|(i, (list, path))| (list, i, path))
}

/// A filesystem on a whole disk the config also partitions or wipes: a warning at its device.
fn filesystems_on_disks(v: &mut V, s: &Storage, list: &Path) {
    let disks: HashMap<&str, &Disk> = s.disks.iter().map(|d| (d.device.as_str(), d)).collect();
    for (i, f) in s.filesystems.iter().enumerate() {
        if let Some(d) = disks.get(f.device.as_str()) {
            let dp = list.index(i).key("device");
            if !d.partitions.is_empty() {
                v.warn(dp, "filesystem overwrites partitioned device");
            } else if f.wipe_filesystem != Some(true) && d.wipe_table == Some(true) {
                v.warn(
                    dp,
                    "device matches disk with wipeTable enabled; filesystem will be wiped",
                );
            }
        }
    }
}

/// An error at `np` when `path` runs through one of the config's `links` (the first found,
/// from the deepest parent up).
fn through_link(v: &mut V, links: &HashSet<&str>, path: &str, np: &Path, kind: &str) {
    if links.is_empty() {
        return;
    }
    let mut cur = path;
    while let Some(idx) = cur.rfind('/') {
        cur = &cur[..idx];
        if cur.is_empty() {
            break;
        }
        if links.contains(cur) {
            v.err(
                np.clone(),
                format!("{kind} path includes link in config: it runs through {cur:?}"),
            );
            break;
        }
    }
}
