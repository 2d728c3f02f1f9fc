//! Writing a config as Ignition spec 2.2.0, for machines whose Ignition only reads spec 2.x
//! (old OpenShift boot images).
//!
//! The translation is the one the OpenShift Machine Config Server serves: 3.x down to 3.2,
//! then 3.2 to 2.2 by the rules of `ign-converter`'s `v32tov22`, written the way Go's
//! `encoding/json` writes the 2.2 types (their field order, `omitempty`, `<`, `>` and `&`
//! escaped). Spec 2.2 has no filesystem paths: a node under a filesystem's `path` names that
//! filesystem (by its path) and the rest of its path, every other node the `root` filesystem.
//!
//! What 2.2 cannot express is refused, every such field named by its path: what the
//! converter refuses (fields newer than 3.2, LUKS, proxies, HTTP headers, compressed config
//! references and CAs, sizes and starts in MiB, partition resizing, mount options, users and
//! groups that should not exist) and what its 2.2 check rejects (`gs://` URLs, a filesystem
//! without a format, a node its filesystem's path leaves no absolute path). Everything else is
//! written as the converter writes it, byte for byte: a file with neither contents nor
//! appends stays an empty file, a partition to delete or an entry to wipe is written as the
//! converter writes it.

use super::diag::Path;
use super::types::*;
use super::version::{self, Version};

/// `c` as a spec 2.2.0 document, or why it cannot be one (every offending field named).
pub fn to_json(c: &Config) -> Result<Vec<u8>, String> {
    let mut why = Vec::new();
    for f in version::unexpressible(c, Version::new(2)) {
        why.push(format!("{} at {} (needs 3.{}.0)", f.what, f.path, f.minor));
    }
    refusals(c, &mut why);
    let fss: Vec<&str> = c
        .storage
        .filesystems
        .iter()
        .filter_map(|f| f.path.as_deref())
        .collect();
    let mut doc = Doc(Vec::new());
    config(c, &fss, &mut doc, &mut why);
    if !why.is_empty() {
        return Err(format!(
            "config cannot be expressed as spec 2.2.0: {}",
            why.join("; ")
        ));
    }
    Ok(doc.0)
}

/// What the converter refuses, with where it is.
fn refusals(c: &Config, why: &mut Vec<String>) {
    let mut no = |path: Path, what: &str| why.push(format!("{what} at {path}"));
    let ign = Path::root().key("ignition");
    let refs = c
        .ignition
        .config
        .merge
        .iter()
        .enumerate()
        .map(|(i, r)| (ign.key("config").key("merge").index(i), r))
        .chain(std::iter::once((
            ign.key("config").key("replace"),
            &c.ignition.config.replace,
        )))
        .chain(
            c.ignition
                .security
                .tls
                .certificate_authorities
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let p = ign.key("security").key("tls");
                    (p.key("certificateAuthorities").index(i), r)
                }),
        );
    for (p, r) in refs {
        if r.compression.is_some() {
            no(p.key("compression"), "compression of configs and CAs");
        }
        if !r.http_headers.is_empty() {
            no(p.key("httpHeaders"), "HTTP headers");
        }
        if r.source.as_deref().is_some_and(|s| s.starts_with("gs://")) {
            no(p.key("source"), "gs:// URLs");
        }
    }
    let proxy = &c.ignition.proxy;
    if proxy.http_proxy.is_some() || proxy.https_proxy.is_some() || !proxy.no_proxy.is_empty() {
        no(ign.key("proxy"), "HTTP proxies");
    }
    let st = Path::root().key("storage");
    if !c.storage.luks.is_empty() {
        no(st.key("luks"), "LUKS volumes");
    }
    let pw = Path::root().key("passwd");
    for (i, u) in c.passwd.users.iter().enumerate() {
        if u.should_exist == Some(false) {
            let p = pw.key("users").index(i).key("shouldExist");
            no(p, "users that should not exist");
        }
    }
    for (i, g) in c.passwd.groups.iter().enumerate() {
        if g.should_exist == Some(false) {
            let p = pw.key("groups").index(i).key("shouldExist");
            no(p, "groups that should not exist");
        }
    }
    for (i, d) in c.storage.disks.iter().enumerate() {
        for (j, p) in d.partitions.iter().enumerate() {
            let at = st.key("disks").index(i).key("partitions").index(j);
            if p.size_mib.is_some() {
                no(at.key("sizeMiB"), "partition sizes in MiB");
            }
            if p.start_mib.is_some() {
                no(at.key("startMiB"), "partition starts in MiB");
            }
            if p.resize == Some(true) {
                no(at.key("resize"), "partition resizing");
            }
        }
    }
    for (i, f) in c.storage.filesystems.iter().enumerate() {
        let at = st.key("filesystems").index(i);
        if !f.mount_options.is_empty() {
            no(at.key("mountOptions"), "mount options");
        }
        if f.format.as_deref().is_none_or(str::is_empty) {
            no(at.key("format"), "filesystems without a format");
        }
    }
    for (i, f) in c.storage.files.iter().enumerate() {
        let at = st.key("files").index(i);

        if !f.contents.http_headers.is_empty() {
            no(at.key("contents").key("httpHeaders"), "HTTP headers");
        }
        for (k, a) in f.append.iter().enumerate() {
            if !a.http_headers.is_empty() {
                no(at.key("append").index(k).key("httpHeaders"), "HTTP headers");
            }
        }
    }
}

/// `s` as a JSON string the way Go's `encoding/json` writes it (HTML-safe).
pub fn go_string(s: &str) -> String {
    let mut d = Doc(Vec::new());
    d.string(s);
    String::from_utf8(d.0).unwrap_or_default()
}

/// The JSON text being written.
struct Doc(Vec<u8>);

impl Doc {
    fn raw(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
    }

    /// A string as Go's `encoding/json` writes it (HTML-safe).
    fn string(&mut self, s: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self.0.push(b'"');
        for ch in s.chars() {
            match ch {
                '"' => self.raw("\\\""),
                '\\' => self.raw("\\\\"),
                '\n' => self.raw("\\n"),
                '\r' => self.raw("\\r"),
                '\t' => self.raw("\\t"),
                '\u{2028}' => self.raw("\\u2028"),
                '\u{2029}' => self.raw("\\u2029"),
                c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&') => {
                    let b = c as u8;
                    self.raw("\\u00");
                    self.0.push(HEX[(b >> 4) as usize]);
                    self.0.push(HEX[(b & 0xf) as usize]);
                }
                c => {
                    let mut buf = [0u8; 4];
                    self.raw(c.encode_utf8(&mut buf));
                }
            }
        }
        self.0.push(b'"');
    }
}

/// One JSON object being written: members after the first get a comma.
struct Obj<'a> {
    doc: &'a mut Doc,
    first: bool,
}

impl<'a> Obj<'a> {
    fn open(doc: &'a mut Doc) -> Self {
        doc.raw("{");
        Obj { doc, first: true }
    }

    fn key(&mut self, k: &str) -> &mut Doc {
        if !self.first {
            self.doc.raw(",");
        }
        self.first = false;
        self.doc.string(k);
        self.doc.raw(":");
        self.doc
    }

    /// `omitempty` string.
    fn str(&mut self, k: &str, v: &str) {
        if !v.is_empty() {
            self.key(k).string(v);
        }
    }

    /// `*string`: written when set, even empty.
    fn opt_str(&mut self, k: &str, v: Option<&str>) {
        if let Some(v) = v {
            self.key(k).string(v);
        }
    }

    /// `omitempty` bool.
    fn flag(&mut self, k: &str, v: bool) {
        if v {
            self.key(k).raw("true");
        }
    }

    /// `*bool`.
    fn opt_bool(&mut self, k: &str, v: Option<bool>) {
        if let Some(v) = v {
            self.key(k).raw(if v { "true" } else { "false" });
        }
    }

    /// `omitempty` int.
    fn int(&mut self, k: &str, v: i64) {
        if v != 0 {
            self.key(k).raw(&v.to_string());
        }
    }

    /// `*int`.
    fn opt_int(&mut self, k: &str, v: Option<i64>) {
        if let Some(v) = v {
            self.key(k).raw(&v.to_string());
        }
    }

    /// `omitempty` list of strings.
    fn strs(&mut self, k: &str, v: &[String]) {
        if v.is_empty() {
            return;
        }
        let d = self.key(k);
        d.raw("[");
        for (i, s) in v.iter().enumerate() {
            if i > 0 {
                d.raw(",");
            }
            d.string(s);
        }
        d.raw("]");
    }

    /// `omitempty` struct or list: written unless `write` writes nothing but `{}` or `[]`.
    fn nested(&mut self, k: &str, write: impl FnOnce(&mut Doc)) {
        let mut inner = Doc(Vec::new());
        write(&mut inner);
        if inner.0 != b"{}" && inner.0 != b"[]" {
            self.key(k).0.extend_from_slice(&inner.0);
        }
    }

    fn close(self) {
        self.doc.raw("}");
    }
}

/// A JSON array of `items`, each written by `write`.
fn list<T>(d: &mut Doc, items: &[T], mut write: impl FnMut(&mut Doc, &T)) {
    d.raw("[");
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            d.raw(",");
        }
        write(d, it);
    }
    d.raw("]");
}

fn config(c: &Config, fss: &[&str], d: &mut Doc, why: &mut Vec<String>) {
    let mut o = Obj::open(d);
    o.key("ignition").raw("");
    ignition(&c.ignition, o.doc);
    o.nested("passwd", |d| passwd(&c.passwd, d));
    o.nested("storage", |d| storage(&c.storage, fss, d, why));
    o.nested("systemd", |d| {
        let mut o = Obj::open(d);
        o.nested("units", |d| list(d, &c.systemd.units, unit));
        o.close();
    });
    o.close();
}

fn verification(v: &Verification, d: &mut Doc) {
    let mut o = Obj::open(d);
    o.opt_str("hash", v.hash.as_deref());
    o.close();
}

/// A config reference, a CA or file contents (`compression` only for contents).
fn reference(r: &Resource, with_compression: bool, d: &mut Doc) {
    let mut o = Obj::open(d);
    if with_compression {
        o.str("compression", r.compression.as_deref().unwrap_or(""));
    }
    o.str("source", r.source.as_deref().unwrap_or(""));
    o.nested("verification", |d| verification(&r.verification, d));
    o.close();
}

fn ignition(i: &Ignition, d: &mut Doc) {
    let mut o = Obj::open(d);
    o.nested("config", |d| {
        let mut o = Obj::open(d);
        let merge: Vec<&Resource> = i
            .config
            .merge
            .iter()
            .filter(|r| r.source.is_some())
            .collect();
        o.nested("append", |d| list(d, &merge, |d, r| reference(r, false, d)));
        if i.config.replace.source.is_some() {
            o.key("replace").raw("");
            reference(&i.config.replace, false, o.doc);
        }
        o.close();
    });
    o.nested("security", |d| {
        let mut o = Obj::open(d);
        o.nested("tls", |d| {
            let mut o = Obj::open(d);
            let cas = &i.security.tls.certificate_authorities;
            o.nested("certificateAuthorities", |d| {
                list(d, cas, |d, r| reference(r, false, d))
            });
            o.close();
        });
        o.close();
    });
    o.nested("timeouts", |d| {
        let mut o = Obj::open(d);
        o.opt_int("httpResponseHeaders", i.timeouts.http_response_headers);
        o.opt_int("httpTotal", i.timeouts.http_total);
        o.close();
    });
    o.str("version", "2.2.0");
    o.close();
}

fn passwd(p: &Passwd, d: &mut Doc) {
    let mut o = Obj::open(d);
    o.nested("groups", |d| {
        list(d, &p.groups, |d, g| {
            let mut o = Obj::open(d);
            o.opt_int("gid", g.gid);
            o.str("name", &g.name);
            o.str("passwordHash", g.password_hash.as_deref().unwrap_or(""));
            o.flag("system", g.system == Some(true));
            o.close();
        })
    });
    o.nested("users", |d| {
        list(d, &p.users, |d, u| {
            let mut o = Obj::open(d);
            o.str("gecos", u.gecos.as_deref().unwrap_or(""));
            o.strs("groups", &u.groups);
            o.str("homeDir", u.home_dir.as_deref().unwrap_or(""));
            o.str("name", &u.name);
            o.flag("noCreateHome", u.no_create_home == Some(true));
            o.flag("noLogInit", u.no_log_init == Some(true));
            o.flag("noUserGroup", u.no_user_group == Some(true));
            o.opt_str("passwordHash", u.password_hash.as_deref());
            o.str("primaryGroup", u.primary_group.as_deref().unwrap_or(""));
            o.strs("sshAuthorizedKeys", &u.ssh_authorized_keys);
            o.str("shell", u.shell.as_deref().unwrap_or(""));
            o.flag("system", u.system == Some(true));
            o.opt_int("uid", u.uid);
            o.close();
        })
    });
    o.close();
}

/// A node's `filesystem` and `path` in 2.2: the longest filesystem path that is a (string)
/// prefix of the node's path, and the rest; `root` and the whole path when none is.
fn node_place<'a>(path: &'a str, fss: &[&'a str]) -> (&'a str, &'a str) {
    let mut fs = "";
    let mut rest = path;
    for f in fss {
        if path.starts_with(f) && f.len() > fs.len() {
            fs = f;
            rest = &path[f.len()..];
        }
    }
    if fs.is_empty() {
        ("root", path)
    } else {
        (fs, rest)
    }
}

/// The common node members; records why when the node's 2.2 path is not absolute.
#[allow(clippy::too_many_arguments)]
fn node(
    o: &mut Obj,
    at: Path,
    path: &str,
    overwrite: Option<bool>,
    user: &NodeUser,
    group: &NodeUser,
    fss: &[&str],
    why: &mut Vec<String>,
) {
    let (fs, rest) = node_place(path, fss);
    if !rest.starts_with('/') {
        why.push(format!(
            "a path that filesystem {fs:?} leaves relative ({rest:?}) at {}",
            at.key("path")
        ));
    }
    o.str("filesystem", fs);
    let owner = |o: &mut Obj, k: &str, u: &NodeUser| {
        if u.id.is_some() || u.name.is_some() {
            o.key(k).raw("");
            let mut i = Obj::open(o.doc);
            i.opt_int("id", u.id);
            i.str("name", u.name.as_deref().unwrap_or(""));
            i.close();
        }
    };
    owner(o, "group", group);
    o.opt_bool("overwrite", overwrite);
    o.str("path", rest);
    owner(o, "user", user);
}

/// `gs://` sources, which 2.2 has no scheme for.
fn scheme_check(r: &Resource, at: Path, why: &mut Vec<String>) {
    if r.source.as_deref().is_some_and(|s| s.starts_with("gs://")) {
        why.push(format!("gs:// URLs at {}", at.key("source")));
    }
}

fn storage(s: &Storage, fss: &[&str], d: &mut Doc, why: &mut Vec<String>) {
    let st = Path::root().key("storage");
    let mut o = Obj::open(d);
    o.nested("directories", |d| {
        let items: Vec<_> = s.directories.iter().enumerate().collect();
        list(d, &items, |d, (i, x)| {
            let mut o = Obj::open(d);
            let at = st.key("directories").index(*i);
            node(
                &mut o,
                at,
                &x.path,
                x.overwrite,
                &x.user,
                &x.group,
                fss,
                why,
            );
            o.opt_int("mode", x.mode);
            o.close();
        })
    });
    o.nested("disks", |d| {
        list(d, &s.disks, |d, x| {
            let mut o = Obj::open(d);
            o.str("device", &x.device);
            o.nested("partitions", |d| {
                list(d, &x.partitions, |d, p| {
                    let mut o = Obj::open(d);
                    o.str("guid", p.guid.as_deref().unwrap_or(""));
                    o.str("label", p.label.as_deref().unwrap_or(""));
                    o.int("number", p.num());
                    o.str("typeGuid", p.type_guid.as_deref().unwrap_or(""));
                    o.close();
                })
            });
            o.flag("wipeTable", x.wipe_table == Some(true));
            o.close();
        })
    });
    o.nested("files", |d| files(s, fss, d, why));
    o.nested("filesystems", |d| {
        let mut unnamed = 0;
        list(d, &s.filesystems, |d, f| {
            let mut o = Obj::open(d);
            o.key("mount").raw("");
            let mut m = Obj::open(o.doc);
            m.str("device", &f.device);
            m.str("format", f.format.as_deref().unwrap_or(""));
            m.opt_str("label", f.label.as_deref());
            m.strs("options", &f.options);
            m.opt_str("uuid", f.uuid.as_deref());
            m.flag("wipeFilesystem", f.wipe_filesystem == Some(true));
            m.close();
            let name = match &f.path {
                Some(p) => p.clone(),
                None => {
                    unnamed += 1;
                    unnamed.to_string()
                }
            };
            o.str("name", &name);
            o.close();
        })
    });
    o.nested("links", |d| {
        let items: Vec<_> = s.links.iter().enumerate().collect();
        list(d, &items, |d, (i, x)| {
            let mut o = Obj::open(d);
            let at = st.key("links").index(*i);
            node(
                &mut o,
                at,
                &x.path,
                x.overwrite,
                &x.user,
                &x.group,
                fss,
                why,
            );
            o.flag("hard", x.hard == Some(true));
            o.str("target", x.target.as_deref().unwrap_or(""));
            o.close();
        })
    });
    o.nested("raid", |d| {
        list(d, &s.raid, |d, r| {
            let mut o = Obj::open(d);
            o.strs("devices", &r.devices);
            o.str("level", r.level.as_deref().unwrap_or(""));
            o.str("name", &r.name);
            o.strs("options", &r.options);
            o.int("spares", r.spares.unwrap_or(0));
            o.close();
        })
    });
    o.close();
}

/// Files: one entry for the contents (when there is a source), one more per append.
fn files(s: &Storage, fss: &[&str], d: &mut Doc, why: &mut Vec<String>) {
    let st = Path::root().key("storage").key("files");
    d.raw("[");
    let mut first = true;
    for (i, f) in s.files.iter().enumerate() {
        let at = st.index(i);
        scheme_check(&f.contents, at.key("contents"), why);
        for (k, r) in f.append.iter().enumerate() {
            scheme_check(r, at.key("append").index(k), why);
        }
        let overwrite = f.overwrite.unwrap_or(false);
        let parts = f
            .contents
            .source
            .is_some()
            .then_some((&f.contents, false, overwrite))
            .into_iter()
            .chain(f.append.iter().map(|r| (r, true, false)));
        for (k, (r, append, ow)) in parts.enumerate() {
            if !first {
                d.raw(",");
            }
            first = false;
            let mut o = Obj::open(d);
            // Only the first entry of a file reports its path.
            let mut sink = Vec::new();
            let w = if k == 0 { &mut *why } else { &mut sink };
            node(
                &mut o,
                at.clone(),
                &f.path,
                Some(ow),
                &f.user,
                &f.group,
                fss,
                w,
            );
            o.flag("append", append);
            o.nested("contents", |d| reference(r, true, d));
            o.opt_int("mode", f.mode);
            o.close();
        }
    }
    d.raw("]");
}

fn unit(d: &mut Doc, u: &Unit) {
    let mut o = Obj::open(d);
    o.str("contents", u.contents.as_deref().unwrap_or(""));
    o.nested("dropins", |d| {
        list(d, &u.dropins, |d, x| {
            let mut o = Obj::open(d);
            o.str("contents", x.contents.as_deref().unwrap_or(""));
            o.str("name", &x.name);
            o.close();
        })
    });
    o.opt_bool("enabled", u.enabled);
    o.flag("mask", u.mask == Some(true));
    o.str("name", &u.name);
    o.close();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v22(json: &str) -> Result<String, String> {
        let c = crate::config::parse(json.as_bytes()).unwrap().config;
        to_json(&c).map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn empty_config() {
        assert_eq!(
            v22(r#"{"ignition":{"version":"3.2.0"}}"#).unwrap(),
            r#"{"ignition":{"version":"2.2.0"}}"#
        );
    }

    /// Go's HTML-safe escaping, the embedded Node then FileEmbedded1 members, overwrite
    /// always written for files (false when unset), and filesystems named by their paths.
    #[test]
    fn files_units_and_filesystems() {
        let got = v22(
            r#"{"ignition":{"version":"3.2.0"},"storage":{
              "filesystems":[{"device":"/dev/vdb","format":"xfs","path":"/var/lib"}],
              "files":[{"path":"/var/lib/x","mode":420,"contents":{"source":"data:,a"},
                        "append":[{"source":"data:,b"}]},
                       {"path":"/etc/y","overwrite":true,"contents":{"source":""},"user":{"name":"core"}}]},
              "systemd":{"units":[{"name":"a.service","enabled":false,"contents":"[Unit]\nX=<&>\u2028\n"}]}}"#,
        )
        .unwrap();
        assert_eq!(
            got,
            concat!(
                r#"{"ignition":{"version":"2.2.0"},"storage":{"files":["#,
                r#"{"filesystem":"/var/lib","overwrite":false,"path":"/x","contents":{"source":"data:,a"},"mode":420},"#,
                r#"{"filesystem":"/var/lib","overwrite":false,"path":"/x","append":true,"contents":{"source":"data:,b"},"mode":420},"#,
                r#"{"filesystem":"root","overwrite":true,"path":"/etc/y","user":{"name":"core"}}],"#,
                r#""filesystems":[{"mount":{"device":"/dev/vdb","format":"xfs"},"name":"/var/lib"}]},"#,
                r#""systemd":{"units":[{"contents":"[Unit]\nX=\u003c\u0026\u003e\u2028\n","enabled":false,"name":"a.service"}]}}"#
            )
        );
    }

    /// Every field 2.2 cannot express is named, by path, in one error.
    #[test]
    fn refusals_name_every_field() {
        let e = v22(
            r#"{"ignition":{"version":"3.4.0","proxy":{"httpProxy":"http://p"}},
               "kernelArguments":{"shouldExist":["a"]},
               "passwd":{"users":[{"name":"u","shouldExist":false}]},
               "storage":{"disks":[{"device":"/dev/vda","partitions":[{"number":1,"sizeMiB":5},
                                                                    {"number":2,"shouldExist":false}]}],
                          "files":[{"path":"/etc/empty"},{"path":"/etc/g","contents":{"source":"gs://b/o"}}],
                          "filesystems":[{"device":"/dev/vdb","format":"ext4","path":"/var","mountOptions":["ro"]}],
                          "links":[{"path":"/variable","target":"/x"}]}}"#,
        )
        .unwrap_err();
        for want in [
            "$.kernelArguments",
            "$.ignition.proxy",
            "$.passwd.users.0.shouldExist",
            "$.storage.disks.0.partitions.0.sizeMiB",
            "$.storage.files.1.contents.source",
            "$.storage.filesystems.0.mountOptions",
            "$.storage.links.0.path",
        ] {
            assert!(e.contains(want), "{want} in {e}");
        }
        assert!(
            e.starts_with("config cannot be expressed as spec 2.2.0: "),
            "{e}"
        );
    }

    #[test]
    fn go_string_escapes() {
        let mut d = Doc(Vec::new());
        d.string("a\"\\\u{1}\u{8}\u{c}\u{1f}\u{7f}é\u{2029}<>&/");
        assert_eq!(
            String::from_utf8(d.0).unwrap(),
            "\"a\\\"\\\\\\u0001\\u0008\\u000c\\u001f\u{7f}é\\u2029\\u003c\\u003e\\u0026/\""
        );
    }
}
