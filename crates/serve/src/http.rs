//! The HTTP/1.1 server this config server runs on: the `http-core` crate (request heads,
//! responses, admission, event loops, TLS), which knows nothing of pools or tokens, with this
//! server's own response labels ([`Labels`]).

use std::borrow::Cow;

pub use http_core::{
    Body, ConnStats, FileBody, Handler, LOOP_FDS, Limits, Listener, Request, Server, bind,
    http_date, parse_head, reason, stop_listener, tls,
};

/// A response of this server, with its [`Labels`].
pub type Response = http_core::Response<Labels>;
/// The answer to a deferred request ([`http_core::Response::later`]).
pub type Reply = http_core::Reply<Labels>;

/// A response's labels for the metrics and the access log: the pool ("-" when none) and the
/// spec version ("-" when none).
#[derive(Debug, Clone)]
pub struct Labels {
    /// Empty when none.
    pool: String,
    pub version: Cow<'static, str>,
}

impl Default for Labels {
    fn default() -> Self {
        Labels {
            pool: String::new(),
            version: Cow::Borrowed("-"),
        }
    }
}

impl http_core::Labels for Labels {
    fn clear(&mut self) {
        self.pool.clear();
        self.version = Cow::Borrowed("-");
    }
}

impl Labels {
    pub fn pool(&self) -> &str {
        if self.pool.is_empty() {
            "-"
        } else {
            &self.pool
        }
    }

    pub fn set_pool(&mut self, pool: &str) {
        self.pool.clear();
        self.pool.push_str(pool);
    }
}

/// A time in an answer (`/status`, the admin API): RFC 3339 in UTC, to the second, of
/// seconds since the Unix epoch (`2026-12-03T07:00:00Z`).
pub fn time(secs: u64) -> String {
    runtime::util::rfc3339(secs)
}

/// [`time`] as a serde field (`#[serde(serialize_with = "crate::http::serialize_time")]`).
pub fn serialize_time<S: serde::Serializer>(secs: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&time(*secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_reset_with_the_response() {
        let mut r = Response::text(503, "busy");
        r.labels.set_pool("worker");
        r.labels.version = Cow::Borrowed("3.4.0");
        assert_eq!((r.labels.pool(), &*r.labels.version), ("worker", "3.4.0"));
        r.reset(404);
        assert_eq!((r.labels.pool(), &*r.labels.version), ("-", "-"));
    }
}
