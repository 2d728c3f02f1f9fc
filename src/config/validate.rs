//! Semantic rules every config must satisfy, whatever its version (REFERENCE §1).

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
        if r.source.is_none() {
            v.err(p.key("source"), "merge references need a source");
        }
    }
    resource(
        &mut v,
        &c.ignition.config.replace,
        &ign.key("config").key("replace"),
    );
    if !c.ignition.config.replace.is_empty() && c.ignition.config.replace.source.is_none() {
        v.err(
            ign.key("config").key("replace").key("source"),
            "a replace reference needs a source",
        );
    }
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
        if r.source.is_none() {
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
            v.err(
                ign.key("timeouts").key(name),
                "timeout must not be negative",
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

    storage(&mut v, &c.storage, &root.key("storage"));
    systemd(&mut v, &c.systemd, &root.key("systemd"));
    passwd(&mut v, &c.passwd, &root.key("passwd"));

    let ka = &c.kernel_arguments;
    let kp = root.key("kernelArguments");
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
    if let Some(src) = &r.source {
        match src.split_once(':') {
            Some((scheme, _)) if SCHEMES.contains(&scheme) => {
                if scheme == "data" && crate::fetch::data_url::check(src).is_err() {
                    v.err(p.key("source"), "invalid data URL");
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
        } else if !names.insert(h.name.to_ascii_lowercase()) {
            v.err(
                p.key("httpHeaders").index(i).key("name"),
                format!("duplicate header {:?}", h.name),
            );
        }
    }
}

/// Whether `p` is absolute and normalised (no `.`/`..` elements, no `//`, no trailing `/`).
pub fn path_ok(p: &str) -> Result<(), &'static str> {
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

pub fn is_uuid(s: &str) -> bool {
    uuid::Uuid::try_parse(s).is_ok()
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

fn node_owner(v: &mut V, u: &NodeUser, p: &Path) {
    if u.id.is_some() && u.name.as_deref().is_some_and(|n| !n.is_empty()) {
        v.err(p.clone(), "set either id or name, not both");
    }
    if u.id.is_some_and(|i| i < 0) {
        v.err(p.key("id"), "id must not be negative");
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
        if !d.device.is_empty() && path_ok(&d.device).is_err() {
            v.err(dp.key("device"), "device must be an absolute path");
        }
        let pp = dp.key("partitions");
        let mut numbers = HashMap::new();
        let mut labels = HashMap::new();
        let has_not_exist = d.partitions.iter().any(|x| !x.should_exist());
        // Like Ignition: partitions with both start (not 0) and size given must not overlap.
        let fixed: Vec<(usize, i64, i64)> = (d.partitions.iter().enumerate())
            .filter_map(|(j, x)| match (x.start_mib, x.size_mib) {
                (Some(a), Some(z)) if a != 0 => Some((j, a, if z == 0 { a } else { a + z - 1 })),
                _ => None,
            })
            .collect();
        if let Some((j, k)) = fixed.iter().find_map(|&(j, a, b)| {
            (fixed.iter())
                .find(|&&(k, c, e)| k != j && a <= e && c <= b)
                .map(|o| (j, o.0))
        }) {
            v.err(
                pp.index(k),
                format!("partition overlaps partition entry {j}"),
            );
        }
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
            if part.num() == 0 && has_not_exist {
                v.err(q.key("number"), "partition number 0 is not allowed on a disk with shouldExist: false partitions");
            }
            if part.num() == 0 && part.label.is_none() && part.should_exist() {
                v.err(q.clone(), "a partition needs a number >= 1 or a label");
            }
            if let Some(l) = &part.label {
                if l.encode_utf16().count() > 36 {
                    v.err(q.key("label"), "partition label longer than 36 characters");
                }
                if l.contains(':') {
                    v.err(q.key("label"), "partition label must not contain ':'");
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
            None => v.err(rp.key("level"), "level is required"),
            Some("linear" | "raid0" | "0" | "stripe") => {
                if r.spares.is_some_and(|s| s > 0) {
                    v.err(
                        rp.key("spares"),
                        "spares are not allowed for linear and raid0 arrays",
                    );
                }
            }
            Some(
                "raid1" | "raid4" | "raid5" | "raid6" | "raid10" | "1" | "4" | "5" | "6" | "10",
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
            if path_ok(d).is_err() {
                v.err(
                    rp.key("devices").index(j),
                    "device must be an absolute path",
                );
            }
        }
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
        match &l.device {
            None => v.err(lp.key("device"), "device is required"),
            Some(d) if path_ok(d).is_err() => {
                v.err(lp.key("device"), "device must be an absolute path")
            }
            _ => {}
        }
        if let Some(u) = &l.uuid
            && !is_uuid(u)
        {
            v.err(lp.key("uuid"), format!("invalid UUID {u:?}"));
        }
        resource(v, &l.key_file, &lp.key("keyFile"));
        if l.cex.enabled == Some(true) {
            if l.clevis.is_bound() {
                v.err(lp.key("cex"), "cex cannot be combined with clevis");
            }
            if l.key_file.source.is_some() {
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
                || l.clevis.threshold.is_some()
            {
                v.err(
                    lp.key("clevis").key("custom"),
                    "custom clevis cannot be combined with tang, tpm2 or threshold",
                );
            }
        }
        for (j, t) in l.clevis.tang.iter().enumerate() {
            if !(t.url.starts_with("http://") || t.url.starts_with("https://")) {
                v.err(
                    lp.key("clevis").key("tang").index(j).key("url"),
                    "tang URL must be http:// or https://",
                );
            }
        }
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
        if !f.device.is_empty() && path_ok(&f.device).is_err() {
            v.err(fp.key("device"), "device must be an absolute path");
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
                        format!("{fmt} labels are limited to {max} bytes"),
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
                        v.err(fp.key("uuid"), format!("invalid {fmt} UUID {u:?}"));
                    }
                }
            }
            _ => {
                let set = |x: &Option<String>| x.as_deref().is_some_and(|x| !x.is_empty());
                let others = set(&f.path)
                    || set(&f.label)
                    || set(&f.uuid)
                    || f.wipe_filesystem == Some(true)
                    || !f.options.is_empty()
                    || !f.mount_options.is_empty();
                if others {
                    v.err(fp.key("format"), "format is required when path, label, uuid, wipeFilesystem or options are set");
                }
            }
        }
        if let Some(mp) = &f.path
            && let Err(e) = path_ok(mp)
        {
            v.err(fp.key("path"), e);
        }
    }
    // Files, directories and links share one namespace.
    let mut seen: HashMap<&str, Path> = HashMap::new();
    let mut check_path = |v: &mut V, path: &'a str, np: Path| {
        if path.is_empty() {
            return;
        }
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
    let through_link = |v: &mut V, path: &str, np: Path| {
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
                    np.key("path"),
                    format!("path runs through {cur:?}, a link declared in this config"),
                );
                break;
            }
        }
    };
    for (i, f) in s.files.iter().enumerate() {
        let fp = p.key("files").index(i);
        through_link(v, &f.path, fp.clone());
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
        through_link(v, &d.path, dp.clone());
        mode(v, d.mode, &dp.key("mode"));
        node_owner(v, &d.user, &dp.key("user"));
        node_owner(v, &d.group, &dp.key("group"));
    }
    for (i, l) in s.links.iter().enumerate() {
        let lp = p.key("links").index(i);
        through_link(v, &l.path, lp.clone());
        match l.target.as_deref() {
            None | Some("") => v.err(lp.key("target"), "link target is required"),
            Some(t) => {
                if l.hard == Some(true) {
                    if dir_paths.contains(t) {
                        v.err(
                            lp.key("target"),
                            "hard links to directories are not allowed",
                        );
                    }
                    if !t.starts_with('/') {
                        v.err(
                            lp.key("target"),
                            "hard link target must be an absolute path",
                        );
                    }
                }
            }
        }
        if l.hard == Some(true) {
            if !l.user.is_empty() {
                v.warn(lp.key("user"), "user is ignored on hard links");
            }
            if !l.group.is_empty() {
                v.warn(lp.key("group"), "group is ignored on hard links");
            }
        }
        node_owner(v, &l.user, &lp.key("user"));
        node_owner(v, &l.group, &lp.key("group"));
    }
}

const UNIT_SUFFIXES: &[&str] = &[
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
    for (i, u) in s.units.iter().enumerate() {
        let up = p.key("units").index(i);
        if !u.name.is_empty()
            && (!UNIT_SUFFIXES.iter().any(|s| u.name.ends_with(s)) || u.name.contains('/'))
        {
            v.err(
                up.key("name"),
                format!(
                    "invalid unit name {:?}: needs a unit type suffix such as .service",
                    u.name
                ),
            );
        }
        if let Some(c) = &u.contents {
            unit_contents(v, c, &up.key("contents"));
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
            if !d.name.is_empty() && (!d.name.ends_with(".conf") || d.name.contains('/')) {
                v.err(
                    dp.key("name"),
                    format!("invalid drop-in name {:?}: must end in .conf", d.name),
                );
            }
            if let Some(c) = &d.contents {
                unit_contents(v, c, &dp.key("contents"));
            }
        }
    }
}

/// A light check of unit file syntax: every non-comment line is a section header or a
/// key=value pair (continuation lines ending in `\` allowed).
fn unit_contents(v: &mut V, c: &str, p: &Path) {
    let mut continued = false;
    for (n, line) in c.lines().enumerate() {
        let t = line.trim();
        let was_continued = continued;
        continued = t.ends_with('\\');
        if was_continued || t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if t.starts_with('[') {
            if !t.ends_with(']') {
                v.err(
                    p.clone(),
                    format!(
                        "invalid unit contents: line {}: unterminated section header",
                        n + 1
                    ),
                );
                return;
            }
            continue;
        }
        if !t.contains('=') {
            v.err(
                p.clone(),
                format!("invalid unit contents: line {}: expected key=value", n + 1),
            );
            return;
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
        if u.name.contains(':') || u.name.contains('/') || u.name.contains(char::is_whitespace) {
            v.err(up.key("name"), format!("invalid user name {:?}", u.name));
        }
        if u.uid
            .is_some_and(|x| !(0..=u32::MAX as i64 - 1).contains(&x))
        {
            v.err(up.key("uid"), "uid out of range");
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
        if g.gid
            .is_some_and(|x| !(0..=u32::MAX as i64 - 1).contains(&x))
        {
            v.err(gp.key("gid"), "gid out of range");
        }
    }
}
