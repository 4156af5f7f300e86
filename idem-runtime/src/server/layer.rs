//! The tower layer for single-phase handlers, and the extractors it feeds.

use std::borrow::Cow;
use std::convert::Infallible;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, MatchedPath, Request};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use sqlx::Transaction;
use tower::{Layer, Service};

use super::config::ClaimAt;
use super::engine::{Idempotency, Prepared, is_unsafe};
use super::error::{IdempotencyError, layer_missing};
use super::gate::Turn;
use super::key::IdempotencyKey;
use super::outcome::is_rejection;
use super::outcome::{Outcome, after_claim, marked, observed};
use super::store::{Backend, BoxFuture};
use super::support::Inbound;

type Slot<DB> = Arc<Mutex<Option<Transaction<'static, DB>>>>;

struct TxSlot<DB: Backend>(Slot<DB>);

impl<DB: Backend> Clone for TxSlot<DB> {
    fn clone(&self) -> Self {
        TxSlot(Arc::clone(&self.0))
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
    operation: Option<Cow<'static, str>>,
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
            operation: self.operation.clone(),
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

    /// The `operation` label its requests are counted under in
    /// `idem_requests_total` (the operationId, where the API has one).
    /// Without it, a request is counted under its method and matched route,
    /// such as `POST /orders`.
    pub fn operation(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.operation = Some(name.into());
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
            operation: None,
        }
    }
}

impl<DB: Backend, S> Layer<S> for IdempotencyLayer<DB> {
    type Service = IdempotencyService<DB, S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService {
            idem: self.idem.clone(),
            validator: self.validator.clone(),
            operation: self.operation.clone(),
            inner,
        }
    }
}

/// The service [`IdempotencyLayer`] produces.
pub struct IdempotencyService<DB: Backend, S> {
    idem: Idempotency<DB>,
    validator: Option<Validator>,
    operation: Option<Cow<'static, str>>,
    inner: S,
}

impl<DB: Backend, S: Clone> Clone for IdempotencyService<DB, S> {
    fn clone(&self) -> Self {
        IdempotencyService {
            idem: self.idem.clone(),
            validator: self.validator.clone(),
            operation: self.operation.clone(),
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
        let operation = match &self.operation {
            Some(name) => name.clone(),
            None => Cow::Owned(route_name(&request)),
        };
        Box::pin(async move { Ok(observed(operation, run(idem, validator, inner, request)).await) })
    }
}

/// What a request on a layer without an operation name is counted under:
/// its method and the route it matched.
fn route_name(request: &Request) -> String {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    format!("{} {route}", request.method())
}

/// How a claimed request's response is settled.
enum Settle {
    /// An optional key not sent: the transaction commits with the
    /// response, and nothing is recorded.
    Unrecorded,
    /// Claimed at the start, with this fencing generation.
    Claimed(i64),
    /// Claimed at commit ([`ClaimAt::Commit`]), after queueing this long for
    /// the key's turn.
    AtCommit(Duration),
}

/// What the claim step hands on: the transaction the handler writes in, how
/// its response is settled, and the key's turn in this process.
struct Held<DB: Backend> {
    tx: Transaction<'static, DB>,
    settle: Settle,
    /// Held until the transaction has ended: while it is, a duplicate in
    /// this process waits for the turn, bounded, instead of queueing for a
    /// pool connection behind the claim it cannot see.
    turn: Option<Turn>,
}

/// Claims the request's key (or, at commit, takes its turn and opens the
/// transaction). `Err` is what to send at once: a replay, a conflict, the
/// store's failure.
async fn claim<DB: Backend>(
    idem: &Idempotency<DB>,
    prepared: &Prepared,
) -> Result<Held<DB>, Response> {
    let begin = || async {
        idem.begin_request()
            .await
            .map_err(|e| idem.store_error(e).into_response())
    };
    let Some(key) = prepared.key.as_deref() else {
        if idem.key_required() {
            return Err(idem.missing_key().into_response());
        }
        return Ok(Held {
            tx: begin().await?,
            settle: Settle::Unrecorded,
            turn: None,
        });
    };
    let started = Instant::now();
    let wait = super::engine::bounded_by_deadline(idem.policy().duplicate_wait_bound());
    let Some(turn) = idem.store().gate().take(&prepared.scope, key, wait).await else {
        return Err(idem.in_flight_answer(key, None));
    };
    if idem.policy().claim_at == ClaimAt::Commit {
        let waited = started.elapsed();
        return Ok(Held {
            tx: begin().await?,
            settle: Settle::AtCommit(waited),
            turn: Some(turn),
        });
    }
    match idem.claim(prepared, key, None, started).await {
        Ok(Ok(won)) => Ok(Held {
            tx: won.tx,
            settle: Settle::Claimed(won.generation),
            turn: Some(turn),
        }),
        Ok(Err(answer)) => Err(answer),
        Err(e) => Err(e.into_response()),
    }
}

/// Stores the handler's `response` with the key and commits, or, for the
/// handler's refusal ([`is_rejection`]), rolls back its writes with the
/// claim so nothing of the request remains. Returns what to send.
async fn settle<DB: Backend>(
    idem: &Idempotency<DB>,
    prepared: &Prepared,
    tx: Transaction<'static, DB>,
    settle: Settle,
    response: Response,
) -> Response {
    if is_rejection(&response) {
        drop(tx);
        return after_claim(response, Outcome::Executed);
    }
    match (settle, prepared.key.as_deref()) {
        (Settle::Claimed(generation), Some(key)) => {
            let sent = idem
                .finish(tx, &prepared.scope, key, generation, response)
                .await;
            after_claim(sent, Outcome::Executed)
        }
        // The claim is made at commit: a replay or a conflict there says
        // what became of the request, its effect rolled back.
        (Settle::AtCommit(waited), Some(key)) => {
            idem.finish_at_commit(tx, prepared, key, response, waited)
                .await
        }
        _ => match idem.store().commit(tx).await {
            Ok(()) => marked(response, Outcome::Executed),
            Err(e) => idem.store_error(e).into_response(),
        },
    }
}

/// Takes the transaction back from the handler. `None` when the handler
/// kept its [`IdemTx`] (nothing is applied).
fn take_back<DB: Backend>(slot: &Slot<DB>) -> Option<Transaction<'static, DB>> {
    slot.lock().ok().and_then(|mut s| s.take())
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
    let (mut parts, body) = request.into_parts();
    let prepared = match idem.prepare(&parts, body).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Some(check) = &validator
        && let Some(refusal) = check(&parts, &prepared.body)
    {
        return marked(refusal, Outcome::Refused);
    }
    let held = match claim(&idem, &prepared).await {
        Ok(held) => held,
        Err(answer) => return answer,
    };
    let slot: Slot<DB> = Arc::new(Mutex::new(Some(held.tx)));
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
    let Some(tx) = take_back(&slot) else {
        return IdempotencyError::TransactionNotReturned.into_response();
    };
    let response = settle(&idem, &prepared, tx, held.settle, response).await;
    drop(held.turn);
    response
}

/// A request on a keyed route, read and checked, its key not yet claimed:
/// the layer's steps, for a route that runs them itself around its handler
/// (as generated servers do), so the request is read once and the handler
/// is called directly.
///
/// ```no_run
/// # use idem_runtime::server::{Idempotency, support::Inbound};
/// # use axum::{extract::Request, response::{IntoResponse, Response}};
/// # async fn route(idem: Idempotency<sqlx::Sqlite>, request: Request) -> Response {
/// let keyed = match idem.read_keyed(request, "/v1/charges").await {
///     Ok(keyed) => keyed,
///     Err(refusal) => return refusal,
/// };
/// // Check the input here: a refusal records nothing.
/// let (mut tx, claimed) = match keyed.claim().await {
///     Ok(claimed) => claimed,
///     Err(answer) => return answer, // a replay, a conflict
/// };
/// let reply = match sqlx::query("INSERT INTO charges DEFAULT VALUES").execute(&mut *tx).await {
///     Ok(_) => (http::StatusCode::CREATED, "charged").into_response(),
///     Err(e) => (http::StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
/// };
/// drop(tx);
/// claimed.finish(reply).await
/// # }
/// ```
pub struct KeyedRequest<'a, DB: Backend> {
    idem: &'a Idempotency<DB>,
    prepared: Prepared,
    inbound: Inbound,
}

impl<DB: Backend> std::fmt::Debug for KeyedRequest<'_, DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedRequest")
            .field("scope", &self.prepared.scope)
            .field("key", &self.prepared.key)
            .finish_non_exhaustive()
    }
}

impl<DB: Backend> Idempotency<DB> {
    /// Reads `request` for a keyed route at the OpenAPI path `template`:
    /// checks the key and the caller's scope, reads the body under the
    /// policy's cap and fingerprints it, as the layer does before it claims.
    /// `Err` is the refusal to send; nothing is recorded.
    pub async fn read_keyed(
        &self,
        request: Request,
        template: &str,
    ) -> Result<KeyedRequest<'_, DB>, Response> {
        let (parts, body) = request.into_parts();
        let prepared = self
            .prepare(&parts, body)
            .await
            .map_err(IntoResponse::into_response)?;
        self.keyed_request(parts, prepared, template)
    }

    /// [`Self::read_keyed`] for an operation that takes a file: the body
    /// is written to a temporary file under the cap while it is
    /// fingerprinted, and the handler reads it from there
    /// ([`Inbound::upload`]), never whole in memory.
    pub async fn read_keyed_upload(
        &self,
        request: Request,
        template: &str,
    ) -> Result<KeyedRequest<'_, DB>, Response> {
        let (parts, body) = request.into_parts();
        let (prepared, upload) = self
            .prepare_upload(&parts, body)
            .await
            .map_err(IntoResponse::into_response)?;
        let keyed = self.keyed_request(parts, prepared, template)?;
        keyed.inbound.set_upload(upload);
        Ok(keyed)
    }

    #[allow(
        clippy::result_large_err,
        reason = "as `read_keyed`'s: the refusal is the response sent, once"
    )]
    fn keyed_request(
        &self,
        mut parts: http::request::Parts,
        prepared: Prepared,
        template: &str,
    ) -> Result<KeyedRequest<'_, DB>, Response> {
        if prepared.key.is_none() && self.key_required() {
            return Err(self.missing_key().into_response());
        }
        parts.extensions.insert(IdempotencyKey {
            scope: prepared.scope.clone(),
            key: prepared.key.clone(),
        });
        let inbound = Inbound::from_parts(parts, prepared.body.clone(), template)
            .map_err(IntoResponse::into_response)?;
        Ok(KeyedRequest {
            idem: self,
            prepared,
            inbound,
        })
    }
}

impl<'a, DB: Backend> KeyedRequest<'a, DB> {
    /// The request, for reading the operation's input. Its context carries
    /// the key ([`Context::idempotency`](super::support::Context::idempotency)).
    pub fn inbound(&self) -> &Inbound {
        &self.inbound
    }

    /// Claims the key: the transaction to write the effect in, which holds
    /// the claim, and the claim to finish with the response. `Err` is the
    /// answer to send instead of running the handler: the stored response
    /// replayed, a key in use or reused, the store unavailable.
    pub async fn claim(self) -> Result<(IdemTx<DB>, Claimed<'a, DB>), Response> {
        let held = claim(self.idem, &self.prepared).await?;
        let slot: Slot<DB> = Arc::new(Mutex::new(Some(held.tx)));
        let tx = IdemTx {
            tx: take_back(&slot),
            slot: Arc::clone(&slot),
        };
        Ok((
            tx,
            Claimed {
                idem: self.idem,
                prepared: self.prepared,
                slot,
                settle: held.settle,
                _turn: held.turn,
            },
        ))
    }
}

/// A claimed key waiting for its handler's response; see [`KeyedRequest`].
pub struct Claimed<'a, DB: Backend> {
    idem: &'a Idempotency<DB>,
    prepared: Prepared,
    slot: Slot<DB>,
    settle: Settle,
    _turn: Option<Turn>,
}

impl<DB: Backend> std::fmt::Debug for Claimed<'_, DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claimed")
            .field("scope", &self.prepared.scope)
            .field("key", &self.prepared.key)
            .finish_non_exhaustive()
    }
}

impl<DB: Backend> Claimed<'_, DB> {
    /// Stores `response` with the key in the handler's transaction and
    /// commits once, so the effect and the key's completion are one atomic
    /// unit; returns what to send. A refusal ([`Reject`](super::Reject))
    /// rolls the transaction back and records nothing. The handler's
    /// [`IdemTx`] must have been dropped by now; one still held is refused
    /// (nothing is applied).
    pub async fn finish(self, response: Response) -> Response {
        let Some(tx) = take_back(&self.slot) else {
            return IdempotencyError::TransactionNotReturned.into_response();
        };
        settle(self.idem, &self.prepared, tx, self.settle, response).await
    }
}
