//! `gcp`: Google Compute Engine's instance attribute `user-data` from the metadata service at
//! `http://169.254.169.254/computeMetadata/v1/instance/attributes/user-data` (by address, not
//! `metadata.google.internal`, as Ignition), with `Metadata-Flavor: Google`. A 404 means no
//! user data.

use super::metadata::Service;

pub const SERVICE: Service = Service {
    headers: &[("Metadata-Flavor", "Google")],
    ..Service::new(
        "gcp",
        "http://169.254.169.254",
        "/computeMetadata/v1/instance/attributes/user-data",
    )
};

super::metadata_provider!(Gcp, SERVICE);
