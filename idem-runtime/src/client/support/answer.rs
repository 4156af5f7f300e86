//! An answer as the generated decoders read it, and the error every call
//! returns.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use crate::client::{IdempotencyKey, RetryError};

/// A response, body read in full.
#[derive(Debug, Clone)]
pub struct Raw {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[allow(
    clippy::result_large_err,
    reason = "these build the error every generated call returns, on the error path only; boxing would add an allocation and a field access to every caller"
)]
impl Raw {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.status.as_u16()
    }

    /// The media type, without parameters, lowercase.
    pub fn media_type(&self) -> String {
        self.headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default()
    }

    /// The body as JSON of type `T`; an empty body reads as `null`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Undecodable> {
        let body: &[u8] = if self.body.iter().all(u8::is_ascii_whitespace) {
            b"null"
        } else {
            &self.body
        };
        serde_json::from_slice(body).map_err(|e| self.undecodable(e.to_string()))
    }

    /// The body as text.
    pub fn text(&self) -> Result<String, Undecodable> {
        String::from_utf8(self.body.to_vec()).map_err(|e| self.undecodable(e.to_string()))
    }

    /// The body's bytes.
    pub fn bytes(&self) -> Result<Bytes, Undecodable> {
        Ok(self.body.clone())
    }

    fn undecodable(&self, message: String) -> Undecodable {
        Undecodable {
            status: self.status,
            message,
            body: self.body.clone(),
        }
    }

    /// A documented response header, parsed; `None` when absent or unreadable.
    pub fn header<T: FromStr>(&self, name: &str) -> Option<T> {
        self.headers.get(name)?.to_str().ok()?.parse().ok()
    }

    /// A documented error, with its typed body.
    pub fn error<T, E>(&self, body: E) -> Result<T, ApiError<E>> {
        Err(ApiError::Status {
            status: self.status,
            headers: self.headers.clone(),
            body,
        })
    }

    /// A status this operation does not document.
    pub fn unexpected<T, E>(&self) -> Result<T, ApiError<E>> {
        Err(ApiError::UnexpectedStatus {
            status: self.status,
            headers: self.headers.clone(),
            body: self.body.clone(),
        })
    }
}

/// A body that does not match its documented schema.
#[derive(Debug, Clone)]
pub struct Undecodable {
    pub status: StatusCode,
    pub message: String,
    pub body: Bytes,
}

impl<E> From<Undecodable> for ApiError<E> {
    fn from(e: Undecodable) -> Self {
        ApiError::Decode {
            status: e.status,
            message: e.message,
            body: e.body,
        }
    }
}

/// Types a response: the generated match on status and media type.
pub type Decoder<T, E> = fn(&Raw) -> Result<T, ApiError<E>>;

/// Why a typed call failed.
#[derive(Debug)]
pub enum ApiError<E> {
    /// A documented error status, with its typed body.
    Status {
        status: StatusCode,
        headers: HeaderMap,
        body: E,
    },
    /// A status the spec does not document for this operation.
    UnexpectedStatus {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    },
    /// The body does not match what the spec documents for its status.
    Decode {
        status: StatusCode,
        message: String,
        body: Bytes,
    },
    /// The call did not get an answer retrying could not change: transport
    /// failure, retries or budget spent, deadline, or an unknown outcome of
    /// an unsafe operation ([`RetryError::is_outcome_unknown`]). It carries the
    /// idempotency key to try again with later.
    Retry(RetryError),
    /// The request could not be encoded (a parameter or body that cannot be
    /// serialized, an invalid header value); nothing was sent.
    Encode(String),
    /// The request breaks its schema (a bound, a length, a pattern, an item
    /// count): checked before the first attempt, so nothing was sent and no
    /// key was minted.
    Invalid(crate::validate::Violations),
}

impl<E> ApiError<E> {
    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ApiError::Status { status, .. }
            | ApiError::UnexpectedStatus { status, .. }
            | ApiError::Decode { status, .. } => Some(*status),
            ApiError::Retry(_) | ApiError::Encode(_) | ApiError::Invalid(_) => None,
        }
    }

    /// The idempotency key the call used, to reconcile or retry later.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        match self {
            ApiError::Retry(e) => e.key(),
            _ => None,
        }
    }

    /// The documented error body, if that is what this is.
    pub fn body(&self) -> Option<&E> {
        match self {
            ApiError::Status { body, .. } => Some(body),
            _ => None,
        }
    }

    /// The response's headers, when the server answered.
    pub fn headers(&self) -> Option<&HeaderMap> {
        match self {
            ApiError::Status { headers, .. } | ApiError::UnexpectedStatus { headers, .. } => {
                Some(headers)
            }
            _ => None,
        }
    }

    /// The request id the server gave the failed answer (see
    /// [`Answered::request_id`]): what to quote to its support.
    pub fn request_id(&self) -> Option<&str> {
        self.headers().and_then(request_id)
    }

    /// Whether the failed answer was a replay of a stored one
    /// (`Idempotent-Replayed: true`): the error happened on an earlier
    /// attempt, perhaps another process's, with the same key.
    pub fn replayed(&self) -> bool {
        self.headers().is_some_and(replayed)
    }
}

/// The headers servers name their request id with, most common first:
/// `Request-Id` (Stripe), `X-Request-Id` (OpenAI, Heroku, many proxies),
/// `X-Amzn-RequestId` and `X-Amz-Request-Id` (AWS), `X-GitHub-Request-Id`,
/// `X-MS-Request-Id` (Azure).
pub const REQUEST_ID_HEADERS: &[&str] = &[
    "request-id",
    "x-request-id",
    "x-amzn-requestid",
    "x-amz-request-id",
    "x-github-request-id",
    "x-ms-request-id",
];

fn request_id(headers: &HeaderMap) -> Option<&str> {
    REQUEST_ID_HEADERS
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok())
}

fn replayed(headers: &HeaderMap) -> bool {
    headers
        .get(crate::protocol::IDEMPOTENT_REPLAYED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// A call's typed value together with the answer it came in: status,
/// headers, the request id, whether it was a replay, the key sent and the
/// attempts made. What [`Call::send_with_response`](super::Call::send_with_response)
/// returns.
#[derive(Debug, Clone)]
pub struct Answered<T> {
    value: T,
    status: StatusCode,
    headers: HeaderMap,
    key: Option<IdempotencyKey>,
    attempts: u32,
}

impl<T> Answered<T> {
    pub(crate) fn new(
        value: T,
        raw: Raw,
        key: Option<IdempotencyKey>,
        attempts: u32,
    ) -> Answered<T> {
        Answered {
            value,
            status: raw.status,
            headers: raw.headers,
            key,
            attempts,
        }
    }

    /// The typed value, as `.send()` returns it.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The typed value, the rest let go.
    pub fn into_value(self) -> T {
        self.value
    }

    /// The status of the answer.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The headers of the answer.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The server's id for this request, from the first of
    /// [`REQUEST_ID_HEADERS`] it sent: what to quote to its support.
    pub fn request_id(&self) -> Option<&str> {
        request_id(&self.headers)
    }

    /// Whether the server replayed a stored answer
    /// (`Idempotent-Replayed: true`) rather than running the operation
    /// now: an earlier attempt, or another call with the same key, already
    /// did.
    pub fn replayed(&self) -> bool {
        replayed(&self.headers)
    }

    /// The idempotency key the call sent, when the operation is keyed.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// How many attempts the call made (1 without a retry).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

impl<E: fmt::Debug> fmt::Display for ApiError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Status { status, body, .. } => {
                write!(f, "the server answered {status}: {body:?}")
            }
            ApiError::UnexpectedStatus { status, body, .. } => write!(
                f,
                "the server answered {status}, which the API does not document here ({} bytes)",
                body.len()
            ),
            ApiError::Decode {
                status, message, ..
            } => {
                write!(
                    f,
                    "the {status} response does not match the API's schema: {message}"
                )
            }
            ApiError::Retry(e) => write!(f, "{e}"),
            ApiError::Encode(e) => write!(f, "the request could not be encoded: {e}"),
            ApiError::Invalid(e) => write!(f, "the request breaks the API's schema: {e}"),
        }
    }
}

impl<E: fmt::Debug> std::error::Error for ApiError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ApiError::Retry(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, http::HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn the_request_id_and_the_replay_flag_come_from_the_headers() {
        let raw = Raw {
            status: StatusCode::CREATED,
            headers: headers(&[("x-request-id", "req_1"), ("idempotent-replayed", "true")]),
            body: Bytes::new(),
        };
        let answered = Answered::new((), raw, None, 2);
        assert_eq!(answered.request_id(), Some("req_1"));
        assert!(answered.replayed());
        assert_eq!(answered.attempts(), 2);
        // Stripe's name comes first; an absent flag is not a replay.
        let error: ApiError<()> = ApiError::Status {
            status: StatusCode::PAYMENT_REQUIRED,
            headers: headers(&[("request-id", "req_2"), ("x-request-id", "other")]),
            body: (),
        };
        assert_eq!(error.request_id(), Some("req_2"));
        assert!(!error.replayed());
        assert_eq!(ApiError::<()>::Encode("x".into()).request_id(), None);
    }
}
