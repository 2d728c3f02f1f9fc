//! Named failpoints for failure-injection tests: `AGENT_FAILPOINTS=after-table-write,...`.
//! Test builds only (feature `test-hooks`): in the shipped binary [`hit`] does nothing and
//! the variable is not read. The environment is read here and nowhere else.
//!
//! Names used by the disks stage, in the order they are reached:
//! - `after-table-write`: the new table is on disk, the kernel not told yet (rolled back);
//! - `blkpg`: the first BLKPG update of the process is refused (as for a busy partition);
//! - `after-partition-nodes`: BLKPG done, nodes not yet waited for (rolled back);
//! - `after-partitioning`: every disk partitioned, tables not yet committed (rolled back);
//! - `after-wipe`: a filesystem's old signatures wiped, mkfs not run;
//! - `after-mkfs`: a filesystem created.

use anyhow::Result;

/// Fails with "failpoint NAME triggered" when `name` is listed in `AGENT_FAILPOINTS` (test
/// builds only).
#[cfg(feature = "test-hooks")]
pub fn hit(name: &str) -> Result<()> {
    if let Ok(list) = std::env::var("AGENT_FAILPOINTS")
        && list.split(',').any(|x| x.trim() == name)
    {
        anyhow::bail!("failpoint {name} triggered");
    }
    Ok(())
}

/// Does nothing: failpoints exist in test builds only.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn hit(_name: &str) -> Result<()> {
    Ok(())
}

/// [`hit`], but only the first time `name` is reached in this process.
#[cfg(feature = "test-hooks")]
pub fn hit_once(name: &str) -> Result<()> {
    static FIRED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let r = hit(name);
    if r.is_err() {
        let mut fired = FIRED.lock().unwrap_or_else(|e| e.into_inner());
        if fired.iter().any(|f| f == name) {
            return Ok(());
        }
        fired.push(name.to_string());
    }
    r
}

/// Does nothing: failpoints exist in test builds only.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub fn hit_once(_name: &str) -> Result<()> {
    Ok(())
}
