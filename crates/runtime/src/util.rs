//! Small shared pieces: atomic file writes and the one wrapper for external commands.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// Writes `data` to `path` atomically: a temporary file in the same directory (removed on
/// failure and on SIGINT/SIGTERM/SIGHUP, see [`crate::signals`]), fsync, mode set, then
/// rename over the target.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = path.file_name().and_then(OsStr::to_str).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    // Created owner-only, so that secrets are never readable by others while being written;
    // the final mode is set before the rename.
    let (mut f, mut temp) = crate::signals::Temp::create(&tmp, |p| {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(p)
    })
    .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(data)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting mode of {}", tmp.display()))?;
    f.sync_all()
        .with_context(|| format!("syncing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    temp.disarm();
    Ok(())
}

/// Output of a finished command.
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs `op`, trying again (at most 50 times, 20 ms apart: about a second) while it fails with
/// the transient `errno`. A descriptor that a child another thread forked at that moment
/// inherited keeps a just-written program "text file busy" (ETXTBSY) or a filesystem busy
/// (EBUSY) until that child execs.
pub fn retry_while_errno<T>(
    errno: i32,
    mut op: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let mut tries = 0;
    loop {
        match op() {
            Err(e) if e.raw_os_error() == Some(errno) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// The tools whose `--password` (`-p`) value is a password hash (shadow-utils).
const PASSWORD_TOOLS: &[&str] = &["useradd", "usermod", "groupadd", "groupmod"];
/// What [`shown_argv`] writes for a password hash.
pub const HIDDEN_HASH: &str = "<password hash>";

/// `argv` as it is logged and quoted in errors: the value of a shadow-utils tool's
/// `--password` (`-p`, `--password=`) written [`HIDDEN_HASH`], also when the tool is run as
/// `chroot ROOT TOOL …`.
pub fn shown_argv(argv: &[String]) -> String {
    let base = |a: &String| {
        Path::new(a)
            .file_name()
            .and_then(OsStr::to_str)
            .map(str::to_owned)
    };
    let password_tool = argv
        .iter()
        .take(3)
        .any(|a| base(a).is_some_and(|b| PASSWORD_TOOLS.contains(&b.as_str())));
    if !password_tool {
        return argv.join(" ");
    }
    let mut out: Vec<String> = Vec::with_capacity(argv.len());
    let mut hide = false;
    for a in argv {
        if hide {
            out.push(HIDDEN_HASH.into());
            hide = false;
            continue;
        }
        hide = a == "--password" || a == "-p";
        if a.starts_with("--password=") {
            out.push(format!("--password={HIDDEN_HASH}"));
        } else {
            out.push(a.clone());
        }
    }
    out.join(" ")
}

/// Runs an external tool: logs the argv, null stdin, captured output; a failure names the
/// command and the tail of its stderr. A password hash on the command line is never shown
/// ([`shown_argv`]).
pub fn run<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Result<Output> {
    run_with_stdin(program, args, None)
}

/// Like `run`, with bytes fed to the command's stdin.
pub fn run_with_stdin<S: AsRef<OsStr>>(
    program: &str,
    args: &[S],
    stdin: Option<&[u8]>,
) -> Result<Output> {
    let argv: Vec<String> = std::iter::once(program.to_string())
        .chain(
            args.iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned()),
        )
        .collect();
    log::debug!("running {}", shown_argv(&argv));
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = retry_while_errno(nix::libc::ETXTBSY, || cmd.spawn())
        .with_context(|| format!("starting {program}"))?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().context("stdin pipe")?;
        let data = input.to_vec();
        // Feed stdin from a thread so a command that writes a lot before reading cannot block us.
        let feeder = std::thread::spawn(move || pipe.write_all(&data));
        let out = child
            .wait_with_output()
            .with_context(|| format!("waiting for {program}"))?;
        let _ = feeder.join();
        return finish(&argv, out);
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("waiting for {program}"))?;
    finish(&argv, out)
}

fn finish(argv: &[String], out: std::process::Output) -> Result<Output> {
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(8).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "{} failed ({}): {}",
            shown_argv(argv),
            out.status,
            tail.join(" | ")
        );
    }
    Ok(Output {
        stdout: out.stdout,
        stderr: out.stderr,
    })
}

/// Whether `program` can be found on PATH.
pub fn have_program(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// A Unix time broken down into UTC calendar fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Sunday.
    pub weekday: u32,
}

/// RFC 3339 in UTC, to the second, of `secs` since the epoch (`2026-12-02T13:06:31Z`).
pub fn rfc3339(secs: u64) -> String {
    let t = utc(secs);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

/// RFC 3339 in UTC, to the millisecond, of `since_epoch` (`2026-12-02T13:06:31.042Z`).
pub fn rfc3339_millis(since_epoch: std::time::Duration) -> String {
    let s = rfc3339(since_epoch.as_secs());
    format!("{}.{:03}Z", &s[..s.len() - 1], since_epoch.subsec_millis())
}

/// UTC calendar fields of `secs` since the epoch (civil-from-days, H. Hinnant).
pub fn utc(secs: u64) -> Utc {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    Utc {
        year: yoe + era * 400 + i64::from(month <= 2),
        month,
        day,
        hour: (rem / 3600) as u32,
        minute: (rem % 3600 / 60) as u32,
        second: (rem % 60) as u32,
        // 1970-01-01 was a Thursday.
        weekday: ((days + 4) % 7) as u32,
    }
}

/// A fresh directory under the system's temporary directory for a unit test (created,
/// named after `tag`, the process and a UUID), removed with everything in it when dropped.
/// Creates directory `d` (and its parents) private to the owner: mode 0700, set again when an
/// existing directory has another mode. Used for the agent's state directory and the
/// server's checkpoint directory.
pub fn mkdir_private(d: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(d)
        .with_context(|| format!("creating {}", d.display()))?;
    // Only when it differs: a chmod, even to the same mode, is an inotify IN_ATTRIB event
    // for whoever watches the parent directory — the source watcher itself when the
    // checkpoint directory sits beside the source, which then reloaded on every save.
    let mode = std::fs::metadata(d)
        .with_context(|| format!("reading {}", d.display()))?
        .permissions()
        .mode();
    if mode & 0o7777 == 0o700 {
        return Ok(());
    }
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("setting the mode of {} to 0700", d.display()))
}

/// A directory under the temporary directory, removed on drop: for the unit tests of this
/// crate and of the crates above it (`test-hooks` only).
#[cfg(any(test, feature = "test-hooks"))]
pub struct TestDir(pub std::path::PathBuf);

#[cfg(any(test, feature = "test-hooks"))]
impl TestDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "agent-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&p).expect("creating a test directory");
        TestDir(p)
    }
}

#[cfg(any(test, feature = "test-hooks"))]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_hashes_are_not_shown() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shown_argv(&v(&[
                "/usr/sbin/useradd",
                "--root",
                "/r",
                "--password",
                "xyHASH",
                "core"
            ])),
            "/usr/sbin/useradd --root /r --password <password hash> core"
        );
        assert_eq!(
            shown_argv(&v(&[
                "chroot",
                "/r",
                "/usr/sbin/usermod",
                "-p",
                "$6$x$y",
                "core"
            ])),
            "chroot /r /usr/sbin/usermod -p <password hash> core"
        );
        assert_eq!(
            shown_argv(&v(&["groupadd", "--password=abc", "g"])),
            "groupadd --password=<password hash> g"
        );
        // Other tools' -p means something else.
        assert_eq!(shown_argv(&v(&["mkdir", "-p", "/a/b"])), "mkdir -p /a/b");
    }

    #[test]
    fn a_failed_commands_error_hides_its_password_hash() {
        let d = std::env::temp_dir().join(format!("runtime-useradd-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let tool = d.join("useradd");
        std::fs::write(
            &tool,
            "#!/bin/sh\necho \"useradd: cannot lock /etc/passwd\" >&2\nexit 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = run(
            &tool.to_string_lossy(),
            &["--password", "xyHASHsecret", "core"],
        )
        .err()
        .unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        let e = format!("{e:#}");
        assert!(e.contains("cannot lock"), "{e}");
        assert!(
            !e.contains("xyHASHsecret") && e.contains("<password hash>"),
            "{e}"
        );
    }

    #[test]
    fn utc_fields() {
        assert_eq!(
            utc(0),
            Utc {
                year: 1970,
                month: 1,
                day: 1,
                hour: 0,
                minute: 0,
                second: 0,
                weekday: 4
            }
        );
        // 2000-02-29T23:59:59Z, a Tuesday (leap day of a century leap year).
        assert_eq!(
            utc(951_868_799),
            Utc {
                year: 2000,
                month: 2,
                day: 29,
                hour: 23,
                minute: 59,
                second: 59,
                weekday: 2
            }
        );
        assert_eq!(rfc3339(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(
            rfc3339_millis(std::time::Duration::from_millis(951_868_799_042)),
            "2000-02-29T23:59:59.042Z"
        );
    }
}

/// What a file system object is, in words (for errors).
pub fn file_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// Why [`open_regular`] did not open a file.
#[derive(Debug)]
pub enum OpenRegularError {
    /// It could not be looked at or opened (`NotFound` when it does not exist).
    Io(std::io::Error),
    /// It is something else than a regular file: what it is, in words ([`file_kind`]).
    NotRegular(&'static str),
}

/// Opens `path` for reading only when it is a regular file, and never blocks on it: the path
/// is checked first (stat; lstat without `follow`, so that a symlink is refused), opened with
/// `O_NONBLOCK | O_NOCTTY` (and `O_NOFOLLOW` without `follow`) and checked again on the open
/// descriptor, so a swap in between cannot make the caller read a FIFO or a device. Returns
/// the file and its size.
pub fn open_regular(path: &Path, follow: bool) -> Result<(std::fs::File, u64), OpenRegularError> {
    let meta = if follow {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    }
    .map_err(OpenRegularError::Io)?;
    if !meta.file_type().is_file() {
        return Err(OpenRegularError::NotRegular(file_kind(&meta.file_type())));
    }
    let mut flags = nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY;
    if !follow {
        flags |= nix::libc::O_NOFOLLOW;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(OpenRegularError::Io)?;
    let meta = f.metadata().map_err(OpenRegularError::Io)?;
    if !meta.file_type().is_file() {
        return Err(OpenRegularError::NotRegular(file_kind(&meta.file_type())));
    }
    Ok((f, meta.len()))
}
