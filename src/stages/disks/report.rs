//! What one run of the disks stage reports: its times (for the benchmark and the log) and
//! what it changed (for the stage's report to the server). Below `plan` and `apply`.

use std::time::Duration;

/// Times of one run, for the benchmark and the log, and what it changed (for the stage's
/// report, `crate::report`).
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub total: Duration,
    /// Summed wall time of the external mkfs/wipefs tools (they run in parallel).
    pub tools: Duration,
    /// Wall time of the filesystem phase (tools in parallel).
    pub fs_phase: Duration,
    /// Reading tables, planning, probing devices known before partitioning.
    pub planning: Duration,
    /// Table writes (with fsync), partition nodes, waiting for them.
    pub partitioning: Duration,
    /// Probing and checking filesystems after partitioning.
    pub probing: Duration,
    /// Of `partitioning`: writing the tables and waiting for fsync (disk I/O).
    pub table_io: Duration,
    /// Partitions created, kept and deleted; filesystems made and reused.
    pub changes: crate::report::Changes,
}
