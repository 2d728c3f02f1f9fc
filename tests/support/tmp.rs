//! Temporary directories.

use std::path::{Path, PathBuf};

/// A fresh directory under the system temp dir, removed (with everything in it) on drop —
/// unless something is still mounted under it: never delete through a mount point.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "agent-test-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    /// `p` inside the directory (a leading `/` is inside too).
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p.trim_start_matches('/'))
    }
}

/// Whether anything is mounted at or under `p`.
pub fn mounted_under(p: &Path) -> bool {
    let m = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let p = p.to_string_lossy().to_string();
    m.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|mp| mp == p || mp.starts_with(&format!("{p}/")))
    })
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if mounted_under(&self.0) {
            eprintln!(
                "not removing {}: something is mounted under it",
                self.0.display()
            );
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
