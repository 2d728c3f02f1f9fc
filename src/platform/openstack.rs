//! `openstack`: the user data of the config drive (a filesystem labelled `config-2` or
//! `CONFIG-2`, file `openstack/latest/user_data`) or of the metadata service
//! (`http://169.254.169.254/openstack/latest/user_data`). `brightbox` uses the same provider,
//! as in Ignition.
//!
//! Like Ignition, online the drive and the service are asked side by side and the first answer
//! wins; a drive without the file or a 404 from the service is no user data. The service is
//! asked at 169.254.169.254 and, at the same time, at its IPv6 link-local address
//! `fe80::a9fe:a9fe` out of every interface that is up and has an IPv6 address (IPv6-only
//! clouds), as Ignition does. As in Ignition, both are waited for without end
//! ([`ONLINE_WAIT`]); the waits say every few seconds what they wait for and since when.
//! Unlike Ignition (which always asks for the network offline), the offline pass looks for the
//! drive first ([`OFFLINE_WAIT`]): with a drive the config needs no network; without one the
//! stage asks for the network.

use std::time::Duration;

use anyhow::Result;

use super::drive::{self, Drive, Outcome, Roots};
use super::metadata::{self, Base, Bounds, Service};
use super::{Found, Provider};
use crate::fetch::Fetcher;

/// The file on the config drive.
pub const USER_DATA: &str = drive::OPENSTACK_USER_DATA;
/// The metadata service.
pub const METADATA_SERVICE: &str = "http://169.254.169.254";
/// The metadata service at its IPv6 link-local address (asked out of each interface).
pub const METADATA_SERVICE_IPV6: &str = "http://[fe80::a9fe:a9fe]";
/// Its user data.
pub const METADATA_PATH: &str = "/openstack/latest/user_data";
/// The metadata service as [`metadata::fetch_user_data_at`] asks it (404: no user data); its
/// platform is `openstack` or `brightbox`, its base [`fetch`]'s argument.
pub const SERVICE: Service = Service::new("openstack", METADATA_SERVICE, METADATA_PATH);
/// Offline, the wait for the config drive before asking for the network.
pub const OFFLINE_WAIT: Duration = Duration::from_secs(10);
/// Online, the longest wait for either source: as Ignition, without end.
pub const ONLINE_WAIT: Duration = drive::FOREVER;

/// The config drive of `platform`, waited for at most `wait`.
pub const fn config_drive(platform: &'static str, wait: Duration) -> Drive {
    Drive {
        platform,
        what: "config drive",
        labels: &["config-2", "CONFIG-2"],
        fstypes: &[],
        cdrom: false,
        wait,
    }
}

pub struct OpenStack;

impl Provider for OpenStack {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let service = f.opts.endpoints.metadata_base("openstack", METADATA_SERVICE);
        let ipv6 = f.opts.endpoints.metadata_base("openstack/ipv6", METADATA_SERVICE_IPV6);
        fetch(
            "openstack",
            f,
            &Roots::default(),
            &service,
            Some(&ipv6),
            [OFFLINE_WAIT, ONLINE_WAIT],
        )
    }

    fn needs_network(&self) -> bool {
        true
    }

    fn tries_offline(&self) -> bool {
        true
    }
}

/// The bases the service is asked at: `service`, and `ipv6` (a link-local address) out of
/// each interface that is up and has an IPv6 address ([`metadata::ipv6_interfaces`]).
pub fn service_bases(service: &str, ipv6: Option<&str>) -> Vec<Base> {
    let mut bases = vec![Base::plain(service)];
    if let Some(v6) = ipv6 {
        let interfaces = metadata::ipv6_interfaces();
        if interfaces.is_empty() {
            log::info!("no interface with an IPv6 address is up: asking the metadata service over IPv4 only");
        }
        for i in interfaces {
            bases.push(Base {
                url: v6.trim_end_matches('/').to_string(),
                interface: Some(i),
            });
        }
    }
    bases
}

/// The config of `platform` (openstack, brightbox): offline from the config drive only
/// (waited for at most `waits[0]`), online from the drive or the service at `service` (and
/// at the link-local `ipv6` out of each interface with IPv6), the first to answer;
/// `waits[1]` bounds both ([`drive::FOREVER`]: no bound).
pub fn fetch(
    platform: &'static str,
    f: &Fetcher,
    roots: &Roots,
    service: &str,
    ipv6: Option<&str>,
    waits: [Duration; 2],
) -> Result<Option<Found>> {
    let limit = f.opts.limits.max_config_size;
    let [offline_wait, wait] = waits;
    if f.opts.offline {
        let d = config_drive(platform, offline_wait);
        return match drive::read(&d, roots, USER_DATA, limit, &Default::default())? {
            Outcome::Read(found) => Ok(found),
            Outcome::NoDrive => Err(f.opts.needs_network(format!(
                "the config of platform {platform} (no {} within {}s: asking its metadata service)",
                d.describe(),
                offline_wait.as_secs_f64()
            ))),
        };
    }
    let d = config_drive(platform, wait);
    let svc = Service { platform, ..SERVICE };
    let bases = service_bases(service, ipv6);
    drive::drive_or_service(&d, roots, USER_DATA, limit, "metadata service", |stop| {
        let bounds = Bounds {
            total: drive::limit(wait),
            unanswered: None,
            stop: Some(stop),
        };
        let (got, base) = metadata::fetch_user_data_any(f, &svc, &bases, bounds)?;
        Ok(got.map(|bytes| Found {
            bytes,
            source: format!("{platform} metadata service {}{METADATA_PATH}", base.label()),
        }))
    })
}
