//! What the per-type checks share: the diagnostics found so far, the checks over a whole list
//! (duplicates) and the checks of one value (paths, UUIDs, ids).

use std::collections::HashSet;

use crate::config::diag::{Diagnostic, Path};

/// The diagnostics found so far.
pub(super) struct V {
    pub(super) out: Vec<Diagnostic>,
}

impl V {
    pub(super) fn err(&mut self, p: Path, msg: impl Into<String>) {
        self.out.push(Diagnostic::error(p, msg));
    }
    pub(super) fn warn(&mut self, p: Path, msg: impl Into<String>) {
        self.out.push(Diagnostic::warning(p, msg));
    }
}

/// Checks each item of a list with `check`, given the item's path.
pub(super) fn each<T>(v: &mut V, list: &Path, items: &[T], check: impl Fn(&mut V, &T, &Path)) {
    for (i, x) in items.iter().enumerate() {
        check(v, x, &list.index(i));
    }
}

/// Checks a list keyed by one string field: an error at the `field` of each entry whose key an
/// earlier entry has, then each entry with `check`.
pub(super) fn keyed<T>(
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
pub(super) fn id_in_range(v: &mut V, what: &str, id: Option<i64>, p: &Path) {
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
pub(super) fn unique_entries<'s>(
    v: &mut V,
    list: &Path,
    items: impl Iterator<Item = &'s String>,
    what: &str,
) {
    let mut seen = HashSet::new();
    for (i, k) in items.enumerate() {
        if !seen.insert(k.as_str()) {
            v.err(list.index(i), format!("duplicate {what} {k:?}"));
        }
    }
}

/// Errors for duplicate keys within one list.
pub(super) fn unique<I: Iterator<Item = Option<String>>>(
    v: &mut V,
    list: &Path,
    keys: I,
    field: &str,
) {
    let mut seen = HashSet::new();
    for (i, k) in keys.enumerate() {
        if let Some(k) = k
            && !seen.insert(k.clone())
        {
            v.err(list.index(i).key(field), format!("duplicate {field} {k:?}"));
        }
    }
}

pub(super) fn hex_len(s: &str, n: usize) -> bool {
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
