//! Disks and their partitions.

use std::collections::HashSet;

use super::common::{V, is_uuid, path_ok};
use crate::config::diag::Path;
use crate::config::types::*;

pub(super) fn disk(v: &mut V, d: &Disk, p: &Path) {
    if d.device.is_empty() {
        v.err(p.key("device"), "disk device is required");
    } else if path_ok(&d.device).is_err() {
        v.err(p.key("device"), "device must be an absolute path");
    }
    let pp = p.key("partitions");
    // Explicitly placed partitions (start given and not 0, size given) must not overlap.
    let placed: Vec<(usize, i64, i64)> = d
        .partitions
        .iter()
        .enumerate()
        .filter_map(|(j, x)| match (x.start_mib, x.size_mib) {
            (Some(s), Some(z)) if s > 0 => Some((j, s, z)),
            _ => None,
        })
        .collect();
    if let Some(j) = first_overlap(placed) {
        v.err(pp.index(j), "partitions overlap");
    }
    let mut before = Siblings {
        numbers: HashSet::new(),
        labels: HashSet::new(),
        has_not_exist: d.partitions.iter().any(|x| !x.should_exist()),
    };
    for (j, part) in d.partitions.iter().enumerate() {
        partition(v, part, &pp.index(j), &mut before);
    }
}

/// What a partition is checked against: the numbers and labels of the partitions listed
/// before it on its disk, and whether any partition of the disk has `shouldExist: false`.
struct Siblings<'d> {
    numbers: HashSet<i64>,
    labels: HashSet<&'d str>,
    has_not_exist: bool,
}

fn partition<'d>(v: &mut V, part: &'d Partition, p: &Path, before: &mut Siblings<'d>) {
    if part.num() < 0 {
        v.err(p.key("number"), "partition number must not be negative");
    }
    if part.num() != 0 && !before.numbers.insert(part.num()) {
        v.err(
            p.key("number"),
            format!("duplicate partition number {}", part.num()),
        );
    }
    if part.num() == 0 && part.label.is_none() {
        v.err(
            p.clone(),
            "a partition number >= 1 or a label must be specified",
        );
    }
    if part.num() == 0 && before.has_not_exist {
        v.err(
            p.key("number"),
            "partition number 0 is not allowed on a disk with shouldExist: false partitions",
        );
    }
    if let Some(l) = &part.label {
        if l.len() > 36 {
            v.err(
                p.key("label"),
                "partition labels may not exceed 36 characters (bytes)",
            );
        }
        if l.contains(':') {
            v.err(
                p.key("label"),
                "partition label may not contain ':' (sgdisk would truncate it there)",
            );
        }
        if !before.labels.insert(l.as_str()) {
            v.err(p.key("label"), format!("duplicate partition label {l:?}"));
        }
    }
    for (name, g) in [("guid", &part.guid), ("typeGuid", &part.type_guid)] {
        if let Some(g) = g
            && !g.is_empty()
            && !is_uuid(g)
        {
            v.err(p.key(name), format!("invalid GUID {g:?}"));
        }
    }
    for (name, x) in [("sizeMiB", part.size_mib), ("startMiB", part.start_mib)] {
        if x.is_some_and(|x| x < 0) {
            v.err(p.key(name), "must not be negative");
        }
    }
    if !part.should_exist() {
        if part.num() == 0 {
            v.err(
                p.key("number"),
                "a partition with shouldExist: false needs a number",
            );
        }
        let extra = part.label.is_some()
            || part.size_mib.is_some()
            || part.start_mib.is_some()
            || part.guid.as_deref().is_some_and(|g| !g.is_empty())
            || part.type_guid.as_deref().is_some_and(|g| !g.is_empty());
        if extra {
            v.err(
                p.clone(),
                "a partition with shouldExist: false may only set number and wipePartitionEntry",
            );
        }
    }
}

/// Of partitions placed at `(index, startMiB, sizeMiB)`, one that overlaps another (the later
/// in the list of an overlapping pair), found in n log n: sorted by start, each must begin
/// after the furthest end before it. (A size of 0 counts as 1 MiB here.)
fn first_overlap(mut placed: Vec<(usize, i64, i64)>) -> Option<usize> {
    placed.sort_by_key(|&(j, s, _)| (s, j));
    crate::work::add(placed.len());
    // The furthest end so far, and whose it is.
    let mut furthest: Option<(i64, usize)> = None;
    for (j, s, z) in placed {
        crate::work::add(1);
        let end = s.saturating_add(z.max(1));
        if let Some((fend, fj)) = furthest {
            if s < fend {
                return Some(j.max(fj));
            }
            if end > fend {
                furthest = Some((end, j));
            }
        } else {
            furthest = Some((end, j));
        }
    }
    None
}
