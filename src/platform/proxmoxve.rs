//! `proxmoxve`: Proxmox VE's cloud-init drive (NoCloud, labelled `cidata`; `CIDATA` is taken
//! too): the config is its `user-data`, else its `vendor-data`, as in Ignition: the first of
//! them that is not empty and does not start with `#cloud-config` and a line break (Proxmox's
//! own cloud-init document) is taken, whatever it is; anything else that is not a config
//! (a script, YAML) fails the fetch stage as it fails Ignition. A machine without the drive
//! after 30 s goes on without user data.

use std::time::Duration;

use anyhow::Result;

use super::drive::{self, Drive, Mounted, Roots};
use super::{Found, Provider};
use crate::fetch::Fetcher;

/// The files looked at, in order.
pub const FILES: &[&str] = &["user-data", "vendor-data"];

/// The drive.
pub const DRIVE: Drive = Drive {
    platform: "proxmoxve",
    what: "cloud-init drive",
    labels: &["cidata", "CIDATA"],
    fstypes: &[],
    cdrom: false,
    wait: Duration::from_secs(30),
};

pub struct ProxmoxVe;

impl Provider for ProxmoxVe {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        fetch(&DRIVE, &Roots::default(), f.opts.limits.max_config_size)
    }
}

/// Whether a NoCloud file is taken as the config (Ignition's rule): not empty, and not a
/// `#cloud-config` document.
pub fn is_config(b: &[u8]) -> bool {
    !b.is_empty() && !b.starts_with(b"#cloud-config\n")
}

/// The config from the drive `d`: its first file of [`FILES`] that [`is_config`].
pub fn fetch(d: &Drive, roots: &Roots, limit: u64) -> Result<Option<Found>> {
    let Some(dev) = drive::find(d, roots, &Default::default()) else {
        log::info!("{}: continuing without user data", d.platform);
        return Ok(None);
    };
    let m = Mounted::mount(&dev)?;
    let mut found = None;
    for rel in FILES {
        let src = drive::source(d, &dev, rel);
        match m.read(rel, limit, &format!("config from {src}"))? {
            None => log::info!("{}: the {} has no {rel}", d.platform, d.what),
            Some(b) if !is_config(&b) => log::info!(
                "{}: {rel} on the {} is empty or a #cloud-config document: skipped",
                d.platform,
                d.what
            ),
            Some(bytes) => {
                found = Some(Found { bytes, source: src });
                break;
            }
        }
    }
    m.close()?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_empty_files_and_cloud_config_are_skipped() {
        assert!(is_config(b"{\"ignition\":{\"version\":\"3.4.0\"}}"));
        assert!(is_config(b"\n  {\"ignition\": broken"));
        assert!(!is_config(b"#cloud-config\nhostname: x\n"));
        assert!(!is_config(b""));
        // Taken (and then refused by the parser), as in Ignition.
        assert!(is_config(b"#!/bin/bash\n"));
        assert!(is_config(b"hostname: x\n"));
        assert!(is_config(b"#cloud-config"));
    }
}
