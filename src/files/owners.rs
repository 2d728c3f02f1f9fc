//! Owners by name, looked up in the *target root's* `/etc/passwd` and `/etc/group`.
//! Parsed directly: the static binary must never use NSS (getpwnam crashes it).

use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::config::types::NodeUser;

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
    /// Reads `<root>/etc/passwd` and `<root>/etc/group`; a missing file is an empty table.
    pub fn load(root: &Path) -> Result<Self> {
        let mut o = Owners::default();
        if let Some(text) = read_opt(&root.join("etc/passwd"))? {
            for e in parse_passwd(&text) {
                o.users.entry(e.name.clone()).or_insert(e);
            }
        }
        if let Some(text) = read_opt(&root.join("etc/group"))? {
            for (name, gid) in parse_group(&text) {
                o.groups.entry(name).or_insert(gid);
            }
        }
        Ok(o)
    }

    /// The uid for a node's `user` (id wins over name); `None` when unset.
    pub fn uid(&self, u: &NodeUser, what: &str) -> Result<Option<u32>> {
        if let Some(id) = u.id {
            return Ok(Some(
                u32::try_from(id).with_context(|| format!("{what}: invalid user id {id}"))?,
            ));
        }
        match &u.name {
            None => Ok(None),
            Some(n) if n.is_empty() => Ok(None),
            Some(n) => match self.users.get(n) {
                Some(e) => Ok(Some(e.uid)),
                None => bail!("{what}: user {n:?} not found in the target's /etc/passwd"),
            },
        }
    }

    /// The gid for a node's `group`; `None` when unset.
    pub fn gid(&self, g: &NodeUser, what: &str) -> Result<Option<u32>> {
        if let Some(id) = g.id {
            return Ok(Some(
                u32::try_from(id).with_context(|| format!("{what}: invalid group id {id}"))?,
            ));
        }
        match &g.name {
            None => Ok(None),
            Some(n) if n.is_empty() => Ok(None),
            Some(n) => match self.groups.get(n) {
                Some(&gid) => Ok(Some(gid)),
                None => bail!("{what}: group {n:?} not found in the target's /etc/group"),
            },
        }
    }
}

fn read_opt(p: &Path) -> Result<Option<String>> {
    match std::fs::read(p) {
        Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
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
    }
}
