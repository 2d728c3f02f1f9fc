//! One logger for the whole program: every line is tagged with the current stage, goes to
//! stderr and, in the initramfs (`--log-kmsg`), also to /dev/kmsg so it reaches the journal.
//!
//! The stage tag ([`set_stage`]) and the kmsg switch are process-global, like the `log`
//! facade's logger they belong to: a `log::info!` anywhere has no context argument to carry
//! them. They only shape log lines, never what the program does.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use log::{Level, LevelFilter, Log, Metadata, Record};

static STAGE: Mutex<&'static str> = Mutex::new("agent");
static KMSG: AtomicBool = AtomicBool::new(false);

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

/// Installs the logger. `verbosity`: -1 quiet (errors only), 0 info, 1 debug, 2+ trace.
pub fn init(verbosity: i8, kmsg: bool) {
    KMSG.store(kmsg, Ordering::Relaxed);
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
        let line = format!("agent[{}] {level}: {}\n", stage(), r.args());
        let _ = std::io::stderr().write_all(line.as_bytes());
        if KMSG.load(Ordering::Relaxed) {
            // Syslog priorities: err 3, warning 4, info 6, debug 7.
            let pri = match r.level() {
                Level::Error => 3,
                Level::Warn => 4,
                Level::Info => 6,
                _ => 7,
            };
            if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open("/dev/kmsg") {
                let _ = f.write_all(format!("<{pri}>{line}").as_bytes());
            }
        }
    }

    fn flush(&self) {}
}
