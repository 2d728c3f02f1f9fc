//! `digitalocean`: the droplet's user data from the metadata service at
//! `http://169.254.169.254/metadata/v1/user-data`. As in Ignition, any status but 2xx is an
//! error (the service answers an empty body when there is no user data: no user config).

use super::metadata::Service;

pub const SERVICE: Service = Service {
    absent_on: &[],
    ..Service::new("digitalocean", "http://169.254.169.254", "/metadata/v1/user-data")
};

super::metadata_provider!(DigitalOcean, SERVICE);
