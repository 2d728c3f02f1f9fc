//! Decoding a parsed JSON tree into the config model. The decoder knows the newest schema;
//! which fields a declared version may use is checked afterwards (`version::check`), so the
//! field table lives in one place. Unknown keys are warnings; wrong types are errors.

use super::diag::{Diagnostic, Path, Seg};
use super::types::*;
use crate::json::{Kind, Member, Number, Value};

#[derive(Clone, Copy)]
enum DSeg {
    Key(&'static str),
    Index(usize),
}

pub struct Decoder {
    stack: Vec<DSeg>,
    pub diags: Vec<Diagnostic>,
}

/// An object being decoded: tracks which members were consumed so the rest can be warned
/// about as unknown keys.
struct Obj<'v> {
    members: &'v mut [Member],
    used: Vec<bool>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Decoder {
            stack: Vec::with_capacity(16),
            diags: Vec::new(),
        }
    }

    fn path(&self) -> Path {
        Path(
            self.stack
                .iter()
                .map(|s| match s {
                    DSeg::Key(k) => Seg::Key((*k).to_string()),
                    DSeg::Index(i) => Seg::Index(*i),
                })
                .collect(),
        )
    }

    fn error(&mut self, msg: impl Into<String>) {
        let d = Diagnostic::error(self.path(), msg);
        self.diags.push(d);
    }

    fn type_error(&mut self, want: &str, v: &Value) {
        self.error(format!("expected {want}, found {}", v.kind.type_name()));
    }

    /// Opens `v` as an object; null counts as absent.
    fn obj<'v>(&mut self, v: &'v mut Value) -> Option<Obj<'v>> {
        match v.kind {
            Kind::Object(_) => {}
            Kind::Null => return None,
            _ => {
                self.type_error("an object", v);
                return None;
            }
        }
        match &mut v.kind {
            Kind::Object(members) => {
                let used = vec![false; members.len()];
                Some(Obj { members, used })
            }
            _ => None,
        }
    }

    fn finish(&mut self, o: Obj<'_>) {
        for (m, used) in o.members.iter().zip(o.used) {
            if !used {
                let mut p = self.path();
                p.0.push(Seg::Key(m.key.clone()));
                let mut d = Diagnostic::warning(p, format!("unknown key {:?}", m.key));
                d.offset = Some(m.key_pos);
                self.diags.push(d);
            }
        }
    }

    /// Index of the member `key`, marked as used; `None` when absent or null.
    fn take(&mut self, o: &mut Obj<'_>, key: &'static str) -> Option<usize> {
        let i = o.members.iter().position(|m| m.key == key)?;
        o.used[i] = true;
        if matches!(o.members[i].value.kind, Kind::Null) {
            None
        } else {
            Some(i)
        }
    }

    /// Runs `f` with `key` pushed on the path if the key is present. Decoding moves strings
    /// out of the tree (no copies); the tree keeps its shape and positions for diagnostics.
    fn with<T>(
        &mut self,
        o: &mut Obj<'_>,
        key: &'static str,
        f: impl FnOnce(&mut Self, &mut Value) -> Option<T>,
    ) -> Option<T> {
        let i = self.take(o, key)?;
        self.stack.push(DSeg::Key(key));
        let r = f(self, &mut o.members[i].value);
        self.stack.pop();
        r
    }

    fn str(&mut self, o: &mut Obj<'_>, key: &'static str) -> Option<String> {
        self.with(o, key, |d, v| match &mut v.kind {
            Kind::String(s) => Some(std::mem::take(s)),
            _ => {
                d.type_error("a string", v);
                None
            }
        })
    }

    /// A string that must be present (required key fields). Absent becomes "" and an error.
    fn req_str(&mut self, o: &mut Obj<'_>, key: &'static str) -> String {
        match self.str(o, key) {
            Some(s) => s,
            None => {
                if !o
                    .members
                    .iter()
                    .any(|m| m.key == key && !matches!(m.value.kind, Kind::Null))
                {
                    self.stack.push(DSeg::Key(key));
                    self.error(format!("{key} is required"));
                    self.stack.pop();
                }
                String::new()
            }
        }
    }

    fn bool(&mut self, o: &mut Obj<'_>, key: &'static str) -> Option<bool> {
        self.with(o, key, |d, v| match &v.kind {
            Kind::Bool(b) => Some(*b),
            _ => {
                d.type_error("a boolean", v);
                None
            }
        })
    }

    fn int(&mut self, o: &mut Obj<'_>, key: &'static str) -> Option<i64> {
        self.with(o, key, |d, v| match &v.kind {
            Kind::Number(Number::Int(i)) => Some(*i),
            Kind::Number(Number::Float(f)) => {
                if f.fract() == 0.0 && f.abs() < 9.0e18 {
                    Some(*f as i64)
                } else if f.fract() == 0.0 {
                    d.error("number out of range");
                    None
                } else {
                    d.error("expected an integer, found a fraction");
                    None
                }
            }
            _ => {
                d.type_error("an integer", v);
                None
            }
        })
    }

    fn list<T>(
        &mut self,
        o: &mut Obj<'_>,
        key: &'static str,
        mut f: impl FnMut(&mut Self, &mut Value) -> Option<T>,
    ) -> Vec<T> {
        self.with(o, key, |d, v| match &mut v.kind {
            Kind::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter_mut().enumerate() {
                    d.stack.push(DSeg::Index(i));
                    if let Some(t) = f(d, item) {
                        out.push(t);
                    }
                    d.stack.pop();
                }
                Some(out)
            }
            _ => {
                d.type_error("an array", v);
                None
            }
        })
        .unwrap_or_default()
    }

    fn str_list(&mut self, o: &mut Obj<'_>, key: &'static str) -> Vec<String> {
        self.list(o, key, |d, v| match &mut v.kind {
            Kind::String(s) => Some(std::mem::take(s)),
            _ => {
                d.type_error("a string", v);
                None
            }
        })
    }

    fn sub<T: Default>(
        &mut self,
        o: &mut Obj<'_>,
        key: &'static str,
        f: impl FnOnce(&mut Self, &mut Value) -> T,
    ) -> T {
        self.with(o, key, |d, v| Some(f(d, v))).unwrap_or_default()
    }

    // ---- sections ----

    pub fn config(&mut self, v: &mut Value) -> Config {
        let Some(mut o) = self.obj(v) else {
            return Config::default();
        };
        let c = Config {
            ignition: self.sub(&mut o, "ignition", Self::ignition),
            kernel_arguments: self.sub(&mut o, "kernelArguments", Self::kernel_arguments),
            passwd: self.sub(&mut o, "passwd", Self::passwd),
            storage: self.sub(&mut o, "storage", Self::storage),
            systemd: self.sub(&mut o, "systemd", Self::systemd),
        };
        self.finish(o);
        c
    }

    fn ignition(&mut self, v: &mut Value) -> Ignition {
        let Some(mut o) = self.obj(v) else {
            return Ignition::default();
        };
        let r = Ignition {
            config: self.sub(&mut o, "config", |d, v| {
                let Some(mut o) = d.obj(v) else {
                    return IgnitionConfig::default();
                };
                let r = IgnitionConfig {
                    merge: d.list(&mut o, "merge", |d, v| Some(d.resource(v))),
                    replace: d.sub(&mut o, "replace", Self::resource),
                };
                d.finish(o);
                r
            }),
            proxy: self.sub(&mut o, "proxy", |d, v| {
                let Some(mut o) = d.obj(v) else {
                    return Proxy::default();
                };
                let r = Proxy {
                    http_proxy: d.str(&mut o, "httpProxy"),
                    https_proxy: d.str(&mut o, "httpsProxy"),
                    no_proxy: d.str_list(&mut o, "noProxy"),
                };
                d.finish(o);
                r
            }),
            security: self.sub(&mut o, "security", |d, v| {
                let Some(mut o) = d.obj(v) else {
                    return Security::default();
                };
                let tls = d.sub(&mut o, "tls", |d, v| {
                    let Some(mut o) = d.obj(v) else {
                        return Tls::default();
                    };
                    let r = Tls {
                        certificate_authorities: d.list(
                            &mut o,
                            "certificateAuthorities",
                            |d, v| Some(d.resource(v)),
                        ),
                    };
                    d.finish(o);
                    r
                });
                d.finish(o);
                Security { tls }
            }),
            timeouts: self.sub(&mut o, "timeouts", |d, v| {
                let Some(mut o) = d.obj(v) else {
                    return Timeouts::default();
                };
                let r = Timeouts {
                    http_response_headers: d.int(&mut o, "httpResponseHeaders"),
                    http_total: d.int(&mut o, "httpTotal"),
                };
                d.finish(o);
                r
            }),
            version: self.str(&mut o, "version").unwrap_or_default(),
        };
        self.finish(o);
        r
    }

    pub fn resource(&mut self, v: &mut Value) -> Resource {
        let Some(mut o) = self.obj(v) else {
            return Resource::default();
        };
        let r = Resource {
            compression: self.str(&mut o, "compression"),
            http_headers: self.list(&mut o, "httpHeaders", |d, v| {
                let mut o = d.obj(v)?;
                let h = HttpHeader {
                    name: d.req_str(&mut o, "name"),
                    value: d.str(&mut o, "value"),
                };
                d.finish(o);
                Some(h)
            }),
            source: self.str(&mut o, "source"),
            verification: self.sub(&mut o, "verification", |d, v| {
                let Some(mut o) = d.obj(v) else {
                    return Verification::default();
                };
                let r = Verification {
                    hash: d.str(&mut o, "hash"),
                };
                d.finish(o);
                r
            }),
        };
        self.finish(o);
        r
    }

    fn kernel_arguments(&mut self, v: &mut Value) -> KernelArguments {
        let Some(mut o) = self.obj(v) else {
            return KernelArguments::default();
        };
        let r = KernelArguments {
            should_exist: self.str_list(&mut o, "shouldExist"),
            should_not_exist: self.str_list(&mut o, "shouldNotExist"),
        };
        self.finish(o);
        r
    }

    fn passwd(&mut self, v: &mut Value) -> Passwd {
        let Some(mut o) = self.obj(v) else {
            return Passwd::default();
        };
        let r = Passwd {
            groups: self.list(&mut o, "groups", |d, v| {
                let mut o = d.obj(v)?;
                let g = Group {
                    gid: d.int(&mut o, "gid"),
                    name: d.req_str(&mut o, "name"),
                    password_hash: d.str(&mut o, "passwordHash"),
                    should_exist: d.bool(&mut o, "shouldExist"),
                    system: d.bool(&mut o, "system"),
                };
                d.finish(o);
                Some(g)
            }),
            users: self.list(&mut o, "users", |d, v| {
                let mut o = d.obj(v)?;
                let u = User {
                    gecos: d.str(&mut o, "gecos"),
                    groups: d.str_list(&mut o, "groups"),
                    home_dir: d.str(&mut o, "homeDir"),
                    name: d.req_str(&mut o, "name"),
                    no_create_home: d.bool(&mut o, "noCreateHome"),
                    no_log_init: d.bool(&mut o, "noLogInit"),
                    no_user_group: d.bool(&mut o, "noUserGroup"),
                    password_hash: d.str(&mut o, "passwordHash"),
                    primary_group: d.str(&mut o, "primaryGroup"),
                    shell: d.str(&mut o, "shell"),
                    should_exist: d.bool(&mut o, "shouldExist"),
                    ssh_authorized_keys: d.str_list(&mut o, "sshAuthorizedKeys"),
                    system: d.bool(&mut o, "system"),
                    uid: d.int(&mut o, "uid"),
                };
                d.finish(o);
                Some(u)
            }),
        };
        self.finish(o);
        r
    }

    fn storage(&mut self, v: &mut Value) -> Storage {
        let Some(mut o) = self.obj(v) else {
            return Storage::default();
        };
        let r = Storage {
            directories: self.list(&mut o, "directories", |d, v| {
                let mut o = d.obj(v)?;
                let r = Directory {
                    group: d.sub(&mut o, "group", Self::node_user),
                    mode: d.int(&mut o, "mode"),
                    overwrite: d.bool(&mut o, "overwrite"),
                    path: d.req_str(&mut o, "path"),
                    user: d.sub(&mut o, "user", Self::node_user),
                };
                d.finish(o);
                Some(r)
            }),
            disks: self.list(&mut o, "disks", |d, v| {
                let mut o = d.obj(v)?;
                let r = Disk {
                    device: d.req_str(&mut o, "device"),
                    partitions: d.list(&mut o, "partitions", |d, v| {
                        let mut o = d.obj(v)?;
                        let r = Partition {
                            guid: d.str(&mut o, "guid"),
                            label: d.str(&mut o, "label"),
                            number: d.int(&mut o, "number"),
                            resize: d.bool(&mut o, "resize"),
                            should_exist: d.bool(&mut o, "shouldExist"),
                            size_mib: d.int(&mut o, "sizeMiB"),
                            start_mib: d.int(&mut o, "startMiB"),
                            type_guid: d.str(&mut o, "typeGuid"),
                            wipe_partition_entry: d.bool(&mut o, "wipePartitionEntry"),
                        };
                        d.finish(o);
                        Some(r)
                    }),
                    wipe_table: d.bool(&mut o, "wipeTable"),
                };
                d.finish(o);
                Some(r)
            }),
            files: self.list(&mut o, "files", |d, v| {
                let mut o = d.obj(v)?;
                let r = File {
                    append: d.list(&mut o, "append", |d, v| Some(d.resource(v))),
                    contents: d.sub(&mut o, "contents", Self::resource),
                    group: d.sub(&mut o, "group", Self::node_user),
                    mode: d.int(&mut o, "mode"),
                    overwrite: d.bool(&mut o, "overwrite"),
                    path: d.req_str(&mut o, "path"),
                    user: d.sub(&mut o, "user", Self::node_user),
                };
                d.finish(o);
                Some(r)
            }),
            filesystems: self.list(&mut o, "filesystems", |d, v| {
                let mut o = d.obj(v)?;
                let r = Filesystem {
                    device: d.req_str(&mut o, "device"),
                    format: d.str(&mut o, "format"),
                    label: d.str(&mut o, "label"),
                    mount_options: d.str_list(&mut o, "mountOptions"),
                    options: d.str_list(&mut o, "options"),
                    path: d.str(&mut o, "path"),
                    uuid: d.str(&mut o, "uuid"),
                    wipe_filesystem: d.bool(&mut o, "wipeFilesystem"),
                };
                d.finish(o);
                Some(r)
            }),
            links: self.list(&mut o, "links", |d, v| {
                let mut o = d.obj(v)?;
                let r = Link {
                    group: d.sub(&mut o, "group", Self::node_user),
                    hard: d.bool(&mut o, "hard"),
                    overwrite: d.bool(&mut o, "overwrite"),
                    path: d.req_str(&mut o, "path"),
                    target: d.str(&mut o, "target"),
                    user: d.sub(&mut o, "user", Self::node_user),
                };
                d.finish(o);
                Some(r)
            }),
            luks: self.list(&mut o, "luks", |d, v| {
                let mut o = d.obj(v)?;
                let r = Luks {
                    cex: d.sub(&mut o, "cex", |d, v| {
                        let Some(mut o) = d.obj(v) else {
                            return Cex::default();
                        };
                        let r = Cex {
                            enabled: d.bool(&mut o, "enabled"),
                        };
                        d.finish(o);
                        r
                    }),
                    clevis: d.sub(&mut o, "clevis", Self::clevis),
                    device: d.str(&mut o, "device"),
                    discard: d.bool(&mut o, "discard"),
                    key_file: d.sub(&mut o, "keyFile", Self::resource),
                    label: d.str(&mut o, "label"),
                    name: d.req_str(&mut o, "name"),
                    open_options: d.str_list(&mut o, "openOptions"),
                    options: d.str_list(&mut o, "options"),
                    uuid: d.str(&mut o, "uuid"),
                    wipe_volume: d.bool(&mut o, "wipeVolume"),
                };
                d.finish(o);
                Some(r)
            }),
            raid: self.list(&mut o, "raid", |d, v| {
                let mut o = d.obj(v)?;
                let r = Raid {
                    devices: d.str_list(&mut o, "devices"),
                    level: d.str(&mut o, "level"),
                    name: d.req_str(&mut o, "name"),
                    options: d.str_list(&mut o, "options"),
                    spares: d.int(&mut o, "spares"),
                };
                d.finish(o);
                Some(r)
            }),
        };
        self.finish(o);
        r
    }

    fn clevis(&mut self, v: &mut Value) -> Clevis {
        let Some(mut o) = self.obj(v) else {
            return Clevis::default();
        };
        let r = Clevis {
            custom: self.sub(&mut o, "custom", |d, v| {
                let Some(mut o) = d.obj(v) else {
                    return ClevisCustom::default();
                };
                let r = ClevisCustom {
                    config: d.str(&mut o, "config"),
                    needs_network: d.bool(&mut o, "needsNetwork"),
                    pin: d.str(&mut o, "pin"),
                };
                d.finish(o);
                r
            }),
            tang: self.list(&mut o, "tang", |d, v| {
                let mut o = d.obj(v)?;
                let r = Tang {
                    advertisement: d.str(&mut o, "advertisement"),
                    thumbprint: d.str(&mut o, "thumbprint"),
                    url: d.req_str(&mut o, "url"),
                };
                d.finish(o);
                Some(r)
            }),
            threshold: self.int(&mut o, "threshold"),
            tpm2: self.bool(&mut o, "tpm2"),
        };
        self.finish(o);
        r
    }

    fn node_user(&mut self, v: &mut Value) -> NodeUser {
        let Some(mut o) = self.obj(v) else {
            return NodeUser::default();
        };
        let r = NodeUser {
            id: self.int(&mut o, "id"),
            name: self.str(&mut o, "name"),
        };
        self.finish(o);
        r
    }

    fn systemd(&mut self, v: &mut Value) -> Systemd {
        let Some(mut o) = self.obj(v) else {
            return Systemd::default();
        };
        let r = Systemd {
            units: self.list(&mut o, "units", |d, v| {
                let mut o = d.obj(v)?;
                let r = Unit {
                    contents: d.str(&mut o, "contents"),
                    dropins: d.list(&mut o, "dropins", |d, v| {
                        let mut o = d.obj(v)?;
                        let r = Dropin {
                            contents: d.str(&mut o, "contents"),
                            name: d.req_str(&mut o, "name"),
                        };
                        d.finish(o);
                        Some(r)
                    }),
                    enabled: d.bool(&mut o, "enabled"),
                    mask: d.bool(&mut o, "mask"),
                    name: d.req_str(&mut o, "name"),
                };
                d.finish(o);
                Some(r)
            }),
        };
        self.finish(o);
        r
    }
}
