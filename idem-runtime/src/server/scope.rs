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

    /// Query parameters that carry a credential: left out of the request
    /// line the key table stores.
    fn secret_query_parameters(&self) -> Vec<&'static str> {
        Vec::new()
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

/// Where one security scheme's credential travels, as the spec's
/// `securitySchemes` declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// `Authorization: Bearer <token>` (`http`/`bearer`, OAuth 2, OpenID Connect).
    Bearer,
    /// `Authorization: Basic <user:password>` (`http`/`basic`).
    Basic,
    /// An API key in the named request header.
    Header(&'static str),
    /// An API key in the named query parameter.
    Query(&'static str),
    /// An API key in the named cookie.
    Cookie(&'static str),
}

/// One way to authenticate: every scheme of one `security` alternative,
/// each by name with where its credential travels.
pub type Requirement = &'static [(&'static str, Credential)];

/// The shortest credential digest key accepted, in bytes.
pub const MIN_DIGEST_KEY: usize = 32;

/// Scope from the credential the request authenticates with
/// (`x-idempotency.scope: credential`): the first of the operation's
/// `security` alternatives whose credentials are all present, digested with
/// HMAC-SHA-256 under the deployment's key. The scope stored is that digest
/// (`cred:` and 32 hex digits), never the credential: the key table is read
/// for replays and kept for days, and a bearer token at rest there would be
/// a secret outside the vault.
///
/// The digest key must stay the same across restarts and replicas (a new
/// key is a new scope for every caller: their retries in flight become new
/// requests). Rotating a token is also a new scope; an API whose accounts
/// hold several tokens should scope by account instead.
///
/// Built by [`Idempotency::scoped_by_credential`](super::Idempotency::scoped_by_credential),
/// which the generated router calls.
#[derive(Clone)]
pub struct CredentialScope {
    requirements: &'static [Requirement],
    key: std::sync::Arc<[u8]>,
}

impl std::fmt::Debug for CredentialScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialScope")
            .field("requirements", &self.requirements)
            .finish_non_exhaustive()
    }
}

impl CredentialScope {
    pub(crate) fn new(requirements: &'static [Requirement], key: std::sync::Arc<[u8]>) -> Self {
        CredentialScope { requirements, key }
    }

    fn digest(&self, parts: &[(&str, &[u8])]) -> String {
        credential_digest(&self.key, parts)
    }

    fn describe(&self) -> String {
        let ways: Vec<String> = self
            .requirements
            .iter()
            .filter(|r| !r.is_empty())
            .map(|r| {
                r.iter()
                    .map(|(_, c)| match c {
                        Credential::Bearer => "an `Authorization: Bearer` token".to_owned(),
                        Credential::Basic => "`Authorization: Basic` credentials".to_owned(),
                        Credential::Header(name) => format!("the `{name}` header"),
                        Credential::Query(name) => format!("the `{name}` query parameter"),
                        Credential::Cookie(name) => format!("the `{name}` cookie"),
                    })
                    .collect::<Vec<_>>()
                    .join(" and ")
            })
            .collect();
        if ways.is_empty() {
            "the operation declares no credential to scope its keys by".to_owned()
        } else {
            format!(
                "the request carries no credential: send {}",
                ways.join(", or ")
            )
        }
    }
}

/// The scope a credential-scoped key is stored under: `cred:` and the
/// first 32 hex digits of the HMAC-SHA-256, under `digest_key`, of each
/// `(security scheme name, credential)` of the requirement the request met.
/// What `idem keys show --credential-from-env` computes to find a key.
///
/// ```
/// let scope = idem_runtime::server::credential_digest(&[7; 32], &[("bearerAuth", b"sk_test_1")]);
/// assert!(scope.starts_with("cred:") && scope.len() == 37);
/// ```
pub fn credential_digest(digest_key: &[u8], credentials: &[(&str, &[u8])]) -> String {
    use hmac::Mac as _;
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(digest_key) else {
        // HMAC takes a key of any length.
        return String::new();
    };
    for (scheme, value) in credentials {
        // Length-prefixed, so no two lists of credentials digest alike.
        for field in [scheme.as_bytes(), value] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
    }
    let bytes = mac.finalize().into_bytes();
    let mut out = String::with_capacity(5 + 32);
    out.push_str("cred:");
    for b in &bytes[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Two values where one credential goes: which one an authenticator read
/// and which one names the scope could differ, so neither is used.
fn duplicated(parts: &Parts, credential: Credential) -> Option<String> {
    let name = match credential {
        Credential::Bearer | Credential::Basic => http::header::AUTHORIZATION.as_str(),
        Credential::Header(name) => name,
        Credential::Query(_) | Credential::Cookie(_) => return None,
    };
    (parts.headers.get_all(name).iter().count() > 1)
        .then(|| format!("the request carries more than one `{name}` header"))
}

/// The credential of `credential` in `parts`, when present and not empty.
fn credential<'p>(parts: &'p Parts, credential: Credential) -> Option<std::borrow::Cow<'p, [u8]>> {
    use std::borrow::Cow;
    let authorization = |scheme: &str| {
        parts
            .headers
            .get_all(http::header::AUTHORIZATION)
            .iter()
            .find_map(|v| {
                let v = v.as_bytes();
                let space = v.iter().position(|b| *b == b' ')?;
                let (name, rest) = v.split_at(space);
                let token = rest.trim_ascii();
                (name.eq_ignore_ascii_case(scheme.as_bytes()) && !token.is_empty())
                    .then_some(Cow::Borrowed(token))
            })
    };
    match credential {
        Credential::Bearer => authorization("bearer"),
        Credential::Basic => authorization("basic"),
        Credential::Header(name) => parts
            .headers
            .get(name)
            .map(|v| v.as_bytes())
            .filter(|v| !v.is_empty())
            .map(Cow::Borrowed),
        Credential::Query(name) => form_urlencoded::parse(parts.uri.query()?.as_bytes())
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| Cow::Owned(v.into_owned().into_bytes())),
        Credential::Cookie(name) => parts
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(k, v)| *k == name && !v.is_empty())
            .map(|(_, v)| Cow::Owned(v.as_bytes().to_vec())),
    }
}

impl ScopeExtractor for CredentialScope {
    fn scope(&self, parts: &Parts) -> Result<String, ScopeRejection> {
        for (_, c) in self.requirements.iter().flat_map(|r| r.iter()) {
            if let Some(problem) = duplicated(parts, *c) {
                return Err(ScopeRejection::invalid(problem));
            }
        }
        for requirement in self.requirements.iter().filter(|r| !r.is_empty()) {
            let found: Option<Vec<_>> = requirement
                .iter()
                .map(|(scheme, c)| credential(parts, *c).map(|v| (*scheme, v)))
                .collect();
            if let Some(found) = found {
                let parts: Vec<(&str, &[u8])> =
                    found.iter().map(|(s, v)| (*s, v.as_ref())).collect();
                return Ok(self.digest(&parts));
            }
        }
        Err(ScopeRejection::unauthenticated(self.describe()))
    }

    fn secret_query_parameters(&self) -> Vec<&'static str> {
        self.requirements
            .iter()
            .flat_map(|r| r.iter())
            .filter_map(|(_, c)| match c {
                Credential::Query(name) => Some(*name),
                _ => None,
            })
            .collect()
    }
}
