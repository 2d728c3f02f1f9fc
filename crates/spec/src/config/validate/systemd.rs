//! Units and their drop-ins, and the unit file syntax.

use std::collections::{HashMap, HashSet};

use super::common::{V, keyed};
use crate::config::diag::Path;
use crate::config::types::*;

/// The unit types Ignition accepts as a unit name's suffix.
pub const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".snapshot",
    ".slice",
    ".scope",
];

pub(super) fn systemd(v: &mut V, s: &Systemd, p: &Path) {
    // The first unit of each name, for instances looking up their template.
    let mut by_name: HashMap<&str, &Unit> = HashMap::new();
    for u in &s.units {
        crate::work::add(1);
        by_name.entry(u.name.as_str()).or_insert(u);
    }
    let each_unit = |v: &mut V, u: &Unit, up: &Path| {
        crate::work::add(1);
        unit(v, u, up, &by_name);
    };
    keyed(v, &p.key("units"), &s.units, "name", |u| &u.name, each_unit);
}

/// `by_name`: the first unit of each name in the config (where an instance's template is).
fn unit(v: &mut V, u: &Unit, p: &Path, by_name: &HashMap<&str, &Unit>) {
    if !UNIT_SUFFIXES.iter().any(|s| u.name.ends_with(s)) || u.name.contains('/') {
        v.err(
            p.key("name"),
            format!(
                "invalid unit name {:?}: needs a unit type suffix such as .service",
                u.name
            ),
        );
    }
    let sections = u
        .contents
        .as_deref()
        .and_then(|c| unit_contents(v, c, &p.key("contents")));
    if u.enabled == Some(true)
        && u.contents.as_deref().is_some_and(|c| !c.is_empty())
        && sections.is_some_and(|s| !s.contains("Install"))
    {
        v.warn(
            p.key("contents"),
            format!(
                "unit {:?} is enabled, but has no install section so enable does nothing",
                u.name
            ),
        );
    }
    if u.enabled == Some(true)
        && let Some(template) = template_of(&u.name)
        && let Some(t) = by_name.get(template.as_str())
        && let Some(tc) = t.contents.as_deref().filter(|c| !c.is_empty())
        && unit_sections(tc).is_ok_and(|s| !s.contains("Install"))
    {
        v.warn(
            p.key("contents"),
            format!(
                "template unit {template:?} for {:?} doesn't have Install section",
                u.name
            ),
        );
    }
    if u.mask == Some(true) && u.enabled == Some(true) {
        v.warn(p.clone(), "a masked unit cannot be enabled");
    }
    keyed(
        v,
        &p.key("dropins"),
        &u.dropins,
        "name",
        |d| &d.name,
        dropin,
    );
}

fn dropin(v: &mut V, d: &Dropin, p: &Path) {
    if !d.name.ends_with(".conf") || d.name.contains('/') {
        v.err(
            p.key("name"),
            format!("invalid drop-in name {:?}: must end in .conf", d.name),
        );
    }
    if let Some(c) = &d.contents {
        let _ = unit_contents(v, c, &p.key("contents"));
    }
}

/// The template of an instance service (`foo@bar.service` -> `foo@.service`).
fn template_of(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".service")?;
    let (prefix, instance) = stem.split_once('@')?;
    (!prefix.is_empty() && !instance.is_empty()).then(|| format!("{prefix}@.service"))
}

/// Unit file syntax as systemd's (and go-systemd's) parser reads it: text before the first
/// section is ignored; a section header is `[Name]` with nothing but spaces after it; every
/// other non-comment line in a section is `key=value` (a value continues while the line ends
/// in `\\`); no line may be 2048 bytes or longer. Returns the sections that hold at least one
/// option, or a message naming the first bad line.
fn unit_sections(c: &str) -> Result<HashSet<&str>, String> {
    const MAX_LINE: usize = 2048;
    let mut continued = false;
    let mut section: Option<&str> = None;
    let mut with_options = HashSet::new();
    for (n, line) in c.lines().enumerate() {
        if line.len() >= MAX_LINE {
            return Err(format!(
                "line {}: line too long (max {MAX_LINE} bytes)",
                n + 1
            ));
        }
        let t = line.trim();
        let was_continued = continued;
        continued = t.ends_with('\\');
        if was_continued || t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if let Some(h) = t.strip_prefix('[') {
            let Some((name, rest)) = h.split_once(']') else {
                return Err(format!("line {}: unable to find end of section", n + 1));
            };
            if !rest.trim().is_empty() {
                return Err(format!(
                    "line {}: found garbage after section name {name:?}",
                    n + 1
                ));
            }
            section = Some(name);
            continue;
        }
        let Some(s) = section else {
            // Before the first section: ignored, as systemd does.
            continue;
        };
        if !t.contains('=') {
            return Err(format!("line {}: expected key=value", n + 1));
        }
        with_options.insert(s);
    }
    Ok(with_options)
}

/// Checks unit contents (an error at `p` if they do not parse); their sections with options.
fn unit_contents<'c>(v: &mut V, c: &'c str, p: &Path) -> Option<HashSet<&'c str>> {
    match unit_sections(c) {
        Ok(s) => Some(s),
        Err(e) => {
            v.err(p.clone(), format!("invalid unit contents: {e}"));
            None
        }
    }
}
