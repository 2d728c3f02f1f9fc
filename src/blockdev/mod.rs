//! Block devices: GPT tables, probing, kernel partition updates, in-use guards.
//! (Work in progress: see the disks stage issue.)
