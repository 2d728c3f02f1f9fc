//! Named failpoints for failure-injection tests: `AGENT_FAILPOINTS=after-table-write,...`.
//! The environment is read here and nowhere else.

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
