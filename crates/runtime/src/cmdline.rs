//! The kernel command line: read once from `/proc/cmdline` (or the path the caller was given)
//! and looked up by key. Every reader of a kernel argument (limits, the fetch stage's config
//! URL, endpoints, platforms, `delete-config`) uses these two functions.

use std::path::Path;

use anyhow::{Context, Result};

/// The kernel command line from `path` (normally `/proc/cmdline`); empty when it does not
/// exist (a test root, a container).
pub fn read(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The value of kernel argument `key` on `cmdline`: `Some(None)` when it is given bare,
/// `Some(Some(v))` for `key=v` (quotes removed); the last occurrence wins.
pub fn arg<'a>(cmdline: &'a str, key: &str) -> Option<Option<&'a str>> {
    cmdline
        .split_ascii_whitespace()
        .filter_map(|a| match a.split_once('=') {
            Some((k, v)) if k == key => Some(Some(v.trim_matches('"'))),
            None if a == key => Some(None),
            _ => None,
        })
        .next_back()
}

/// The value of the last `key=value` on `cmdline` (quotes removed); a bare `key` does not
/// count, as in Ignition's reading of `ignition.config.url`.
pub fn value<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline
        .split_ascii_whitespace()
        .filter_map(|a| a.split_once('='))
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v.trim_matches('"'))
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_occurrence_wins_and_bare_keys_differ() {
        let c = "a=1 quiet a=\"2\" b a";
        assert_eq!(arg(c, "a"), Some(None));
        assert_eq!(value(c, "a"), Some("2"));
        assert_eq!(arg(c, "b"), Some(None));
        assert_eq!(value(c, "b"), None);
        assert_eq!(arg(c, "c"), None);
    }

    #[test]
    fn a_missing_file_is_an_empty_command_line() {
        assert_eq!(read(Path::new("/nonexistent/cmdline")).unwrap(), "");
    }
}
