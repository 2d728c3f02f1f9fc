//! `packet`: Equinix Metal (formerly Packet) user data from its metadata service at
//! `https://metadata.packet.net/userdata` (a name resolved by DNS, over TLS), with
//! `Accept: */*` (the service refuses Ignition's default Accept with 406). As in Ignition,
//! any status but 2xx is an error; an empty answer is no user data. Ignition's phone-home to
//! the instance timeline is not done.

use super::metadata::Service;

pub const SERVICE: Service = Service {
    headers: &[("Accept", "*/*")],
    absent_on: &[],
    ..Service::new("packet", "https://metadata.packet.net", "/userdata")
};

super::metadata_provider!(Packet, SERVICE);
