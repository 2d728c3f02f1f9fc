//! `upcloud`: UpCloud user data from the metadata service at
//! `http://169.254.169.254/metadata/v1/user_data`. A 404 means no user data.

use super::metadata::Service;

pub const SERVICE: Service = Service::new("upcloud", "http://169.254.169.254", "/metadata/v1/user_data");

super::metadata_provider!(UpCloud, SERVICE);
