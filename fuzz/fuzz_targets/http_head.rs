//! Fuzz target: any request head given to the server's parser yields a request or a status
//! (400/414/431/...), never a panic; a parsed request's headers can be read back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match http_core::parse_head(data, 100) {
        Ok(req) => {
            let _ = req.header("host");
            let _ = req.header_one("authorization");
            let _ = req.query_param("etcd_index");
        }
        Err(status) => assert!((400..600).contains(&status), "status {status}"),
    }
});
