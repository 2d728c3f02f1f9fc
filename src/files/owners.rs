//! Owners by name, looked up in the *target root's* `/etc/passwd` and `/etc/group`.
//! Parsed directly: the static binary must never use NSS (getpwnam crashes it).

use std::collections::HashMap;

use anyhow::{Context, Result, bail};

use super::resolve::Root;
use spec::config::types::NodeUser;

/// One `/etc/passwd` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

/// Users and groups of a target root.
#[derive(Debug, Clone, Default)]
pub struct Owners {
    pub users: HashMap<String, PasswdEntry>,
    pub groups: HashMap<String, u32>,
}

impl Owners {
    /// Reads the root's `/etc/passwd` and `/etc/group` (through the root's descriptor, links
    /// followed inside the root); a missing file is an empty table.
    pub fn load(root: &Root) -> Result<Self> {
        let mut o = Owners::default();
        if let Some(text) = read_opt(root, "/etc/passwd")? {
            for e in parse_passwd(&text) {
                o.users.entry(e.name.clone()).or_insert(e);
            }
        }
        if let Some(text) = read_opt(root, "/etc/group")? {
            for (name, gid) in parse_group(&text) {
                o.groups.entry(name).or_insert(gid);
            }
        }
        Ok(o)
    }

    /// The uid for a node's `user` (id wins over name); `None` when unset.
    pub fn uid(&self, u: &NodeUser, what: &str) -> Result<Option<u32>> {
        let id =
            match (u.id, &u.name) {
                (Some(id), _) => Some(usable_id(id, "user", what)?),
                (None, None) => None,
                (None, Some(n)) if n.is_empty() => None,
                (None, Some(n)) => match self.users.get(n) {
                    Some(e) => Some(usable_id(e.uid.into(), "user", what).with_context(|| {
                        format!("{what}: user {n:?} of the target's /etc/passwd")
                    })?),
                    None => bail!("{what}: user {n:?} not found in the target's /etc/passwd"),
                },
            };
        Ok(id)
    }

    /// The gid for a node's `group`; `None` when unset.
    pub fn gid(&self, g: &NodeUser, what: &str) -> Result<Option<u32>> {
        let id = match (g.id, &g.name) {
            (Some(id), _) => Some(usable_id(id, "group", what)?),
            (None, None) => None,
            (None, Some(n)) if n.is_empty() => None,
            (None, Some(n)) => match self.groups.get(n) {
                Some(&gid) => {
                    Some(usable_id(gid.into(), "group", what).with_context(|| {
                        format!("{what}: group {n:?} of the target's /etc/group")
                    })?)
                }
                None => bail!("{what}: group {n:?} not found in the target's /etc/group"),
            },
        };
        Ok(id)
    }
}

/// An id that `chown` sets: 0..=4294967294. 4294967295 is -1 to chown ("leave as is") and
/// would silently leave a new node owned by root, so it is refused like any other id out of
/// range.
pub fn usable_id(id: i64, kind: &str, what: &str) -> Result<u32> {
    match u32::try_from(id) {
        Ok(v) if v != u32::MAX => Ok(v),
        _ => bail!(
            "{what}: invalid {kind} id {id}: ids are 0 through 4294967294 (4294967295 means \"leave as is\" to chown)"
        ),
    }
}

fn read_opt(root: &Root, path: &str) -> Result<Option<String>> {
    Ok(root
        .read_file(path)
        .with_context(|| format!("reading the target's {path}"))?
        .map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// Parses passwd lines `name:pw:uid:gid:gecos:home:shell`; malformed lines are skipped.
pub fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('+') && !l.starts_with('-'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 7 || f[0].is_empty() {
                return None;
            }
            Some(PasswdEntry {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f[5].to_string(),
            })
        })
        .collect()
}

/// Parses group lines `name:pw:gid:members`; malformed lines are skipped.
pub fn parse_group(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('+') && !l.starts_with('-'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 3 || f[0].is_empty() {
                return None;
            }
            Some((f[0].to_string(), f[2].parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_looks_up() {
        let p = parse_passwd(
            "root:x:0:0:root:/root:/bin/bash\n# c\nbad line\ncore:x:1000:1001::/home/core:/bin/sh\nx:x:notnum:1::/:/\n",
        );
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].home, "/home/core");
        let g = parse_group("root:x:0:\nwheel:x:10:core,alice\n:x:3:\n");
        assert_eq!(g, vec![("root".into(), 0), ("wheel".into(), 10)]);
        let mut o = Owners::default();
        for e in p {
            o.users.insert(e.name.clone(), e);
        }
        o.groups.extend(g);
        let by = |id: Option<i64>, name: Option<&str>| NodeUser {
            id,
            name: name.map(str::to_string),
        };
        assert_eq!(o.uid(&by(None, Some("core")), "f").unwrap(), Some(1000));
        assert_eq!(o.uid(&by(Some(7), Some("core")), "f").unwrap(), Some(7));
        assert_eq!(o.uid(&by(None, None), "f").unwrap(), None);
        assert!(o.uid(&by(None, Some("nobody")), "f").is_err());
        assert_eq!(o.gid(&by(None, Some("wheel")), "f").unwrap(), Some(10));
        assert!(o.gid(&by(Some(-1), None), "f").is_err());
        for bad in [4_294_967_295, 1 << 40] {
            let e = o.uid(&by(Some(bad), None), "/f").unwrap_err().to_string();
            assert!(e.contains("/f") && e.contains("4294967294"), "{e}");
            assert!(o.gid(&by(Some(bad), None), "/f").is_err());
        }
        assert_eq!(
            o.uid(&by(Some(4_294_967_294), None), "f").unwrap(),
            Some(4_294_967_294)
        );
        // A database entry with the id -1 cannot be used either.
        o.users.insert(
            "minus".into(),
            PasswdEntry {
                name: "minus".into(),
                uid: u32::MAX,
                gid: 0,
                home: "/".into(),
            },
        );
        o.groups.insert("minus".into(), u32::MAX);
        assert!(o.uid(&by(None, Some("minus")), "f").is_err());
        assert!(o.gid(&by(None, Some("minus")), "f").is_err());
    }
}
