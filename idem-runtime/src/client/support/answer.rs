//! An answer as the generated decoders read it, and the error every call
//! returns.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use crate::client::error::RetryError;
use crate::client::key::IdempotencyKey;

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
            call: CallFacts::default(),
        })
    }

    /// A status this operation does not document.
    pub fn unexpected<T, E>(&self) -> Result<T, ApiError<E>> {
        Err(ApiError::UnexpectedStatus {
            status: self.status,
            headers: self.headers.clone(),
            body: self.body.clone(),
            call: CallFacts::default(),
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
            call: CallFacts::default(),
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
        /// The key the call sent and the attempts it made.
        call: CallFacts,
    },
    /// A status the spec does not document for this operation.
    UnexpectedStatus {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        /// The key the call sent and the attempts it made.
        call: CallFacts,
    },
    /// The body does not match what the spec documents for its status.
    Decode {
        status: StatusCode,
        message: String,
        body: Bytes,
        /// The key the call sent and the attempts it made.
        call: CallFacts,
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
            _ => self.call().and_then(CallFacts::idempotency_key),
        }
    }

    /// The attempts the call made, when it made any.
    pub fn attempts(&self) -> Option<u32> {
        match self {
            ApiError::Retry(e) => Some(e.attempts()),
            _ => self.call().map(CallFacts::attempts).filter(|n| *n > 0),
        }
    }

    /// What the call did, when the server answered.
    pub fn call(&self) -> Option<&CallFacts> {
        match self {
            ApiError::Status { call, .. }
            | ApiError::UnexpectedStatus { call, .. }
            | ApiError::Decode { call, .. } => Some(call),
            _ => None,
        }
    }

    /// The error with what the call did filled in.
    pub(crate) fn with_call(mut self, facts: CallFacts) -> Self {
        if let ApiError::Status { call, .. }
        | ApiError::UnexpectedStatus { call, .. }
        | ApiError::Decode { call, .. } = &mut self
        {
            *call = facts;
        }
        self
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
        let headers = self.headers()?;
        match self.call() {
            Some(call) => call.request_id(headers),
            None => request_id(headers),
        }
    }

    /// Whether the failed answer was a replay of a stored one
    /// (`Idempotent-Replayed: true`): the error happened on an earlier
    /// attempt, perhaps another process's, with the same key.
    pub fn replayed(&self) -> bool {
        self.headers().is_some_and(replayed)
    }
}

pub use crate::protocol::REQUEST_ID_HEADERS;

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

/// What a call did, beside the answer: the idempotency key it sent, the
/// attempts it made, and the header its operation names its request id
/// with. Carried by [`Answered`] and by the errors a server's answer
/// makes ([`ApiError::Status`], [`ApiError::UnexpectedStatus`],
/// [`ApiError::Decode`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallFacts {
    key: Option<IdempotencyKey>,
    attempts: u32,
    request_id_header: Option<&'static str>,
}

impl CallFacts {
    pub(crate) fn new(
        key: Option<IdempotencyKey>,
        attempts: u32,
        request_id_header: Option<&'static str>,
    ) -> Self {
        CallFacts {
            key,
            attempts,
            request_id_header,
        }
    }

    /// The idempotency key sent, when the operation is keyed.
    pub fn idempotency_key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// The attempts made (1 when the first answered); 0 when the error was
    /// built outside a call.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The request id in `headers`: the header the spec declares for it
    /// first, then [`REQUEST_ID_HEADERS`].
    fn request_id<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        self.request_id_header
            .and_then(|name| headers.get(name)?.to_str().ok())
            .or_else(|| request_id(headers))
    }
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
    call: CallFacts,
}

impl<T> Answered<T> {
    pub(crate) fn new(value: T, raw: Raw, call: CallFacts) -> Answered<T> {
        Answered {
            value,
            status: raw.status,
            headers: raw.headers,
            call,
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
        self.call.request_id(&self.headers)
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
        self.call.idempotency_key()
    }

    /// How many attempts the call made (1 without a retry).
    pub fn attempts(&self) -> u32 {
        self.call.attempts()
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
        let answered = Answered::new((), raw, CallFacts::new(None, 2, None));
        assert_eq!(answered.request_id(), Some("req_1"));
        assert!(answered.replayed());
        assert_eq!(answered.attempts(), 2);
        // Stripe's name comes first; an absent flag is not a replay.
        let error: ApiError<()> = ApiError::Status {
            status: StatusCode::PAYMENT_REQUIRED,
            headers: headers(&[("request-id", "req_2"), ("x-trace-id", "tr_2")]),
            body: (),
            call: CallFacts::default(),
        };
        assert_eq!(error.request_id(), Some("req_2"));
        assert!(!error.replayed());
        assert_eq!(error.attempts(), None);
        // The header the spec declares comes before the common names.
        let error = error.with_call(CallFacts::new(None, 3, Some("x-trace-id")));
        assert_eq!(error.request_id(), Some("tr_2"));
        assert_eq!(error.attempts(), Some(3));
        assert_eq!(ApiError::<()>::Encode("x".into()).request_id(), None);
    }
}
