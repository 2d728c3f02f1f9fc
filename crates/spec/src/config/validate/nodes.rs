//! Files, directories and links, each on its own; the rules between them (one namespace, a
//! path through a link) are in `storage.rs`.

use std::collections::HashSet;

use super::common::{V, id_in_range};
use super::ignition::resource;
use crate::config::diag::Path;
use crate::config::types::*;

pub(super) fn file(v: &mut V, f: &File, p: &Path) {
    resource(v, &f.contents, &p.key("contents"));
    for (j, a) in f.append.iter().enumerate() {
        resource(v, a, &p.key("append").index(j));
    }
    if f.overwrite == Some(true) && f.contents.source.is_none() {
        v.err(p.key("overwrite"), "overwrite: true needs contents.source");
    }
    mode(v, f.mode, &p.key("mode"));
    owners(v, &f.user, &f.group, p);
}

pub(super) fn directory(v: &mut V, d: &Directory, p: &Path) {
    mode(v, d.mode, &p.key("mode"));
    owners(v, &d.user, &d.group, p);
}

/// `dirs`: the paths of the config's directories (a hard link to one is an error).
pub(super) fn link(v: &mut V, l: &Link, p: &Path, dirs: &HashSet<&str>) {
    match l.target.as_deref() {
        None | Some("") => v.err(p.key("target"), "link target is required"),
        Some(t) => {
            // Ignition cleans the target (Go's path.Clean) and joins a relative one to the
            // link's own path (not its directory) before comparing it with the directories.
            let t = if t.starts_with('/') {
                go_path_clean(t)
            } else {
                go_path_clean(&format!("{}/{t}", l.path))
            };
            let t = t.as_str();
            if l.hard == Some(true) && dirs.contains(t) {
                v.err(p.clone(), "hard link target is a directory");
            }
        }
    }
    if l.hard == Some(true) {
        for (kind, o) in [("user", &l.user), ("group", &l.group)] {
            if o.id.is_some() {
                v.warn(p.key(kind).key("id"), "user/group ignored for hard link");
            }
            if o.name.is_some() {
                v.warn(p.key(kind).key("name"), "user/group ignored for hard link");
            }
        }
    }
    owners(v, &l.user, &l.group, p);
}

/// A node's `user` and `group`, at `p`'s `user` and `group`.
fn owners(v: &mut V, user: &NodeUser, group: &NodeUser, p: &Path) {
    node_owner(v, user, &p.key("user"));
    node_owner(v, group, &p.key("group"));
}

fn node_owner(v: &mut V, u: &NodeUser, p: &Path) {
    if u.id.is_some() && u.name.as_deref().is_some_and(|n| !n.is_empty()) {
        v.err(p.clone(), "set either id or name, not both");
    }
    id_in_range(v, "id", u.id, &p.key("id"));
}

fn mode(v: &mut V, m: Option<i64>, p: &Path) {
    if let Some(m) = m
        && !(0..=0o7777).contains(&m)
    {
        v.err(
            p.clone(),
            format!("invalid mode {m}: must be between 0 and 4095 (07777)"),
        );
    }
}

/// Go's `path.Clean`: one slash between elements, no `.`, `..` resolved lexically (at the root
/// dropped), no trailing slash; "." for an empty relative result.
pub(crate) fn go_path_clean(p: &str) -> String {
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

#[cfg(test)]
mod clean_tests {
    use super::go_path_clean;

    #[test]
    fn go_path_clean_as_go() {
        assert_eq!(go_path_clean("/etc/l/../x"), "/etc/x");
        assert_eq!(go_path_clean("/../a//b/./"), "/a/b");
        assert_eq!(go_path_clean("a/../../b"), "../b");
        assert_eq!(go_path_clean(""), ".");
    }
}
