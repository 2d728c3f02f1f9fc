//! The HTTP/1.1 server this config server runs on: the `http-core` crate (request heads,
//! responses, admission, event loops, TLS), which knows nothing of pools or tokens.

pub use http_core::{
    Answer, Body, ConnStats, Deferred, FileBody, Handler, LOOP_FDS, Limits, Listener, Reply,
    Request, Response, Server, bind, http_date, parse_head, reason, stop_listener, tls,
};
