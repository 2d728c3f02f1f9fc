//! Block devices: GPT tables, the partition planner, probing, kernel partition updates, RAID
//! (mdadm), LUKS (cryptsetup, clevis), in-use guards, failpoints.

pub mod failpoint;
pub mod gpt;
pub mod inuse;
pub mod kernel;
pub mod luks;
pub mod plan;
pub mod probe;
pub mod raid;
