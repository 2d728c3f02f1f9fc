//! Users and groups.

use super::common::{V, each, id_in_range, path_ok, unique, unique_entries};
use crate::config::diag::Path;
use crate::config::types::*;

pub(super) fn passwd(v: &mut V, s: &Passwd, p: &Path) {
    let users = p.key("users");
    let groups = p.key("groups");
    unique(
        v,
        &users,
        s.users.iter().map(|u| Some(u.name.clone())),
        "name",
    );
    unique(
        v,
        &groups,
        s.groups.iter().map(|g| Some(g.name.clone())),
        "name",
    );
    each(v, &users, &s.users, user);
    each(v, &groups, &s.groups, group);
}

fn user(v: &mut V, u: &User, p: &Path) {
    unique_entries(
        v,
        &p.key("sshAuthorizedKeys"),
        u.ssh_authorized_keys.iter(),
        "SSH key",
    );
    unique_entries(v, &p.key("groups"), u.groups.iter(), "group");
    if u.name.contains(':') || u.name.contains('/') || u.name.contains(char::is_whitespace) {
        v.err(p.key("name"), format!("invalid user name {:?}", u.name));
    }
    id_in_range(v, "uid", u.uid, &p.key("uid"));
    if let Some(h) = &u.home_dir
        && path_ok(h).is_err()
    {
        v.err(p.key("homeDir"), "home directory must be an absolute path");
    }
}

fn group(v: &mut V, g: &Group, p: &Path) {
    if g.name.contains(':') || g.name.contains('/') || g.name.contains(char::is_whitespace) {
        v.err(p.key("name"), format!("invalid group name {:?}", g.name));
    }
    id_in_range(v, "gid", g.gid, &p.key("gid"));
}
