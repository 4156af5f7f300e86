//! Errors of a logical call, each carrying the key and the attempts made.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

use super::class::RetryClass;
use super::key::IdempotencyKey;

/// What went wrong with one attempt.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttemptError {
    /// The server answered with a failure status.
    #[error("server answered {status}")]
    Status {
        /// The status.
        status: StatusCode,
    },
    /// The per-attempt timeout fired before the response headers arrived.
    #[error("attempt timed out after {}", Ms(*after))]
    TimedOut {
        /// The timeout that fired.
        after: Duration,
    },
    /// The response headers arrived (with `status`) but the body did not
    /// finish inside the attempt's timeout: the server acted, its answer is lost.
    #[error("response body stalled: {status} arrived but the body did not finish within {}", Ms(*after))]
    BodyStalled {
        /// The status the headers carried.
        status: StatusCode,
        /// The attempt timeout that fired.
        after: Duration,
    },
    /// No connection could be made: the request never left the client.
    #[error("could not connect ({})", chain(source))]
    Connect {
        /// The transport error.
        source: reqwest::Error,
    },
    /// The connection failed after the request may have been sent.
    #[error("connection failed mid-request ({})", chain(source))]
    Connection {
        /// The transport error.
        source: reqwest::Error,
    },
    /// The circuit breaker for the host refused the attempt locally.
    #[error("circuit breaker for {host} is open")]
    CircuitOpen {
        /// `host:port` of the refused attempt.
        host: String,
    },
    /// `409 idempotency_key_in_use`: an attempt with this key is still
    /// running on the server.
    #[error(
        "an earlier attempt with this idempotency key is still in flight (idempotency_key_in_use)"
    )]
    KeyInUse,
}

/// Why the client stopped retrying a failure it would otherwise retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUp {
    /// Every allowed attempt was made.
    AttemptsExhausted {
        /// The attempt limit.
        max: u32,
    },
    /// The shared retry budget is empty: retries are paused fleet-wide.
    BudgetExhausted,
    /// 500 is retried at most once per call, and this was the second.
    ServerErrorRetriedOnce,
    /// The server said `X-Should-Retry: false` (or `Stripe-Should-Retry: false`).
    ServerDeclined,
    /// The server asked for a wait longer than the time left.
    RetryAfterBeyondDeadline {
        /// What the server asked for.
        retry_after: Duration,
        /// Time left before the deadline.
        remaining: Duration,
    },
    /// The next wait (backoff or breaker cool-down) would end past the deadline.
    DeadlineTooClose {
        /// The wait the schedule asked for.
        wait: Duration,
        /// Time left before the deadline.
        remaining: Duration,
    },
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GiveUp::AttemptsExhausted { max } => write!(f, "all {max} attempts used"),
            GiveUp::BudgetExhausted => {
                f.write_str("the retry budget is empty, so retries are paused")
            }
            GiveUp::ServerErrorRetriedOnce => f.write_str("500 is retried at most once"),
            GiveUp::ServerDeclined => f.write_str("the server sent X-Should-Retry: false"),
            GiveUp::RetryAfterBeyondDeadline {
                retry_after,
                remaining,
            } => write!(
                f,
                "the server asked to wait {} but the deadline leaves {}",
                Ms(retry_after),
                Ms(remaining)
            ),
            GiveUp::DeadlineTooClose { wait, remaining } => write!(
                f,
                "the next wait of {} would pass the deadline ({} left)",
                Ms(wait),
                Ms(remaining)
            ),
        }
    }
}

/// Why a logical call failed. Every variant names the operation and carries
/// the idempotency key (if one was sent) and the attempts made, so the caller
/// can log it, reconcile, or try again later **with the same key**.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetryError {
    /// The request may have reached the server, its outcome is unknown, and
    /// the operation's class forbids sending it again.
    #[error("{operation}: outcome unknown after {attempts} attempt(s): {last}; not re-sent: {why}")]
    OutcomeUnknown {
        /// Operation name.
        operation: &'static str,
        /// Its retry class (`unsafe` or `unsafe-documented`).
        class: RetryClass,
        /// The key sent, if the caller supplied one.
        key: Option<IdempotencyKey>,
        /// Attempts made.
        attempts: u32,
        /// Why it was not re-sent, including the operation's documented
        /// warning when it has one.
        why: String,
        /// The failure that left the outcome unknown.
        #[source]
        last: AttemptError,
    },
    /// A retryable failure persisted until a limit stopped the retries.
    #[error("{operation}: gave up after {attempts} attempt(s): {last}; {reason}{}", key_note(.key.as_ref()))]
    GaveUp {
        /// Operation name.
        operation: &'static str,
        /// The key sent on every attempt, if any: reuse it to try again.
        key: Option<IdempotencyKey>,
        /// Attempts made.
        attempts: u32,
        /// The limit that stopped the retries.
        reason: GiveUp,
        /// The last attempt's failure.
        #[source]
        last: AttemptError,
    },
    /// The overall deadline ran out: the last attempt used the time that was
    /// left (its timeout is cut to fit the deadline) and failed with no time
    /// remaining. Distinct from [`GiveUp::DeadlineTooClose`], where time was
    /// left but the next wait would not fit in it; ask
    /// [`RetryError::is_deadline`] to cover both.
    #[error("{operation}: deadline of {} exceeded after {attempts} attempt(s){}{}", Ms(*deadline), last_note(.last.as_ref()), key_note(.key.as_ref()))]
    DeadlineExceeded {
        /// Operation name.
        operation: &'static str,
        /// The key sent on every attempt, if any.
        key: Option<IdempotencyKey>,
        /// Attempts made.
        attempts: u32,
        /// The configured overall deadline.
        deadline: Duration,
        /// The failure of the attempt the deadline cut short, if one was made.
        #[source]
        last: Option<AttemptError>,
    },
    /// `idempotency_key_in_use`: an earlier attempt with this key was still
    /// running on the server when the client had to stop waiting for it.
    /// Retry later with the same key to get its stored result.
    #[error("{operation}: idempotency key still in use on the server after {attempts} attempt(s); {reason}{}", key_note(.key.as_ref()))]
    KeyInUse {
        /// Operation name.
        operation: &'static str,
        /// The key in use.
        key: Option<IdempotencyKey>,
        /// Attempts made.
        attempts: u32,
        /// The server's last `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
        /// The limit that stopped the waiting.
        reason: GiveUp,
    },
    /// `idempotency_key_reused`: the key was already used for a different
    /// request. Never retried: it is a bug in how the caller derives keys.
    #[error("{operation}: idempotency key was already used for a different request (idempotency_key_reused, {status}){}", key_note(.key.as_ref()))]
    KeyReused {
        /// Operation name.
        operation: &'static str,
        /// The reused key.
        key: Option<IdempotencyKey>,
        /// Attempts made.
        attempts: u32,
        /// The conflict status (409, or 422 where so configured).
        status: StatusCode,
    },
    /// The request could not be built or sent for a reason a retry cannot
    /// fix (invalid URL, body error, redirect loop).
    #[error("{operation}: request failed and is not retryable ({}){}", chain(source), key_note(.key.as_ref()))]
    Request {
        /// Operation name.
        operation: &'static str,
        /// The key, if any.
        key: Option<IdempotencyKey>,
        /// Attempts made.
        attempts: u32,
        /// The reqwest error.
        #[source]
        source: reqwest::Error,
    },
}

impl RetryError {
    /// The operation's name.
    pub fn operation(&self) -> &'static str {
        match self {
            RetryError::OutcomeUnknown { operation, .. }
            | RetryError::GaveUp { operation, .. }
            | RetryError::DeadlineExceeded { operation, .. }
            | RetryError::KeyInUse { operation, .. }
            | RetryError::KeyReused { operation, .. }
            | RetryError::Request { operation, .. } => operation,
        }
    }

    /// The idempotency key sent on every attempt, if any: keep it to try the
    /// same logical operation again later.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        match self {
            RetryError::OutcomeUnknown { key, .. }
            | RetryError::GaveUp { key, .. }
            | RetryError::DeadlineExceeded { key, .. }
            | RetryError::KeyInUse { key, .. }
            | RetryError::KeyReused { key, .. }
            | RetryError::Request { key, .. } => key.as_ref(),
        }
    }

    /// Attempts made (requests sent, or refused locally by the breaker).
    pub fn attempts(&self) -> u32 {
        match self {
            RetryError::OutcomeUnknown { attempts, .. }
            | RetryError::GaveUp { attempts, .. }
            | RetryError::DeadlineExceeded { attempts, .. }
            | RetryError::KeyInUse { attempts, .. }
            | RetryError::KeyReused { attempts, .. }
            | RetryError::Request { attempts, .. } => *attempts,
        }
    }

    /// Whether the call's deadline is what ended it: it ran out
    /// ([`RetryError::DeadlineExceeded`]), or the next wait (backoff,
    /// `Retry-After`, a breaker cool-down) would have passed it.
    pub fn is_deadline(&self) -> bool {
        let deadline_reason = |reason: &GiveUp| {
            matches!(
                reason,
                GiveUp::DeadlineTooClose { .. } | GiveUp::RetryAfterBeyondDeadline { .. }
            )
        };
        match self {
            RetryError::DeadlineExceeded { .. } => true,
            RetryError::GaveUp { reason, .. } | RetryError::KeyInUse { reason, .. } => {
                deadline_reason(reason)
            }
            _ => false,
        }
    }

    /// Whether the server may have performed the operation although the
    /// call failed: reconcile before doing it again.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, RetryError::OutcomeUnknown { .. })
    }
}

fn last_note(last: Option<&AttemptError>) -> String {
    last.map(|e| format!(" (last attempt: {e})"))
        .unwrap_or_default()
}

fn key_note(key: Option<&IdempotencyKey>) -> String {
    key.map(|k| format!(" (idempotency key {k}: reuse it to retry later)"))
        .unwrap_or_default()
}

/// An error and its sources on one line.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    text
}

/// A duration printed in milliseconds (or seconds past ten of them).
#[derive(Clone, Copy)]
pub(crate) struct Ms(pub(crate) Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms >= 10_000 {
            write!(f, "{}s", self.0.as_secs())
        } else {
            write!(f, "{ms}ms")
        }
    }
}
