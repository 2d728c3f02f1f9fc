//! `nvidiabluefield`: on an NVIDIA BlueField DPU the config comes through the boot FIFO, which
//! the `mlxbf_bootctl` platform driver exposes in sysfs
//! (`/sys/bus/platform/devices/MLNXBF04:00/bootfifo`): the host pushes the config with the
//! BFB image over the rshim interface. As Ignition's provider (coreos/ignition#2151): load
//! `mlxbf_bootctl` (a failure is an error), read the first bootfifo that exists and is not
//! empty, drop NUL padding at either end; no bootfifo or an empty one: no config; a bootfifo
//! that cannot be read is logged and skipped.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{Found, Provider, userdata};
use crate::fetch::Fetcher;
use runtime::limits::{TooLarge, read_optional_file_bounded};

/// Where the driver exposes the boot FIFO.
pub const BOOTFIFOS: &[&str] = &["/sys/bus/platform/devices/MLNXBF04:00/bootfifo"];

/// The config in the first of `paths` that exists and is not empty, and that path.
pub fn from_bootfifos(paths: &[&Path], limit: u64) -> Result<Option<(Vec<u8>, PathBuf)>> {
    for p in paths {
        log::debug!("nvidiabluefield: reading {}", p.display());
        let what = format!("config from {}", p.display());
        let raw = match read_optional_file_bounded(p, limit, &what) {
            Ok(None) => continue,
            Ok(Some(raw)) => raw,
            Err(e) if e.is::<TooLarge>() => return Err(e),
            Err(e) => {
                log::error!("nvidiabluefield: {e:#}");
                continue;
            }
        };
        if raw.is_empty() {
            log::info!("nvidiabluefield: {} is empty", p.display());
            continue;
        }
        return Ok(Some((userdata::trim_nul(&raw).to_vec(), p.to_path_buf())));
    }
    Ok(None)
}

pub struct NvidiaBluefield;

impl Provider for NvidiaBluefield {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        runtime::util::run("modprobe", &["mlxbf_bootctl"])
            .context("loading the mlxbf_bootctl kernel module (is this an NVIDIA BlueField DPU?)")?;
        let paths: Vec<&Path> = BOOTFIFOS.iter().map(Path::new).collect();
        match from_bootfifos(&paths, f.opts.limits.max_config_size)? {
            None => {
                log::info!("nvidiabluefield: no config in any bootfifo");
                Ok(None)
            }
            Some((bytes, path)) => Ok(Some(Found {
                bytes,
                source: format!("NVIDIA BlueField bootfifo {}", path.display()),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bootfifo_with_data_is_read_and_trimmed() {
        let tmp = crate::platform::cabi::TmpDir::new("bootfifo");
        let dir = &tmp.0;
        let (missing, empty, unreadable, full) = (
            dir.join("missing"),
            dir.join("empty"),
            dir.join("dir-not-file"),
            dir.join("bootfifo"),
        );
        std::fs::write(&empty, b"").unwrap();
        std::fs::create_dir(&unreadable).unwrap();
        std::fs::write(&full, b"\0\0{\"ignition\":{\"version\":\"3.4.0\"}}\0\0\0").unwrap();
        let paths = [
            missing.as_path(),
            empty.as_path(),
            unreadable.as_path(),
            full.as_path(),
        ];
        let got = from_bootfifos(&paths, 1 << 20).unwrap().unwrap();
        assert_eq!(
            (got.0.as_slice(), got.1.as_path()),
            (&br#"{"ignition":{"version":"3.4.0"}}"#[..], full.as_path())
        );
        assert_eq!(from_bootfifos(&paths[..3], 1 << 20).unwrap(), None);
        let e = from_bootfifos(&paths, 10).unwrap_err();
        assert!(e.is::<TooLarge>(), "{e:#}");
    }
}
