//! What a generated client's methods hand their requests to.
//!
//! A generated method only describes its request: the path with its
//! parameters, the query, headers and body, and the operation's retry class
//! and policy. Everything else lives here, once: encoding parameters by
//! their OpenAPI `style`, bodies by media type (JSON, form with nested
//! `deepObject` fields, multipart, raw bytes, text), credentials, the
//! idempotency key (minted once per logical call, in a header or a body
//! field), the retries, reading the body inside the deadline, and typing the
//! answer. Keeping per-operation code this small is what keeps a
//! 700-operation client building quickly.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde_json::Value;

use super::{
    Backoff, BudgetConfig, IdempotencyKey, Operation, RetryBudget, RetryClient, RetryPolicy,
};

mod answer;
mod request;

pub use answer::{Answered, ApiError, CallFacts, Decoder, REQUEST_ID_HEADERS, Raw, Undecodable};
use request::{Body, Upload, form_pairs, form_urlencoded_pairs};
pub use request::{Multipart, Request, Style, segment};

/// An operation as the generated code declares it, in a `const`.
#[derive(Debug, Clone, Copy)]
pub struct OperationSpec {
    /// Name and retry class (with the `unsafe-retry` warning, if any).
    pub operation: Operation,
    /// Where the idempotency key goes, for a `keyed` operation.
    pub key: KeyLocation,
    /// The security schemes that may authenticate it (any one), by name.
    pub security: &'static [&'static str],
    /// Per-operation `x-retry` settings over the client's.
    pub retry: PolicyOverride,
}

/// Where a keyed operation carries its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyLocation {
    /// Not keyed.
    None,
    /// In this header.
    Header(&'static str),
    /// In this top-level field of the JSON or form body.
    Body(&'static str),
    /// In this query parameter (Google's `requestId`).
    Query(&'static str),
}

/// Per-operation `x-retry` settings; `None` keeps the client's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyOverride {
    pub max_attempts: Option<u32>,
    pub deadline: Option<Duration>,
    /// Measured p99 latency: the attempt timeout becomes a multiple of it.
    pub p99: Option<Duration>,
    /// Full-jitter base and cap, when the operation sets its own.
    pub backoff: Option<(Duration, Duration, bool)>,
}

impl PolicyOverride {
    /// No override.
    pub const NONE: PolicyOverride = PolicyOverride {
        max_attempts: None,
        deadline: None,
        p99: None,
        backoff: None,
    };

    fn is_none(&self) -> bool {
        *self == Self::NONE
    }

    fn apply(&self, base: &RetryPolicy) -> RetryPolicy {
        let mut policy = base.clone();
        if let Some(n) = self.max_attempts {
            policy = policy.max_attempts(n);
        }
        if let Some(d) = self.deadline {
            policy = policy.deadline(d);
        }
        if let Some(p) = self.p99 {
            policy = policy.p99(p);
        }
        if let Some((base, cap, decorrelated)) = self.backoff {
            policy = policy.backoff(if decorrelated {
                Backoff::decorrelated_jitter(base, cap)
            } else {
                Backoff::full_jitter(base, cap)
            });
        }
        policy
    }
}

/// The document-level `x-retry` defaults a generated client starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
    pub decorrelated: bool,
    pub deadline: Duration,
    pub budget: BudgetConfig,
}

impl Defaults {
    /// The retry client these defaults describe, over `http`.
    pub fn retry_client(&self, http: reqwest::Client) -> RetryClient {
        let backoff = if self.decorrelated {
            Backoff::decorrelated_jitter(self.base, self.cap)
        } else {
            Backoff::full_jitter(self.base, self.cap)
        };
        RetryClient::builder(http)
            .policy(
                RetryPolicy::default()
                    .max_attempts(self.max_attempts)
                    .backoff(backoff)
                    .deadline(self.deadline),
            )
            .budget(RetryBudget::new(self.budget))
            .build()
    }
}

/// A credential for one security scheme.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// `Authorization: Bearer {token}`.
    Bearer(String),
    /// `Authorization: Basic base64(user:password)`.
    Basic { user: String, password: String },
    /// An API key in the named header.
    Header { name: &'static str, value: String },
    /// An API key in the named query parameter.
    Query { name: &'static str, value: String },
    /// An API key in the named cookie.
    Cookie { name: &'static str, value: String },
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets never reach logs.
        let kind = match self {
            Credential::Bearer(_) => "Bearer",
            Credential::Basic { .. } => "Basic",
            Credential::Header { .. } => "Header",
            Credential::Query { .. } => "Query",
            Credential::Cookie { .. } => "Cookie",
        };
        write!(f, "Credential::{kind}(…)")
    }
}

/// The shared state of a generated client: base URL, retries, credentials.
/// Cheap to clone; clones share the retry budget.
#[derive(Debug, Clone)]
pub struct ApiClient {
    base: Arc<str>,
    retry: RetryClient,
    credentials: Arc<BTreeMap<&'static str, Credential>>,
}

/// The base URL could not be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid base URL {url:?}: {reason}")]
pub struct InvalidBaseUrl {
    pub url: String,
    pub reason: String,
}

impl ApiClient {
    /// A client for the API at `base` (`https://api.example.com/v1`).
    pub fn new(base: &str, retry: RetryClient) -> Result<Self, InvalidBaseUrl> {
        let parsed = reqwest::Url::parse(base).map_err(|e| InvalidBaseUrl {
            url: base.to_owned(),
            reason: e.to_string(),
        })?;
        if parsed.cannot_be_a_base() {
            return Err(InvalidBaseUrl {
                url: base.to_owned(),
                reason: "it cannot be a base for paths".into(),
            });
        }
        Ok(ApiClient {
            base: Arc::from(base.trim_end_matches('/')),
            retry,
            credentials: Arc::default(),
        })
    }

    /// Sets the credential for the security scheme `scheme`.
    pub fn set_credential(&mut self, scheme: &'static str, credential: Credential) {
        Arc::make_mut(&mut self.credentials).insert(scheme, credential);
    }

    /// The retry client every call goes through.
    pub fn retry_client(&self) -> &RetryClient {
        &self.retry
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Starts a call of `spec`.
    pub fn call<T, E>(
        &self,
        spec: &'static OperationSpec,
        request: Request,
        decode: Decoder<T, E>,
    ) -> Call<'_, T, E> {
        self.start(spec, request, decode, None)
    }

    /// Starts a call of `spec` whose optional body the caller may give with
    /// [`Call::body`]; `set_body` encodes (and checks) it.
    pub fn call_with_body<T, E, B: ?Sized>(
        &self,
        spec: &'static OperationSpec,
        request: Request,
        decode: Decoder<T, E>,
        set_body: fn(&mut Request, &B),
    ) -> Call<'_, T, E, B> {
        self.start(spec, request, decode, Some(set_body))
    }

    fn start<T, E, B: ?Sized>(
        &self,
        spec: &'static OperationSpec,
        request: Request,
        decode: Decoder<T, E>,
        set_body: Option<fn(&mut Request, &B)>,
    ) -> Call<'_, T, E, B> {
        Call {
            client: self,
            spec,
            request,
            key: None,
            decode,
            set_body,
            options: CallOptions::default(),
            mode: Single,
        }
    }
}

/// The body type of a call that takes no optional body: it has no values,
/// so [`Call::body`] cannot be called on such a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoBody {}

/// One logical call, ready to send.
#[must_use = "a call does nothing until `.send()` is awaited"]
pub struct Call<'a, T, E, B: ?Sized = NoBody, M = Single> {
    client: &'a ApiClient,
    spec: &'static OperationSpec,
    request: Request,
    key: Option<IdempotencyKey>,
    decode: Decoder<T, E>,
    set_body: Option<fn(&mut Request, &B)>,
    /// This call's own bounds, over the client's and the operation's.
    options: CallOptions,
    /// What the call can do besides `.send()`: pages, events.
    mode: M,
}

/// One call's own retry bounds; `None` keeps the operation's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CallOptions {
    deadline: Option<Duration>,
    max_attempts: Option<u32>,
    attempt_timeout: Option<Duration>,
}

impl CallOptions {
    fn apply(&self, mut policy: RetryPolicy) -> RetryPolicy {
        if let Some(d) = self.deadline {
            policy = policy.deadline(d);
        }
        if let Some(n) = self.max_attempts {
            policy = policy.max_attempts(n);
        }
        if let Some(t) = self.attempt_timeout {
            policy = policy.attempt_timeout(t);
        }
        policy
    }
}

/// The mode of a call answered once: `.send()`, `.send_streaming()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Single;

impl<T, E, B: ?Sized, M> fmt::Debug for Call<'_, T, E, B, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("operation", &self.spec.operation.name)
            .field("method", &self.request.method)
            .field("path", &self.request.path)
            .finish_non_exhaustive()
    }
}

impl<'a, T, E, B: ?Sized, M> Call<'a, T, E, B, M> {
    /// Sends `body` with the call: the operation's body is optional, so the
    /// call sends none unless given one here.
    pub fn body(mut self, body: &B) -> Self {
        if let Some(set) = self.set_body {
            set(&mut self.request, body);
        }
        self
    }

    /// Uses `key` instead of a minted one: derive it from an identifier you
    /// already hold (`IdempotencyKey::derived(["order", id, "charge"])`) so a
    /// retry of the same logical operation, even from another process,
    /// carries the same key.
    pub fn idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.key = Some(key);
        self
    }

    /// Sends the file at `path` as the body, read as it goes out (a 2 GB
    /// upload never sits in memory); every attempt opens it again, so the
    /// call retries as its class allows.
    pub fn body_file(mut self, content_type: &str, path: impl Into<std::path::PathBuf>) -> Self {
        self.request.file(content_type, path);
        self
    }

    /// Sends `stream` as the body, read as it goes out. A stream can be
    /// read once: the call makes one attempt, and a failure carries the key
    /// to reconcile with.
    pub fn body_stream<S, X>(mut self, content_type: &str, stream: S) -> Self
    where
        S: futures_util::Stream<Item = Result<Bytes, X>> + Send + 'static,
        X: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.request.stream(content_type, stream);
        self
    }

    /// Adds a header the spec does not describe (tracing, a beta flag).
    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.request.header(name, value);
        self
    }

    /// Bounds this call, its retries included, by `deadline` instead of the
    /// operation's. The remaining deadline still travels with each attempt.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.options.deadline = Some(deadline);
        self
    }

    /// Makes at most `attempts` attempts for this call (1: no retry). A
    /// keyed call still sends its one key on every attempt, and each retry
    /// still spends the client's retry budget.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.options.max_attempts = Some(attempts.max(1));
        self
    }

    /// Gives each attempt of this call at most `timeout`, within the
    /// deadline.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.options.attempt_timeout = Some(timeout);
        self
    }

    /// Sends the call: one logical call, retried as its class and policy
    /// allow, the key minted once (unless given) and sent on every attempt,
    /// the body read inside the deadline.
    pub async fn send(self) -> Result<T, ApiError<E>> {
        let ready = self.ready()?;
        let response = ready.execute(false).await?;
        ready.decode(response).await
    }

    /// Sends the call like [`Call::send`], and returns the typed value with
    /// the answer it came in: status, headers, the request id, whether the
    /// server replayed a stored answer, the key sent and the attempts made.
    ///
    /// ```ignore
    /// let charge = client.charges().create(&params, &body).send_with_response().await?;
    /// if charge.replayed() { /* an earlier attempt already charged */ }
    /// println!("{:?} in {} attempts", charge.request_id(), charge.attempts());
    /// ```
    pub async fn send_with_response(self) -> Result<Answered<T>, ApiError<E>> {
        let ready = self.ready()?;
        let response = ready.execute(false).await?;
        let raw = read_raw(response).await;
        let value = ready.decode_raw(&raw)?;
        Ok(Answered::new(value, raw, ready.facts()))
    }

    pub(crate) fn with_mode<N>(self, mode: N) -> Call<'a, T, E, B, N> {
        let Call {
            client,
            spec,
            request,
            key,
            decode,
            set_body,
            options,
            mode: _,
        } = self;
        Call {
            client,
            spec,
            request,
            key,
            decode,
            set_body,
            options,
            mode,
        }
    }

    pub(crate) fn mode(&self) -> &M {
        &self.mode
    }

    pub(crate) fn mode_mut(&mut self) -> &mut M {
        &mut self.mode
    }

    pub(crate) fn spec(&self) -> &'static OperationSpec {
        self.spec
    }

    pub(crate) fn client(&self) -> &'a ApiClient {
        self.client
    }

    /// Everything the attempts share, worked out once: credentials, the
    /// key, the URL, the encoded body.
    #[allow(
        clippy::result_large_err,
        reason = "the error every generated call returns, built on the error path only"
    )]
    pub(crate) fn ready(self) -> Result<Ready<'a, T, E>, ApiError<E>> {
        let Call {
            client,
            spec,
            mut request,
            key,
            decode,
            set_body: _,
            options,
            mode: _,
        } = self;
        if let Some(violations) = request.invalid.take() {
            return Err(ApiError::Invalid(violations));
        }
        if let Some(problem) = request.problem.take() {
            return Err(ApiError::Encode(problem));
        }
        for (scheme, credential) in client.credentials.iter() {
            if spec.security.contains(scheme) {
                apply(&mut request, credential);
                break;
            }
        }
        let keyed = spec.operation.class == super::RetryClass::Keyed;
        let key = match (keyed, key) {
            (_, Some(key)) => Some(key),
            (true, None) => Some(IdempotencyKey::new_v4()),
            (false, None) => None,
        };
        let mut header_key = None;
        match (spec.key, &key) {
            (KeyLocation::Body(field), Some(key)) => {
                if let Some(
                    Body::Json(Value::Object(map))
                    | Body::Form {
                        value: Value::Object(map),
                        ..
                    },
                ) = request.body.as_mut()
                {
                    let present = map.get(field).is_some_and(|v| !v.is_null());
                    if !present {
                        map.insert(field.to_owned(), Value::String(key.as_str().to_owned()));
                    }
                }
            }
            (KeyLocation::Header(_), Some(key)) => header_key = Some(key.clone()),
            // A key the caller set as the parameter itself is kept.
            (KeyLocation::Query(name), Some(key))
                if !request.query.iter().any(|(n, _)| n == name) =>
            {
                request
                    .query
                    .push((name.to_owned(), key.as_str().to_owned()));
            }
            _ => {}
        }
        let (content_type, bytes) = match &request.body {
            Some(Body::Json(value)) => (
                Some("application/json".to_owned()),
                Some(Bytes::from(
                    serde_json::to_vec(value).map_err(|e| ApiError::Encode(e.to_string()))?,
                )),
            ),
            Some(Body::Form { value, deep }) => {
                let pairs = form_pairs(value, deep);
                (
                    Some("application/x-www-form-urlencoded".to_owned()),
                    Some(Bytes::from(form_urlencoded_pairs(&pairs))),
                )
            }
            Some(Body::Raw {
                content_type,
                bytes,
            }) => (Some(content_type.clone()), Some(bytes.clone())),
            Some(Body::File { content_type, .. } | Body::Stream { content_type, .. }) => {
                (Some(content_type.clone()), None)
            }
            Some(Body::Multipart(_)) | None => (None, None),
        };
        let upload = match &request.body {
            Some(Body::File { path, .. }) => {
                if let Err(e) = std::fs::metadata(path) {
                    return Err(ApiError::Encode(format!(
                        "the body file {}: {e}",
                        path.display()
                    )));
                }
                Some(Upload::File(path.clone()))
            }
            Some(Body::Stream { body, .. }) => Some(Upload::Stream(Arc::clone(body))),
            _ => None,
        };
        let mut url = match reqwest::Url::parse(&format!("{}{}", client.base, request.path)) {
            Ok(url) => url,
            Err(e) => return Err(ApiError::Encode(format!("URL: {e}"))),
        };
        if !request.query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(request.query.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        }
        if !request.cookies.is_empty()
            && let Ok(value) = HeaderValue::from_str(&request.cookies.join("; "))
        {
            request.headers.insert(http::header::COOKIE, value);
        }
        let multipart = match &request.body {
            Some(Body::Multipart(parts)) => Some(parts.clone()),
            _ => None,
        };
        Ok(Ready {
            client: client.clone(),
            _call: std::marker::PhantomData,
            spec,
            method: request.method,
            url,
            headers: request.headers,
            key,
            header_key,
            content_type,
            bytes,
            multipart,
            upload,
            decode,
            options,
            attempts: AtomicU32::new(0),
        })
    }
}

/// A call worked out and ready for its attempts; pages and reconnects send
/// it again with another URL.
pub(crate) struct Ready<'a, T, E> {
    /// A clone (it is cheap), so a stream can outlive the call's borrow to
    /// send again.
    client: ApiClient,
    _call: std::marker::PhantomData<&'a ()>,
    spec: &'static OperationSpec,
    method: Method,
    pub(crate) url: reqwest::Url,
    pub(crate) headers: HeaderMap,
    pub(crate) key: Option<IdempotencyKey>,
    header_key: Option<IdempotencyKey>,
    content_type: Option<String>,
    bytes: Option<Bytes>,
    multipart: Option<Multipart>,
    upload: Option<Upload>,
    decode: Decoder<T, E>,
    options: CallOptions,
    /// Attempts made by the last execution.
    pub(crate) attempts: AtomicU32,
}

impl<T, E> Ready<'_, T, E> {
    /// The same call, no longer tied to the borrow it was made from.
    pub(crate) fn detach(self) -> Ready<'static, T, E> {
        Ready {
            client: self.client,
            _call: std::marker::PhantomData,
            spec: self.spec,
            method: self.method,
            url: self.url,
            headers: self.headers,
            key: self.key,
            header_key: self.header_key,
            content_type: self.content_type,
            bytes: self.bytes,
            multipart: self.multipart,
            upload: self.upload,
            decode: self.decode,
            options: self.options,
            attempts: self.attempts,
        }
    }

    /// One logical call through the retry engine. With `stream`, the
    /// engine accepts the response on its head and the body is left to be
    /// read as it comes.
    pub(crate) async fn execute(&self, stream: bool) -> Result<reqwest::Response, ApiError<E>> {
        let client = &self.client;
        let spec = self.spec;
        let mut policy = if spec.retry.is_none() {
            None
        } else {
            Some(spec.retry.apply(client.retry.policy()))
        };
        if self.options != CallOptions::default() {
            policy = Some(
                self.options
                    .apply(policy.unwrap_or_else(|| client.retry.policy().clone())),
            );
        }
        self.attempts.store(0, Ordering::Relaxed);
        if matches!(self.upload, Some(Upload::Stream(_))) {
            // A stream is read by its one attempt.
            policy = Some(
                policy
                    .unwrap_or_else(|| client.retry.policy().clone())
                    .max_attempts(1),
            );
        }
        if stream {
            policy = Some(
                policy
                    .unwrap_or_else(|| client.retry.policy().clone())
                    .stream_body(true),
            );
        }
        let retry = match policy {
            None => client.retry.clone(),
            Some(policy) => client.retry.with_policy(policy),
        };
        let key_header = match spec.key {
            KeyLocation::Header(name) => HeaderName::from_bytes(name.as_bytes()).ok(),
            _ => None,
        };
        let url = &self.url;
        let host = url
            .host_str()
            .map(|h| format!("{h}:{}", url.port_or_known_default().unwrap_or(0)));
        let http = retry.http().clone();
        let engine_key_header = retry.policy().key_header.clone();
        retry
            .execute_with(
                &spec.operation,
                self.key.clone(),
                host.as_deref(),
                |attempt| {
                    self.attempts.fetch_add(1, Ordering::Relaxed);
                    let mut builder = http
                        .request(self.method.clone(), url.clone())
                        .headers(self.headers.clone());
                    for (name, value) in attempt.headers() {
                        // The key goes where the operation declares it (its
                        // own header name, or the body), not under the
                        // default name.
                        if *name == engine_key_header {
                            continue;
                        }
                        builder = builder.header(name, value);
                    }
                    if let (Some(name), Some(key)) = (&key_header, &self.header_key) {
                        builder = builder.header(name.clone(), key.header_value());
                    }
                    if let Some(ct) = &self.content_type {
                        builder = builder.header(http::header::CONTENT_TYPE, ct.as_str());
                    }
                    if let Some(bytes) = &self.bytes {
                        builder = builder.body(bytes.clone());
                    }
                    if let Some(parts) = &self.multipart {
                        builder = builder.multipart(parts.form());
                    }
                    match &self.upload {
                        Some(Upload::File(path)) => {
                            // Opened again for each attempt; a file gone
                            // since is this attempt's transport error.
                            let body = match std::fs::File::open(path) {
                                Ok(file) => reqwest::Body::from(tokio::fs::File::from_std(file)),
                                Err(e) => reqwest::Body::wrap_stream(futures_util::stream::once(
                                    async move { Err::<Bytes, _>(e) },
                                )),
                            };
                            builder = builder.body(body);
                        }
                        Some(Upload::Stream(cell)) => {
                            let taken = cell
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .take();
                            if let Some(body) = taken {
                                builder = builder.body(body);
                            }
                        }
                        None => {}
                    }
                    builder.send()
                },
            )
            .await
            .map_err(ApiError::Retry)
    }

    /// The HTTP client the attempts go through.
    pub(crate) fn http(&self) -> reqwest::Client {
        self.client.retry.http().clone()
    }

    /// Reads the rest of `response` and types it.
    pub(crate) async fn decode(&self, response: reqwest::Response) -> Result<T, ApiError<E>> {
        let raw = read_raw(response).await;
        self.decode_raw(&raw)
    }

    /// What the call did: the key sent, the attempts of its last
    /// execution, the header its request id comes in.
    pub(crate) fn facts(&self) -> CallFacts {
        CallFacts::new(
            self.key.clone(),
            self.attempts.load(std::sync::atomic::Ordering::Relaxed),
            self.spec.operation.request_id,
        )
    }

    /// Types an answer already read.
    #[allow(
        clippy::result_large_err,
        reason = "the error every generated call returns, built on the error path only"
    )]
    pub(crate) fn decode_raw(&self, raw: &Raw) -> Result<T, ApiError<E>> {
        (self.decode)(raw).map_err(|e| e.with_call(self.facts()))
    }
}

/// The whole of `response`, read.
pub(crate) async fn read_raw(response: reqwest::Response) -> Raw {
    let status = response.status();
    let headers = response.headers().clone();
    // Without streaming the retry engine has already read the body inside
    // the deadline.
    let body = response.bytes().await.unwrap_or_default();
    Raw {
        status,
        headers,
        body,
    }
}

fn apply(request: &mut Request, credential: &Credential) {
    match credential {
        Credential::Bearer(token) => {
            if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
                request.headers.insert(http::header::AUTHORIZATION, value);
            }
        }
        Credential::Basic { user, password } => {
            let encoded = base64(format!("{user}:{password}").as_bytes());
            if let Ok(value) = HeaderValue::from_str(&format!("Basic {encoded}")) {
                request.headers.insert(http::header::AUTHORIZATION, value);
            }
        }
        Credential::Header { name, value } => request.header(name, value.as_str()),
        Credential::Query { name, value } => {
            request.query.push(((*name).to_owned(), value.clone()))
        }
        Credential::Cookie { name, value } => request.cookies.push(format!("{name}={value}")),
    }
}

fn base64(input: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::request::*;
    use super::*;

    #[test]
    fn deep_objects_are_bracketed_and_arrays_indexed() {
        let body = serde_json::json!({
            "amount": 2000,
            "metadata": {"order": "739", "tier": {"level": 2}},
            "expand": ["customer", "invoice"],
            "items": [{"price": "p_1", "quantity": 2}],
            "tags": ["a", "b"],
            "note": null
        });
        let pairs = form_pairs(&body, &["expand"]);
        let text: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            text,
            [
                "amount=2000",
                "expand[0]=customer",
                "expand[1]=invoice",
                "items[0][price]=p_1",
                "items[0][quantity]=2",
                "metadata[order]=739",
                "metadata[tier][level]=2",
                "tags=a",
                "tags=b",
            ]
        );
    }

    #[test]
    fn query_styles() {
        let mut out = Vec::new();
        let list = serde_json::json!(["a", "b"]);
        encode_param("q", &list, Style::Form, true, &mut out);
        encode_param("c", &list, Style::Form, false, &mut out);
        encode_param("s", &list, Style::SpaceDelimited, false, &mut out);
        encode_param("p", &list, Style::PipeDelimited, false, &mut out);
        encode_param(
            "f",
            &serde_json::json!({"x": 1}),
            Style::DeepObject,
            true,
            &mut out,
        );
        let text: Vec<String> = out.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(text, ["q=a", "q=b", "c=a,b", "s=a b", "p=a|b", "f[x]=1"]);
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(segment(&42), "42");
        assert_eq!(segment("ch_1"), "ch_1");
    }

    #[test]
    fn basic_credentials_encode() {
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
    }
}
