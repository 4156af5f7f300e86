//! Backoff with jitter: how long to wait before the next attempt.

use std::time::Duration;

use super::clock::{RandomSource, unit_from};

/// The delay schedule between attempts. Every variant is jittered: plain
/// exponential backoff keeps a fleet that failed together in lockstep, so it
/// is deliberately not offered.
///
/// `retry` below counts retries already made in this logical call, from 0:
/// the wait before the first retry uses `retry = 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backoff {
    /// `random(0, min(cap, base · 2^retry))`: the default. Least total work
    /// for a fleet, at a slightly longer time to success.
    FullJitter {
        /// The first window's upper bound.
        base: Duration,
        /// The largest window.
        cap: Duration,
    },
    /// `min(cap, random(base, 3 · previous))`, with `previous` the last wait
    /// (at least `base`). Finishes sooner than full jitter for somewhat more
    /// work: pick it for user-facing calls under a tight deadline.
    DecorrelatedJitter {
        /// The smallest wait, and the first window's lower bound.
        base: Duration,
        /// The largest wait.
        cap: Duration,
    },
}

impl Default for Backoff {
    /// Full jitter, base 100 ms, cap 10 s (`x-retry` defaults).
    fn default() -> Self {
        Backoff::FullJitter {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    /// Full jitter with the given base and cap.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem_runtime::client::Backoff;
    /// let b = Backoff::full_jitter(Duration::from_millis(100), Duration::from_secs(10));
    /// assert_eq!(b.ceiling(3), Duration::from_millis(800));
    /// ```
    pub fn full_jitter(base: Duration, cap: Duration) -> Self {
        Backoff::FullJitter { base, cap }
    }

    /// Decorrelated jitter with the given base and cap.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem_runtime::client::{Backoff, SeededRandom};
    /// let b = Backoff::decorrelated_jitter(Duration::from_millis(100), Duration::from_secs(10));
    /// let wait = b.delay(0, Duration::ZERO, &SeededRandom::new(1));
    /// assert!(wait >= Duration::from_millis(100) && wait <= Duration::from_millis(300));
    /// ```
    pub fn decorrelated_jitter(base: Duration, cap: Duration) -> Self {
        Backoff::DecorrelatedJitter { base, cap }
    }

    /// The largest wait this schedule can return before retry number `retry`
    /// (full jitter: `min(cap, base · 2^retry)`; decorrelated: `cap`).
    pub fn ceiling(&self, retry: u32) -> Duration {
        match *self {
            Backoff::FullJitter { base, cap } => exponential(base, retry).min(cap),
            Backoff::DecorrelatedJitter { base, cap } => cap.max(base.min(cap)),
        }
    }

    /// The wait before retry number `retry`, given the previous wait
    /// (`Duration::ZERO` before the first retry).
    pub fn delay(&self, retry: u32, previous: Duration, random: &dyn RandomSource) -> Duration {
        let u = unit_from(random);
        match *self {
            Backoff::FullJitter { .. } => self.ceiling(retry).mul_f64(u),
            Backoff::DecorrelatedJitter { base, cap } => {
                let low = base.min(cap);
                let high = previous.max(low).saturating_mul(3);
                let wait = low.saturating_add(high.saturating_sub(low).mul_f64(u));
                wait.min(cap)
            }
        }
    }
}

/// `base · 2^retry`, saturating instead of overflowing.
fn exponential(base: Duration, retry: u32) -> Duration {
    let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
    base.saturating_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::SeededRandom;

    #[test]
    fn full_jitter_windows_double_then_cap() {
        let b = Backoff::full_jitter(Duration::from_millis(100), Duration::from_secs(10));
        let windows: Vec<_> = (0..9).map(|r| b.ceiling(r).as_millis()).collect();
        assert_eq!(
            windows,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
        );
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn delays_stay_in_their_window_even_with_a_bad_random_source() {
        #[derive(Debug)]
        struct Broken(f64);
        impl RandomSource for Broken {
            fn unit(&self) -> f64 {
                self.0
            }
        }
        let b = Backoff::full_jitter(Duration::from_millis(100), Duration::from_secs(10));
        for bad in [f64::NAN, -1.0, 7.0, f64::INFINITY] {
            assert!(b.delay(2, Duration::ZERO, &Broken(bad)) <= Duration::from_millis(400));
        }
        let d = Backoff::decorrelated_jitter(Duration::from_millis(100), Duration::from_secs(1));
        assert!(
            d.delay(0, Duration::from_secs(5), &SeededRandom::new(3)) <= Duration::from_secs(1)
        );
    }
}
