//! `akamai`: Akamai Connected Cloud (Linode) user data from the metadata service at
//! `http://169.254.169.254/v1/user-data`, after a session token (PUT `/v1/token` with
//! `Metadata-Token-Expiry-Seconds: 300` and `Accept: text/plain`, then `Metadata-Token`; no
//! token, no user data: an error). The service serves the user data base64-encoded (padded or
//! not), and it may be gzip-compressed inside. As in Ignition, any status but 2xx is an error;
//! an empty answer is no user data.

use super::metadata::{AKAMAI_TOKEN, Encoding, Service};

pub const SERVICE: Service = Service {
    headers: &[("Accept", "*/*")],
    handshake: Some(AKAMAI_TOKEN),
    absent_on: &[],
    encoding: Encoding::Base64MaybeGzip,
    ..Service::new("akamai", "http://169.254.169.254", "/v1/user-data")
};

super::metadata_provider!(Akamai, SERVICE);
