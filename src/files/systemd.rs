//! systemd units: unit files and drop-ins under `/etc/systemd/system`, enablement through
//! Ignition's preset file, masking (a link to `/dev/null`) and unmasking, and removal of
//! existing enablement links for `enabled: false`.
//!
//! Presets are written the way Ignition writes them, to
//! `/etc/systemd/system-preset/20-ignition.preset`: one line per unit and state (`enable
//! foo.service`, `disable bar.service`), and one line per template and state for instances
//! (`echo@bar.service` and `echo@foo.service` enabled give `enable echo@.service bar foo`, the
//! instances in config order), lines sorted by Ignition's key `<unit>-<enabled|disabled>`.
//! Lines already in the file stay, except those for a unit (or template) this config sets:
//! those are replaced, so that running again converges instead of piling up lines whose first
//! match would win.
//!
//! Earlier agent releases wrote `20-agent.preset` with one `enable <unit>`/`disable <unit>`
//! line per unit (instances by their full name). That file is still written, in that format,
//! for tools written against the earlier layout; its lines agree with `20-ignition.preset`, so
//! systemd (which reads both) reaches the same result.

use std::collections::{BTreeMap, HashSet};
use std::os::fd::AsFd;

use anyhow::{Context, Result};
use log::info;
use nix::fcntl::{OFlag, openat, readlinkat};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::Writer;
use super::nodes::{Attrs, Contents};
use super::resolve::{kind, logical, stat_at};
use spec::config::types::Systemd;

pub const UNIT_DIR: &str = "/etc/systemd/system";
/// The preset file Ignition writes.
pub const PRESET_FILE: &str = "/etc/systemd/system-preset/20-ignition.preset";
/// The preset file of earlier agent releases (one line per unit), kept for compatibility.
pub const COMPAT_PRESET_FILE: &str = "/etc/systemd/system-preset/20-agent.preset";

/// One line of Ignition's preset file: a unit, or a template with its instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preset {
    /// The unit name, or the template name (`echo@.service`) for instances.
    pub unit: String,
    pub enabled: bool,
    /// Instances of the template (`None` for a plain unit), in config order.
    pub instances: Option<Vec<String>>,
}

/// Splits an instance name `echo@bar.service` into `("echo@.service", "bar")`, as Ignition
/// does (first `@`, last `.`); `None` for a name without `@` before its suffix.
pub fn split_instance(name: &str) -> Option<(String, String)> {
    let at = name.find('@')?;
    let dot = name.rfind('.')?;
    if dot <= at {
        return None;
    }
    Some((
        format!("{}{}", &name[..=at], &name[dot..]),
        name[at + 1..dot].to_string(),
    ))
}

/// Ignition's preset table: keyed (and so sorted) by `<unit or template>-<enabled|disabled>`.
pub fn presets<'a>(units: impl IntoIterator<Item = (&'a str, bool)>) -> BTreeMap<String, Preset> {
    let mut m: BTreeMap<String, Preset> = BTreeMap::new();
    for (name, enabled) in units {
        let state = if enabled { "enabled" } else { "disabled" };
        match split_instance(name) {
            Some((template, instance)) => {
                let p = m
                    .entry(format!("{template}-{state}"))
                    .or_insert_with(|| Preset {
                        unit: template,
                        enabled,
                        instances: Some(Vec::new()),
                    });
                if let Some(v) = &mut p.instances {
                    v.push(instance);
                }
            }
            None => {
                m.insert(
                    format!("{name}-{state}"),
                    Preset {
                        unit: name.to_string(),
                        enabled,
                        instances: None,
                    },
                );
            }
        }
    }
    m
}

/// The lines of Ignition's preset file for `presets`, in key order.
pub fn preset_lines(presets: &BTreeMap<String, Preset>) -> Vec<String> {
    presets
        .values()
        .map(|p| {
            let mut l = format!(
                "{} {}",
                if p.enabled { "enable" } else { "disable" },
                p.unit
            );
            if let Some(inst) = &p.instances {
                // Ignition joins the template and its instances with single spaces (an enabled
                // template itself counts as the empty instance).
                l.push(' ');
                l.push_str(&inst.join(" "));
            }
            l
        })
        .collect()
}

/// Keeps the lines of an existing preset file that do not name one of `ours` (the units and
/// templates this config sets), then appends `lines`.
pub fn merge_preset_file(old: &str, ours: &HashSet<&str>, lines: &[String]) -> String {
    let mut s = String::new();
    for l in old.lines() {
        let mut w = l.split_whitespace();
        let replaced = matches!(w.next(), Some("enable" | "disable"))
            && w.next().is_some_and(|u| ours.contains(u));
        if !replaced {
            s.push_str(l);
            s.push('\n');
        }
    }
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s
}

impl Writer<'_> {
    pub fn write_units(&mut self, sd: &Systemd) -> Result<()> {
        let mut enablement: Vec<(&str, bool)> = Vec::new();
        for u in &sd.units {
            let unit_path = format!("{UNIT_DIR}/{}", u.name);
            // Like Ignition: drop-ins first (an empty one is written), then the unit (an
            // empty unit is not).
            for d in &u.dropins {
                if let Some(c) = &d.contents {
                    let p = format!("{UNIT_DIR}/{}.d/{}", u.name, d.name);
                    self.put_file(&p, Contents::Bytes(c.as_bytes()), Attrs::default(), true)
                        .with_context(|| format!("writing drop-in {} of {}", d.name, u.name))?;
                }
            }
            if let Some(c) = u.contents.as_ref().filter(|c| !c.is_empty()) {
                self.put_file(
                    &unit_path,
                    Contents::Bytes(c.as_bytes()),
                    Attrs::default(),
                    true,
                )
                .with_context(|| format!("writing unit {}", u.name))?;
            }
            if let Some(e) = u.enabled {
                enablement.push((&u.name, e));
                if !e {
                    self.remove_enablement_links(&u.name)?;
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
        }
        if !enablement.is_empty() {
            self.write_presets(&enablement)?;
        }
        Ok(())
    }

    /// Removes a mask (a link to /dev/null) if there is one.
    fn unmask(&mut self, unit_path: &str, name: &str) -> Result<()> {
        let Some(p) = self.root.place(unit_path, false)? else {
            return Ok(());
        };
        if readlinkat(&p.dir, p.name()).is_ok_and(|t| t.as_os_str() == "/dev/null") {
            unlinkat(&p.dir, p.name(), UnlinkatFlags::NoRemoveDir)
                .with_context(|| format!("unmasking {}", p.r.logical()))?;
            info!("unmasked {name}");
        }
        Ok(())
    }

    /// Removes `<unit dir>/*.wants/<name>` and `*.requires/<name>` links.
    fn remove_enablement_links(&mut self, name: &str) -> Result<()> {
        let Some(p) = self.root.place(&format!("{UNIT_DIR}/x"), false)? else {
            return Ok(());
        };
        let dir = logical(p.r.parent.iter());
        let listing = openat(
            &p.dir,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .and_then(nix::dir::Dir::from_fd)
        .with_context(|| format!("listing {dir}"))?;
        let mut wants = Vec::new();
        for ent in listing {
            let ent = ent.with_context(|| format!("listing {dir}"))?;
            let n = String::from_utf8_lossy(ent.file_name().to_bytes()).into_owned();
            if n.ends_with(".wants") || n.ends_with(".requires") || n.ends_with(".upholds") {
                wants.push(n);
            }
        }
        for n in wants {
            // Only real directories: a `.wants` that is a link is not followed.
            let Ok(w) = openat(
                &p.dir,
                n.as_str(),
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            let link = format!("{dir}/{n}/{name}");
            if stat_at(w.as_fd(), name, &link)?.is_some_and(|st| kind(&st) == SFlag::S_IFLNK) {
                unlinkat(&w, name, UnlinkatFlags::NoRemoveDir)
                    .with_context(|| format!("removing enablement link {link}"))?;
                info!("disabled {name}: removed {link}");
            }
        }
        Ok(())
    }

    /// Writes Ignition's preset file and the compatibility file of earlier releases.
    fn write_presets(&mut self, units: &[(&str, bool)]) -> Result<()> {
        let table = presets(units.iter().copied());
        let ours: HashSet<&str> = table.values().map(|p| p.unit.as_str()).collect();
        let old = self.read_root_file(PRESET_FILE)?;
        let text = merge_preset_file(&old, &ours, &preset_lines(&table));
        self.put_file(
            PRESET_FILE,
            Contents::Bytes(text.as_bytes()),
            Attrs::default(),
            true,
        )?;
        // The earlier layout: existing lines merged by unit name (ours win), sorted.
        let mut compat: BTreeMap<String, bool> = BTreeMap::new();
        for l in self.read_root_file(COMPAT_PRESET_FILE)?.lines() {
            match l.split_whitespace().collect::<Vec<_>>()[..] {
                ["enable", n] => compat.insert(n.to_string(), true),
                ["disable", n] => compat.insert(n.to_string(), false),
                _ => None,
            };
        }
        compat.extend(units.iter().map(|(n, e)| (n.to_string(), *e)));
        let text = compat_preset_text(&compat);
        self.put_file(
            COMPAT_PRESET_FILE,
            Contents::Bytes(text.as_bytes()),
            Attrs::default(),
            true,
        )
    }

    /// A file of the target root as text; empty when it does not exist.
    fn read_root_file(&self, path: &str) -> Result<String> {
        let b = self.root.read_file(path)?.unwrap_or_default();
        String::from_utf8(b).with_context(|| format!("reading {path}: not UTF-8"))
    }
}

/// The compatibility preset file: one line per unit, sorted by unit name.
pub fn compat_preset_text(units: &BTreeMap<String, bool>) -> String {
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
    use super::*;

    fn lines(units: &[(&str, bool)]) -> Vec<String> {
        preset_lines(&presets(units.iter().copied()))
    }

    #[test]
    fn instances_are_grouped_under_their_template() {
        assert_eq!(
            split_instance("echo@bar.service"),
            Some(("echo@.service".into(), "bar".into()))
        );
        assert_eq!(
            split_instance("a@b.c.socket"),
            Some(("a@.socket".into(), "b.c".into()))
        );
        assert_eq!(split_instance("plain.service"), None);
        assert_eq!(
            lines(&[("echo@bar.service", true), ("echo@foo.service", true)]),
            ["enable echo@.service bar foo"]
        );
        // An enabled template counts as the empty instance (Ignition's trailing space).
        assert_eq!(lines(&[("t@.service", true)]), ["enable t@.service "]);
    }

    #[test]
    fn lines_are_sorted_by_ignition_key() {
        assert_eq!(
            lines(&[
                ("z.service", true),
                ("a.timer", false),
                ("m.service", true),
                ("e@2.service", true),
                ("e@1.service", false),
                ("e@3.service", true),
                ("a-b.service", true),
            ]),
            [
                "enable a-b.service",
                "disable a.timer",
                "disable e@.service 1",
                "enable e@.service 2 3",
                "enable m.service",
                "enable z.service",
            ]
        );
    }

    #[test]
    fn existing_lines_stay_unless_this_config_sets_the_unit() {
        let ours: HashSet<&str> = ["a.service", "e@.service"].into_iter().collect();
        let old = "enable keep.service\ndisable a.service\nenable e@.service x\n# note\n";
        assert_eq!(
            merge_preset_file(old, &ours, &["enable a.service".into()]),
            "enable keep.service\n# note\nenable a.service\n"
        );
    }

    #[test]
    fn compat_file_has_one_line_per_unit() {
        let m = [("z.service", true), ("a@b.service", false)]
            .into_iter()
            .map(|(n, e)| (n.to_string(), e))
            .collect();
        assert_eq!(
            compat_preset_text(&m),
            "disable a@b.service\nenable z.service\n"
        );
    }
}
