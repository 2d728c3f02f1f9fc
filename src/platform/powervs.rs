//! `powervs`: IBM Power Virtual Server attaches a config drive (labelled `config-2`, OpenStack's
//! layout): the user data is `openstack/latest/user_data`, none without that file. As Ignition, the agent
//! waits for the drive without end, saying every few seconds that it waits.

use super::drive::{self, Absent, Drive};

/// The drive.
pub const DRIVE: Drive = drive::attached_config_drive("powervs");

super::drive_provider!(PowerVs, DRIVE, drive::OPENSTACK_USER_DATA, Absent::Error);
