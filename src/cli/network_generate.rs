//! `agent network-generate`: the network of the kernel command line (dracut's `ip=`, `bond=`,
//! `vlan=`, `bridge=`, `nameserver=`, `rd.route=`, `ifname=`, ...) as systemd-networkd files,
//! for the initramfs's online fetch (dracut/30agent/agent-network-up). Without `ip=` nothing
//! is written: the initramfs keeps DHCP on every ethernet link.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::network;

#[derive(Debug, Args)]
pub struct NetworkGenerateArgs {
    /// Read the kernel command line from this file.
    #[arg(long, value_name = "FILE", default_value = "/proc/cmdline")]
    pub cmdline: PathBuf,
    /// Write the .network, .netdev and .link files into this directory.
    #[arg(long, value_name = "DIR", default_value = "/run/systemd/network")]
    pub output: PathBuf,
}

pub fn run(a: NetworkGenerateArgs) -> Result<()> {
    let cmdline = std::fs::read_to_string(&a.cmdline)
        .with_context(|| format!("reading {}", a.cmdline.display()))?;
    let plan = network::parse(&cmdline).context("the kernel command line's network arguments")?;
    if !plan.has_ip {
        let ignored =
            !plan.networks.is_empty() || !plan.netdevs.is_empty() || !plan.renames.is_empty();
        if ignored {
            log::warn!(
                "network arguments without ip= are not used (bond=, vlan=, bridge=, nameserver=, rd.route=, ifname= need an ip=); DHCP on every ethernet link"
            );
        } else {
            log::info!("no ip= on the kernel command line: DHCP on every ethernet link");
        }
        return Ok(());
    }
    let names = network::networkd::write(&a.output, &plan)?;
    log::info!("wrote {} into {}", names.join(", "), a.output.display());
    Ok(())
}
