//! Integration tests: The disks stage on real loop devices (root): partitions, filesystems, RAID
//! and LUKS (a real tang server too), and the partition planner against sgdisk.
//!
//! One test binary (`cargo test --test disks`); each file below is a module of it.

#[path = "../support/mod.rs"]
mod support;

mod luks_tang_host;
mod raid_luks_host;
mod sgdisk_crosscheck;
mod stage;
