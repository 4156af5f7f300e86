//! What this process knows of its database, and the bounded wait for a
//! connection that a request's claim begins with.
//!
//! A request that finds no connection is refused within the store wait
//! (`store-wait`, 500ms by default) or the caller's remaining deadline,
//! whichever is sooner, rather than queueing for the pool's own acquire
//! timeout. Once the database is known to be unreachable (a connection
//! refused, or nothing answering for twice the bound), requests are refused
//! at once, without touching the pool, and one request at a time goes
//! through as a probe: the first that gets a connection closes the outage.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Shortest spacing of probes while the database is down.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// `Retry-After` bounds while the database is down: half the outage's age,
/// within these.
const DOWN_RETRY_MIN: Duration = Duration::from_secs(1);
const DOWN_RETRY_MAX: Duration = Duration::from_secs(10);

/// What the store has seen of its database, shared by clones of a store.
#[derive(Debug)]
pub(crate) struct Health {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// When the current outage began; `None` while the database answers.
    down_since: Option<Instant>,
    /// When the next probe may go; a probe in flight pushes it forward.
    next_probe: Instant,
    /// The last time a connection was handed out and answered.
    last_success: Instant,
}

impl Default for Health {
    fn default() -> Self {
        let now = Instant::now();
        Health {
            state: Mutex::new(State {
                down_since: None,
                next_probe: now,
                last_success: now,
            }),
        }
    }
}

/// Whether a request may try for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// The database answers: wait for a connection, bounded.
    Go,
    /// The database is down, and this request is the probe.
    Probe,
    /// The database has been down this long: refuse at once.
    Refuse(Duration),
}

/// How an attempt to open a transaction failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No connection within the bound.
    Timeout,
    /// The database refused a new connection, or is starting or stopping.
    Unreachable,
    /// A pooled connection turned out dead (its backend was terminated or
    /// the server restarted); the pool discards it, another may work.
    Lost,
    /// Any other error: the database answered.
    Other,
}

impl Health {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `bound` is how long the request may wait for a connection: a probe
    /// that never reports (its caller gave up) holds the next back no longer.
    pub(crate) fn admit(&self, bound: Duration) -> Admit {
        let now = Instant::now();
        let mut state = self.state();
        let Some(since) = state.down_since else {
            return Admit::Go;
        };
        if now >= state.next_probe {
            // One probe at a time: the next may go when this one has had
            // its chance, or sooner when it reports.
            state.next_probe = now + bound + PROBE_EVERY;
            return Admit::Probe;
        }
        Admit::Refuse(now - since)
    }

    /// A transaction began: the database answers.
    pub(crate) fn answered(&self) {
        let now = Instant::now();
        let mut state = self.state();
        state.last_success = now;
        if let Some(since) = state.down_since.take() {
            metrics::gauge!(crate::metric::STORE_OUTAGE).set(0.0);
            tracing::warn!(
                down_ms = u64::try_from((now - since).as_millis()).unwrap_or(u64::MAX),
                "the database answers again; keyed requests are admitted"
            );
        }
    }

    /// An attempt failed. Returns how long the database has been down, if
    /// this failure shows (or confirms) that it is.
    pub(crate) fn failed(&self, failure: Failure, bound: Duration) -> Option<Duration> {
        let now = Instant::now();
        let mut state = self.state();
        let down = match failure {
            Failure::Unreachable => true,
            // A wait that timed out while others got connections is a busy
            // pool; with nothing answering for twice the bound, it is a
            // database that stopped answering.
            Failure::Timeout => state.down_since.is_some() || now - state.last_success >= bound * 2,
            Failure::Lost | Failure::Other => false,
        };
        if !down {
            if state.down_since.is_some() {
                // A probe that did not settle it: the next may go soon.
                state.next_probe = now + PROBE_EVERY;
            }
            return None;
        }
        let since = *state.down_since.get_or_insert_with(|| {
            metrics::gauge!(crate::metric::STORE_OUTAGE).set(1.0);
            tracing::warn!(
                "the database is unreachable; keyed requests are refused at once \
                 (503, Retry-After) until a probe gets a connection"
            );
            now
        });
        state.next_probe = now + PROBE_EVERY;
        Some(now - since)
    }
}

impl Health {
    /// A request waited `waited` for a connection and was dropped by its
    /// caller before the bound. A long enough wait is a timeout like any
    /// other: callers whose attempts time out before the store wait (a
    /// client's per-attempt timeout is often shorter) must not keep the
    /// server from learning that the database stopped answering.
    pub(crate) fn abandoned(&self, waited: Duration) {
        if waited >= ABANDONED_COUNTS {
            self.failed(Failure::Timeout, waited);
        }
    }
}

/// The shortest abandoned wait that says something about the database.
const ABANDONED_COUNTS: Duration = Duration::from_millis(100);

/// What `Retry-After` says to a caller refused while the database has been
/// down for `down`: half the outage's age, from 1s to 10s. A short blip (a
/// restart) brings callers back in a second; a long outage spaces them out.
pub(crate) fn down_retry_after(down: Duration) -> Duration {
    (down / 2).clamp(DOWN_RETRY_MIN, DOWN_RETRY_MAX)
}

/// Sorts an error from opening a transaction.
pub(crate) fn classify(error: &sqlx::Error) -> Failure {
    use std::io::ErrorKind;
    match error {
        sqlx::Error::PoolTimedOut => Failure::Timeout,
        sqlx::Error::Io(e) => match e.kind() {
            ErrorKind::ConnectionRefused
            | ErrorKind::NotFound
            | ErrorKind::TimedOut
            | ErrorKind::AddrNotAvailable
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable => Failure::Unreachable,
            _ => Failure::Lost,
        },
        sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => {
            Failure::Lost
        }
        sqlx::Error::PoolClosed => Failure::Unreachable,
        sqlx::Error::Database(db) => match db.code().as_deref() {
            // cannot_connect_now: starting up or shutting down.
            Some("57P03") => Failure::Unreachable,
            // admin_shutdown, crash_shutdown, and the connection exceptions.
            Some(code) if code.starts_with("57P") || code.starts_with("08") => Failure::Lost,
            _ => Failure::Other,
        },
        _ => Failure::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_database_is_refused_at_once_with_one_probe_at_a_time() {
        let health = Health::default();
        let bound = Duration::from_millis(500);
        assert_eq!(health.admit(bound), Admit::Go);
        assert_eq!(health.failed(Failure::Lost, bound), None);
        assert_eq!(
            health.admit(bound),
            Admit::Go,
            "a dead pooled connection is not an outage"
        );
        assert!(health.failed(Failure::Unreachable, bound).is_some());
        assert!(matches!(health.admit(bound), Admit::Refuse(_)));
        // After the spacing, one probe goes; the others are still refused.
        std::thread::sleep(PROBE_EVERY + Duration::from_millis(5));
        assert_eq!(health.admit(bound), Admit::Probe);
        assert!(matches!(health.admit(bound), Admit::Refuse(_)));
        // A failed probe lets the next go after the spacing, not the bound.
        assert!(health.failed(Failure::Unreachable, bound).is_some());
        std::thread::sleep(PROBE_EVERY + Duration::from_millis(5));
        assert_eq!(health.admit(bound), Admit::Probe);
        health.answered();
        assert_eq!(health.admit(bound), Admit::Go);
    }

    #[test]
    fn a_timeout_is_an_outage_only_when_nothing_answered_for_twice_the_bound() {
        let health = Health::default();
        let bound = Duration::from_millis(20);
        health.answered();
        assert_eq!(health.failed(Failure::Timeout, bound), None, "a busy pool");
        std::thread::sleep(bound * 2);
        assert!(health.failed(Failure::Timeout, bound).is_some());
        assert!(matches!(health.admit(bound), Admit::Refuse(_)));
    }

    #[test]
    fn an_abandoned_wait_counts_when_long_and_nothing_answered() {
        let health = Health::default();
        health.abandoned(Duration::from_millis(5));
        assert_eq!(health.admit(Duration::from_millis(500)), Admit::Go);
        std::thread::sleep(Duration::from_millis(250));
        health.abandoned(Duration::from_millis(120));
        assert!(matches!(
            health.admit(Duration::from_millis(500)),
            Admit::Refuse(_)
        ));
    }

    #[test]
    fn retry_after_grows_with_the_outage_within_its_bounds() {
        assert_eq!(down_retry_after(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(
            down_retry_after(Duration::from_secs(6)),
            Duration::from_secs(3)
        );
        assert_eq!(
            down_retry_after(Duration::from_secs(600)),
            Duration::from_secs(10)
        );
    }
}
