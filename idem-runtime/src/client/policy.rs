//! Per-client retry policy: attempts, backoff, deadline, timeouts, headers.

use std::time::Duration;

use http::HeaderName;

use super::backoff::Backoff;

/// The header that carries the idempotency key unless configured otherwise.
pub const DEFAULT_KEY_HEADER: &str = "idempotency-key";

/// The header that tells the server how long the caller will still wait, in
/// whole milliseconds: `Idem-Timeout-Ms: 29750`.
///
/// It is relative (time left when the attempt leaves the client), never an
/// absolute instant, so clock skew between machines does not matter. A
/// server should not start work it cannot finish within it, and should pass
/// the rest (minus its own time) to the services it calls.
pub const DEADLINE_HEADER: &str = "idem-timeout-ms";

/// How one logical call is retried. Defaults are `x-retry`'s: 3 attempts in
/// total, full jitter from 100 ms capped at 10 s, one 30 s deadline.
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::client::{Backoff, RetryPolicy};
/// let policy = RetryPolicy::default()
///     .max_attempts(4)
///     .backoff(Backoff::decorrelated_jitter(Duration::from_millis(50), Duration::from_secs(2)))
///     .deadline(Duration::from_secs(5))
///     .p99(Duration::from_millis(800));
/// assert_eq!(policy.attempt_timeout_for(Duration::from_secs(5), 4), Duration::from_millis(2400));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    pub(crate) max_attempts: u32,
    pub(crate) backoff: Backoff,
    pub(crate) deadline: Duration,
    pub(crate) p99: Option<Duration>,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) key_header: HeaderName,
    pub(crate) deadline_header: Option<HeaderName>,
    pub(crate) stream_body: bool,
    pub(crate) inner_retries: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            backoff: Backoff::default(),
            deadline: Duration::from_secs(30),
            p99: None,
            attempt_timeout: None,
            key_header: HeaderName::from_static(DEFAULT_KEY_HEADER),
            deadline_header: Some(HeaderName::from_static(DEADLINE_HEADER)),
            stream_body: false,
            inner_retries: 0,
        }
    }
}

impl RetryPolicy {
    /// Multiple of the measured p99 used as the per-attempt timeout.
    pub const P99_FACTOR: u32 = crate::protocol::P99_TIMEOUT_FACTOR;

    /// Retries allowed when the client is an inner hop, called while a
    /// server serves a request ([`crate::context`]): 0 by default (one
    /// attempt: the outer caller's retry is the one that sees the whole
    /// operation), at most 1. Outside a request, [`max_attempts`](Self::max_attempts) applies.
    ///
    /// ```
    /// # use idem_runtime::client::RetryPolicy;
    /// let one_more = RetryPolicy::default().inner_retries(1);
    /// # let _ = one_more;
    /// ```
    pub fn inner_retries(mut self, retries: u32) -> Self {
        self.inner_retries = retries.min(1);
        self
    }

    /// The policy of this client as an inner hop of `inbound`: its attempts
    /// cut to one plus its inner retries, its deadline to the inbound one
    /// less the reply margin when that is sooner.
    pub(crate) fn as_inner_hop(&self, inbound: &crate::context::Inbound) -> RetryPolicy {
        let mut policy = self.clone();
        policy.max_attempts = (1 + self.inner_retries).min(self.max_attempts);
        if let Some(left) = inbound.time_left() {
            let inherited = left.saturating_sub(crate::context::REPLY_MARGIN);
            policy.deadline = policy.deadline.min(inherited);
        }
        policy
    }

    /// Total attempts including the first (default 3; at least 1).
    ///
    /// ```
    /// # use idem_runtime::client::RetryPolicy;
    /// let no_retries = RetryPolicy::default().max_attempts(1);
    /// # let _ = no_retries;
    /// ```
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The wait schedule between attempts (default full jitter, 100 ms, 10 s).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use idem_runtime::client::{Backoff, RetryPolicy};
    /// let policy = RetryPolicy::default()
    ///     .backoff(Backoff::full_jitter(Duration::from_millis(200), Duration::from_secs(5)));
    /// # let _ = policy;
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// One overall deadline per logical call, covering every attempt and
    /// every wait (default 30 s). It is never reset between attempts.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use idem_runtime::client::RetryPolicy;
    /// let policy = RetryPolicy::default().deadline(Duration::from_secs(5));
    /// # let _ = policy;
    /// ```
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The operation's measured p99 latency (`x-retry.p99`): each attempt
    /// then times out after [`P99_FACTOR`](Self::P99_FACTOR) × p99, or the
    /// time left, whichever is shorter.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use idem_runtime::client::RetryPolicy;
    /// let policy = RetryPolicy::default().p99(Duration::from_millis(800));
    /// assert_eq!(policy.attempt_timeout_for(Duration::from_secs(30), 3), Duration::from_millis(2400));
    /// ```
    pub fn p99(mut self, p99: Duration) -> Self {
        self.p99 = Some(p99);
        self
    }

    /// A fixed per-attempt timeout, taking precedence over p99 (still never
    /// longer than the time left).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use idem_runtime::client::RetryPolicy;
    /// let policy = RetryPolicy::default().attempt_timeout(Duration::from_secs(2));
    /// assert_eq!(policy.attempt_timeout_for(Duration::from_secs(1), 3), Duration::from_secs(1));
    /// ```
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// The idempotency-key header (default `Idempotency-Key`).
    ///
    /// ```
    /// # use idem_runtime::client::RetryPolicy;
    /// let policy = RetryPolicy::default().key_header(http::HeaderName::from_static("x-idempotency-key"));
    /// # let _ = policy;
    /// ```
    pub fn key_header(mut self, header: HeaderName) -> Self {
        self.key_header = header;
        self
    }

    /// Hands the response over as soon as its headers arrive, leaving the
    /// body to be streamed by the caller (default: off).
    ///
    /// By default every attempt reads the whole body inside its own timeout
    /// and the call's deadline, so a server that sends headers and then
    /// stalls is an attempt failure like any other: a `safe` or `keyed` call
    /// retries (with the same key), an `unsafe` one ends as outcome unknown,
    /// since the server acted. A streamed body is read outside both bounds;
    /// turn this on only for bodies too large to hold in memory, and bound
    /// the read yourself.
    ///
    /// ```
    /// # use idem_runtime::client::RetryPolicy;
    /// let downloads = RetryPolicy::default().stream_body(true);
    /// # let _ = downloads;
    /// ```
    pub fn stream_body(mut self, stream: bool) -> Self {
        self.stream_body = stream;
        self
    }

    /// The remaining-deadline header ([`DEADLINE_HEADER`] by default), or
    /// `None` to send none.
    ///
    /// ```
    /// # use idem_runtime::client::RetryPolicy;
    /// let policy = RetryPolicy::default().deadline_header(None);
    /// # let _ = policy;
    /// ```
    pub fn deadline_header(mut self, header: Option<HeaderName>) -> Self {
        self.deadline_header = header;
        self
    }

    /// The timeout for an attempt when `remaining` is left before the
    /// deadline and `attempts_left` attempts (this one included) may still
    /// be made.
    ///
    /// With a fixed timeout or a p99, that value; otherwise an even share of
    /// the time left, so a hung first attempt cannot eat the whole deadline.
    /// Never more than `remaining`.
    pub fn attempt_timeout_for(&self, remaining: Duration, attempts_left: u32) -> Duration {
        let wanted = match (self.attempt_timeout, self.p99) {
            (Some(fixed), _) => fixed,
            (None, Some(p99)) => p99.saturating_mul(Self::P99_FACTOR),
            (None, None) => remaining / attempts_left.max(1),
        };
        wanted.min(remaining)
    }

    /// The configured total attempts.
    pub fn attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The configured overall deadline.
    pub fn overall_deadline(&self) -> Duration {
        self.deadline
    }

    /// The configured backoff.
    pub fn schedule(&self) -> Backoff {
        self.backoff
    }
}
