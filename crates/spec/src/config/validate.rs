//! Semantic rules every config must satisfy, whatever its version: Ignition's rules
//! (README.md, "Where the agent differs from Ignition" lists where we are stricter).

use std::collections::{HashMap, HashSet};

use super::diag::{Diagnostic, Path};
use super::types::*;

struct V {
    out: Vec<Diagnostic>,
}

impl V {
    fn err(&mut self, p: Path, msg: impl Into<String>) {
        self.out.push(Diagnostic::error(p, msg));
    }
    fn warn(&mut self, p: Path, msg: impl Into<String>) {
        self.out.push(Diagnostic::warning(p, msg));
    }
}

/// Schemes a resource `source` may use.
pub const SCHEMES: &[&str] = &["http", "https", "tftp", "s3", "gs", "data", "arn"];

pub fn validate(c: &Config) -> Vec<Diagnostic> {
    let mut v = V { out: Vec::new() };
    let root = Path::root();
    let ign = root.key("ignition");
    for (i, r) in c.ignition.config.merge.iter().enumerate() {
        let p = ign.key("config").key("merge").index(i);
        resource(&mut v, r, &p);
        if r.url().is_none() {
            v.err(p.key("source"), "merge references need a source");
        }
    }
    resource(
        &mut v,
        &c.ignition.config.replace,
        &ign.key("config").key("replace"),
    );
    unique(
        &mut v,
        &ign.key("config").key("merge"),
        c.ignition.config.merge.iter().map(|r| r.source.clone()),
        "source",
    );
    let cas = &c.ignition.security.tls.certificate_authorities;
    let cap = ign.key("security").key("tls").key("certificateAuthorities");
    for (i, r) in cas.iter().enumerate() {
        resource(&mut v, r, &cap.index(i));
        if r.url().is_none() {
            v.err(
                cap.index(i).key("source"),
                "certificate authorities need a source",
            );
        }
    }
    unique(&mut v, &cap, cas.iter().map(|r| r.source.clone()), "source");
    let t = &c.ignition.timeouts;
    for (name, val) in [
        ("httpResponseHeaders", t.http_response_headers),
        ("httpTotal", t.http_total),
    ] {
        if val.is_some_and(|x| x < 0) {
            v.warn(
                ign.key("timeouts").key(name),
                "a negative timeout means no limit",
            );
        }
    }
    for (name, val) in [
        ("httpProxy", &c.ignition.proxy.http_proxy),
        ("httpsProxy", &c.ignition.proxy.https_proxy),
    ] {
        if let Some(u) = val
            && !(u.starts_with("http://") || u.starts_with("https://"))
        {
            v.err(
                ign.key("proxy").key(name),
                "proxy must be an http:// or https:// URL",
            );
        }
    }
    if c.ignition
        .proxy
        .https_proxy
        .as_deref()
        .is_some_and(|u| u.starts_with("http://"))
    {
        v.warn(
            ign.key("proxy").key("httpsProxy"),
            "insecure plaintext HTTP proxy specified for HTTPS resources",
        );
    }

    storage(&mut v, &c.storage, &root.key("storage"));
    systemd(&mut v, &c.systemd, &root.key("systemd"));
    systemd_path_conflicts(&mut v, c, &root);
    passwd(&mut v, &c.passwd, &root.key("passwd"));

    let ka = &c.kernel_arguments;
    let kp = root.key("kernelArguments");
    unique_entries(
        &mut v,
        &kp.key("shouldExist"),
        ka.should_exist.iter(),
        "kernel argument",
    );
    unique_entries(
        &mut v,
        &kp.key("shouldNotExist"),
        ka.should_not_exist.iter(),
        "kernel argument",
    );
    let exist: HashSet<&String> = ka.should_exist.iter().collect();
    for (i, a) in ka.should_not_exist.iter().enumerate() {
        if exist.contains(a) {
            v.err(
                kp.key("shouldNotExist").index(i),
                format!("kernel argument {a:?} both should and should not exist"),
            );
        }
    }
    v.out
}

/// A file, directory or link at the path of a unit or drop-in the config writes (one with
/// contents) would fight with it: an error at the entry's path, as for Ignition.
fn systemd_path_conflicts(v: &mut V, c: &Config, root: &Path) {
    const DIR: &str = "/etc/systemd/system/";
    let mut unit_paths = HashSet::new();
    for u in &c.systemd.units {
        if u.contents.as_deref().is_some_and(|s| !s.is_empty()) {
            unit_paths.insert(format!("{DIR}{}", u.name));
        }
        for d in &u.dropins {
            if d.contents.as_deref().is_some_and(|s| !s.is_empty()) {
                unit_paths.insert(format!("{DIR}{}.d/{}", u.name, d.name));
            }
        }
    }
    if unit_paths.is_empty() {
        return;
    }
    let st = root.key("storage");
    let lists: [(&str, Vec<&str>); 3] = [
        (
            "files",
            c.storage.files.iter().map(|f| f.path.as_str()).collect(),
        ),
        (
            "directories",
            c.storage
                .directories
                .iter()
                .map(|d| d.path.as_str())
                .collect(),
        ),
        (
            "links",
            c.storage.links.iter().map(|l| l.path.as_str()).collect(),
        ),
    ];
    for (list, paths) in lists {
        for (i, p) in paths.into_iter().enumerate() {
            if unit_paths.contains(p) {
                v.err(
                    st.key(list).index(i).key("path"),
                    "path conflicts with systemd unit or dropin",
                );
            }
        }
    }
}

/// Of partitions placed at `(index, startMiB, sizeMiB)`, one that overlaps another (the later
/// in the list of an overlapping pair), found in n log n: sorted by start, each must begin
/// after the furthest end before it. (A size of 0 counts as 1 MiB here.)
fn first_overlap(mut placed: Vec<(usize, i64, i64)>) -> Option<usize> {
    placed.sort_by_key(|&(j, s, _)| (s, j));
    crate::work::add(placed.len());
    // The furthest end so far, and whose it is.
    let mut furthest: Option<(i64, usize)> = None;
    for (j, s, z) in placed {
        crate::work::add(1);
        let end = s.saturating_add(z.max(1));
        if let Some((fend, fj)) = furthest {
            if s < fend {
                return Some(j.max(fj));
            }
            if end > fend {
                furthest = Some((end, j));
            }
        } else {
            furthest = Some((end, j));
        }
    }
    None
}

/// Errors for duplicate strings within one list of strings, at the later entry.
fn unique_entries<'s>(v: &mut V, list: &Path, items: impl Iterator<Item = &'s String>, what: &str) {
    let mut seen = HashSet::new();
    for (i, k) in items.enumerate() {
        if !seen.insert(k.as_str()) {
            v.err(list.index(i), format!("duplicate {what} {k:?}"));
        }
    }
}

/// Errors for duplicate keys within one list.
fn unique<I: Iterator<Item = Option<String>>>(v: &mut V, list: &Path, keys: I, field: &str) {
    let mut seen = HashSet::new();
    for (i, k) in keys.enumerate() {
        if let Some(k) = k
            && !seen.insert(k.clone())
        {
            v.err(list.index(i).key(field), format!("duplicate {field} {k:?}"));
        }
    }
}

fn hex_len(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn resource(v: &mut V, r: &Resource, p: &Path) {
    if r.source.as_deref() == Some("") {
        // `"source": ""`: empty contents (valid where a source is optional).
        if !r.http_headers.is_empty() {
            v.err(
                p.key("httpHeaders"),
                "httpHeaders need an http or https source",
            );
        }
    } else if let Some(src) = &r.source {
        match src.split_once(':') {
            Some((scheme, _)) if SCHEMES.contains(&scheme) => {
                if scheme == "data"
                    && let Err(e) = crate::encoding::data_url::check(src)
                {
                    v.err(p.key("source"), format!("{e:#}"));
                }
                if matches!(scheme, "s3" | "gs")
                    && src
                        .split_once("://")
                        .is_none_or(|(_, rest)| rest.split('/').next().unwrap_or("").is_empty())
                {
                    v.err(
                        p.key("source"),
                        format!("{scheme} URL needs a bucket: {scheme}://bucket/key"),
                    );
                }
                if !r.http_headers.is_empty() && !matches!(scheme, "http" | "https") {
                    v.err(
                        p.key("httpHeaders"),
                        "httpHeaders are only allowed with http and https sources",
                    );
                }
            }
            Some((scheme, _)) => v.err(
                p.key("source"),
                format!("unsupported URL scheme {scheme:?}"),
            ),
            None => v.err(p.key("source"), "source must be a URL"),
        }
    } else if !r.http_headers.is_empty() {
        v.err(
            p.key("httpHeaders"),
            "httpHeaders need an http or https source",
        );
    }
    if let Some(c) = &r.compression
        && !c.is_empty()
        && c != "gzip"
    {
        v.err(
            p.key("compression"),
            format!("unsupported compression {c:?}: only \"gzip\""),
        );
    }
    if r.verification.hash.is_some() && r.source.is_none() {
        v.err(
            p.key("verification").key("hash"),
            "source must be specified if verification is specified",
        );
    }
    if let Some(h) = &r.verification.hash {
        let ok = match h.split_once('-') {
            Some(("sha512", hex)) => hex_len(hex, 128),
            Some(("sha256", hex)) => hex_len(hex, 64),
            Some((f, _)) => {
                v.err(
                    p.key("verification").key("hash"),
                    format!("unsupported hash function {f:?}: use sha512 or sha256"),
                );
                true
            }
            None => false,
        };
        if !ok {
            v.err(
                p.key("verification").key("hash"),
                "hash must be sha512-<128 hex digits> or sha256-<64 hex digits>",
            );
        }
    }
    let mut names = HashSet::new();
    for (i, h) in r.http_headers.iter().enumerate() {
        if h.name.is_empty() {
            v.err(
                p.key("httpHeaders").index(i).key("name"),
                "header name must not be empty",
            );
        } else if !names.insert(h.name.as_str()) {
            v.err(
                p.key("httpHeaders").index(i).key("name"),
                format!("duplicate header {:?}", h.name),
            );
        }
        if h.value.as_deref() == Some("") {
            v.err(
                p.key("httpHeaders").index(i).key("value"),
                "header value must not be empty (leave it out to remove a header from a parent config)",
            );
        }
    }
}

/// Whether `p` is absolute and normalised (no `.`/`..` elements, no `//`, no trailing `/`).
pub fn path_ok(p: &str) -> Result<(), &'static str> {
    if p.is_empty() {
        return Err("path not specified");
    }
    if !p.starts_with('/') {
        return Err("path not absolute");
    }
    if p == "/" {
        return Ok(());
    }
    if p.ends_with('/')
        || p[1..]
            .split('/')
            .any(|e| e.is_empty() || e == "." || e == "..")
    {
        return Err("path not normalised");
    }
    Ok(())
}

/// A GUID in the hyphenated 8-4-4-4-12 hex form (Ignition's pattern; no braces, no `urn:`).
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

const FS_FORMATS: &[&str] = &["ext4", "xfs", "btrfs", "vfat", "swap", "none"];

fn label_max(format: &str) -> Option<usize> {
    match format {
        "xfs" => Some(12),
        "vfat" => Some(11),
        "swap" => Some(15),
        "btrfs" => Some(256),
        "ext4" => Some(16),
        _ => None,
    }
}

/// The largest usable uid or gid: 2^32-1 is `(uid_t)-1`, which `chown` reads as "leave as is".
pub const MAX_ID: i64 = u32::MAX as i64 - 1;

fn node_owner(v: &mut V, u: &NodeUser, p: &Path) {
    if u.id.is_some() && u.name.as_deref().is_some_and(|n| !n.is_empty()) {
        v.err(p.clone(), "set either id or name, not both");
    }
    if let Some(id) = u.id
        && !(0..=MAX_ID).contains(&id)
    {
        v.err(
            p.key("id"),
            format!("id {id} out of range: must be between 0 and {MAX_ID}"),
        );
    }
}

fn mode(v: &mut V, m: Option<i64>, p: &Path) {
    if let Some(m) = m
        && !(0..=0o7777).contains(&m)
    {
        v.err(
            p.clone(),
            format!("invalid mode {m}: must be between 0 and 4095 (07777)"),
        );
    }
}

fn storage<'a>(v: &mut V, s: &'a Storage, p: &Path) {
    // Disks and partitions.
    unique(
        v,
        &p.key("disks"),
        s.disks.iter().map(|d| Some(d.device.clone())),
        "device",
    );
    for (i, d) in s.disks.iter().enumerate() {
        let dp = p.key("disks").index(i);
        if d.device.is_empty() {
            v.err(dp.key("device"), "disk device is required");
        } else if path_ok(&d.device).is_err() {
            v.err(dp.key("device"), "device must be an absolute path");
        }
        let pp = dp.key("partitions");
        // Explicitly placed partitions (start given and not 0, size given) must not overlap.
        let placed: Vec<(usize, i64, i64)> = d
            .partitions
            .iter()
            .enumerate()
            .filter_map(|(j, x)| match (x.start_mib, x.size_mib) {
                (Some(s), Some(z)) if s > 0 => Some((j, s, z)),
                _ => None,
            })
            .collect();
        if let Some(j) = first_overlap(placed) {
            v.err(pp.index(j), "partitions overlap");
        }
        let mut numbers = HashMap::new();
        let mut labels = HashMap::new();
        let has_not_exist = d.partitions.iter().any(|x| !x.should_exist());
        for (j, part) in d.partitions.iter().enumerate() {
            let q = pp.index(j);
            if part.num() < 0 {
                v.err(q.key("number"), "partition number must not be negative");
            }
            if part.num() != 0 && numbers.insert(part.num(), j).is_some() {
                v.err(
                    q.key("number"),
                    format!("duplicate partition number {}", part.num()),
                );
            }
            if part.num() == 0 && part.label.is_none() {
                v.err(
                    q.clone(),
                    "a partition number >= 1 or a label must be specified",
                );
            }
            if part.num() == 0 && has_not_exist {
                v.err(q.key("number"), "partition number 0 is not allowed on a disk with shouldExist: false partitions");
            }
            if let Some(l) = &part.label {
                if l.len() > 36 {
                    v.err(
                        q.key("label"),
                        "partition labels may not exceed 36 characters (bytes)",
                    );
                }
                if l.contains(':') {
                    v.err(
                        q.key("label"),
                        "partition label may not contain ':' (sgdisk would truncate it there)",
                    );
                }
                if labels.insert(l.clone(), j).is_some() {
                    v.err(q.key("label"), format!("duplicate partition label {l:?}"));
                }
            }
            for (name, g) in [("guid", &part.guid), ("typeGuid", &part.type_guid)] {
                if let Some(g) = g
                    && !g.is_empty()
                    && !is_uuid(g)
                {
                    v.err(q.key(name), format!("invalid GUID {g:?}"));
                }
            }
            for (name, x) in [("sizeMiB", part.size_mib), ("startMiB", part.start_mib)] {
                if x.is_some_and(|x| x < 0) {
                    v.err(q.key(name), "must not be negative");
                }
            }
            if !part.should_exist() {
                if part.num() == 0 {
                    v.err(
                        q.key("number"),
                        "a partition with shouldExist: false needs a number",
                    );
                }
                let extra = part.label.is_some()
                    || part.size_mib.is_some()
                    || part.start_mib.is_some()
                    || part.guid.as_deref().is_some_and(|g| !g.is_empty())
                    || part.type_guid.as_deref().is_some_and(|g| !g.is_empty());
                if extra {
                    v.err(q.clone(), "a partition with shouldExist: false may only set number and wipePartitionEntry");
                }
            }
        }
    }
    // RAID.
    unique(
        v,
        &p.key("raid"),
        s.raid.iter().map(|r| Some(r.name.clone())),
        "name",
    );
    for (i, r) in s.raid.iter().enumerate() {
        let rp = p.key("raid").index(i);
        if r.name.contains('/') {
            v.err(rp.key("name"), "array name must not contain '/'");
        }
        match r.level.as_deref() {
            None | Some("") => v.err(rp.key("level"), "raid level is required"),
            Some("linear" | "raid0" | "0" | "stripe") => {
                if r.spares.is_some_and(|s| s > 0) {
                    v.err(
                        rp.key("spares"),
                        "spares are not allowed for linear and raid0 arrays",
                    );
                }
            }
            Some(
                "raid1" | "mirror" | "raid4" | "raid5" | "raid6" | "raid10" | "1" | "4" | "5" | "6"
                | "10",
            ) => {}
            Some(l) => v.err(rp.key("level"), format!("unsupported RAID level {l:?}")),
        }
        if r.spares.is_some_and(|s| s < 0) {
            v.err(rp.key("spares"), "spares must not be negative");
        }
        if r.devices.is_empty() {
            v.err(rp.key("devices"), "an array needs devices");
        }
        for (j, d) in r.devices.iter().enumerate() {
            if let Err(e) = path_ok(d) {
                v.err(rp.key("devices").index(j), e);
            }
        }
        unique_entries(v, &rp.key("devices"), r.devices.iter(), "device");
    }
    // LUKS.
    unique(
        v,
        &p.key("luks"),
        s.luks.iter().map(|l| Some(l.name.clone())),
        "name",
    );
    for (i, l) in s.luks.iter().enumerate() {
        let lp = p.key("luks").index(i);
        if l.name.contains('/') {
            v.err(lp.key("name"), "volume name must not contain '/'");
        }
        match l.device.as_deref() {
            None | Some("") => v.err(lp.key("device"), "disk device is required"),
            Some(d) if path_ok(d).is_err() => {
                v.err(lp.key("device"), "device must be an absolute path")
            }
            _ => {}
        }
        if l.label.as_ref().is_some_and(|x| x.len() > 47) {
            v.err(
                lp.key("label"),
                "luks device labels cannot be longer than 47 characters (bytes)",
            );
        }
        if let Some(u) = &l.uuid
            && !is_uuid(u)
        {
            v.warn(
                lp.key("uuid"),
                format!("{u:?} is not a UUID: cryptsetup will refuse it"),
            );
        }
        resource(v, &l.key_file, &lp.key("keyFile"));
        if l.cex.enabled == Some(true) {
            if l.clevis.is_bound() {
                v.err(lp.key("cex"), "cex cannot be combined with clevis");
            }
            if l.key_file.url().is_some() {
                v.err(lp.key("cex"), "cex cannot be combined with a keyFile");
            }
        }
        if l.clevis.threshold.is_some_and(|t| t < 0) {
            v.err(
                lp.key("clevis").key("threshold"),
                "threshold must not be negative",
            );
        }
        let cu = &l.clevis.custom;
        if !cu.is_empty() {
            if cu.pin.is_none() || cu.config.is_none() {
                v.err(
                    lp.key("clevis").key("custom"),
                    "custom clevis needs both pin and config",
                );
            }
            if !l.clevis.tang.is_empty()
                || l.clevis.tpm2 == Some(true)
                || l.clevis.threshold.is_some_and(|t| t != 0)
            {
                v.err(
                    lp.key("clevis").key("custom"),
                    "custom clevis cannot be combined with tang, tpm2 or threshold",
                );
            }
        }
        let tp = lp.key("clevis").key("tang");
        for (j, t) in l.clevis.tang.iter().enumerate() {
            if !(t.url.starts_with("http://") || t.url.starts_with("https://")) {
                v.err(
                    tp.index(j).key("url"),
                    "tang URL must be http:// or https://",
                );
            }
            if t.thumbprint.as_deref().is_none_or(str::is_empty) {
                v.err(tp.index(j).key("thumbprint"), "thumbprint is required");
            }
            if let Some(a) = t.advertisement.as_deref().filter(|a| !a.is_empty())
                && serde_json::from_str::<serde::de::IgnoredAny>(a).is_err()
            {
                v.err(
                    tp.index(j).key("advertisement"),
                    "advertisement is not valid JSON",
                );
            }
        }
        unique_entries(v, &tp, l.clevis.tang.iter().map(|t| &t.url), "tang URL");
    }
    // Filesystems.
    unique(
        v,
        &p.key("filesystems"),
        s.filesystems.iter().map(|f| Some(f.device.clone())),
        "device",
    );
    for (i, f) in s.filesystems.iter().enumerate() {
        let fp = p.key("filesystems").index(i);
        if let Err(e) = path_ok(&f.device) {
            v.err(fp.key("device"), e);
        }
        match f.format.as_deref() {
            Some(fmt) if !fmt.is_empty() => {
                if !FS_FORMATS.contains(&fmt) {
                    v.err(
                        fp.key("format"),
                        format!("unsupported filesystem format {fmt:?}"),
                    );
                }
                if let (Some(l), Some(max)) = (&f.label, label_max(fmt))
                    && l.len() > max
                {
                    v.err(
                        fp.key("label"),
                        format!("{fmt} labels are limited to {max} characters (bytes)"),
                    );
                }
                if let Some(u) = &f.uuid {
                    let ok = if fmt == "vfat" {
                        let h = u.replace('-', "");
                        hex_len(&h, 8)
                    } else {
                        is_uuid(u)
                    };
                    if !ok {
                        v.warn(
                            fp.key("uuid"),
                            format!("{u:?} is not a {fmt} UUID: mkfs will refuse it"),
                        );
                    }
                }
            }
            _ => {
                let set = |x: &Option<String>| x.as_deref().is_some_and(|s| !s.is_empty());
                let others = set(&f.path)
                    || set(&f.label)
                    || set(&f.uuid)
                    || f.wipe_filesystem == Some(true)
                    || !f.options.is_empty()
                    || !f.mount_options.is_empty();
                if others {
                    v.err(fp.key("format"), "format is required when path, label, uuid, wipeFilesystem, options or mountOptions are set");
                }
            }
        }
        if let Some(mp) = &f.path
            && let Err(e) = path_ok(mp)
        {
            v.err(fp.key("path"), e);
        }
    }
    // A filesystem on a whole disk the config also partitions or wipes.
    let disks: HashMap<&str, &Disk> = s.disks.iter().map(|d| (d.device.as_str(), d)).collect();
    for (i, f) in s.filesystems.iter().enumerate() {
        if let Some(d) = disks.get(f.device.as_str()) {
            let dp = p.key("filesystems").index(i).key("device");
            if !d.partitions.is_empty() {
                v.warn(dp, "filesystem overwrites partitioned device");
            } else if f.wipe_filesystem != Some(true) && d.wipe_table == Some(true) {
                v.warn(
                    dp,
                    "device matches disk with wipeTable enabled; filesystem will be wiped",
                );
            }
        }
    }
    // Files, directories and links share one namespace.
    let mut seen: HashMap<&str, Path> = HashMap::new();
    let mut check_path = |v: &mut V, path: &'a str, np: Path| {
        if let Err(e) = path_ok(path) {
            v.err(np.key("path"), e);
            return;
        }
        if let Some(prev) = seen.get(path) {
            v.err(
                np.key("path"),
                format!("duplicate path {path:?} (also at {prev})"),
            );
        } else {
            seen.insert(path, np);
        }
    };
    for (i, f) in s.files.iter().enumerate() {
        check_path(v, &f.path, p.key("files").index(i));
    }
    for (i, d) in s.directories.iter().enumerate() {
        check_path(v, &d.path, p.key("directories").index(i));
    }
    for (i, l) in s.links.iter().enumerate() {
        check_path(v, &l.path, p.key("links").index(i));
    }
    let link_paths: HashSet<&str> = s.links.iter().map(|l| l.path.as_str()).collect();
    let dir_paths: HashSet<&str> = s.directories.iter().map(|d| d.path.as_str()).collect();
    let through_link = |v: &mut V, path: &str, np: Path, kind: &str| {
        if link_paths.is_empty() {
            return;
        }
        let mut cur = path;
        while let Some(idx) = cur.rfind('/') {
            cur = &cur[..idx];
            if cur.is_empty() {
                break;
            }
            if link_paths.contains(cur) {
                v.err(
                    np,
                    format!("{kind} path includes link in config: it runs through {cur:?}"),
                );
                break;
            }
        }
    };
    for (i, f) in s.files.iter().enumerate() {
        crate::work::add(1);
        let fp = p.key("files").index(i);
        through_link(v, &f.path, fp.clone(), "file");
        resource(v, &f.contents, &fp.key("contents"));
        for (j, a) in f.append.iter().enumerate() {
            resource(v, a, &fp.key("append").index(j));
        }
        if f.overwrite == Some(true) && f.contents.source.is_none() {
            v.err(fp.key("overwrite"), "overwrite: true needs contents.source");
        }
        mode(v, f.mode, &fp.key("mode"));
        node_owner(v, &f.user, &fp.key("user"));
        node_owner(v, &f.group, &fp.key("group"));
    }
    for (i, d) in s.directories.iter().enumerate() {
        let dp = p.key("directories").index(i);
        through_link(v, &d.path, dp.clone(), "directory");
        mode(v, d.mode, &dp.key("mode"));
        node_owner(v, &d.user, &dp.key("user"));
        node_owner(v, &d.group, &dp.key("group"));
    }
    for (i, l) in s.links.iter().enumerate() {
        let lp = p.key("links").index(i);
        through_link(v, &l.path, lp.clone(), "link");
        match l.target.as_deref() {
            None | Some("") => v.err(lp.key("target"), "link target is required"),
            Some(t) => {
                // A relative hard-link target is taken from the root at run time; for this
                // check Ignition joins it to the link's path, and so do we.
                let joined;
                let t = if t.starts_with('/') {
                    t
                } else {
                    joined = format!("{}/{t}", l.path);
                    joined.as_str()
                };
                if l.hard == Some(true) && dir_paths.contains(t) {
                    v.err(lp.clone(), "hard link target is a directory");
                }
            }
        }
        if l.hard == Some(true) {
            for (kind, o) in [("user", &l.user), ("group", &l.group)] {
                if o.id.is_some() {
                    v.warn(lp.key(kind).key("id"), "user/group ignored for hard link");
                }
                if o.name.is_some() {
                    v.warn(lp.key(kind).key("name"), "user/group ignored for hard link");
                }
            }
        }
        node_owner(v, &l.user, &lp.key("user"));
        node_owner(v, &l.group, &lp.key("group"));
    }
}

/// The unit types Ignition accepts as a unit name's suffix.
pub const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".snapshot",
    ".slice",
    ".scope",
];

fn systemd(v: &mut V, s: &Systemd, p: &Path) {
    unique(
        v,
        &p.key("units"),
        s.units.iter().map(|u| Some(u.name.clone())),
        "name",
    );
    // The first unit of each name, for instances looking up their template.
    let mut by_name: HashMap<&str, &Unit> = HashMap::new();
    for u in &s.units {
        crate::work::add(1);
        by_name.entry(u.name.as_str()).or_insert(u);
    }
    for (i, u) in s.units.iter().enumerate() {
        crate::work::add(1);
        let up = p.key("units").index(i);
        if !UNIT_SUFFIXES.iter().any(|s| u.name.ends_with(s)) || u.name.contains('/') {
            v.err(
                up.key("name"),
                format!(
                    "invalid unit name {:?}: needs a unit type suffix such as .service",
                    u.name
                ),
            );
        }
        let sections = u
            .contents
            .as_deref()
            .and_then(|c| unit_contents(v, c, &up.key("contents")));
        if u.enabled == Some(true)
            && u.contents.as_deref().is_some_and(|c| !c.is_empty())
            && sections.is_some_and(|s| !s.contains("Install"))
        {
            v.warn(
                up.key("contents"),
                format!(
                    "unit {:?} is enabled, but has no install section so enable does nothing",
                    u.name
                ),
            );
        }
        if u.enabled == Some(true)
            && let Some(template) = template_of(&u.name)
            && let Some(t) = by_name.get(template.as_str())
            && let Some(tc) = t.contents.as_deref().filter(|c| !c.is_empty())
            && unit_sections(tc).is_ok_and(|s| !s.contains("Install"))
        {
            v.warn(
                up.key("contents"),
                format!(
                    "template unit {template:?} for {:?} doesn't have Install section",
                    u.name
                ),
            );
        }
        if u.mask == Some(true) && u.enabled == Some(true) {
            v.warn(up.clone(), "a masked unit cannot be enabled");
        }
        unique(
            v,
            &up.key("dropins"),
            u.dropins.iter().map(|d| Some(d.name.clone())),
            "name",
        );
        for (j, d) in u.dropins.iter().enumerate() {
            let dp = up.key("dropins").index(j);
            if !d.name.ends_with(".conf") || d.name.contains('/') {
                v.err(
                    dp.key("name"),
                    format!("invalid drop-in name {:?}: must end in .conf", d.name),
                );
            }
            if let Some(c) = &d.contents {
                let _ = unit_contents(v, c, &dp.key("contents"));
            }
        }
    }
}

/// The template of an instance service (`foo@bar.service` -> `foo@.service`).
fn template_of(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".service")?;
    let (prefix, instance) = stem.split_once('@')?;
    (!prefix.is_empty() && !instance.is_empty()).then(|| format!("{prefix}@.service"))
}

/// Unit file syntax as systemd's (and go-systemd's) parser reads it: text before the first
/// section is ignored; a section header is `[Name]` with nothing but spaces after it; every
/// other non-comment line in a section is `key=value` (a value continues while the line ends
/// in `\\`); no line may be 2048 bytes or longer. Returns the sections that hold at least one
/// option, or a message naming the first bad line.
fn unit_sections(c: &str) -> Result<HashSet<&str>, String> {
    const MAX_LINE: usize = 2048;
    let mut continued = false;
    let mut section: Option<&str> = None;
    let mut with_options = HashSet::new();
    for (n, line) in c.lines().enumerate() {
        if line.len() >= MAX_LINE {
            return Err(format!(
                "line {}: line too long (max {MAX_LINE} bytes)",
                n + 1
            ));
        }
        let t = line.trim();
        let was_continued = continued;
        continued = t.ends_with('\\');
        if was_continued || t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if let Some(h) = t.strip_prefix('[') {
            let Some((name, rest)) = h.split_once(']') else {
                return Err(format!("line {}: unable to find end of section", n + 1));
            };
            if !rest.trim().is_empty() {
                return Err(format!(
                    "line {}: found garbage after section name {name:?}",
                    n + 1
                ));
            }
            section = Some(name);
            continue;
        }
        let Some(s) = section else {
            // Before the first section: ignored, as systemd does.
            continue;
        };
        if !t.contains('=') {
            return Err(format!("line {}: expected key=value", n + 1));
        }
        with_options.insert(s);
    }
    Ok(with_options)
}

/// Checks unit contents (an error at `p` if they do not parse); their sections with options.
fn unit_contents<'c>(v: &mut V, c: &'c str, p: &Path) -> Option<HashSet<&'c str>> {
    match unit_sections(c) {
        Ok(s) => Some(s),
        Err(e) => {
            v.err(p.clone(), format!("invalid unit contents: {e}"));
            None
        }
    }
}

fn passwd(v: &mut V, s: &Passwd, p: &Path) {
    unique(
        v,
        &p.key("users"),
        s.users.iter().map(|u| Some(u.name.clone())),
        "name",
    );
    unique(
        v,
        &p.key("groups"),
        s.groups.iter().map(|g| Some(g.name.clone())),
        "name",
    );
    for (i, u) in s.users.iter().enumerate() {
        let up = p.key("users").index(i);
        unique_entries(
            v,
            &up.key("sshAuthorizedKeys"),
            u.ssh_authorized_keys.iter(),
            "SSH key",
        );
        unique_entries(v, &up.key("groups"), u.groups.iter(), "group");
        if u.name.contains(':') || u.name.contains('/') || u.name.contains(char::is_whitespace) {
            v.err(up.key("name"), format!("invalid user name {:?}", u.name));
        }
        if let Some(x) = u.uid
            && !(0..=MAX_ID).contains(&x)
        {
            v.err(
                up.key("uid"),
                format!("uid {x} out of range: must be between 0 and {MAX_ID}"),
            );
        }
        if let Some(h) = &u.home_dir
            && path_ok(h).is_err()
        {
            v.err(up.key("homeDir"), "home directory must be an absolute path");
        }
    }
    for (i, g) in s.groups.iter().enumerate() {
        let gp = p.key("groups").index(i);
        if g.name.contains(':') || g.name.contains('/') || g.name.contains(char::is_whitespace) {
            v.err(gp.key("name"), format!("invalid group name {:?}", g.name));
        }
        if let Some(x) = g.gid
            && !(0..=MAX_ID).contains(&x)
        {
            v.err(
                gp.key("gid"),
                format!("gid {x} out of range: must be between 0 and {MAX_ID}"),
            );
        }
    }
}
