//! `kubevirt`: KubeVirt's `cloudInitConfigDrive` volume (labelled `config-2`, OpenStack's layout):
//! the user data is `openstack/latest/user_data`, none without that file. Like Ignition, only
//! VMs with a config drive are supported: Ignition waits for it without end; the agent waits at
//! most [`DRIVE`]'s wait, then fails.

use std::time::Duration;

use anyhow::Result;

use super::drive::{self, Absent, Drive, Roots};
use super::{Found, Provider};
use crate::fetch::Fetcher;

/// The file on the drive.
pub const USER_DATA: &str = "openstack/latest/user_data";

/// The drive.
pub const DRIVE: Drive = Drive {
    platform: "kubevirt",
    what: "config drive",
    labels: &["config-2"],
    fstypes: &[],
    cdrom: false,
    wait: Duration::from_secs(120),
};

pub struct KubeVirt;

impl Provider for KubeVirt {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        drive::fetch_file(&DRIVE, &Roots::default(), USER_DATA, f.opts.limits.max_config_size, Absent::Error)
    }
}
