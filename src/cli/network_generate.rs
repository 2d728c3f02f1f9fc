//! `agent network-generate`: the network of the kernel command line (dracut's `ip=`, `bond=`,
//! `vlan=`, `bridge=`, `nameserver=`, `rd.route=`, `ifname=`, ...) as systemd-networkd files,
//! for the initramfs's online fetch (dracut/30agent/agent-network-up). Without `ip=` nothing
//! is written: the initramfs keeps DHCP on every ethernet link.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
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

/// A kernel command line is at most a few KiB (COMMAND_LINE_SIZE); a larger --cmdline file
/// is refused.
pub const MAX_CMDLINE: u64 = 64 * 1024;

pub fn run(a: NetworkGenerateArgs) -> Result<()> {
    let mut cmdline = String::new();
    std::fs::File::open(&a.cmdline)
        .and_then(|f| f.take(MAX_CMDLINE + 1).read_to_string(&mut cmdline))
        .with_context(|| format!("reading {}", a.cmdline.display()))?;
    if cmdline.len() as u64 > MAX_CMDLINE {
        bail!(
            "--cmdline {}: larger than {} KiB, not a kernel command line",
            a.cmdline.display(),
            MAX_CMDLINE / 1024
        );
    }
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
