//! A machine's provisioning report as it travels (docs/reports.md, "A report"): what the
//! agent serializes and POSTs, and what the server parses. One definition for both sides, so
//! the two cannot drift. What the server checks on arrival (the limits, which fields count)
//! and what it keeps are the server's (`serve::inventory::model`); the agent builds reports
//! within those limits.
//!
//! Parsing is lenient where a report may leave a field out (every optional field, the lists,
//! `final`, `duration_ms`, `changes` have defaults) and strict where it may not (`format`,
//! `id`, `bootId`, `machine.id`, `stage`, `outcome`). Fields not listed here are dropped.
//!
//! Keys are camelCase, as every API of the server's; the snake_case names that agents
//! before it sent (`boot_id`, `duration_ms`, `log_tail`, `instance_id`, `paths_truncated`)
//! are read too, so machines already in the field keep reporting.

use std::fmt;

use serde::{Deserialize, Serialize};

/// `changes.paths` entries at most; the agent counts the rest in `paths_truncated`.
pub const MAX_PATHS: usize = 1000;

/// One report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The report format (1).
    pub format: u32,
    /// The report's own id: a retry carries the same one.
    pub id: String,
    #[serde(alias = "boot_id")]
    pub boot_id: String,
    /// The agent's clock when it sent the report (RFC 3339).
    #[serde(default)]
    pub sent: Option<String>,
    pub machine: Identity,
    /// The agent's version.
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub config: Option<AppliedConfig>,
    pub stage: Stage,
    pub outcome: Outcome,
    /// The boot's last stage.
    #[serde(default, rename = "final")]
    pub last: bool,
    #[serde(default, alias = "duration_ms")]
    pub duration_ms: u64,
    #[serde(default)]
    pub changes: Changes,
    /// On failure: the error, on one line, secrets removed.
    #[serde(default)]
    pub error: Option<String>,
    /// On failure: the last log lines, secrets removed.
    #[serde(default, alias = "log_tail")]
    pub log_tail: Vec<String>,
    /// The running kernel's release (`uname -r`): the `running` report of an installed
    /// system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
}

/// Who a machine is (`machine`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    pub id: String,
    #[serde(default)]
    pub uuid: Option<String>,
    #[serde(default)]
    pub serial: Option<String>,
    #[serde(default)]
    pub macs: Vec<String>,
    #[serde(default)]
    pub platform: Option<String>,
    #[serde(default, alias = "instance_id")]
    pub instance_id: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
}

/// Which config a machine applied, as the server named it (never a token, never contents).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedConfig {
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub hash: Option<String>,
}

/// What a stage changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Changes {
    #[serde(default)]
    pub partitions: Partitions,
    #[serde(default)]
    pub filesystems: Filesystems,
    /// Paths written, at most [`MAX_PATHS`].
    #[serde(default)]
    pub paths: Vec<String>,
    /// Paths written beyond [`MAX_PATHS`] (absent when none).
    #[serde(default, skip_serializing_if = "is_zero", alias = "paths_truncated")]
    pub paths_truncated: u64,
}

impl Changes {
    /// Changes listing `paths` (at most [`MAX_PATHS`], then the count of the others).
    pub fn of_paths(mut paths: Vec<String>) -> Changes {
        let n = paths.len();
        paths.truncate(MAX_PATHS);
        Changes {
            paths_truncated: n.saturating_sub(MAX_PATHS) as u64,
            paths,
            ..Changes::default()
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partitions {
    #[serde(default)]
    pub created: Vec<String>,
    #[serde(default)]
    pub kept: Vec<String>,
    #[serde(default)]
    pub deleted: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filesystems {
    #[serde(default)]
    pub made: Vec<String>,
    #[serde(default)]
    pub reused: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The stage a report is about.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    #[default]
    Fetch,
    Disks,
    Files,
    /// `agent install` wrote the OS image and placed the config (a live system's boot).
    Install,
    /// The installed system came up (its `agent report-running`, once per install).
    Running,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Fetch => "fetch",
            Stage::Disks => "disks",
            Stage::Files => "files",
            Stage::Install => "install",
            Stage::Running => "running",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the stage went: `started` (the fetch stage only, before it fetches), `ok`, `failed`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Started,
    #[default]
    Ok,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Started => "started",
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report goes out and comes back the same, with the field names docs/reports.md gives.
    #[test]
    fn a_report_round_trips() {
        let r = Report {
            format: 1,
            id: "6f1c2a9e4b8d4e0f9a7c3b2d1e0f4a5b".into(),
            boot_id: "0d3c".into(),
            sent: Some("2026-11-27T05:40:12Z".into()),
            machine: Identity {
                id: "4c4c4544-0000".into(),
                uuid: Some("4c4c4544-0000".into()),
                serial: Some("SER1".into()),
                macs: vec!["52:54:00:12:34:56".into()],
                platform: Some("qemu".into()),
                instance_id: None,
                hostname: Some("node-1".into()),
            },
            agent: Some("0.1.0".into()),
            config: Some(AppliedConfig {
                pool: Some("worker".into()),
                name: Some("worker-abc".into()),
                hash: Some("sha256-00".into()),
            }),
            stage: Stage::Files,
            outcome: Outcome::Failed,
            last: true,
            duration_ms: 1234,
            changes: Changes {
                partitions: Partitions {
                    created: vec!["/dev/vda4".into()],
                    ..Partitions::default()
                },
                filesystems: Filesystems {
                    made: vec!["/dev/vda4 (xfs)".into()],
                    ..Filesystems::default()
                },
                ..Changes::of_paths((0..MAX_PATHS + 2).map(|i| format!("/p{i}")).collect())
            },
            error: Some("files: writing /etc/app.conf".into()),
            log_tail: vec!["files: failed".into()],
            kernel: None,
        };
        let json = serde_json::to_value(&r).unwrap();
        for k in [
            "format",
            "id",
            "bootId",
            "sent",
            "machine",
            "agent",
            "config",
            "stage",
            "outcome",
            "final",
            "durationMs",
            "changes",
            "error",
            "logTail",
        ] {
            assert!(json.get(k).is_some(), "{k} in {json}");
        }
        assert_eq!(json["stage"], "files");
        assert_eq!(json["outcome"], "failed");
        assert_eq!(json["changes"]["pathsTruncated"], 2);
        assert_eq!(
            json["machine"].get("instanceId"),
            Some(&serde_json::Value::Null)
        );
        assert_eq!(
            json["changes"]["paths"].as_array().unwrap().len(),
            MAX_PATHS
        );
        let back: Report = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        // Nothing truncated: no `paths_truncated`; the least a report may carry parses.
        let v = serde_json::to_value(Changes::of_paths(vec!["/a".into()])).unwrap();
        assert!(v.get("pathsTruncated").is_none(), "{v}");
        let least: Report = serde_json::from_str(
            r#"{"format":1,"id":"a","boot_id":"b","machine":{"id":"m"},"stage":"fetch","outcome":"started"}"#,
        )
        .unwrap();
        assert_eq!(least.outcome, Outcome::Started);
        assert!(least.config.is_none() && !least.last);
    }

    /// A report as agents before camelCase sent it (snake_case keys) reads the same as one
    /// sent now; what goes out is camelCase only.
    #[test]
    fn snake_case_reports_are_still_read() {
        let old = r#"{"format":1,"id":"a","boot_id":"b","machine":{"id":"m","instance_id":"i-1"},
            "stage":"files","outcome":"failed","final":true,"duration_ms":7,
            "changes":{"paths":["/a"],"paths_truncated":3},"log_tail":["x"]}"#;
        let new = r#"{"format":1,"id":"a","bootId":"b","machine":{"id":"m","instanceId":"i-1"},
            "stage":"files","outcome":"failed","final":true,"durationMs":7,
            "changes":{"paths":["/a"],"pathsTruncated":3},"logTail":["x"]}"#;
        let (o, n): (Report, Report) = (
            serde_json::from_str(old).unwrap(),
            serde_json::from_str(new).unwrap(),
        );
        assert_eq!(o, n);
        assert_eq!(
            (o.boot_id.as_str(), o.duration_ms, o.changes.paths_truncated),
            ("b", 7, 3)
        );
        assert_eq!(o.machine.instance_id.as_deref(), Some("i-1"));
        assert_eq!(o.log_tail, ["x"]);
        let out = serde_json::to_string(&o).unwrap();
        assert!(!out.contains('_'), "{out}");
    }
}
