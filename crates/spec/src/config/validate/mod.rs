//! Semantic rules every config must satisfy, whatever its version: Ignition's rules
//! (README.md, "Where the agent differs from Ignition" lists where we are stricter).
//!
//! One function per type, as Ignition's per-type `Validate` methods, each taking the value and
//! the JSON path of that value: `ignition.rs` (the ignition section, and resources, which
//! storage uses too); storage in `disks.rs` (disks, partitions), `raid.rs`, `luks.rs` (with
//! clevis and tang), `filesystems.rs` and `nodes.rs` (files, directories, links), combined in
//! `storage.rs` with the rules that span storage types; `systemd.rs` (units, drop-ins);
//! `passwd.rs` (users, groups); here, kernel arguments and the one rule across sections (a
//! node at a unit's path). Rules that compare entries (duplicates, overlaps) stay with the
//! list that holds them, and hash or sort: validation stays linear in the config (`linear.rs`).

use std::collections::HashSet;

use super::diag::{Diagnostic, Path};
use super::types::*;
use common::{V, unique_entries};

mod common;
mod disks;
mod filesystems;
mod ignition;
mod luks;
mod nodes;
mod passwd;
mod raid;
mod storage;
mod systemd;

pub use common::{MAX_ID, is_uuid, path_ok};
pub use ignition::SCHEMES;
pub use systemd::UNIT_SUFFIXES;

pub fn validate(c: &Config) -> Vec<Diagnostic> {
    let mut v = V { out: Vec::new() };
    let root = Path::root();
    ignition::ignition(&mut v, &c.ignition, &root.key("ignition"));
    storage::storage(&mut v, &c.storage, &root.key("storage"));
    systemd::systemd(&mut v, &c.systemd, &root.key("systemd"));
    systemd_path_conflicts(&mut v, c, &root);
    passwd::passwd(&mut v, &c.passwd, &root.key("passwd"));
    kernel_arguments(&mut v, &c.kernel_arguments, &root.key("kernelArguments"));
    v.out
}

/// A file, directory or link at the path of a unit or drop-in the config writes (one with
/// contents) would fight with it: an error at the entry's path, as for Ignition.
fn systemd_path_conflicts(v: &mut V, c: &Config, root: &Path) {
    const DIR: &str = "/etc/systemd/system/";
    let mut unit_paths = HashSet::new();
    for u in &c.systemd.units {
        if u.contents.as_deref().is_some_and(|s| !s.is_empty()) {
            unit_paths.insert(format!("{DIR}{}", u.name));
        }
        for d in &u.dropins {
            if d.contents.as_deref().is_some_and(|s| !s.is_empty()) {
                unit_paths.insert(format!("{DIR}{}.d/{}", u.name, d.name));
            }
        }
    }
    if unit_paths.is_empty() {
        return;
    }
    let st = root.key("storage");
    for (list, i, path) in storage::node_paths(&c.storage) {
        if unit_paths.contains(path) {
            v.err(
                st.key(list).index(i).key("path"),
                "path conflicts with systemd unit or dropin",
            );
        }
    }
}

fn kernel_arguments(v: &mut V, ka: &KernelArguments, p: &Path) {
    unique_entries(
        v,
        &p.key("shouldExist"),
        ka.should_exist.iter(),
        "kernel argument",
    );
    unique_entries(
        v,
        &p.key("shouldNotExist"),
        ka.should_not_exist.iter(),
        "kernel argument",
    );
    let exist: HashSet<&String> = ka.should_exist.iter().collect();
    for (i, a) in ka.should_not_exist.iter().enumerate() {
        if exist.contains(a) {
            v.err(
                p.key("shouldNotExist").index(i),
                format!("kernel argument {a:?} both should and should not exist"),
            );
        }
    }
}
