//! Fuzz target: any string given as a data URL is checked and decoded without a panic, and the
//! validator and the decoders agree: a URL that passes the check decodes, and the streaming
//! decoder (`payload`, as the fetcher reads it, in odd step sizes) gives the same bytes.
#![no_main]

use spec::encoding::data_url::{Payload, check, decode, payload};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let checked = check(s);
        let decoded = decode(s);
        if checked.is_ok() {
            assert!(decoded.is_ok(), "{s:?} passes the check but does not decode");
        }
        match payload(s) {
            Ok(Payload::Bytes(b)) => assert_eq!(Some(&b), decoded.as_ref().ok()),
            Ok(Payload::Base64(mut d)) => {
                let mut got = Vec::new();
                let mut buf = [0u8; 7];
                while !d.is_empty() {
                    let n = d.decode_into(&mut buf);
                    got.extend_from_slice(&buf[..n]);
                }
                assert_eq!(Some(&got), decoded.as_ref().ok(), "{s:?}");
            }
            Err(_) => assert!(checked.is_err(), "{s:?} passes the check but has no payload"),
        }
    }
});
