//! `proxmoxve`: Proxmox VE's cloud-init drive (NoCloud, labelled `cidata`; `CIDATA` is taken
//! too): the config is its `user-data`, else its `vendor-data`, as in Ignition. A cloud-init
//! document there (`#cloud-config`, or a script) is not a config and is skipped, so is anything
//! that is not JSON; a machine without the drive after 30 s goes on without user data.
//!
//! One difference from Ignition, which skips any file that is not valid JSON: a file that
//! starts like JSON (`{`) but does not parse is taken, so that the fetch stage reports the
//! broken config (with its line and column) instead of provisioning silently without it.

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

/// Whether a NoCloud file is taken as the config: not a cloud-init document, and JSON (or
/// something that starts like it: the parser then says what is wrong).
pub fn is_config(b: &[u8]) -> bool {
    !drive::is_cloud_init(b) && b.trim_ascii_start().first() == Some(&b'{')
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
                "{}: {rel} on the {} is not an Ignition config (a cloud-init document?): skipped",
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
    fn cloud_init_documents_and_non_json_are_skipped() {
        assert!(is_config(b"{\"ignition\":{\"version\":\"3.4.0\"}}"));
        assert!(is_config(b"\n  {\"ignition\": broken"));
        assert!(!is_config(b"#cloud-config\nhostname: x\n"));
        assert!(!is_config(b"#!/bin/bash\n"));
        assert!(!is_config(b"hostname: x\n"));
        assert!(!is_config(b""));
    }
}
