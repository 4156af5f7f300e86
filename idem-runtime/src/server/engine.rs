//! The protocol itself: prepare a request, claim its key, branch on the
//! existing record, and complete it.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, Method, header};
use http_body_util::{BodyExt, Limited};
use sqlx::Transaction;

use super::canonical::canonical_json;
use super::clock::{ms, now_ms};
use super::config::{FailureReplay, InFlight, KeyIn, KeyRequirement, Policy, ResumePolicy};
use super::error::{ConfigError, IdempotencyError};
use super::key::{BodyKey, fingerprint, read_body_key, read_form_key, read_key, validate};
use super::outcome::{Outcome, marked};
use super::scope::{CredentialScope, GlobalScope, MIN_DIGEST_KEY, Requirement, ScopeExtractor};
use super::store::StoreError;
use super::store::StoredResponse;
use super::store::{Backend, KeyRecord, KeyState, NewClaim, Store, StoredRequest};
use super::upload::{Upload, spool};

pub(super) mod builder;

/// The idempotency-key protocol over one store: cheap to clone, shared by the
/// layer, phased handlers and background jobs.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_runtime::server::{HeaderScope, Idempotency, Policy, Store};
/// let store = Store::open_sqlite("sqlite::memory:").await?;
/// store.migrate().await?;
/// let idem = Idempotency::builder(store)
///     .policy(Policy::new())
///     .scope(HeaderScope::new("x-account-id"))
///     .build()?;
/// # Ok(()) }
/// ```
pub struct Idempotency<DB: Backend> {
    pub(crate) inner: Arc<Inner<DB>>,
}

impl<DB: Backend> Clone for Idempotency<DB> {
    fn clone(&self) -> Self {
        Idempotency {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<DB: Backend> std::fmt::Debug for Idempotency<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotency")
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner<DB: Backend> {
    pub(crate) store: Store<DB>,
    pub(crate) policy: Policy,
    pub(crate) header: HeaderName,
    pub(crate) replay_headers: Vec<HeaderName>,
    /// Where the scope comes from; `None` on an instance built with a
    /// credential digest key alone, until
    /// [`Idempotency::scoped_by_credential`] derives one that has it.
    scope: Option<Arc<dyn ScopeExtractor>>,
    /// Shared by every instance derived with [`Idempotency::with_policy`].
    pub(crate) shared: Arc<Shared<DB>>,
}

/// A phased operation and the instance (policy) it was registered under.
/// The engine keeps the registry without knowing what a phased operation
/// is: [`super::phased`] puts each `Arc<dyn Operation<DB>>` in, and takes it
/// out again, by name.
pub(crate) type Registered<DB> = (Arc<dyn Any + Send + Sync>, Weak<Inner<DB>>);

/// What the instances derived from one builder share: the registry of phased
/// operations (each with the instance, and so the policy, it runs under) and
/// the horizons of every policy in use, so one completer and one reaper serve
/// them all.
pub(crate) struct Shared<DB: Backend> {
    pub(crate) operations: RwLock<HashMap<String, Registered<DB>>>,
    /// `(lock_timeout, reaper_after)` of every policy in use.
    horizons: RwLock<Vec<(Duration, Duration)>>,
    /// The deployment's resume schedule, in place of every policy's own.
    resume: Option<ResumePolicy>,
    /// The key credential-scoped routes digest credentials with.
    credential_key: Option<Arc<[u8]>>,
    /// The replication warning last logged, so that it is logged once.
    pub(crate) replication_warned: std::sync::Mutex<Option<String>>,
}

/// Whether a body is JSON (`application/json` or any `+json` type) and
/// whether it is a form, by the essence of its content type, whose case does
/// not matter. Compared in place: nothing is allocated per request.
fn body_kind(content_type: Option<&str>) -> (bool, bool) {
    let essence = content_type.map_or("", |ct| ct.split(';').next().unwrap_or("").trim());
    let is_json = essence.eq_ignore_ascii_case("application/json")
        || essence
            .len()
            .checked_sub(5)
            .and_then(|at| essence.get(at..))
            .is_some_and(|suffix| suffix.eq_ignore_ascii_case("+json"));
    let is_form = essence.eq_ignore_ascii_case("application/x-www-form-urlencoded");
    (is_json, is_form)
}

/// A request read, validated and fingerprinted.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) scope: String,
    pub(crate) key: Option<String>,
    pub(crate) fingerprint: String,
    pub(crate) request: StoredRequest,
    pub(crate) body: Bytes,
}

impl Prepared {
    /// A request read and fingerprinted; its key noted for the request's
    /// log lines.
    pub(crate) fn new(
        parts: &Parts,
        scope: String,
        key: Option<String>,
        fingerprint: String,
        path: String,
        body: Bytes,
    ) -> Self {
        if let Some(key) = &key {
            super::outcome::note_key(&scope, key);
        }
        Prepared {
            scope,
            key,
            fingerprint,
            request: StoredRequest {
                method: parts.method.to_string(),
                path,
                body: Vec::new(),
            },
            body,
        }
    }
}

/// A claim this caller owns.
pub(crate) struct Won<DB: Backend> {
    /// Holds the claim, uncommitted.
    pub(crate) tx: Transaction<'static, DB>,
    /// The fencing generation this caller holds.
    pub(crate) generation: i64,
    /// When this claim of the key was made (ms since epoch): the record's
    /// `created_at`, unchanged by takeovers, new when a key is re-claimed
    /// after its replay window. With the scope and key it names the claim.
    pub(crate) claimed_at: i64,
    /// `Some` when an abandoned in-flight record was taken over.
    pub(crate) resumed: Option<KeyRecord>,
    /// Runs of the request, this one included.
    pub(crate) attempts: i64,
}

/// How a claim attempt ended.
#[allow(
    clippy::large_enum_variant,
    reason = "built once per request and destructured at once; boxing buys nothing"
)]
pub(crate) enum Claim<DB: Backend> {
    /// This caller owns the key; `tx` holds the uncommitted claim.
    Won(Won<DB>),
    /// The outcome is stored: replay it.
    Replay(StoredResponse),
    /// Someone else holds the key right now; the recovery point it reached,
    /// when its record is visible.
    InFlight(Option<String>),
    /// A phased request waiting out its backoff: nobody holds it, and its
    /// next run is due at `due` (ms since epoch).
    NotDue {
        /// Where it will resume.
        recovery_point: String,
        /// When its next run may start.
        due: i64,
    },
}

/// The wait from now until `at` (ms since epoch), for `Retry-After`.
pub(crate) fn until(at: i64) -> Duration {
    Duration::from_millis(u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0))
}

fn unavailable(policy: &Policy) -> impl Fn(StoreError) -> IdempotencyError + '_ {
    move |source| {
        // `Retry-After` says what the server knows: a busy pool frees up in
        // moments, an outage's length is a guess at its remainder.
        let retry_after = match &source {
            StoreError::NoConnection { .. } => Duration::from_secs(1),
            StoreError::Down { down_for } => super::health::down_retry_after(*down_for),
            e if e.is_serialization_failure() => Duration::ZERO,
            _ => policy.retry_after,
        };
        IdempotencyError::StoreUnavailable {
            source,
            retry_after,
        }
    }
}

/// Whether `policy`'s key and scope bounds fit the engine's key columns.
pub(crate) fn fits_columns<DB: Backend>(policy: &Policy) -> Result<(), ConfigError> {
    match DB::KEY_COLUMNS {
        Some((scope_limit, key_limit))
            if policy.scope_max_length > scope_limit || policy.key_max_length > key_limit =>
        {
            Err(ConfigError::KeyColumnsTooNarrow {
                key_max_length: policy.key_max_length,
                scope_max_length: policy.scope_max_length,
                key_limit,
                scope_limit,
            })
        }
        _ => Ok(()),
    }
}

/// `wait`, or the current request's remaining deadline when sooner.
pub(crate) fn bounded_by_deadline(wait: Duration) -> Duration {
    crate::context::current()
        .and_then(|inbound| inbound.time_left())
        .map_or(wait, |left| wait.min(left))
        .max(Duration::from_millis(1))
}

impl<DB: Backend> Idempotency<DB> {
    /// The store.
    pub fn store(&self) -> &Store<DB> {
        &self.inner.store
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// The same store, scope source, completer and reaper under another
    /// policy: one per route, where operations declare different key
    /// headers, windows or in-flight modes. Phased operations registered on
    /// the result are resumed under its policy by the completer of any
    /// instance, and the reaper keeps every record until the longest
    /// `reaper-after` in use has passed.
    ///
    /// ```no_run
    /// # use idem_runtime::server::*;
    /// # async fn demo(idem: Idempotency<sqlx::Sqlite>) -> Result<(), ConfigError> {
    /// let refunds = idem.with_policy(Policy::new().replay_window(std::time::Duration::from_secs(3600)))?;
    /// # let _ = refunds; Ok(()) }
    /// ```
    pub fn with_policy(&self, policy: Policy) -> Result<Idempotency<DB>, ConfigError> {
        if self.inner.scope.is_none() {
            return Err(ConfigError::MissingScope);
        }
        let policy = match self.inner.shared.resume {
            Some(schedule) => policy.resume(schedule),
            None => policy,
        };
        let validated = policy.validate()?;
        fits_columns::<DB>(&policy)?;
        if let Ok(mut horizons) = self.inner.shared.horizons.write() {
            horizons.push((policy.lock_timeout, policy.reaper_after));
        }
        Ok(Idempotency {
            inner: Arc::new(Inner {
                store: self.inner.store.clone(),
                header: validated.header,
                replay_headers: validated.replay_headers,
                scope: self.inner.scope.clone(),
                shared: Arc::clone(&self.inner.shared),
                policy,
            }),
        })
    }

    /// The same instance with its scope derived from the request's
    /// credential: the first of `requirements` (the operation's `security`
    /// alternatives) whose credentials are all present, digested under the
    /// key given to [`IdempotencyBuilder::credential_digest_key`](builder::IdempotencyBuilder::credential_digest_key). A request
    /// with none is answered `401 caller_unidentified` before anything is
    /// stored. The generated router calls this for operations declaring
    /// `x-idempotency.scope: credential`.
    pub fn scoped_by_credential(
        &self,
        requirements: &'static [Requirement],
    ) -> Result<Idempotency<DB>, ConfigError> {
        if requirements.iter().all(|r| r.is_empty()) {
            return Err(ConfigError::NoCredentialToScopeBy);
        }
        let key =
            self.inner
                .shared
                .credential_key
                .clone()
                .ok_or(ConfigError::MissingDigestKey {
                    min: MIN_DIGEST_KEY,
                })?;
        let scope: Arc<dyn ScopeExtractor> = Arc::new(CredentialScope::new(requirements, key));
        Ok(Idempotency {
            inner: Arc::new(Inner {
                store: self.inner.store.clone(),
                header: self.inner.header.clone(),
                replay_headers: self.inner.replay_headers.clone(),
                scope: Some(scope),
                shared: Arc::clone(&self.inner.shared),
                policy: self.inner.policy.clone(),
            }),
        })
    }

    /// The shortest lock timeout and the longest reaper horizon of every
    /// policy sharing this store.
    pub(crate) fn horizons(&self) -> (Duration, Duration) {
        let own = (
            self.inner.policy.lock_timeout,
            self.inner.policy.reaper_after,
        );
        self.inner
            .shared
            .horizons
            .read()
            .map(|all| {
                all.iter()
                    .fold(own, |(lock, reap), (l, r)| (lock.min(*l), reap.max(*r)))
            })
            .unwrap_or(own)
    }

    /// How long a request may wait for a database connection: the store
    /// wait, or the caller's remaining deadline when sooner.
    pub(crate) fn store_wait(&self) -> Duration {
        bounded_by_deadline(self.inner.policy.store_wait)
    }

    /// Opens the transaction a request's claim (or unkeyed write) runs in,
    /// within [`Self::store_wait`].
    pub(crate) async fn begin_request(&self) -> Result<sqlx::Transaction<'static, DB>, StoreError> {
        self.inner.store.begin_within(self.store_wait()).await
    }

    /// The answer to a request that met `source`, which the store notes
    /// (a read-only answer starts the search for the primary).
    pub(crate) fn store_error(&self, source: StoreError) -> IdempotencyError {
        self.inner.store.note(&source);
        unavailable(&self.inner.policy)(source)
    }

    /// Validates the key, derives the scope, reads the body under its cap and
    /// fingerprints the request.
    pub(crate) async fn prepare(
        &self,
        parts: &Parts,
        body: Body,
    ) -> Result<Prepared, IdempotencyError> {
        let header_key = self.header_key(parts)?;
        let scope = self.scope_of(parts)?;
        let limit = self.declared_length_within_cap(parts)?;
        let body = match Limited::new(body, limit).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(IdempotencyError::BodyTooLarge { limit });
            }
            Err(_) => return Err(IdempotencyError::BodyUnreadable),
        };
        let (is_json, is_form) = body_kind(
            parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
        );
        let policy = &self.inner.policy;
        let key_in_body = policy.key_in == KeyIn::Body;
        let key = if key_in_body {
            let field = policy.body_field.as_str();
            let read = if is_form {
                read_form_key(&body, field, policy.key_max_length)
            } else {
                let json = serde_json::from_slice::<serde_json::Value>(&body).ok();
                read_body_key(json.as_ref(), field, policy.key_max_length)
            };
            match read.map_err(|problem| IdempotencyError::InvalidBodyKey {
                field: field.to_owned(),
                problem,
            })? {
                BodyKey::Found(key) => Some(key),
                BodyKey::Absent => None,
                BodyKey::NotAnObject if self.key_required() => {
                    return Err(IdempotencyError::MissingBodyKey {
                        field: field.to_owned(),
                        not_json: true,
                    });
                }
                // An optional key: a body with no fields simply carries none.
                BodyKey::NotAnObject => None,
            }
        } else {
            header_key
        };
        let path = self.stored_path(parts);
        // Canonicalised while parsing, without building a JSON value: a
        // retry serialised by another library (other key order, other
        // spacing) is the same request.
        let canonical = if is_json { canonical_json(&body) } else { None };
        let fingerprint = fingerprint(&parts.method, &path, canonical.as_deref(), &body);
        Ok(Prepared::new(parts, scope, key, fingerprint, path, body))
    }

    /// The key in the header, checked before the body is read so a
    /// malformed one costs nothing; `None` for a key kept in the body, which
    /// can only be read with it.
    pub(crate) fn header_key(&self, parts: &Parts) -> Result<Option<String>, IdempotencyError> {
        let policy = &self.inner.policy;
        let header = &self.inner.header;
        match policy.key_in {
            KeyIn::Header => {
                read_key(&parts.headers, header, policy.key_max_length).map_err(|problem| {
                    IdempotencyError::InvalidKey {
                        header: header.to_string(),
                        problem,
                    }
                })
            }
            KeyIn::Query => {
                let parameter = &policy.query_parameter;
                let mut values = form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
                    .filter(|(name, _)| name == parameter.as_str())
                    .map(|(_, value)| value);
                let invalid = |problem| IdempotencyError::InvalidQueryKey {
                    parameter: parameter.clone(),
                    problem,
                };
                let Some(value) = values.next() else {
                    return Ok(None);
                };
                if values.next().is_some() {
                    return Err(invalid(super::error::KeyProblem::Repeated));
                }
                super::key::validate(value.as_bytes(), policy.key_max_length)
                    .map(Some)
                    .map_err(invalid)
            }
            KeyIn::Body => Ok(None),
        }
    }

    /// The body cap, once a declared `Content-Length` is within it.
    pub(crate) fn declared_length_within_cap(
        &self,
        parts: &Parts,
    ) -> Result<usize, IdempotencyError> {
        let limit = self.inner.policy.max_request_body;
        if super::support::declares_more_than(parts, limit) {
            return Err(IdempotencyError::BodyTooLarge { limit });
        }
        Ok(limit)
    }

    /// The request line the key table keeps: the path and query, without
    /// the query parameters that carry a credential.
    pub(crate) fn stored_path(&self, parts: &Parts) -> String {
        let secret = self
            .inner
            .scope
            .as_ref()
            .map(|s| s.secret_query_parameters())
            .unwrap_or_default();
        match parts.uri.query() {
            Some(query) if !secret.is_empty() => {
                let kept = form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(
                        form_urlencoded::parse(query.as_bytes())
                            .filter(|(k, _)| !secret.contains(&k.as_ref())),
                    )
                    .finish();
                if kept.is_empty() {
                    parts.uri.path().to_owned()
                } else {
                    format!("{}?{kept}", parts.uri.path())
                }
            }
            _ => parts
                .uri
                .path_and_query()
                .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned()),
        }
    }

    /// The caller's scope, or the extractor's refusal (usually `401`).
    ///
    /// The scope is request input (often a header) on its way into the key
    /// table's index, so it is bounded and checked like a key.
    pub(crate) fn scope_of(&self, parts: &Parts) -> Result<String, IdempotencyError> {
        let Some(extractor) = &self.inner.scope else {
            // Only an instance built with a digest key alone, used directly
            // rather than through `scoped_by_credential`, lacks one.
            return Err(IdempotencyError::ScopeRejected {
                status: http::StatusCode::SERVICE_UNAVAILABLE,
                message: "this route has no scope source configured".to_owned(),
            });
        };
        let scope = extractor
            .scope(parts)
            .map_err(|r| IdempotencyError::ScopeRejected {
                status: r.status,
                message: r.message,
            })?;
        validate(scope.as_bytes(), self.inner.policy.scope_max_length)
            .map_err(|problem| IdempotencyError::InvalidScope { problem })?;
        Ok(scope)
    }

    /// The scope check of a route without a key: when the route declares
    /// the scope extractor's header (`required_headers`, the header
    /// parameters its spec marks required), the caller is identified and its
    /// scope bounded exactly as on keyed routes (`401 caller_unidentified`,
    /// `400 caller_scope_invalid`), so nothing is written under an empty or
    /// malformed caller.
    pub fn require_scope(
        &self,
        parts: &Parts,
        required_headers: &[&str],
    ) -> Result<(), IdempotencyError> {
        let declared = self
            .inner
            .scope
            .as_ref()
            .and_then(|s| s.header())
            .is_some_and(|h| required_headers.iter().any(|r| r.eq_ignore_ascii_case(h)));
        if declared {
            self.scope_of(parts)?;
        }
        Ok(())
    }

    pub(crate) fn key_required(&self) -> bool {
        self.inner.policy.key == KeyRequirement::Required
    }

    /// The refusal of a request that carries no key where one is required.
    pub(crate) fn missing_key(&self) -> IdempotencyError {
        match self.inner.policy.key_in {
            KeyIn::Header => IdempotencyError::MissingKey {
                header: self.inner.header.to_string(),
            },
            KeyIn::Body => IdempotencyError::MissingBodyKey {
                field: self.inner.policy.body_field.clone(),
                not_json: false,
            },
            KeyIn::Query => IdempotencyError::MissingQueryKey {
                parameter: self.inner.policy.query_parameter.clone(),
            },
        }
    }

    /// What a duplicate gets while its key is in flight, by policy (a `Wait`
    /// whose bound has passed answers as `Conflict`). `recovery_point` is
    /// where a phased holder has got to, when known.
    pub(crate) fn in_flight_answer(&self, key: &str, recovery_point: Option<&str>) -> Response {
        match self.inner.policy.in_flight {
            InFlight::Accepted => self.accepted(key, recovery_point),
            InFlight::Conflict | InFlight::Wait(_) => IdempotencyError::KeyInUse.into_response(),
        }
    }

    /// One claim attempt: the atomic insert, and on conflict a read of the
    /// record it lost to and a branch on its state.
    ///
    /// `resumable` names the phased operation allowed to take over an
    /// abandoned in-flight record of its own.
    /// `wait` bounds how long the claim waits for a duplicate's uncommitted
    /// claim; past it the key counts as in flight.
    pub(crate) async fn claim_once(
        &self,
        prepared: &Prepared,
        key: &str,
        resumable: Option<&str>,
        wait: Duration,
    ) -> Result<Claim<DB>, IdempotencyError> {
        let policy = &self.inner.policy;
        let err = |e| self.store_error(e);
        let operation = super::outcome::current_operation();
        // A phased operation keeps its request so the completer can finish it
        // without the client.
        let request = resumable.map(|_| StoredRequest {
            method: prepared.request.method.clone(),
            path: prepared.request.path.clone(),
            body: prepared.body.to_vec(),
        });
        for _ in 0..3 {
            let now = now_ms();
            let claim = NewClaim {
                scope: &prepared.scope,
                key,
                fingerprint: &prepared.fingerprint,
                operation: resumable.or(operation.as_deref()),
                request: request.as_ref(),
                now,
            };
            let mut tx = self.begin_request().await.map_err(&err)?;
            match DB::claim(&mut tx, self.inner.store.settings(), &claim, wait).await {
                Ok(Some(generation)) => {
                    return Ok(Claim::Won(Won {
                        tx,
                        generation,
                        claimed_at: now,
                        resumed: None,
                        attempts: 1,
                    }));
                }
                Ok(None) => {}
                // The original has not committed within the bound: it is in
                // flight. Dropping the aborted transaction gives the
                // connection back at once.
                Err(StoreError::LockWaitExpired { .. }) => return Ok(Claim::InFlight(None)),
                Err(e) => return Err(err(e)),
            }
            let Some(record) = DB::load(&mut tx, self.inner.store.settings(), &prepared.scope, key)
                .await
                .map_err(&err)?
            else {
                // Deleted by the reaper between the two statements: claim again.
                continue;
            };
            let lock_cutoff = now.saturating_sub(ms(policy.lock_timeout));
            let expired = record.created_at < now.saturating_sub(ms(policy.replay_window));
            if expired {
                // After the replay window the key names a new request. The
                // conditional UPDATE is the arbiter; a concurrent caller that
                // re-claims first makes it match nothing, and we look again.
                let cutoff = now.saturating_sub(ms(policy.replay_window));
                if let Some(generation) = DB::reclaim_expired(
                    &mut tx,
                    self.inner.store.settings(),
                    &claim,
                    cutoff,
                    lock_cutoff,
                )
                .await
                .map_err(&err)?
                {
                    DB::delete_steps(&mut tx, self.inner.store.settings(), &prepared.scope, key)
                        .await
                        .map_err(&err)?;
                    DB::lift_claim_bound(&mut tx, self.inner.store.settings())
                        .await
                        .map_err(&err)?;
                    return Ok(Claim::Won(Won {
                        tx,
                        generation,
                        claimed_at: now,
                        resumed: None,
                        attempts: 1,
                    }));
                }
                if record.state == KeyState::Complete {
                    drop(tx);
                    continue;
                }
            }
            if record.fingerprint != prepared.fingerprint {
                self.confirm(tx, &prepared.scope, key).await.map_err(&err)?;
                return Err(IdempotencyError::KeyReused {
                    status: policy.mismatch.status(),
                });
            }
            match record.state {
                KeyState::Complete => {
                    return match record.response {
                        Some(response) => {
                            self.confirm(tx, &prepared.scope, key).await.map_err(&err)?;
                            Ok(Claim::Replay(response))
                        }
                        None => Err(err(StoreError::Corrupt {
                            what: "complete record without response",
                            value: key.to_owned(),
                        })),
                    };
                }
                KeyState::Exhausted => {
                    self.confirm(tx, &prepared.scope, key).await.map_err(&err)?;
                    return Err(IdempotencyError::Exhausted {
                        recovery_point: record.recovery_point,
                        attempts: record.attempts,
                    });
                }
                KeyState::InFlight => {
                    let stale = record.locked_at.is_none_or(|at| at < lock_cutoff);
                    let ours = resumable.is_some() && record.operation.as_deref() == resumable;
                    if stale
                        && ours
                        && let Some((generation, attempts)) = DB::take_over(
                            &mut tx,
                            self.inner.store.settings(),
                            &prepared.scope,
                            key,
                            lock_cutoff,
                            now,
                        )
                        .await
                        .map_err(&err)?
                    {
                        tracing::info!(
                            scope = %prepared.scope,
                            key,
                            recovery_point = %record.recovery_point,
                            attempts,
                            "took over an abandoned request"
                        );
                        DB::lift_claim_bound(&mut tx, self.inner.store.settings())
                            .await
                            .map_err(&err)?;
                        return Ok(Claim::Won(Won {
                            tx,
                            generation,
                            claimed_at: record.created_at,
                            resumed: Some(record),
                            attempts,
                        }));
                    }
                    if stale
                        && ours
                        && let Some(due) = record.next_attempt_at.filter(|due| *due > now)
                    {
                        return Ok(Claim::NotDue {
                            recovery_point: record.recovery_point,
                            due,
                        });
                    }
                    return Ok(Claim::InFlight(Some(record.recovery_point)));
                }
            }
        }
        Ok(Claim::InFlight(None))
    }

    /// Claims, applying the in-flight policy when the key is busy. `Ok(Err(response))`
    /// is a finished answer (replay, 202); `Err` a protocol error.
    ///
    /// `started` is when the request began waiting for its key, so time spent
    /// queueing for the key's turn counts against an `in-flight: wait` bound
    /// and the duplicate wait. (Time spent taking a pool connection is not
    /// waiting for the key, and does not.)
    pub(crate) async fn claim(
        &self,
        prepared: &Prepared,
        key: &str,
        resumable: Option<&str>,
        started: Instant,
    ) -> Result<Result<Won<DB>, Response>, IdempotencyError> {
        let bound = self.inner.policy.duplicate_wait_bound();
        let mut pause = Duration::from_millis(20);
        let mut waited = started.elapsed();
        loop {
            let wait = bound.saturating_sub(waited);
            match self.claim_once(prepared, key, resumable, wait).await? {
                Claim::Won(won) => {
                    super::outcome::note_generation(won.generation);
                    return Ok(Ok(won));
                }
                Claim::Replay(stored) => return Ok(Err(stored.replay())),
                Claim::NotDue {
                    recovery_point,
                    due,
                } => {
                    // Nothing runs now: the key is held by its schedule.
                    let answer = IdempotencyError::Incomplete {
                        recovery_point,
                        message: "waiting out the backoff after a transient failure".to_owned(),
                        retry_after: until(due),
                    };
                    return Ok(Err(marked(answer.into_response(), Outcome::InFlight)));
                }
                Claim::InFlight(recovery_point) => match self.inner.policy.in_flight {
                    InFlight::Conflict => return Err(IdempotencyError::KeyInUse),
                    InFlight::Accepted => {
                        return Ok(Err(self.in_flight_answer(key, recovery_point.as_deref())));
                    }
                    InFlight::Wait(bound) => {
                        if started.elapsed() + pause > bound {
                            return Err(IdempotencyError::KeyInUse);
                        }
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(500));
                        waited = started.elapsed();
                    }
                },
            }
        }
    }

    /// Stores `response` (status, allow-listed headers, body under the cap) in
    /// `tx` and commits: the key turns complete together with whatever the
    /// handler wrote in the same transaction. Returns what to send.
    pub(crate) async fn finish(
        &self,
        mut tx: Transaction<'static, DB>,
        scope: &str,
        key: &str,
        generation: i64,
        response: Response,
    ) -> Response {
        let (parts, stored) = match self.capture(response).await {
            Ok(captured) => captured,
            Err(send) => return send,
        };
        match DB::complete(
            &mut tx,
            self.inner.store.settings(),
            scope,
            key,
            generation,
            &stored,
            now_ms(),
        )
        .await
        {
            Ok(true) => {}
            Ok(false) => return IdempotencyError::LockLost.into_response(),
            Err(e) => return self.store_error(e).into_response(),
        }
        if let Err(e) = self.inner.store.commit(tx).await {
            return self.store_error(e).into_response();
        }
        marked(
            Response::from_parts(parts, Body::from(stored.body)),
            Outcome::Executed,
        )
    }

    /// Reads the handler's response under the cap and keeps what a replay
    /// sends. `Err` is what to send at once, with the transaction rolled
    /// back by its caller: a 5xx under `failure-replay: reattempt` (neither
    /// the effect nor the claim survives, so a retry runs again from
    /// nothing), or a response over the cap.
    async fn capture(
        &self,
        response: Response,
    ) -> Result<(http::response::Parts, StoredResponse), Response> {
        let (parts, body) = response.into_parts();
        if self.inner.policy.failure_replay == FailureReplay::Reattempt
            && parts.status.is_server_error()
        {
            return Err(Response::from_parts(parts, body));
        }
        let limit = self.inner.policy.max_response_body;
        let bytes = match Limited::new(body, limit).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(IdempotencyError::ResponseTooLarge { limit }.into_response());
            }
            Err(_) => return Err(IdempotencyError::ResponseUnreadable.into_response()),
        };
        let stored = StoredResponse::capture(
            parts.status,
            &parts.headers,
            &self.inner.replay_headers,
            bytes,
        );
        Ok((parts, stored))
    }

    /// The claim at commit ([`ClaimAt::Commit`]): the handler has run in
    /// `tx`; its response goes into the key row, inserted complete as the
    /// transaction's last statement. If the key already has a record, the
    /// handler's effect rolls back and the record answers (replay, reused
    /// key, in flight). `waited` is how long the request queued for its key's
    /// turn: the wait on a concurrent duplicate's commit is bounded by what
    /// is left of the duplicate wait.
    ///
    /// [`ClaimAt::Commit`]: super::ClaimAt::Commit
    pub(crate) async fn finish_at_commit(
        &self,
        mut tx: Transaction<'static, DB>,
        prepared: &Prepared,
        key: &str,
        response: Response,
        waited: Duration,
    ) -> Response {
        let policy = &self.inner.policy;
        let (parts, stored) = match self.capture(response).await {
            Ok(captured) => captured,
            Err(send) => return send,
        };
        let wait = policy.duplicate_wait_bound().saturating_sub(waited);
        let operation = super::outcome::current_operation();
        for _ in 0..2 {
            let now = now_ms();
            let claim = NewClaim {
                scope: &prepared.scope,
                key,
                fingerprint: &prepared.fingerprint,
                operation: operation.as_deref(),
                request: None,
                now,
            };
            let record = match DB::claim_complete(
                &mut tx,
                self.inner.store.settings(),
                &claim,
                &stored,
                wait,
            )
            .await
            {
                Ok(Some(_)) => {
                    return match self.inner.store.commit(tx).await {
                        Ok(()) => marked(
                            Response::from_parts(parts, Body::from(stored.body)),
                            Outcome::Executed,
                        ),
                        Err(e) => self.store_error(e).into_response(),
                    };
                }
                // The duplicate has not committed within the bound.
                Err(StoreError::LockWaitExpired { .. }) => {
                    drop(tx);
                    return self.in_flight_answer(key, None);
                }
                // The transaction may be aborted (a failed statement of the
                // handler's, or of this one): it rolls back, and a record
                // committed meanwhile still answers.
                Err(e) => {
                    drop(tx);
                    return match self.load(&prepared.scope, key, &prepared.fingerprint).await {
                        Ok(Some(record)) => self.answer_existing(record, prepared, key),
                        _ => self.store_error(e).into_response(),
                    };
                }
                Ok(None) => {
                    match DB::load(&mut tx, self.inner.store.settings(), &prepared.scope, key).await
                    {
                        Ok(record) => record,
                        Err(e) => return self.store_error(e).into_response(),
                    }
                }
            };
            let Some(record) = record else {
                // Reaped between the two statements.
                continue;
            };
            let cutoff = now.saturating_sub(ms(policy.replay_window));
            if record.created_at < cutoff && record.state == KeyState::Complete {
                // Past its window the key names a new request.
                match DB::delete_expired(
                    &mut tx,
                    self.inner.store.settings(),
                    &prepared.scope,
                    key,
                    cutoff,
                )
                .await
                {
                    Ok(_) => continue,
                    Err(e) => return self.store_error(e).into_response(),
                }
            }
            // The handler's effect rolls back with `tx`; a final answer
            // comes from the record read again, and confirmed, on its own.
            drop(tx);
            if !answers_finally(&record, &prepared.fingerprint) {
                return self.answer_existing(record, prepared, key);
            }
            return match self.load(&prepared.scope, key, &prepared.fingerprint).await {
                Ok(Some(record)) => self.answer_existing(record, prepared, key),
                Ok(None) => IdempotencyError::KeyInUse.into_response(),
                Err(e) => self.store_error(e).into_response(),
            };
        }
        drop(tx);
        IdempotencyError::KeyInUse.into_response()
    }

    /// Reads a record outside any transaction of the caller's; one that
    /// gives a final answer to a request of `fingerprint` is confirmed
    /// ([`Self::confirm`]).
    async fn load(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<Option<KeyRecord>, StoreError> {
        // In a transaction: behind a transaction pooler an unnamed
        // statement is only safe inside one.
        let mut tx = self.inner.store.pool().begin().await?;
        let record = DB::load(&mut tx, self.inner.store.settings(), scope, key).await?;
        if record
            .as_ref()
            .is_some_and(|r| answers_finally(r, fingerprint))
        {
            self.confirm(tx, scope, key).await?;
        }
        Ok(record)
    }

    /// Commits a transaction that read a record about to give a final
    /// answer (a replay, a reused key, an exhausted one), on PostgreSQL
    /// after [`Backend::confirm_read`]: the answer goes out only once the
    /// record is on the synchronous standby, and not at all when the
    /// COMMIT says it might not be ([`StoreError::Unreplicated`]), or
    /// fails. Elsewhere the transaction is rolled back: it wrote nothing.
    async fn confirm(
        &self,
        mut tx: Transaction<'static, DB>,
        scope: &str,
        key: &str,
    ) -> Result<(), StoreError> {
        if !DB::SYNCHRONOUS_STANDBYS {
            return Ok(());
        }
        DB::confirm_read(&mut tx, self.inner.store.settings(), scope, key).await?;
        self.inner.store.commit(tx).await
    }

    /// What a request gets from a record its key already has.
    fn answer_existing(&self, record: KeyRecord, prepared: &Prepared, key: &str) -> Response {
        if record.fingerprint != prepared.fingerprint {
            return IdempotencyError::KeyReused {
                status: self.inner.policy.mismatch.status(),
            }
            .into_response();
        }
        match (record.state, record.response) {
            (KeyState::Complete, Some(response)) => response.replay(),
            (KeyState::Complete, None) => self
                .store_error(StoreError::Corrupt {
                    what: "complete record without response",
                    value: key.to_owned(),
                })
                .into_response(),
            (KeyState::Exhausted, _) => IdempotencyError::Exhausted {
                recovery_point: record.recovery_point,
                attempts: record.attempts,
            }
            .into_response(),
            (KeyState::InFlight, _) => self.in_flight_answer(key, Some(&record.recovery_point)),
        }
    }
}

/// Whether `record` answers a request of `fingerprint` with something the
/// caller must not retry: anything but an in-flight conflict.
fn answers_finally(record: &KeyRecord, fingerprint: &str) -> bool {
    record.fingerprint != fingerprint || record.state != KeyState::InFlight
}

/// Whether the protocol applies to `method` (safe methods pass through).
pub(crate) fn is_unsafe(method: &Method) -> bool {
    !matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

impl<DB: Backend> Idempotency<DB> {
    /// [`Self::prepare`] for an upload: the key and scope checked first,
    /// then the body written to a temporary file under the cap while it is
    /// hashed; the fingerprint covers that hash.
    pub(crate) async fn prepare_upload(
        &self,
        parts: &Parts,
        body: Body,
    ) -> Result<(Prepared, Upload), IdempotencyError> {
        let key = self.header_key(parts)?;
        // Refused before a byte is written: a required key that is missing.
        if key.is_none() && self.key_required() {
            return Err(self.missing_key());
        }
        let scope = self.scope_of(parts)?;
        let limit = self.declared_length_within_cap(parts)?;
        let (file, len, digest) = spool(body, limit).await?;
        let path = self.stored_path(parts);
        let fingerprint = super::key::fingerprint(&parts.method, &path, Some(&digest), &[]);
        let prepared = Prepared::new(parts, scope, key, fingerprint, path, Bytes::new());
        let upload = Upload::spooled(file, len, limit);
        Ok((prepared, upload))
    }
}

#[cfg(test)]
mod tests {
    use super::body_kind;

    #[test]
    fn body_kind_reads_the_essence_in_any_case() {
        let json = (true, false);
        let form = (false, true);
        let neither = (false, false);
        assert_eq!(body_kind(Some("application/json")), json);
        assert_eq!(body_kind(Some("Application/JSON; charset=utf-8")), json);
        assert_eq!(body_kind(Some("application/merge-patch+json")), json);
        assert_eq!(body_kind(Some("application/vnd.idem.note+JSON ;v=2")), json);
        assert_eq!(body_kind(Some("application/x-www-form-urlencoded")), form);
        assert_eq!(body_kind(Some("text/plain")), neither);
        assert_eq!(body_kind(Some("json")), neither);
        assert_eq!(body_kind(Some("+json")), json);
        assert_eq!(body_kind(Some("")), neither);
        assert_eq!(body_kind(None), neither);
    }
}
