//! The retry policy for network fetches, in one place (seed: ignition-operator-notes.txt):
//! back off 100 ms, doubling up to 5 s, retrying until `timeouts.httpTotal` (0 or unset = no
//! limit). Connection errors, header time-outs and 5xx are retried; anything else is final.
//! Every retry is logged with its reason and the next delay, so a hung boot is never silent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

/// First delay between failed attempts.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// The delay doubles after each failure up to this cap.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The outcome of one failed attempt.
#[derive(Debug)]
pub enum Failure {
    /// Worth another try (connection error, header time-out, 5xx, body cut short).
    Retry(anyhow::Error),
    /// Final: retrying cannot help (4xx, hash mismatch, bad URL, ...).
    Fatal(anyhow::Error),
}

impl Failure {
    pub fn retry(e: impl Into<anyhow::Error>) -> Self {
        Failure::Retry(e.into())
    }
    pub fn fatal(e: impl Into<anyhow::Error>) -> Self {
        Failure::Fatal(e.into())
    }
}

/// Time as the retry loop sees it; injectable so tests can check the schedule without waiting.
pub trait Clock {
    fn now(&self) -> Instant;
    fn sleep(&self, d: Duration);
}

/// The real clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// The delay after the `n`th failure (0-based): 100 ms, 200 ms, 400 ms, ... capped at 5 s.
pub fn backoff(n: u32) -> Duration {
    INITIAL_BACKOFF
        .checked_mul(1u32.checked_shl(n.min(16)).unwrap_or(u32::MAX))
        .unwrap_or(MAX_BACKOFF)
        .min(MAX_BACKOFF)
}

/// Runs `attempt` until it succeeds, fails finally, or `total` (if any) has passed.
/// `attempt` receives the time left (None = unlimited) so it can bound its own waits.
pub fn run<T>(
    what: &str,
    total: Option<Duration>,
    clock: &dyn Clock,
    attempt: impl FnMut(Option<Duration>) -> Result<T, Failure>,
) -> Result<T> {
    let bounds = Bounds {
        total: total.map(|t| (t, "timeouts.httpTotal")),
        stop: None,
    };
    run_bounded(what, bounds, clock, attempt)
}

/// What ends a retry loop besides success and a final failure.
#[derive(Clone, Copy, Default)]
pub struct Bounds<'a> {
    /// The longest the whole loop may take, and what sets it (named in the error when it is
    /// exceeded: "timeouts.httpTotal", "the wait for the openstack metadata service").
    pub total: Option<(Duration, &'a str)>,
    /// Set by another thread to end the loop at its next retry (another source answered
    /// first); the back-off sleep is cut short.
    pub stop: Option<&'a AtomicBool>,
}

impl<'a> Bounds<'a> {
    /// The shorter of two time limits (an unset one never wins).
    pub fn at_most(mut self, total: Option<(Duration, &'a str)>) -> Self {
        if let Some((t, name)) = total
            && self.total.is_none_or(|(mine, _)| t < mine)
        {
            self.total = Some((t, name));
        }
        self
    }
}

/// The error of a retry loop that was told to stop ([`Bounds::stop`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}: stopped (another source answered first)")]
pub struct Stopped(pub String);

/// [`run`] with [`Bounds`]: a named time limit and a stop flag.
pub fn run_bounded<T>(
    what: &str,
    bounds: Bounds,
    clock: &dyn Clock,
    mut attempt: impl FnMut(Option<Duration>) -> Result<T, Failure>,
) -> Result<T> {
    let start = clock.now();
    let deadline = bounds.total.map(|(t, _)| start + t);
    let stopped = || bounds.stop.is_some_and(|s| s.load(Ordering::SeqCst));
    let mut failures = 0u32;
    loop {
        if stopped() {
            return Err(Stopped(what.to_string()).into());
        }
        let left = deadline.map(|d| d.saturating_duration_since(clock.now()));
        let err = match attempt(left) {
            Ok(v) => return Ok(v),
            Err(Failure::Fatal(e)) => return Err(e),
            Err(Failure::Retry(e)) => e,
        };
        let delay = backoff(failures);
        failures += 1;
        if let (Some(d), Some((total, name))) = (deadline, bounds.total) {
            let now = clock.now();
            if now + delay >= d {
                return Err(err.context(anyhow!(
                    "giving up on {what} after {failures} attempts: {name} of {}s exceeded",
                    total.as_secs_f64()
                )));
            }
        }
        if stopped() {
            return Err(err.context(Stopped(what.to_string())));
        }
        // At most every MAX_BACKOFF (5 s) a line: what is waited for, and since when.
        log::warn!(
            "{what}: attempt {failures} failed: {err:#}; retrying in {}ms (waiting for {:.0}s so far)",
            delay.as_millis(),
            clock.now().saturating_duration_since(start).as_secs_f64()
        );
        match bounds.stop {
            None => clock.sleep(delay),
            // In slices, so that a stop request is seen soon.
            Some(_) => {
                let end = clock.now() + delay;
                loop {
                    let now = clock.now();
                    if now >= end || stopped() {
                        break;
                    }
                    clock.sleep((end - now).min(STOP_POLL));
                }
            }
        }
    }
}

/// How often a back-off sleep looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A clock that only moves when slept on, recording each sleep.
    struct FakeClock {
        t: RefCell<Instant>,
        sleeps: RefCell<Vec<Duration>>,
    }

    impl Clock for FakeClock {
        fn now(&self) -> Instant {
            *self.t.borrow()
        }
        fn sleep(&self, d: Duration) {
            *self.t.borrow_mut() += d;
            self.sleeps.borrow_mut().push(d);
        }
    }

    fn fake() -> FakeClock {
        FakeClock {
            t: RefCell::new(Instant::now()),
            sleeps: RefCell::new(Vec::new()),
        }
    }

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn schedule_doubles_to_five_seconds() {
        let c = fake();
        let mut n = 0;
        let r = run("x", None, &c, |_| {
            n += 1;
            if n < 10 {
                Err(Failure::retry(anyhow!("503")))
            } else {
                Ok(n)
            }
        });
        assert_eq!(r.unwrap(), 10);
        assert_eq!(
            *c.sleeps.borrow(),
            ms(&[100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000])
        );
    }

    #[test]
    fn fatal_stops_at_once() {
        let c = fake();
        let r: Result<()> = run("x", None, &c, |_| Err(Failure::fatal(anyhow!("404"))));
        assert!(r.unwrap_err().to_string().contains("404"));
        assert!(c.sleeps.borrow().is_empty());
    }

    #[test]
    fn total_bounds_the_whole_fetch() {
        let c = fake();
        let mut lefts = Vec::new();
        let r: Result<()> = run("x", Some(Duration::from_secs(2)), &c, |left| {
            lefts.push(left.unwrap());
            Err(Failure::retry(anyhow!("reset")))
        });
        let e = format!("{:#}", r.unwrap_err());
        assert!(e.contains("httpTotal"), "{e}");
        // 100+200+400+800 = 1.5 s slept; the next 1.6 s would pass the 2 s limit.
        assert_eq!(*c.sleeps.borrow(), ms(&[100, 200, 400, 800]));
        assert_eq!(lefts[0], Duration::from_secs(2));
        assert_eq!(lefts[4], Duration::from_millis(500));
    }

    #[test]
    fn a_named_limit_and_a_stop_request() {
        let c = fake();
        let bounds = Bounds {
            total: Some((Duration::from_secs(20), "timeouts.httpTotal")),
            stop: None,
        }
        .at_most(Some((Duration::from_secs(1), "the wait for X")))
        .at_most(None);
        let r: Result<()> = run_bounded("x", bounds, &c, |_| Err(Failure::retry(anyhow!("503"))));
        let e = format!("{:#}", r.unwrap_err());
        assert!(
            e.starts_with("giving up on x after 4 attempts: the wait for X of 1s exceeded"),
            "{e}"
        );
        // Set before the first attempt: none is made.
        let stop = AtomicBool::new(true);
        let c = fake();
        let bounds = Bounds {
            total: None,
            stop: Some(&stop),
        };
        let r: Result<()> = run_bounded("y", bounds, &c, |_| panic!("an attempt"));
        assert!(r.unwrap_err().downcast_ref::<Stopped>().is_some());
        // Set by a failing attempt (another source answered meanwhile): no retry.
        let stop = AtomicBool::new(false);
        let bounds = Bounds {
            total: None,
            stop: Some(&stop),
        };
        let mut n = 0;
        let r: Result<()> = run_bounded("z", bounds, &c, |_| {
            n += 1;
            stop.store(true, Ordering::SeqCst);
            Err(Failure::retry(anyhow!("reset")))
        });
        assert_eq!(n, 1);
        let e = format!("{:#}", r.unwrap_err());
        assert!(
            e.contains("z: stopped (another source answered first): reset"),
            "{e}"
        );
    }

    #[test]
    fn backoff_never_overflows() {
        assert_eq!(backoff(0), Duration::from_millis(100));
        assert_eq!(backoff(5), Duration::from_millis(3200));
        assert_eq!(backoff(40), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
