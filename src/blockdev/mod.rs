//! Block devices: GPT tables, the partition planner, probing, kernel partition updates, in-use
//! guards, failpoints.

pub mod failpoint;
pub mod gpt;
pub mod inuse;
pub mod kernel;
pub mod plan;
pub mod probe;
