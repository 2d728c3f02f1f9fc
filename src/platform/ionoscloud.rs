//! `ionoscloud`: IONOS Cloud writes the user data onto a disk of the machine before its first
//! boot: by default the file `config/user-data` on the filesystem labelled `OEM`; the kernel
//! arguments `ignition.config.device=LABEL` and `ignition.config.path=PATH` (both Ignition's)
//! name others. As in Ignition, a cloud-init document there (`#cloud-config`, or a script) is
//! not a config (no user data), and a machine without the disk after 30 s goes on without
//! user data.

use std::time::Duration;

use anyhow::Result;

use super::drive::{self, Drive, Roots};
use super::{Found, Provider};
use crate::fetch::Fetcher;
use runtime::cmdline::arg as cmdline_arg;

/// The default label of the disk.
pub const DEFAULT_LABEL: &str = "OEM";
/// The default path of the user data on it.
pub const DEFAULT_PATH: &str = "config/user-data";
/// Kernel argument naming another label.
pub const KARG_DEVICE: &str = "ignition.config.device";
/// Kernel argument naming another path.
pub const KARG_PATH: &str = "ignition.config.path";
/// The longest wait for the disk.
pub const WAIT: Duration = Duration::from_secs(30);

pub struct IonosCloud;

impl Provider for IonosCloud {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let cmdline = std::fs::read_to_string(&f.opts.endpoints.kernel_cmdline).unwrap_or_default();
        let (label, path) = location(&cmdline);
        fetch(&label, &path, &Roots::default(), WAIT, f.opts.limits.max_config_size)
    }
}

/// The disk's label and the user data's path, from the kernel command line.
pub fn location(cmdline: &str) -> (String, String) {
    let get = |k: &str, default: &str| match cmdline_arg(cmdline, k) {
        Some(Some(v)) if !v.is_empty() => v.to_string(),
        _ => default.to_string(),
    };
    (get(KARG_DEVICE, DEFAULT_LABEL), get(KARG_PATH, DEFAULT_PATH))
}

/// The user data at `path` on the disk labelled `label`.
pub fn fetch(label: &str, path: &str, roots: &Roots, wait: Duration, limit: u64) -> Result<Option<Found>> {
    // The label is the machine's (one per run): a drive description wants it for the
    // process's lifetime.
    let labels: &'static [&'static str] = Box::leak(Box::new([&*Box::leak(label.into())]));
    let d = Drive {
        platform: "ionoscloud",
        what: "user-data disk",
        labels,
        fstypes: &[],
        cdrom: false,
        wait,
    };
    let found = drive::fetch_file(&d, roots, path, limit, drive::Absent::NoUserData)?;
    Ok(found.filter(|f| {
        let skip = drive::is_cloud_init(&f.bytes);
        if skip {
            log::info!("ionoscloud: {} is a cloud-init document, not a config: no user data", f.source);
        }
        !skip
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_arguments_name_the_disk_and_the_file() {
        assert_eq!(
            location("quiet"),
            ("OEM".to_string(), "config/user-data".to_string())
        );
        assert_eq!(
            location("ignition.config.device=ionos ignition.config.path=/u/data"),
            ("ionos".to_string(), "/u/data".to_string())
        );
    }
}
