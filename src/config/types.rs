//! The internal config model: the newest spec (3.6.0). Every older version is decoded into
//! it. Scalars are `Option`s so that merging can tell "unset" from "set to the default", and
//! so that a config can be written back out exactly as given (for the server and for older
//! spec versions).

use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Config {
    pub ignition: Ignition,
    #[serde(
        rename = "kernelArguments",
        skip_serializing_if = "KernelArguments::is_empty"
    )]
    pub kernel_arguments: KernelArguments,
    #[serde(skip_serializing_if = "Passwd::is_empty")]
    pub passwd: Passwd,
    #[serde(skip_serializing_if = "Storage::is_empty")]
    pub storage: Storage,
    #[serde(skip_serializing_if = "Systemd::is_empty")]
    pub systemd: Systemd,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ignition {
    #[serde(skip_serializing_if = "IgnitionConfig::is_empty")]
    pub config: IgnitionConfig,
    #[serde(skip_serializing_if = "Proxy::is_empty")]
    pub proxy: Proxy,
    #[serde(skip_serializing_if = "Security::is_empty")]
    pub security: Security,
    #[serde(skip_serializing_if = "Timeouts::is_empty")]
    pub timeouts: Timeouts,
    /// Always written out as the version being emitted; ignored when merging.
    pub version: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IgnitionConfig {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub merge: Vec<Resource>,
    #[serde(skip_serializing_if = "Resource::is_empty")]
    pub replace: Resource,
}

impl IgnitionConfig {
    pub fn is_empty(&self) -> bool {
        self.merge.is_empty() && self.replace.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Proxy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_proxy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub no_proxy: Vec<String>,
}

impl Proxy {
    pub fn is_empty(&self) -> bool {
        self.http_proxy.is_none() && self.https_proxy.is_none() && self.no_proxy.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Security {
    #[serde(skip_serializing_if = "Tls::is_empty")]
    pub tls: Tls,
}

impl Security {
    pub fn is_empty(&self) -> bool {
        self.tls.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub certificate_authorities: Vec<Resource>,
}

impl Tls {
    pub fn is_empty(&self) -> bool {
        self.certificate_authorities.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    /// Seconds to wait for response headers per try (default 10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_response_headers: Option<i64>,
    /// Seconds for a whole fetch including retries (0 or unset = no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_total: Option<i64>,
}

impl Timeouts {
    pub fn is_empty(&self) -> bool {
        self.http_response_headers.is_none() && self.http_total.is_none()
    }
}

/// Something to fetch: config references, CAs, file contents, appends, LUKS key files.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub http_headers: Vec<HttpHeader>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(skip_serializing_if = "Verification::is_empty")]
    pub verification: Verification,
}

impl Resource {
    /// The source URL when there is one: `"source": ""` means empty contents (as for
    /// Ignition), the same as no source for what is fetched.
    pub fn url(&self) -> Option<&str> {
        self.source.as_deref().filter(|s| !s.is_empty())
    }

    pub fn is_empty(&self) -> bool {
        self.compression.is_none()
            && self.http_headers.is_empty()
            && self.source.is_none()
            && self.verification.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HttpHeader {
    pub name: String,
    /// A child header without a value removes the parent's header of that name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Verification {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

impl Verification {
    pub fn is_empty(&self) -> bool {
        self.hash.is_none()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KernelArguments {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub should_exist: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub should_not_exist: Vec<String>,
}

impl KernelArguments {
    pub fn is_empty(&self) -> bool {
        self.should_exist.is_empty() && self.should_not_exist.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Passwd {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Group>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<User>,
}

impl Passwd {
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.users.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gecos: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home_dir: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_create_home: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_log_init: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_user_group: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub should_exist: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gid: Option<i64>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub should_exist: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Storage {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<Directory>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<Disk>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub filesystems: Vec<Filesystem>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub luks: Vec<Luks>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub raid: Vec<Raid>,
}

impl Storage {
    pub fn is_empty(&self) -> bool {
        self.directories.is_empty()
            && self.disks.is_empty()
            && self.files.is_empty()
            && self.filesystems.is_empty()
            && self.links.is_empty()
            && self.luks.is_empty()
            && self.raid.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    pub device: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wipe_table: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Partition {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub should_exist: Option<bool>,
    #[serde(rename = "sizeMiB", skip_serializing_if = "Option::is_none")]
    pub size_mib: Option<i64>,
    #[serde(rename = "startMiB", skip_serializing_if = "Option::is_none")]
    pub start_mib: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub type_guid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wipe_partition_entry: Option<bool>,
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

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Raid {
    pub devices: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spares: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Filesystem {
    pub device: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mount_options: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wipe_filesystem: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeUser {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl NodeUser {
    pub fn is_empty(&self) -> bool {
        self.id.is_none() && self.name.is_none()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct File {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub append: Vec<Resource>,
    #[serde(skip_serializing_if = "Resource::is_empty")]
    pub contents: Resource,
    #[serde(skip_serializing_if = "NodeUser::is_empty")]
    pub group: NodeUser,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    pub path: String,
    #[serde(skip_serializing_if = "NodeUser::is_empty")]
    pub user: NodeUser,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Directory {
    #[serde(skip_serializing_if = "NodeUser::is_empty")]
    pub group: NodeUser,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    pub path: String,
    #[serde(skip_serializing_if = "NodeUser::is_empty")]
    pub user: NodeUser,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Link {
    #[serde(skip_serializing_if = "NodeUser::is_empty")]
    pub group: NodeUser,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hard: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "NodeUser::is_empty")]
    pub user: NodeUser,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Luks {
    #[serde(skip_serializing_if = "Cex::is_empty")]
    pub cex: Cex,
    #[serde(skip_serializing_if = "Clevis::is_empty")]
    pub clevis: Clevis,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discard: Option<bool>,
    #[serde(skip_serializing_if = "Resource::is_empty")]
    pub key_file: Resource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub open_options: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wipe_volume: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cex {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

impl Cex {
    pub fn is_empty(&self) -> bool {
        self.enabled.is_none()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Clevis {
    #[serde(skip_serializing_if = "ClevisCustom::is_empty")]
    pub custom: ClevisCustom,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tang: Vec<Tang>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpm2: Option<bool>,
}

impl Clevis {
    pub fn is_empty(&self) -> bool {
        self.custom.is_empty()
            && self.tang.is_empty()
            && self.threshold.is_none()
            && self.tpm2.is_none()
    }
    /// Whether the volume is bound to clevis at all.
    pub fn is_bound(&self) -> bool {
        self.custom.pin.is_some() || !self.tang.is_empty() || self.tpm2 == Some(true)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClevisCustom {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_network: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
}

impl ClevisCustom {
    pub fn is_empty(&self) -> bool {
        self.config.is_none() && self.needs_network.is_none() && self.pin.is_none()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Tang {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertisement: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thumbprint: Option<String>,
    pub url: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Systemd {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<Unit>,
}

impl Systemd {
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Unit {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropins: Vec<Dropin>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask: Option<bool>,
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Dropin {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
    pub name: String,
}
