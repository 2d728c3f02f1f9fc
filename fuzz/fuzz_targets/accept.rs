//! Fuzz target: any Accept header value negotiates to a version, a refusal or the default,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = serve::source::accept::negotiate(Some(s));
    }
});
