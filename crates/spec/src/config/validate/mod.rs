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

mod disks;
mod filesystems;
mod ignition;
mod luks;
mod nodes;
mod passwd;
mod raid;
mod storage;
mod systemd;

pub use ignition::SCHEMES;
pub use systemd::UNIT_SUFFIXES;

/// The diagnostics found so far.
struct V {
    out: Vec<Diagnostic>,
}

impl V {
    fn err(&mut self, p: Path, msg: impl Into<String>) {
        self.out.push(Diagnostic::error(p, msg));
    }
    fn warn(&mut self, p: Path, msg: impl Into<String>) {
        self.out.push(Diagnostic::warning(p, msg));
    }
}

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

/// Checks each item of a list with `check`, given the item's path.
fn each<T>(v: &mut V, list: &Path, items: &[T], check: impl Fn(&mut V, &T, &Path)) {
    for (i, x) in items.iter().enumerate() {
        check(v, x, &list.index(i));
    }
}

/// Checks a list keyed by one string field: an error at the `field` of each entry whose key an
/// earlier entry has, then each entry with `check`.
fn keyed<T>(
    v: &mut V,
    list: &Path,
    items: &[T],
    field: &str,
    key: impl Fn(&T) -> &String,
    check: impl Fn(&mut V, &T, &Path),
) {
    unique(v, list, items.iter().map(|x| Some(key(x).clone())), field);
    each(v, list, items, check);
}

/// An error at `p` for a uid or gid (`what`) that no node can have.
fn id_in_range(v: &mut V, what: &str, id: Option<i64>, p: &Path) {
    if let Some(id) = id
        && !(0..=MAX_ID).contains(&id)
    {
        v.err(
            p.clone(),
            format!("{what} {id} out of range: must be between 0 and {MAX_ID}"),
        );
    }
}

/// Errors for duplicate strings within one list of strings, at the later entry.
fn unique_entries<'s>(v: &mut V, list: &Path, items: impl Iterator<Item = &'s String>, what: &str) {
    let mut seen = HashSet::new();
    for (i, k) in items.enumerate() {
        if !seen.insert(k.as_str()) {
            v.err(list.index(i), format!("duplicate {what} {k:?}"));
        }
    }
}

/// Errors for duplicate keys within one list.
fn unique<I: Iterator<Item = Option<String>>>(v: &mut V, list: &Path, keys: I, field: &str) {
    let mut seen = HashSet::new();
    for (i, k) in keys.enumerate() {
        if let Some(k) = k
            && !seen.insert(k.clone())
        {
            v.err(list.index(i).key(field), format!("duplicate {field} {k:?}"));
        }
    }
}

fn hex_len(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `p` is absolute and normalised (no `.`/`..` elements, no `//`, no trailing `/`).
pub fn path_ok(p: &str) -> Result<(), &'static str> {
    if p.is_empty() {
        return Err("path not specified");
    }
    if !p.starts_with('/') {
        return Err("path not absolute");
    }
    if p == "/" {
        return Ok(());
    }
    if p.ends_with('/')
        || p[1..]
            .split('/')
            .any(|e| e.is_empty() || e == "." || e == "..")
    {
        return Err("path not normalised");
    }
    Ok(())
}

/// A GUID in the hyphenated 8-4-4-4-12 hex form (Ignition's pattern; no braces, no `urn:`).
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The largest usable uid or gid: 2^32-1 is `(uid_t)-1`, which `chown` reads as "leave as is".
pub const MAX_ID: i64 = u32::MAX as i64 - 1;
