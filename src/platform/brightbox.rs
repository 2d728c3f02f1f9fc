//! `brightbox`: Brightbox is OpenStack underneath; as in Ignition, the OpenStack provider
//! reads its config ([`super::openstack`]: config drive, then the metadata service).

use anyhow::Result;

use super::drive::Roots;
use super::openstack::{self, METADATA_SERVICE, OFFLINE_WAIT, ONLINE_WAIT};
use super::{Found, Provider};
use crate::fetch::Fetcher;

pub struct Brightbox;

impl Provider for Brightbox {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        let service = f.opts.endpoints.metadata_base("brightbox", METADATA_SERVICE);
        openstack::fetch("brightbox", f, &Roots::default(), &service, [OFFLINE_WAIT, ONLINE_WAIT])
    }

    fn needs_network(&self) -> bool {
        true
    }

    fn tries_offline(&self) -> bool {
        true
    }
}
