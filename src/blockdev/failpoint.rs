//! Named failpoints for failure-injection tests: `AGENT_FAILPOINTS=after-table-write,...`.
//! The environment is read here and nowhere else.
//!
//! Names used by the disks stage, in the order they are reached:
//! - `after-table-write`: the new table is on disk, the kernel not told yet (rolled back);
//! - `after-partition-nodes`: BLKPG done, nodes not yet waited for (rolled back);
//! - `after-partitioning`: every disk partitioned, tables not yet committed (rolled back);
//! - `after-wipe`: a filesystem's old signatures wiped, mkfs not run;
//! - `after-mkfs`: a filesystem created.

use anyhow::{Result, bail};

/// Fails with "failpoint NAME triggered" when `name` is listed in `AGENT_FAILPOINTS`.
pub fn hit(name: &str) -> Result<()> {
    if let Ok(list) = std::env::var("AGENT_FAILPOINTS")
        && list.split(',').any(|x| x.trim() == name)
    {
        bail!("failpoint {name} triggered");
    }
    Ok(())
}
