//! The kernel arguments of an unattended install, coreos-installer's (`coreos.inst.*`), read by
//! `agent install --from-kargs` from `/proc/cmdline`.

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
        }
    }

    /// Whether the command line asks for an install at all.
    pub fn any(&self) -> bool {
        self.install_dev.is_some() || self.image_url.is_some()
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
            }
        );
        let k = Kargs::parse(
            "coreos.inst.install_dev=/dev/disk/by-id/wwn-0x5 coreos.inst.skip_reboot=0",
        );
        assert_eq!(k.install_dev.as_deref(), Some("/dev/disk/by-id/wwn-0x5"));
        assert!(!k.skip_reboot && !k.insecure && k.any());
        assert!(!Kargs::parse("quiet").any());
    }
}
