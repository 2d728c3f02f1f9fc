//! Sending one report: `POST` with `Content-Type: application/json` and the fetch's
//! `Authorization` header, through the fetcher's HTTP client (proxy-free, the config's CAs),
//! 2 s to connect and for the answer's head, 5 s in all, 3 tries. A 2xx is sent; a 4xx other
//! than 408 and 429, a malformed URL or a rejected certificate is a refusal (sending again
//! cannot help: the report is dropped with a log line); anything else (no connection,
//! a time-out, a 5xx) leaves the report for the queue.

use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::model::{Report, Target};
use super::redact;
use crate::fetch::{self, Fetcher};

/// Everything one report may take, tries included.
pub const BUDGET: Duration = Duration::from_secs(5);
/// To connect, and for the response's head, per try (seconds).
pub const CONNECT_SECS: i64 = 2;
/// Tries per report.
pub const TRIES: u32 = 3;

#[derive(Debug)]
pub enum Error {
    /// The server said no for good (4xx): do not queue.
    Refused(anyhow::Error),
    /// Not sent: no answer, a time-out, a 5xx; queue it.
    Unreachable(anyhow::Error),
}

/// Sends `r` to `t` by `deadline` (at most [`BUDGET`] from now).
pub fn send(t: &Target, r: &Report, deadline: Instant) -> Result<(), Error> {
    let body = serde_json::to_vec(r).map_err(|e| Error::Refused(e.into()))?;
    send_bytes(t, &body, deadline)
}

/// Sends an encoded report to `t` by `deadline` (at most [`BUDGET`] from now).
pub fn send_bytes(t: &Target, body: &[u8], deadline: Instant) -> Result<(), Error> {
    let f = Fetcher::new(fetch::Options {
        http_response_headers: Some(CONNECT_SECS),
        ca_pems: t.cas.clone(),
        endpoints: t.endpoints.clone(),
        limits: t.limits,
        ..Default::default()
    });
    let mut headers = vec![("Content-Type".to_string(), "application/json".to_string())];
    if let Some(a) = &t.auth {
        headers.push(("Authorization".into(), a.clone()));
    }
    let url = redact::url(&t.url);
    let deadline = deadline.min(Instant::now() + BUDGET);
    let mut last = anyhow!("{url}: not tried");
    for n in 0..TRIES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match fetch::http::post(&f, &t.url, &headers, body, Some(left)) {
            Ok(reply) => match reply.status {
                200..=299 => return Ok(()),
                408 | 429 | 500..=599 => last = anyhow!("{}", reply.describe()),
                _ => return Err(Error::Refused(anyhow!("{}", reply.describe()))),
            },
            Err(crate::fetch::retry::Failure::Retry(e)) => {
                last = anyhow!("{}", redact::text(&format!("{e:#}")));
            }
            // A bad URL or a rejected certificate: no later try can change it.
            Err(crate::fetch::retry::Failure::Fatal(e)) => {
                return Err(Error::Refused(anyhow!(
                    "{}",
                    redact::text(&format!("{e:#}"))
                )));
            }
        }
        let pause = Duration::from_millis(250 << n);
        if Instant::now() + pause >= deadline {
            break;
        }
        std::thread::sleep(pause);
    }
    Err(Error::Unreachable(last.context(format!(
        "sending a report to {url} ({TRIES} tries, {} s at most)",
        BUDGET.as_secs()
    ))))
}
