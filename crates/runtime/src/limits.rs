//! Limits on what the agent holds in memory, and the redirect policy, in one place.
//!
//! Everything read whole into memory (the user config, merged and replaced configs, CA
//! bundles, LUKS key files, platform user data, `validate`'s input) is refused once it grows
//! past [`Limits::max_config_size`], counted after decompression; the number of configs that
//! merge/replace references fetch while rendering one config is bounded by
//! [`Limits::max_config_refs`]. File contents are not limited: they stream to disk.
//!
//! Defaults can be raised with command-line flags and, for `agent run`, kernel arguments
//! (`agent.max_config_size=`, `agent.max_config_refs=`, `agent.refuse_tls_downgrade`); a
//! flag wins over a kernel argument. There is no process-wide setting: the CLI works out one
//! [`Limits`] value and passes it down (`agent run`: in the stage context,
//! [`crate::stages::Context::limits`], from which every stage builds its fetch options;
//! `agent fetch`: in [`crate::fetch::Options::limits`]). `Limits::default()` (and so
//! `fetch::Options::default()`) is [`Limits::BUILTIN`].

use std::io::{ErrorKind, Read};

use anyhow::{Context, Result, bail};

/// Default of [`Limits::max_config_size`]: 64 MiB.
pub const DEFAULT_MAX_CONFIG_SIZE: u64 = 64 << 20;
/// Default of [`Limits::max_config_refs`].
pub const DEFAULT_MAX_CONFIG_REFS: usize = 64;
/// Kernel argument setting [`Limits::max_config_size`].
pub const KARG_MAX_CONFIG_SIZE: &str = "agent.max_config_size";
/// Kernel argument setting [`Limits::max_config_refs`].
pub const KARG_MAX_CONFIG_REFS: &str = "agent.max_config_refs";
/// Kernel argument setting [`Limits::refuse_tls_downgrade`] (bare, or `=1`/`=0`).
pub const KARG_REFUSE_TLS_DOWNGRADE: &str = "agent.refuse_tls_downgrade";
/// How to raise the size limit, quoted in its error.
pub const SIZE_HINT: &str = "--max-config-size / agent.max_config_size=";
/// How to raise the reference limit, quoted in its error.
pub const REFS_HINT: &str = "--max-config-refs / agent.max_config_refs=";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest config (or CA bundle, key file, user data) held in memory, in bytes after
    /// decompression.
    pub max_config_size: u64,
    /// Most configs fetched by `merge`/`replace` references while rendering one config
    /// (all levels together).
    pub max_config_refs: usize,
    /// Refuse a redirect from https to http (it is always warned about).
    pub refuse_tls_downgrade: bool,
}

impl Limits {
    /// The built-in defaults.
    pub const BUILTIN: Limits = Limits {
        max_config_size: DEFAULT_MAX_CONFIG_SIZE,
        max_config_refs: DEFAULT_MAX_CONFIG_REFS,
        refuse_tls_downgrade: false,
    };

    /// These limits with the kernel arguments of `cmdline` applied (the last occurrence of
    /// each wins, as in the kernel).
    pub fn with_cmdline(mut self, cmdline: &str) -> Result<Limits> {
        if let Some(v) = crate::cmdline::arg(cmdline, KARG_MAX_CONFIG_SIZE) {
            self.max_config_size = parse_size(v.unwrap_or(""))
                .with_context(|| format!("kernel argument {KARG_MAX_CONFIG_SIZE}"))?;
        }
        if let Some(v) = crate::cmdline::arg(cmdline, KARG_MAX_CONFIG_REFS) {
            let v = v.unwrap_or("");
            self.max_config_refs = v.parse().with_context(|| {
                format!("kernel argument {KARG_MAX_CONFIG_REFS}={v}: not a whole number")
            })?;
        }
        if let Some(v) = crate::cmdline::arg(cmdline, KARG_REFUSE_TLS_DOWNGRADE) {
            self.refuse_tls_downgrade = match v.map(str::to_ascii_lowercase).as_deref() {
                None | Some("" | "1" | "yes" | "true" | "on") => true,
                Some("0" | "no" | "false" | "off") => false,
                Some(other) => bail!(
                    "kernel argument {KARG_REFUSE_TLS_DOWNGRADE}={other}: expected 1 or 0 (or nothing)"
                ),
            };
        }
        Ok(self)
    }
}

impl Default for Limits {
    /// The built-in defaults, [`Limits::BUILTIN`].
    fn default() -> Self {
        Limits::BUILTIN
    }
}

/// Parses a size: bytes, or a number with a binary suffix `K`/`KiB`, `M`/`MiB`, `G`/`GiB`
/// (any case). Zero is refused: nothing could be read.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => bail!("{s:?}: not a size (bytes, or a number with K, M or G: 64M, 128MiB)"),
    };
    let n: u64 = num
        .parse()
        .ok()
        .and_then(|n: u64| n.checked_mul(mult))
        .with_context(|| {
            format!("{s:?}: not a size (bytes, or a number with K, M or G: 64M, 128MiB)")
        })?;
    if n == 0 {
        bail!("{s:?}: the size limit must be at least 1 byte");
    }
    Ok(n)
}

/// A size for messages: "64 MiB", "1536 KiB", "1000 bytes".
pub fn human(n: u64) -> String {
    match n {
        0 => "0 bytes".into(),
        n if n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// Something (a config, CA bundle, key file, user data) grew past
/// [`Limits::max_config_size`]. `what` names it and its source: "config from http://…".
#[derive(Debug, thiserror::Error)]
#[error("{what}: larger than the {} limit ({SIZE_HINT})", human(*.limit))]
pub struct TooLarge {
    pub what: String,
    pub limit: u64,
}

/// Adds context to `e` unless it is a [`TooLarge`], which already names its source and limit.
pub fn context_unless_too_large(e: anyhow::Error, ctx: impl FnOnce() -> String) -> anyhow::Error {
    if e.is::<TooLarge>() {
        e
    } else {
        e.context(ctx())
    }
}

/// Reads `r` to its end into memory, refusing (with [`TooLarge`]) more than `limit` bytes.
/// Memory stays at most `limit` plus one read buffer whatever `r` holds (e.g. `/dev/zero`).
/// `what` names the source in errors ("config file /x", "standard input").
pub fn read_bounded(mut r: impl Read, limit: u64, what: &str) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let k = match r.read(&mut buf) {
            Ok(0) => return Ok(v),
            Ok(k) => k,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {what}")),
        };
        if v.len() as u64 + k as u64 > limit {
            return Err(TooLarge {
                what: what.to_string(),
                limit,
            }
            .into());
        }
        v.extend_from_slice(&buf[..k]);
    }
}

/// [`read_bounded`] on the file at `path` (an I/O error keeps its kind, e.g. NotFound, as the
/// root cause).
pub fn read_file_bounded(path: &std::path::Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {what}"))?;
    read_bounded(f, limit, what)
}

/// [`read_file_bounded`], with `None` when the file does not exist (an optional config:
/// a platform's user data, `<system-config-dir>/user.ign`).
pub fn read_optional_file_bounded(
    path: &std::path::Path,
    limit: u64,
    what: &str,
) -> Result<Option<Vec<u8>>> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {what}")),
    };
    read_bounded(f, limit, what).map(Some)
}

/// Whether `e` (or what it wraps) is a "not found" I/O error.
pub fn is_not_found(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == ErrorKind::NotFound)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("100").unwrap(), 100);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("16 KiB").unwrap(), 16 << 10);
        for bad in ["", "0", "M", "12X", "-1", "99999999999999999999G", "1.5M"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(1536 << 10), "1536 KiB");
        assert_eq!(human(1000), "1000 bytes");
    }

    #[test]
    fn kernel_arguments() {
        let l = Limits::BUILTIN
            .with_cmdline(
                "quiet agent.max_config_size=1M agent.max_config_refs=3 agent.refuse_tls_downgrade",
            )
            .unwrap();
        assert_eq!(
            l,
            Limits {
                max_config_size: 1 << 20,
                max_config_refs: 3,
                refuse_tls_downgrade: true
            }
        );
        let l = Limits::BUILTIN
            .with_cmdline("agent.refuse_tls_downgrade=1 agent.refuse_tls_downgrade=0")
            .unwrap();
        assert!(!l.refuse_tls_downgrade);
        assert_eq!(
            Limits::BUILTIN.with_cmdline("root=/dev/sda").unwrap(),
            Limits::BUILTIN
        );
        let e = Limits::BUILTIN
            .with_cmdline("agent.max_config_size=lots")
            .unwrap_err();
        assert!(format!("{e:#}").contains("agent.max_config_size"), "{e:#}");
        assert!(
            Limits::BUILTIN
                .with_cmdline("agent.max_config_refs=")
                .is_err()
        );
        assert!(
            Limits::BUILTIN
                .with_cmdline("agent.refuse_tls_downgrade=maybe")
                .is_err()
        );
    }

    #[test]
    fn bounded_reads() {
        assert_eq!(read_bounded(&b"abc"[..], 3, "x").unwrap(), b"abc");
        let e = read_bounded(std::io::repeat(0), 1 << 20, "standard input").unwrap_err();
        assert_eq!(
            e.to_string(),
            "standard input: larger than the 1 MiB limit (--max-config-size / agent.max_config_size=)"
        );
        assert!(e.downcast_ref::<TooLarge>().is_some());
        let e = read_file_bounded(std::path::Path::new("/nonexistent/x"), 10, "f").unwrap_err();
        assert!(is_not_found(&e));
    }
}
