//! `azurestack`: Azure Stack Hub. As in Ignition, only the custom data of the OVF provisioning
//! CD (UDF or ISO9660), read by [`super::azure::from_cd`]; no metadata service, no network.

use anyhow::Result;

use super::azure::{AZURESTACK_CD, from_cd};
use super::drive::Roots;
use super::{Found, Provider};
use crate::fetch::Fetcher;

pub struct AzureStack;

impl Provider for AzureStack {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        from_cd(&AZURESTACK_CD, &Roots::default(), f.opts.limits.max_config_size)
    }
}
