//! Reading the files of the source (and of the checkpoint): regular files only, opened
//! without blocking, bounded; and errors that name a file and why without quoting what it
//! holds ([`redact`]). Shared by `source`, `machines`, `selectors` and `checkpoint`.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};

use spec::config;

/// A fragment: its file name and its Ignition bytes (shared with the translation kept for
/// a `.bu` file).
pub type Fragment = (String, Arc<Vec<u8>>);

/// Opens the regular file `path` for reading without ever blocking on it: the path is
/// checked (lstat: a symlink, FIFO, socket or device is refused without being opened),
/// opened with `O_NONBLOCK | O_NOFOLLOW` and checked again on the open descriptor (fstat),
/// so a swap in between cannot make the caller read a FIFO or a device. Errors name the
/// file and what it is (an `io::Error` of kind `NotFound` when it does not exist).
pub fn open_regular(path: &Path) -> Result<std::fs::File> {
    use runtime::util::OpenRegularError;
    match runtime::util::open_regular(path, false) {
        Ok((f, _)) => Ok(f),
        Err(OpenRegularError::Io(e)) => {
            Err(e).with_context(|| format!("reading {}", path.display()))
        }
        Err(OpenRegularError::NotRegular(kind)) => Err(anyhow!(
            "{} is {kind}, not a regular file: only regular files are read",
            path.display()
        )),
    }
}

/// A size limit in words: `64 MiB`, `4096 bytes`.
fn size_words(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// Reads the regular file `path` whole (opened by [`open_regular`]), at most `max` bytes;
/// None when it does not exist. Errors name the file and why, never its contents.
pub fn read_regular(path: &Path, max: u64) -> Result<Option<Vec<u8>>> {
    let f = match open_regular(path) {
        Ok(f) => f,
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
            }) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let too_large = || {
        anyhow!(
            "{} is larger than the {} limit for a file the server reads",
            path.display(),
            size_words(max)
        )
    };
    let len = f
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if len > max {
        return Err(too_large());
    }
    let mut b = Vec::with_capacity(len as usize);
    f.take(max + 1)
        .read_to_end(&mut b)
        .with_context(|| format!("reading {}", path.display()))?;
    if b.len() as u64 > max {
        return Err(too_large());
    }
    Ok(Some(b))
}

/// Error text without the contents of the file it is about: quoted strings longer than one
/// character become `"…"` (line, column and the reason stay). With [`redact_diag`] and
/// [`redact_butane`] on every parse, validation or translation error the server reports (log
/// and `/status`), so that a file that should never have been read is not quoted either.
pub fn redact(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut chars = msg.char_indices();
    while let Some((i, c)) = chars.next() {
        // An apostrophe inside a word ("doesn't") opens nothing.
        let word_before = msg[..i]
            .chars()
            .next_back()
            .is_some_and(|p| p.is_alphanumeric());
        if matches!(c, '"' | '`') || (c == '\'' && !word_before) {
            // A closing quote of the same kind on this line?
            let rest = &msg[i + c.len_utf8()..];
            if let Some(end) = rest.find([c, '\n'])
                && rest[end..].starts_with(c)
            {
                let inner = &rest[..end];
                out.push(c);
                out.push_str(if inner.chars().count() <= 1 {
                    inner
                } else {
                    "…"
                });
                out.push(c);
                for _ in 0..inner.chars().count() + 1 {
                    chars.next();
                }
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// A JSON-path key as shown in errors: itself when it is a plain identifier (letters,
/// digits, `_`, `-`; the keys of the spec), else `…` (a key is file content too).
fn path_key(k: &str) -> &str {
    let plain = !k.is_empty()
        && k.len() <= 64
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain { k } else { "…" }
}

/// A config diagnostic as the server reports it: severity, JSON path (keys through
/// [`path_key`]), line and column, and the [`redact`]ed reason.
pub fn redact_diag(d: &config::Diagnostic) -> String {
    use std::fmt::Write;
    let mut out = String::from(match d.severity {
        config::Severity::Error => "error at $",
        config::Severity::Warning => "warning at $",
    });
    for seg in &d.path.0 {
        match seg {
            config::diag::Seg::Key(k) => {
                out.push('.');
                out.push_str(path_key(k));
            }
            config::diag::Seg::Index(i) => {
                let _ = write!(out, ".{i}");
            }
        }
    }
    if let Some((l, c)) = d.line_col {
        let _ = write!(out, ", line {l} col {c}");
    }
    let _ = write!(out, ": {}", redact(&d.message));
    out
}

/// A Butane diagnostic as the server reports it (as [`redact_diag`]).
pub fn redact_butane(d: &butane::Diag) -> String {
    use std::fmt::Write;
    let mut out = String::from(if d.error { "error" } else { "warning" });
    if let Some(rest) = d.path.strip_prefix('$') {
        out.push_str(" at $");
        for seg in rest.split('.').skip(1) {
            out.push('.');
            out.push_str(path_key(seg));
        }
        if d.pos.is_some() {
            out.push(',');
        }
    } else if d.pos.is_some() {
        out.push_str(" at");
    }
    if let Some(p) = d.pos {
        let _ = write!(out, " line {} col {}", p.line, p.col);
    }
    let _ = write!(out, ": {}", redact(&d.message));
    out
}

/// Whether `name` is a usable pool name (also keeps request paths inside `pools/`).
pub fn valid_pool_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 253
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A file name under `boot/assets/`: no `/`, not starting with `.`, printable ASCII.
pub fn valid_asset_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'))
}
