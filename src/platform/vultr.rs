//! `vultr`: Vultr user data from the metadata service at
//! `http://169.254.169.254/user-data/user-data`. A 404 means no user data.

use super::metadata::Service;

pub const SERVICE: Service = Service::new("vultr", "http://169.254.169.254", "/user-data/user-data");

super::metadata_provider!(Vultr, SERVICE);
