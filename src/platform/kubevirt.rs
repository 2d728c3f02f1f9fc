//! `kubevirt`: KubeVirt's `cloudInitConfigDrive` volume (labelled `config-2`, OpenStack's layout):
//! the user data is `openstack/latest/user_data`, none without that file. Like Ignition, only
//! VMs with a config drive are supported: Ignition waits for it without end; the agent waits at
//! most [`DRIVE`]'s wait, then fails.

use super::drive::{self, Absent, Drive};

/// The drive.
pub const DRIVE: Drive = drive::attached_config_drive("kubevirt");

super::drive_provider!(KubeVirt, DRIVE, drive::OPENSTACK_USER_DATA, Absent::Error);
