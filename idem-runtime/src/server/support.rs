//! What generated servers call: reading a request into typed inputs, the
//! `400` that names the field when that fails, and building the typed
//! replies. Each generated handler is a few lines over these functions, so a
//! large API's server stays small and builds fast.
//!
//! Parameters arrive as text (a path segment, a query pair, a header). They
//! are deserialized into the operation's types through [`Node`], a small
//! serde deserializer that parses a number or a boolean only where the type
//! asks for one: `?limit=10` fills an `i64`, `?name=10` a `String`.

use std::fmt;
use std::time::Instant;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, HeaderValue, StatusCode, header};

use super::response::Reply;

mod inbound;
mod rejection;
mod route;

pub use super::upload::{Upload, UploadError};
use inbound::Deadline;
pub(crate) use inbound::declares_more_than;
pub use inbound::{Context, DEFAULT_BODY_LIMIT, Inbound, Node, Style};
pub use rejection::Rejection;
use rejection::refusal;
pub use route::{Input, Route, keyed};

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
        // Refused before the route runs: counted under the route it matched.
        let route = |request: &Request| {
            let path = request
                .extensions()
                .get::<axum::extract::MatchedPath>()
                .map_or("unmatched", axum::extract::MatchedPath::as_str);
            format!("{} {path}", request.method())
        };
        let answer = |response: Response, route: String| -> Self::Future {
            super::outcome::count(route.into(), super::Outcome::Refused, Instant::now());
            Box::pin(std::future::ready(Ok(super::outcome::marked(
                response,
                super::Outcome::Refused,
            ))))
        };
        let left = match crate::context::inbound_timeout(request.headers()) {
            Ok(left) => left,
            Err(e) => {
                return answer(
                    Rejection::invalid(&format!("header.{}", e.header), &e).into_response(),
                    route(&request),
                );
            }
        };
        let Some(left) = left else {
            let inbound = crate::context::Inbound::new(None);
            return Box::pin(crate::context::scoped(inbound, self.inner.call(request)));
        };
        if left.is_zero() {
            return answer(
                refusal(
                    crate::protocol::DEADLINE_EXCEEDED,
                    "the request arrived after the caller's deadline; nothing was done",
                ),
                route(&request),
            );
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

/// The refusal of a request over an in-flight limit, counted `refused`
/// under `operation`: it never reaches the route.
fn overloaded(
    operation: &'static str,
) -> impl Fn(tower::BoxError) -> std::future::Ready<Response> + Clone {
    move |_| {
        let started = Instant::now();
        let response = refusal(
            crate::protocol::OVERLOADED,
            crate::protocol::OVERLOADED.message,
        );
        super::outcome::count(operation.into(), super::Outcome::Refused, started);
        std::future::ready(response)
    }
}

/// Tower's concurrency limit behind its load shedder, refusals answered
/// as [`OVERLOADED`](crate::protocol::OVERLOADED).
macro_rules! shedding {
    ($max:expr, $operation:expr) => {
        tower::ServiceBuilder::new()
            .layer(axum::error_handling::HandleErrorLayer::new(overloaded(
                $operation,
            )))
            .layer(tower::load_shed::LoadShedLayer::new())
            .layer(tower::limit::GlobalConcurrencyLimitLayer::new($max.max(1)))
    };
}

/// Admission control for a whole router: at most `max_in_flight` requests
/// at once; the next one is answered `503 overloaded` with `Retry-After` at
/// once, without queueing. Such a refusal comes before routing, so
/// `idem_requests_total` counts it `refused` under the operation `*`.
pub fn admit(router: axum::Router, max_in_flight: usize) -> axum::Router {
    router.layer(shedding!(max_in_flight, "*"))
}

/// Admission control for one route (an operation's own
/// `x-admission.max-in-flight`); a refusal is counted `refused` under
/// `operation`.
pub fn admit_route(
    route: axum::routing::MethodRouter,
    max_in_flight: usize,
    operation: &'static str,
) -> axum::routing::MethodRouter {
    route.layer(shedding!(max_in_flight, operation))
}

/// `routes` served under `prefix` (a generated router's base path, `/v2`):
/// nested there, or as they are when the prefix is empty or `/`. A prefix
/// without its leading `/`, or with a trailing one, means the same path.
pub fn mount(prefix: &str, routes: axum::Router) -> axum::Router {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        routes
    } else {
        axum::Router::new().nest(&format!("/{prefix}"), routes)
    }
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

#[cfg(test)]
mod tests {
    use super::inbound::*;
    use super::*;
    use axum::body::Body;
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
