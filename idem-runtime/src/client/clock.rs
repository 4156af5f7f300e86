//! Time and randomness, injectable so tests and simulations are deterministic.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use rand::{Rng, SeedableRng};

/// A boxed sleep, as returned by [`Clock::sleep`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The retry client's view of time.
///
/// Three things need it: the monotonic clock that bounds each call by its
/// deadline, the wall clock that turns an HTTP-date `Retry-After` into a
/// wait, and the sleeps between (and the timeouts around) attempts.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Monotonic now, for deadlines and timeouts.
    fn now(&self) -> Instant;
    /// Wall-clock now, only for `Retry-After: <HTTP-date>`.
    fn system_time(&self) -> SystemTime;
    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// The default clock: tokio's timer, so `tokio::time::pause()` and
/// `#[tokio::test(start_paused = true)]` drive it in virtual time.
///
/// The wall clock is the system's unless the clock is
/// [anchored](TokioClock::anchored), in which case it starts at the anchor and
/// advances with tokio's (possibly paused) clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock {
    anchor: Option<(tokio::time::Instant, SystemTime)>,
}

impl TokioClock {
    /// The default: tokio's monotonic clock, the system's wall clock.
    pub fn new() -> Self {
        Self { anchor: None }
    }

    /// A clock whose wall time reads `wall` now and then advances with
    /// tokio's clock: with paused time, HTTP-date arithmetic becomes exact.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::time::{Duration, SystemTime};
    /// use idem_runtime::client::{Clock, TokioClock};
    /// let noon = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    /// let clock = TokioClock::anchored(noon);
    /// assert!(clock.system_time() >= noon);
    /// # }
    /// ```
    pub fn anchored(wall: SystemTime) -> Self {
        Self {
            anchor: Some((tokio::time::Instant::now(), wall)),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn system_time(&self) -> SystemTime {
        match self.anchor {
            None => SystemTime::now(),
            Some((start, wall)) => {
                let elapsed = tokio::time::Instant::now().saturating_duration_since(start);
                wall.checked_add(elapsed).unwrap_or(wall)
            }
        }
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A source of uniform random numbers for jitter.
///
/// Jitter only works when every client draws its own numbers: a fleet seeded
/// alike would retry in lockstep again. Use [`ThreadRandom`] in production and
/// [`SeededRandom`] in tests and simulations.
pub trait RandomSource: Send + Sync + fmt::Debug + 'static {
    /// A number uniformly distributed in `[0, 1)`. Values outside that range
    /// (or NaN) are clamped by the callers, never trusted.
    fn unit(&self) -> f64;
}

/// The default random source: the thread-local generator from `rand`,
/// seeded from the operating system.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRandom;

impl RandomSource for ThreadRandom {
    fn unit(&self) -> f64 {
        rand::rng().random::<f64>()
    }
}

/// A reproducible random source for tests and simulations.
///
/// ```
/// use idem_runtime::client::{RandomSource, SeededRandom};
/// let a = SeededRandom::new(7);
/// let b = SeededRandom::new(7);
/// assert_eq!(a.unit(), b.unit());
/// ```
#[derive(Debug)]
pub struct SeededRandom {
    rng: Mutex<rand::rngs::StdRng>,
}

impl SeededRandom {
    /// A generator that always yields the same sequence for `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)),
        }
    }
}

impl RandomSource for SeededRandom {
    fn unit(&self) -> f64 {
        // A poisoned lock only means another thread panicked mid-draw; the
        // generator state is still usable.
        let mut rng = self.rng.lock().unwrap_or_else(|poison| poison.into_inner());
        rng.random::<f64>()
    }
}

/// Clamps a draw from a [`RandomSource`] into `[0, 1]`.
pub(crate) fn unit_from(random: &dyn RandomSource) -> f64 {
    let u = random.unit();
    if u.is_finite() {
        u.clamp(0.0, 1.0)
    } else {
        0.0
    }
}
