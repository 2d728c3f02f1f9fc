//! Fuzz target: any byte string given to the config parser yields a config or a report,
//! never a panic; a config that parses can be written back and parsed again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(parsed) = spec::config::parse(data) {
        let out = spec::config::to_json(&parsed.config, parsed.version).expect("re-serialize");
        spec::config::parse(&out).expect("round trip");
    }
});
