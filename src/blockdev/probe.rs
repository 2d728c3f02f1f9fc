//! What is on a block device, via libblkid (superblocks only, like `blkid -p`).
//!
//! Like Ignition (`internal/exec/util/blkid.c`, `GetFilesystemInfo`): a safe probe first, which
//! fails when libblkid finds more than one signature (e.g. ext4 over the stale labels of an old
//! ZFS pool, which mkfs.ext4 does not clear). Then, with a warning, a plain probe, which reports
//! the first signature in libblkid's own order (RAID and LUKS superblocks before filesystems,
//! ext4 before zfs_member). The caller's rules apply to that one: reused when the config asks
//! for exactly that type/label/uuid, refused when not (unless wipeFilesystem, and wipefs then
//! clears every signature).

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use libblkid_rs::{BlkidProbe, BlkidProbeRet, BlkidSafeprobeRet, BlkidSublks, BlkidSublksFlags};

/// A filesystem (or other signature, e.g. swap) found on a device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    pub fstype: String,
    pub label: Option<String>,
    pub uuid: Option<String>,
    /// libblkid saw more than one signature; this is the first one (see the module notes).
    pub ambivalent: bool,
}

fn new_probe(dev: &Path) -> Result<BlkidProbe> {
    let e = |e: libblkid_rs::BlkidErr| anyhow!("{e}");
    let mut p = BlkidProbe::new_from_filename(dev).map_err(e)?;
    p.enable_superblocks(true).map_err(e)?;
    p.set_superblock_flags(BlkidSublksFlags::new(vec![
        BlkidSublks::Label,
        BlkidSublks::Uuid,
        BlkidSublks::Type,
    ]))
    .map_err(e)?;
    Ok(p)
}

fn found(p: &BlkidProbe, ambivalent: bool) -> Found {
    let get = |k: &str| p.lookup_value(k).ok().filter(|v| !v.is_empty());
    Found {
        fstype: get("TYPE").unwrap_or_default(),
        label: get("LABEL"),
        uuid: get("UUID"),
        ambivalent,
    }
}

/// Probes `dev`: `None` when nothing is recognised.
pub fn probe(dev: &Path) -> Result<Option<Found>> {
    let ctx = || format!("probing {}", dev.display());
    let e = |e: libblkid_rs::BlkidErr| anyhow!("{e}");
    let mut p = new_probe(dev).with_context(ctx)?;
    match p.do_safeprobe().map_err(e).with_context(ctx)? {
        BlkidSafeprobeRet::None => Ok(None),
        BlkidSafeprobeRet::Success => Ok(Some(found(&p, false))),
        BlkidSafeprobeRet::Ambiguous => {
            let mut p = new_probe(dev).with_context(ctx)?;
            match p.do_probe().map_err(e).with_context(ctx)? {
                BlkidProbeRet::Done => Ok(None),
                BlkidProbeRet::Success => {
                    let f = found(&p, true);
                    log::warn!(
                        "{}: more than one signature (ambivalent result); going by the first, {} \
                         (run wipefs {} to see them all)",
                        dev.display(),
                        f.fstype,
                        dev.display()
                    );
                    Ok(Some(f))
                }
            }
        }
    }
}
