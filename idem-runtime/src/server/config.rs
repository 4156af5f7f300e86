//! The protocol's settings, mirroring the `x-idempotency` vocabulary.

use std::time::Duration;

use http::{HeaderName, StatusCode, header};

use super::error::ConfigError;
pub use crate::protocol::ResumePolicy;

/// Whether an operation demands a key (`key: required | optional`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRequirement {
    /// A request without a key gets `400 idempotency_key_missing`.
    Required,
    /// A request without a key runs once, unprotected (its handler still gets a transaction).
    Optional,
}

/// Where the key travels (`key-in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyIn {
    /// In the configured header (`Idempotency-Key` by default).
    Header,
    /// In a top-level request-body field: `idempotency_key` by default
    /// ([`BODY_KEY_FIELD`], as Square carries it), or the one named with
    /// [`Policy::body_field`] (Twilio's `IdempotencyKey`). Read from a JSON
    /// object, or from a form-urlencoded body.
    Body,
    /// In a query parameter named with [`Policy::query_parameter`]: APIs
    /// that describe a request id as their key (Google's `requestId`).
    Query,
}

/// The request-body field read under [`KeyIn::Body`] unless
/// [`Policy::body_field`] names another.
pub const BODY_KEY_FIELD: &str = "idempotency_key";

/// What a retry gets when the stored outcome is a failure (`failure-replay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReplay {
    /// A stored failure replays as-is, like any other response.
    Verbatim,
    /// A 5xx is not stored: its transaction rolls back, so nothing of it
    /// happened, and a retry runs again (a phased operation resumes after its
    /// last recorded step).
    Reattempt,
}

/// What a duplicate gets while the first request still runs (`in-flight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// `409` with code `idempotency_key_in_use` and `Retry-After`.
    Conflict,
    /// Wait for the first request's outcome, up to the given bound, then
    /// answer as [`InFlight::Conflict`].
    Wait(Duration),
    /// `202 Accepted` with code `idempotency_key_in_flight`, a `Location`
    /// header naming the key's status resource (see
    /// [`Policy::status_prefix`] and `Idempotency::status_router`), and the
    /// same URL as `status_url` in the body. Polling that URL, or retrying
    /// the same request with the same key, fetches the outcome.
    Accepted,
}

/// When a single-phase request's key is claimed (`claim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClaimAt {
    /// Before the handler runs: the key row is inserted in flight, the
    /// handler's effect and the stored response commit with it, and a
    /// duplicate meanwhile gets the in-flight answer.
    #[default]
    Start,
    /// When the handler's transaction commits: the key row is inserted,
    /// complete with its response, as the transaction's last statement.
    /// Nothing is written before the handler runs, so a first execution
    /// costs one statement less than [`ClaimAt::Start`] and no update.
    ///
    /// A concurrent duplicate runs its handler too, then waits on the key's
    /// unique index for the first to commit (bounded like any duplicate
    /// wait), rolls its own effect back, and replays the first's response:
    /// callers see a wait and the replay where they would have seen
    /// `409 idempotency_key_in_use`. A retry of a completed key runs the
    /// handler and rolls it back the same way.
    ///
    /// Only for operations whose whole effect is the transaction the layer
    /// hands the handler: a call to another system, a message sent or a file
    /// written would happen once per duplicate. Phased operations always
    /// claim at the start.
    Commit,
}

/// The status of a payload-mismatch answer (409 by default, or 422).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchStatus {
    /// `409 Conflict`.
    Conflict,
    /// `422 Unprocessable Content`.
    UnprocessableEntity,
}

impl MismatchStatus {
    pub(crate) fn status(self) -> StatusCode {
        match self {
            MismatchStatus::Conflict => StatusCode::CONFLICT,
            MismatchStatus::UnprocessableEntity => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }
}

/// The protocol's settings. Defaults follow the `x-idempotency` defaults of `docs/vocabulary.md`.
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::server::{FailureReplay, InFlight, KeyIn, Policy};
///
/// let policy = Policy::new()
///     .header("Idempotency-Key")
///     .key_in(KeyIn::Header)
///     .key_max_length(255)
///     .replay_window(Duration::from_secs(24 * 3600))
///     .reaper_after(Duration::from_secs(72 * 3600))
///     .failure_replay(FailureReplay::Verbatim)
///     .in_flight(InFlight::Conflict)
///     .duplicate_wait(Duration::from_secs(2))
///     .lock_timeout(Duration::from_secs(60));
/// assert_eq!(policy.replay_window_duration(), Duration::from_secs(86_400));
/// ```
#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) header: String,
    pub(crate) key_in: KeyIn,
    pub(crate) body_field: String,
    pub(crate) query_parameter: String,
    pub(crate) key_max_length: usize,
    pub(crate) scope_max_length: usize,
    pub(crate) key: KeyRequirement,
    pub(crate) replay_window: Duration,
    pub(crate) reaper_after: Duration,
    pub(crate) failure_replay: FailureReplay,
    pub(crate) in_flight: InFlight,
    pub(crate) duplicate_wait: Duration,
    pub(crate) store_wait: Duration,
    pub(crate) lock_timeout: Duration,
    pub(crate) mismatch: MismatchStatus,
    pub(crate) max_request_body: usize,
    pub(crate) max_response_body: usize,
    pub(crate) replay_headers: Vec<String>,
    pub(crate) retry_after: Duration,
    pub(crate) status_prefix: String,
    pub(crate) resume: ResumePolicy,
    pub(crate) claim_at: ClaimAt,
}

/// The default longest caller scope, in bytes.
pub const DEFAULT_SCOPE_MAX_LENGTH: usize = 255;

/// The most bytes `key-max-length` and the scope bound may add up to.
///
/// Scope and key together form the key table's primary key, and PostgreSQL
/// refuses a B-tree entry over 2,704 bytes (a third of an 8 KiB page, less
/// overhead). Bounding both inputs below that keeps any request from
/// reaching the index with a value the database cannot store.
pub const MAX_INDEXED_BYTES: usize = 2600;

/// The default bound on a request's wait for a database connection
/// (`store-wait`).
pub const DEFAULT_STORE_WAIT: Duration = Duration::from_millis(500);

/// The default path prefix of the status resource: `/idempotency-keys/{key}`.
pub const DEFAULT_STATUS_PREFIX: &str = crate::protocol::DEFAULT_STATUS_PREFIX;

impl Default for Policy {
    fn default() -> Self {
        Policy {
            header: "idempotency-key".to_owned(),
            key_in: KeyIn::Header,
            body_field: BODY_KEY_FIELD.to_owned(),
            query_parameter: "requestId".to_owned(),
            key_max_length: 255,
            scope_max_length: DEFAULT_SCOPE_MAX_LENGTH,
            key: KeyRequirement::Required,
            replay_window: Duration::from_secs(24 * 3600),
            reaper_after: Duration::from_secs(72 * 3600),
            failure_replay: FailureReplay::Verbatim,
            in_flight: InFlight::Conflict,
            duplicate_wait: Duration::from_secs(2),
            store_wait: DEFAULT_STORE_WAIT,
            lock_timeout: Duration::from_secs(60),
            mismatch: MismatchStatus::Conflict,
            max_request_body: 1024 * 1024,
            max_response_body: 1024 * 1024,
            replay_headers: [
                header::CONTENT_TYPE,
                header::CONTENT_LANGUAGE,
                header::CONTENT_ENCODING,
                header::LOCATION,
                header::ETAG,
                header::LAST_MODIFIED,
                header::CACHE_CONTROL,
                header::RETRY_AFTER,
            ]
            .iter()
            .map(|h| h.as_str().to_owned())
            .collect(),
            retry_after: Duration::from_secs(2),
            status_prefix: DEFAULT_STATUS_PREFIX.to_owned(),
            resume: ResumePolicy::default(),
            claim_at: ClaimAt::Start,
        }
    }
}

impl Policy {
    /// The defaults: the key in the `Idempotency-Key` header, 255 bytes, key
    /// required, 24h replay window, 72h reaper, verbatim failure replay,
    /// in-flight conflict after a 2s duplicate wait, 60s lock timeout, 409 on mismatch, 1 MiB request and stored-response caps.
    pub fn new() -> Self {
        Policy::default()
    }

    /// Longest caller scope accepted, in bytes (default 255). A scope the
    /// [`ScopeExtractor`](super::ScopeExtractor) returns that is empty,
    /// longer, or not visible ASCII is refused with `400
    /// caller_scope_invalid` before anything is stored.
    /// `key_max_length + scope_max_length` may not exceed
    /// [`MAX_INDEXED_BYTES`].
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().scope_max_length(64);
    /// ```
    pub fn scope_max_length(mut self, max: usize) -> Self {
        self.scope_max_length = max;
        self
    }

    /// Header carrying the key (`header`, case-insensitive).
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().header("X-Idempotency-Key");
    /// ```
    pub fn header(mut self, name: &str) -> Self {
        self.header = name.to_ascii_lowercase();
        self
    }

    /// Where the key is read from (`key-in`): the header (default) or the
    /// top-level `idempotency_key` string field of a JSON body. A body key is
    /// validated like a header key; the fingerprint still covers the whole
    /// body, key field included.
    ///
    /// ```
    /// use idem_runtime::server::{KeyIn, Policy};
    /// let p = Policy::new().key_in(KeyIn::Body);
    /// ```
    pub fn key_in(mut self, location: KeyIn) -> Self {
        self.key_in = location;
        self
    }

    /// The request-body field that holds the key under [`KeyIn::Body`]
    /// (default [`BODY_KEY_FIELD`]), matched exactly: the field a spec
    /// shows, such as Twilio's `IdempotencyKey` or `idempotencyKey`.
    ///
    /// ```
    /// use idem_runtime::server::{KeyIn, Policy};
    /// let p = Policy::new().key_in(KeyIn::Body).body_field("IdempotencyKey");
    /// ```
    pub fn body_field(mut self, name: &str) -> Self {
        name.clone_into(&mut self.body_field);
        self
    }

    /// The query parameter that holds the key under [`KeyIn::Query`]
    /// (default `requestId`), matched exactly.
    ///
    /// ```
    /// use idem_runtime::server::{KeyIn, Policy};
    /// let p = Policy::new().key_in(KeyIn::Query).query_parameter("requestId");
    /// ```
    pub fn query_parameter(mut self, name: &str) -> Self {
        name.clone_into(&mut self.query_parameter);
        self
    }

    /// Longest accepted key in bytes (`key-max-length`).
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().key_max_length(64);
    /// ```
    pub fn key_max_length(mut self, max: usize) -> Self {
        self.key_max_length = max;
        self
    }

    /// Whether a key is required (`key: required | optional`).
    ///
    /// ```
    /// use idem_runtime::server::{KeyRequirement, Policy};
    /// let p = Policy::new().key(KeyRequirement::Optional);
    /// ```
    pub fn key(mut self, requirement: KeyRequirement) -> Self {
        self.key = requirement;
        self
    }

    /// How long a retry replays the stored outcome (`replay-window`); after it a
    /// reused key is a new request.
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().replay_window(std::time::Duration::from_secs(7 * 86_400));
    /// ```
    pub fn replay_window(mut self, window: std::time::Duration) -> Self {
        self.replay_window = window;
        self
    }

    /// How long records are kept for recovery before the reaper deletes them
    /// (`reaper-after`, at least the replay window).
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().reaper_after(std::time::Duration::from_secs(3 * 86_400));
    /// ```
    pub fn reaper_after(mut self, after: Duration) -> Self {
        self.reaper_after = after;
        self
    }

    /// Replay stored failures or re-attempt them (`failure-replay`).
    ///
    /// ```
    /// use idem_runtime::server::{FailureReplay, Policy};
    /// let p = Policy::new().failure_replay(FailureReplay::Reattempt);
    /// ```
    pub fn failure_replay(mut self, mode: FailureReplay) -> Self {
        self.failure_replay = mode;
        self
    }

    /// What a duplicate gets while the first request runs (`in-flight`).
    ///
    /// ```
    /// use idem_runtime::server::{InFlight, Policy};
    /// let p = Policy::new().in_flight(InFlight::Wait(std::time::Duration::from_secs(5)));
    /// ```
    pub fn in_flight(mut self, policy: InFlight) -> Self {
        self.in_flight = policy;
        self
    }

    /// How long a duplicate waits for a concurrent original that has not
    /// committed yet, under [`InFlight::Conflict`] and [`InFlight::Accepted`]
    /// (default 2s); [`InFlight::Wait`] waits its own bound instead. Past it
    /// the duplicate gets the in-flight answer (`409 idempotency_key_in_use`
    /// or `202`) and gives its database connection back, so a slow handler
    /// and a retry storm cannot exhaust the pool. Zero means "do not wait"
    /// (1 ms, since PostgreSQL reads a zero lock timeout as "forever").
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().duplicate_wait(std::time::Duration::from_millis(500));
    /// ```
    pub fn duplicate_wait(mut self, wait: Duration) -> Self {
        self.duplicate_wait = wait;
        self
    }

    /// How long a request waits for a database connection before it is
    /// refused `503 idempotency_store_unavailable` with `Retry-After`
    /// (`store-wait`, default 500ms). The caller's remaining deadline, when
    /// sooner, bounds it instead. A request refused early can be retried at
    /// once elsewhere; one queued for seconds spends its caller's deadline on
    /// a single attempt. Once the database is known to be down, requests are
    /// refused without waiting at all (see the server guide, "Database
    /// faults").
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().store_wait(std::time::Duration::from_millis(250));
    /// ```
    pub fn store_wait(mut self, wait: Duration) -> Self {
        self.store_wait = wait.max(Duration::from_millis(1));
        self
    }

    /// After this, an in-flight key whose holder stopped refreshing its lock may
    /// be taken over (`lock-timeout`). Keep it above the longest foreign call.
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().lock_timeout(std::time::Duration::from_secs(30));
    /// ```
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// When a single-phase request's key is claimed (`claim`): at the start
    /// (default) or at commit, for operations whose whole effect is the
    /// layer's transaction. See [`ClaimAt::Commit`] for what changes for
    /// callers. [`InFlight::Accepted`] needs an in-flight record to point
    /// at, so it cannot be combined with a claim at commit.
    ///
    /// ```
    /// use idem_runtime::server::{ClaimAt, Policy};
    /// let p = Policy::new().claim_at(ClaimAt::Commit);
    /// ```
    pub fn claim_at(mut self, at: ClaimAt) -> Self {
        self.claim_at = at;
        self
    }

    /// Status for a payload mismatch: 409 (default) or 422.
    ///
    /// ```
    /// use idem_runtime::server::{MismatchStatus, Policy};
    /// let p = Policy::new().mismatch_status(MismatchStatus::UnprocessableEntity);
    /// ```
    pub fn mismatch_status(mut self, status: MismatchStatus) -> Self {
        self.mismatch = status;
        self
    }

    /// Largest request body read (`413` beyond it).
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().max_request_body(64 * 1024);
    /// ```
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.max_request_body = bytes;
        self
    }

    /// Largest response stored for replay; a larger one rolls its effect back
    /// and answers `500 response_too_large`, since it could not be replayed.
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().max_response_body(256 * 1024);
    /// ```
    pub fn max_response_body(mut self, bytes: usize) -> Self {
        self.max_response_body = bytes;
        self
    }

    /// Adds a response header to store and replay (besides `Content-Type`,
    /// `Location`, `ETag` and the other defaults). `Set-Cookie` is refused.
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().replay_header("X-Request-Cost");
    /// ```
    pub fn replay_header(mut self, name: &str) -> Self {
        self.replay_headers.push(name.to_ascii_lowercase());
        self
    }

    /// `Retry-After` sent when the store is unreachable.
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().store_retry_after(std::time::Duration::from_secs(5));
    /// ```
    pub fn store_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = after;
        self
    }

    /// Path prefix of the key status resource that `in-flight: accepted`
    /// points at: a key `k` lives at `{prefix}/{k}`, the key percent-encoded
    /// (default [`DEFAULT_STATUS_PREFIX`], `/idempotency-keys`). The prefix is
    /// the path clients see; serve `Idempotency::status_router` there by
    /// merging it into the app at its root. It must start with `/`, not end
    /// with one, and use only letters, digits, `-`, `.`, `_`, `~` and `/`
    /// (checked by `build`).
    ///
    /// ```
    /// let p = idem_runtime::server::Policy::new().status_prefix("/v1/idempotency-keys");
    /// ```
    pub fn status_prefix(mut self, prefix: &str) -> Self {
        self.status_prefix = prefix.to_owned();
        self
    }

    /// How a phased request is resumed after a transient failure, and when
    /// it is given up (`x-idempotency.resume`; see [`ResumePolicy`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem_runtime::server::{Policy, ResumePolicy};
    /// let p = Policy::new().resume(ResumePolicy { max_attempts: 5, ..ResumePolicy::default() });
    /// assert_eq!(p.resume_policy().max_attempts, 5);
    /// ```
    pub fn resume(mut self, resume: ResumePolicy) -> Self {
        self.resume = resume;
        self
    }

    /// The resume schedule.
    pub fn resume_policy(&self) -> &ResumePolicy {
        &self.resume
    }

    /// The configured replay window.
    pub fn replay_window_duration(&self) -> Duration {
        self.replay_window
    }

    /// The largest request body read, in bytes.
    pub fn max_request_body_bytes(&self) -> usize {
        self.max_request_body
    }

    /// How long a duplicate of an uncommitted request waits before getting
    /// the in-flight answer: the [`InFlight::Wait`] bound, or
    /// [`Policy::duplicate_wait`].
    pub fn duplicate_wait_bound(&self) -> Duration {
        let wait = match self.in_flight {
            InFlight::Wait(bound) => bound,
            InFlight::Conflict | InFlight::Accepted => self.duplicate_wait,
        };
        wait.max(Duration::from_millis(1))
    }

    pub(crate) fn validate(&self) -> Result<Validated, ConfigError> {
        if self.reaper_after < self.replay_window {
            return Err(ConfigError::ReaperBeforeReplayWindow {
                reaper_after: self.reaper_after,
                replay_window: self.replay_window,
            });
        }
        if self.key_max_length == 0 {
            return Err(ConfigError::ZeroKeyLength);
        }
        if self.resume.max_attempts == 0 {
            return Err(ConfigError::ZeroResumeAttempts);
        }
        if self.scope_max_length == 0 {
            return Err(ConfigError::ZeroScopeLength);
        }
        if self.key_max_length.saturating_add(self.scope_max_length) > MAX_INDEXED_BYTES {
            return Err(ConfigError::KeyColumnsTooLong {
                key_max_length: self.key_max_length,
                scope_max_length: self.scope_max_length,
                limit: MAX_INDEXED_BYTES,
            });
        }
        if self.claim_at == ClaimAt::Commit && self.in_flight == InFlight::Accepted {
            return Err(ConfigError::AcceptedNeedsClaimAtStart);
        }
        if !valid_status_prefix(&self.status_prefix) {
            return Err(ConfigError::InvalidStatusPrefix {
                prefix: self.status_prefix.clone(),
            });
        }
        let header = HeaderName::from_bytes(self.header.as_bytes()).map_err(|_| {
            ConfigError::InvalidHeader {
                name: self.header.clone(),
            }
        })?;
        let mut replay_headers = Vec::with_capacity(self.replay_headers.len());
        for name in &self.replay_headers {
            let parsed = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ConfigError::InvalidHeader { name: name.clone() })?;
            if parsed == header::SET_COOKIE {
                return Err(ConfigError::UnreplayableHeader { name: name.clone() });
            }
            replay_headers.push(parsed);
        }
        Ok(Validated {
            header,
            replay_headers,
        })
    }
}

/// A prefix the router can mount and a `Location` can carry unescaped:
/// `/segment(/segment)*` with unreserved characters only, so neither the
/// route syntax (`{`, `*`) nor the URI syntax (`?`, `#`, `%`) can creep in.
fn valid_status_prefix(prefix: &str) -> bool {
    let Some(rest) = prefix.strip_prefix('/') else {
        return false;
    };
    !rest.is_empty()
        && rest.split('/').all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
        })
}

pub(crate) struct Validated {
    pub(crate) header: HeaderName,
    pub(crate) replay_headers: Vec<HeaderName>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_rejects_inconsistent_settings() {
        let short_reaper = Policy::new()
            .replay_window(Duration::from_secs(7 * 86_400))
            .reaper_after(Duration::from_secs(86_400));
        assert!(matches!(
            short_reaper.validate(),
            Err(ConfigError::ReaperBeforeReplayWindow { .. })
        ));
        assert!(matches!(
            Policy::new().replay_header("Set-Cookie").validate(),
            Err(ConfigError::UnreplayableHeader { .. })
        ));
        assert!(matches!(
            Policy::new().key_max_length(0).validate(),
            Err(ConfigError::ZeroKeyLength)
        ));
        assert!(matches!(
            Policy::new().scope_max_length(0).validate(),
            Err(ConfigError::ZeroScopeLength)
        ));
        assert!(matches!(
            Policy::new().key_max_length(4096).validate(),
            Err(ConfigError::KeyColumnsTooLong { limit: 2600, .. })
        ));
        assert!(
            Policy::new()
                .key_max_length(2345)
                .scope_max_length(255)
                .validate()
                .is_ok()
        );
        assert!(matches!(
            Policy::new().header("bad header").validate(),
            Err(ConfigError::InvalidHeader { .. })
        ));
        for bad in [
            "", "/", "keys", "/keys/", "/a//b", "/{key}", "/a?b", "/a%20b", "/*rest",
        ] {
            assert!(
                matches!(
                    Policy::new().status_prefix(bad).validate(),
                    Err(ConfigError::InvalidStatusPrefix { .. })
                ),
                "{bad:?} accepted"
            );
        }
        assert!(
            Policy::new()
                .status_prefix("/v1/idempotency-keys")
                .validate()
                .is_ok()
        );
        let ok = Policy::new()
            .header("X-Idempotency-Key")
            .validate()
            .unwrap();
        assert_eq!(ok.header.as_str(), "x-idempotency-key");
    }
}
