//! Platform providers: where a platform keeps the user config when neither the command line
//! nor the kernel command line names one, and what it needs for fetching.
//!
//! [`PLATFORMS`] is the one list of platforms: `--platform` (its help and value check), the
//! "unsupported platform" error, the table in `docs/platforms.md` (checked by a test) and the
//! tests read it. Each implemented platform is one module with a type implementing
//! [`Provider`]; platform ids Ignition knows but the agent does not implement yet are listed
//! too, so that a machine booted with e.g. `ignition.platform.id=aws` still runs with a config
//! named on the kernel command line. Adding a platform: see "Add a platform" in
//! `docs/platforms.md`.
//!
//! Shared mechanisms of platforms are modules of their own: [`metadata`] (HTTP metadata
//! services, with a token handshake), [`endpoints`] (where every service and file is),
//! [`drive`] (config drives and seed disks); for the hypervisor channels, [`userdata`]
//! (guestinfo encodings, NUL padding) and [`ovf`] (OVF environment properties).

use anyhow::{Context, Result, bail};

// The endpoints and the metadata client sit below `fetch` (which uses them too); providers
// and the command line reach them through here as well.
pub use crate::endpoints::{self, Endpoints};
pub use crate::metadata;

use crate::fetch::Fetcher;
pub use crate::state::ProviderFile;

#[cfg(test)]
mod cabi;
pub mod ovf;
pub mod userdata;

pub mod drive;

/// A config found by a provider: its bytes and a description of where it came from.
pub struct Found {
    pub bytes: Vec<u8>,
    pub source: String,
}

/// What a platform does. Only `fetch_config` is required; the rest have defaults.
pub trait Provider {
    /// The user config, or None when the platform has none.
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>>;

    /// Whether `fetch_config` needs the network: offline (`--offline`) the fetch stage then
    /// asks for the network (exit 3) instead of calling it. Default: no.
    fn needs_network(&self) -> bool {
        false
    }

    /// For a provider that needs the network only when an offline source (a config drive)
    /// has nothing: offline, the fetch stage calls `fetch_config` anyway, and the provider
    /// refuses itself when it must go online ([`crate::fetch::Options::needs_network`]).
    /// Default: no.
    fn tries_offline(&self) -> bool {
        false
    }

    /// Prepares what every fetch of the run uses, before any stage fetches anything (e.g.
    /// the S3 region on AWS). Called once per stage; must give the same result each time.
    /// Offline (`offline`), a provider that would need the network for this prepares
    /// nothing: the online pass prepares again.
    /// Default: nothing.
    fn prepare_fetcher(&self, _endpoints: &mut Endpoints, _offline: bool) -> Result<()> {
        Ok(())
    }

    /// Like `fetch_config`, with the files the platform leaves in the target root, which the
    /// files stage writes (Ignition's provider output files: Hyper-V's KVP pool files).
    /// Default: `fetch_config` and no files.
    fn fetch_config_with_files(&self, f: &Fetcher) -> Result<(Option<Found>, Vec<ProviderFile>)> {
        Ok((self.fetch_config(f)?, Vec::new()))
    }

    /// Tells the platform how stage `stage` ended (`error`: its error), after the stage, as
    /// Ignition's provider `Status` hook (Packet's instance timeline). A failure here is logged
    /// by the caller, never fatal. Default: nothing.
    fn report_status(
        &self,
        _f: &Fetcher,
        _stage: &str,
        _error: Option<&anyhow::Error>,
    ) -> Result<()> {
        Ok(())
    }

    /// Removes the config from the platform after provisioning, where the platform would
    /// keep handing it to any process of the machine (Ignition's `ignition-rmcfg`, run once
    /// in the real root: VMware guestinfo, VirtualBox guest properties; GHSA-hj57-j5cw-2mwp).
    /// Default: nothing to remove.
    fn delete_config(&self) -> Result<()> {
        Ok(())
    }
}

/// How far a platform is implemented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Its provider finds the config.
    Implemented,
    /// A provider of test builds only (never in the shipped binary or the docs).
    TestOnly,
}

/// One row of [`PLATFORMS`].
pub struct Platform {
    /// `--platform NAME` (Ignition's `ignition.platform.id`).
    pub name: &'static str,
    pub support: Support,
    /// Where its config comes from, in one line (help, docs).
    pub description: &'static str,
    /// How it is tested here, in one line (docs): "VM scenario NAME", "host test NAME
    /// against a local server", "unit tests only (why)".
    pub tested: &'static str,
    pub new: fn() -> Box<dyn Provider>,
}

impl Platform {
    /// The provider.
    pub fn provider(&self) -> Box<dyn Provider> {
        (self.new)()
    }

    /// Whether its provider needs the network for the config ([`Provider::needs_network`]).
    pub fn needs_network(&self) -> bool {
        self.provider().needs_network()
    }
}

const fn row(
    name: &'static str,
    support: Support,
    description: &'static str,
    tested: &'static str,
    new: fn() -> Box<dyn Provider>,
) -> Platform {
    Platform {
        name,
        support,
        description,
        tested,
        new,
    }
}

use Support::*;

/// A provider whose config is the user data of one metadata service (`$svc`, a
/// [`metadata::Service`]): it needs the network. Used by the platforms' modules:
/// `super::metadata_provider!(Gcp, SERVICE);`.
macro_rules! metadata_provider {
    ($ty:ident, $svc:expr) => {
        pub struct $ty;

        impl $crate::platform::Provider for $ty {
            fn fetch_config(
                &self,
                f: &$crate::fetch::Fetcher,
            ) -> anyhow::Result<Option<$crate::platform::Found>> {
                $crate::platform::from_metadata(f, &$svc)
            }

            fn needs_network(&self) -> bool {
                true
            }
        }
    };
}
use metadata_provider;

/// A provider whose config is one file on its drive ([`drive::fetch_file`]): the type, the
/// [`drive::Drive`], the file on it, and what a drive without the file means
/// ([`drive::Absent`]).
macro_rules! drive_provider {
    ($ty:ident, $drive:expr, $file:expr, $absent:expr) => {
        pub struct $ty;

        impl $crate::platform::Provider for $ty {
            fn fetch_config(
                &self,
                f: &$crate::fetch::Fetcher,
            ) -> anyhow::Result<Option<$crate::platform::Found>> {
                $crate::platform::drive::fetch_file(
                    &$drive,
                    &$crate::platform::drive::Roots::default(),
                    $file,
                    f.opts.limits.max_config_size,
                    $absent,
                )
            }
        }
    };
}
use drive_provider;

/// Declares, from one line per platform, the provider module (for a platform that has one)
/// and the platform's row of [`PLATFORMS`]:
/// `"name" => module::Type, "description", tested "how it is tested";`. Adding a platform is
/// one new file and one line here.
macro_rules! platforms {
    (
        $( $name:literal => $module:ident :: $ty:ident, $desc:literal, tested $tested:literal; )*
        test { $( $tname:literal => $tmodule:ident :: $tty:ident, $tdesc:literal; )* }
    ) => {
        $( pub mod $module; )*
        $( #[cfg(any(test, feature = "test-hooks"))] pub mod $tmodule; )*
        /// Every platform, in name order (test-only rows last).
        pub const PLATFORMS: &[Platform] = &[
            $( row($name, Implemented, $desc, $tested, || Box::new($module::$ty)), )*
            $(
                #[cfg(any(test, feature = "test-hooks"))]
                row($tname, TestOnly, $tdesc, "", || Box::new($tmodule::$tty)),
            )*
        ];
    };
}

#[rustfmt::skip]
platforms! {
    "akamai" => akamai::Akamai, "Akamai (Linode): user data (base64, maybe gzip) from the metadata service at 169.254.169.254 after a token PUT", tested "host tests in a network namespace (tests/platform/http.rs)";
    "aliyun" => aliyun::Aliyun, "Alibaba Cloud: user data from the metadata service at 100.100.100.200", tested "host tests in a network namespace (tests/platform/http.rs)";
    "applehv" => applehv::Applehv, "Apple Hypervisor: HTTP GET over vsock to the host (CID 2, port 1024)", tested "unit tests only (no vsock host here; AF_VSOCK loopback is not available on this kernel): the HTTP exchange over a socket pair";
    "aws" => aws::Aws, "Amazon EC2: user data from the instance metadata service at 169.254.169.254 (IMDSv2 token, IMDSv1 fallback)", tested "host tests in a network namespace (tests/platform/http.rs); VM scenario 10-aws-imdsv2";
    "azure" => azure::Azure, "Microsoft Azure: IMDS userData (retried while it answers 404, 410, 429 or 5xx), else the custom data of the OVF provisioning CD (udf), waited for without end", tested "VM scenario 14-azure-ovf (CD fallback); host tests (tests/platform/drives.rs: IMDS on 127.0.0.1, CD on a loop device; tests/platform/waits.rs: the wait); unit tests (ovf-env.xml)";
    "azurestack" => azurestack::AzureStack, "Azure Stack Hub: custom data of the OVF provisioning CD (udf or iso9660)", tested "unit tests; the CD reader of azure (VM scenario 14-azure-ovf)";
    "brightbox" => brightbox::Brightbox, "Brightbox: as openstack (config drive or metadata service)", tested "the openstack provider (VM scenario 12-openstack-configdrive)";
    "cloudstack" => cloudstack::CloudStack, "Apache CloudStack: config drive config-2 (cloudstack/userdata/user_data.txt), else the metadata service on the DHCP server", tested "host tests (tests/platform/drives.rs: drive on a loop device, local metadata service); unit tests";
    "digitalocean" => digitalocean::DigitalOcean, "DigitalOcean: droplet user data from the metadata service at 169.254.169.254", tested "host tests in a network namespace (tests/platform/http.rs)";
    "exoscale" => exoscale::Exoscale, "Exoscale: user data from the metadata service at 169.254.169.254", tested "host tests in a network namespace (tests/platform/http.rs)";
    "file" => file::File, "a local file: $AGENT_CONFIG_FILE, default /config.ign (tests and development)", tested "host tests (tests/fetch/stage.rs)";
    "gcp" => gcp::Gcp, "Google Cloud: instance attribute user-data from the metadata service at 169.254.169.254 (Metadata-Flavor: Google)", tested "host tests in a network namespace (tests/platform/http.rs); VM scenario 11-gcp-metadata";
    "hetzner" => hetzner::Hetzner, "Hetzner Cloud: user data from the metadata service at 169.254.169.254", tested "host tests in a network namespace (tests/platform/http.rs)";
    "hyperv" => hyperv::Hyperv, "Microsoft Hyper-V: KVP item ignition.config (or ignition.config.0, .1, … joined) of pool 0, read as the KVP daemon from /dev/vmbus/hv_kvp", tested "unit tests only (no Hyper-V here): message layout against the kernel header, the KVP exchange over a socket pair, key lookup and joining";
    "ibmcloud" => ibmcloud::IbmCloud, "IBM Cloud VPC: NoCloud seed cidata, file user-data", tested "host tests (tests/platform/drives.rs: seed on a loop device)";
    "ionoscloud" => ionoscloud::IonosCloud, "IONOS Cloud: config/user-data on the disk labelled OEM (ignition.config.device=, ignition.config.path=)", tested "host tests (tests/platform/drives.rs: disk on a loop device)";
    "kubevirt" => kubevirt::KubeVirt, "KubeVirt: NoCloud seed cidata (file user-data) or config drive config-2 (file openstack/latest/user_data), side by side, waited for without end", tested "host tests (tests/platform/drives.rs: seed and drive on loop devices; tests/platform/waits.rs: the wait)";
    "metal" => metal::Metal, "bare metal: only the kernel command line (agent.config.url=, ignition.config.url=)", tested "VM scenario 02-metal-url; host tests (tests/fetch/stage.rs)";
    "nutanix" => nutanix::Nutanix, "Nutanix AHV: config drive config-2, file openstack/latest/user_data, waited for without end", tested "the config-drive reader (VM scenario 12-openstack-configdrive; host tests); tests/platform/waits.rs: the wait";
    "nvidiabluefield" => nvidiabluefield::NvidiaBluefield, "NVIDIA BlueField DPU: the boot FIFO of the mlxbf_bootctl driver (/sys/bus/platform/devices/MLNXBF04:00/bootfifo)", tested "unit tests only (no BlueField here): reading and trimming bootfifo files";
    "openstack" => openstack::OpenStack, "OpenStack: config drive config-2 (openstack/latest/user_data) or the metadata service at 169.254.169.254 and [fe80::a9fe:a9fe] on each interface with IPv6, side by side", tested "VM scenario 12-openstack-configdrive; host tests (tests/platform/drives.rs; tests/platform/http.rs: IPv6 link-local in network namespaces)";
    "oraclecloud" => oraclecloud::OracleCloud, "Oracle Cloud Infrastructure: user data (base64) from the metadata service v2 at 169.254.169.254 (Authorization: Bearer Oracle)", tested "host tests in a network namespace (tests/platform/http.rs)";
    "packet" => packet::Packet, "Equinix Metal: user data from https://metadata.packet.net/userdata; each stage's outcome posted to the instance timeline", tested "host tests against a local server on 127.0.0.1 (tests/platform/http.rs; the name and TLS are replaced by a test flag)";
    "powervs" => powervs::PowerVs, "IBM Power Virtual Server: config drive config-2, file openstack/latest/user_data, waited for without end", tested "the config-drive reader (VM scenario 12-openstack-configdrive; host tests); tests/platform/waits.rs: the wait";
    "proxmoxve" => proxmoxve::ProxmoxVe, "Proxmox VE: cloud-init drive cidata, user-data else vendor-data (empty files and #cloud-config documents skipped)", tested "VM scenario 13-proxmoxve-nocloud (vfat); host tests";
    "qemu" => qemu::Qemu, "QEMU: fw_cfg entry opt/com.coreos/config (-fw_cfg name=opt/com.coreos/config,file=F)", tested "VM scenarios 01-qemu-fwcfg and others; host tests with a fw_cfg directory (tests/fetch/stage.rs)";
    "scaleway" => scaleway::Scaleway, "Scaleway: user data from the metadata service at 169.254.42.42 (and, not in Ignition, [fd00:42::42] in parallel), from a privileged source port", tested "host tests in a network namespace (tests/platform/http.rs)";
    "upcloud" => upcloud::UpCloud, "UpCloud: user data from the metadata service at 169.254.169.254", tested "host tests in a network namespace (tests/platform/http.rs)";
    "virtualbox" => virtualbox::Virtualbox, "VirtualBox: guest property /Ignition/Config through /dev/vboxguest (HGCM calls to VBoxGuestPropSvc)", tested "unit tests only (no VirtualBox here): struct layouts and ioctl numbers against the kernel headers, HGCM calls against a simulated driver, deletion";
    "vmware" => vmware::Vmware, "VMware: guestinfo ignition.config.data and .encoding (none, base64, gzip, gzip+base64) through the backdoor RPCI channel, else the OVF environment's properties", tested "unit tests only (no VMware here): RPCI framing against a simulated backdoor host, encodings, OVF properties, deletion";
    "vultr" => vultr::Vultr, "Vultr: user data from the metadata service at 169.254.169.254", tested "host tests in a network namespace (tests/platform/http.rs)";
    "zvm" => zvm::Zvm, "IBM z/VM: the first spool file of type ign in the reader 000c (vmur list, vmur receive)", tested "unit tests only (no z/VM here): the vmur list parsing";
    // Test builds only (never in the shipped binary or the docs).
    test {
        "test-dummy" => test_dummy::TestDummy, "test builds only: a config naming the S3 region it was prepared with";
    }
}

/// The user config from a platform's metadata service ([`metadata::fetch_user_data`]: the
/// fetcher's HTTP client and retry policy); None when the service says there is none.
pub fn from_metadata(f: &Fetcher, svc: &metadata::Service) -> Result<Option<Found>> {
    let base = f.opts.endpoints.metadata_base(svc.platform, svc.base);
    let source = format!(
        "{} metadata service {}{}",
        svc.platform,
        base.trim_end_matches('/'),
        svc.user_data
    );
    Ok(metadata::fetch_user_data(f, svc)?.map(|bytes| Found { bytes, source }))
}

/// The names of the platforms with support `s`, comma-separated.
pub fn names(s: Support) -> String {
    let v: Vec<&str> = PLATFORMS
        .iter()
        .filter(|p| p.support == s)
        .map(|p| p.name)
        .collect();
    v.join(", ")
}

/// "supported: a, b, …" (errors and help).
pub fn summary() -> String {
    format!("supported: {}", names(Implemented))
}

/// The platform called `name`.
pub fn lookup(name: &str) -> Result<&'static Platform> {
    match PLATFORMS.iter().find(|p| p.name == name) {
        Some(p) => Ok(p),
        None => bail!("unsupported platform {name:?} ({})", summary()),
    }
}

/// The provider for `--platform NAME`.
pub fn provider(name: &str) -> Result<Box<dyn Provider>> {
    lookup(name).map(Platform::provider)
}

/// Runs the platform's [`Provider::prepare_fetcher`] on `endpoints` (the fetches made with
/// them afterwards use what it prepared). Nothing without a platform.
pub fn prepare(platform: Option<&str>, offline: bool, endpoints: &mut Endpoints) -> Result<()> {
    let Some(name) = platform else {
        return Ok(());
    };
    provider(name)?
        .prepare_fetcher(endpoints, offline)
        .with_context(|| format!("preparing the fetcher for platform {name}"))
}

/// The `--platform` help, from the table.
pub fn help() -> String {
    format!(
        "Platform the machine runs on (where its config is when neither a flag nor the kernel command line names one); {} (docs/platforms.md)",
        summary()
    )
}

/// The markdown table of `docs/platforms.md` (between its markers), from [`PLATFORMS`].
pub fn docs_table() -> String {
    let mut s = String::from(
        "| platform | where the config comes from | network | how it is tested here |\n|---|---|---|---|\n",
    );
    for p in PLATFORMS.iter().filter(|p| p.support != TestOnly) {
        let prov = p.provider();
        let network = match (prov.needs_network(), prov.tries_offline()) {
            (false, _) => "no",
            (true, false) => "yes",
            (true, true) => "without a drive",
        };
        s.push_str(&format!(
            "| `{}` | {} | {network} | {} |\n",
            p.name, p.description, p.tested
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_unique() {
        let names: Vec<&str> = PLATFORMS
            .iter()
            .filter(|p| p.support != TestOnly)
            .map(|p| p.name)
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
        for p in PLATFORMS {
            assert!(
                !p.description.contains('|') && !p.tested.contains('|'),
                "{}: breaks the docs table",
                p.name
            );
            assert!(
                p.support == TestOnly || (p.support == Implemented) != p.tested.is_empty(),
                "{}: an implemented platform says how it is tested",
                p.name
            );
            assert_eq!(lookup(p.name).unwrap().name, p.name);
        }
    }

    #[test]
    fn unknown_platforms_are_refused_naming_the_table() {
        let e = provider("aws-nope").err().unwrap();
        let msg = format!("{e:#}");
        assert_eq!(
            msg,
            format!("unsupported platform \"aws-nope\" ({})", summary())
        );
        assert!(
            msg.contains("supported: akamai, aliyun, applehv, aws,"),
            "{msg}"
        );
        assert!(!msg.contains("test-dummy"), "{msg}");
    }

    #[test]
    fn metadata_platforms_need_the_network() {
        for name in ["aws", "gcp"] {
            assert!(lookup(name).unwrap().needs_network(), "{name}");
        }
        for name in ["file", "metal", "qemu"] {
            assert!(!lookup(name).unwrap().needs_network(), "{name}");
        }
    }

    #[test]
    fn docs_table_matches_the_code() {
        for file in ["docs/platforms.md", "README.md"] {
            let doc = std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file),
            )
            .unwrap();
            let begin = "<!-- platforms table: generated from src/platform/mod.rs PLATFORMS -->\n";
            let end = "<!-- end of platforms table -->";
            let start = doc.find(begin).expect("begin marker") + begin.len();
            let stop = doc[start..].find(end).expect("end marker") + start;
            assert!(
                doc[start..stop] == docs_table(),
                "{file} is out of date; put this between its markers:\n{}",
                docs_table()
            );
        }
    }
}
