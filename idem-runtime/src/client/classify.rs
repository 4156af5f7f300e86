//! Which outcomes are retried, for which retry class, and what the server's
//! hints (`Retry-After`, `retry-after-ms`, `X-Should-Retry`) change.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};

use super::budget::RetryCost;
use super::class::RetryClass;

/// The retry hint a server may send to override the status-based decision:
/// `X-Should-Retry: true` or `false` (the convention of the Stripe-style SDKs).
///
/// `false` stops retries of any response. `true` makes any non-success
/// response retryable, and lifts the once-only limit on 500, for `safe` and
/// `keyed` operations. No hint can make an `unsafe` operation re-sendable,
/// bypass the retry budget, or stretch the attempt limit or the deadline.
pub const RETRY_HINT_HEADER: &str = "x-should-retry";

/// Stripe's own name for the same hint, `Stripe-Should-Retry`, read as
/// [`RETRY_HINT_HEADER`] is.
pub const STRIPE_RETRY_HINT_HEADER: &str = "stripe-should-retry";

/// `Retry-After` in milliseconds (a non-negative number, fractions allowed),
/// as some APIs send alongside or instead of `Retry-After`.
pub const RETRY_AFTER_MS_HEADER: &str = "retry-after-ms";

/// What one attempt produced, reduced to what the retry decision needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Observation {
    /// The server answered with this status (and maybe a retry hint).
    Status {
        /// The response status.
        status: StatusCode,
        /// The `X-Should-Retry` hint, when present and readable.
        hint: Option<bool>,
    },
    /// `idempotency_key_in_use`: another attempt with this key is still in
    /// flight on the server.
    KeyInUse,
    /// `idempotency_key_reused`: the key was already used for a different
    /// request.
    KeyReused,
    /// The connection could not be established: the request never left.
    NotSent,
    /// The attempt timed out; the request may have reached the server.
    TimedOut,
    /// The connection failed mid-exchange; the request may have reached the
    /// server.
    Interrupted,
    /// The circuit breaker refused the attempt locally: nothing was sent.
    CircuitOpen,
}

/// What to do about an [`Observation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Hand the response to the caller: success, or an answer a retry cannot
    /// change (non-429 4xx, 501, …).
    Accept,
    /// Retry, if attempts, deadline and budget allow, at this price.
    Retry(RetryCost),
    /// The failure is retryable in principle, but the operation may not be
    /// re-sent once it may have reached the server.
    OutcomeUnknown,
    /// A second 500: it is retried at most once per call.
    ServerErrorLimit,
    /// The server's `X-Should-Retry: false` declined the retry.
    Declined,
    /// The key was used for a different request: never retried.
    KeyReused,
}

/// Decides the next step for one attempt's outcome.
///
/// `server_errors_retried` is how many 500s this call has already retried.
///
/// ```
/// use http::StatusCode;
/// use idem_runtime::client::{classify, Observation, RetryClass, RetryCost, Verdict};
/// let busy = Observation::Status { status: StatusCode::SERVICE_UNAVAILABLE, hint: None };
/// assert_eq!(classify(RetryClass::Keyed, &busy, 0), Verdict::Retry(RetryCost::Transient));
/// assert_eq!(classify(RetryClass::Unsafe, &busy, 0), Verdict::OutcomeUnknown);
/// ```
pub fn classify(
    class: RetryClass,
    observation: &Observation,
    server_errors_retried: u32,
) -> Verdict {
    let resendable = class.may_resend();
    match *observation {
        Observation::Status { status, hint } => {
            if status.is_success() || status.is_informational() || status.is_redirection() {
                return Verdict::Accept;
            }
            let allowlisted = crate::protocol::RETRYABLE_STATUSES.contains(&status.as_u16());
            let cost = if status == StatusCode::TOO_MANY_REQUESTS {
                RetryCost::Throttle
            } else {
                RetryCost::Transient
            };
            let ambiguous = allowlisted || status == StatusCode::INTERNAL_SERVER_ERROR;
            match (ambiguous, resendable, hint) {
                // The request reached the server and its outcome is unclear:
                // only safe and keyed operations may go again.
                (true, false, _) => Verdict::OutcomeUnknown,
                (true, true, Some(false)) => Verdict::Declined,
                (true, true, Some(true)) => Verdict::Retry(cost),
                (true, true, None) if allowlisted => Verdict::Retry(cost),
                (true, true, None)
                    if server_errors_retried < crate::protocol::SERVER_ERROR_RETRIES =>
                {
                    Verdict::Retry(cost)
                }
                (true, true, None) => Verdict::ServerErrorLimit,
                // Any other status: a definite answer, unless the server
                // vouches that trying again can help.
                (false, true, Some(true)) => Verdict::Retry(cost),
                (false, _, _) => Verdict::Accept,
            }
        }
        // The server refused this attempt because another one holding the
        // same key is running: waiting and re-sending is exactly the intent.
        Observation::KeyInUse => Verdict::Retry(RetryCost::Throttle),
        Observation::KeyReused => Verdict::KeyReused,
        Observation::NotSent => Verdict::Retry(RetryCost::Transient),
        Observation::TimedOut | Observation::Interrupted if resendable => {
            Verdict::Retry(RetryCost::Transient)
        }
        Observation::TimedOut | Observation::Interrupted => Verdict::OutcomeUnknown,
        Observation::CircuitOpen => Verdict::Retry(RetryCost::Free),
    }
}

/// Whether an observation counts as a failure for the circuit breaker.
pub(crate) fn is_breaker_failure(observation: &Observation) -> bool {
    match *observation {
        Observation::Status { status, .. } => matches!(status.as_u16(), 500 | 502 | 503 | 504),
        Observation::NotSent | Observation::TimedOut | Observation::Interrupted => true,
        Observation::KeyInUse | Observation::KeyReused | Observation::CircuitOpen => false,
    }
}

/// Reads the server's retry hint, `X-Should-Retry` or `Stripe-Should-Retry`:
/// `true`/`false`, case-insensitive; anything else is ignored. When the two
/// disagree, `false` wins: a retry the server declined is never sent.
///
/// ```
/// use http::HeaderMap;
/// use idem_runtime::client::retry_hint;
/// let mut headers = HeaderMap::new();
/// assert_eq!(retry_hint(&headers), None);
/// headers.insert("stripe-should-retry", "true".parse().unwrap());
/// assert_eq!(retry_hint(&headers), Some(true));
/// headers.insert("x-should-retry", "False".parse().unwrap());
/// assert_eq!(retry_hint(&headers), Some(false));
/// ```
pub fn retry_hint(headers: &HeaderMap) -> Option<bool> {
    [RETRY_HINT_HEADER, STRIPE_RETRY_HINT_HEADER]
        .iter()
        .flat_map(|name| headers.get_all(*name))
        .filter_map(|value| {
            let value = value.to_str().ok()?.trim();
            if value.eq_ignore_ascii_case("true") {
                Some(true)
            } else if value.eq_ignore_ascii_case("false") {
                Some(false)
            } else {
                None
            }
        })
        .reduce(|a, b| a && b)
}

/// How long the server asked the client to wait, from `Retry-After`
/// (delay-seconds or HTTP-date, RFC 9110 §10.2.3) and `retry-after-ms`.
///
/// When several values are present the longest wins: the client never waits
/// less than it was asked. Unreadable values are ignored (and the schedule's
/// own backoff applies); a date in the past means no wait.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderMap;
/// use idem_runtime::client::retry_after;
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "3".parse().unwrap());
/// headers.insert("retry-after-ms", "1500".parse().unwrap());
/// assert_eq!(retry_after(&headers, SystemTime::now()), Some(Duration::from_secs(3)));
/// ```
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let seconds = headers
        .get_all(http::header::RETRY_AFTER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| parse_retry_after(v, now));
    let millis = headers
        .get_all(RETRY_AFTER_MS_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(parse_retry_after_ms);
    seconds.chain(millis).max()
}

/// One `Retry-After` value: delay-seconds or an HTTP-date.
fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly large delays saturate; the deadline check then stops the call.
        let secs = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// One `retry-after-ms` value.
fn parse_retry_after_ms(value: &str) -> Option<Duration> {
    let millis: f64 = value.trim().parse().ok()?;
    if !millis.is_finite() || millis < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(millis / 1000.0).unwrap_or(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn retry_after_reads_every_form() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let date = httpdate::fmt_http_date(now + Duration::from_secs(90));
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<Duration>);
        let cases: &[Case<'_>] = &[
            (&[("retry-after", "7")], Some(Duration::from_secs(7))),
            (&[("retry-after", " 0 ")], Some(Duration::ZERO)),
            (&[("retry-after", &date)], Some(Duration::from_secs(90))),
            (
                &[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")],
                Some(Duration::ZERO),
            ),
            (
                &[("retry-after-ms", "250")],
                Some(Duration::from_millis(250)),
            ),
            (
                &[("retry-after-ms", "12.5")],
                Some(Duration::from_micros(12_500)),
            ),
            (
                &[("retry-after", "2"), ("retry-after-ms", "2500")],
                Some(Duration::from_millis(2500)),
            ),
            (&[("retry-after", "soon")], None),
            (&[("retry-after", "-5")], None),
            (&[("retry-after", "1.5")], None),
            (&[("retry-after-ms", "-1")], None),
            (&[("retry-after-ms", "NaN")], None),
            (&[("retry-after", "")], None),
            (
                &[("retry-after", "99999999999999999999999")],
                Some(Duration::from_secs(u64::MAX)),
            ),
            (&[("retry-after-ms", "1e300")], Some(Duration::MAX)),
            (&[], None),
        ];
        for (pairs, expected) in cases {
            assert_eq!(retry_after(&headers(pairs), now), *expected, "{pairs:?}");
        }
    }

    #[test]
    fn non_utf8_retry_after_is_ignored() {
        let mut map = HeaderMap::new();
        map.insert(
            "retry-after",
            http::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        assert_eq!(retry_after(&map, SystemTime::now()), None);
    }

    #[test]
    fn retry_hint_is_read_loosely() {
        assert_eq!(
            retry_hint(&headers(&[("x-should-retry", "TRUE")])),
            Some(true)
        );
        assert_eq!(
            retry_hint(&headers(&[("X-Should-Retry", " false")])),
            Some(false)
        );
        assert_eq!(retry_hint(&headers(&[("x-should-retry", "maybe")])), None);
    }
}
