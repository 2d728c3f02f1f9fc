//! One logger for the whole program: every line is tagged with the current stage, goes to
//! stderr and, in the initramfs (`--log-kmsg`), also to /dev/kmsg so it reaches the journal.
//!
//! The stage tag ([`set_stage`]) and the kmsg switch are process-global, like the `log`
//! facade's logger they belong to: a `log::info!` anywhere has no context argument to carry
//! them. They only shape log lines, never what the program does. So are the two other places
//! the logger writes to: a bounded ring of the last [`RING_LINES`] lines ([`recent`], the log
//! tail of a failure report) and an optional log file ([`tee_to`], `<state-dir>/agent.log`).
//!
//! A redactor ([`set_redactor`]) rewrites every message before it goes anywhere (stderr,
//! the ring, the log file, /dev/kmsg): the agent installs one that removes secrets
//! (URL userinfo and queries, password hashes, credentials), so no caller has to remember.
//!
//! Under systemd (stderr is the journal's stream, `JOURNAL_STREAM`), each stderr line starts
//! with its syslog priority (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug), which
//! journald takes as the line's priority and strips: `journalctl -p err` finds the errors.
//! [`Format::Json`] writes each line as one JSON object (time, level, stage, message) instead.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use log::{Level, LevelFilter, Log, Metadata, Record};

static STAGE: Mutex<&'static str> = Mutex::new("agent");
static KMSG: AtomicBool = AtomicBool::new(false);
/// stderr is the journal's stream: lines carry their priority prefix.
static JOURNAL: AtomicBool = AtomicBool::new(false);
/// Lines as JSON objects ([`Format::Json`]).
static JSON: AtomicBool = AtomicBool::new(false);
/// The last lines logged, oldest first, at most [`RING_LINES`].
static RING: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());
/// The file every line is also appended to ([`tee_to`]).
static TEE: Mutex<Option<std::fs::File>> = Mutex::new(None);
/// Rewrites every message before it is written ([`set_redactor`]).
static REDACTOR: OnceLock<fn(&str) -> String> = OnceLock::new();

/// Lines kept by the ring ([`recent`]).
pub const RING_LINES: usize = 50;

struct Logger;

static LOGGER: Logger = Logger;

/// Sets the tag put on every following line.
pub fn set_stage(stage: &'static str) {
    if let Ok(mut s) = STAGE.lock() {
        *s = stage;
    }
}

pub fn stage() -> &'static str {
    STAGE.lock().map(|s| *s).unwrap_or("agent")
}

/// The last lines logged (at most [`RING_LINES`], oldest first, without their newline).
pub fn recent() -> Vec<String> {
    RING.lock()
        .map(|r| r.iter().cloned().collect())
        .unwrap_or_default()
}

/// Whether lines also go to /dev/kmsg (`--log-kmsg`).
pub fn kmsg() -> bool {
    KMSG.load(Ordering::Relaxed)
}

/// How much of an existing log file [`tee_to`] reads back (its last lines seed the ring).
const TAIL_READ_BYTES: u64 = 64 * 1024;

/// The last `n` whole lines of the last [`TAIL_READ_BYTES`] of `f`.
fn file_tail(f: &mut std::fs::File, n: usize) -> std::io::Result<Vec<String>> {
    use std::io::{Read, Seek, SeekFrom};
    let len = f.metadata()?.len();
    let from = len.saturating_sub(TAIL_READ_BYTES);
    f.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    f.take(TAIL_READ_BYTES).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<&str> = text.lines().collect();
    if from > 0 && !lines.is_empty() {
        lines.remove(0); // cut in the middle
    }
    let skip = lines.len().saturating_sub(n);
    Ok(lines[skip..].iter().map(|l| l.to_string()).collect())
}

/// Appends every following line to `path` too (created 0600 if missing); the lines logged
/// before (the ring's) are written first, so the file starts with the run's beginning.
/// The file's own last lines (an earlier stage's, each stage being its own process) go
/// into the ring before this process's, so [`recent`] is the run's tail, not the stage's.
pub fn tee_to(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let mut tee = TEE
        .lock()
        .map_err(|_| std::io::Error::other("logger lock poisoned"))?;
    if tee.is_none() {
        let earlier = file_tail(&mut f, RING_LINES).unwrap_or_default();
        let mine = recent();
        for l in &mine {
            f.write_all(format!("{l}\n").as_bytes())?;
        }
        if let Ok(mut r) = RING.lock() {
            let mut all: VecDeque<String> = earlier.into_iter().chain(mine).collect();
            while all.len() > RING_LINES {
                all.pop_front();
            }
            *r = all;
        }
    }
    *tee = Some(f);
    Ok(())
}

/// Passes every following message through `f` before it is written anywhere (stderr, the
/// ring, the log file, /dev/kmsg). The first call wins: a redactor is never replaced or
/// removed.
pub fn set_redactor(f: fn(&str) -> String) {
    let _ = REDACTOR.set(f);
}

/// How lines are written to stderr and the log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `agent[stage] level: message`
    #[default]
    Text,
    /// `{"time":"…","level":"…","stage":"…","message":"…"}`
    Json,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            _ => Err(format!("unknown log format {s:?}: text or json")),
        }
    }
}

/// Whether stderr is the stream `JOURNAL_STREAM` names (`<device>:<inode>`, in decimal):
/// systemd sets it for a unit whose stderr it connects to the journal, and children that
/// inherit the variable with another stderr must not take it for theirs.
fn stderr_is_journal() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// What a line written to stderr outside the logger (the server's access log) starts with to
/// carry `level`'s priority under the journal: `<6>` for info there, nothing elsewhere.
pub fn journal_prefix(level: Level) -> String {
    if JOURNAL.load(Ordering::Relaxed) {
        format!("<{}>", priority(level))
    } else {
        String::new()
    }
}

/// Syslog priorities: err 3, warning 4, info 6, debug 7.
fn priority(l: Level) -> u8 {
    match l {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        _ => 7,
    }
}

/// `s` as a JSON string, quotes included.
fn json_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                o.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Installs the logger. `verbosity`: -1 quiet (errors only), 0 info, 1 debug, 2+ trace.
pub fn init(verbosity: i8, kmsg: bool) {
    init_with(verbosity, kmsg, Format::Text)
}

/// [`init`] with the line format.
pub fn init_with(verbosity: i8, kmsg: bool, format: Format) {
    KMSG.store(kmsg, Ordering::Relaxed);
    JSON.store(format == Format::Json, Ordering::Relaxed);
    JOURNAL.store(stderr_is_journal(), Ordering::Relaxed);
    let level = match verbosity {
        i8::MIN..=-1 => LevelFilter::Error,
        0 => LevelFilter::Info,
        1 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    };
    // A second init (e.g. in tests) keeps the first logger.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let level = match r.level() {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        };
        let msg = r.args().to_string();
        let msg = match REDACTOR.get() {
            Some(f) => f(&msg),
            None => msg,
        };
        let text = format!("agent[{}] {level}: {msg}\n", stage());
        let line = if JSON.load(Ordering::Relaxed) {
            format!(
                "{{\"time\":\"{}\",\"level\":\"{level}\",\"stage\":{},\"message\":{}}}\n",
                crate::util::rfc3339_millis(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default(),
                ),
                json_string(stage()),
                json_string(&msg)
            )
        } else {
            text.clone()
        };
        let pri = priority(r.level());
        let out = if JOURNAL.load(Ordering::Relaxed) {
            format!("<{pri}>{line}")
        } else {
            line.clone()
        };
        let _ = std::io::stderr().write_all(out.as_bytes());
        if let Ok(mut r) = RING.lock() {
            if r.len() == RING_LINES {
                r.pop_front();
            }
            r.push_back(text.trim_end().to_string());
        }
        if let Ok(mut t) = TEE.lock()
            && let Some(f) = t.as_mut()
        {
            let _ = f.write_all(line.as_bytes());
        }
        if KMSG.load(Ordering::Relaxed)
            && let Ok(mut f) = std::fs::OpenOptions::new().write(true).open("/dev/kmsg")
        {
            let _ = f.write_all(format!("<{pri}>{text}").as_bytes());
        }
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ring_keeps_the_last_lines() {
        super::init(0, false);
        for i in 0..super::RING_LINES + 7 {
            log::info!("ring line {i}");
        }
        let r = super::recent();
        assert_eq!(r.len(), super::RING_LINES);
        // Other tests of this binary may log in between: look at this test's lines only.
        let ours: Vec<&String> = r.iter().filter(|l| l.contains("ring line")).collect();
        assert_eq!(
            ours.last().unwrap().as_str(),
            format!("agent[agent] info: ring line {}", super::RING_LINES + 6)
        );
        assert!(!r.iter().any(|l| l.ends_with("ring line 6")), "{r:?}");
    }
}

#[cfg(test)]
mod redactor_tests {
    #[test]
    fn every_line_passes_the_redactor_first() {
        super::init(0, false);
        super::set_redactor(|s| s.replace("sekrit-word", "…"));
        let p = std::env::temp_dir().join(format!("agent-logredact-{}", std::process::id()));
        super::tee_to(&p).unwrap();
        log::info!("password sekrit-word here");
        let r = super::recent();
        assert!(r.iter().any(|l| l.ends_with("password … here")), "{r:?}");
        assert!(!r.iter().any(|l| l.contains("sekrit-word")), "{r:?}");
        let file = std::fs::read_to_string(&p).unwrap();
        assert!(
            file.contains("password … here") && !file.contains("sekrit-word"),
            "{file}"
        );
        std::fs::remove_file(&p).unwrap();
    }
}

#[cfg(test)]
mod tail_tests {
    use std::io::Write;

    #[test]
    fn file_tail_is_the_last_whole_lines_within_the_read_window() {
        let p = std::env::temp_dir().join(format!("agent-logtail-{}", std::process::id()));
        let mut f = std::fs::File::create(&p).unwrap();
        for i in 0..3 {
            writeln!(f, "short {i}").unwrap();
        }
        drop(f);
        let mut f = std::fs::File::open(&p).unwrap();
        assert_eq!(
            super::file_tail(&mut f, 2).unwrap(),
            vec!["short 1".to_string(), "short 2".to_string()]
        );
        // Longer than the window: the first (cut) line is dropped, the tail is whole lines.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        let long = "x".repeat(1000);
        for i in 0..100 {
            writeln!(f, "{i:03} {long}").unwrap();
        }
        drop(f);
        let mut f = std::fs::File::open(&p).unwrap();
        let t = super::file_tail(&mut f, 500).unwrap();
        assert!(t.len() < 100 && t.len() >= 60, "{}", t.len());
        assert!(t.iter().all(|l| l.len() == 1004), "a cut line came back");
        assert!(t.last().unwrap().starts_with("099 "));
        std::fs::remove_file(&p).unwrap();
    }
}
