//! `hetzner`: Hetzner Cloud user data from the metadata service at
//! `http://169.254.169.254/hetzner/v1/userdata`. A 404 means no user data.

use super::metadata::Service;

pub const SERVICE: Service = Service::new("hetzner", "http://169.254.169.254", "/hetzner/v1/userdata");

super::metadata_provider!(Hetzner, SERVICE);
