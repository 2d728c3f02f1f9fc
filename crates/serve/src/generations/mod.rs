//! Generations: what the source gave (assigned, active, lastKnownGood: `status`), what the
//! `--state-dir` keeps of them (`checkpoint`), and the watcher that loads new ones (`watch`).

pub mod checkpoint;
pub mod status;
pub mod watch;
