//! A report and where it goes (docs/reports.md, "A report"): the types every part of the
//! reporting shares, below them.

use serde::{Deserialize, Serialize};

use super::identity::Machine;
use super::redact;
use crate::endpoints::Endpoints;
use crate::limits::Limits;

/// Paths listed in `changes.paths` at most (then `paths_truncated`).
pub const MAX_PATHS: usize = 1000;
/// One report (docs/reports.md, "A report").
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    pub id: String,
    pub boot_id: String,
    pub sent: String,
    pub machine: Machine,
    pub agent: String,
    pub config: AppliedConfig,
    pub stage: String,
    pub outcome: String,
    #[serde(rename = "final")]
    pub final_: bool,
    pub duration_ms: u64,
    pub changes: Changes,
    pub error: Option<String>,
    pub log_tail: Vec<String>,
}

/// `config`: what the server said it served.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AppliedConfig {
    pub pool: Option<String>,
    pub name: Option<String>,
    pub hash: Option<String>,
}

/// `changes`: what a stage changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    pub partitions: Partitions,
    pub filesystems: Filesystems,
    pub paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths_truncated: Option<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partitions {
    pub created: Vec<String>,
    pub kept: Vec<String>,
    pub deleted: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filesystems {
    pub made: Vec<String>,
    pub reused: Vec<String>,
}

impl Changes {
    /// Changes listing `paths` (at most [`MAX_PATHS`], then the count of the others).
    pub fn of_paths(mut paths: Vec<String>) -> Changes {
        let n = paths.len();
        paths.truncate(MAX_PATHS);
        Changes {
            paths_truncated: (n > MAX_PATHS).then(|| n - MAX_PATHS),
            paths,
            ..Changes::default()
        }
    }
}

/// Where and how reports go: the URL, the `Authorization` header, the CAs, and what the
/// server said it served. None of it is ever in a report body or a log line but the URL
/// without its query.
#[derive(Clone, Default)]
pub struct Target {
    pub url: String,
    pub auth: Option<String>,
    pub cas: Vec<Vec<u8>>,
    pub config: AppliedConfig,
    pub endpoints: Endpoints,
    pub limits: Limits,
}

impl std::fmt::Debug for Target {
    /// Without the `Authorization` value and the URL's query.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &redact::url(&self.url))
            .field("auth", &self.auth.as_ref().map(|_| "…"))
            .field("cas", &self.cas.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
