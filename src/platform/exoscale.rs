//! `exoscale`: the instance's user data from the metadata service at
//! `http://169.254.169.254/1.0/user-data`. A 404 means no user data.

use super::metadata::Service;

pub const SERVICE: Service = Service::new("exoscale", "http://169.254.169.254", "/1.0/user-data");

super::metadata_provider!(Exoscale, SERVICE);
