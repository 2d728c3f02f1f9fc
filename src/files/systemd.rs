//! systemd units: unit files and drop-ins under `/etc/systemd/system`, enablement through a
//! preset file (`enable`/`disable` lines, sorted), masking (a link to `/dev/null`) and
//! unmasking, and removal of existing enablement links for `enabled: false`.

use std::collections::BTreeMap;
use std::io::ErrorKind;

use anyhow::{Context, Result};
use log::info;

use super::Writer;
use super::nodes::{Attrs, Contents};
use crate::config::types::Systemd;

pub const UNIT_DIR: &str = "/etc/systemd/system";
pub const PRESET_FILE: &str = "/etc/systemd/system-preset/20-agent.preset";

impl Writer<'_> {
    pub fn write_units(&mut self, sd: &Systemd) -> Result<()> {
        let mut presets: BTreeMap<String, bool> = BTreeMap::new();
        for u in &sd.units {
            let unit_path = format!("{UNIT_DIR}/{}", u.name);
            if let Some(c) = &u.contents {
                self.put_file(
                    &unit_path,
                    Contents::Bytes(c.as_bytes()),
                    Attrs::default(),
                    true,
                )
                .with_context(|| format!("writing unit {}", u.name))?;
            }
            for d in &u.dropins {
                if let Some(c) = &d.contents {
                    let p = format!("{UNIT_DIR}/{}.d/{}", u.name, d.name);
                    self.put_file(&p, Contents::Bytes(c.as_bytes()), Attrs::default(), true)
                        .with_context(|| format!("writing drop-in {} of {}", d.name, u.name))?;
                }
            }
            match u.mask {
                Some(true) => {
                    self.put_symlink(&unit_path, "/dev/null", Attrs::default(), true)
                        .with_context(|| format!("masking {}", u.name))?;
                    info!("masked {}", u.name);
                }
                Some(false) => self.unmask(&unit_path, &u.name)?,
                None => {}
            }
            if let Some(e) = u.enabled {
                presets.insert(u.name.clone(), e);
                if !e {
                    self.remove_enablement_links(&u.name)?;
                }
            }
        }
        if !presets.is_empty() {
            self.write_presets(presets)?;
        }
        Ok(())
    }

    /// Removes a mask (a link to /dev/null) if there is one.
    fn unmask(&mut self, unit_path: &str, name: &str) -> Result<()> {
        let r = self.root.resolve(unit_path)?;
        let host = self.root.host_path(&r.parent).join(&r.name);
        if std::fs::read_link(&host).is_ok_and(|t| t.as_os_str() == "/dev/null") {
            std::fs::remove_file(&host).with_context(|| format!("unmasking {}", host.display()))?;
            info!("unmasked {name}");
        }
        Ok(())
    }

    /// Removes `<unit dir>/*.wants/<name>` and `*.requires/<name>` links.
    fn remove_enablement_links(&mut self, name: &str) -> Result<()> {
        let r = self.root.resolve(&format!("{UNIT_DIR}/x"))?;
        let dir = self.root.host_path(&r.parent);
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
        };
        for ent in rd {
            let ent = ent.with_context(|| format!("listing {}", dir.display()))?;
            let n = ent.file_name();
            let n = n.to_string_lossy();
            if !(n.ends_with(".wants") || n.ends_with(".requires") || n.ends_with(".upholds")) {
                continue;
            }
            let link = ent.path().join(name);
            if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
                std::fs::remove_file(&link)
                    .with_context(|| format!("removing enablement link {}", link.display()))?;
                info!("disabled {name}: removed {}", link.display());
            }
        }
        Ok(())
    }

    /// Merges our lines into the preset file (ours win) and writes it sorted.
    fn write_presets(&mut self, ours: BTreeMap<String, bool>) -> Result<()> {
        let r = self.root.resolve(PRESET_FILE)?;
        let host = self.root.host_path(&r.parent).join(&r.name);
        let mut all: BTreeMap<String, bool> = BTreeMap::new();
        match std::fs::read_to_string(&host) {
            Ok(old) => {
                for l in old.lines() {
                    match l.split_whitespace().collect::<Vec<_>>()[..] {
                        ["enable", n] => all.insert(n.to_string(), true),
                        ["disable", n] => all.insert(n.to_string(), false),
                        _ => None,
                    };
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", host.display())),
        }
        all.extend(ours);
        let text = preset_text(&all);
        self.put_file(
            PRESET_FILE,
            Contents::Bytes(text.as_bytes()),
            Attrs::default(),
            true,
        )
    }
}

/// Preset lines, sorted by unit name.
pub fn preset_text(units: &BTreeMap<String, bool>) -> String {
    let mut s = String::new();
    for (name, enabled) in units {
        s.push_str(if *enabled { "enable " } else { "disable " });
        s.push_str(name);
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn presets_are_sorted_by_unit() {
        let m = [("z.service", true), ("a.timer", false), ("m.service", true)]
            .into_iter()
            .map(|(n, e)| (n.to_string(), e))
            .collect();
        assert_eq!(
            super::preset_text(&m),
            "disable a.timer\nenable m.service\nenable z.service\n"
        );
    }
}
