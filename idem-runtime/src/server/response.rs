//! Stored responses and their byte-for-byte replay.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};

use super::store::StoredResponse;

/// Header set on every replayed response.
pub const IDEMPOTENT_REPLAYED: &str = crate::protocol::IDEMPOTENT_REPLAYED;

impl StoredResponse {
    /// Keeps the headers named in `allow` (never `Set-Cookie`).
    pub(crate) fn capture(
        status: StatusCode,
        headers: &HeaderMap,
        allow: &[HeaderName],
        body: Bytes,
    ) -> Self {
        let mut kept = Vec::new();
        for (name, value) in headers {
            if name == header::SET_COOKIE || !allow.contains(name) {
                continue;
            }
            match value.to_str() {
                Ok(text) => kept.push((name.as_str().to_owned(), text.to_owned())),
                Err(_) => tracing::warn!(
                    header = %name,
                    "response header is not visible ASCII; it will not be replayed"
                ),
            }
        }
        StoredResponse {
            status: status.as_u16(),
            headers: kept,
            body,
        }
    }

    /// The response as first sent (no replay marker).
    pub(crate) fn to_response(&self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = Response::new(Body::from(self.body.clone()));
        *response.status_mut() = status;
        let map = response.headers_mut();
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                map.append(name, value);
            }
        }
        response
    }

    /// The replay: the stored response plus `Idempotent-Replayed: true`.
    pub(crate) fn replay(&self) -> Response {
        let mut response = self.to_response();
        response.headers_mut().insert(
            HeaderName::from_static(IDEMPOTENT_REPLAYED),
            HeaderValue::from_static(crate::protocol::IDEMPOTENT_REPLAYED_VALUE),
        );
        super::outcome::marked(response, super::outcome::Outcome::Replayed)
    }
}

/// What a phased operation answers: status, headers and body.
///
/// ```
/// use idem_runtime::server::Reply;
/// let reply = Reply::json(http::StatusCode::CREATED, &serde_json::json!({"id": 7}));
/// assert_eq!(reply.status(), http::StatusCode::CREATED);
/// ```
#[derive(Debug, Clone)]
pub struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    unrecorded: bool,
}

impl Reply {
    /// A reply with a raw body.
    pub fn new(status: StatusCode, body: impl Into<Bytes>) -> Self {
        Reply {
            status,
            headers: HeaderMap::new(),
            body: body.into(),
            unrecorded: false,
        }
    }

    /// A JSON reply.
    pub fn json<T: serde::Serialize + ?Sized>(status: StatusCode, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => {
                let mut reply = Reply::new(status, body);
                reply.headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                reply
            }
            Err(e) => Reply::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Marks this reply as a refusal before execution began, like
    /// [`Reject`]: behind the idempotency layer, the key's claim and the
    /// handler's writes roll back and nothing is stored, so a corrected
    /// retry with the same key runs normally.
    ///
    /// ```
    /// use axum::response::IntoResponse;
    /// use idem_runtime::server::{Reply, is_rejection};
    /// let reply = Reply::new(http::StatusCode::BAD_REQUEST, "amount must be positive").unrecorded();
    /// assert!(is_rejection(&reply.into_response()));
    /// ```
    pub fn unrecorded(mut self) -> Self {
        self.unrecorded = true;
        self
    }

    pub(crate) fn into_parts(self) -> (StatusCode, HeaderMap, Bytes) {
        (self.status, self.headers, self.body)
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.body));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        if self.unrecorded {
            response.extensions_mut().insert(super::outcome::Unrecorded);
        }
        response
    }
}

/// A refusal before the operation began executing, which the protocol does
/// not record.
///
/// Wrap a handler's answer in it when the request fails validation the
/// handler does itself (a malformed body, a missing or mistyped parameter, a
/// business rule checked before any write). The idempotency layer then rolls
/// back the handler's transaction, claim included: no key row is left, so a
/// corrected retry with the same key runs normally. Any write the handler made
/// before rejecting is rolled back with it.
///
/// A failure after execution began is an ordinary response: it is stored and
/// replayed as `failure-replay` says.
///
/// ```
/// use axum::response::IntoResponse;
/// use idem_runtime::server::Reject;
/// let response = Reject((http::StatusCode::BAD_REQUEST, "amount must be positive")).into_response();
/// assert!(idem_runtime::server::is_rejection(&response));
/// ```
#[derive(Debug, Clone)]
pub struct Reject<R>(pub R);

impl<R: IntoResponse> IntoResponse for Reject<R> {
    fn into_response(self) -> Response {
        let mut response = self.0.into_response();
        response.extensions_mut().insert(super::outcome::Unrecorded);
        response
    }
}

/// The server lacks what the operation needs (a missing upstream, a
/// disabled feature, a setting): answered `503 operation_unavailable` with
/// `Retry-After`, and, like a [`Reject`], never recorded. The key's claim
/// rolls back, so the same request with the same key runs normally once the
/// server is fixed: a server-side gap is not the caller's outcome.
///
/// ```
/// use axum::response::IntoResponse;
/// use idem_runtime::server::{Unavailable, is_rejection};
/// let response = Unavailable("no bank is configured".into()).into_response();
/// assert_eq!(response.status(), 503);
/// assert!(is_rejection(&response));
/// ```
#[derive(Debug, Clone)]
pub struct Unavailable(pub String);

impl IntoResponse for Unavailable {
    fn into_response(self) -> Response {
        Reject(super::error::IdempotencyError::Unavailable { message: self.0 }).into_response()
    }
}

/// A database or key-store failure inside an operation: the connection
/// dropped, the database restarted, a statement timed out.
///
/// Every generated handler returns `Result<Reply, Fault>`, and `?` turns an
/// `sqlx::Error` (or a [`StoreError`](super::StoreError)) into one, so a
/// fault is answered the way the protocol answers an unavailable store,
/// whatever the handler was about to do: `503 idempotency_store_unavailable`
/// with `Retry-After`, `retryable: true`, and, like a [`Reject`], never
/// recorded. The key's claim rolls back with the operation's writes, so the
/// retry with the same key runs the operation again. The database's own
/// text is logged (`tracing`, at `warn`), and never sent to the caller.
///
/// ```
/// use axum::response::IntoResponse;
/// use idem_runtime::server::{Fault, is_rejection};
/// let fault = Fault::from(sqlx::Error::PoolTimedOut);
/// let response = fault.into_response();
/// assert_eq!(response.status(), 503);
/// assert!(response.headers().contains_key("retry-after"));
/// assert!(is_rejection(&response));
/// ```
#[derive(Debug)]
pub struct Fault {
    source: super::StoreError,
}

impl Fault {
    /// The `Retry-After` a fault is answered with: the default of
    /// [`Policy::store_retry_after`](super::Policy::store_retry_after).
    pub const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(2);
}

impl From<sqlx::Error> for Fault {
    fn from(e: sqlx::Error) -> Self {
        Fault::from(super::StoreError::from(e))
    }
}

impl From<super::StoreError> for Fault {
    fn from(source: super::StoreError) -> Self {
        Fault { source }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a database fault inside the operation: {}", self.source)
    }
}

impl std::error::Error for Fault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl IntoResponse for Fault {
    fn into_response(self) -> Response {
        tracing::warn!(error = %self.source, "database fault inside an operation; answered 503, nothing recorded");
        // A serialization failure lost to a transaction that committed:
        // the retry may come at once.
        let retry_after = if self.source.is_serialization_failure() {
            std::time::Duration::ZERO
        } else {
            Fault::RETRY_AFTER
        };
        let error = super::error::IdempotencyError::StoreUnavailable {
            source: self.source,
            retry_after,
        };
        // Rendered without the store's own log line: logged once, above.
        let mut response = super::error::error_response(
            error.status(),
            error.code(),
            &error.to_string(),
            true,
            Some(retry_after),
        );
        response.extensions_mut().insert(super::outcome::Unrecorded);
        super::outcome::marked(response, super::outcome::Outcome::StoreUnavailable)
    }
}
