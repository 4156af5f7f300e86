//! The key status resource: where `in-flight: accepted` sends a duplicate.
//!
//! `GET {prefix}/{key}` answers, for the caller's own scope only, what a
//! retry of the original request would get without being one: `202` while
//! the key is in flight, the stored response once it is complete, `404`
//! otherwise. It only reads: it never claims a key, runs a handler or
//! resumes an operation, so polling it cannot start or repeat anything.

use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};

use super::clock::{ms, now_ms};
use super::engine::Idempotency;
use super::error::IdempotencyError;
use super::key::{encode_path_key, read_path_key};
use super::store::StoreError;
use super::store::{Backend, KeyState};

/// How long a client is asked to wait before polling again.
const POLL_AFTER: Duration = Duration::from_secs(crate::protocol::IN_FLIGHT_RETRY_AFTER_SECS);

impl<DB: Backend> Idempotency<DB> {
    /// The status URL of `key`: the configured prefix and the key as one
    /// percent-encoded path segment.
    pub(crate) fn status_url(&self, key: &str) -> String {
        format!(
            "{}/{}",
            self.inner.policy.status_prefix,
            encode_path_key(key)
        )
    }

    /// `202` for a key in flight: `Retry-After`, `Location` naming the
    /// status resource, and the same URL (plus the recovery point of a
    /// phased holder, when known) in the JSON body.
    pub(crate) fn accepted(&self, key: &str, recovery_point: Option<&str>) -> Response {
        let url = self.status_url(key);
        let body = crate::protocol::accepted_json(&url, recovery_point);
        let mut response = (StatusCode::ACCEPTED, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(header::RETRY_AFTER, HeaderValue::from(POLL_AFTER.as_secs()));
        // The prefix is checked at build time and the key is percent-encoded
        // to unreserved characters, so this cannot fail; if it ever did, the
        // body still carries the URL.
        if let Ok(location) = HeaderValue::from_str(&url) {
            headers.insert(header::LOCATION, location);
        }
        super::outcome::marked(response, super::outcome::Outcome::InFlight)
    }

    /// An axum router serving the key status resource at
    /// `{prefix}/{key}` ([`Policy::status_prefix`](super::Policy::status_prefix),
    /// default `/idempotency-keys/{key}`), for `GET` (and `HEAD`). Merge it
    /// into the app at its root, so the path matches the `Location` that
    /// `in-flight: accepted` hands out, and behind the same authentication
    /// as the keyed routes: the caller's scope comes from the same
    /// [`ScopeExtractor`](super::ScopeExtractor), so a caller only ever sees
    /// its own keys.
    ///
    /// - in flight: `202` + `Retry-After`, code `idempotency_key_in_flight`,
    ///   with `recovery_point` for a phased operation;
    /// - complete: the stored response, byte for byte, with
    ///   `Idempotent-Replayed: true`;
    /// - exhausted (a phased request given up at its resume bound): `409`,
    ///   code `idempotency_key_exhausted`, naming the recovery point;
    /// - unknown, another caller's, or past the replay window: `404`, code
    ///   `idempotency_key_unknown`;
    /// - a malformed key in the path: `400 idempotency_key_invalid`, as for a
    ///   header key; no scope: `401 caller_unidentified`.
    ///
    /// ```no_run
    /// # use idem_runtime::server::*;
    /// # fn demo(idem: Idempotency<sqlx::Sqlite>, op: impl Operation<sqlx::Sqlite>) {
    /// let app: axum::Router = axum::Router::new()
    ///     .route("/checkout", axum::routing::post(idem.phased(op)))
    ///     .merge(idem.status_router());
    /// # }
    /// ```
    pub fn status_router<S>(&self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        let path = format!("{}/{{key}}", self.inner.policy.status_prefix);
        let idem = self.clone();
        Router::new().route(
            &path,
            get(move |request: Request| {
                let idem = idem.clone();
                async move { idem.key_status(request.into_parts().0).await }
            }),
        )
    }

    async fn key_status(&self, parts: Parts) -> Response {
        match self.read_status(&parts).await {
            Ok(response) => response,
            Err(e) => e.into_response(),
        }
    }

    async fn read_status(&self, parts: &Parts) -> Result<Response, IdempotencyError> {
        // The route matched `{prefix}/{key}`, so the key is the last segment
        // of the raw path, still percent-encoded; taking the last segment
        // keeps working when the router is nested under another path.
        let segment = parts.uri.path().rsplit('/').next().unwrap_or("");
        let key = read_path_key(segment, self.inner.policy.key_max_length)
            .map_err(|problem| IdempotencyError::InvalidPathKey { problem })?;
        let scope = self.scope_of(parts)?;
        // A single-phase request in this process holds an uncommitted claim
        // that no read can see; its turn on the key is what shows it. Asking
        // the gate first also keeps a poll on SQLite from queueing for the
        // one connection that request holds.
        if self.store().gate().is_held(&scope, &key) {
            return Ok(self.in_flight_status(&key, None));
        }
        let mut conn = self
            .store()
            .pool()
            .begin()
            .await
            .map_err(|e| self.store_error(e.into()))?;
        let record = DB::load(&mut conn, self.store().settings(), &scope, &key)
            .await
            .map_err(|e| self.store_error(e))?;
        drop(conn);
        let Some(record) = record else {
            return Err(IdempotencyError::KeyUnknown);
        };
        let policy = self.policy();
        let expired = record.created_at < now_ms().saturating_sub(ms(policy.replay_window));
        match record.state {
            // Past the window the key names a new request: its old outcome is
            // no longer an answer to anything.
            KeyState::Complete if expired => Err(IdempotencyError::KeyUnknown),
            KeyState::Complete => match record.response {
                Some(stored) => Ok(stored.replay()),
                None => Err(self.store_error(StoreError::Corrupt {
                    what: "complete record without response",
                    value: key,
                })),
            },
            KeyState::InFlight => {
                let point = record.request.is_some().then_some(record.recovery_point);
                Ok(self.in_flight_status(&key, point.as_deref()))
            }
            KeyState::Exhausted => Err(IdempotencyError::Exhausted {
                recovery_point: record.recovery_point,
                attempts: record.attempts,
            }),
        }
    }

    /// The status resource's answer for a key in flight: the same `202` a
    /// duplicate gets under `in-flight: accepted`, whatever the policy, since
    /// a poll is not a duplicate.
    fn in_flight_status(&self, key: &str, recovery_point: Option<&str>) -> Response {
        self.accepted(key, recovery_point)
    }
}
