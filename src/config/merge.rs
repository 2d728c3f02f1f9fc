//! Merging a child config into its parent (REFERENCE §1 "Merging"): a pure function.
//!
//! - scalars: a value the child sets replaces the parent's; unset keeps the parent's;
//! - lists of objects are keyed; entries with equal keys merge field by field, new entries are
//!   appended; files, directories and links share one key space (a child entry of one kind
//!   replaces a parent entry of another kind at the same path);
//! - argument lists (mkfs `options`, mdadm `options`, `mountOptions`, LUKS `openOptions`) are
//!   appended; other lists of strings are sets (new values appended once);
//! - a child HTTP header without a value removes the parent's header of that name.

use super::types::*;

/// Returns `parent` with `child` merged into it.
pub fn merge(parent: &Config, child: &Config) -> Config {
    let mut out = parent.clone();
    out.merge_from(child);
    out
}

pub trait Merge {
    fn merge_from(&mut self, child: &Self);
}

/// List entries identified by a key.
pub trait Keyed {
    /// `None`: the entry has no key and is always appended.
    fn key(&self) -> Option<String>;
}

fn opt<T: Clone>(p: &mut Option<T>, c: &Option<T>) {
    if c.is_some() {
        p.clone_from(c);
    }
}

fn append(p: &mut Vec<String>, c: &[String]) {
    p.extend_from_slice(c);
}

fn set_union(p: &mut Vec<String>, c: &[String]) {
    for x in c {
        if !p.contains(x) {
            p.push(x.clone());
        }
    }
}

fn keyed<T: Keyed + Merge + Clone>(p: &mut Vec<T>, c: &[T]) {
    for item in c {
        let key = item.key();
        match key
            .as_ref()
            .and_then(|k| p.iter_mut().find(|x| x.key().as_ref() == Some(k)))
        {
            Some(existing) => existing.merge_from(item),
            None => p.push(item.clone()),
        }
    }
}

impl Merge for Config {
    fn merge_from(&mut self, c: &Self) {
        self.ignition.merge_from(&c.ignition);
        self.kernel_arguments.merge_from(&c.kernel_arguments);
        self.passwd.merge_from(&c.passwd);
        self.storage.merge_from(&c.storage);
        self.systemd.merge_from(&c.systemd);
    }
}

impl Merge for Ignition {
    fn merge_from(&mut self, c: &Self) {
        keyed(&mut self.config.merge, &c.config.merge);
        self.config.replace.merge_from(&c.config.replace);
        opt(&mut self.proxy.http_proxy, &c.proxy.http_proxy);
        opt(&mut self.proxy.https_proxy, &c.proxy.https_proxy);
        set_union(&mut self.proxy.no_proxy, &c.proxy.no_proxy);
        keyed(
            &mut self.security.tls.certificate_authorities,
            &c.security.tls.certificate_authorities,
        );
        opt(
            &mut self.timeouts.http_response_headers,
            &c.timeouts.http_response_headers,
        );
        opt(&mut self.timeouts.http_total, &c.timeouts.http_total);
        // `version` describes a document, not the merged result.
    }
}

impl Keyed for Resource {
    fn key(&self) -> Option<String> {
        self.source.clone()
    }
}

impl Merge for Resource {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.compression, &c.compression);
        for h in &c.http_headers {
            let pos = self.http_headers.iter().position(|x| x.name == h.name);
            match (pos, &h.value) {
                (Some(i), None) => {
                    self.http_headers.remove(i);
                }
                (Some(i), Some(_)) => self.http_headers[i].value.clone_from(&h.value),
                (None, _) => self.http_headers.push(h.clone()),
            }
        }
        opt(&mut self.source, &c.source);
        opt(&mut self.verification.hash, &c.verification.hash);
    }
}

impl Merge for KernelArguments {
    fn merge_from(&mut self, c: &Self) {
        // The two lists share one key space: a child's shouldNotExist cancels a parent's
        // shouldExist of the same argument and the other way round.
        self.should_not_exist
            .retain(|a| !c.should_exist.contains(a));
        self.should_exist
            .retain(|a| !c.should_not_exist.contains(a));
        set_union(&mut self.should_exist, &c.should_exist);
        set_union(&mut self.should_not_exist, &c.should_not_exist);
    }
}

impl Merge for Passwd {
    fn merge_from(&mut self, c: &Self) {
        keyed(&mut self.groups, &c.groups);
        keyed(&mut self.users, &c.users);
    }
}

impl Keyed for User {
    fn key(&self) -> Option<String> {
        Some(self.name.clone())
    }
}

impl Merge for User {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.gecos, &c.gecos);
        set_union(&mut self.groups, &c.groups);
        opt(&mut self.home_dir, &c.home_dir);
        opt(&mut self.no_create_home, &c.no_create_home);
        opt(&mut self.no_log_init, &c.no_log_init);
        opt(&mut self.no_user_group, &c.no_user_group);
        opt(&mut self.password_hash, &c.password_hash);
        opt(&mut self.primary_group, &c.primary_group);
        opt(&mut self.shell, &c.shell);
        opt(&mut self.should_exist, &c.should_exist);
        set_union(&mut self.ssh_authorized_keys, &c.ssh_authorized_keys);
        opt(&mut self.system, &c.system);
        opt(&mut self.uid, &c.uid);
    }
}

impl Keyed for Group {
    fn key(&self) -> Option<String> {
        Some(self.name.clone())
    }
}

impl Merge for Group {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.gid, &c.gid);
        opt(&mut self.password_hash, &c.password_hash);
        opt(&mut self.should_exist, &c.should_exist);
        opt(&mut self.system, &c.system);
    }
}

impl Merge for Storage {
    fn merge_from(&mut self, c: &Self) {
        keyed(&mut self.disks, &c.disks);
        keyed(&mut self.filesystems, &c.filesystems);
        keyed(&mut self.luks, &c.luks);
        keyed(&mut self.raid, &c.raid);
        // Files, directories and links: a child entry removes parent entries of the other
        // two kinds at the same path, then merges with its own kind.
        let mut child_paths: std::collections::HashMap<&str, u8> = std::collections::HashMap::new();
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
            self.files.retain(|f| !other(&f.path, 0));
            self.directories.retain(|d| !other(&d.path, 1));
            self.links.retain(|l| !other(&l.path, 2));
        }
        keyed_by_path(&mut self.files, &c.files, |f| &f.path);
        keyed_by_path(&mut self.directories, &c.directories, |d| &d.path);
        keyed_by_path(&mut self.links, &c.links, |l| &l.path);
    }
}

/// Keyed merge by path with an index, so that 10,000-entry lists merge in linear time.
fn keyed_by_path<T: Merge + Clone>(p: &mut Vec<T>, c: &[T], path: impl Fn(&T) -> &String) {
    if c.is_empty() {
        return;
    }
    let mut index: std::collections::HashMap<String, usize> = p
        .iter()
        .enumerate()
        .map(|(i, x)| (path(x).clone(), i))
        .collect();
    for item in c {
        match index.get(path(item)) {
            Some(&i) => p[i].merge_from(item),
            None => {
                index.insert(path(item).clone(), p.len());
                p.push(item.clone());
            }
        }
    }
}

impl Keyed for Disk {
    fn key(&self) -> Option<String> {
        Some(self.device.clone())
    }
}

impl Merge for Disk {
    fn merge_from(&mut self, c: &Self) {
        keyed(&mut self.partitions, &c.partitions);
        opt(&mut self.wipe_table, &c.wipe_table);
    }
}

impl Keyed for Partition {
    fn key(&self) -> Option<String> {
        match (self.num(), &self.label) {
            (0, Some(l)) => Some(format!("label:{l}")),
            (0, None) => None,
            (n, _) => Some(format!("number:{n}")),
        }
    }
}

impl Merge for Partition {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.guid, &c.guid);
        opt(&mut self.label, &c.label);
        opt(&mut self.number, &c.number);
        opt(&mut self.resize, &c.resize);
        opt(&mut self.should_exist, &c.should_exist);
        opt(&mut self.size_mib, &c.size_mib);
        opt(&mut self.start_mib, &c.start_mib);
        opt(&mut self.type_guid, &c.type_guid);
        opt(&mut self.wipe_partition_entry, &c.wipe_partition_entry);
    }
}

impl Keyed for Raid {
    fn key(&self) -> Option<String> {
        Some(self.name.clone())
    }
}

impl Merge for Raid {
    fn merge_from(&mut self, c: &Self) {
        set_union(&mut self.devices, &c.devices);
        opt(&mut self.level, &c.level);
        append(&mut self.options, &c.options);
        opt(&mut self.spares, &c.spares);
    }
}

impl Keyed for Filesystem {
    fn key(&self) -> Option<String> {
        Some(self.device.clone())
    }
}

impl Merge for Filesystem {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.format, &c.format);
        opt(&mut self.label, &c.label);
        append(&mut self.mount_options, &c.mount_options);
        append(&mut self.options, &c.options);
        opt(&mut self.path, &c.path);
        opt(&mut self.uuid, &c.uuid);
        opt(&mut self.wipe_filesystem, &c.wipe_filesystem);
    }
}

impl Merge for NodeUser {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.id, &c.id);
        opt(&mut self.name, &c.name);
    }
}

impl Merge for File {
    fn merge_from(&mut self, c: &Self) {
        keyed(&mut self.append, &c.append);
        self.contents.merge_from(&c.contents);
        self.group.merge_from(&c.group);
        opt(&mut self.mode, &c.mode);
        opt(&mut self.overwrite, &c.overwrite);
        self.user.merge_from(&c.user);
    }
}

impl Merge for Directory {
    fn merge_from(&mut self, c: &Self) {
        self.group.merge_from(&c.group);
        opt(&mut self.mode, &c.mode);
        opt(&mut self.overwrite, &c.overwrite);
        self.user.merge_from(&c.user);
    }
}

impl Merge for Link {
    fn merge_from(&mut self, c: &Self) {
        self.group.merge_from(&c.group);
        opt(&mut self.hard, &c.hard);
        opt(&mut self.overwrite, &c.overwrite);
        opt(&mut self.target, &c.target);
        self.user.merge_from(&c.user);
    }
}

impl Keyed for Luks {
    fn key(&self) -> Option<String> {
        Some(self.name.clone())
    }
}

impl Merge for Luks {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.cex.enabled, &c.cex.enabled);
        opt(&mut self.clevis.custom.config, &c.clevis.custom.config);
        opt(
            &mut self.clevis.custom.needs_network,
            &c.clevis.custom.needs_network,
        );
        opt(&mut self.clevis.custom.pin, &c.clevis.custom.pin);
        keyed(&mut self.clevis.tang, &c.clevis.tang);
        opt(&mut self.clevis.threshold, &c.clevis.threshold);
        opt(&mut self.clevis.tpm2, &c.clevis.tpm2);
        opt(&mut self.device, &c.device);
        opt(&mut self.discard, &c.discard);
        self.key_file.merge_from(&c.key_file);
        opt(&mut self.label, &c.label);
        append(&mut self.open_options, &c.open_options);
        append(&mut self.options, &c.options);
        opt(&mut self.uuid, &c.uuid);
        opt(&mut self.wipe_volume, &c.wipe_volume);
    }
}

impl Keyed for Tang {
    fn key(&self) -> Option<String> {
        Some(self.url.clone())
    }
}

impl Merge for Tang {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.advertisement, &c.advertisement);
        opt(&mut self.thumbprint, &c.thumbprint);
    }
}

impl Merge for Systemd {
    fn merge_from(&mut self, c: &Self) {
        keyed(&mut self.units, &c.units);
    }
}

impl Keyed for Unit {
    fn key(&self) -> Option<String> {
        Some(self.name.clone())
    }
}

impl Merge for Unit {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.contents, &c.contents);
        keyed(&mut self.dropins, &c.dropins);
        opt(&mut self.enabled, &c.enabled);
        opt(&mut self.mask, &c.mask);
    }
}

impl Keyed for Dropin {
    fn key(&self) -> Option<String> {
        Some(self.name.clone())
    }
}

impl Merge for Dropin {
    fn merge_from(&mut self, c: &Self) {
        opt(&mut self.contents, &c.contents);
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
