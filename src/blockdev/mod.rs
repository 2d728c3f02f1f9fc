//! Block devices: GPT tables, the partition planner, probing, kernel partition updates, and
//! the decisions and tools of each layer on top: RAID (mdadm), LUKS (cryptsetup, clevis),
//! filesystems (reuse/wipe/refuse, mkfs); in-use guards, failpoints.

pub mod failpoint;
pub mod filesystem;
pub mod gpt;
pub mod inuse;
pub mod kernel;
pub mod luks;
pub mod plan;
pub mod probe;
pub mod raid;
