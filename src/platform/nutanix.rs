//! `nutanix`: Nutanix AHV attaches a config drive to every machine (labelled `config-2`,
//! OpenStack's layout): the user data is `openstack/latest/user_data`, none without that file.
//! As Ignition, the agent waits for the drive without end, saying every few seconds that it
//! waits.

use super::drive::{self, Absent, Drive};

/// The drive.
pub const DRIVE: Drive = drive::attached_config_drive("nutanix");

super::drive_provider!(Nutanix, DRIVE, drive::OPENSTACK_USER_DATA, Absent::Error);
