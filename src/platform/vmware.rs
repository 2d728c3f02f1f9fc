//! `vmware`: the config is the guestinfo variable `ignition.config.data`, decoded as
//! `ignition.config.data.encoding` says (none, base64, gzip, gzip+base64:
//! [`super::userdata::decode`]), read through the VMware backdoor's RPCI channel
//! ([`backdoor`]: `info-get guestinfo.KEY`). Either variable may instead be a property of the
//! OVF environment (guestinfo `ovfEnv`, [`super::ovf`]) as `guestinfo.ignition.config.data`
//! and `guestinfo.ignition.config.data.encoding`; a guestinfo variable wins over the OVF
//! property of the same name. No data (neither set, or empty): no config.
//!
//! As in Ignition: the backdoor is used only when the CPU says it runs under VMware (CPUID
//! leaf 0x40000000 "VMwareVMware") and the backdoor answers its version; elsewhere fetching
//! fails, saying so. An OVF environment that cannot be read or parsed is logged and ignored.
//! Only on x86_64 (Ignition's provider is amd64-only as well).
//!
//! After provisioning, [`Vmware::delete_config`] removes the config from the VM (Ignition's
//! `ignition-rmcfg`, GHSA-hj57-j5cw-2mwp): guestinfo variables cannot be deleted or emptied
//! from the guest, so the data becomes base64 `e30K` (`{}`) and the encoding `base64`; the
//! two properties are cut out of the OVF environment.

pub mod backdoor;

use std::collections::HashMap;

use anyhow::{Context, Result, bail};

use super::{Found, Provider, ovf, userdata};
use crate::fetch::Fetcher;

/// guestinfo variable of the config.
pub const DATA: &str = "ignition.config.data";
/// guestinfo variable of its encoding.
pub const ENCODING: &str = "ignition.config.data.encoding";
/// guestinfo variable of the OVF environment.
pub const OVF_ENV: &str = "ovfenv";
/// What the config becomes when deleted: base64 of "{}\n".
pub const DELETED_DATA: &str = "e30K";
/// The encoding of [`DELETED_DATA`].
pub const DELETED_ENCODING: &str = "base64";

/// The name of a guestinfo variable as an OVF property.
fn ovf_key(var: &str) -> String {
    format!("guestinfo.{var}")
}

/// Read and write access to the guestinfo variables of the VM.
pub trait GuestInfo {
    /// The variable `guestinfo.KEY`, or None when it is not set.
    fn get(&mut self, key: &str) -> Result<Option<String>>;
    /// Sets `guestinfo.KEY`.
    fn set(&mut self, key: &str, value: &str) -> Result<()>;
}

/// The config data and its encoding, from guestinfo or the OVF environment (a guestinfo
/// variable wins over the OVF property).
pub fn raw_config(info: &mut dyn GuestInfo) -> Result<(String, String)> {
    let mut ovf_props: HashMap<String, String> = HashMap::new();
    match info.get(OVF_ENV) {
        Err(e) => log::warn!("vmware: reading guestinfo.{OVF_ENV}: {e:#}; continuing without it"),
        Ok(Some(env)) if !env.is_empty() => {
            log::debug!("vmware: using the OVF environment from guestinfo.{OVF_ENV}");
            match ovf::properties(&env) {
                Ok(p) => ovf_props = p,
                Err(e) => log::warn!(
                    "vmware: parsing the OVF environment (guestinfo.{OVF_ENV}): {e:#}; continuing without it"
                ),
            }
        }
        Ok(_) => {}
    }
    let mut var = |name: &str| -> Result<String> {
        let ovf = ovf_props.remove(&ovf_key(name)).unwrap_or_default();
        let v = info
            .get(name)
            .with_context(|| format!("reading guestinfo.{name}"))?;
        Ok(v.unwrap_or(ovf))
    };
    let data = var(DATA)?;
    let encoding = var(ENCODING)?;
    Ok((data, encoding))
}

/// The decoded config (empty: none).
pub fn config(info: &mut dyn GuestInfo, limit: u64) -> Result<Vec<u8>> {
    let (data, encoding) = raw_config(info)?;
    userdata::decode(
        data.as_bytes(),
        &encoding,
        limit,
        &format!("VMware guestinfo.{DATA} (encoding {encoding:?} from guestinfo.{ENCODING})"),
    )
}

/// Replaces the config in guestinfo with [`DELETED_DATA`] and removes it from the OVF
/// environment (Ignition's order and rules: each variable is rewritten only when it differs,
/// and errors reading the OVF environment are errors here).
pub fn delete(info: &mut dyn GuestInfo) -> Result<()> {
    let orig = info
        .get(DATA)
        .with_context(|| format!("reading guestinfo.{DATA}"))?;
    if orig.as_deref().unwrap_or(DELETED_DATA) != DELETED_DATA {
        log::info!("vmware: deleting the config from guestinfo.{DATA}");
        info.set(DATA, DELETED_DATA)
            .with_context(|| format!("replacing guestinfo.{DATA}"))?;
        let enc = info
            .get(ENCODING)
            .with_context(|| format!("reading guestinfo.{ENCODING}"))?;
        if enc.as_deref() != Some(DELETED_ENCODING) {
            info.set(ENCODING, DELETED_ENCODING)
                .with_context(|| format!("replacing guestinfo.{ENCODING}"))?;
        }
    }
    let env = info
        .get(OVF_ENV)
        .with_context(|| format!("reading the OVF environment (guestinfo.{OVF_ENV})"))?
        .unwrap_or_default();
    if !env.is_empty() {
        let keys = [ovf_key(DATA), ovf_key(ENCODING)];
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let (pruned, removed) = ovf::delete_properties(&env, &keys)
            .context("deleting the config properties from the OVF environment")?;
        if removed {
            log::info!("vmware: deleting the config from the OVF environment");
            info.set(OVF_ENV, &pruned)
                .with_context(|| format!("replacing guestinfo.{OVF_ENV}"))?;
        }
    }
    Ok(())
}

/// The guestinfo of this VM through the backdoor's RPCI channel.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Rpci<'a> {
    chan: backdoor::Channel<'a>,
    max_reply: u64,
}

impl GuestInfo for Rpci<'_> {
    fn get(&mut self, key: &str) -> Result<Option<String>> {
        let cmd = format!("info-get guestinfo.{key}");
        let (ok, text) = backdoor::rpci(&mut self.chan, cmd.as_bytes(), self.max_reply)?;
        if !ok {
            log::debug!(
                "vmware: guestinfo.{key}: {}",
                String::from_utf8_lossy(&text)
            );
            return Ok(None);
        }
        match String::from_utf8(text) {
            Ok(s) => Ok(Some(s)),
            Err(_) => bail!("guestinfo.{key} is not UTF-8 text"),
        }
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let cmd = format!("info-set guestinfo.{key} {value}");
        let (ok, text) = backdoor::rpci(&mut self.chan, cmd.as_bytes(), 4096)?;
        if !ok {
            bail!(
                "the host refused to set guestinfo.{key}: {}",
                String::from_utf8_lossy(&text)
            );
        }
        Ok(())
    }
}

/// The hypervisor vendor of CPUID leaf 0x40000000 when the CPU says it runs under a
/// hypervisor (leaf 1, ecx bit 31).
#[cfg(target_arch = "x86_64")]
pub fn hypervisor_vendor() -> Option<String> {
    use core::arch::x86_64::__cpuid;
    let leaf1 = __cpuid(1);
    if leaf1.ecx & (1 << 31) == 0 {
        return None;
    }
    let l = __cpuid(0x4000_0000);
    let mut v = Vec::with_capacity(12);
    for r in [l.ebx, l.ecx, l.edx] {
        v.extend_from_slice(&r.to_le_bytes());
    }
    Some(String::from_utf8_lossy(&v).trim_end_matches('\0').to_string())
}

/// The backdoor, when this is a VMware VM (CPUID signature, then the backdoor's version);
/// else an error saying what the machine is.
#[cfg(target_arch = "x86_64")]
pub fn detect() -> Result<backdoor::Port> {
    match hypervisor_vendor() {
        Some(v) if v == "VMwareVMware" => {}
        Some(v) => bail!(
            "not a VMware virtual machine (the CPU reports hypervisor {v:?}): guestinfo is only reachable on VMware; use this machine's platform id"
        ),
        None => bail!(
            "not a VMware virtual machine (the CPU reports no hypervisor): guestinfo is only reachable on VMware; use this machine's platform id"
        ),
    }
    // SAFETY: the CPUID signature says VMware, whose hypervisor intercepts the backdoor port
    // (Ignition's vmw-guestinfo makes the same check before its first backdoor call).
    let mut port = unsafe { backdoor::Port::new_on_vmware() };
    if backdoor::get_version(&mut port).is_none() {
        bail!(
            "the VMware backdoor does not answer (it may be disabled for this VM: isolation.tools.* / monitor_control.restrict_backdoor)"
        );
    }
    Ok(port)
}

pub struct Vmware;

impl Vmware {
    /// Runs `f` on this VM's guestinfo.
    #[cfg(target_arch = "x86_64")]
    fn with_guestinfo<T>(max_reply: u64, f: impl FnOnce(&mut dyn GuestInfo) -> Result<T>) -> Result<T> {
        let mut port = detect()?;
        let chan = backdoor::Channel::open(&mut port, backdoor::PROTO_RPCI)?;
        let mut info = Rpci { chan, max_reply };
        let out = f(&mut info)?;
        info.chan.close()?;
        Ok(out)
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn with_guestinfo<T>(_: u64, _: impl FnOnce(&mut dyn GuestInfo) -> Result<T>) -> Result<T> {
        bail!("the vmware platform is only supported on x86_64 (the VMware backdoor is an x86 I/O port)")
    }
}

impl Provider for Vmware {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let limit = f.opts.limits.max_config_size;
        // Base64 and the OVF environment's XML make the raw replies larger than the config.
        let max_reply = limit.saturating_mul(2).saturating_add(64 << 10);
        let bytes = Self::with_guestinfo(max_reply, |info| config(info, limit))?;
        if bytes.is_empty() {
            log::info!("vmware: guestinfo.{DATA} is not set: no config");
            return Ok(None);
        }
        Ok(Some(Found {
            bytes,
            source: format!("VMware guestinfo.{DATA}"),
        }))
    }

    /// See the module documentation.
    fn delete_config(&self) -> Result<()> {
        Self::with_guestinfo(runtime::limits::DEFAULT_MAX_CONFIG_SIZE * 2, delete)
    }
}

#[cfg(test)]
mod tests {
    use super::backdoor::sim::Host;
    use super::*;
    use spec::encoding::base64_encode;

    const CONFIG: &str = r#"{"ignition":{"version":"3.4.0"}}"#;
    const LIMIT: u64 = 1 << 20;

    /// guestinfo as a map (what the RPCI channel reads and writes; the channel itself is
    /// tested in `backdoor`).
    #[derive(Default)]
    struct Map {
        vars: HashMap<String, String>,
        sets: Vec<String>,
        fail_ovf: bool,
    }

    impl GuestInfo for Map {
        fn get(&mut self, key: &str) -> Result<Option<String>> {
            if key == OVF_ENV && self.fail_ovf {
                bail!("backdoor error");
            }
            Ok(self.vars.get(key).cloned())
        }
        fn set(&mut self, key: &str, value: &str) -> Result<()> {
            self.sets.push(key.into());
            self.vars.insert(key.into(), value.into());
            Ok(())
        }
    }

    fn map(vars: &[(&str, &str)]) -> Map {
        Map {
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Map::default()
        }
    }

    fn ovf_env(props: &[(&str, &str)]) -> String {
        let mut s = String::from(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1">
   <PropertySection>
"#,
        );
        for (k, v) in props {
            s.push_str(&format!("      <Property oe:key=\"{k}\" oe:value=\"{v}\"/>\n"));
        }
        s.push_str("      <Property oe:key=\"other\" oe:value=\"1\"/>\n   </PropertySection>\n</Environment>");
        s
    }

    #[test]
    fn plain_base64_and_gzip_base64_guestinfo() {
        let b64 = base64_encode(CONFIG.as_bytes());
        let gzb64 = base64_encode(&userdata::gzip(CONFIG.as_bytes()));
        for (data, enc) in [
            (CONFIG, None),
            (CONFIG, Some("")),
            (b64.as_str(), Some("base64")),
            (gzb64.as_str(), Some("gzip+base64")),
        ] {
            let mut vars = vec![(DATA, data)];
            if let Some(e) = enc {
                vars.push((ENCODING, e));
            }
            assert_eq!(config(&mut map(&vars), LIMIT).unwrap(), CONFIG.as_bytes(), "{enc:?}");
        }
    }

    #[test]
    fn nothing_set_is_no_config() {
        assert_eq!(config(&mut map(&[]), LIMIT).unwrap(), b"");
        assert_eq!(config(&mut map(&[(DATA, "")]), LIMIT).unwrap(), b"");
    }

    #[test]
    fn a_bad_encoding_names_the_variables() {
        let e = format!(
            "{:#}",
            config(&mut map(&[(DATA, CONFIG), (ENCODING, "rot13")]), LIMIT).unwrap_err()
        );
        assert!(
            e.contains("VMware guestinfo.ignition.config.data")
                && e.contains("unsupported encoding \"rot13\""),
            "{e}"
        );
    }

    #[test]
    fn ovf_properties_are_the_fallback_and_guestinfo_wins() {
        let b64 = base64_encode(CONFIG.as_bytes());
        let env = ovf_env(&[
            ("guestinfo.ignition.config.data", &b64),
            ("guestinfo.ignition.config.data.encoding", "base64"),
        ]);
        // Only the OVF environment.
        let mut m = map(&[(OVF_ENV, &env)]);
        assert_eq!(config(&mut m, LIMIT).unwrap(), CONFIG.as_bytes());
        // A guestinfo variable wins, each on its own: plain data from guestinfo, the
        // encoding still from OVF -> base64 of the plain text fails; both from guestinfo
        // works.
        let other = r#"{"ignition":{"version":"3.5.0"}}"#;
        let mut m = map(&[(OVF_ENV, &env), (DATA, other), (ENCODING, "")]);
        assert_eq!(config(&mut m, LIMIT).unwrap(), other.as_bytes());
        let mut m = map(&[(OVF_ENV, &env), (DATA, other)]);
        assert!(config(&mut m, LIMIT).is_err());
    }

    #[test]
    fn a_broken_or_unreadable_ovf_environment_is_ignored() {
        let mut m = map(&[(OVF_ENV, "<Environment><PropertySection>"), (DATA, CONFIG)]);
        assert_eq!(config(&mut m, LIMIT).unwrap(), CONFIG.as_bytes());
        let mut m = map(&[(DATA, CONFIG)]);
        m.fail_ovf = true;
        assert_eq!(config(&mut m, LIMIT).unwrap(), CONFIG.as_bytes());
    }

    #[test]
    fn delete_replaces_guestinfo_and_prunes_the_ovf_environment() {
        let env = ovf_env(&[
            ("guestinfo.ignition.config.data", "secret"),
            ("guestinfo.ignition.config.data.encoding", ""),
        ]);
        let mut m = map(&[(DATA, CONFIG), (OVF_ENV, &env)]);
        delete(&mut m).unwrap();
        assert_eq!(m.vars[DATA], DELETED_DATA);
        assert_eq!(m.vars[ENCODING], DELETED_ENCODING);
        assert!(!m.vars[OVF_ENV].contains("secret"));
        assert!(m.vars[OVF_ENV].contains("oe:key=\"other\""));
        // What is left decodes to "{}\n" (no config when parsed by a later run).
        assert_eq!(config(&mut m, LIMIT).unwrap(), b"{}\n");
        // Again: nothing left to change, nothing written.
        m.sets.clear();
        delete(&mut m).unwrap();
        assert!(m.sets.is_empty(), "{:?}", m.sets);
    }

    #[test]
    fn delete_with_nothing_set_writes_nothing_and_ovf_errors_fail() {
        let mut m = map(&[]);
        delete(&mut m).unwrap();
        assert!(m.sets.is_empty());
        let mut m = map(&[(OVF_ENV, "<Environment")]);
        assert!(delete(&mut m).is_err());
        let mut m = map(&[]);
        m.fail_ovf = true;
        assert!(delete(&mut m).is_err());
    }

    #[test]
    fn fetch_and_delete_through_the_rpci_channel() {
        // The whole path below the CPUID check: RPCI over the (simulated) backdoor.
        let b64 = base64_encode(CONFIG.as_bytes());
        for hb in [false, true] {
            let mut host = Host {
                hb,
                ..Host::default()
            };
            host.vars.insert(DATA.into(), b64.clone());
            host.vars.insert(ENCODING.into(), "base64".into());
            {
                let chan = backdoor::Channel::open(&mut host, backdoor::PROTO_RPCI).unwrap();
                let mut info = Rpci {
                    chan,
                    max_reply: LIMIT,
                };
                assert_eq!(config(&mut info, LIMIT).unwrap(), CONFIG.as_bytes());
                delete(&mut info).unwrap();
                info.chan.close().unwrap();
            }
            assert_eq!(host.vars[DATA], DELETED_DATA);
            assert_eq!(
                host.requests.first().map(String::as_str),
                Some("info-get guestinfo.ovfenv")
            );
            assert!(
                host.requests
                    .contains(&"info-set guestinfo.ignition.config.data e30K".to_string())
            );
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn this_machine_is_not_vmware_and_the_backdoor_is_never_touched() {
        // The test machine is not a VMware VM: detection must say so (and not fault).
        let vendor = hypervisor_vendor();
        if vendor.as_deref() == Some("VMwareVMware") {
            return;
        }
        let e = format!("{:#}", detect().err().unwrap());
        assert!(e.contains("not a VMware virtual machine"), "{e}");
        let f = Fetcher::new(crate::fetch::Options::default());
        let e = format!("{:#}", Vmware.fetch_config(&f).err().unwrap());
        assert!(e.contains("not a VMware virtual machine"), "{e}");
    }
}
