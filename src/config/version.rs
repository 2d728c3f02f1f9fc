//! Spec versions 3.0.0 … 3.6.0: which version introduced which field or value, checked in
//! one table (`features`). Decoding uses it to reject fields newer than the declared version;
//! the server uses it to find the oldest version that can express a config.

use super::diag::{Diagnostic, Path};
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

fn resource_features(r: &Resource, path: &Path, is_config_ref: bool, out: &mut Vec<Feature>) {
    let mut add = |minor: u8, path: Path, what: &str| {
        out.push(Feature {
            minor,
            path,
            what: what.to_string(),
        })
    };
    if !r.http_headers.is_empty() {
        add(1, path.key("httpHeaders"), "httpHeaders");
    }
    if is_config_ref && r.compression.as_deref().is_some_and(|c| !c.is_empty()) {
        add(1, path.key("compression"), "compression of configs and CAs");
    }
    if r.verification
        .hash
        .as_deref()
        .is_some_and(|h| h.starts_with("sha256-"))
    {
        add(1, path.key("verification").key("hash"), "sha256 hashes");
    }
    if let Some(src) = &r.source {
        if src.starts_with("gs://") {
            add(2, path.key("source"), "gs:// URLs");
        }
        if src.starts_with("arn:") {
            add(4, path.key("source"), "arn: S3 URLs");
        }
    }
}

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

/// Every use in `c` of something newer than 3.0, with where it is.
pub fn features(c: &Config) -> Vec<Feature> {
    let mut out = Vec::new();
    let root = Path::root();
    let ign = root.key("ignition");
    for (i, r) in c.ignition.config.merge.iter().enumerate() {
        resource_features(r, &ign.key("config").key("merge").index(i), true, &mut out);
    }
    resource_features(
        &c.ignition.config.replace,
        &ign.key("config").key("replace"),
        true,
        &mut out,
    );
    for (i, r) in c
        .ignition
        .security
        .tls
        .certificate_authorities
        .iter()
        .enumerate()
    {
        let p = ign
            .key("security")
            .key("tls")
            .key("certificateAuthorities")
            .index(i);
        resource_features(r, &p, true, &mut out);
    }
    let mut add = |minor: u8, path: Path, what: &str| {
        out.push(Feature {
            minor,
            path,
            what: what.to_string(),
        })
    };
    if !c.ignition.proxy.is_empty() {
        add(1, ign.key("proxy"), "ignition.proxy");
    }
    if !c.kernel_arguments.is_empty() {
        add(3, root.key("kernelArguments"), "kernelArguments");
    }
    let st = root.key("storage");
    for (i, d) in c.storage.disks.iter().enumerate() {
        for (j, p) in d.partitions.iter().enumerate() {
            if p.resize.is_some() {
                add(
                    2,
                    st.key("disks")
                        .index(i)
                        .key("partitions")
                        .index(j)
                        .key("resize"),
                    "partition resize",
                );
            }
        }
    }
    for (i, f) in c.storage.filesystems.iter().enumerate() {
        let p = st.key("filesystems").index(i);
        if !f.mount_options.is_empty() {
            add(1, p.key("mountOptions"), "filesystem mountOptions");
        }
        if f.format.as_deref() == Some("none") {
            add(3, p.key("format"), "filesystem format \"none\"");
        }
    }
    if !c.storage.luks.is_empty() {
        add(2, st.key("luks"), "storage.luks");
    }
    for (i, l) in c.storage.luks.iter().enumerate() {
        let p = st.key("luks").index(i);
        if l.discard.is_some() {
            add(4, p.key("discard"), "luks discard");
        }
        if !l.open_options.is_empty() {
            add(4, p.key("openOptions"), "luks openOptions");
        }
        for (j, t) in l.clevis.tang.iter().enumerate() {
            if t.advertisement.is_some() {
                add(
                    4,
                    p.key("clevis").key("tang").index(j).key("advertisement"),
                    "tang advertisement",
                );
            }
        }
        if !l.cex.is_empty() {
            add(5, p.key("cex"), "luks cex");
        }
        if let Some(pin) = &l.clevis.custom.pin
            && !matches!(pin.as_str(), "tpm2" | "tang" | "sss")
        {
            add(
                6,
                p.key("clevis").key("custom").key("pin"),
                "custom clevis pins other than tpm2, tang and sss",
            );
        }
    }
    for (i, u) in c.passwd.users.iter().enumerate() {
        if u.should_exist.is_some() {
            add(
                2,
                root.key("passwd").key("users").index(i).key("shouldExist"),
                "users shouldExist",
            );
        }
    }
    for (i, g) in c.passwd.groups.iter().enumerate() {
        if g.should_exist.is_some() {
            add(
                2,
                root.key("passwd").key("groups").index(i).key("shouldExist"),
                "groups shouldExist",
            );
        }
    }
    for (i, f) in c.storage.files.iter().enumerate() {
        let p = st.key("files").index(i);
        resource_features(&f.contents, &p.key("contents"), false, &mut out);
        for (j, a) in f.append.iter().enumerate() {
            resource_features(a, &p.key("append").index(j), false, &mut out);
        }
    }
    for (i, l) in c.storage.luks.iter().enumerate() {
        resource_features(
            &l.key_file,
            &st.key("luks").index(i).key("keyFile"),
            false,
            &mut out,
        );
    }
    for (i, f) in c.storage.files.iter().enumerate() {
        if has_special_bits(f.mode) {
            out.push(Feature {
                minor: 6,
                path: st.key("files").index(i).key("mode"),
                what: "setuid/setgid/sticky bits in mode".into(),
            });
        }
    }
    for (i, d) in c.storage.directories.iter().enumerate() {
        if has_special_bits(d.mode) {
            out.push(Feature {
                minor: 6,
                path: st.key("directories").index(i).key("mode"),
                what: "setuid/setgid/sticky bits in mode".into(),
            });
        }
    }
    out
}

/// Checks a config decoded under `declared` against that version's rules. Special mode bits
/// under versions before 3.6 are masked off with a warning, as those versions ignored them.
pub fn check(c: &mut Config, declared: Version) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    for f in features(c) {
        if f.minor <= declared.minor {
            continue;
        }
        if f.what.starts_with("setuid") {
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

    #[test]
    fn parses_versions() {
        for m in 0..=6u8 {
            assert_eq!(parse(&format!("3.{m}.0")), Ok(Version::new(m)));
        }
        for (bad, want) in [
            ("2.3.0", "not supported"),
            ("3.7.0", "unknown spec version"),
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
