//! Reports that could not be sent, as files in a directory (`<state-dir>/reports/` in the
//! initramfs, `/var/lib/agent/reports/` in the new root): one `<time>-<id>.json` per report
//! (the body as it is sent), beside `url`, `auth` (the `Authorization` header value, 0600)
//! and `ca.pem` (the CAs), so that `agent report drain --dir` needs nothing else. At most
//! [`MAX_QUEUED`] reports are kept: the oldest are dropped, with a log line. Sent oldest
//! first; a report the server took is removed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result, bail};

use super::model::{Report, Target};
use super::send;

/// Reports kept at most in a queue.
pub const MAX_QUEUED: usize = 100;
const URL_FILE: &str = "url";
const AUTH_FILE: &str = "auth";
const CA_FILE: &str = "ca.pem";

/// The queued reports in `dir`, oldest first.
pub fn list(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    Ok(v)
}

/// Queues `r` for `t` in `dir`; returns the report's file. Drops the oldest beyond
/// [`MAX_QUEUED`].
pub fn push(dir: &Path, t: &Target, r: &Report) -> Result<PathBuf> {
    let body = serde_json::to_vec(r).context("encoding report")?;
    push_bytes(dir, t, &body, &r.id)
}

fn push_bytes(dir: &Path, t: &Target, body: &[u8], id: &str) -> Result<PathBuf> {
    crate::util::mkdir_private(dir)?;
    crate::util::write_atomic(&dir.join(URL_FILE), t.url.as_bytes(), 0o600)?;
    match &t.auth {
        Some(a) => crate::util::write_atomic(&dir.join(AUTH_FILE), a.as_bytes(), 0o600)?,
        None => {
            let _ = std::fs::remove_file(dir.join(AUTH_FILE));
        }
    }
    if !t.cas.is_empty() {
        crate::util::write_atomic(&dir.join(CA_FILE), &t.cas.concat(), 0o600)?;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let path = dir.join(format!("{nanos:020}-{id}.json"));
    crate::util::write_atomic(&path, body, 0o600)?;
    let all = list(dir)?;
    if all.len() > MAX_QUEUED {
        for old in &all[..all.len() - MAX_QUEUED] {
            log::warn!(
                "report queue {} holds more than {MAX_QUEUED} reports: dropping the oldest, {}",
                dir.display(),
                old.display()
            );
            let _ = std::fs::remove_file(old);
        }
    }
    Ok(path)
}

/// Where the reports queued in `dir` go (`agent report drain`).
pub fn target_of(dir: &Path) -> Result<Target> {
    let read = |f: &str| std::fs::read(dir.join(f));
    let url =
        read(URL_FILE).with_context(|| format!("reading {}", dir.join(URL_FILE).display()))?;
    let url = String::from_utf8_lossy(&url).trim().to_string();
    if url.is_empty() {
        bail!("{}: no report URL", dir.join(URL_FILE).display());
    }
    Ok(Target {
        url,
        auth: read(AUTH_FILE)
            .ok()
            .map(|a| String::from_utf8_lossy(&a).trim().to_string())
            .filter(|a| !a.is_empty()),
        cas: read(CA_FILE).ok().into_iter().collect(),
        ..Target::default()
    })
}

/// Sends the reports queued in `dir` to `t`, oldest first, removing each one sent (or
/// refused for good). Stops at the first that cannot be sent (the error says why), and at
/// `deadline` if given (the rest stays queued). Returns how many were sent.
pub fn drain(dir: &Path, t: &Target, deadline: Option<Instant>) -> Result<usize> {
    let mut sent = 0;
    for p in list(dir)? {
        let by = match deadline {
            Some(d) if Instant::now() >= d => break,
            Some(d) => d,
            None => Instant::now() + send::BUDGET,
        };
        let body = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
        match send::send_bytes(t, &body, by) {
            Ok(()) => sent += 1,
            Err(send::Error::Refused(e)) => {
                log::warn!("queued report {} refused, dropped: {e:#}", p.display());
            }
            Err(send::Error::Unreachable(e)) => {
                return Err(e.context(format!(
                    "{} reports still queued in {}",
                    list(dir)?.len(),
                    dir.display()
                )));
            }
        }
        std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
    }
    if sent > 0 {
        log::info!("{sent} queued reports sent from {}", dir.display());
    }
    Ok(sent)
}

/// `agent report drain`: sends every report queued in `dir` to the URL kept with them; once
/// none is left, removes the directory (its `auth` file holds the token). Nothing queued is
/// not an error.
pub fn drain_dir(dir: &Path) -> Result<()> {
    if list(dir)?.is_empty() {
        log::info!("no reports queued in {}", dir.display());
        return remove_queue(dir);
    }
    let t = target_of(dir)?;
    let sent = drain(dir, &t, None)?;
    log::info!("all {sent} queued reports sent from {}", dir.display());
    remove_queue(dir)
}

fn remove_queue(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", dir.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_keeps_the_newest_hundred() {
        let d = std::env::temp_dir().join(format!("agent-queue-{}", uuid::Uuid::new_v4().simple()));
        let t = Target {
            url: "http://127.0.0.1:9/report".into(),
            auth: Some("Bearer tok_q".into()),
            ..Target::default()
        };
        let mut ids = Vec::new();
        for n in 0..MAX_QUEUED + 3 {
            let r = Report {
                id: format!("r{n:03}"),
                ..Report::default()
            };
            push(&d, &t, &r).unwrap();
            ids.push(r.id);
        }
        let left = list(&d).unwrap();
        assert_eq!(left.len(), MAX_QUEUED);
        // The three oldest went.
        let first = std::fs::read_to_string(&left[0]).unwrap();
        assert!(first.contains("\"r003\""), "{first}");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&d), 0o700);
        assert_eq!(mode(&d.join(AUTH_FILE)), 0o600);
        let back = target_of(&d).unwrap();
        assert_eq!(back.url, t.url);
        assert_eq!(back.auth, t.auth);
        // The token is beside the reports, never in one.
        assert!(!first.contains("tok_q"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
