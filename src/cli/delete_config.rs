//! `agent delete-config`: after first-boot provisioning, remove the config from a platform
//! that would keep handing it to any process of the machine (VMware guestinfo, VirtualBox
//! guest properties), as Ignition's `ignition-rmcfg` does (GHSA-hj57-j5cw-2mwp). Run in the
//! real root by `systemd/agent-delete-config.service`; on other platforms it does nothing.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::run::PlatformName;

#[derive(Debug, Args)]
pub struct DeleteConfigArgs {
    /// Platform whose config to delete; default: the kernel command line's
    /// agent.platform.id=, else ignition.platform.id=, else flatcar.oem.id= or coreos.oem.id=,
    /// else metal (nothing to delete).
    #[arg(long, value_name = "NAME", value_parser = PlatformName)]
    pub platform: Option<String>,
    /// Read the kernel command line from this file (default /proc/cmdline).
    #[arg(long, hide = true, default_value = "/proc/cmdline")]
    pub kernel_cmdline: PathBuf,
}

/// The platform named on the kernel command line `cmdline` ([`runtime::cmdline::platform`]:
/// `agent.platform.id=`, `ignition.platform.id=`, Flatcar's `flatcar.oem.id=`/`coreos.oem.id=`),
/// else "metal".
pub fn cmdline_platform(cmdline: &str) -> String {
    runtime::cmdline::platform(cmdline).unwrap_or_else(|| "metal".to_string())
}

pub fn run(a: DeleteConfigArgs) -> Result<()> {
    let name = match a.platform {
        Some(p) => p,
        None => {
            let cmdline = std::fs::read_to_string(&a.kernel_cmdline)
                .with_context(|| format!("reading {}", a.kernel_cmdline.display()))?;
            cmdline_platform(&cmdline)
        }
    };
    let provider = crate::platform::provider(&name)?;
    log::info!("deleting the config from platform {name} (if it keeps one)");
    provider
        .delete_config()
        .with_context(|| format!("deleting the config from platform {name}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    #[test]
    fn the_platform_comes_from_the_flag_or_the_kernel_command_line() {
        assert_eq!(cmdline_platform("ro ignition.platform.id=vmware"), "vmware");
        assert_eq!(
            cmdline_platform("agent.platform.id=virtualbox ignition.platform.id=vmware"),
            "virtualbox"
        );
        assert_eq!(cmdline_platform("ro quiet"), "metal");
        assert_eq!(cmdline_platform("ro flatcar.oem.id=vmware"), "vmware");
        let cli = Cli::try_parse_from(["agent", "delete-config", "--platform", "vmware"]).unwrap();
        let Command::DeleteConfig(a) = cli.command else {
            panic!("not delete-config");
        };
        assert_eq!(a.platform.as_deref(), Some("vmware"));
        assert!(Cli::try_parse_from(["agent", "delete-config", "--platform", "nope"]).is_err());
    }

    #[test]
    fn platforms_that_keep_no_config_have_nothing_to_delete() {
        for p in ["metal", "qemu", "file"] {
            run(DeleteConfigArgs {
                platform: Some(p.into()),
                kernel_cmdline: "/nonexistent".into(),
            })
            .unwrap();
        }
    }

    #[test]
    fn vmware_off_vmware_fails_without_touching_the_backdoor() {
        #[cfg(target_arch = "x86_64")]
        if crate::platform::vmware::hypervisor_vendor().as_deref() == Some("VMwareVMware") {
            return;
        }
        let e = run(DeleteConfigArgs {
            platform: Some("vmware".into()),
            kernel_cmdline: "/nonexistent".into(),
        })
        .unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.starts_with("deleting the config from platform vmware: "),
            "{e}"
        );
    }
}
