//! `cloudstack`: the user data of the config drive (labelled `config-2` or `CONFIG-2`, file
//! `cloudstack/userdata/user_data.txt`) or of the metadata service on the DHCP server
//! (`http://SERVER/latest/user-data`, SERVER from systemd-networkd's lease,
//! `/run/systemd/netif/leases/*`, `SERVER_ADDRESS=`).
//!
//! Ordering as in [`super::openstack`] (and Ignition): online the two are asked side by side,
//! the first answer wins, a drive without the file or a 404 is no user data; offline only the
//! drive is looked for, and without one the stage asks for the network.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::drive::{self, Drive, Outcome, Roots};
use super::metadata::{self, Bounds, Service};
use super::openstack::{OFFLINE_WAIT, ONLINE_WAIT};
use super::{Found, Provider};
use crate::fetch::Fetcher;

/// The file on the config drive.
pub const USER_DATA: &str = "cloudstack/userdata/user_data.txt";
/// The user data's path on the metadata service.
pub const METADATA_PATH: &str = "/latest/user-data";
/// The metadata service (404: no user data); its base is the DHCP server's address, found at
/// run time.
pub const SERVICE: Service = Service::new("cloudstack", "", METADATA_PATH);
/// systemd-networkd's DHCP leases, one file per interface.
pub const LEASES_DIR: &str = "/run/systemd/netif/leases";

const fn config_drive(wait: Duration) -> Drive {
    Drive {
        platform: "cloudstack",
        what: "config drive",
        labels: &["config-2", "CONFIG-2"],
        fstypes: &[],
        cdrom: false,
        wait,
    }
}

pub struct CloudStack;

impl Provider for CloudStack {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        fetch(f, &Roots::default(), Path::new(LEASES_DIR), [OFFLINE_WAIT, ONLINE_WAIT])
    }

    fn needs_network(&self) -> bool {
        true
    }

    fn tries_offline(&self) -> bool {
        true
    }
}

/// The DHCP server of the first lease in `dir` that names one (`SERVER_ADDRESS=`).
pub fn dhcp_server(dir: &Path) -> Option<String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    files.iter().find_map(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        text.lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, v)| k.trim() == "SERVER_ADDRESS" && !v.trim().is_empty())
            .map(|(_, v)| v.trim().to_string())
    })
}

/// The config: offline from the drive only (waited for at most `waits[0]`), online from the
/// drive or the metadata service on the DHCP server of a lease in `leases` (the first to
/// answer; `waits[1]` bounds both).
pub fn fetch(f: &Fetcher, roots: &Roots, leases: &Path, waits: [Duration; 2]) -> Result<Option<Found>> {
    let limit = f.opts.limits.max_config_size;
    let [offline_wait, wait] = waits;
    if f.opts.offline {
        let d = config_drive(offline_wait);
        return match drive::read(&d, roots, USER_DATA, limit, &AtomicBool::new(false))? {
            Outcome::Read(found) => Ok(found),
            Outcome::NoDrive => Err(f.opts.needs_network(format!(
                "the config of platform cloudstack (no {} within {}s: asking its metadata service)",
                d.describe(),
                offline_wait.as_secs_f64()
            ))),
        };
    }
    let d = config_drive(wait);
    drive::drive_or_service(&d, roots, USER_DATA, limit, "metadata service", |stop| {
        let start = Instant::now();
        let deadline = drive::limit(wait).map(|w| start + w);
        let mut next_progress = start + drive::PROGRESS;
        let server = loop {
            if let Some(s) = dhcp_server(leases) {
                break s;
            }
            let now = Instant::now();
            if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| now >= d) {
                bail!("no DHCP lease naming a server in {}", leases.display());
            }
            if now >= next_progress {
                log::info!(
                    "cloudstack: still waiting for a DHCP lease naming a server in {} (since {:.0}s)",
                    leases.display(),
                    start.elapsed().as_secs_f64()
                );
                next_progress += drive::PROGRESS;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        let base = if server.parse::<std::net::Ipv6Addr>().is_ok() {
            format!("http://[{server}]")
        } else {
            format!("http://{server}")
        };
        let bounds = Bounds {
            total: deadline.map(|d| d.saturating_duration_since(Instant::now())),
            unanswered: None,
            stop: Some(stop),
        };
        let got = metadata::fetch_user_data_at(f, &SERVICE, &base, bounds)?;
        Ok(got.map(|bytes| Found {
            bytes,
            source: format!("cloudstack metadata service {base}{METADATA_PATH}"),
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dhcp_server_comes_from_a_lease() {
        let dir = std::env::temp_dir().join(format!("agent-cs-leases-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(dhcp_server(&dir), None);
        std::fs::write(dir.join("1"), "# This is private data. Do not parse.\nADDRESS=10.1.1.5\n").unwrap();
        assert_eq!(dhcp_server(&dir), None);
        std::fs::write(
            dir.join("2"),
            "# This is private data. Do not parse.\nADDRESS=10.1.1.5\nSERVER_ADDRESS=10.1.1.1\nROUTER=10.1.1.1\n",
        )
        .unwrap();
        assert_eq!(dhcp_server(&dir).as_deref(), Some("10.1.1.1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
