//! RAID arrays.

use super::common::{V, path_ok, unique_entries};
use crate::config::diag::Path;
use crate::config::types::*;

pub(super) fn raid(v: &mut V, r: &Raid, p: &Path) {
    if r.name.contains('/') {
        v.err(p.key("name"), "array name must not contain '/'");
    }
    match r.level.as_deref() {
        None | Some("") => v.err(p.key("level"), "raid level is required"),
        Some("linear" | "raid0" | "0" | "stripe") => {
            if r.spares.is_some_and(|s| s > 0) {
                v.err(
                    p.key("spares"),
                    "spares are not allowed for linear and raid0 arrays",
                );
            }
        }
        Some(
            "raid1" | "mirror" | "raid4" | "raid5" | "raid6" | "raid10" | "1" | "4" | "5" | "6"
            | "10",
        ) => {}
        Some(l) => v.err(p.key("level"), format!("unsupported RAID level {l:?}")),
    }
    if r.spares.is_some_and(|s| s < 0) {
        v.err(p.key("spares"), "spares must not be negative");
    }
    if r.devices.is_empty() {
        v.err(p.key("devices"), "an array needs devices");
    }
    for (j, d) in r.devices.iter().enumerate() {
        if let Err(e) = path_ok(d) {
            v.err(p.key("devices").index(j), e);
        }
    }
    unique_entries(v, &p.key("devices"), r.devices.iter(), "device");
}
