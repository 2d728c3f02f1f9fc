//! Spec versions 3.0.0 … 3.6.0: which version introduced which field or value (`features`).
//! Which fields exist since which version is declared with the fields (`since N` in `types`);
//! the rules that depend on values (URL schemes, formats, mode bits, pins) are here. Decoding
//! uses them to reject fields newer than the declared version; the server uses them to find
//! the oldest version that can express a config and to refuse writing it older.

use super::diag::{Diagnostic, Path};
use std::any::Any;

use super::spec::{self, Cursor, Spec, Visitor};
use super::types::*;

/// Newest supported minor version of spec 3.
pub const NEWEST_MINOR: u8 = 6;

/// A supported spec version: always `3.<minor>.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub minor: u8,
}

impl Version {
    pub const NEWEST: Version = Version {
        minor: NEWEST_MINOR,
    };
    pub fn new(minor: u8) -> Self {
        Version { minor }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "3.{}.0", self.minor)
    }
}

/// Parses a declared `ignition.version`.
pub fn parse(s: &str) -> Result<Version, String> {
    let (core, pre) = match s.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (s, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    let nums: Option<Vec<u32>> = if parts.len() == 3 {
        parts.iter().map(|p| p.parse::<u32>().ok()).collect()
    } else {
        None
    };
    let Some(nums) = nums else {
        return Err(format!(
            "invalid spec version {s:?}: expected MAJOR.MINOR.PATCH such as 3.4.0"
        ));
    };
    match (nums[0], nums[1], nums[2], pre) {
        (3, m, 0, None) if m <= NEWEST_MINOR as u32 => Ok(Version::new(m as u8)),
        (3, _, _, Some(p)) => Err(format!(
            "unsupported experimental spec version {s:?} (pre-release {p:?}); use a stable version 3.0.0 through {}",
            Version::NEWEST
        )),
        (1 | 2, _, _, _) => Err(format!(
            "spec version {s} is not supported: only 3.x configs are accepted (3.0.0 through {}); translate 2.x configs to 3.x first",
            Version::NEWEST
        )),
        _ => Err(format!(
            "unknown spec version {s:?}: supported versions are 3.0.0 through {}",
            Version::NEWEST
        )),
    }
}

/// One use of a field or value that needs at least `minor`.
#[derive(Debug, Clone, PartialEq)]
pub struct Feature {
    pub minor: u8,
    pub path: Path,
    pub what: String,
}

/// Collects the features a config uses: set fields that a version after 3.0 introduced
/// (from the declarations in `types`), and the value-dependent rules below.
struct Features(Vec<Feature>);

impl Features {
    fn add(&mut self, minor: u8, path: Path, what: &str) {
        self.0.push(Feature {
            minor,
            path,
            what: what.to_string(),
        });
    }
}

impl Visitor for Features {
    fn since(&mut self, at: &Cursor, minor: u8, label: &'static str, key: &'static str) {
        self.0.push(Feature {
            minor,
            path: at.path(),
            what: format!("{label}{key}"),
        });
    }

    fn node<T: Spec>(&mut self, at: &Cursor, node: &T) {
        let node = node as &dyn Any;
        if let Some(r) = node.downcast_ref::<Resource>() {
            // Config references and CAs are the resources under `ignition`.
            if at.under("ignition") && r.compression.as_deref().is_some_and(|c| !c.is_empty()) {
                self.add(
                    1,
                    at.path().key("compression"),
                    "compression of configs and CAs",
                );
            }
            if r.verification
                .hash
                .as_deref()
                .is_some_and(|h| h.starts_with("sha256-"))
            {
                self.add(
                    1,
                    at.path().key("verification").key("hash"),
                    "sha256 hashes",
                );
            }
            if let Some(src) = &r.source {
                if src.starts_with("gs://") {
                    self.add(2, at.path().key("source"), "gs:// URLs");
                }
                if src.starts_with("arn:") {
                    self.add(4, at.path().key("source"), "arn: S3 URLs");
                }
            }
        } else if let Some(f) = node.downcast_ref::<Filesystem>() {
            if f.format.as_deref() == Some("none") {
                self.add(3, at.path().key("format"), "filesystem format \"none\"");
            }
        } else if let Some(c) = node.downcast_ref::<ClevisCustom>() {
            if let Some(pin) = c.pin.as_deref().filter(|p| !p.is_empty())
                && !matches!(pin, "tpm2" | "tang" | "sss")
            {
                self.add(
                    6,
                    at.path().key("pin"),
                    "custom clevis pins other than tpm2, tang and sss",
                );
            }
        } else if let Some(mode) = node
            .downcast_ref::<File>()
            .map(|f| f.mode)
            .or_else(|| node.downcast_ref::<Directory>().map(|d| d.mode))
            && has_special_bits(mode)
        {
            self.add(6, at.path().key("mode"), SPECIAL_BITS);
        }
    }
}

const SPECIAL_BITS: &str = "setuid/setgid/sticky bits in mode";

/// Whether a valid mode (0..=07777) sets setuid/setgid/sticky. An invalid mode is left to the
/// validator, which reports it as the user wrote it.
fn has_special_bits(mode: Option<i64>) -> bool {
    mode.is_some_and(|m| (0..=0o7777).contains(&m) && m & 0o7000 != 0)
}

/// Masks the special bits off a valid mode; leaves an invalid one as written.
fn mask_special(m: i64) -> i64 {
    if (0..=0o7777).contains(&m) {
        m & !0o7000
    } else {
        m
    }
}

/// Every use in `c` of something newer than 3.0, with where it is, in document order.
pub fn features(c: &Config) -> Vec<Feature> {
    let mut f = Features(Vec::new());
    spec::walk(c, &mut f);
    f.0
}

/// Checks a config decoded under `declared` against that version's rules. Special mode bits
/// under versions before 3.6 are masked off with a warning, as those versions ignored them.
pub fn check(c: &mut Config, declared: Version) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    for f in features(c) {
        if f.minor <= declared.minor {
            continue;
        }
        if f.what == SPECIAL_BITS {
            diags.push(Diagnostic::warning(
                f.path,
                format!("{}: ignored before spec 3.6.0, masked off", f.what),
            ));
        } else {
            diags.push(Diagnostic::error(
                f.path,
                format!(
                    "{}: needs spec version 3.{}.0 or later (config declares {declared}); \
                     raise ignition.version or remove the field (Ignition would ignore it)",
                    f.what, f.minor
                ),
            ));
        }
    }
    if declared.minor < 6 {
        for f in &mut c.storage.files {
            f.mode = f.mode.map(mask_special);
        }
        for d in &mut c.storage.directories {
            d.mode = d.mode.map(mask_special);
        }
    }
    diags
}

/// The oldest version that can express `c`.
pub fn minimum(c: &Config) -> Version {
    Version::new(features(c).iter().map(|f| f.minor).max().unwrap_or(0))
}

/// Why `c` cannot be written as `v`, if it cannot.
pub fn unexpressible(c: &Config, v: Version) -> Vec<Feature> {
    features(c)
        .into_iter()
        .filter(|f| f.minor > v.minor)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(json: &str) -> Config {
        let mut tree = crate::json::parse(json.as_bytes()).unwrap();
        let mut d = crate::config::decode::Decoder::new();
        let c = d.config(&mut tree);
        assert!(d.diags.is_empty(), "{json}: {:?}", d.diags);
        c
    }

    /// Every field and value newer than 3.0.0: (config, path, minor, what).
    const TABLE: &[(&str, &str, u8, &str)] = &[
        (
            r#"{"ignition":{"proxy":{"httpProxy":"http://p"}}}"#,
            "$.ignition.proxy",
            1,
            "ignition.proxy",
        ),
        (
            r#"{"storage":{"files":[{"path":"/a","contents":{"httpHeaders":[{"name":"a","value":"b"}]}}]}}"#,
            "$.storage.files.0.contents.httpHeaders",
            1,
            "httpHeaders",
        ),
        (
            r#"{"ignition":{"config":{"merge":[{"source":"http://x","compression":"gzip"}]}}}"#,
            "$.ignition.config.merge.0.compression",
            1,
            "compression of configs and CAs",
        ),
        (
            r#"{"ignition":{"security":{"tls":{"certificateAuthorities":[{"source":"http://x","verification":{"hash":"sha256-00"}}]}}}}"#,
            "$.ignition.security.tls.certificateAuthorities.0.verification.hash",
            1,
            "sha256 hashes",
        ),
        (
            r#"{"storage":{"filesystems":[{"device":"/dev/a","mountOptions":["ro"]}]}}"#,
            "$.storage.filesystems.0.mountOptions",
            1,
            "filesystem mountOptions",
        ),
        (
            r#"{"storage":{"disks":[{"device":"/dev/a","partitions":[{"number":1,"resize":true}]}]}}"#,
            "$.storage.disks.0.partitions.0.resize",
            2,
            "partition resize",
        ),
        (
            r#"{"passwd":{"users":[{"name":"u","shouldExist":false}]}}"#,
            "$.passwd.users.0.shouldExist",
            2,
            "users shouldExist",
        ),
        (
            r#"{"passwd":{"groups":[{"name":"g","shouldExist":false}]}}"#,
            "$.passwd.groups.0.shouldExist",
            2,
            "groups shouldExist",
        ),
        (
            r#"{"storage":{"files":[{"path":"/a","append":[{"source":"gs://b/o"}]}]}}"#,
            "$.storage.files.0.append.0.source",
            2,
            "gs:// URLs",
        ),
        (
            r#"{"storage":{"luks":[{"name":"l"}]}}"#,
            "$.storage.luks",
            2,
            "storage.luks",
        ),
        (
            r#"{"kernelArguments":{"shouldExist":["a"]}}"#,
            "$.kernelArguments",
            3,
            "kernelArguments",
        ),
        (
            r#"{"storage":{"filesystems":[{"device":"/dev/a","format":"none"}]}}"#,
            "$.storage.filesystems.0.format",
            3,
            "filesystem format \"none\"",
        ),
        (
            r#"{"storage":{"files":[{"path":"/a","contents":{"source":"arn:aws:s3:::b/o"}}]}}"#,
            "$.storage.files.0.contents.source",
            4,
            "arn: S3 URLs",
        ),
        (
            r#"{"storage":{"luks":[{"name":"l","discard":true}]}}"#,
            "$.storage.luks.0.discard",
            4,
            "luks discard",
        ),
        (
            r#"{"storage":{"luks":[{"name":"l","openOptions":["--x"]}]}}"#,
            "$.storage.luks.0.openOptions",
            4,
            "luks openOptions",
        ),
        (
            r#"{"storage":{"luks":[{"name":"l","clevis":{"tang":[{"url":"http://t","advertisement":"{}"}]}}]}}"#,
            "$.storage.luks.0.clevis.tang.0.advertisement",
            4,
            "tang advertisement",
        ),
        (
            r#"{"storage":{"luks":[{"name":"l","cex":{"enabled":true}}]}}"#,
            "$.storage.luks.0.cex",
            5,
            "luks cex",
        ),
        (
            r#"{"storage":{"luks":[{"name":"l","clevis":{"custom":{"pin":"x"}}}]}}"#,
            "$.storage.luks.0.clevis.custom.pin",
            6,
            "custom clevis pins other than tpm2, tang and sss",
        ),
        (
            r#"{"storage":{"files":[{"path":"/a","mode":2541}]}}"#,
            "$.storage.files.0.mode",
            6,
            SPECIAL_BITS,
        ),
        (
            r#"{"storage":{"directories":[{"path":"/a","mode":1023}]}}"#,
            "$.storage.directories.0.mode",
            6,
            SPECIAL_BITS,
        ),
    ];

    #[test]
    fn version_table() {
        for (json, path, minor, what) in TABLE {
            let c = decode(json);
            let mut got = features(&c);
            // Luks features come with storage.luks itself (3.2).
            if *minor > 2 && path.starts_with("$.storage.luks.") {
                assert_eq!(got.remove(0).path.to_string(), "$.storage.luks", "{json}");
            }
            let want = vec![Feature {
                minor: *minor,
                path: Path::parse(path),
                what: what.to_string(),
            }];
            assert_eq!(got, want, "{json}");
            assert_eq!(minimum(&c), Version::new(*minor), "{json}");
        }
        // Values that 3.0 already had.
        for json in [
            r#"{"storage":{"files":[{"path":"/a","mode":493,"contents":{"source":"s3://b/o","compression":"gzip","verification":{"hash":"sha512-00"}}}]}}"#,
            r#"{"storage":{"filesystems":[{"device":"/dev/a","format":"ext4"}]}}"#,
        ] {
            assert_eq!(features(&decode(json)), vec![], "{json}");
        }
    }

    #[test]
    fn parses_versions() {
        for m in 0..=NEWEST_MINOR {
            assert_eq!(parse(&format!("3.{m}.0")), Ok(Version::new(m)));
        }
        let next = format!("3.{}.0", NEWEST_MINOR + 1);
        for (bad, want) in [
            ("2.3.0", "not supported"),
            (next.as_str(), "unknown spec version"),
            ("3.5.0-experimental", "experimental"),
            ("3.1.1", "unknown"),
            ("x", "invalid spec version"),
            ("4.0.0", "unknown"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
