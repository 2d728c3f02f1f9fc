//! The LUKS volumes of the disks stage, persisted into the new root so that the booted system
//! opens them: each kept key as `/etc/luks/<name>` (0600, in a 0700 directory) and one
//! `/etc/crypttab` line per volume (`<name> UUID=<uuid> <key file or none> luks[,discard][,_netdev]`),
//! replacing a line of the same name and keeping every other line; crypttab is written 0644.
//!
//! Everything goes through the [`Writer`]: paths resolve inside the target root (a symlinked
//! `/etc` or `/etc/luks` is followed and re-rooted like any config path), files are replaced
//! atomically and the paths join the SELinux relabel list. An existing `/etc/crypttab` or key
//! path that is not a regular file, or `/etc/luks` that is not a directory (a symlink, say), is
//! refused, not replaced.
//! The records and keys come from the state directory ([`crate::state`]).

use std::io::Read;
use std::os::fd::AsFd;

use anyhow::{Context, Result, bail};
use nix::sys::stat::SFlag;

use super::Writer;
use super::nodes::{Attrs, Contents};
use super::resolve::{Place, kind, open_regular_at, stat_kind_name};
use crate::state::{LuksRecord, LuksVolume};

/// The crypttab of the target.
pub const CRYPTTAB: &str = "/etc/crypttab";
/// The directory of the key files in the target.
pub const KEY_DIR: &str = "/etc/luks";

/// The key file of a volume in the target.
pub fn key_path(name: &str) -> String {
    format!("{KEY_DIR}/{name}")
}

/// The `/etc/crypttab` line of a volume.
pub fn crypttab_line(r: &LuksRecord) -> String {
    let key = if r.key_file {
        key_path(&r.name)
    } else {
        "none".into()
    };
    let mut opts = vec!["luks"];
    if r.discard {
        opts.push("discard");
    }
    if r.netdev {
        opts.push("_netdev");
    }
    format!("{} UUID={} {key} {}", r.name, r.uuid, opts.join(","))
}

/// `old` crypttab with the lines of `records` replacing any line of the same name.
pub fn merge_crypttab(old: &str, records: &[&LuksRecord]) -> String {
    let mut out = String::new();
    for line in old.lines() {
        let first = line.split_whitespace().next();
        let ours =
            first.is_some_and(|n| !n.starts_with('#') && records.iter().any(|r| r.name == n));
        if !ours {
            out.push_str(line);
            out.push('\n');
        }
    }
    for r in records {
        out.push_str(&crypttab_line(r));
        out.push('\n');
    }
    out
}

impl Writer<'_> {
    /// Persists the recorded volumes (see the module doc); nothing recorded: nothing done.
    /// Returns the names persisted.
    pub fn write_luks(&self, volumes: &[LuksVolume]) -> Result<Vec<String>> {
        if volumes.is_empty() {
            return Ok(Vec::new());
        }
        let private = Attrs {
            mode: Some(0o700),
            ..Attrs::default()
        };
        let mut key_dir = false;
        for v in volumes {
            let r = &v.record;
            let Some(key) = v.key.as_deref().filter(|_| r.key_file) else {
                continue;
            };
            if !key_dir {
                self.existing(KEY_DIR, true, "the LUKS key directory")?;
                self.put_dir(KEY_DIR, private, false)?;
                key_dir = true;
            }
            let path = key_path(&r.name);
            self.existing(&path, false, "a LUKS key file")?;
            let attrs = Attrs {
                mode: Some(0o600),
                ..Attrs::default()
            };
            self.put_file(&path, Contents::Bytes(key), attrs, true)?;
        }
        let old = match self.existing(CRYPTTAB, false, "the crypttab of the LUKS volumes")? {
            Some(p) => {
                let what = p.r.logical();
                let mut s = String::new();
                if let Some(mut f) = open_regular_at(p.dir.as_fd(), p.name(), &what)? {
                    f.read_to_string(&mut s)
                        .with_context(|| format!("reading {what}"))?;
                }
                s
            }
            None => String::new(),
        };
        let records: Vec<&LuksRecord> = volumes.iter().map(|v| &v.record).collect();
        let new = merge_crypttab(&old, &records);
        let attrs = Attrs {
            mode: Some(0o644),
            ..Attrs::default()
        };
        self.put_file(CRYPTTAB, Contents::Bytes(new.as_bytes()), attrs, true)?;
        // Relabelled as before this moved into the writer: the key directory and the key path
        // of every recorded volume when present, also one this run did not write (the stale
        // key of a volume now bound to clevis).
        let mut present = vec![KEY_DIR.to_string()];
        present.extend(records.iter().map(|r| key_path(&r.name)));
        for p in present {
            if let Some(pl) = self.root.place(&p, false)?
                && pl.stat()?.is_some()
            {
                self.touch(pl.r.logical());
            }
        }
        let names: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
        log::info!(
            "persisted LUKS volumes {} into {}",
            names.join(", "),
            self.host().display()
        );
        Ok(names)
    }

    /// The place of what exists at `path` (resolved in the root), `None` when nothing is
    /// there; anything but a directory (`dir`) or a regular file is refused (`what`: what
    /// would be written there).
    fn existing(&self, path: &str, dir: bool, what: &str) -> Result<Option<Place>> {
        let Some(p) = self.root.place(path, false)? else {
            return Ok(None);
        };
        let want = if dir { SFlag::S_IFDIR } else { SFlag::S_IFREG };
        match p.stat()? {
            Some(st) if kind(&st) == want => Ok(Some(p)),
            Some(st) => bail!(
                "{path}: a {} exists at {}; refusing to replace it with {what}",
                stat_kind_name(&st),
                p.r.logical()
            ),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crypttab_lines() {
        let r = LuksRecord {
            name: "data".into(),
            uuid: "u-1".into(),
            key_file: true,
            discard: true,
            netdev: false,
        };
        assert_eq!(
            crypttab_line(&r),
            "data UUID=u-1 /etc/luks/data luks,discard"
        );
        let t = LuksRecord {
            name: "tangvol".into(),
            uuid: "u-2".into(),
            key_file: false,
            discard: false,
            netdev: true,
        };
        assert_eq!(crypttab_line(&t), "tangvol UUID=u-2 none luks,_netdev");
        let old = "# comment\nother UUID=x none luks\ndata UUID=old /etc/luks/data luks\n";
        assert_eq!(
            merge_crypttab(old, &[&r, &t]),
            "# comment\nother UUID=x none luks\ndata UUID=u-1 /etc/luks/data luks,discard\n\
             tangvol UUID=u-2 none luks,_netdev\n"
        );
    }
}
