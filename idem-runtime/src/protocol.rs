//! The idempotency-key protocol as integrators see it on the wire: error
//! codes, statuses, messages and bodies, the replay header, and the client
//! retry rules. Compiled without any feature, so idem's docs generator
//! publishes exactly what [`server`](crate::server) sends and what
//! [`client`](crate::client) does, from this one place.
//!
//! Every protocol error body is one JSON object with three fields, in this
//! order:
//!
//! ```
//! use idem_runtime::protocol::{self, KEY_IN_USE};
//! assert_eq!(
//!     KEY_IN_USE.body(),
//!     r#"{"code":"idempotency_key_in_use","message":"a request with this idempotency key is still in progress; retry after it finishes with the same key and payload","retryable":true}"#
//! );
//! assert_eq!(KEY_IN_USE.status, 409);
//! assert_eq!(protocol::KEY_REUSED.code, "idempotency_key_reused");
//! ```

use std::time::Duration;

use serde_json::{Value, json};

/// One refusal of the protocol: its machine-readable code, HTTP status and
/// whether the same request with the same key can succeed later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The `code` field of the body.
    pub code: &'static str,
    /// The HTTP status it is sent with (by default, where configurable).
    pub status: u16,
    /// The `message` field, where it does not depend on the request.
    pub message: &'static str,
    /// The `retryable` field.
    pub retryable: bool,
}

impl Refusal {
    /// The exact body the server sends, with this refusal's own message.
    pub fn body(&self) -> String {
        error_body(self.code, self.message, self.retryable)
    }

    /// The exact body, with a message that depends on the request.
    pub fn body_with(&self, message: &str) -> String {
        error_body(self.code, message, self.retryable)
    }
}

/// A duplicate arrived while the first request with its key is still
/// running (`in-flight: conflict`, or `wait` once its bound has passed).
pub const KEY_IN_USE: Refusal = Refusal {
    code: "idempotency_key_in_use",
    status: 409,
    message: "a request with this idempotency key is still in progress; retry after it \
              finishes with the same key and payload",
    retryable: true,
};

/// The key was already used with a different method, path or body.
pub const KEY_REUSED: Refusal = Refusal {
    code: "idempotency_key_reused",
    status: 409,
    message: "this idempotency key was already used with a different request; send the \
              original request again, or use a new key for a new request",
    retryable: false,
};

/// The status [`KEY_REUSED`] is sent with when the server is configured to
/// answer a payload mismatch with `422 Unprocessable Content` instead.
pub const KEY_REUSED_UNPROCESSABLE_STATUS: u16 = 422;

/// A required key was not sent; the message names where it belongs
/// ([`key_missing_message`]).
pub const KEY_MISSING: Refusal = Refusal {
    code: "idempotency_key_missing",
    status: 400,
    message: "this operation requires an idempotency key",
    retryable: false,
};

/// The key is empty, too long, repeated or not visible ASCII; the message
/// says which.
pub const KEY_INVALID: Refusal = Refusal {
    code: "idempotency_key_invalid",
    status: 400,
    message: "the idempotency key is malformed",
    retryable: false,
};

/// `in-flight: accepted`: the duplicate is told where to follow the first
/// request ([`accepted_body`]).
pub const KEY_IN_FLIGHT: Refusal = Refusal {
    code: "idempotency_key_in_flight",
    status: 202,
    message: "a request with this idempotency key is being processed; poll status_url, or \
              send the same request with the same key again, to receive its outcome",
    retryable: true,
};

/// A phased request the server gave up on: its foreign calls kept failing
/// until the resume bound (`x-idempotency.resume`: attempts or age) was
/// reached. The server no longer calls out for it, and neither will a retry:
/// an operator settles it from the recovery point the message names.
pub const KEY_EXHAUSTED: Refusal = Refusal {
    code: "idempotency_key_exhausted",
    status: 409,
    message: "the request with this idempotency key stopped after its last allowed attempt and \
              will not be resumed; its effects stop at the recovery point named here, and an \
              operator settles it",
    retryable: false,
};

/// The server lacks something it needs for this operation (a missing
/// upstream, a disabled feature, a setting): nothing was recorded, so the
/// same request with the same key runs normally once that is fixed.
pub const UNAVAILABLE: Refusal = Refusal {
    code: "operation_unavailable",
    status: 503,
    message: "the server cannot perform this operation now; nothing was recorded; retry later \
              with the same key",
    retryable: true,
};

/// Seconds of `Retry-After` sent with [`UNAVAILABLE`].
pub const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 30;

/// A phased request stopped at a recovery point after a transient failure
/// of a foreign call; it resumes there when retried (or by the completer)
/// once `Retry-After` has passed.
pub const INCOMPLETE: Refusal = Refusal {
    code: "operation_incomplete",
    status: 503,
    message: "the operation stopped at a recovery point after a transient failure; retry with \
              the same key after the delay given to resume it",
    retryable: true,
};

/// The request body is over the server's cap: refused before anything
/// runs, on every route, keyed or not.
pub const BODY_TOO_LARGE: Refusal = Refusal {
    code: "request_body_too_large",
    status: 413,
    message: "the request body is over the server's limit",
    retryable: false,
};

/// The request breaks its operation's contract: a parameter or body field
/// is missing, malformed, or breaks a keyword of its schema (`minimum`,
/// `maxLength`, `pattern`, …). Refused before the key is claimed, so the
/// corrected request with the same key runs normally. The body's `field`
/// names where (`body.amount`, `query.limit`, `header.Content-Type`).
pub const INVALID_REQUEST: Refusal = Refusal {
    code: "invalid_request",
    status: 400,
    message: "the request does not match the operation's schema; the field named is wrong",
    retryable: false,
};

/// The request body is in a media type the operation does not declare, or
/// has no `Content-Type`; the message lists the accepted types.
pub const UNSUPPORTED_MEDIA_TYPE: Refusal = Refusal {
    code: "unsupported_media_type",
    status: 415,
    message: "the request body's content type is not one this operation accepts",
    retryable: false,
};

/// The caller's `Accept` excludes every media type the operation declares
/// for its responses (sent only where it declares several).
pub const NOT_ACCEPTABLE: Refusal = Refusal {
    code: "not_acceptable",
    status: 406,
    message: "none of the media types this operation answers in is acceptable to the caller",
    retryable: false,
};

/// The caller could not be identified: the scope extractor found no caller
/// (for a header scope, the header is absent). Nothing is stored.
pub const SCOPE_MISSING: Refusal = Refusal {
    code: "caller_unidentified",
    status: 401,
    message: "the caller could not be identified",
    retryable: false,
};

/// The caller's scope is empty, over the scope bound, or not visible ASCII.
/// Nothing is stored: no row is ever written under such a scope.
pub const SCOPE_INVALID: Refusal = Refusal {
    code: "caller_scope_invalid",
    status: 400,
    message: "the caller's scope is empty, too long or not visible ASCII",
    retryable: false,
};

/// How a phased request whose foreign call failed transiently is resumed
/// (`x-idempotency.resume`): when the next run may start, and when to stop.
///
/// After a failed run the record is due again after a full-jitter wait,
/// `random(0, min(cap, base · 2^(runs − 1)))`; neither a retry nor the
/// completer resumes it sooner. A record that has had `max_attempts` runs
/// (the first included), or whose next run would start more than
/// `give_up_after` after its claim, goes to the terminal state `exhausted`:
/// it is logged at `error`, counted by `Idempotency::count_exhausted`, and a
/// retry gets [`KEY_EXHAUSTED`]. The server runtime, the generator and the
/// docs page read this one definition (`x-idempotency.resume`).
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::protocol::ResumePolicy;
/// let resume = ResumePolicy::default();
/// assert_eq!(resume.max_attempts, 16);
/// assert_eq!(resume.base, Duration::from_secs(1));
/// assert_eq!(resume.cap, Duration::from_secs(5 * 60));
/// assert_eq!(resume.give_up_after, Duration::from_secs(24 * 3600));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumePolicy {
    /// Runs a request may have, the first included (default 16).
    pub max_attempts: u32,
    /// Scale of the backoff (default 1s).
    pub base: Duration,
    /// Longest wait between two runs (default 5m).
    pub cap: Duration,
    /// Age, from the claim, past which no run starts (default 24h).
    pub give_up_after: Duration,
}

impl Default for ResumePolicy {
    fn default() -> Self {
        ResumePolicy {
            max_attempts: 16,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(5 * 60),
            give_up_after: Duration::from_secs(24 * 3600),
        }
    }
}

impl ResumePolicy {
    /// The longest wait after the `runs`-th failed run: `min(cap, base ·
    /// 2^(runs − 1))`. The wait drawn is uniform below it.
    ///
    /// ```
    /// use std::time::Duration;
    /// let resume = idem_runtime::protocol::ResumePolicy::default();
    /// assert_eq!(resume.ceiling(1), Duration::from_secs(1));
    /// assert_eq!(resume.ceiling(4), Duration::from_secs(8));
    /// assert_eq!(resume.ceiling(40), Duration::from_secs(5 * 60));
    /// ```
    pub fn ceiling(&self, runs: u32) -> Duration {
        let doublings = runs.saturating_sub(1).min(31);
        self.base
            .checked_mul(1u32 << doublings)
            .map_or(self.cap, |d| d.min(self.cap))
    }

    /// Whether a run numbered `runs` (the first is 1), starting `age` after
    /// the claim, is past the schedule.
    ///
    /// ```
    /// use std::time::Duration;
    /// let resume = idem_runtime::protocol::ResumePolicy::default();
    /// assert!(!resume.exceeded(16, Duration::from_secs(60)));
    /// assert!(resume.exceeded(17, Duration::from_secs(60)));
    /// assert!(resume.exceeded(2, Duration::from_secs(24 * 3600 + 1)));
    /// ```
    pub fn exceeded(&self, runs: u32, age: Duration) -> bool {
        runs > self.max_attempts || age > self.give_up_after
    }
}

/// The caller's remaining deadline (`Idem-Timeout-Ms`, or `grpc-timeout`)
/// was used up: on arrival (nothing was done), or while the handler ran (a
/// keyed request's effect either committed with its stored response or
/// rolled back; the same request with the same key tells which).
pub const DEADLINE_EXCEEDED: Refusal = Refusal {
    code: "deadline_exceeded",
    status: 504,
    message: "the caller's deadline passed before this request was answered",
    retryable: false,
};

/// The server is at its admission limit (`x-admission.max-in-flight`):
/// refused at once, before any work, with `Retry-After`.
pub const OVERLOADED: Refusal = Refusal {
    code: "overloaded",
    status: 503,
    message: "the server is at its limit of requests in flight; retry after the delay it gives",
    retryable: true,
};

/// Seconds of `Retry-After` sent with [`OVERLOADED`].
pub const OVERLOADED_RETRY_AFTER_SECS: u64 = 1;

/// Requests a generated router admits at once when the spec sets no
/// `x-admission.max-in-flight`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// The message of [`KEY_MISSING`] for a key carried in `header`. Header
/// names are case-insensitive; the server writes them in lower case.
pub fn key_missing_message(header: &str) -> String {
    format!(
        "this operation requires an idempotency key in the {} header",
        header.to_ascii_lowercase()
    )
}

/// Set to `true` on every replayed response (the wire name, lower case).
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// The headers servers name their request id with, most common first:
/// `Request-Id` (Stripe), `X-Request-Id` (OpenAI, Heroku, many proxies),
/// `X-Amzn-RequestId` and `X-Amz-Request-Id` (AWS), `X-GitHub-Request-Id`,
/// `X-MS-Request-Id` (Azure).
pub const REQUEST_ID_HEADERS: &[&str] = &[
    "request-id",
    "x-request-id",
    "x-amzn-requestid",
    "x-amz-request-id",
    "x-github-request-id",
    "x-ms-request-id",
];

/// The value of [`IDEMPOTENT_REPLAYED`].
pub const IDEMPOTENT_REPLAYED_VALUE: &str = "true";

/// Seconds of `Retry-After` sent with [`KEY_IN_USE`] and [`KEY_IN_FLIGHT`].
pub const IN_FLIGHT_RETRY_AFTER_SECS: u64 = 1;

/// The default path prefix of the key status resource:
/// `/idempotency-keys/{key}`.
pub const DEFAULT_STATUS_PREFIX: &str = "/idempotency-keys";

/// The smallest and largest byte a key may hold: visible ASCII, no space.
pub const KEY_BYTES: std::ops::RangeInclusive<u8> = 0x21..=0x7e;

/// Statuses a client retries for `safe` and `keyed` operations, honouring
/// `Retry-After`.
pub const RETRYABLE_STATUSES: [u16; 4] = [429, 502, 503, 504];

/// How many `500` answers one logical call may retry (`safe` and `keyed`
/// operations only): some are bugs that fail the same way every time.
pub const SERVER_ERROR_RETRIES: u32 = 1;

/// The per-attempt timeout is this multiple of the operation's measured p99.
pub const P99_TIMEOUT_FACTOR: u32 = 3;

/// `{"code", "message", "retryable"}` as a JSON value, the one definition of
/// the error body's shape.
pub fn error_json(code: &str, message: &str, retryable: bool) -> Value {
    json!({ "code": code, "message": message, "retryable": retryable })
}

/// The error body as the bytes the server sends.
pub fn error_body(code: &str, message: &str, retryable: bool) -> String {
    error_json(code, message, retryable).to_string()
}

/// The body of a `202` under `in-flight: accepted`: [`KEY_IN_FLIGHT`] plus
/// the status URL and, for a phased operation, where it has got to.
pub fn accepted_json(status_url: &str, recovery_point: Option<&str>) -> Value {
    let mut body = error_json(KEY_IN_FLIGHT.code, KEY_IN_FLIGHT.message, true);
    if let Some(fields) = body.as_object_mut() {
        fields.insert("status_url".to_owned(), status_url.into());
        if let Some(point) = recovery_point {
            fields.insert("recovery_point".to_owned(), point.into());
        }
    }
    body
}

/// [`accepted_json`] as the bytes the server sends.
pub fn accepted_body(status_url: &str, recovery_point: Option<&str>) -> String {
    accepted_json(status_url, recovery_point).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_keep_their_field_order_and_escape_text() {
        assert_eq!(
            error_body("c", "say \"hi\" </script>", false),
            r#"{"code":"c","message":"say \"hi\" </script>","retryable":false}"#
        );
        assert_eq!(
            KEY_MISSING.body_with(&key_missing_message("Idempotency-Key")),
            r#"{"code":"idempotency_key_missing","message":"this operation requires an idempotency key in the idempotency-key header","retryable":false}"#
        );
        let accepted = accepted_body("/idempotency-keys/k", None);
        assert!(accepted.starts_with(r#"{"code":"idempotency_key_in_flight","#));
        assert!(accepted.contains(r#""status_url":"/idempotency-keys/k""#));
    }
}
