//! The internal config model: the newest spec (3.6.0). Every older version is decoded into
//! it. Scalars are `Option`s so that merging can tell "unset" from "set to the default", and
//! so that a config can be written back out exactly as given (for the server and for older
//! spec versions).
//!
//! Each struct and field is declared once, below (the syntax is in `spec`): its JSON key,
//! its merge rule, the spec version that introduced it, whether it is required. Decoding,
//! merging, `is_empty`, serialization and the version table come from these declarations.

use super::spec::spec;

spec! {
    pub struct Config {
        ignition: Ignition = "ignition" [nested],
        kernel_arguments: KernelArguments = "kernelArguments" [nested, since 3],
        passwd: Passwd = "passwd" [nested],
        storage: Storage = "storage" [nested],
        systemd: Systemd = "systemd" [nested],
    }

    pub struct Ignition [label "ignition."] {
        config: IgnitionConfig = "config" [nested],
        proxy: Proxy = "proxy" [nested, since 1],
        security: Security = "security" [nested],
        timeouts: Timeouts = "timeouts" [nested],
        /// Always written out as the version being emitted; ignored when merging.
        version: String = "version" [ignore],
    }

    pub struct IgnitionConfig {
        merge: Vec<Resource> = "merge" [keyed],
        replace: Resource = "replace" [nested],
    }

    pub struct Proxy {
        http_proxy: Option<String> = "httpProxy" [opt],
        https_proxy: Option<String> = "httpsProxy" [opt],
        no_proxy: Vec<String> = "noProxy" [set],
    }

    pub struct Security {
        tls: Tls = "tls" [nested],
    }

    pub struct Tls {
        certificate_authorities: Vec<Resource> = "certificateAuthorities" [keyed],
    }

    pub struct Timeouts {
        /// Seconds to wait for response headers per try (default 10).
        http_response_headers: Option<i64> = "httpResponseHeaders" [opt],
        /// Seconds for a whole fetch including retries (0 or unset = no limit).
        http_total: Option<i64> = "httpTotal" [opt],
    }

    /// Something to fetch: config references, CAs, file contents, appends, LUKS key files.
    pub struct Resource [keep_bad_items] {
        compression: Option<String> = "compression" [opt],
        http_headers: Vec<HttpHeader> = "httpHeaders" [headers, since 1],
        source: Option<String> = "source" [key],
        verification: Verification = "verification" [nested],
    }

    pub struct HttpHeader {
        name: String = "name" [key, required],
        /// A child header without a value removes the parent's header of that name.
        value: Option<String> = "value" [opt],
    }

    pub struct Verification {
        hash: Option<String> = "hash" [opt],
    }

    pub struct KernelArguments [premerge kargs_one_key_space] {
        should_exist: Vec<String> = "shouldExist" [set],
        should_not_exist: Vec<String> = "shouldNotExist" [set],
    }

    pub struct Passwd {
        groups: Vec<Group> = "groups" [keyed],
        users: Vec<User> = "users" [keyed],
    }

    pub struct User [label "users "] {
        gecos: Option<String> = "gecos" [opt],
        groups: Vec<String> = "groups" [set],
        home_dir: Option<String> = "homeDir" [opt],
        name: String = "name" [key, required],
        no_create_home: Option<bool> = "noCreateHome" [opt],
        no_log_init: Option<bool> = "noLogInit" [opt],
        no_user_group: Option<bool> = "noUserGroup" [opt],
        password_hash: Option<String> = "passwordHash" [opt],
        primary_group: Option<String> = "primaryGroup" [opt],
        shell: Option<String> = "shell" [opt],
        should_exist: Option<bool> = "shouldExist" [opt, since 2],
        ssh_authorized_keys: Vec<String> = "sshAuthorizedKeys" [set],
        system: Option<bool> = "system" [opt],
        uid: Option<i64> = "uid" [opt],
    }

    pub struct Group [label "groups "] {
        gid: Option<i64> = "gid" [opt],
        name: String = "name" [key, required],
        password_hash: Option<String> = "passwordHash" [opt],
        should_exist: Option<bool> = "shouldExist" [opt, since 2],
        system: Option<bool> = "system" [opt],
    }

    pub struct Storage [label "storage.", premerge paths_across_kinds] {
        directories: Vec<Directory> = "directories" [by_path],
        disks: Vec<Disk> = "disks" [keyed],
        files: Vec<File> = "files" [by_path],
        filesystems: Vec<Filesystem> = "filesystems" [keyed],
        links: Vec<Link> = "links" [by_path],
        luks: Vec<Luks> = "luks" [keyed, since 2],
        raid: Vec<Raid> = "raid" [keyed],
    }

    pub struct Disk {
        device: String = "device" [key, required],
        partitions: Vec<Partition> = "partitions" [keyed],
        wipe_table: Option<bool> = "wipeTable" [opt],
    }

    /// Keyed by number, or by label when the number is 0 (`merge`).
    pub struct Partition [label "partition "] {
        guid: Option<String> = "guid" [opt],
        label: Option<String> = "label" [opt],
        number: Option<i64> = "number" [opt],
        resize: Option<bool> = "resize" [opt, since 2],
        should_exist: Option<bool> = "shouldExist" [opt],
        size_mib: Option<i64> = "sizeMiB" [opt],
        start_mib: Option<i64> = "startMiB" [opt],
        type_guid: Option<String> = "typeGuid" [opt],
        wipe_partition_entry: Option<bool> = "wipePartitionEntry" [opt],
    }

    pub struct Raid {
        devices: Vec<String> = "devices" [set],
        level: Option<String> = "level" [opt],
        name: String = "name" [key, required],
        options: Vec<String> = "options" [append],
        spares: Option<i64> = "spares" [opt],
    }

    pub struct Filesystem [label "filesystem "] {
        device: String = "device" [key, required],
        format: Option<String> = "format" [opt],
        label: Option<String> = "label" [opt],
        mount_options: Vec<String> = "mountOptions" [append, since 1],
        options: Vec<String> = "options" [append],
        path: Option<String> = "path" [opt],
        uuid: Option<String> = "uuid" [opt],
        wipe_filesystem: Option<bool> = "wipeFilesystem" [opt],
    }

    pub struct NodeUser {
        id: Option<i64> = "id" [opt],
        name: Option<String> = "name" [opt],
    }

    pub struct File {
        append: Vec<Resource> = "append" [keyed],
        contents: Resource = "contents" [nested],
        group: NodeUser = "group" [nested],
        mode: Option<i64> = "mode" [opt],
        overwrite: Option<bool> = "overwrite" [opt],
        path: String = "path" [key, required],
        user: NodeUser = "user" [nested],
    }

    pub struct Directory {
        group: NodeUser = "group" [nested],
        mode: Option<i64> = "mode" [opt],
        overwrite: Option<bool> = "overwrite" [opt],
        path: String = "path" [key, required],
        user: NodeUser = "user" [nested],
    }

    pub struct Link {
        group: NodeUser = "group" [nested],
        hard: Option<bool> = "hard" [opt],
        overwrite: Option<bool> = "overwrite" [opt],
        path: String = "path" [key, required],
        target: Option<String> = "target" [opt],
        user: NodeUser = "user" [nested],
    }

    pub struct Luks [label "luks "] {
        cex: Cex = "cex" [nested, since 5],
        clevis: Clevis = "clevis" [nested],
        device: Option<String> = "device" [opt],
        discard: Option<bool> = "discard" [opt, since 4],
        key_file: Resource = "keyFile" [nested],
        label: Option<String> = "label" [opt],
        name: String = "name" [key, required],
        open_options: Vec<String> = "openOptions" [append, since 4],
        options: Vec<String> = "options" [append],
        uuid: Option<String> = "uuid" [opt],
        wipe_volume: Option<bool> = "wipeVolume" [opt],
    }

    pub struct Cex {
        enabled: Option<bool> = "enabled" [opt],
    }

    pub struct Clevis {
        custom: ClevisCustom = "custom" [nested],
        tang: Vec<Tang> = "tang" [keyed],
        threshold: Option<i64> = "threshold" [opt],
        tpm2: Option<bool> = "tpm2" [opt],
    }

    pub struct ClevisCustom {
        config: Option<String> = "config" [opt],
        needs_network: Option<bool> = "needsNetwork" [opt],
        pin: Option<String> = "pin" [opt],
    }

    pub struct Tang [label "tang "] {
        advertisement: Option<String> = "advertisement" [opt, since 4],
        thumbprint: Option<String> = "thumbprint" [opt],
        url: String = "url" [key, required],
    }

    pub struct Systemd {
        units: Vec<Unit> = "units" [keyed],
    }

    pub struct Unit {
        contents: Option<String> = "contents" [opt],
        dropins: Vec<Dropin> = "dropins" [keyed],
        enabled: Option<bool> = "enabled" [opt],
        mask: Option<bool> = "mask" [opt],
        name: String = "name" [key, required],
    }

    pub struct Dropin {
        contents: Option<String> = "contents" [opt],
        name: String = "name" [key, required],
    }
}

impl Resource {
    /// The source URL when there is one: `"source": ""` means empty contents (as for
    /// Ignition), the same as no source for what is fetched.
    pub fn url(&self) -> Option<&str> {
        self.source.as_deref().filter(|s| !s.is_empty())
    }
}

impl Partition {
    /// Partition number, 0 meaning "next free".
    pub fn num(&self) -> i64 {
        self.number.unwrap_or(0)
    }
    pub fn should_exist(&self) -> bool {
        self.should_exist.unwrap_or(true)
    }
}

impl Clevis {
    /// Whether the volume is bound to clevis at all.
    pub fn is_bound(&self) -> bool {
        self.custom.pin.is_some() || !self.tang.is_empty() || self.tpm2 == Some(true)
    }
}
