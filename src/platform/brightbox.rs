//! `brightbox`: Brightbox is OpenStack underneath; as in Ignition, the OpenStack provider
//! reads its config ([`super::openstack`]: the config drive and the metadata service, over
//! IPv4 and IPv6 link-local, side by side).

use anyhow::Result;

use super::drive::Roots;
use super::openstack::{self, METADATA_SERVICE, METADATA_SERVICE_IPV6, OFFLINE_WAIT, ONLINE_WAIT};
use super::{Found, Provider};
use crate::fetch::Fetcher;

pub struct Brightbox;

impl Provider for Brightbox {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let service = f.opts.endpoints.metadata_base("brightbox", METADATA_SERVICE);
        let ipv6 = f.opts.endpoints.metadata_base("brightbox/ipv6", METADATA_SERVICE_IPV6);
        openstack::fetch(
            "brightbox",
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
