//! Merging a child config into its parent: a pure function. Each
//! declared field (`types`, see `spec`) names its rule, one of the functions below:
//!
//! - `opt` (scalars): a value the child sets replaces the parent's; unset keeps the parent's;
//! - `keyed` (lists of objects): entries with equal keys (the field declared `key`) merge
//!   field by field, new entries are appended; `by_path` is the same with an index, for files,
//!   directories and links, which share one key space (`paths_across_kinds`: a child entry of
//!   one kind replaces a parent entry of another kind at the same path);
//! - `append` (argument lists: mkfs `options`, mdadm `options`, `mountOptions`, LUKS
//!   `openOptions`); `set` (other lists of strings: new values appended once);
//! - `headers`: a child HTTP header without a value removes the parent's header of that name;
//! - `nested` (objects): field by field; `ignore`: not merged.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use super::types::*;

/// Returns `parent` with `child` merged into it.
pub fn merge(parent: &Config, child: &Config) -> Config {
    let mut out = parent.clone();
    out.merge_from(child);
    out
}

/// Generated for every declared struct from its fields' merge rules.
pub trait Merge {
    fn merge_from(&mut self, child: &Self);
}

/// The key of a list entry, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key<'a> {
    Str(&'a str),
    Number(i64),
}

/// List entries identified by a key (generated for the field declared `key`).
pub trait Keyed {
    /// `None`: the entry has no key and is always appended.
    fn key(&self) -> Option<Key<'_>>;
}

/// A field declared `key`: what it gives as the key, and how it merges.
pub trait KeyField {
    fn as_key(&self) -> Option<Key<'_>>;
    fn merge_key(&mut self, child: &Self);
}

/// A required key (a path, a name): equal in merged entries, so nothing to merge.
impl KeyField for String {
    fn as_key(&self) -> Option<Key<'_>> {
        Some(Key::Str(self))
    }
    fn merge_key(&mut self, _: &Self) {}
}

/// An optional key (a resource's source): merged like `opt`.
impl KeyField for Option<String> {
    fn as_key(&self) -> Option<Key<'_>> {
        self.as_deref().map(Key::Str)
    }
    fn merge_key(&mut self, c: &Self) {
        opt(self, c);
    }
}

// ---- field rules ----

pub fn opt<T: Clone>(p: &mut Option<T>, c: &Option<T>) {
    if c.is_some() {
        p.clone_from(c);
    }
}

pub fn key<T: KeyField>(p: &mut T, c: &T) {
    p.merge_key(c);
}

pub fn ignore<T>(_: &mut T, _: &T) {}

pub fn nested<T: Merge>(p: &mut T, c: &T) {
    p.merge_from(c);
}

pub fn append(p: &mut Vec<String>, c: &[String]) {
    p.extend_from_slice(c);
}

pub fn set(p: &mut Vec<String>, c: &[String]) {
    if c.is_empty() {
        return;
    }
    // The values already there (hashed: lists of 10,000 keys merge in linear time).
    let mut have: std::collections::HashSet<String> = p.iter().cloned().collect();
    crate::work::add(p.len());
    for x in c {
        crate::work::add(1);
        if have.insert(x.clone()) {
            p.push(x.clone());
        }
    }
}

/// Entries with equal keys merge (into the first parent entry with that key), new entries are
/// appended; in linear time (an index of the keys).
pub fn keyed<T: Keyed + Merge + Clone>(p: &mut Vec<T>, c: &[T]) {
    indexed(p, c, false);
}

/// `keyed` for files, directories and links. (Of parent entries with equal keys, the last one
/// receives the child's fields.)
pub fn by_path<T: Keyed + Merge + Clone>(p: &mut Vec<T>, c: &[T]) {
    indexed(p, c, true);
}

/// `keyed` with an index: of parent entries with equal keys, the first (or with `last`, the
/// last) receives a child entry's fields.
fn indexed<T: Keyed + Merge + Clone>(p: &mut Vec<T>, c: &[T], last: bool) {
    if c.is_empty() {
        return;
    }
    // Where each child entry goes, decided before `p` changes: an existing entry, or the
    // next appended one.
    let targets: Vec<usize> = {
        let mut index: HashMap<Key<'_>, usize> = HashMap::new();
        for (i, x) in p.iter().enumerate() {
            crate::work::add(1);
            if let Some(k) = x.key() {
                match index.entry(k) {
                    Entry::Occupied(mut e) if last => {
                        e.insert(i);
                    }
                    Entry::Occupied(_) => {}
                    Entry::Vacant(e) => {
                        e.insert(i);
                    }
                }
            }
        }
        let mut next = p.len();
        c.iter()
            .map(|item| {
                crate::work::add(1);
                match item.key() {
                    None => {
                        next += 1;
                        next - 1
                    }
                    Some(k) => match index.entry(k) {
                        Entry::Occupied(e) => *e.get(),
                        Entry::Vacant(e) => {
                            next += 1;
                            *e.insert(next - 1)
                        }
                    },
                }
            })
            .collect()
    };
    for (item, t) in c.iter().zip(targets) {
        if t < p.len() {
            p[t].merge_from(item);
        } else {
            p.push(item.clone());
        }
    }
}

pub fn headers(p: &mut Vec<HttpHeader>, c: &[HttpHeader]) {
    if c.is_empty() {
        return;
    }
    // Each child header acts on the first remaining header of its name (removed when the
    // child has no value); an index of names keeps it linear, removed entries are dropped at
    // the end.
    let mut slots: Vec<Option<HttpHeader>> = p.drain(..).map(Some).collect();
    let mut index: HashMap<String, std::collections::VecDeque<usize>> = HashMap::new();
    for (i, h) in slots.iter().enumerate() {
        crate::work::add(1);
        if let Some(h) = h {
            index.entry(h.name.clone()).or_default().push_back(i);
        }
    }
    for h in c {
        crate::work::add(1);
        let q = index.entry(h.name.clone()).or_default();
        match (q.front().copied(), &h.value) {
            (Some(i), None) => {
                slots[i] = None;
                q.pop_front();
            }
            (Some(i), Some(_)) => {
                if let Some(x) = slots[i].as_mut() {
                    x.value.clone_from(&h.value);
                }
            }
            (None, _) => {
                q.push_back(slots.len());
                slots.push(Some(h.clone()));
            }
        }
    }
    p.extend(slots.into_iter().flatten());
}

// ---- struct rules (`premerge`) ----

/// Files, directories and links: a child entry removes parent entries of the other two
/// kinds at the same path (then each merges with its own kind).
pub fn paths_across_kinds(p: &mut Storage, c: &Storage) {
    let mut child_paths: HashMap<&str, u8> = HashMap::new();
    for f in &c.files {
        child_paths.insert(&f.path, 0);
    }
    for d in &c.directories {
        child_paths.insert(&d.path, 1);
    }
    for l in &c.links {
        child_paths.insert(&l.path, 2);
    }
    if !child_paths.is_empty() {
        let other = |path: &str, kind: u8| child_paths.get(path).is_some_and(|&k| k != kind);
        p.files.retain(|f| !other(&f.path, 0));
        p.directories.retain(|d| !other(&d.path, 1));
        p.links.retain(|l| !other(&l.path, 2));
    }
}

/// The two kernel argument lists share one key space: a child's shouldNotExist cancels a
/// parent's shouldExist of the same argument and the other way round.
pub fn kargs_one_key_space(p: &mut KernelArguments, c: &KernelArguments) {
    // Hashed: lists of 10,000 arguments merge in linear time.
    let exist: std::collections::HashSet<&String> = c.should_exist.iter().collect();
    let not: std::collections::HashSet<&String> = c.should_not_exist.iter().collect();
    crate::work::add(exist.len() + not.len());
    p.should_not_exist.retain(|a| {
        crate::work::add(1);
        !exist.contains(a)
    });
    p.should_exist.retain(|a| {
        crate::work::add(1);
        !not.contains(a)
    });
}

/// Partitions are keyed by number, or by label when the number is 0 (next free).
impl Keyed for Partition {
    fn key(&self) -> Option<Key<'_>> {
        match (self.num(), &self.label) {
            (0, Some(l)) => Some(Key::Str(l)),
            (0, None) => None,
            (n, _) => Some(Key::Number(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;

    /// Decodes without validating: merge inputs may be partial fragments.
    fn decode(text: &str) -> Config {
        let mut tree = crate::json::parse(text.as_bytes()).unwrap();
        let mut d = config::decode::Decoder::new();
        let c = d.config(&mut tree);
        assert!(d.diags.is_empty(), "{text}: {:?}", d.diags);
        c
    }

    fn cfg(json: &str) -> Config {
        decode(&format!(r#"{{"ignition":{{"version":"3.6.0"}},{json}}}"#))
    }

    /// (what, parent, child, expected)
    const TABLE: &[(&str, &str, &str, &str)] = &[
        (
            "files keyed by path, fields merged, unset keeps parent",
            r#""storage":{"files":[{"path":"/a","mode":420,"contents":{"source":"data:,p"}}]}"#,
            r#""storage":{"files":[{"path":"/a","mode":384},{"path":"/b"}]}"#,
            r#""storage":{"files":[{"path":"/a","mode":384,"contents":{"source":"data:,p"}},{"path":"/b"}]}"#,
        ),
        (
            "a child file replaces a parent link at the same path",
            r#""storage":{"links":[{"path":"/a","target":"/t"}],"directories":[{"path":"/d"}]}"#,
            r#""storage":{"files":[{"path":"/a"}]}"#,
            r#""storage":{"files":[{"path":"/a"}],"directories":[{"path":"/d"}]}"#,
        ),
        (
            "a child directory replaces a parent file",
            r#""storage":{"files":[{"path":"/a","mode":420}]}"#,
            r#""storage":{"directories":[{"path":"/a"}]}"#,
            r#""storage":{"directories":[{"path":"/a"}]}"#,
        ),
        (
            "a child link replaces a parent directory",
            r#""storage":{"directories":[{"path":"/a"}]}"#,
            r#""storage":{"links":[{"path":"/a","target":"/x"}]}"#,
            r#""storage":{"links":[{"path":"/a","target":"/x"}]}"#,
        ),
        (
            "append lists keyed by source",
            r#""storage":{"files":[{"path":"/a","append":[{"source":"data:,1"}]}]}"#,
            r#""storage":{"files":[{"path":"/a","append":[{"source":"data:,2"},{"source":"data:,1","compression":""}]}]}"#,
            r#""storage":{"files":[{"path":"/a","append":[{"source":"data:,1","compression":""},{"source":"data:,2"}]}]}"#,
        ),
        (
            "partitions keyed by number, or by label when number is 0",
            r#""storage":{"disks":[{"device":"/dev/a","partitions":[{"number":1,"sizeMiB":10},{"label":"x","sizeMiB":5}]}]}"#,
            r#""storage":{"disks":[{"device":"/dev/a","wipeTable":true,"partitions":[{"number":1,"label":"one"},{"label":"x","startMiB":7},{"number":2}]}]}"#,
            r#""storage":{"disks":[{"device":"/dev/a","wipeTable":true,"partitions":[{"number":1,"sizeMiB":10,"label":"one"},{"label":"x","sizeMiB":5,"startMiB":7},{"number":2}]}]}"#,
        ),
        (
            "disks and filesystems keyed by device; argument lists appended",
            r#""storage":{"filesystems":[{"device":"/dev/a","format":"ext4","options":["-m","0"],"mountOptions":["ro"]}]}"#,
            r#""storage":{"filesystems":[{"device":"/dev/a","label":"l","options":["-m","0"],"mountOptions":["noatime"]},{"device":"/dev/b","format":"xfs"}]}"#,
            r#""storage":{"filesystems":[{"device":"/dev/a","format":"ext4","label":"l","options":["-m","0","-m","0"],"mountOptions":["ro","noatime"]},{"device":"/dev/b","format":"xfs"}]}"#,
        ),
        (
            "raid keyed by name: devices a set, options appended",
            r#""storage":{"raid":[{"name":"md0","level":"raid1","devices":["/dev/a","/dev/b"],"options":["--x"]}]}"#,
            r#""storage":{"raid":[{"name":"md0","devices":["/dev/b","/dev/c"],"options":["--y"]}]}"#,
            r#""storage":{"raid":[{"name":"md0","level":"raid1","devices":["/dev/a","/dev/b","/dev/c"],"options":["--x","--y"]}]}"#,
        ),
        (
            "luks keyed by name; tang by url; openOptions appended",
            r#""storage":{"luks":[{"name":"d","device":"/dev/a","openOptions":["--a"],"clevis":{"tang":[{"url":"http://t","thumbprint":"1"}]}}]}"#,
            r#""storage":{"luks":[{"name":"d","openOptions":["--b"],"clevis":{"tang":[{"url":"http://t","thumbprint":"2"},{"url":"http://u"}]}}]}"#,
            r#""storage":{"luks":[{"name":"d","device":"/dev/a","openOptions":["--a","--b"],"clevis":{"tang":[{"url":"http://t","thumbprint":"2"},{"url":"http://u"}]}}]}"#,
        ),
        (
            "units and dropins keyed by name",
            r#""systemd":{"units":[{"name":"a.service","enabled":true,"contents":"[Unit]","dropins":[{"name":"1.conf","contents":"[A]"}]}]}"#,
            r#""systemd":{"units":[{"name":"a.service","enabled":false,"dropins":[{"name":"1.conf","contents":"[B]"},{"name":"2.conf"}]},{"name":"b.service","mask":true}]}"#,
            r#""systemd":{"units":[{"name":"a.service","enabled":false,"contents":"[Unit]","dropins":[{"name":"1.conf","contents":"[B]"},{"name":"2.conf"}]},{"name":"b.service","mask":true}]}"#,
        ),
        (
            "users and groups keyed by name; ssh keys and groups are sets",
            r#""passwd":{"users":[{"name":"core","uid":1000,"sshAuthorizedKeys":["k1"],"groups":["wheel"]}],"groups":[{"name":"g","gid":5}]}"#,
            r#""passwd":{"users":[{"name":"core","shell":"/bin/sh","sshAuthorizedKeys":["k1","k2"],"groups":["adm"]},{"name":"u2"}],"groups":[{"name":"g","system":true}]}"#,
            r#""passwd":{"users":[{"name":"core","uid":1000,"shell":"/bin/sh","sshAuthorizedKeys":["k1","k2"],"groups":["wheel","adm"]},{"name":"u2"}],"groups":[{"name":"g","gid":5,"system":true}]}"#,
        ),
        (
            "headers keyed by name; a header without value removes the parent's",
            r#""storage":{"files":[{"path":"/a","contents":{"source":"http://h/x","httpHeaders":[{"name":"A","value":"1"},{"name":"B","value":"2"}]}}]}"#,
            r#""storage":{"files":[{"path":"/a","contents":{"httpHeaders":[{"name":"A"},{"name":"B","value":"3"},{"name":"C","value":"4"}]}}]}"#,
            r#""storage":{"files":[{"path":"/a","contents":{"source":"http://h/x","httpHeaders":[{"name":"B","value":"3"},{"name":"C","value":"4"}]}}]}"#,
        ),
        (
            "kernel arguments: sets sharing one key space",
            r#""kernelArguments":{"shouldExist":["a","b"],"shouldNotExist":["c"]}"#,
            r#""kernelArguments":{"shouldExist":["c","d"],"shouldNotExist":["a"]}"#,
            r#""kernelArguments":{"shouldExist":["b","c","d"],"shouldNotExist":["a"]}"#,
        ),
        (
            "ignition: CAs and merge keyed by source, timeouts and proxy scalars, noProxy a set",
            r#""ignition":{"version":"3.6.0","timeouts":{"httpTotal":5},"proxy":{"httpProxy":"http://p","noProxy":["a"]},"security":{"tls":{"certificateAuthorities":[{"source":"data:,1"}]}}}"#,
            r#""ignition":{"version":"3.6.0","timeouts":{"httpResponseHeaders":3},"proxy":{"httpsProxy":"http://q","noProxy":["a","b"]},"security":{"tls":{"certificateAuthorities":[{"source":"data:,2"}]}}}"#,
            r#""ignition":{"version":"3.6.0","timeouts":{"httpTotal":5,"httpResponseHeaders":3},"proxy":{"httpProxy":"http://p","httpsProxy":"http://q","noProxy":["a","b"]},"security":{"tls":{"certificateAuthorities":[{"source":"data:,1"},{"source":"data:,2"}]}}}"#,
        ),
    ];

    fn doc(json: &str) -> Config {
        if json.starts_with(r#""ignition""#) {
            decode(&format!("{{{json}}}"))
        } else {
            cfg(json)
        }
    }

    #[test]
    fn merge_table() {
        for (what, p, c, want) in TABLE {
            let got = merge(&doc(p), &doc(c));
            assert_eq!(got, doc(want), "{what}");
        }
    }
}
