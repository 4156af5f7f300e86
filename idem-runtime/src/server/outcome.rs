//! What became of each request, decided where the protocol decides it and
//! counted once, where the request ends.
//!
//! Every answer the protocol makes carries its [`Outcome`] in the response's
//! extensions: a replay, a conflict, a refusal, the store's failure. The one
//! place that counts is [`observed`], around the whole route: the layer,
//! a generated route and a phased handler all end there, so they count the
//! same way, and a request that got no outcome of its own (a handler's
//! answer) is `executed`.

use std::borrow::Cow;
use std::future::Future;
use std::time::Instant;

use axum::response::Response;
use sha2::{Digest, Sha256};
use tracing::Instrument;
use tracing::field::Empty;

use crate::metric;

/// What became of one request on a keyed or generated route: the
/// `outcome` label of `idem_requests_total`. Each request gets exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The operation ran, for a new key or without one, and its answer is
    /// stored with the key, whatever status it chose. (A run whose answer
    /// could not be stored, such as a `5xx` under `failure-replay:
    /// reattempt`, ran too and counts here.)
    Executed,
    /// A stored answer was sent again, or the terminal `exhausted` refusal
    /// of a key whose request was given up: nothing ran.
    Replayed,
    /// Another request holds the key: `409 idempotency_key_in_use`, the
    /// `202` of `in-flight: accepted`, a phased request waiting out its
    /// backoff, or a run that lost its claim to a takeover.
    InFlight,
    /// The key was used before with another request: `409` or `422
    /// idempotency_key_reused`. A client bug.
    Reused,
    /// Answered before anything ran and nothing stored: the key missing or
    /// malformed, the caller unidentified, the request off the spec, `415`,
    /// the body too large, the operation's in-flight limit, a handler's
    /// [`Reject`](super::Reject), the caller's deadline (`504`, on arrival
    /// or while it ran: its transaction rolls back unless its commit had
    /// landed).
    Refused,
    /// `503 idempotency_store_unavailable`: the key store could not be
    /// reached, or failed under the operation; nothing was recorded.
    StoreUnavailable,
    /// A phased request taken over from an abandoned holder or continued
    /// from its recovery point.
    Resumed,
}

impl Outcome {
    /// Every outcome, in the order the docs list them.
    pub const ALL: [Outcome; 7] = [
        Outcome::Executed,
        Outcome::Replayed,
        Outcome::InFlight,
        Outcome::Reused,
        Outcome::Refused,
        Outcome::StoreUnavailable,
        Outcome::Resumed,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Executed => "executed",
            Outcome::Replayed => "replayed",
            Outcome::InFlight => "in_flight",
            Outcome::Reused => "reused",
            Outcome::Refused => "refused",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::Resumed => "resumed",
        }
    }

    /// The outcome the protocol gave `response`, if it gave one.
    pub fn of(response: &Response) -> Option<Outcome> {
        response.extensions().get::<Outcome>().copied()
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `response`, saying what became of its request.
pub(crate) fn marked(mut response: Response, outcome: Outcome) -> Response {
    response.extensions_mut().insert(outcome);
    response
}

/// The outcome of a request whose claim was won and whose operation ran
/// (`ran`: executed or resumed): the answer's own, where it says the store
/// failed, the claim was lost, the request was refused, or nothing ran (a
/// takeover that found the record past its schedule); `ran` otherwise.
pub(crate) fn after_claim(response: Response, ran: Outcome) -> Response {
    let outcome = match Outcome::of(&response) {
        Some(
            kept @ (Outcome::StoreUnavailable
            | Outcome::InFlight
            | Outcome::Refused
            | Outcome::Replayed),
        ) => kept,
        _ if is_rejection(&response) => Outcome::Refused,
        _ => ran,
    };
    marked(response, outcome)
}

/// The outcome of a finished request: the one the protocol gave it, or,
/// for a handler's own answer, `refused` when it is a
/// [`Reject`](super::Reject) and `executed` otherwise.
fn settled(response: &Response) -> Outcome {
    Outcome::of(response).unwrap_or(if is_rejection(response) {
        Outcome::Refused
    } else {
        Outcome::Executed
    })
}

/// Counts one request: `idem_requests_total` and
/// `idem_request_duration_seconds`, by operation and outcome.
pub(crate) fn count(operation: Cow<'static, str>, outcome: Outcome, started: Instant) {
    let labels = [
        ("operation", metrics::SharedString::from(operation)),
        (
            "outcome",
            metrics::SharedString::const_str(outcome.as_str()),
        ),
    ];
    metrics::counter!(metric::REQUESTS_TOTAL, &labels).increment(1);
    metrics::histogram!(metric::REQUEST_DURATION_SECONDS, &labels)
        .record(started.elapsed().as_secs_f64());
}

/// Runs one request of `operation` (its operationId) inside its span, and
/// counts what became of it: the only place `idem_requests_total` is
/// incremented. The idempotency layer, phased handlers and every generated
/// route end here.
///
/// The span, `idem.request`, carries `operation` and, once known, the key,
/// a digest of the caller's scope (never the scope or a credential), the
/// lock generation and the `outcome`, so logs and metrics name the same
/// outcome. A request dropped before it is answered (its deadline passed
/// while it ran, or its caller went away) is counted `refused`.
///
/// ```no_run
/// # async fn demo(request: axum::extract::Request) -> axum::response::Response {
/// use axum::response::IntoResponse;
/// idem_runtime::server::observed("createCharge", async move {
///     (http::StatusCode::CREATED, "charged").into_response()
/// })
/// .await
/// # }
/// ```
pub async fn observed<F>(operation: impl Into<Cow<'static, str>>, request: F) -> Response
where
    F: Future<Output = Response>,
{
    let operation = operation.into();
    let started = Instant::now();
    let span = tracing::info_span!(
        "idem.request",
        operation = %operation,
        key = Empty,
        scope_digest = Empty,
        generation = Empty,
        outcome = Empty,
    );
    // Counts the request if it is dropped before it is answered.
    let name = operation.clone();
    let mut unanswered = Unanswered {
        operation: Some(operation),
        started,
        span: span.clone(),
    };
    let response = OPERATION
        .scope(name, request.instrument(span.clone()))
        .await;
    let outcome = settled(&response);
    span.record("outcome", outcome.as_str());
    span.in_scope(|| {
        tracing::debug!(
            outcome = outcome.as_str(),
            status = response.status().as_u16(),
            "answered"
        );
    });
    if let Some(operation) = unanswered.operation.take() {
        count(operation, outcome, started);
    }
    marked(response, outcome)
}

tokio::task_local! {
    /// The operation the request this task serves belongs to.
    static OPERATION: Cow<'static, str>;
}

/// The name of the operation being served ([`observed`]'s), which the key
/// store writes on the record, cut to the column's 255 bytes; `None`
/// outside a request.
pub(crate) fn current_operation() -> Option<Cow<'static, str>> {
    OPERATION
        .try_with(|name| {
            if name.len() <= 255 {
                return name.clone();
            }
            let end = (0..=255).rev().find(|&i| name.is_char_boundary(i));
            Cow::Owned(name[..end.unwrap_or(0)].to_owned())
        })
        .ok()
}

/// A request dropped before its answer: the caller's deadline passed while
/// it ran (answered `504 deadline_exceeded` around it) or the caller went
/// away. Its transaction rolls back unless its commit had landed, and a
/// retry with its key tells which; it is counted `refused`.
struct Unanswered {
    operation: Option<Cow<'static, str>>,
    started: Instant,
    span: tracing::Span,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(operation) = self.operation.take() {
            self.span.record("outcome", Outcome::Refused.as_str());
            count(operation, Outcome::Refused, self.started);
        }
    }
}

/// Notes the key and the caller's scope (as a digest) on the request's span.
pub(crate) fn note_key(scope: &str, key: &str) {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    span.record("key", key);
    span.record("scope_digest", scope_digest(scope).as_str());
}

/// Notes the lock generation a request holds on its span.
pub(crate) fn note_generation(generation: i64) {
    tracing::Span::current().record("generation", generation);
}

/// The first 16 hex digits of the SHA-256 of `scope`: enough to tell
/// callers apart in logs and to match `idem keys show`, and neither an
/// account id nor a credential.
pub fn scope_digest(scope: &str) -> String {
    Sha256::digest(scope.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The response extension that marks a refusal the protocol does not
/// record ([`Reject`](super::Reject), [`Unavailable`](super::Unavailable),
/// [`Fault`](super::Fault)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unrecorded;

/// Whether `response` came from a [`Reject`](super::Reject) and must not be recorded.
pub fn is_rejection(response: &Response) -> bool {
    response.extensions().get::<Unrecorded>().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_the_documented_ones() {
        let labels: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(
            labels,
            [
                "executed",
                "replayed",
                "in_flight",
                "reused",
                "refused",
                "store_unavailable",
                "resumed"
            ]
        );
    }

    #[test]
    fn the_scope_digest_is_short_and_stable() {
        assert_eq!(scope_digest("acct_1"), scope_digest("acct_1"));
        assert_ne!(scope_digest("acct_1"), scope_digest("acct_2"));
        assert_eq!(scope_digest("acct_1").len(), 16);
    }
}
