//! A report and where it goes (docs/reports.md, "A report"): the types every part of the
//! reporting shares, below them.

use super::redact;
use crate::endpoints::Endpoints;
use runtime::limits::Limits;

/// The report's wire types, one definition shared with the server (crates/report-format).
pub use report_format::{
    AppliedConfig, Changes, Filesystems, MAX_PATHS, Outcome as StageOutcome, Partitions, Report,
    Stage as ReportStage,
};

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
    /// The hostname the applied config gives the machine (its `/etc/hostname`), reported
    /// when the kernel's is not set yet (the initramfs).
    pub hostname: Option<String>,
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
