//! Fuzz target: any string given as a data URL is checked and decoded without a panic, and the
//! validator and the decoder agree: a URL that passes the check decodes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let checked = agent::encoding::data_url::check(s);
        let decoded = agent::encoding::data_url::decode(s);
        if checked.is_ok() {
            assert!(decoded.is_ok(), "{s:?} passes the check but does not decode");
        }
    }
});
