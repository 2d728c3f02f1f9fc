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

/// Kernel arguments naming the platform, in order of preference: the agent's, Ignition's
/// (Fedora CoreOS), then Flatcar's and Container Linux's OEM id.
pub const PLATFORM_KEYS: &[&str] = &[
    "agent.platform.id",
    "ignition.platform.id",
    "flatcar.oem.id",
    "coreos.oem.id",
];

/// The platform named on `cmdline` (the last value of the first key of [`PLATFORM_KEYS`]
/// given with a value), with Flatcar's OEM ids that Ignition renamed read as Ignition's names
/// (`ec2` is `aws`, `gce` is `gcp`, `pxe` is `metal`); None when no key is given.
pub fn platform(cmdline: &str) -> Option<String> {
    for key in PLATFORM_KEYS {
        if let Some(v) = value(cmdline, key).filter(|v| !v.is_empty()) {
            let flatcar = key.ends_with(".oem.id");
            return Some(
                match v {
                    "ec2" if flatcar => "aws",
                    "gce" if flatcar => "gcp",
                    "pxe" if flatcar => "metal",
                    v => v,
                }
                .to_string(),
            );
        }
    }
    None
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
    fn the_platform_and_its_aliases() {
        let table = [
            ("quiet", None),
            (
                "agent.platform.id=qemu ignition.platform.id=aws",
                Some("qemu"),
            ),
            ("ignition.platform.id=aws flatcar.oem.id=gce", Some("aws")),
            ("flatcar.oem.id=ec2 coreos.oem.id=gce", Some("aws")),
            ("coreos.oem.id=gce", Some("gcp")),
            ("flatcar.oem.id=pxe", Some("metal")),
            ("flatcar.oem.id=packet", Some("packet")),
            // Ignition's own names are not renamed.
            ("ignition.platform.id=ec2", Some("ec2")),
            // An empty value does not count.
            ("flatcar.oem.id= coreos.oem.id=qemu", Some("qemu")),
        ];
        for (c, want) in table {
            assert_eq!(platform(c).as_deref(), want, "{c}");
        }
    }

    #[test]
    fn a_missing_file_is_an_empty_command_line() {
        assert_eq!(read(Path::new("/nonexistent/cmdline")).unwrap(), "");
    }
}
