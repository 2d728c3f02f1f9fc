//! Files the server writes for itself (checkpoints, the embedded store's marker): private,
//! atomic, synced.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, Result};

/// Syncs directory `d` (after a rename into it).
pub fn sync_dir(d: &Path) -> Result<()> {
    std::fs::File::open(d)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", d.display()))
}

/// Writes `data` to `path` atomically: a 0600 temp file beside it, fsynced, renamed over it.
/// The caller syncs the directory.
pub fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let res = (|| -> Result<()> {
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("setting the mode of {}", tmp.display()))?;
        f.write_all(data)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all()
            .with_context(|| format!("syncing {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}
