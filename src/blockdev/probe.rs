//! What is on a block device, via libblkid (superblocks only, like `blkid -p`).

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use libblkid_rs::{BlkidProbe, BlkidSafeprobeRet, BlkidSublks, BlkidSublksFlags};

/// A filesystem (or other signature, e.g. swap) found on a device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    pub fstype: String,
    pub label: Option<String>,
    pub uuid: Option<String>,
}

/// Probes `dev`: `None` when nothing is recognised.
pub fn probe(dev: &Path) -> Result<Option<Found>> {
    let ctx = || format!("probing {}", dev.display());
    let e = |e: libblkid_rs::BlkidErr| anyhow!("{e}");
    let mut p = BlkidProbe::new_from_filename(dev)
        .map_err(e)
        .with_context(ctx)?;
    p.enable_superblocks(true).map_err(e).with_context(ctx)?;
    p.set_superblock_flags(BlkidSublksFlags::new(vec![
        BlkidSublks::Label,
        BlkidSublks::Uuid,
        BlkidSublks::Type,
    ]))
    .map_err(e)
    .with_context(ctx)?;
    match p.do_safeprobe().map_err(e).with_context(ctx)? {
        BlkidSafeprobeRet::None => Ok(None),
        BlkidSafeprobeRet::Ambiguous => Err(anyhow!(
            "{}: ambiguous signatures (more than one filesystem found)",
            dev.display()
        )),
        BlkidSafeprobeRet::Success => {
            let get = |k: &str| p.lookup_value(k).ok().filter(|v| !v.is_empty());
            Ok(Some(Found {
                fstype: get("TYPE").unwrap_or_default(),
                label: get("LABEL"),
                uuid: get("UUID"),
            }))
        }
    }
}
