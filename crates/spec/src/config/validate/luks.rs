//! LUKS volumes, with their clevis bindings and tang servers.

use super::common::{V, each, is_uuid, path_ok, unique_entries};
use super::ignition::resource;
use crate::config::diag::Path;
use crate::config::types::*;

pub(super) fn luks(v: &mut V, l: &Luks, p: &Path) {
    if l.name.contains('/') {
        v.err(p.key("name"), "volume name must not contain '/'");
    }
    match l.device.as_deref() {
        None | Some("") => v.err(p.key("device"), "disk device is required"),
        Some(d) if path_ok(d).is_err() => v.err(p.key("device"), "device must be an absolute path"),
        _ => {}
    }
    if l.label.as_ref().is_some_and(|x| x.len() > 47) {
        v.err(
            p.key("label"),
            "luks device labels cannot be longer than 47 characters (bytes)",
        );
    }
    if let Some(u) = &l.uuid
        && !is_uuid(u)
    {
        v.warn(
            p.key("uuid"),
            format!("{u:?} is not a UUID: cryptsetup will refuse it"),
        );
    }
    resource(v, &l.key_file, &p.key("keyFile"));
    if l.cex.enabled == Some(true) {
        // Ignition's Clevis.IsPresent: a non-empty custom pin, tang, tpm2, or a threshold
        // other than 0 (a threshold alone binds nothing but still counts).
        let c = &l.clevis;
        if c.custom.pin.as_deref().is_some_and(|p| !p.is_empty())
            || !c.tang.is_empty()
            || c.tpm2 == Some(true)
            || c.threshold.is_some_and(|t| t != 0)
        {
            v.err(p.key("cex"), "cex cannot be combined with clevis");
        }
        if l.key_file.url().is_some() {
            v.err(p.key("cex"), "cex cannot be combined with a keyFile");
        }
    }
    clevis(v, &l.clevis, &p.key("clevis"));
}

fn clevis(v: &mut V, c: &Clevis, p: &Path) {
    if c.threshold.is_some_and(|t| t < 0) {
        v.err(p.key("threshold"), "threshold must not be negative");
    }
    let cu = &c.custom;
    // Ignition's ClevisCustom.Validate: nothing to check while pin and config are empty and
    // needsNetwork is not true.
    let empty = |s: &Option<String>| s.as_deref().is_none_or(str::is_empty);
    if !(empty(&cu.pin) && empty(&cu.config) && cu.needs_network != Some(true))
        && (empty(&cu.pin) || empty(&cu.config))
    {
        v.err(p.key("custom"), "custom clevis needs both pin and config");
    }
    if !empty(&cu.pin)
        && (!c.tang.is_empty() || c.tpm2 == Some(true) || c.threshold.is_some_and(|t| t != 0))
    {
        v.err(
            p.key("custom"),
            "custom clevis cannot be combined with tang, tpm2 or threshold",
        );
    }
    let tp = p.key("tang");
    each(v, &tp, &c.tang, tang);
    unique_entries(v, &tp, c.tang.iter().map(|t| &t.url), "tang URL");
}

fn tang(v: &mut V, t: &Tang, p: &Path) {
    if !(t.url.starts_with("http://") || t.url.starts_with("https://")) {
        v.err(p.key("url"), "tang URL must be http:// or https://");
    }
    if t.thumbprint.as_deref().is_none_or(str::is_empty) {
        v.err(p.key("thumbprint"), "thumbprint is required");
    }
    if let Some(a) = t.advertisement.as_deref().filter(|a| !a.is_empty())
        && serde_json::from_str::<serde::de::IgnoredAny>(a).is_err()
    {
        v.err(p.key("advertisement"), "advertisement is not valid JSON");
    }
}
