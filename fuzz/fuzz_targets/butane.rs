//! Fuzz target: any byte string given to the Butane translator yields Ignition JSON or a
//! report, never a panic (hostile YAML included: the limits bound time and memory); JSON it
//! produces for a stable spec version parses back as a valid config. The agent's own checks
//! are on (as `agent validate` translates): `agent butane` leaves them out, as Butane does, so
//! its output may be a config the agent itself refuses (a unit name without a suffix).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = butane::Options {
        agent_checks: true,
        ..Default::default()
    };
    if let Ok(out) = butane::translate(data, &opts)
        && !out.ign_version.ends_with("-experimental")
    {
        spec::config::parse(&out.json).expect("translated config validates");
    }
});
