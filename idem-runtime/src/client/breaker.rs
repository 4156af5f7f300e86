//! An optional circuit breaker, one per host.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// When a host's breaker opens, and for how long.
///
/// The breaker watches the outcome of the last `window` attempts to one host
/// (a rate over a window, so two unlucky calls to a quiet host do not trip
/// it). Once at least `min_calls` are recorded and the share of failures
/// reaches `failure_rate`, it opens: attempts to that host fail locally,
/// without touching the network, for `open_for`. Then a single trial request
/// is let through (half-open): success closes the breaker, failure reopens it.
///
/// Failures are connection errors, timeouts and 500/502/503/504. A 429 or any
/// other answer counts as success: the host is up and talking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Attempts remembered per host (default 20).
    pub window: u32,
    /// Attempts needed before the rate is trusted (default 10).
    pub min_calls: u32,
    /// Failure share in `[0, 1]` that opens the breaker (default 0.5).
    pub failure_rate: f64,
    /// How long an open breaker refuses before its trial (default 10 s).
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            window: 20,
            min_calls: 10,
            failure_rate: 0.5,
            open_for: Duration::from_secs(10),
        }
    }
}

/// The state of one host's breaker, as reported in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CircuitState {
    /// Attempts flow normally.
    Closed,
    /// Attempts are refused locally until the trial.
    Open,
    /// One trial attempt is allowed (or in flight); the rest are refused.
    HalfOpen,
}

/// Per-host circuit breakers sharing one configuration. Cloning shares state.
///
/// It sits *inside* the retry loop: retry → circuit breaker → (your rate
/// limiter, if any, in the request closure) → call. A refused attempt is not
/// sent, so it costs no retry budget, but it does count as an attempt.
///
/// ```
/// use std::time::Instant;
/// use idem_runtime::client::{BreakerConfig, CircuitBreaker, CircuitState};
/// let breaker = CircuitBreaker::new(BreakerConfig { min_calls: 2, window: 2, ..Default::default() });
/// let now = Instant::now();
/// for _ in 0..2 {
///     breaker.acquire("api.example:443", now).map(|permit| permit.record(true, now)).ok();
/// }
/// assert_eq!(breaker.state("api.example:443"), CircuitState::Open);
/// assert!(breaker.acquire("api.example:443", now).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    config: BreakerConfig,
    hosts: Mutex<HashMap<String, Host>>,
}

#[derive(Debug, Default)]
struct Host {
    mode: Mode,
    /// `true` for a failure, newest last.
    outcomes: VecDeque<bool>,
}

#[derive(Debug, Default, Clone, Copy)]
enum Mode {
    #[default]
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen {
        trial_in_flight: bool,
    },
}

/// A refused attempt: the breaker for this host is open (or its single
/// trial is already in flight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// How long until the breaker lets a trial through (zero while another
    /// caller's trial is in flight).
    pub retry_in: Duration,
}

/// Leave to send one attempt. Report its outcome with [`Permit::record`];
/// dropping it unrecorded (a cancelled call) frees a half-open trial slot.
#[derive(Debug)]
pub struct Permit {
    breaker: CircuitBreaker,
    host: String,
    trial: bool,
    recorded: bool,
}

impl CircuitBreaker {
    /// Breakers for every host, all closed.
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            inner: Arc::new(Shared {
                config,
                hosts: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> BreakerConfig {
        self.inner.config
    }

    /// The current state for `host` (closed if never seen).
    pub fn state(&self, host: &str) -> CircuitState {
        match self.hosts().get(host).map(|h| h.mode) {
            None | Some(Mode::Closed) => CircuitState::Closed,
            Some(Mode::Open { .. }) => CircuitState::Open,
            Some(Mode::HalfOpen { .. }) => CircuitState::HalfOpen,
        }
    }

    /// Every host seen so far with its state, sorted by host.
    pub fn states(&self) -> Vec<(String, CircuitState)> {
        let hosts: Vec<String> = self.hosts().keys().cloned().collect();
        let mut states: Vec<_> = hosts
            .into_iter()
            .map(|h| (h.clone(), self.state(&h)))
            .collect();
        states.sort_by(|a, b| a.0.cmp(&b.0));
        states
    }

    /// Asks to send one attempt to `host` at `now`.
    pub fn acquire(&self, host: &str, now: Instant) -> Result<Permit, Refused> {
        let mut hosts = self.hosts();
        let entry = hosts.entry(host.to_owned()).or_default();
        let trial = match entry.mode {
            Mode::Closed => false,
            Mode::Open { until } if now < until => {
                return Err(Refused {
                    retry_in: until.saturating_duration_since(now),
                });
            }
            Mode::Open { .. }
            | Mode::HalfOpen {
                trial_in_flight: false,
            } => {
                entry.mode = Mode::HalfOpen {
                    trial_in_flight: true,
                };
                true
            }
            Mode::HalfOpen {
                trial_in_flight: true,
            } => {
                return Err(Refused {
                    retry_in: Duration::ZERO,
                });
            }
        };
        drop(hosts);
        Ok(Permit {
            breaker: self.clone(),
            host: host.to_owned(),
            trial,
            recorded: false,
        })
    }

    fn hosts(&self) -> MutexGuard<'_, HashMap<String, Host>> {
        self.inner
            .hosts
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

impl Permit {
    /// Reports the attempt's outcome (`failure` as defined on
    /// [`BreakerConfig`]) at `now`.
    pub fn record(mut self, failure: bool, now: Instant) {
        self.recorded = true;
        let config = self.breaker.inner.config;
        let mut hosts = self.breaker.hosts();
        let host = hosts.entry(self.host.clone()).or_default();
        if self.trial {
            host.outcomes.clear();
            host.mode = if failure {
                Mode::Open {
                    until: now.checked_add(config.open_for).unwrap_or(now),
                }
            } else {
                Mode::Closed
            };
            open_gauge(&self.host, failure);
            return;
        }
        if !matches!(host.mode, Mode::Closed) {
            // A late answer from before the breaker opened: the trial decides.
            return;
        }
        host.outcomes.push_back(failure);
        while host.outcomes.len() > config.window.max(1) as usize {
            host.outcomes.pop_front();
        }
        let calls = host.outcomes.len();
        let failures = host.outcomes.iter().filter(|f| **f).count();
        if calls >= config.min_calls.max(1) as usize
            && failures as f64 >= config.failure_rate * calls as f64
        {
            host.outcomes.clear();
            host.mode = Mode::Open {
                until: now.checked_add(config.open_for).unwrap_or(now),
            };
            open_gauge(&self.host, true);
        }
    }
}

/// `idem_client_breaker_open{host}`: 1 from the moment the breaker opens
/// for `host` until a trial closes it again.
fn open_gauge(host: &str, open: bool) {
    metrics::gauge!(crate::metric::CLIENT_BREAKER_OPEN, "host" => host.to_owned()).set(if open {
        1.0
    } else {
        0.0
    });
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.recorded || !self.trial {
            return;
        }
        let mut hosts = self.breaker.hosts();
        if let Some(host) = hosts.get_mut(&self.host)
            && matches!(
                host.mode,
                Mode::HalfOpen {
                    trial_in_flight: true
                }
            )
        {
            host.mode = Mode::HalfOpen {
                trial_in_flight: false,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tripped(now: Instant) -> CircuitBreaker {
        let breaker = CircuitBreaker::new(BreakerConfig {
            window: 4,
            min_calls: 4,
            failure_rate: 0.5,
            open_for: Duration::from_secs(10),
        });
        for failure in [false, true, false, true] {
            breaker.acquire("h", now).unwrap().record(failure, now);
        }
        breaker
    }

    #[test]
    fn opens_on_the_failure_rate_and_refuses_until_the_trial() {
        let now = Instant::now();
        let breaker = tripped(now);
        assert_eq!(breaker.state("h"), CircuitState::Open);
        assert_eq!(breaker.state("other"), CircuitState::Closed);
        let refused = breaker
            .acquire("h", now + Duration::from_secs(4))
            .unwrap_err();
        assert_eq!(refused.retry_in, Duration::from_secs(6));
    }

    #[test]
    fn half_open_lets_exactly_one_trial_through() {
        let now = Instant::now();
        let breaker = tripped(now);
        let later = now + Duration::from_secs(10);
        let trial = breaker.acquire("h", later).unwrap();
        assert_eq!(breaker.state("h"), CircuitState::HalfOpen);
        assert!(breaker.acquire("h", later).is_err());
        trial.record(false, later);
        assert_eq!(breaker.state("h"), CircuitState::Closed);
        assert!(breaker.acquire("h", later).is_ok());
    }

    #[test]
    fn a_failed_trial_reopens_and_a_dropped_one_frees_the_slot() {
        let now = Instant::now();
        let breaker = tripped(now);
        let later = now + Duration::from_secs(10);
        drop(breaker.acquire("h", later).unwrap());
        let trial = breaker.acquire("h", later).unwrap();
        trial.record(true, later);
        assert_eq!(breaker.state("h"), CircuitState::Open);
        assert!(
            breaker
                .acquire("h", later + Duration::from_secs(9))
                .is_err()
        );
    }
}
