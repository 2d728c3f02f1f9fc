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
                let mut list = p.clone();
                // The first entry of each key.
                let mut index: HashMap<MergeKey, usize> = HashMap::new();
                for (j, (pv, _)) in list.iter().enumerate() {
                    spec::work::add(1);
                    if let Some(k) = pv.as_obj().and_then(key_of).as_ref().and_then(merge_key) {
                        index.entry(k).or_insert(j);
                    }
                }
                for (cv, cpos) in c {
                    spec::work::add(1);
                    let co = cv.as_obj().expect("object list");
                    let key = key_of(co);
                    let hit = key.as_ref().and_then(|k| match merge_key(k) {
                        Some(mk) => index.get(&mk).copied(),
                        None => list
                            .iter()
                            .position(|(pv, _)| pv.as_obj().and_then(key_of).as_ref() == Some(k)),
                    });
                    match hit {
                        Some(j) => {
                            let m = merge(list[j].0.as_obj().expect("object list"), co);
                            list[j].0 = G::Obj(m);
                        }
                        None => {
                            if let Some(mk) = key.as_ref().and_then(merge_key) {
                                index.insert(mk, list.len());
                            }
                            list.push((cv.clone(), *cpos));
                        }
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
