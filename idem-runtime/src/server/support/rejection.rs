//! The answer to a request refused before the operation ran, and the
//! protocol refusals the router answers itself.

use std::fmt;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::server::response::Reply;

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
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) field: Option<String>,
    pub(crate) message: String,
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
        crate::server::outcome::marked(
            self.into_reply().into_response(),
            crate::server::Outcome::Refused,
        )
    }
}

/// The `400` of a body that did not decode, naming the field at `path`.
pub(crate) fn body_rejection(
    path: &serde_path_to_error::Path,
    problem: &dyn fmt::Display,
) -> Rejection {
    let path = path.to_string();
    let field = if path == "." {
        "body".to_owned()
    } else {
        format!("body.{path}")
    };
    Rejection::invalid(&field, problem)
}

pub(crate) fn refusal(refusal: crate::protocol::Refusal, message: &str) -> Response {
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
    crate::server::outcome::marked(response, crate::server::Outcome::Refused)
}
