//! What generated servers call: reading a request into typed inputs, the
//! `400` that names the field when that fails, and building the typed
//! replies. Each generated handler is a few lines over these functions, so a
//! large API's server stays small and builds fast.
//!
//! Parameters arrive as text (a path segment, a query pair, a header). They
//! are deserialized into the operation's types through [`Node`], a small
//! serde deserializer that parses a number or a boolean only where the type
//! asks for one: `?limit=10` fills an `i64`, `?name=10` a `String`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, HeaderValue, StatusCode, header};
use serde::de::value::{MapDeserializer, SeqDeserializer, StringDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};

use super::key::IdempotencyKey;
use super::response::Reply;

/// The default cap on a request body read by a route without a key (keyed
/// routes use their policy's `max_request_body`).
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// A request refused before the operation ran: `400` (or `413`, `415`) with
/// a JSON body naming what was wrong and where.
///
/// ```
/// use idem_runtime::server::support::Rejection;
/// let r = Rejection::invalid("query.limit", "must be at least 1");
/// assert_eq!(r.body(), r#"{"code":"invalid_request","message":"must be at least 1","field":"query.limit","retryable":false}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    status: StatusCode,
    code: &'static str,
    field: Option<String>,
    message: String,
}

impl Rejection {
    /// `400 invalid_request`: `field` (a path from the request's part:
    /// `query.limit`, `body.items[0].amount`, `header.X-Account-Id`) is
    /// missing or malformed, or breaks a keyword of its schema.
    pub fn invalid(field: &str, problem: impl fmt::Display) -> Self {
        Rejection {
            status: StatusCode::from_u16(crate::protocol::INVALID_REQUEST.status)
                .unwrap_or(StatusCode::BAD_REQUEST),
            code: crate::protocol::INVALID_REQUEST.code,
            field: Some(field.to_owned()),
            message: problem.to_string(),
        }
    }

    /// `400 invalid_request`: a required `field` is absent.
    pub fn missing(field: &str) -> Self {
        Rejection::invalid(field, "is required")
    }

    /// `400 invalid_request` for the first keyword `violations` found broken.
    pub fn violations(violations: &crate::validate::Violations) -> Self {
        let first = violations.first();
        Rejection::invalid(&first.field, &first.message)
    }

    /// A `status` refusal of the protocol, with its own code and `message`.
    pub fn refusal(refusal: crate::protocol::Refusal, message: impl Into<String>) -> Self {
        Rejection {
            status: StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST),
            code: refusal.code,
            field: None,
            message: message.into(),
        }
    }

    /// `413 request_body_too_large`, as on keyed routes
    /// ([`BODY_TOO_LARGE`](crate::protocol::BODY_TOO_LARGE)).
    pub fn too_large(limit: usize) -> Self {
        Rejection {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: crate::protocol::BODY_TOO_LARGE.code,
            field: None,
            message: format!("the request body is over the limit of {limit} bytes"),
        }
    }

    /// `415 unsupported_media_type`: the body's type `found` (empty: none
    /// was sent) is not one of `accepted`, which the message lists
    /// ([`UNSUPPORTED_MEDIA_TYPE`](crate::protocol::UNSUPPORTED_MEDIA_TYPE)).
    pub fn media_type(found: &str, accepted: &[&str]) -> Self {
        let sent = if found.is_empty() {
            "the request body has no content type".to_owned()
        } else {
            format!("content type `{found}` is not accepted here")
        };
        Rejection {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: crate::protocol::UNSUPPORTED_MEDIA_TYPE.code,
            field: Some("header.Content-Type".to_owned()),
            message: format!("{sent}; send one of: {}", accepted.join(", ")),
        }
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The exact body sent: `code`, `message`, `field` (when known) and
    /// `retryable`, in this order.
    pub fn body(&self) -> String {
        let text = |s: &str| serde_json::Value::from(s).to_string();
        let field = self
            .field
            .as_deref()
            .map(|f| format!(",\"field\":{}", text(f)))
            .unwrap_or_default();
        format!(
            "{{\"code\":{},\"message\":{}{field},\"retryable\":false}}",
            text(self.code),
            text(&self.message)
        )
    }

    /// As a [`Reply`], for phased operations.
    pub fn into_reply(self) -> Reply {
        let body = self.body();
        Reply::new(self.status, body).with_header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Rejection {}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        self.into_reply().into_response()
    }
}

/// Checks the request's `Content-Type` against the media types its
/// operation declares for the body (`accepted`, as the spec writes them;
/// `application/*` and `*/*` are ranges). A body without a content type, or
/// in an undeclared one, is `415`; a content type that does not parse is
/// `400`. A request without a body passes when the body is optional.
pub fn media_type(
    parts: &Parts,
    has_body: bool,
    body_required: bool,
    accepted: &[&str],
) -> Result<(), Rejection> {
    let value = match parts.headers.get(header::CONTENT_TYPE) {
        Some(value) => value,
        None if !has_body && !body_required => return Ok(()),
        None => return Err(Rejection::media_type("", accepted)),
    };
    let malformed = || Rejection::invalid("header.Content-Type", "is not a media type");
    let sent: mime::Mime = value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(malformed)?;
    let matches = accepted.iter().any(|declared| {
        let Ok(declared) = declared.parse::<mime::Mime>() else {
            return false;
        };
        (declared.type_() == mime::STAR || declared.type_() == sent.type_())
            && (declared.subtype() == mime::STAR
                || (declared.subtype() == sent.subtype() && declared.suffix() == sent.suffix()))
    });
    if matches {
        Ok(())
    } else {
        Err(Rejection::media_type(sent.essence_str(), accepted))
    }
}

/// Checks the caller's `Accept` against the media types the operation
/// answers in (`offered`): `406` when it excludes all of them. Generated
/// routers call this only where a response declares several types; with
/// one, it is served as declared whatever `Accept` says.
pub fn acceptable(parts: &Parts, offered: &[&str]) -> Result<(), Rejection> {
    let ranges: Vec<(mime::Mime, bool)> = parts
        .headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|range| range.trim().parse::<mime::Mime>().ok())
        .map(|range| {
            let refused = range
                .get_param("q")
                .and_then(|q| q.as_str().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0);
            (range, refused)
        })
        .collect();
    if ranges.is_empty() {
        return Ok(());
    }
    let fits = |offer: &mime::Mime| {
        ranges.iter().any(|(range, refused)| {
            !refused
                && (range.type_() == mime::STAR
                    || (range.type_() == offer.type_()
                        && (range.subtype() == mime::STAR || range.subtype() == offer.subtype())))
        })
    };
    if offered
        .iter()
        .filter_map(|o| o.parse::<mime::Mime>().ok())
        .any(|o| fits(&o))
    {
        return Ok(());
    }
    Err(Rejection {
        status: StatusCode::NOT_ACCEPTABLE,
        code: crate::protocol::NOT_ACCEPTABLE.code,
        field: Some("header.Accept".to_owned()),
        message: format!(
            "none of the accepted types is one this operation answers in: {}",
            offered.join(", ")
        ),
    })
}

/// The `400` of a body that did not decode, naming the field at `path`.
fn body_rejection(path: &serde_path_to_error::Path, problem: &dyn fmt::Display) -> Rejection {
    let path = path.to_string();
    let field = if path == "." {
        "body".to_owned()
    } else {
        format!("body.{path}")
    };
    Rejection::invalid(&field, problem)
}

/// `404 not_found`, as JSON: the fallback of generated routers.
pub async fn not_found() -> Response {
    Rejection {
        status: StatusCode::NOT_FOUND,
        code: "not_found",
        field: None,
        message: "no operation of this API has this path".to_owned(),
    }
    .into_response()
}

/// `405 method_not_allowed`, as JSON (axum adds the `Allow` header).
pub async fn method_not_allowed() -> Response {
    Rejection {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        field: None,
        message: "this path does not take this method".to_owned(),
    }
    .into_response()
}

fn refusal(refusal: crate::protocol::Refusal, message: &str) -> Response {
    let mut response = Reply::new(
        StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        refusal.body_with(message),
    )
    .with_header(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    )
    .into_response();
    if refusal.code == crate::protocol::OVERLOADED.code {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(crate::protocol::OVERLOADED_RETRY_AFTER_SECS),
        );
    }
    response
}

/// The remaining deadline a request carries, in its extensions.
#[derive(Debug, Clone, Copy)]
struct Deadline(Instant);

/// Middleware of generated routers: reads the caller's remaining deadline
/// (`Idem-Timeout-Ms`, else `grpc-timeout`), refuses a request that
/// arrives with none left (`504 deadline_exceeded`, before anything runs),
/// and serves the rest inside it: the handler sees it through
/// [`Context::time_left`], clients it calls inherit it
/// ([`crate::context`]), and when it runs out the handler is dropped and
/// `504` sent. Dropping a keyed handler drops its transaction, so its writes
/// and its key's claim roll back together, unless its commit had already
/// landed, in which case the stored response replays on a retry.
///
/// The same as the layer [`Deadlines`], for `axum::middleware::from_fn`.
pub async fn deadlines(request: Request, next: axum::middleware::Next) -> Response {
    use tower::ServiceExt as _;
    let service = DeadlinesService { inner: next };
    match service.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// [`deadlines`] as a tower layer, which generated routers apply to every
/// route: `router.layer(Deadlines)`. A request without a deadline costs it
/// one small boxed future and no clone of the route.
#[derive(Debug, Clone, Copy, Default)]
pub struct Deadlines;

impl<S> tower::Layer<S> for Deadlines {
    type Service = DeadlinesService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlinesService { inner }
    }
}

/// The service [`Deadlines`] produces.
#[derive(Debug, Clone)]
pub struct DeadlinesService<S> {
    inner: S,
}

impl<S> tower::Service<Request> for DeadlinesService<S>
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = super::store::BoxFuture<'static, Result<Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let answer =
            |response: Response| -> Self::Future { Box::pin(std::future::ready(Ok(response))) };
        let left = match crate::context::inbound_timeout(request.headers()) {
            Ok(left) => left,
            Err(e) => {
                return answer(
                    Rejection::invalid(&format!("header.{}", e.header), &e).into_response(),
                );
            }
        };
        let Some(left) = left else {
            let inbound = crate::context::Inbound::new(None);
            return Box::pin(crate::context::scoped(inbound, self.inner.call(request)));
        };
        if left.is_zero() {
            return answer(refusal(
                crate::protocol::DEADLINE_EXCEEDED,
                "the request arrived after the caller's deadline; nothing was done",
            ));
        }
        let deadline = Instant::now() + left;
        request.extensions_mut().insert(Deadline(deadline));
        let inbound = crate::context::Inbound::new(Some(deadline));
        let running = crate::context::scoped(inbound, self.inner.call(request));
        Box::pin(async move {
            match tokio::time::timeout(left, running).await {
                Ok(response) => response,
                Err(_) => Ok(refusal(
                    crate::protocol::DEADLINE_EXCEEDED,
                    "the caller's deadline passed while the request ran; a keyed request's \
                     effect either committed with its stored response or rolled back: the same \
                     request with the same key tells which",
                )),
            }
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

async fn overloaded(_: tower::BoxError) -> Response {
    refusal(
        crate::protocol::OVERLOADED,
        crate::protocol::OVERLOADED.message,
    )
}

/// Tower's concurrency limit behind its load shedder, refusals answered
/// as [`OVERLOADED`](crate::protocol::OVERLOADED).
macro_rules! shedding {
    ($max:expr) => {
        tower::ServiceBuilder::new()
            .layer(axum::error_handling::HandleErrorLayer::new(overloaded))
            .layer(tower::load_shed::LoadShedLayer::new())
            .layer(tower::limit::GlobalConcurrencyLimitLayer::new($max.max(1)))
    };
}

/// Admission control for a whole router: at most `max_in_flight` requests
/// at once; the next one is answered `503 overloaded` with `Retry-After` at
/// once, without queueing.
pub fn admit(router: axum::Router, max_in_flight: usize) -> axum::Router {
    router.layer(shedding!(max_in_flight))
}

/// Admission control for one route (an operation's own
/// `x-admission.max-in-flight`).
pub fn admit_route(
    route: axum::routing::MethodRouter,
    max_in_flight: usize,
) -> axum::routing::MethodRouter {
    route.layer(shedding!(max_in_flight))
}

/// What a handler knows of its request beyond its typed input: headers,
/// URI and, behind the idempotency layer, the caller's scope and key.
///
/// Cheap to clone: clones share the request head.
#[derive(Debug, Clone)]
pub struct Context {
    parts: std::sync::Arc<Parts>,
}

impl Context {
    /// The request headers (credentials, tracing), as received.
    pub fn headers(&self) -> &http::HeaderMap {
        &self.parts.headers
    }

    /// The request URI.
    pub fn uri(&self) -> &http::Uri {
        &self.parts.uri
    }

    /// The caller's scope and key, on a keyed route.
    pub fn idempotency(&self) -> Option<&IdempotencyKey> {
        self.parts.extensions.get::<IdempotencyKey>()
    }

    /// When the caller stops waiting, if it said (`Idem-Timeout-Ms`).
    pub fn deadline(&self) -> Option<Instant> {
        self.parts.extensions.get::<Deadline>().map(|d| d.0)
    }

    /// Time left before the caller's deadline, if it gave one. Work that
    /// cannot finish in it is better refused than started.
    pub fn time_left(&self) -> Option<std::time::Duration> {
        self.deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}

/// How a query parameter is serialized (OpenAPI `style`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `form`: `a=1&a=2` exploded, `a=1,2` not.
    Form,
    /// `spaceDelimited`: `a=1%202`.
    SpaceDelimited,
    /// `pipeDelimited`: `a=1|2`.
    PipeDelimited,
    /// `deepObject`: `a[x]=1&a[y]=2`.
    DeepObject,
}

/// One request, read: its head, its path parameters by the spec's names,
/// its query pairs and its body.
#[derive(Debug)]
pub struct Inbound {
    /// Shared with the handler's [`Context`], not copied for it.
    parts: std::sync::Arc<Parts>,
    path: Vec<(String, String)>,
    query: Vec<(String, String)>,
    body: Bytes,
}

impl Inbound {
    /// Reads `request` against the OpenAPI path `template` (`/charges/{id}`),
    /// the body up to `limit` bytes.
    pub async fn read(request: Request, template: &str, limit: usize) -> Result<Self, Rejection> {
        let (parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, limit).await {
            Ok(b) => b,
            Err(_) => return Err(Rejection::too_large(limit)),
        };
        Self::from_parts(parts, body, template)
    }

    /// A request as the store keeps it (method, path with query, body), for
    /// a phased operation the completer resumes: it has no headers.
    pub fn stored(
        method: &str,
        path_and_query: &str,
        body: &[u8],
        template: &str,
    ) -> Result<Self, Rejection> {
        let request = http::Request::builder()
            .method(method)
            .uri(path_and_query)
            .body(())
            .map_err(|e| Rejection::invalid("request", e))?;
        let (parts, ()) = request.into_parts();
        Self::from_parts(parts, Bytes::copy_from_slice(body), template)
    }

    /// Path parameters by the template's names, and the query pairs.
    pub(crate) fn from_parts(parts: Parts, body: Bytes, template: &str) -> Result<Self, Rejection> {
        let path = match_template(template, parts.uri.path())
            .ok_or_else(|| Rejection::invalid("path", "does not match the operation's path"))?;
        let query = parts
            .uri
            .query()
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Inbound {
            parts: std::sync::Arc::new(parts),
            path,
            query,
            body,
        })
    }

    /// The request head.
    pub fn parts(&self) -> &Parts {
        &self.parts
    }

    /// The handler's [`Context`].
    pub fn context(&self) -> Context {
        Context {
            parts: std::sync::Arc::clone(&self.parts),
        }
    }

    /// A path parameter.
    pub fn path<T: DeserializeOwned>(&self, name: &str) -> Result<T, Rejection> {
        let field = || format!("path.{name}");
        let value = self
            .path
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| Rejection::missing(&field()))?;
        T::deserialize(Node::Leaf(value)).map_err(|e| Rejection::invalid(&field(), e))
    }

    /// A query parameter, `None` when absent.
    pub fn query<T: DeserializeOwned>(
        &self,
        name: &str,
        style: Style,
        explode: bool,
    ) -> Result<Option<T>, Rejection> {
        let node = match style {
            Style::DeepObject => {
                let pairs: Vec<(String, String)> = self
                    .query
                    .iter()
                    .filter(|(k, _)| k.starts_with(name) && k[name.len()..].starts_with('['))
                    .map(|(k, v)| (k[name.len()..].to_owned(), v.clone()))
                    .collect();
                if pairs.is_empty() {
                    return Ok(None);
                }
                Node::tree(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            }
            _ => {
                let values: Vec<&str> = self
                    .query
                    .iter()
                    .filter(|(k, _)| k == name)
                    .map(|(_, v)| v.as_str())
                    .collect();
                let delimiter = match style {
                    Style::SpaceDelimited => ' ',
                    Style::PipeDelimited => '|',
                    _ => ',',
                };
                match values.as_slice() {
                    [] => return Ok(None),
                    [one] if !explode && one.contains(delimiter) => Node::List(
                        one.split(delimiter)
                            .map(|v| Node::Leaf(v.to_owned()))
                            .collect(),
                    ),
                    [one] => Node::Leaf((*one).to_owned()),
                    many => Node::List(many.iter().map(|v| Node::Leaf((*v).to_owned())).collect()),
                }
            }
        };
        T::deserialize(node)
            .map(Some)
            .map_err(|e| Rejection::invalid(&format!("query.{name}"), e))
    }

    /// A header parameter, `None` when absent.
    pub fn header<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, Rejection> {
        let field = || format!("header.{name}");
        let values: Vec<String> = self
            .parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| {
                v.to_str()
                    .map(str::to_owned)
                    .map_err(|_| Rejection::invalid(&field(), "not visible ASCII"))
            })
            .collect::<Result<_, _>>()?;
        let node = match values.as_slice() {
            [] => return Ok(None),
            [one] if one.contains(',') => Node::List(
                one.split(',')
                    .map(|v| Node::Leaf(v.trim().to_owned()))
                    .collect(),
            ),
            [one] => Node::Leaf(one.clone()),
            many => Node::List(many.iter().cloned().map(Node::Leaf).collect()),
        };
        // A comma may be part of a scalar value (a date): try it whole first.
        if let Node::List(_) = &node
            && let [one] = values.as_slice()
            && let Ok(whole) = T::deserialize(Node::Leaf(one.clone()))
        {
            return Ok(Some(whole));
        }
        T::deserialize(node)
            .map(Some)
            .map_err(|e| Rejection::invalid(&field(), e))
    }

    /// A cookie parameter, `None` when absent.
    pub fn cookie<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, Rejection> {
        let value = self
            .parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_owned());
        match value {
            None => Ok(None),
            Some(v) => T::deserialize(Node::Leaf(v))
                .map(Some)
                .map_err(|e| Rejection::invalid(&format!("cookie.{name}"), e)),
        }
    }

    /// The essence of the request's content type (`application/json`),
    /// lowercased; empty when there is none.
    pub fn content_type(&self) -> String {
        self.parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default()
    }

    /// Whether a body was sent.
    pub fn has_body(&self) -> bool {
        !self.body.is_empty()
    }

    /// The body as JSON.
    ///
    /// Decoded [strictly](crate::codec::strictly): an explicit `null` for a
    /// property whose schema is not nullable is refused.
    ///
    /// JSON Schema's `integer` is a mathematical one: `1.0` is the integer
    /// one. Bodies are read straight into their types; only one that fails is
    /// read again with its whole-valued floats as integers, so the common
    /// case costs nothing.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Rejection> {
        // Where a body fails is tracked only once it has failed.
        if let Ok(value) = crate::codec::strictly(|| serde_json::from_slice::<T>(&self.body)) {
            return Ok(value);
        }
        let de = &mut serde_json::Deserializer::from_slice(&self.body);
        let first = match crate::codec::strictly(|| serde_path_to_error::deserialize(de)) {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&self.body)
            && crate::codec::integral_floats_as_integers(&mut value)
        {
            return crate::codec::strictly(|| serde_path_to_error::deserialize(value))
                .map_err(|e| body_rejection(e.path(), e.inner()));
        }
        Err(body_rejection(first.path(), first.inner()))
    }

    /// The body as `application/x-www-form-urlencoded`, nested keys
    /// (`card[number]`, `items[0][price]`) included.
    pub fn form<T: DeserializeOwned>(&self) -> Result<T, Rejection> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(&self.body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let node = Node::tree(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        T::deserialize(node).map_err(|e| Rejection::invalid("body", e))
    }

    /// The body as UTF-8 text.
    pub fn text(&self) -> Result<String, Rejection> {
        String::from_utf8(self.body.to_vec()).map_err(|e| Rejection::invalid("body", e))
    }

    /// The body as bytes.
    pub fn bytes(&self) -> Bytes {
        self.body.clone()
    }

    /// The body as `multipart/form-data`: text parts fill fields by name,
    /// file parts fill byte fields.
    pub async fn multipart<T: DeserializeOwned>(&self) -> Result<T, Rejection> {
        let request = Request::from_parts((*self.parts).clone(), Body::from(self.body.clone()));
        let mut form = axum::extract::Multipart::from_request(request, &())
            .await
            .map_err(|e| Rejection::invalid("body", e.body_text()))?;
        let mut fields: Vec<(String, Node)> = Vec::new();
        loop {
            let field = match form.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return Err(Rejection::invalid("body", e.body_text())),
            };
            let name = field.name().unwrap_or_default().to_owned();
            let is_file = field.file_name().is_some();
            let data = field
                .bytes()
                .await
                .map_err(|e| Rejection::invalid(&format!("body.{name}"), e.body_text()))?;
            let node = if is_file {
                Node::Bytes(data)
            } else {
                match String::from_utf8(data.to_vec()) {
                    Ok(text) => Node::Leaf(text),
                    Err(_) => Node::Bytes(data),
                }
            };
            fields.push((name, node));
        }
        T::deserialize(Node::Map(fields)).map_err(|e| Rejection::invalid("body", e))
    }
}

/// Matches `path` against an OpenAPI template, returning the parameters by
/// name (percent-decoded). Templates may put several parameters or literal
/// text in one segment (`/files/{name}.{ext}`).
fn match_template(template: &str, path: &str) -> Option<Vec<(String, String)>> {
    let template = template.split('?').next().unwrap_or(template);
    // A template without parameters matches its own text.
    if !template.contains('{') && !path.contains('%') {
        return (template.trim_matches('/') == path.trim_matches('/')).then(Vec::new);
    }
    let t_segments: Vec<&str> = template.trim_matches('/').split('/').collect();
    let p_segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if t_segments.len() != p_segments.len() {
        return None;
    }
    let mut out = Vec::new();
    for (t, p) in t_segments.iter().zip(&p_segments) {
        let decoded = percent_decode(p);
        match_segment(t, &decoded, &mut out)?;
    }
    Some(out)
}

fn match_segment(template: &str, value: &str, out: &mut Vec<(String, String)>) -> Option<()> {
    let mut rest_t = template;
    let mut rest_v = value;
    while !rest_t.is_empty() {
        match rest_t.find('{') {
            None => return (rest_v == rest_t).then_some(()),
            Some(0) => {
                let close = rest_t.find('}')?;
                let name = &rest_t[1..close];
                rest_t = &rest_t[close + 1..];
                // The parameter runs to the next literal text (or the end).
                let literal = &rest_t[..rest_t.find('{').unwrap_or(rest_t.len())];
                let end = if literal.is_empty() {
                    rest_v.len()
                } else {
                    rest_v.rfind(literal)?
                };
                out.push((name.to_owned(), rest_v[..end].to_owned()));
                rest_v = &rest_v[end..];
            }
            Some(open) => {
                let literal = &rest_t[..open];
                rest_v = rest_v.strip_prefix(literal)?;
                rest_t = &rest_t[open..];
            }
        }
    }
    rest_v.is_empty().then_some(())
}

fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%'
            && let Some(hex) = segment.get(i + 1..i + 3)
            && let Ok(v) = u8::from_str_radix(hex, 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A reply with `body` serialized as JSON, sent as `content_type`.
pub fn json<T: serde::Serialize + ?Sized>(status: u16, content_type: &str, body: &T) -> Reply {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match serde_json::to_vec(body) {
        Ok(bytes) => with_content_type(Reply::new(status, bytes), content_type),
        Err(e) => Reply::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// A reply with a text body.
pub fn text(status: u16, content_type: &str, body: impl Into<String>) -> Reply {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    with_content_type(Reply::new(status, body.into()), content_type)
}

/// A reply with a raw body.
pub fn bytes(status: u16, content_type: &str, body: impl Into<Bytes>) -> Reply {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    with_content_type(Reply::new(status, body.into()), content_type)
}

/// A reply without a body.
pub fn empty(status: u16) -> Reply {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Reply::new(status, Bytes::new())
}

/// A status a range variant (`4XX`, `default`) carries, checked to be a
/// real status code (falling back to `fallback`).
pub fn status_in(status: StatusCode, low: u16, high: u16, fallback: u16) -> u16 {
    let code = status.as_u16();
    if (low..=high).contains(&code) {
        code
    } else {
        fallback
    }
}

fn with_content_type(reply: Reply, content_type: &str) -> Reply {
    match HeaderValue::from_str(content_type) {
        Ok(value) => reply.with_header(header::CONTENT_TYPE, value),
        Err(_) => reply,
    }
}

/// Adds a documented response header; a value that cannot be a header is
/// left out (and logged) rather than failing the response.
pub fn header<T: fmt::Display>(reply: Reply, name: &'static str, value: Option<&T>) -> Reply {
    let Some(value) = value else {
        return reply;
    };
    match (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(&value.to_string()),
    ) {
        (Ok(name), Ok(value)) => reply.with_header(name, value),
        _ => {
            tracing::warn!(
                header = name,
                "response header value is not a valid header; left out"
            );
            reply
        }
    }
}

/// Text parameters as serde input: a leaf is parsed as a number or a
/// boolean only when the target type asks for one.
#[derive(Debug, Clone)]
pub enum Node {
    /// One text value.
    Leaf(String),
    /// A binary value (a multipart file).
    Bytes(Bytes),
    /// Repeated values.
    List(Vec<Node>),
    /// Named values (`a[x]=1`).
    Map(Vec<(String, Node)>),
}

impl Node {
    /// A tree from bracketed keys: `[x][y]` paths, or `a[x][0]` form keys.
    fn tree<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> Node {
        let mut root = Tree::default();
        for (key, value) in pairs {
            let mut path: Vec<&str> = Vec::new();
            let (head, mut rest) = match key.find('[') {
                Some(0) => ("", key),
                Some(i) => (&key[..i], &key[i..]),
                None => (key, ""),
            };
            if !head.is_empty() {
                path.push(head);
            }
            while let Some(stripped) = rest.strip_prefix('[') {
                let Some(close) = stripped.find(']') else {
                    break;
                };
                path.push(&stripped[..close]);
                rest = &stripped[close + 1..];
            }
            root.insert(&path, value);
        }
        root.into_node()
    }
}

#[derive(Default)]
struct Tree {
    values: Vec<String>,
    children: BTreeMap<String, Tree>,
    order: Vec<String>,
}

impl Tree {
    fn insert(&mut self, path: &[&str], value: &str) {
        match path.split_first() {
            None => self.values.push(value.to_owned()),
            Some((first, rest)) => {
                // `a[]=1&a[]=2`: an empty segment appends.
                let name = if first.is_empty() {
                    self.order.len().to_string()
                } else {
                    (*first).to_owned()
                };
                if !self.children.contains_key(&name) {
                    self.order.push(name.clone());
                }
                self.children.entry(name).or_default().insert(rest, value);
            }
        }
    }

    fn into_node(mut self) -> Node {
        if self.children.is_empty() {
            return match self.values.len() {
                1 => Node::Leaf(self.values.pop().unwrap_or_default()),
                _ => Node::List(self.values.into_iter().map(Node::Leaf).collect()),
            };
        }
        let mut out = Vec::with_capacity(self.order.len());
        for name in self.order {
            if let Some(child) = self.children.remove(&name) {
                out.push((name, child.into_node()));
            }
        }
        Node::Map(out)
    }
}

type DeError = de::value::Error;

macro_rules! parse_leaf {
    ($($method:ident => $visit:ident : $ty:ty),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            match self {
                Node::Leaf(text) => match text.trim().parse::<$ty>() {
                    Ok(v) => visitor.$visit(v),
                    Err(e) => Err(de::Error::custom(format_args!("`{text}`: {e}"))),
                },
                other => other.deserialize_any(visitor),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Node {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self {
            Node::Leaf(text) => visitor.visit_string(text),
            Node::Bytes(bytes) => visitor.visit_byte_buf(bytes.to_vec()),
            Node::List(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            Node::Map(entries) => visitor.visit_map(MapDeserializer::new(entries.into_iter())),
        }
    }

    parse_leaf! {
        deserialize_bool => visit_bool: bool,
        deserialize_i8 => visit_i8: i8,
        deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32,
        deserialize_i64 => visit_i64: i64,
        deserialize_u8 => visit_u8: u8,
        deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32,
        deserialize_u64 => visit_u64: u64,
        deserialize_f32 => visit_f32: f32,
        deserialize_f64 => visit_f64: f64,
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_some(self)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self {
            // `a[0]=x&a[1]=y`: indexed entries, in index order.
            Node::Map(mut entries) if entries.iter().all(|(k, _)| k.parse::<usize>().is_ok()) => {
                entries.sort_by_key(|(k, _)| k.parse::<usize>().unwrap_or(usize::MAX));
                let items = entries.into_iter().map(|(_, v)| v);
                visitor.visit_seq(SeqDeserializer::new(items))
            }
            Node::List(items) => visitor.visit_seq(SeqDeserializer::new(items.into_iter())),
            Node::Bytes(bytes) => visitor.visit_byte_buf(bytes.to_vec()),
            one => visitor.visit_seq(SeqDeserializer::new(std::iter::once(one))),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self {
            Node::Leaf(text) => {
                let de: StringDeserializer<DeError> = text.into_deserializer();
                de::Deserializer::deserialize_enum(de, name, variants, visitor)
            }
            other => other.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        i128 u128 char str string bytes byte_buf unit_struct tuple
        tuple_struct map struct identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, DeError> for Node {
    type Deserializer = Node;

    fn into_deserializer(self) -> Node {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Card {
        number: String,
        exp_month: i32,
        #[serde(default)]
        tags: Vec<String>,
    }

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Charge {
        amount: i64,
        card: Card,
        capture: Option<bool>,
    }

    #[test]
    fn nested_form_keys_fill_nested_types() {
        let node = Node::tree(
            [
                ("amount", "2000"),
                ("card[number]", "4242"),
                ("card[exp_month]", "12"),
                ("card[tags][0]", "a"),
                ("card[tags][1]", "b"),
                ("capture", "true"),
            ]
            .into_iter(),
        );
        let charge = Charge::deserialize(node).ok();
        assert_eq!(
            charge,
            Some(Charge {
                amount: 2000,
                card: Card {
                    number: "4242".into(),
                    exp_month: 12,
                    tags: vec!["a".into(), "b".into()],
                },
                capture: Some(true),
            })
        );
    }

    #[test]
    fn numbers_are_parsed_only_where_the_type_asks() {
        assert_eq!(
            String::deserialize(Node::Leaf("10".into())).ok(),
            Some("10".to_owned())
        );
        assert_eq!(i64::deserialize(Node::Leaf("10".into())).ok(), Some(10));
        let err = i64::deserialize(Node::Leaf("ten".into()))
            .err()
            .map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("`ten`: invalid digit found in string"));
    }

    /// The layer and the `from_fn` form answer alike: a request with no
    /// deadline left is refused before the handler runs, a malformed
    /// deadline is a 400, and the rest run with their deadline in context.
    #[tokio::test]
    async fn deadlines_as_layer_and_as_middleware() {
        use tower::ServiceExt as _;
        let handler = || async {
            let left = crate::context::current().and_then(|c| c.time_left());
            (StatusCode::OK, format!("{}", left.is_some()))
        };
        let routers = [
            axum::Router::new()
                .route("/", axum::routing::post(handler))
                .layer(Deadlines),
            axum::Router::new()
                .route("/", axum::routing::post(handler))
                .layer(axum::middleware::from_fn(deadlines)),
        ];
        for router in routers {
            for (timeout, status, body) in [
                (None, 200, "false"),
                (Some("5000"), 200, "true"),
                (Some("0"), 504, ""),
                (Some("soon"), 400, ""),
            ] {
                let mut request = http::Request::post("/");
                if let Some(ms) = timeout {
                    request = request.header(crate::context::TIMEOUT_HEADER, ms);
                }
                let response = router
                    .clone()
                    .oneshot(request.body(Body::empty()).unwrap())
                    .await
                    .unwrap();
                assert_eq!(response.status().as_u16(), status, "{timeout:?}");
                let bytes = axum::body::to_bytes(response.into_body(), 1024)
                    .await
                    .unwrap();
                if status == 200 {
                    assert_eq!(bytes, body.as_bytes(), "{timeout:?}");
                }
            }
        }
    }

    #[test]
    fn templates_match_whole_and_partial_segments() {
        assert_eq!(
            match_template("/v1/charges/{id}", "/v1/charges/ch%201"),
            Some(vec![("id".to_owned(), "ch 1".to_owned())])
        );
        assert_eq!(
            match_template("/files/{name}.{ext}", "/files/a.b.tar"),
            Some(vec![
                ("name".to_owned(), "a.b".to_owned()),
                ("ext".to_owned(), "tar".to_owned())
            ])
        );
        assert_eq!(match_template("/v1/charges/{id}", "/v1/refunds/x"), None);
        // Without parameters: the text itself, percent-decoded.
        assert_eq!(match_template("/v1/charges", "/v1/charges/"), Some(vec![]));
        assert_eq!(match_template("/v1/a b", "/v1/a%20b"), Some(vec![]));
        assert_eq!(match_template("/v1/charges", "/v1/charge"), None);
        assert_eq!(match_template("/v1/charges", "/v1/charges/x"), None);
    }
}
