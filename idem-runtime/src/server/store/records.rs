//! What the store holds and hands back: key records, step records, and the
//! outcomes of the background jobs' statements.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use super::error::StoreError;

/// A boxed, sendable future, as the backend trait returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// State of a key record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Claimed; the request has not stored its response yet.
    InFlight,
    /// The response is stored and replays on every retry inside the window.
    Complete,
    /// A phased request reached its resume bound (attempts or age) before it
    /// finished: terminal. Nothing resumes it; a retry is refused with
    /// [`KEY_EXHAUSTED`](crate::protocol::KEY_EXHAUSTED).
    Exhausted,
}

impl KeyState {
    /// The value stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::InFlight => "in_flight",
            KeyState::Complete => "complete",
            KeyState::Exhausted => "exhausted",
        }
    }

    pub(super) fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "in_flight" => Ok(KeyState::InFlight),
            "complete" => Ok(KeyState::Complete),
            "exhausted" => Ok(KeyState::Exhausted),
            other => Err(StoreError::Corrupt {
                what: "state",
                value: other.to_owned(),
            }),
        }
    }
}

/// The request a phased operation needs to be resumed without its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRequest {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Raw body bytes.
    pub body: Vec<u8>,
}

/// What a claim writes.
#[derive(Debug, Clone)]
pub struct NewClaim<'a> {
    /// Caller scope.
    pub scope: &'a str,
    /// The idempotency key.
    pub key: &'a str,
    /// SHA-256 of method, path and canonical body, hex.
    pub fingerprint: &'a str,
    /// The operation's name (its operationId, or the route a layer without
    /// names counts it under); for a phased operation, the registered name
    /// the completer resumes it by.
    pub operation: Option<&'a str>,
    /// The request, kept for phased operations only, until they complete.
    pub request: Option<&'a StoredRequest>,
    /// Milliseconds since the Unix epoch.
    pub now: i64,
}

/// One stored key row.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    /// Caller scope.
    pub scope: String,
    /// The idempotency key.
    pub key: String,
    /// Request fingerprint the key was first used with.
    pub fingerprint: String,
    /// In flight or complete.
    pub state: KeyState,
    /// The operation's name, as [`NewClaim::operation`]; `None` on a
    /// single-phase record written before names were stored.
    pub operation: Option<String>,
    /// The stored request of a phased operation not yet complete.
    pub request: Option<StoredRequest>,
    /// Last recovery point reached.
    pub recovery_point: String,
    /// Fencing token: bumped on every claim, reclaim and takeover.
    pub lock_generation: i64,
    /// When the current holder last proved it was alive (ms since epoch).
    pub locked_at: Option<i64>,
    /// The stored response once complete.
    pub response: Option<StoredResponse>,
    /// When the key was claimed (ms since epoch); the replay window starts here.
    pub created_at: i64,
    /// When its response was stored (ms since epoch).
    pub completed_at: Option<i64>,
    /// When an operator last made it due again after it was exhausted (ms
    /// since epoch): its resume schedule counts from here.
    pub resumed_at: Option<i64>,
    /// Runs of the request so far, the first included: every takeover (by a
    /// retry or the completer) adds one.
    pub attempts: i64,
    /// When the next run may start (ms since epoch), after a failed one.
    pub next_attempt_at: Option<i64>,
}

/// Whether a step of a phased operation has only its intent recorded or is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepStatus {
    /// Written and committed before a foreign call; its outcome is not recorded.
    Intent,
    /// The step's output is recorded; it never runs again.
    Done,
}

impl StepStatus {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            StepStatus::Intent => "intent",
            StepStatus::Done => "done",
        }
    }
}

/// One stored step of a phased operation.
#[derive(Debug, Clone)]
pub struct StepRecord {
    /// Step name.
    pub step: String,
    /// Intent or done.
    pub status: StepStatus,
    /// Key passed to the foreign system for this step.
    pub derived_key: Option<String>,
    /// JSON output of a done step.
    pub output: Option<String>,
}

/// A record the reaper deleted.
#[derive(Debug, Clone)]
pub struct ReapedRecord {
    /// Caller scope.
    pub scope: String,
    /// The idempotency key.
    pub key: String,
    /// State it was in when deleted; `InFlight` means it never finished.
    pub state: KeyState,
    /// The operation's name (`None` on records written before names were
    /// stored on every record).
    pub operation: Option<String>,
    /// Last recovery point reached.
    pub recovery_point: String,
    /// When it was claimed (ms since epoch): where the next batch starts.
    pub created_at: i64,
}

/// A phased request in the terminal state [`KeyState::Exhausted`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExhaustedRecord {
    /// Caller scope.
    pub scope: String,
    /// The idempotency key.
    pub key: String,
    /// Operation name.
    pub operation: Option<String>,
    /// Where its effects stop.
    pub recovery_point: String,
    /// Runs it was given.
    pub attempts: i64,
    /// When the key was claimed (ms since epoch).
    pub created_at: i64,
}

/// What a failed run of a phased request left: rescheduled, or at its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rescheduled {
    /// In flight, due again at this time (ms since epoch).
    At(i64),
    /// The bound is reached: the record is now [`KeyState::Exhausted`].
    Exhausted {
        /// Runs it was given.
        attempts: i64,
    },
}

/// The records an operator watches, as the background jobs count them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchedCounts {
    /// In flight: phased requests running or waiting for their next run.
    pub in_flight: i64,
    /// Exhausted: given up at the end of their resume schedule.
    pub exhausted: i64,
    /// In flight, their lock older than `lock-timeout` and their next run
    /// due: what the completer should have taken.
    pub stale: i64,
}

/// A response as stored with its key: status, the allow-listed headers and
/// the exact body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status code.
    pub status: u16,
    /// Allow-listed headers, lowercase names, in response order.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Bytes,
}

impl StoredResponse {
    pub(crate) fn from_columns(
        status: i64,
        headers: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Self, StoreError> {
        let status = u16::try_from(status).map_err(|_| StoreError::Corrupt {
            what: "response status",
            value: status.to_string(),
        })?;
        let headers: Vec<(String, String)> = match headers {
            Some(text) => serde_json::from_str(text).map_err(|_| StoreError::Corrupt {
                what: "response headers",
                value: text.to_owned(),
            })?,
            None => Vec::new(),
        };
        Ok(StoredResponse {
            status,
            headers,
            body: Bytes::from(body),
        })
    }

    /// The kept headers as the `response_headers` column holds them; none
    /// is `NULL`, which reads back as none.
    pub(crate) fn headers_json(&self) -> Option<String> {
        if self.headers.is_empty() {
            return None;
        }
        Some(serde_json::to_string(&self.headers).unwrap_or_else(|_| "[]".to_owned()))
    }
}
