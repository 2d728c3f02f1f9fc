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

/// Fails unless the work of `run(2n)` is less than 2.5 times that of `run(n)` (n log n with a
/// binary search stays near 2.2x; anything quadratic is near 4x). For the linearity tests of
/// this crate and of `butane`.
#[cfg(any(test, feature = "work-count"))]
pub fn assert_linear(what: &str, n: usize, run: impl Fn(usize)) {
    let (_, small) = measure(|| run(n));
    let (_, big) = measure(|| run(2 * n));
    assert!(small > 0, "{what}: no work counted");
    let ratio = big as f64 / small as f64;
    eprintln!(
        "{what}: work {small} -> {big} ({ratio:.2}x) for {n} -> {}",
        2 * n
    );
    assert!(
        ratio < 2.5,
        "{what}: work grew {ratio:.2}x ({small} -> {big}) when the input doubled from {n}"
    );
}
