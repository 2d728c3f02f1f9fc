//! The result file `<root>/etc/.ignition-result.json` (mode 0600), where Ignition writes it and
//! with its fields, so that login-message helpers written for Ignition read it:
//! `provisioningBootID`, `provisioningDate` (RFC 3339, UTC), `userConfigProvided`, and
//! `previousReport` (the whole previous report) if the root had one (a root provisioned before
//! is logged as a warning).
//!
//! Earlier agent releases wrote `<root>/etc/.agent-result.json`; that name is now a relative
//! symlink to `.ignition-result.json`, and a regular file there (a root provisioned by an
//! earlier release) is read as the previous report.
//!
//! Whether a user config was provided is given by the caller (the files stage reads it from
//! the fetch stage's record, `crate::state`); `None` (no record) is written as `null`
//! (unknown).

use std::time::{SystemTime, UNIX_EPOCH};

use log::warn;
use serde_json::{Value, json};

pub const RESULT_FILE: &str = "/etc/.ignition-result.json";
/// The result file of earlier agent releases: now a symlink to `RESULT_FILE`.
pub const COMPAT_RESULT_FILE: &str = "/etc/.agent-result.json";
/// The target of the `COMPAT_RESULT_FILE` symlink (relative: valid inside and outside the
/// initramfs).
pub const COMPAT_RESULT_TARGET: &str = ".ignition-result.json";

pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Builds the report; `previous` is the old file's JSON, if any.
pub fn report(user_config: Option<bool>, previous: Option<Value>) -> Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut v = json!({
        "provisioningBootID": boot_id(),
        "provisioningDate": runtime::util::rfc3339(now),
        "userConfigProvided": user_config,
    });
    if let Some(p) = previous {
        v["previousReport"] = p;
    }
    v
}

/// A previous report from the bytes of the file `path` of the root, read through the root
/// (warning if the root was provisioned before).
pub fn previous_report(bytes: Option<Vec<u8>>, path: &str) -> Option<Value> {
    let bytes = bytes?;
    let v: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        warn!("previous result file {path} is not JSON ({e}): kept as text");
        Value::String(String::from_utf8_lossy(&bytes).into_owned())
    });
    let when = v
        .get("provisioningDate")
        .and_then(Value::as_str)
        .unwrap_or("an unknown date");
    warn!("this root was already provisioned (on {when}): re-provisioning");
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(runtime::util::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(runtime::util::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(
            runtime::util::rfc3339(1_700_000_000),
            "2023-11-14T22:13:20Z"
        );
    }

    #[test]
    fn report_nests_previous() {
        let prev = json!({"provisioningDate": "x"});
        let r = report(Some(true), Some(prev.clone()));
        assert_eq!(r["previousReport"], prev);
        assert_eq!(r["userConfigProvided"], json!(true));
        assert!(report(None, None)["userConfigProvided"].is_null());
    }
}
