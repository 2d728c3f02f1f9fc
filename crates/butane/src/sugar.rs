//! Building blocks of Butane's sugar: data URLs as Butane chooses them, systemd unit-name
//! escaping, and Ignition's merge of a rendered config (parent) with the user's (child).

use std::collections::{HashMap, HashSet};

use crate::schema::{K, T};
use crate::value::{G, Obj};

/// `dataurl.Escape` (vincent-petithory/dataurl): RFC 2396 unreserved bytes stay, the rest
/// are `%XX` (upper case).
pub fn escape(data: &[u8]) -> String {
    spec::work::add(data.len());
    let mut s = String::with_capacity(data.len());
    for &b in data {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

pub(crate) fn base64(data: &[u8]) -> String {
    spec::work::add(data.len());
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (c.get(1).copied().unwrap_or(0) as u32) << 8
            | c.get(2).copied().unwrap_or(0) as u32;
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            A[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            A[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// gzip at the best compression level, byte for byte as Go writes it (`gozip`).
fn gzip(data: &[u8]) -> Vec<u8> {
    crate::gozip::gzip_best(data)
}

/// Butane's `MakeDataURL`: the shortest of URL-escaped, base64 and (when the config did not
/// set a compression) gzip+base64 (counting the 4 bytes of `"gzip"`). Returns the URL and the
/// compression to set: `Some("")` or `Some("gzip")` when the config had none, `None` to keep
/// the config's own.
pub fn make_data_url(contents: &[u8], current: Option<&str>) -> (String, Option<String>) {
    let unset = current.is_none_or(str::is_empty);
    let mut compression = unset.then(String::new);
    let mut opaque = format!(",{}", escape(contents));
    let b64 = format!(";base64,{}", base64(contents));
    if b64.len() < opaque.len() {
        opaque = b64;
    }
    if unset {
        let gz = format!(";base64,{}", base64(&gzip(contents)));
        if gz.len() + 4 < opaque.len() {
            opaque = gz;
            compression = Some("gzip".into());
        }
    }
    (format!("data:{opaque}"), compression)
}

/// systemd's `unit_name_path_escape` (go-systemd `UnitNamePathEscape`).
pub fn unit_path_escape(path: &str) -> String {
    // Clean like Go's path.Clean, then strip the slashes at both ends.
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return "-".into();
    }
    let joined = parts.join("/");
    let mut out = String::new();
    for (i, b) in joined.bytes().enumerate() {
        if b == b'/' {
            out.push('-');
        } else if (i == 0 && b == b'.')
            || !(b.is_ascii_alphanumeric() || b == b':' || b == b'_' || b == b'.')
        {
            out.push_str(&format!("\\x{b:02x}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// The key Ignition merges list entries of this struct by.
fn key_of(o: &Obj) -> Option<G> {
    let k = match o.def.name {
        "File" | "Directory" | "Link" => "path",
        "Disk" | "Filesystem" => "device",
        "Luks" | "Raid" | "Unit" | "Dropin" | "PasswdUser" | "PasswdGroup" | "HTTPHeader" => "name",
        "Resource" | "ConfigReference" | "CaReference" => "source",
        "Tang" => "url",
        "Partition" => {
            return match o.int("number") {
                Some(n) if n != 0 => Some(G::Int(n)),
                _ => o.get("label").cloned(),
            };
        }
        _ => return None,
    };
    o.get(k).cloned()
}

/// A list entry's merge key (a string or a number), hashable.
#[derive(PartialEq, Eq, Hash)]
enum MergeKey {
    Str(String),
    Int(i64),
}

fn merge_key(g: &G) -> Option<MergeKey> {
    match g {
        G::Str(s) => Some(MergeKey::Str(s.clone())),
        G::Int(i) => Some(MergeKey::Int(*i)),
        _ => None,
    }
}

/// Ignition's merge of `child` onto `parent`: set fields of the child win, structs merge
/// field by field, keyed lists merge entry by entry (parent order, then the child's new
/// entries), lists of strings are unions. In time linear in the lists (an index of the keys).
pub fn merge(parent: &Obj, child: &Obj) -> Obj {
    let mut out = parent.clone();
    for (i, f) in child.def.fields.iter().enumerate() {
        let Some(cv) = &child.vals[i] else { continue };
        let merged = match (&out.vals[i], cv, f.t) {
            (Some(G::Obj(p)), G::Obj(c), _) => G::Obj(merge(p, c)),
            (Some(G::List(p)), G::List(c), T::ListObj(_)) => {
                // Ignition's mergeStruct: each parent entry merges with the last child entry
                // of its key; then every child entry whose key the parent lacks is appended,
                // so duplicates within the child stay (for the duplicate check to see).
                let key = |g: &G| g.as_obj().and_then(key_of).as_ref().and_then(merge_key);
                let mut last: HashMap<MergeKey, usize> = HashMap::new();
                for (j, (cv, _)) in c.iter().enumerate() {
                    spec::work::add(1);
                    if let Some(k) = key(cv) {
                        last.insert(k, j);
                    }
                }
                let mut pkeys: HashSet<MergeKey> = HashSet::new();
                let mut list = Vec::with_capacity(p.len() + c.len());
                for (pv, ppos) in p {
                    spec::work::add(1);
                    let hit = key(pv).and_then(|k| {
                        let j = last.get(&k).copied();
                        pkeys.insert(k);
                        j
                    });
                    match hit {
                        Some(j) => {
                            let m = merge(
                                pv.as_obj().expect("object list"),
                                c[j].0.as_obj().expect("object list"),
                            );
                            list.push((G::Obj(m), *ppos));
                        }
                        None => list.push((pv.clone(), *ppos)),
                    }
                }
                for (cv, cpos) in c {
                    spec::work::add(1);
                    if !key(cv).is_some_and(|k| pkeys.contains(&k)) {
                        list.push((cv.clone(), *cpos));
                    }
                }
                G::List(list)
            }
            (Some(G::List(p)), G::List(c), _) => {
                let mut list = p.clone();
                let mut have: HashSet<MergeKey> =
                    list.iter().filter_map(|x| merge_key(&x.0)).collect();
                spec::work::add(list.len());
                for item in c {
                    spec::work::add(1);
                    let new = match merge_key(&item.0) {
                        Some(k) => have.insert(k),
                        None => !list.iter().any(|x| x.0 == item.0),
                    };
                    if new {
                        list.push(item.clone());
                    }
                }
                G::List(list)
            }
            _ => cv.clone(),
        };
        let _ = K::Ptr;
        out.vals[i] = Some(merged);
        out.pos[i] = child.pos[i];
    }
    out
}

/// Where the user's entries of the storage lists land when `merge(parent, child)` puts the
/// sugar's entries first: pairs of (output path, the child's path) for each child entry that
/// is appended (a warning on it is reported at the path the user wrote, as Butane's
/// translation set maps it), partitions of merged disks included.
pub fn merge_origins(parent: &Obj, child: &Obj) -> Vec<(String, String)> {
    fn list<'a>(o: Option<&'a Obj>, k: &str) -> &'a [(G, crate::yaml::Pos)] {
        o.map(|o| o.list(k)).unwrap_or(&[])
    }
    fn key(g: &G) -> Option<MergeKey> {
        g.as_obj().and_then(key_of).as_ref().and_then(merge_key)
    }
    /// (output index of each appended child entry, its child index), and for each parent
    /// entry the child index merged into it.
    fn origins(
        p: &[(G, crate::yaml::Pos)],
        c: &[(G, crate::yaml::Pos)],
    ) -> (Vec<(usize, usize)>, Vec<Option<usize>>) {
        let mut last: HashMap<MergeKey, usize> = HashMap::new();
        for (j, (cv, _)) in c.iter().enumerate() {
            if let Some(k) = key(cv) {
                last.insert(k, j);
            }
        }
        let mut pkeys = HashSet::new();
        let merged: Vec<Option<usize>> = p
            .iter()
            .map(|(pv, _)| {
                key(pv).and_then(|k| {
                    let j = last.get(&k).copied();
                    pkeys.insert(k);
                    j
                })
            })
            .collect();
        let mut out = Vec::new();
        let mut n = p.len();
        for (j, (cv, _)) in c.iter().enumerate() {
            if !key(cv).is_some_and(|k| pkeys.contains(&k)) {
                out.push((n, j));
                n += 1;
            }
        }
        (out, merged)
    }
    let (ps, cs) = (parent.obj("storage"), child.obj("storage"));
    let mut pairs = Vec::new();
    for (k, y) in [
        ("filesystems", "filesystems"),
        ("luks", "luks"),
        ("raid", "raid"),
    ] {
        let (app, _) = origins(list(ps, k), list(cs, k));
        for (o, c) in app {
            pairs.push((format!("$.storage.{y}.{o}"), format!("$.storage.{y}.{c}")));
        }
    }
    for (k, y) in [("files", "files")] {
        let (app, _) = origins(list(ps, k), list(cs, k));
        for (o, c) in app {
            pairs.push((format!("$.storage.{y}.{o}"), format!("$.storage.{y}.{c}")));
        }
    }
    let (pu, cu) = (parent.obj("systemd"), child.obj("systemd"));
    let (app, _) = origins(list(pu, "units"), list(cu, "units"));
    for (o, c) in app {
        pairs.push((
            format!("$.systemd.units.{o}"),
            format!("$.systemd.units.{c}"),
        ));
    }
    let (pd, cd) = (list(ps, "disks"), list(cs, "disks"));
    let (app, merged) = origins(pd, cd);
    for (o, c) in app {
        pairs.push((
            format!("$.storage.disks.{o}"),
            format!("$.storage.disks.{c}"),
        ));
    }
    for (o, m) in merged.iter().enumerate() {
        let Some(c) = *m else { continue };
        let (pp, cp) = (pd[o].0.as_obj(), cd[c].0.as_obj());
        let (papp, _) = origins(list(pp, "partitions"), list(cp, "partitions"));
        for (po, pc) in papp {
            pairs.push((
                format!("$.storage.disks.{o}.partitions.{po}"),
                format!("$.storage.disks.{c}.partitions.{pc}"),
            ));
        }
    }
    pairs
}

/// The output paths of `parent`'s storage entries that no `child` entry merges into (they keep
/// the sugar's translation).
pub fn unmerged_parent_entries(parent: &Obj, child: &Obj) -> Vec<String> {
    let (ps, cs) = (parent.obj("storage"), child.obj("storage"));
    let mut out = Vec::new();
    for k in ["disks", "files", "filesystems", "luks", "raid"] {
        let p = ps.map(|o| o.list(k)).unwrap_or(&[]);
        let c = cs.map(|o| o.list(k)).unwrap_or(&[]);
        let keys: HashSet<MergeKey> = c
            .iter()
            .filter_map(|(g, _)| g.as_obj().and_then(key_of).as_ref().and_then(merge_key))
            .collect();
        for (i, (g, _)) in p.iter().enumerate() {
            let k2 = g.as_obj().and_then(key_of).as_ref().and_then(merge_key);
            if !k2.is_some_and(|k2| keys.contains(&k2)) {
                out.push(format!("$.storage.{k}.{i}"));
            }
        }
    }
    out
}

/// The source path of a diagnostic at or under one of `pairs`' output paths (the longest),
/// as a whole: Butane's AddFromCommonSource maps every path under the entry to it.
pub fn common_source(path: &str, pairs: &[(String, String)]) -> Option<String> {
    pairs
        .iter()
        .filter(|(o, _)| {
            path.strip_prefix(o.as_str())
                .is_some_and(|r| r.is_empty() || r.starts_with('.'))
        })
        .max_by_key(|(o, _)| o.len())
        .map(|(_, c)| c.clone())
}

/// A diagnostic path with its output-entry prefix replaced by the user's (see `merge_origins`).
pub fn remap_path(path: &str, pairs: &[(String, String)]) -> Option<String> {
    pairs
        .iter()
        .filter(|(o, _)| {
            path.strip_prefix(o.as_str())
                .is_some_and(|r| r.is_empty() || r.starts_with('.'))
        })
        .max_by_key(|(o, _)| o.len())
        .map(|(o, c)| format!("{c}{}", &path[o.len()..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_butane() {
        assert_eq!(escape(b"Hello, world!"), "Hello%2C%20world!");
        assert_eq!(
            unit_path_escape("/var/lib/containers"),
            "var-lib-containers"
        );
        assert_eq!(
            unit_path_escape("/dev/disk/by-partlabel/var"),
            "dev-disk-by\\x2dpartlabel-var"
        );
        assert_eq!(
            make_data_url(b"Hello, world!", None).0,
            "data:,Hello%2C%20world!"
        );
    }
}
