//! `ibmcloud`: IBM Cloud VPC's NoCloud seed disk (labelled `cidata`; `CIDATA` is taken too):
//! the user data is its file `user-data`, none without that file. As in Ignition, a machine
//! without the disk after 30 s goes on without user data.

use std::time::Duration;

use super::drive::{Absent, Drive};

/// The file on the drive.
pub const USER_DATA: &str = "user-data";

/// The drive.
pub const DRIVE: Drive = Drive {
    platform: "ibmcloud",
    what: "NoCloud seed",
    labels: &["cidata", "CIDATA"],
    fstypes: &[],
    cdrom: false,
    wait: Duration::from_secs(30),
};

super::drive_provider!(IbmCloud, DRIVE, USER_DATA, Absent::NoUserData);
