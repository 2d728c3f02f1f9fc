//! `kubevirt`: as Ignition (since 2.24), KubeVirt's `cloudInitNoCloud` volume (a NoCloud seed
//! labelled `cidata`, file `user-data`) and its `cloudInitConfigDrive` volume (labelled
//! `config-2`, OpenStack's layout, file `openstack/latest/user_data`) are looked for side by
//! side ([`drive::first_drive`]): the first drive found answers, its file or, without it, no
//! user data. As in Ignition the drives are waited for without end (KubeVirt attaches the
//! volume the VM names); the wait says every few seconds what it waits for and since when.
//! Ignition knows only the lower-case labels; `CIDATA` (vfat seeds) is taken too.

use anyhow::Result;

use super::drive::{self, Drive, FOREVER, Roots};
use super::{Found, Provider};
use crate::fetch::Fetcher;

/// The NoCloud seed.
pub const NOCLOUD: Drive = Drive {
    platform: "kubevirt",
    what: "NoCloud seed",
    labels: &["cidata", "CIDATA"],
    fstypes: &[],
    cdrom: false,
    wait: FOREVER,
};
/// Its file.
pub const NOCLOUD_USER_DATA: &str = "user-data";
/// The config drive.
pub const CONFIG_DRIVE: Drive = drive::attached_config_drive("kubevirt");

pub struct KubeVirt;

impl Provider for KubeVirt {
    fn fetch_config(&self, f: &Fetcher) -> Result<Option<Found>> {
        fetch(&[NOCLOUD, CONFIG_DRIVE], &Roots::default(), f.opts.limits.max_config_size)
    }
}

/// The config from the first of `drives` (the NoCloud seed, the config drive, in that order,
/// with their waits) found under `roots`.
pub fn fetch(drives: &[Drive; 2], roots: &Roots, limit: u64) -> Result<Option<Found>> {
    let sources = [
        (drives[0], NOCLOUD_USER_DATA),
        (drives[1], drive::OPENSTACK_USER_DATA),
    ];
    drive::first_drive(&sources, roots, limit)
}
