//! A count of the work done by the parsers, validators and translators (this crate's and
//! `butane`'s), for tests that prove their cost linear (or n log n) in the input: a test
//! doubles the input and checks that the count about doubles. Wall-clock time is too noisy
//! on shared machines to tell 2x from 4x; a count is exact.
//!
//! Every loop whose trip count depends on the input calls [`add`] (one unit per iteration, or
//! the length of a slice it scans), so a loop nested in another shows up as quadratic.
//! The count exists only in this crate's tests and with the `work-count` feature (which
//! `butane` turns on for its tests); otherwise [`add`] is empty and [`count`] is 0.

#[cfg(any(test, feature = "work-count"))]
thread_local! {
    static WORK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Records `n` units of work on this thread.
#[inline(always)]
pub fn add(n: usize) {
    #[cfg(any(test, feature = "work-count"))]
    WORK.with(|w| w.set(w.get().saturating_add(n as u64)));
    #[cfg(not(any(test, feature = "work-count")))]
    let _ = n;
}

/// The work recorded on this thread so far.
pub fn count() -> u64 {
    #[cfg(any(test, feature = "work-count"))]
    return WORK.with(|w| w.get());
    #[cfg(not(any(test, feature = "work-count")))]
    0
}

/// The work `f` does on this thread.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = count();
    let out = f();
    (out, count() - before)
}

/// Whether counting is compiled in (tests that rely on it check this first).
pub const ENABLED: bool = cfg!(any(test, feature = "work-count"));
