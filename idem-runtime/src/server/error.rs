//! Errors of the server runtime, and how protocol errors look on the wire.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use super::outcome::Outcome;
use super::store::StoreError;
use crate::protocol;

/// A configuration that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No scope extractor was configured.
    #[error(
        "no scope extractor configured: keys must be unique per caller; call `.scope(...)` with \
         an extractor of the authenticated caller, or opt in to one shared scope with \
         `.global_scope_shared_by_all_callers()`"
    )]
    MissingScope,
    /// A credential-scoped route, and no key to digest credentials with.
    #[error(
        "operations scoped by credential need a digest key: call `.credential_digest_key(...)` \
         with a secret of at least {min} bytes, kept like a signing key (the stored scope is a \
         keyed digest of the caller's credential, never the credential)"
    )]
    MissingDigestKey {
        /// The shortest key accepted.
        min: usize,
    },
    /// A credential-scoped route whose operation declares no credential
    /// the server can read (no `security`, or only schemes such as mutual
    /// TLS): every request would be refused.
    #[error(
        "an operation scoped by credential declares no credential to scope its keys by: add its \
         `security` requirement (bearer, basic or an API key), or scope it by account"
    )]
    NoCredentialToScopeBy,
    /// The digest key is too short to keep credentials from being guessed
    /// back from their digests.
    #[error("the credential digest key is {len} bytes; it must be at least {min}")]
    DigestKeyTooShort {
        /// Its length.
        len: usize,
        /// The shortest key accepted.
        min: usize,
    },
    /// The reaper would delete records still inside the replay window.
    #[error("reaper-after ({reaper_after:?}) is shorter than replay-window ({replay_window:?})")]
    ReaperBeforeReplayWindow {
        /// Configured reaper-after.
        reaper_after: Duration,
        /// Configured replay-window.
        replay_window: Duration,
    },
    /// `key-max-length` must be at least 1.
    #[error("key-max-length must be at least 1")]
    ZeroKeyLength,
    /// `resume.max-attempts` must be at least 1 (the first run).
    #[error("resume max-attempts must be at least 1: it counts the first run")]
    ZeroResumeAttempts,
    /// The scope bound must be at least 1.
    #[error("the scope bound (scope_max_length) must be at least 1")]
    ZeroScopeLength,
    /// Key and scope bounds that together exceed what the key table's index holds.
    #[error(
        "key-max-length ({key_max_length}) plus the scope bound ({scope_max_length}) exceeds \
         {limit} bytes, more than the key table's index can hold on PostgreSQL"
    )]
    KeyColumnsTooLong {
        /// Configured key bound.
        key_max_length: usize,
        /// Configured scope bound.
        scope_max_length: usize,
        /// [`MAX_INDEXED_BYTES`](super::MAX_INDEXED_BYTES).
        limit: usize,
    },
    /// Key or scope bounds wider than this engine's key columns (MariaDB's
    /// fill InnoDB's index with a 600-byte scope and a 2,372-byte key).
    #[error(
        "key-max-length ({key_max_length}) or the scope bound ({scope_max_length}) exceeds what \
         this engine's key table holds: a key of {key_limit} bytes and a scope of {scope_limit}"
    )]
    KeyColumnsTooNarrow {
        /// Configured key bound.
        key_max_length: usize,
        /// Configured scope bound.
        scope_max_length: usize,
        /// The engine's key column, in bytes.
        key_limit: usize,
        /// The engine's scope column, in bytes.
        scope_limit: usize,
    },
    /// The header name is not a valid HTTP header name.
    #[error("invalid idempotency header name {name:?}")]
    InvalidHeader {
        /// The name given.
        name: String,
    },
    /// The status resource's path prefix is not one the router can mount.
    #[error(
        "invalid status prefix {prefix:?}: it must start with '/', not end with one, and use \
         only letters, digits, '-', '.', '_', '~' and '/'"
    )]
    InvalidStatusPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// `in-flight: accepted` points a duplicate at the in-flight record,
    /// and a claim at commit writes none.
    #[error(
        "in-flight: accepted needs a key claimed at the start (claim: start): a claim at commit \
         leaves no in-flight record for the status resource to show"
    )]
    AcceptedNeedsClaimAtStart,
    /// `Set-Cookie` may never be stored and replayed to another request.
    #[error("{name} cannot be replayed: it would hand one response's session to another")]
    UnreplayableHeader {
        /// The header name given.
        name: String,
    },
}

/// Why a key is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyProblem {
    /// The header is present but empty.
    Empty,
    /// Longer than `key-max-length`.
    TooLong {
        /// Length in bytes.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A byte outside visible ASCII (0x21–0x7E), at this index.
    NotVisibleAscii {
        /// Byte offset of the first offending byte.
        position: usize,
    },
    /// The header appears more than once.
    Repeated,
    /// The body field holds a JSON value that is not a string.
    NotAString,
    /// A key in a URL path has a `%` not followed by two hex digits, at this
    /// byte of the encoded segment.
    MalformedEscape {
        /// Byte offset of the `%`.
        position: usize,
    },
}

impl std::fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyProblem::Empty => f.write_str("is empty"),
            KeyProblem::TooLong { len, max } => {
                write!(f, "is {len} bytes long, over the limit of {max}")
            }
            KeyProblem::NotVisibleAscii { position } => write!(
                f,
                "has a character outside visible ASCII at byte {position}"
            ),
            KeyProblem::Repeated => f.write_str("is sent more than once"),
            KeyProblem::NotAString => f.write_str("is not a JSON string"),
            KeyProblem::MalformedEscape { position } => {
                write!(f, "has a malformed percent-escape at byte {position}")
            }
        }
    }
}

/// A request the protocol refuses or cannot serve; each renders as a JSON
/// error body `{"code", "message", "retryable"}` with its own status.
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    /// The operation requires a key and none was sent.
    #[error("{}", protocol::key_missing_message(.header))]
    MissingKey {
        /// Header name.
        header: String,
    },
    /// The operation requires a key in a body field and none was found.
    #[error(
        "this operation requires an idempotency key in the top-level {field:?} string field of \
         a JSON (or form-urlencoded) request body{}",
        if *not_json { "; the request body is not a JSON object" } else { "" }
    )]
    MissingBodyKey {
        /// The body field (`idempotency_key` unless configured).
        field: String,
        /// The body is not a JSON object at all (not JSON, or an array or scalar).
        not_json: bool,
    },
    /// The key is malformed.
    #[error("the {header} header {problem}")]
    InvalidKey {
        /// Header name.
        header: String,
        /// What is wrong with it.
        problem: KeyProblem,
    },
    /// The key in the request body is malformed.
    #[error("the {field:?} field of the request body {problem}")]
    InvalidBodyKey {
        /// The body field (`idempotency_key` unless configured).
        field: String,
        /// What is wrong with it.
        problem: KeyProblem,
    },
    /// The operation requires a key in a query parameter and none was sent.
    #[error("this operation requires an idempotency key in the {parameter:?} query parameter")]
    MissingQueryKey {
        /// The query parameter.
        parameter: String,
    },
    /// The key in the query string is malformed.
    #[error("the {parameter:?} query parameter {problem}")]
    InvalidQueryKey {
        /// The query parameter.
        parameter: String,
        /// What is wrong with it.
        problem: KeyProblem,
    },
    /// The key in a status resource's path is malformed.
    #[error("the idempotency key in the request path {problem}")]
    InvalidPathKey {
        /// What is wrong with it.
        problem: KeyProblem,
    },
    /// The status resource knows no such key for this caller.
    #[error(
        "no request with this idempotency key is known for this caller: it was never used, its \
         replay window has passed, or it has not been committed yet"
    )]
    KeyUnknown,
    /// The caller could not be identified, so no scope exists for the key.
    #[error("{message}")]
    ScopeRejected {
        /// Status to answer with (usually 401).
        status: StatusCode,
        /// Message for the caller.
        message: String,
    },
    /// The scope the extractor derived is empty, too long or not visible
    /// ASCII; nothing was stored.
    #[error("the caller's scope {problem}")]
    InvalidScope {
        /// What is wrong with it.
        problem: KeyProblem,
    },
    /// The request body exceeds the configured cap.
    #[error("the request body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The configured cap.
        limit: usize,
    },
    /// The request body could not be read.
    #[error("the request body could not be read")]
    BodyUnreadable,
    /// Another request with this key is still running.
    #[error("{}", protocol::KEY_IN_USE.message)]
    KeyInUse,
    /// The key was already used with a different request.
    #[error("{}", protocol::KEY_REUSED.message)]
    KeyReused {
        /// 409 or 422, as configured.
        status: StatusCode,
    },
    /// The response was too large to be stored, so the effect was rolled back.
    #[error(
        "the response exceeds the {limit}-byte limit for stored responses; nothing was applied"
    )]
    ResponseTooLarge {
        /// The configured cap.
        limit: usize,
    },
    /// The handler's response body failed while being read for storage; the
    /// effect was rolled back.
    #[error("the response could not be read for storage; nothing was applied")]
    ResponseUnreadable,
    /// Another worker took over the key while this one ran; its writes were refused.
    #[error(
        "this request lost its claim on the idempotency key to a takeover; retry to read the outcome"
    )]
    LockLost,
    /// The key store is unreachable; nothing was executed.
    #[error("the idempotency key store is unavailable; nothing was executed, retry later")]
    StoreUnavailable {
        /// The underlying failure.
        #[source]
        source: StoreError,
        /// What to send in `Retry-After`.
        retry_after: Duration,
    },
    /// A phased operation stopped between steps and will resume on retry.
    #[error(
        "the operation stopped at {recovery_point}: {message}; retry with the same key to resume"
    )]
    Incomplete {
        /// Where it will resume.
        recovery_point: String,
        /// Why it stopped.
        message: String,
        /// What to send in `Retry-After`.
        retry_after: Duration,
    },
    /// A phased request reached its resume bound before it finished; it is
    /// terminal and nothing resumes it.
    #[error(
        "the request with this idempotency key stopped at {recovery_point} after {attempts} \
         attempts and will not be resumed; an operator settles it"
    )]
    Exhausted {
        /// Where its effects stop.
        recovery_point: String,
        /// Runs it was given.
        attempts: i64,
    },
    /// The server lacks what this operation needs (a missing upstream, a
    /// disabled feature, a setting); nothing was recorded.
    #[error("{message}; nothing was recorded; retry later with the same key")]
    Unavailable {
        /// What is missing.
        message: String,
    },
    /// A handler's transaction was not returned to the layer.
    #[error("the handler kept its transaction past the end of the request; nothing was applied")]
    TransactionNotReturned,
}

impl IdempotencyError {
    /// The machine-readable code in the error body.
    pub fn code(&self) -> &'static str {
        match self {
            IdempotencyError::MissingKey { .. }
            | IdempotencyError::MissingBodyKey { .. }
            | IdempotencyError::MissingQueryKey { .. } => protocol::KEY_MISSING.code,
            IdempotencyError::InvalidKey { .. }
            | IdempotencyError::InvalidBodyKey { .. }
            | IdempotencyError::InvalidQueryKey { .. }
            | IdempotencyError::InvalidPathKey { .. } => protocol::KEY_INVALID.code,
            IdempotencyError::KeyUnknown => "idempotency_key_unknown",
            IdempotencyError::ScopeRejected { status, .. }
                if *status == StatusCode::BAD_REQUEST =>
            {
                protocol::SCOPE_INVALID.code
            }
            IdempotencyError::ScopeRejected { .. } => protocol::SCOPE_MISSING.code,
            IdempotencyError::InvalidScope { .. } => protocol::SCOPE_INVALID.code,
            IdempotencyError::BodyTooLarge { .. } => protocol::BODY_TOO_LARGE.code,
            IdempotencyError::BodyUnreadable => "request_body_unreadable",
            IdempotencyError::KeyInUse => protocol::KEY_IN_USE.code,
            IdempotencyError::KeyReused { .. } => protocol::KEY_REUSED.code,
            IdempotencyError::ResponseTooLarge { .. } => "response_too_large",
            IdempotencyError::ResponseUnreadable => "response_unreadable",
            IdempotencyError::LockLost => "idempotency_key_taken_over",
            IdempotencyError::StoreUnavailable { .. } => "idempotency_store_unavailable",
            IdempotencyError::Incomplete { .. } => protocol::INCOMPLETE.code,
            IdempotencyError::Exhausted { .. } => protocol::KEY_EXHAUSTED.code,
            IdempotencyError::Unavailable { .. } => protocol::UNAVAILABLE.code,
            IdempotencyError::TransactionNotReturned => "transaction_not_returned",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            IdempotencyError::MissingKey { .. }
            | IdempotencyError::MissingBodyKey { .. }
            | IdempotencyError::MissingQueryKey { .. }
            | IdempotencyError::InvalidKey { .. }
            | IdempotencyError::InvalidBodyKey { .. }
            | IdempotencyError::InvalidQueryKey { .. }
            | IdempotencyError::InvalidPathKey { .. }
            | IdempotencyError::InvalidScope { .. } => StatusCode::BAD_REQUEST,
            IdempotencyError::KeyUnknown => StatusCode::NOT_FOUND,
            IdempotencyError::ScopeRejected { status, .. } => *status,
            IdempotencyError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            IdempotencyError::BodyUnreadable => StatusCode::BAD_REQUEST,
            IdempotencyError::KeyInUse
            | IdempotencyError::LockLost
            | IdempotencyError::Exhausted { .. } => StatusCode::CONFLICT,
            IdempotencyError::KeyReused { status } => *status,
            IdempotencyError::ResponseTooLarge { .. }
            | IdempotencyError::ResponseUnreadable
            | IdempotencyError::TransactionNotReturned => StatusCode::INTERNAL_SERVER_ERROR,
            IdempotencyError::StoreUnavailable { .. }
            | IdempotencyError::Incomplete { .. }
            | IdempotencyError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Whether retrying the same request with the same key can succeed.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            IdempotencyError::KeyInUse
                | IdempotencyError::LockLost
                | IdempotencyError::StoreUnavailable { .. }
                | IdempotencyError::Incomplete { .. }
                | IdempotencyError::Unavailable { .. }
        )
    }

    /// What becomes of a request answered with this error before its
    /// operation ran; `None` where only the answer's context can tell (a
    /// phased run that stopped between steps, a response that could not be
    /// stored).
    pub(crate) fn outcome(&self) -> Option<Outcome> {
        match self {
            IdempotencyError::MissingKey { .. }
            | IdempotencyError::MissingBodyKey { .. }
            | IdempotencyError::MissingQueryKey { .. }
            | IdempotencyError::InvalidKey { .. }
            | IdempotencyError::InvalidBodyKey { .. }
            | IdempotencyError::InvalidQueryKey { .. }
            | IdempotencyError::InvalidPathKey { .. }
            | IdempotencyError::KeyUnknown
            | IdempotencyError::ScopeRejected { .. }
            | IdempotencyError::InvalidScope { .. }
            | IdempotencyError::BodyTooLarge { .. }
            | IdempotencyError::BodyUnreadable
            | IdempotencyError::Unavailable { .. } => Some(Outcome::Refused),
            IdempotencyError::KeyInUse | IdempotencyError::LockLost => Some(Outcome::InFlight),
            IdempotencyError::KeyReused { .. } => Some(Outcome::Reused),
            IdempotencyError::StoreUnavailable { .. } => Some(Outcome::StoreUnavailable),
            IdempotencyError::Exhausted { .. } => Some(Outcome::Replayed),
            IdempotencyError::Incomplete { .. }
            | IdempotencyError::ResponseTooLarge { .. }
            | IdempotencyError::ResponseUnreadable
            | IdempotencyError::TransactionNotReturned => None,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            IdempotencyError::StoreUnavailable { retry_after, .. }
            | IdempotencyError::Incomplete { retry_after, .. } => Some(*retry_after),
            IdempotencyError::KeyInUse | IdempotencyError::LockLost => {
                Some(Duration::from_secs(protocol::IN_FLIGHT_RETRY_AFTER_SECS))
            }
            IdempotencyError::Unavailable { .. } => {
                Some(Duration::from_secs(protocol::UNAVAILABLE_RETRY_AFTER_SECS))
            }
            _ => None,
        }
    }
}

/// Renders `{"code", "message", "retryable"}` with `status`.
pub(crate) fn error_response(
    status: StatusCode,
    code: &str,
    message: &str,
    retryable: bool,
    retry_after: Option<Duration>,
) -> Response {
    let body = protocol::error_json(code, message, retryable);
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(after) = retry_after {
        // Rounded up: a retry sent after `Retry-After` must not be early.
        // Zero stays zero: "retry now" (a serialization failure, whose
        // winner has committed).
        let secs = if after.is_zero() {
            0
        } else {
            after.as_millis().div_ceil(1000).max(1)
        };
        if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }
    response
}

impl IntoResponse for IdempotencyError {
    fn into_response(self) -> Response {
        match &self {
            // Logged once when the outage begins and when it ends, not per
            // refusal.
            IdempotencyError::StoreUnavailable {
                source: StoreError::Down { .. },
                ..
            } => {}
            IdempotencyError::StoreUnavailable { source, .. } => {
                tracing::warn!(error = %source, "idempotency key store unavailable; failing closed");
            }
            _ => {}
        }
        let mut response = error_response(
            self.status(),
            self.code(),
            &self.to_string(),
            self.retryable(),
            self.retry_after(),
        );
        if let Some(outcome) = self.outcome() {
            response.extensions_mut().insert(outcome);
        }
        response
    }
}

/// What an extractor of the layer answers on a route the layer is not on.
pub(crate) fn layer_missing() -> Response {
    error_response(
        http::StatusCode::INTERNAL_SERVER_ERROR,
        "idempotency_layer_missing",
        "this extractor is only available on routes behind the idempotency layer",
        false,
        None,
    )
}
