//! One operation's route, as a generated router builds it: what every
//! route does (read the request, identify the caller, read the typed
//! input, claim the key, count the outcome) lives here, so the generated
//! code names only the operation, its input and its handler.

use std::future::Future;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter};
use http::request::Parts;

use super::inbound::{Context, DEFAULT_BODY_LIMIT, Inbound};
use super::rejection::Rejection;
use crate::server::key::IdempotencyKey;
use crate::server::{Backend, IdemTx, Idempotency, Reject};

/// An operation's typed input, read from a request. Generated servers
/// implement it for each operation's input struct; `()` is the input of an
/// operation that takes none.
pub trait Input: Sized + Send + 'static {
    /// Reads the input, refusing what the spec does not allow (the `400`,
    /// `406` or `415` that names the problem).
    fn read(inbound: &Inbound) -> impl Future<Output = Result<Self, Rejection>> + Send;
}

impl Input for () {
    async fn read(_: &Inbound) -> Result<Self, Rejection> {
        Ok(())
    }
}

/// The caller check of a route without a key, `Some` refusal when the
/// caller is not identified; see [`Route::scoped`].
type ScopeCheck = Arc<dyn Fn(&Parts) -> Option<Response> + Send + Sync>;

/// The route of one operation: its method, its operationId (what its
/// requests are counted and traced under) and its OpenAPI path, finished
/// by [`plain`](Self::plain) or [`keyed`](Self::keyed) with the handler.
///
/// Each request runs inside [`observed`](crate::server::observed): one
/// span and one count in `idem_requests_total` per request. An input the
/// spec does not allow is answered as a [`Reject`]: counted `refused` and,
/// on a keyed route, read before the claim, so nothing is recorded.
///
/// ```
/// # use std::sync::Arc;
/// use idem_runtime::server::support::Route;
/// use idem_runtime::axum::{Router, routing::MethodFilter};
/// struct Rooms;
/// impl Rooms {
///     async fn list(&self) -> &'static str { "[]" }
/// }
/// let api = Arc::new(Rooms);
/// let router: Router = Router::new().route(
///     "/rooms",
///     Route::new(MethodFilter::GET, "listRooms", "/rooms")
///         .plain(&api, |api, _cx, ()| async move { api.list().await }),
/// );
/// ```
#[derive(Clone)]
pub struct Route {
    method: MethodFilter,
    operation: &'static str,
    template: &'static str,
    /// The body is a file, read as it arrives under this cap.
    upload: Option<usize>,
    scope: Option<ScopeCheck>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("operation", &self.operation)
            .field("template", &self.template)
            .field("upload", &self.upload)
            .field("scoped", &self.scope.is_some())
            .finish_non_exhaustive()
    }
}

impl Route {
    /// The route of `operation` (its operationId) at the OpenAPI path
    /// `template`, answering `method`.
    pub fn new(method: MethodFilter, operation: &'static str, template: &'static str) -> Self {
        Self {
            method,
            operation,
            template,
            upload: None,
            scope: None,
        }
    }

    /// The body is a file, read by the handler as it arrives
    /// ([`Inbound::upload`]) and refused past `limit` bytes, never held
    /// whole in memory. A keyed route spools it while it fingerprints it,
    /// under its policy's `max_request_body`.
    pub fn upload(mut self, limit: usize) -> Self {
        self.upload = Some(limit);
        self
    }

    /// A route without a key whose spec requires the scope extractor's
    /// header (`required_headers`) identifies the caller as keyed routes
    /// do, before its handler runs
    /// ([`Idempotency::require_scope`]).
    pub fn scoped<DB: Backend>(
        mut self,
        idem: &Idempotency<DB>,
        required_headers: &'static [&'static str],
    ) -> Self {
        let idem = idem.clone();
        self.scope = Some(Arc::new(move |parts: &Parts| {
            idem.require_scope(parts, required_headers)
                .err()
                .map(IntoResponse::into_response)
        }));
        self
    }

    /// A route without a key: each request read (a whole body up to
    /// [`DEFAULT_BODY_LIMIT`]), its input read, and `handle` called with
    /// the API, the request's context and the input.
    pub fn plain<A, I, H, Fut>(self, api: &Arc<A>, handle: H) -> MethodRouter
    where
        A: Send + Sync + 'static,
        I: Input,
        H: Fn(Arc<A>, Context, I) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoResponse,
    {
        let api = Arc::clone(api);
        let route = Arc::new(self);
        axum::routing::on(route.method, move |request: Request| {
            let api = Arc::clone(&api);
            let handle = handle.clone();
            let route = Arc::clone(&route);
            crate::server::observed(route.operation, async move {
                let read = match route.upload {
                    Some(limit) => Inbound::read_upload(request, route.template, limit),
                    None => Inbound::read(request, route.template, DEFAULT_BODY_LIMIT).await,
                };
                let inbound = match read {
                    Ok(inbound) => inbound,
                    Err(rejection) => return rejection.into_response(),
                };
                if let Some(refusal) = route
                    .scope
                    .as_ref()
                    .and_then(|check| check(inbound.parts()))
                {
                    return refusal;
                }
                let input = match I::read(&inbound).await {
                    Ok(input) => input,
                    Err(rejection) => return Reject(rejection).into_response(),
                };
                handle(api, inbound.context(), input).await.into_response()
            })
        })
    }

    /// A keyed route: the key and the caller checked and the body
    /// fingerprinted ([`Idempotency::read_keyed`]), the input read before
    /// the claim (a refusal records nothing), the key claimed, `handle`
    /// called with the transaction that holds the claim, and its answer
    /// stored as the claim finishes. Clients the handler calls derive their
    /// keys from this request's.
    pub fn keyed<DB, A, I, H, Fut>(
        self,
        api: &Arc<A>,
        idem: Idempotency<DB>,
        handle: H,
    ) -> MethodRouter
    where
        DB: Backend,
        A: Send + Sync + 'static,
        I: Input,
        H: Fn(Arc<A>, Context, IdemTx<DB>, I) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoResponse,
    {
        let api = Arc::clone(api);
        let (method, operation, template, upload) = (
            self.method,
            self.operation,
            self.template,
            self.upload.is_some(),
        );
        axum::routing::on(method, move |request: Request| {
            let api = Arc::clone(&api);
            let handle = handle.clone();
            let idem = idem.clone();
            crate::server::observed(operation, async move {
                let read = if upload {
                    idem.read_keyed_upload(request, template).await
                } else {
                    idem.read_keyed(request, template).await
                };
                let keyed = match read {
                    Ok(keyed) => keyed,
                    Err(refusal) => return refusal,
                };
                let input = match I::read(keyed.inbound()).await {
                    Ok(input) => input,
                    Err(rejection) => return Reject(rejection).into_response(),
                };
                let cx = keyed.inbound().context();
                let (tx, claimed) = match keyed.claim().await {
                    Ok(claimed) => claimed,
                    Err(answer) => return answer,
                };
                let reply = self::keyed(&cx.clone(), handle(api, cx, tx, input))
                    .await
                    .into_response();
                claimed.finish(reply).await
            })
        })
    }
}

/// Runs a keyed handler with its key in the request's context, so the keyed
/// calls it makes as a client get keys derived from it.
pub async fn keyed<F: std::future::Future>(cx: &Context, f: F) -> F::Output {
    let inbound = crate::context::current().unwrap_or_default();
    match cx.idempotency() {
        Some(IdempotencyKey {
            scope,
            key: Some(key),
        }) => crate::context::serving(inbound.with_key(scope, key), f).await,
        _ => f.await,
    }
}
