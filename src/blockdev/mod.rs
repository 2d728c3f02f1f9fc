//! Block devices: GPT tables, the partition planner, probing, kernel partition updates, and
//! the decisions and tools of each layer on top: RAID (mdadm), LUKS (cryptsetup, clevis),
//! filesystems (reuse/wipe/refuse, mkfs); in-use guards, failpoints.
//!
//! The disks stage asks each layer for its part in turn, partitions (`partitions`), then RAID
//! (`raid`), LUKS (`luks`) and filesystems (`filesystem`): a `plan` from the config's entries,
//! then carrying that plan out. Each layer gets the devices the plan makes below it
//! (`devices::Devices`, computed once from the disks' plans and extended by each layer) and
//! resolves the devices it names there; none calls back into the stage.

pub mod devices;
pub mod failpoint;
pub mod filesystem;
pub mod gpt;
pub mod inuse;
pub mod kernel;
pub mod luks;
pub mod mbr;
pub mod partitions;
pub mod plan;
pub mod probe;
pub mod raid;
