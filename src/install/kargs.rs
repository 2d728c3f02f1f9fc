//! The kernel arguments of an unattended install, read by `agent install --from-kargs` from
//! `/proc/cmdline`: coreos-installer's (`coreos.inst.*`), and the agent's own
//! (`agent.install.*`) for what coreos-installer has no argument for: the image's hash and
//! key, the disk selector, `--overwrite` (what `agent serve` renders from a boot profile's
//! `install` section).

use runtime::cmdline;

/// What the kernel command line asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kargs {
    /// `coreos.inst.install_dev=`: `sda`, `/dev/sda` or `/dev/disk/by-id/...`.
    pub install_dev: Option<String>,
    /// `coreos.inst.image_url=`.
    pub image_url: Option<String>,
    /// `coreos.inst.ignition_url=`.
    pub ignition_url: Option<String>,
    /// `coreos.inst.insecure`: the image's signature is not checked.
    pub insecure: bool,
    /// `coreos.inst.skip_reboot`: no reboot after the install.
    pub skip_reboot: bool,
    /// `agent.install.image_hash=`: `--image-hash`.
    pub image_hash: Option<String>,
    /// `agent.install.image_key=`: the minisign public key itself (its base64 line).
    pub image_key: Option<String>,
    /// `agent.install.overwrite`: `--overwrite`.
    pub overwrite: bool,
    /// `agent.install.disk.<prop>=`: the `--disk-*` selector, as given (checked by the
    /// command line).
    pub disk: DiskKargs,
}

/// `agent.install.disk.size_min=`, `.size_max`, `.model`, `.serial`, `.wwn`, `.transport`,
/// `.rotational`, `.removable`: the `--disk-*` flag of the same name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskKargs {
    pub size_min: Option<String>,
    pub size_max: Option<String>,
    pub model: Option<String>,
    pub serial: Option<String>,
    pub wwn: Option<String>,
    pub transport: Option<String>,
    pub rotational: Option<String>,
    pub removable: Option<String>,
}

impl DiskKargs {
    pub fn is_empty(&self) -> bool {
        *self == DiskKargs::default()
    }
}

impl Kargs {
    pub fn parse(line: &str) -> Kargs {
        let val = |k: &str| {
            cmdline::value(line, k)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let flag = |k: &str| match cmdline::arg(line, k) {
            Some(None) => true,
            Some(Some(v)) => !matches!(v, "0" | "no" | "false"),
            None => false,
        };
        Kargs {
            install_dev: val("coreos.inst.install_dev").map(|d| {
                if d.starts_with('/') {
                    d
                } else {
                    format!("/dev/{d}")
                }
            }),
            image_url: val("coreos.inst.image_url"),
            ignition_url: val("coreos.inst.ignition_url"),
            insecure: flag("coreos.inst.insecure"),
            skip_reboot: flag("coreos.inst.skip_reboot"),
            image_hash: val("agent.install.image_hash"),
            image_key: val("agent.install.image_key"),
            overwrite: flag("agent.install.overwrite"),
            disk: DiskKargs {
                size_min: val("agent.install.disk.size_min"),
                size_max: val("agent.install.disk.size_max"),
                model: val("agent.install.disk.model"),
                serial: val("agent.install.disk.serial"),
                wwn: val("agent.install.disk.wwn"),
                transport: val("agent.install.disk.transport"),
                rotational: val("agent.install.disk.rotational"),
                removable: val("agent.install.disk.removable"),
            },
        }
    }

    /// Whether the command line asks for an install at all.
    pub fn any(&self) -> bool {
        self.install_dev.is_some() || self.image_url.is_some() || !self.disk.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coreos_installer_kargs() {
        let k = Kargs::parse(
            "BOOT_IMAGE=/vmlinuz coreos.inst.install_dev=sda coreos.inst.image_url=http://h/i.raw.xz \
             coreos.inst.ignition_url=http://h/c.ign coreos.inst.insecure coreos.inst.skip_reboot quiet",
        );
        assert_eq!(
            k,
            Kargs {
                install_dev: Some("/dev/sda".into()),
                image_url: Some("http://h/i.raw.xz".into()),
                ignition_url: Some("http://h/c.ign".into()),
                insecure: true,
                skip_reboot: true,
                ..Kargs::default()
            }
        );
        let k = Kargs::parse(
            "coreos.inst.install_dev=/dev/disk/by-id/wwn-0x5 coreos.inst.skip_reboot=0",
        );
        assert_eq!(k.install_dev.as_deref(), Some("/dev/disk/by-id/wwn-0x5"));
        assert!(!k.skip_reboot && !k.insecure && k.any());
        assert!(!Kargs::parse("quiet").any());
    }

    /// What `agent serve` renders from a boot profile's install section.
    #[test]
    fn agent_install_kargs() {
        let h = format!("sha256-{}", "ab".repeat(32));
        let k = Kargs::parse(&format!(
            "agent.install.disk.size_min=100G agent.install.disk.model=Samsung* \
             agent.install.disk.transport=nvme agent.install.disk.rotational=no \
             agent.install.disk.removable=yes agent.install.disk.size_max=2T \
             agent.install.disk.serial=S3* agent.install.disk.wwn=0x5* \
             coreos.inst.image_url=http://h/assets/os.raw.xz agent.install.image_hash={h} \
             agent.install.image_key=RWQf6LRCGA9i5 agent.install.overwrite \
             coreos.inst.ignition_url=http://h/machine-config?token=T"
        ));
        assert_eq!(
            k.disk,
            DiskKargs {
                size_min: Some("100G".into()),
                size_max: Some("2T".into()),
                model: Some("Samsung*".into()),
                serial: Some("S3*".into()),
                wwn: Some("0x5*".into()),
                transport: Some("nvme".into()),
                rotational: Some("no".into()),
                removable: Some("yes".into()),
            }
        );
        assert_eq!(k.image_hash, Some(h));
        assert_eq!(k.image_key.as_deref(), Some("RWQf6LRCGA9i5"));
        assert!(k.overwrite && k.any() && k.install_dev.is_none());
        assert_eq!(
            k.ignition_url.as_deref(),
            Some("http://h/machine-config?token=T")
        );
        // A selector alone asks for an install.
        assert!(Kargs::parse("agent.install.disk.transport=loop").any());
        assert!(!Kargs::parse("agent.install.overwrite=0").overwrite);
    }
}
