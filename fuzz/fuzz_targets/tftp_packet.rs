//! Fuzz target: any datagram a TFTP server (or anyone else) sends the client decodes to a
//! packet or is ignored, never a panic; a blksize the client would accept is within RFC 2348.
#![no_main]

use agent::fetch::tftp::Packet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Packet::Oack { blksize: Some(b) } = Packet::decode(data) {
        assert!((8..=65464).contains(&b));
    }
});
