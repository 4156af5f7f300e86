//! Where a key's scope comes from: the authenticated caller.

use http::StatusCode;
use http::request::Parts;

/// Why no scope could be derived for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeRejection {
    /// Status to answer with.
    pub status: StatusCode,
    /// Message for the caller.
    pub message: String,
}

impl ScopeRejection {
    /// `401 caller_unidentified` with `message`
    /// ([`SCOPE_MISSING`](crate::protocol::SCOPE_MISSING)).
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        ScopeRejection {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
        }
    }

    /// `400 caller_scope_invalid` with `message`
    /// ([`SCOPE_INVALID`](crate::protocol::SCOPE_INVALID)): the caller named
    /// itself, wrongly.
    pub fn invalid(message: impl Into<String>) -> Self {
        ScopeRejection {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
}

/// Derives the scope a key is unique within — normally the authenticated
/// account — from the request head, after authentication ran.
///
/// Any `Fn(&Parts) -> Result<String, ScopeRejection>` is one:
///
/// ```
/// use idem_runtime::server::{ScopeExtractor, ScopeRejection};
/// #[derive(Clone)]
/// struct Account(String); // inserted by the app's auth middleware
/// let scope = |parts: &http::request::Parts| {
///     parts.extensions.get::<Account>().map(|a| a.0.clone())
///         .ok_or_else(|| ScopeRejection::unauthenticated("sign in first"))
/// };
/// # fn takes(_: impl ScopeExtractor) {}
/// takes(scope);
/// ```
pub trait ScopeExtractor: Send + Sync + 'static {
    /// The scope of this request.
    fn scope(&self, parts: &Parts) -> Result<String, ScopeRejection>;

    /// The request header the scope is read from, when it is one: routes
    /// without a key that declare this header as required check it the same
    /// way, so no route stores anything under an empty caller.
    fn header(&self) -> Option<&str> {
        None
    }
}

impl<F> ScopeExtractor for F
where
    F: Fn(&Parts) -> Result<String, ScopeRejection> + Send + Sync + 'static,
{
    fn scope(&self, parts: &Parts) -> Result<String, ScopeRejection> {
        self(parts)
    }
}

/// Scope from a request header that an upstream authenticator sets and
/// clients cannot forge (for example `X-Account-Id` from a gateway).
///
/// ```
/// let scope = idem_runtime::server::HeaderScope::new("x-account-id");
/// ```
#[derive(Debug, Clone)]
pub struct HeaderScope {
    name: String,
}

impl HeaderScope {
    /// Reads `name` (case-insensitive). A request without it is answered
    /// `401 caller_unidentified`; an empty or non-ASCII value `400
    /// caller_scope_invalid`.
    pub fn new(name: &str) -> Self {
        HeaderScope {
            name: name.to_ascii_lowercase(),
        }
    }
}

impl ScopeExtractor for HeaderScope {
    fn scope(&self, parts: &Parts) -> Result<String, ScopeRejection> {
        match parts.headers.get(self.name.as_str()).map(|v| v.to_str()) {
            Some(Ok(value)) if !value.is_empty() => Ok(value.to_owned()),
            Some(Ok(_)) => Err(ScopeRejection::invalid(format!(
                "the caller's scope is empty (an empty {} header)",
                self.name
            ))),
            Some(Err(_)) => Err(ScopeRejection::invalid(format!(
                "the caller's scope is not visible ASCII (the {} header)",
                self.name
            ))),
            None => Err(ScopeRejection::unauthenticated(format!(
                "the caller could not be identified (missing {} header)",
                self.name
            ))),
        }
    }

    fn header(&self) -> Option<&str> {
        Some(&self.name)
    }
}

/// The one scope shared by every caller; reachable only through
/// `global_scope_shared_by_all_callers()` on the builder.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GlobalScope;

impl ScopeExtractor for GlobalScope {
    fn scope(&self, _parts: &Parts) -> Result<String, ScopeRejection> {
        Ok("*global*".to_owned())
    }
}
