//! `scaleway`: Scaleway user data from the metadata service at
//! `http://169.254.42.42/user_data/cloud-init`, the one address Ignition (2.26) asks. The
//! agent also asks its IPv6 address `http://[fd00:42::42]/user_data/cloud-init` at the same
//! time (the first answer wins), so that IPv6-only instances get their config; Ignition's
//! provider has no IPv6 address. The service answers only clients on a privileged source port
//! (1–1023, so only root on the instance reads the user data): each connection binds a random
//! one. A 404 means no user data.

use super::metadata::Service;

pub const SERVICE: Service = Service {
    low_source_port: true,
    ipv6_base: Some("http://[fd00:42::42]"),
    ..Service::new("scaleway", "http://169.254.42.42", "/user_data/cloud-init")
};

super::metadata_provider!(Scaleway, SERVICE);
