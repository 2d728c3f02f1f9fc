//! Reports that could not be sent, as files in a directory (`<state-dir>/reports/` in the
//! initramfs, `/var/lib/agent/reports/` in the new root): one `<time>-<id>.json` per report
//! (the body as it is sent), beside `url`, `auth` (the `Authorization` header value, 0600)
//! and `ca.pem` (the CAs), so that `agent report drain --dir` needs nothing else. At most
//! [`MAX_QUEUED`] reports are kept: the oldest are dropped, with a log line. Sent oldest
//! first; a report the server took is removed.
//!
//! Reading a queue trusts none of its entries ([`read_entry`]): only regular files are read,
//! never through a symbolic link, never blocking (a FIFO), each within a bound (a report
//! [`MAX_REPORT_BYTES`], the config server's body limit; `url` and `auth`
//! [`MAX_SMALL_BYTES`]; `ca.pem` [`MAX_CA_BYTES`]). A report refused so is logged and
//! removed (it can never be sent) and the others are sent; a `url`, `auth` or `ca.pem`
//! refused so stops the drain, nothing sent.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result, bail};

use super::model::{Report, Target};
use super::send;

/// Reports kept at most in a queue.
pub const MAX_QUEUED: usize = 100;
/// The largest queued report read: the config server's default body limit
/// (`--max-body-bytes`, docs/reports.md), which would refuse a larger one.
pub const MAX_REPORT_BYTES: u64 = 256 << 10;
/// The largest `url` or `auth` file read.
pub const MAX_SMALL_BYTES: u64 = 16 << 10;
/// The largest `ca.pem` read.
pub const MAX_CA_BYTES: u64 = 1 << 20;
const URL_FILE: &str = "url";
const AUTH_FILE: &str = "auth";
const CA_FILE: &str = "ca.pem";

/// Why an entry of a queue was not read.
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    /// Not a regular file, or larger than its bound: it is not read, ever.
    #[error("{0}")]
    Refused(String),
    /// It is not there.
    #[error("{0}: not found")]
    Missing(String),
    /// Reading it failed.
    #[error(transparent)]
    Io(anyhow::Error),
}

/// The bytes of the queue entry `p`, `what` naming it in errors ("queued report"): only a
/// regular file, opened without following a symbolic link and without blocking
/// (`O_NOFOLLOW | O_NONBLOCK`, then `fstat` on what was opened), at most `limit` bytes.
pub fn read_entry(p: &Path, limit: u64, what: &str) -> Result<Vec<u8>, EntryError> {
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let not_regular = |kind: &str| {
        EntryError::Refused(format!(
            "{}: not a regular file ({kind}): a {what} is read only from a regular file",
            p.display()
        ))
    };
    let flags = nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC;
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(p)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EntryError::Missing(p.display().to_string()));
        }
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(not_regular("a symbolic link"));
        }
        // A socket.
        Err(e) if e.raw_os_error() == Some(nix::libc::ENXIO) => {
            return Err(not_regular("a socket"));
        }
        Err(e) => {
            return Err(EntryError::Io(
                anyhow::Error::new(e).context(format!("opening {}", p.display())),
            ));
        }
    };
    let m = f
        .metadata()
        .with_context(|| format!("reading the status of {}", p.display()))
        .map_err(EntryError::Io)?;
    let t = m.file_type();
    if !t.is_file() {
        return Err(not_regular(if t.is_fifo() {
            "a FIFO"
        } else if t.is_dir() {
            "a directory"
        } else if t.is_block_device() || t.is_char_device() {
            "a device"
        } else {
            "not a file"
        }));
    }
    let too_large = || {
        EntryError::Refused(format!(
            "{}: larger than the {} limit of a {what}",
            p.display(),
            runtime::limits::human(limit)
        ))
    };
    if m.len() > limit {
        return Err(too_large());
    }
    let mut v = Vec::with_capacity(m.len() as usize);
    f.take(limit + 1)
        .read_to_end(&mut v)
        .with_context(|| format!("reading {}", p.display()))
        .map_err(EntryError::Io)?;
    if v.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(v)
}

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
    runtime::util::mkdir_private(dir)?;
    runtime::util::write_atomic(&dir.join(URL_FILE), t.url.as_bytes(), 0o600)?;
    match &t.auth {
        Some(a) => runtime::util::write_atomic(&dir.join(AUTH_FILE), a.as_bytes(), 0o600)?,
        None => {
            let _ = std::fs::remove_file(dir.join(AUTH_FILE));
        }
    }
    if !t.cas.is_empty() {
        runtime::util::write_atomic(&dir.join(CA_FILE), &t.cas.concat(), 0o600)?;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let path = dir.join(format!("{nanos:020}-{id}.json"));
    runtime::util::write_atomic(&path, body, 0o600)?;
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

/// Where the reports queued in `dir` go (`agent report drain`): `url` (required), `auth`
/// and `ca.pem` (optional), each read by [`read_entry`] within its bound.
pub fn target_of(dir: &Path) -> Result<Target> {
    let read = |f: &str, limit: u64, what: &str| -> Result<Option<Vec<u8>>> {
        match read_entry(&dir.join(f), limit, what) {
            Ok(b) => Ok(Some(b)),
            Err(EntryError::Missing(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    };
    let url = read(URL_FILE, MAX_SMALL_BYTES, "report URL")?
        .with_context(|| format!("reading {}: not found", dir.join(URL_FILE).display()))?;
    let url = String::from_utf8_lossy(&url).trim().to_string();
    if url.is_empty() {
        bail!("{}: no report URL", dir.join(URL_FILE).display());
    }
    Ok(Target {
        url,
        auth: read(AUTH_FILE, MAX_SMALL_BYTES, "report token")?
            .map(|a| String::from_utf8_lossy(&a).trim().to_string())
            .filter(|a| !a.is_empty()),
        cas: read(CA_FILE, MAX_CA_BYTES, "CA bundle")?
            .into_iter()
            .collect(),
        ..Target::default()
    })
}

/// Sends the reports queued in `dir` to `t`, oldest first, removing each one sent (or
/// refused for good). A queued report that is not a regular file or is too large
/// ([`read_entry`]) is logged and removed, one that cannot be read is logged and left; the
/// others are sent. Stops at the first that cannot be sent (the error says why), and at
/// `deadline` if given (the rest stays queued). Returns how many were sent; an error when
/// some could not be read.
pub fn drain(dir: &Path, t: &Target, deadline: Option<Instant>) -> Result<usize> {
    let mut sent = 0;
    let mut unreadable = 0;
    for p in list(dir)? {
        let by = match deadline {
            Some(d) if Instant::now() >= d => break,
            Some(d) => d,
            None => Instant::now() + send::BUDGET,
        };
        let body = match read_entry(&p, MAX_REPORT_BYTES, "queued report") {
            Ok(b) => b,
            // Gone meanwhile (another drain sent it).
            Err(EntryError::Missing(_)) => continue,
            Err(EntryError::Refused(why)) => {
                log::warn!("skipping a queued report, removed: {why}");
                std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
                continue;
            }
            Err(EntryError::Io(e)) => {
                log::warn!("skipping a queued report, left in the queue: {e:#}");
                unreadable += 1;
                continue;
            }
        };
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
    if unreadable > 0 {
        bail!(
            "{unreadable} queued reports in {} could not be read (see above): left queued",
            dir.display()
        );
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

    #[test]
    fn entries_are_regular_files_within_their_bound() {
        let d = std::env::temp_dir().join(format!("agent-entry-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("a.json");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read_entry(&f, 5, "queued report").unwrap(), b"12345");
        let refused = |p: &Path, limit: u64| match read_entry(p, limit, "queued report") {
            Err(EntryError::Refused(why)) => why,
            other => panic!("{}: {other:?}", p.display()),
        };
        let why = refused(&f, 4);
        assert!(
            why.contains("a.json: larger than the 4 bytes limit of a queued report"),
            "{why}"
        );
        let l = d.join("l.json");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        assert!(refused(&l, 100).contains("not a regular file (a symbolic link)"));
        let fifo = d.join("f.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(refused(&fifo, 100).contains("not a regular file (a FIFO)"));
        assert!(refused(&d, 100).contains("not a regular file (a directory)"));
        assert!(matches!(
            read_entry(&d.join("none"), 1, "x"),
            Err(EntryError::Missing(_))
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
