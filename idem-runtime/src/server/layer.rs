//! The tower layer for single-phase handlers, and the extractors it feeds.

use std::convert::Infallible;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use sqlx::Transaction;
use tower::{Layer, Service};

use super::config::ClaimAt;
use super::engine::{Idempotency, Prepared, is_unsafe};
use super::error::IdempotencyError;
use super::response::is_rejection;
use super::store::{Backend, BoxFuture};

type Slot<DB> = Arc<Mutex<Option<Transaction<'static, DB>>>>;

struct TxSlot<DB: Backend>(Slot<DB>);

impl<DB: Backend> Clone for TxSlot<DB> {
    fn clone(&self) -> Self {
        TxSlot(Arc::clone(&self.0))
    }
}

fn layer_missing() -> Response {
    super::error::error_response(
        http::StatusCode::INTERNAL_SERVER_ERROR,
        "idempotency_layer_missing",
        "this extractor is only available on routes behind the idempotency layer",
        false,
        None,
    )
}

/// The key of the current request, for handlers that pass a derived key on
/// to another system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    /// The caller's scope.
    pub scope: String,
    /// The key; `None` for an unkeyed request where the key is optional.
    pub key: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<IdempotencyKey>()
            .cloned()
            .ok_or_else(layer_missing)
    }
}

/// The transaction a handler behind [`IdempotencyLayer`] writes its effect
/// in. It already holds the key's claim; the layer stores the handler's
/// response in it and commits once, so the effect and the key's completion
/// are one atomic unit.
///
/// Dereferences to the connection, so it goes wherever an executor does:
/// `sqlx::query("…").execute(&mut *tx)`.
///
/// Keep it inside the handler: the layer takes it back when the handler
/// returns; one still held elsewhere is refused (nothing is applied).
pub struct IdemTx<DB: Backend> {
    tx: Option<Transaction<'static, DB>>,
    slot: Slot<DB>,
}

impl<DB: Backend> std::fmt::Debug for IdemTx<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdemTx").finish_non_exhaustive()
    }
}

impl<DB: Backend> Deref for IdemTx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &Self::Target {
        match &self.tx {
            Some(tx) => tx,
            // `tx` is only taken in `drop`.
            None => unreachable!("IdemTx used after drop"),
        }
    }
}

impl<DB: Backend> DerefMut for IdemTx<DB> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match &mut self.tx {
            Some(tx) => tx,
            None => unreachable!("IdemTx used after drop"),
        }
    }
}

impl<DB: Backend> Drop for IdemTx<DB> {
    fn drop(&mut self) {
        if let (Some(tx), Ok(mut slot)) = (self.tx.take(), self.slot.lock()) {
            *slot = Some(tx);
        }
    }
}

impl<DB: Backend, S: Send + Sync> FromRequestParts<S> for IdemTx<DB> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let missing = layer_missing;
        let slot = parts
            .extensions
            .get::<TxSlot<DB>>()
            .ok_or_else(missing)?
            .0
            .clone();
        let tx = slot
            .lock()
            .ok()
            .and_then(|mut s| s.take())
            .ok_or_else(missing)?;
        Ok(IdemTx { tx: Some(tx), slot })
    }
}

/// Tower layer running the key protocol around single-phase handlers.
///
/// Apply it with `Router::route_layer` so the route is matched first. Safe
/// methods (GET, HEAD, OPTIONS, TRACE) pass through untouched.
pub struct IdempotencyLayer<DB: Backend> {
    idem: Idempotency<DB>,
    validator: Option<Validator>,
}

/// A check that runs on the request head and body after they are read and
/// before the key is claimed: `Some(refusal)` is answered as it is and
/// records nothing, `None` lets the request through.
pub type Validator = Arc<dyn Fn(&Parts, &Bytes) -> Option<Response> + Send + Sync>;

impl<DB: Backend> Clone for IdempotencyLayer<DB> {
    fn clone(&self) -> Self {
        IdempotencyLayer {
            idem: self.idem.clone(),
            validator: self.validator.clone(),
        }
    }
}

impl<DB: Backend> IdempotencyLayer<DB> {
    /// Runs `check` on every keyed request before its key is claimed. A
    /// request it refuses leaves no key row, so the caller can correct it and
    /// retry with the same key. (Checks a handler makes itself return
    /// [`Reject`](super::Reject) instead.)
    ///
    /// ```no_run
    /// # fn demo(idem: idem_runtime::server::Idempotency<sqlx::Sqlite>) {
    /// use axum::response::IntoResponse;
    /// let layer = idem.layer().validate(|_parts, body| {
    ///     serde_json::from_slice::<serde_json::Value>(body)
    ///         .err()
    ///         .map(|e| (http::StatusCode::BAD_REQUEST, e.to_string()).into_response())
    /// });
    /// # let _ = layer; }
    /// ```
    pub fn validate<F>(mut self, check: F) -> Self
    where
        F: Fn(&Parts, &Bytes) -> Option<Response> + Send + Sync + 'static,
    {
        self.validator = Some(Arc::new(check));
        self
    }
}

impl<DB: Backend> std::fmt::Debug for IdempotencyLayer<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer").finish_non_exhaustive()
    }
}

impl<DB: Backend> Idempotency<DB> {
    /// The layer for single-phase handlers taking [`IdemTx`].
    pub fn layer(&self) -> IdempotencyLayer<DB> {
        IdempotencyLayer {
            idem: self.clone(),
            validator: None,
        }
    }
}

impl<DB: Backend, S> Layer<S> for IdempotencyLayer<DB> {
    type Service = IdempotencyService<DB, S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService {
            idem: self.idem.clone(),
            validator: self.validator.clone(),
            inner,
        }
    }
}

/// The service [`IdempotencyLayer`] produces.
pub struct IdempotencyService<DB: Backend, S> {
    idem: Idempotency<DB>,
    validator: Option<Validator>,
    inner: S,
}

impl<DB: Backend, S: Clone> Clone for IdempotencyService<DB, S> {
    fn clone(&self) -> Self {
        IdempotencyService {
            idem: self.idem.clone(),
            validator: self.validator.clone(),
            inner: self.inner.clone(),
        }
    }
}

impl<DB: Backend, S> std::fmt::Debug for IdempotencyService<DB, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyService").finish_non_exhaustive()
    }
}

impl<DB, S> Service<Request> for IdempotencyService<DB, S>
where
    DB: Backend,
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The clone is fresh; the instance polled ready goes into the future.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let idem = self.idem.clone();
        let validator = self.validator.clone();
        Box::pin(async move { Ok(run(idem, validator, inner, request).await) })
    }
}

/// Runs the handler with `tx`, and takes the transaction back. `Err` is
/// what to send at once: the handler's refusal ([`is_rejection`]), whose
/// writes roll back with the claim so nothing of the request remains, or a
/// transaction the handler did not give back.
async fn handle<DB, S>(
    inner: &mut S,
    mut parts: Parts,
    prepared: &Prepared,
    tx: Transaction<'static, DB>,
) -> Result<(Response, Transaction<'static, DB>), Response>
where
    DB: Backend,
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let slot: Slot<DB> = Arc::new(Mutex::new(Some(tx)));
    parts.extensions.insert(TxSlot(Arc::clone(&slot)));
    parts.extensions.insert(IdempotencyKey {
        scope: prepared.scope.clone(),
        key: prepared.key.clone(),
    });
    let request = Request::from_parts(parts, Body::from(prepared.body.clone()));
    let response = match inner.call(request).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let Some(tx) = slot.lock().ok().and_then(|mut s| s.take()) else {
        return Err(IdempotencyError::TransactionNotReturned.into_response());
    };
    if is_rejection(&response) {
        drop(tx);
        return Err(response);
    }
    Ok((response, tx))
}

async fn run<DB, S>(
    idem: Idempotency<DB>,
    validator: Option<Validator>,
    mut inner: S,
    request: Request,
) -> Response
where
    DB: Backend,
    S: Service<Request, Response = Response, Error = Infallible>,
{
    if !is_unsafe(request.method()) {
        return match inner.call(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
    }
    let (parts, body) = request.into_parts();
    let prepared = match idem.prepare(&parts, body).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Some(check) = &validator
        && let Some(refusal) = check(&parts, &prepared.body)
    {
        return refusal;
    }
    // Held until the transaction has ended (after `finish` below): while it
    // is, a duplicate in this process waits for the turn, bounded, instead of
    // queueing for a pool connection behind the claim it cannot see.
    let _turn;
    let (tx, generation) = match prepared.key.as_deref() {
        None if idem.key_required() => return idem.missing_key().into_response(),
        // Optional key, none sent: the handler still gets its transaction,
        // committed with its response, but nothing is recorded.
        None => match idem.store().pool().begin().await {
            Ok(tx) => (tx, None),
            Err(e) => return idem.store_error(e.into()).into_response(),
        },
        Some(key) if idem.policy().claim_at == ClaimAt::Commit => {
            let started = Instant::now();
            let wait = idem.policy().duplicate_wait_bound();
            _turn = match idem.store().gate().take(&prepared.scope, key, wait).await {
                Some(turn) => turn,
                None => return idem.in_flight_answer(key, None),
            };
            let waited = started.elapsed();
            let tx = match idem.store().pool().begin().await {
                Ok(tx) => tx,
                Err(e) => return idem.store_error(e.into()).into_response(),
            };
            let (response, tx) = match handle(&mut inner, parts, &prepared, tx).await {
                Ok(ran) => ran,
                Err(refusal) => return refusal,
            };
            return idem
                .finish_at_commit(tx, &prepared, key, response, waited)
                .await;
        }
        Some(key) => {
            let started = Instant::now();
            let wait = idem.policy().duplicate_wait_bound();
            let gate = idem.store().gate();
            _turn = match gate.take(&prepared.scope, key, wait).await {
                Some(turn) => turn,
                None => return idem.in_flight_answer(key, None),
            };
            match idem.claim(&prepared, key, None, started).await {
                Ok(Ok(won)) => (won.tx, Some(won.generation)),
                Ok(Err(answer)) => return answer,
                Err(e) => return e.into_response(),
            }
        }
    };
    let (response, tx) = match handle(&mut inner, parts, &prepared, tx).await {
        Ok(ran) => ran,
        Err(refusal) => return refusal,
    };
    match (prepared.key.as_deref(), generation) {
        (Some(key), Some(generation)) => {
            idem.finish(tx, &prepared.scope, key, generation, response)
                .await
        }
        _ => match tx.commit().await {
            Ok(()) => response,
            Err(e) => idem.store_error(e.into()).into_response(),
        },
    }
}
