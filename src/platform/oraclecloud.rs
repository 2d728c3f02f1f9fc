//! `oraclecloud`: Oracle Cloud Infrastructure user data from the instance metadata service v2
//! at `http://169.254.169.254/opc/v2/instance/metadata/user_data`, with
//! `Authorization: Bearer Oracle`. The service serves it base64-encoded. A 404 means no user
//! data; 429 (too many requests) is retried like a 5xx, as Ignition does.

use super::metadata::{Encoding, Service};

pub const SERVICE: Service = Service {
    headers: &[("Authorization", "Bearer Oracle")],
    retry_on: &[429],
    encoding: Encoding::Base64,
    ..Service::new(
        "oraclecloud",
        "http://169.254.169.254",
        "/opc/v2/instance/metadata/user_data",
    )
};

super::metadata_provider!(OracleCloud, SERVICE);
