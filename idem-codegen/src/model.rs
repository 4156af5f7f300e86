//! The model: one [`Operation`] per path and method, with everything the audit
//! and the generators need — retry class, key policy, retry policy, phases,
//! waivers — and the position of each fact in the user's files.

use std::time::Duration;

use crate::load::{Document, LoadError};
use crate::source::Pos;
use crate::tree::Node;
use crate::vocab::{
    Backoff, Budget, ClaimAt, Effect, ExtensionError, FailureReplay, IdempotencyExt, InFlight,
    KeyRequirement, Level, Located, Reader, Resume, RetryExt, Scope, Waiver,
};

mod build;
mod names;
pub mod schema;
pub(crate) mod select;
pub mod shape;
pub(crate) mod words;

pub use build::build;
pub use schema::{Kind, Schema, SchemaRef, Schemas};
pub use select::{SelectError, Selection};
pub use words::{Evidence, Inferred};

/// HTTP methods an OpenAPI path item can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    Get,
    Put,
    Post,
    Delete,
    Options,
    Head,
    Patch,
    Trace,
    Query,
}

impl Method {
    pub const ALL: [(Method, &'static str); 9] = [
        (Method::Get, "get"),
        (Method::Put, "put"),
        (Method::Post, "post"),
        (Method::Delete, "delete"),
        (Method::Options, "options"),
        (Method::Head, "head"),
        (Method::Patch, "patch"),
        (Method::Trace, "trace"),
        (Method::Query, "query"),
    ];

    /// Upper-case name, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Head => "HEAD",
            Method::Patch => "PATCH",
            Method::Trace => "TRACE",
            Method::Query => "QUERY",
        }
    }

    /// RFC 9110 safe methods (and QUERY, which is safe by its definition).
    pub fn is_safe(self) -> bool {
        matches!(
            self,
            Method::Get | Method::Head | Method::Options | Method::Trace | Method::Query
        )
    }

    /// The effect assumed when none is declared; `None` for POST and PATCH,
    /// which promise nothing.
    pub fn default_effect(self) -> Option<Effect> {
        match self {
            m if m.is_safe() => Some(Effect::Read),
            Method::Put => Some(Effect::Replace),
            Method::Delete => Some(Effect::Delete),
            _ => None,
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a client may retry an operation; every operation has exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RetryClass {
    /// Idempotent by its effect (or conditional on `If-Match`): retried on the allowlist.
    Safe,
    /// Accepts an idempotency key: one key per logical call, reused on every attempt.
    Keyed,
    /// Not idempotent, no key, and the spec warns integrators.
    UnsafeDocumented,
    /// Not idempotent, no key, no warning: the audit fails.
    Unsafe,
}

impl RetryClass {
    pub fn as_str(self) -> &'static str {
        match self {
            RetryClass::Safe => "safe",
            RetryClass::Keyed => "keyed",
            RetryClass::UnsafeDocumented => "unsafe-documented",
            RetryClass::Unsafe => "unsafe",
        }
    }
}

impl std::fmt::Display for RetryClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parameter as the model needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Parameter {
    pub name: String,
    /// `path`, `query`, `header` or `cookie`.
    pub location: String,
    pub required: bool,
    /// JSON Schema `type` when one is given.
    pub schema_type: Option<String>,
    pub max_length: Option<u64>,
    /// Where the parameter is declared (possibly another file).
    pub pos: Pos,
    /// The parameter's schema (from `schema`, or from its one `content` entry).
    pub schema: Option<Schema>,
    /// `style`, when written (`form`, `simple`, `deepObject`, …).
    pub style: Option<String>,
    /// `explode`, when written.
    pub explode: Option<bool>,
    pub description: Option<String>,
    /// Where the description's value starts, for evidence read from it.
    pub description_pos: Option<Pos>,
    pub deprecated: bool,
    /// Whether the spec declares it; `false` for a `{name}` of the path
    /// template that no parameter declares, which the model adds as a
    /// required string located at the path.
    pub declared: bool,
}

/// A documented response.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// `201`, `4XX`, `default`.
    pub status: String,
    pub pos: Pos,
    /// Header names, as written.
    pub headers: Vec<String>,
    /// Description plus any example text, for rules that read what is said.
    pub text: String,
    pub description: Option<String>,
    /// The body in each media type the response documents.
    pub media: Vec<Media>,
    /// The documented headers with their schemas.
    pub header_specs: Vec<HeaderSpec>,
    /// The name under `components/responses` when the response is a `$ref`
    /// to one there: what operations that share it share.
    pub component: Option<String>,
}

/// A body in one media type.
#[derive(Debug, Clone, PartialEq)]
pub struct Media {
    /// `application/json`, `multipart/form-data`, `*/*`, …
    pub media_type: String,
    pub schema: Option<Schema>,
    /// Per-property `encoding` of a form or multipart body.
    pub encoding: Vec<Encoding>,
}

/// How one property of a form or multipart body is encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoding {
    pub property: String,
    pub style: Option<String>,
    pub explode: Option<bool>,
    pub content_type: Option<String>,
}

/// A documented response header.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderSpec {
    pub name: String,
    pub required: bool,
    pub description: Option<String>,
    pub schema: Option<Schema>,
}

/// A `components/securitySchemes` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct SecurityScheme {
    /// The scheme's key in `securitySchemes`.
    pub name: String,
    pub kind: SecurityKind,
    pub description: Option<String>,
}

/// What a security scheme asks the client to send.
#[derive(Debug, Clone, PartialEq)]
pub enum SecurityKind {
    /// `Authorization: Bearer …` (HTTP bearer, OAuth 2, OpenID Connect).
    Bearer,
    /// `Authorization: Basic …`.
    Basic,
    /// A key in a header, query parameter or cookie named `parameter`.
    ApiKey { location: String, parameter: String },
    /// Anything else (mutual TLS, other HTTP schemes): not applied.
    Other(String),
}

impl Response {
    pub fn has_header(&self, name: &str) -> bool {
        self.headers.iter().any(|h| h.eq_ignore_ascii_case(name))
    }
}

/// The request body, summarised.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestBody {
    pub required: bool,
    pub content_types: Vec<String>,
    /// Top-level property names of the first schema (after `$ref`/`allOf`).
    pub properties: Vec<String>,
    pub pos: Pos,
    pub description: Option<String>,
    /// The body in each media type the operation accepts.
    pub media: Vec<Media>,
    /// Top-level fields named like an idempotency key ([`BODY_KEY_FIELDS`]),
    /// from every media type's schema (JSON and form bodies alike), through
    /// `$ref` and `allOf`; then the fields whose description says they are
    /// a key ([`BodyField::evidence`]).
    pub key_fields: Vec<BodyField>,
    /// The described top-level fields of the first media type's schema.
    pub field_texts: Vec<FieldText>,
}

impl RequestBody {
    /// The key-named field `name`, if the body has it.
    pub fn key_field(&self, name: &str) -> Option<&BodyField> {
        self.key_fields.iter().find(|f| f.name == name)
    }
}

/// One top-level request-body field, as the key rules need it.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyField {
    /// The field's name as written (`idempotency_key`, `IdempotencyKey`).
    pub name: String,
    /// Listed in its schema's `required`.
    pub required: bool,
    /// JSON Schema `type` when one is given.
    pub schema_type: Option<String>,
    pub max_length: Option<u64>,
    /// The property's key in the schema (possibly another file).
    pub pos: Pos,
    /// For a field found by what its description says rather than by its
    /// name (AWS's `ClientToken`), the words that say it.
    pub evidence: Option<Evidence>,
}

/// A top-level request-body field's description, read for what the
/// operation does.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldText {
    pub name: String,
    pub description: String,
    /// Where the description's value starts.
    pub pos: Pos,
}

/// Where the key travels and how it was found.
#[derive(Debug, Clone, PartialEq)]
pub enum KeySource {
    /// A header parameter (its index in [`Operation::parameters`]).
    Header {
        name: String,
        parameter: Option<usize>,
    },
    /// A request-body field.
    Body { field: String },
    /// A query parameter (Google's `requestId`): its index in
    /// [`Operation::parameters`].
    Query { name: String, parameter: usize },
}

impl KeySource {
    /// `header`, `body` or `query`.
    pub fn location(&self) -> &'static str {
        match self {
            KeySource::Header { .. } => "header",
            KeySource::Body { .. } => "body",
            KeySource::Query { .. } => "query",
        }
    }

    /// The key's index in [`Operation::parameters`], when a parameter
    /// carries it.
    pub fn parameter(&self) -> Option<usize> {
        match self {
            KeySource::Header { parameter, .. } => *parameter,
            KeySource::Query { parameter, .. } => Some(*parameter),
            KeySource::Body { .. } => None,
        }
    }

    /// The header, field or parameter name.
    pub fn name(&self) -> &str {
        match self {
            KeySource::Header { name, .. } | KeySource::Query { name, .. } => name,
            KeySource::Body { field } => field,
        }
    }
}

/// How idem learned that an operation takes a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyOrigin {
    /// `key: required | optional` on the operation (or an alias such as
    /// `x-fern-idempotent`).
    Declared,
    /// The document root's `key:`, inherited by an operation that is not
    /// idempotent by its effect.
    RootDefault,
    /// No `key:` reached the operation; the spec already shows the key (a
    /// key header parameter or a key-named body field), or an input's own
    /// description says it is one ([`KeyPolicy::evidence`]).
    Inferred,
}

impl KeyOrigin {
    /// `declared` or `inferred`, as the JSON output's `key_source` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyOrigin::Declared | KeyOrigin::RootDefault => "declared",
            KeyOrigin::Inferred => "inferred",
        }
    }
}

/// An operation's idempotency-key policy.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyPolicy {
    pub requirement: KeyRequirement,
    /// How the key is sent; `None` when the operation takes no key.
    pub source: Option<KeySource>,
    /// The `key:` that applies, if any: the operation's own, or the root's
    /// default (see [`KeyPolicy::origin`]).
    pub declared: Option<Located<KeyRequirement>>,
    /// A key-like parameter that is not a header (e.g. `?idempotency_key=`).
    pub misplaced: Option<usize>,
    /// How the key was found; `None` when the operation takes no key.
    pub origin: Option<KeyOrigin>,
    /// When the key was recognised by what its description says, not by its
    /// name: the words.
    pub evidence: Option<Evidence>,
}

impl KeyPolicy {
    /// Whether the requirement comes from the document root's `key:`.
    pub fn from_root(&self) -> bool {
        self.origin == Some(KeyOrigin::RootDefault)
    }
}

/// The effective `x-idempotency` settings of an operation (root merged with the
/// operation's own block), with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySettings {
    pub header: String,
    pub key_max_length: u32,
    pub scope: Scope,
    pub replay_window: Duration,
    pub reaper_after: Duration,
    pub retry_horizon: Option<Duration>,
    pub failure_replay: Option<FailureReplay>,
    pub in_flight: InFlight,
    /// When a single-phase operation's key is claimed.
    pub claim: ClaimAt,
    pub lock_timeout: Duration,
    /// How long a request waits for a database connection before its 503.
    pub store_wait: Duration,
    /// The resume schedule of a phased operation.
    pub resume: Resume,
}

impl KeySettings {
    pub const DEFAULT_HEADER: &'static str = "Idempotency-Key";
    pub const DEFAULT_REPLAY_WINDOW: Duration = Duration::from_secs(24 * 3600);
    pub const DEFAULT_REAPER_AFTER: Duration = Duration::from_secs(72 * 3600);
    pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(60);
    pub const DEFAULT_STORE_WAIT: Duration = Duration::from_millis(500);
}

/// The effective `x-retry` policy of an operation.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub base: Duration,
    pub cap: Duration,
    pub deadline: Duration,
    pub p99: Option<Duration>,
    pub budget: Budget,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            backoff: Backoff::FullJitter,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            deadline: Duration::from_secs(30),
            p99: None,
            budget: Budget::default(),
        }
    }
}

/// A text the spec shows to readers (title, summary, description).
#[derive(Debug, Clone, PartialEq)]
pub struct Prose {
    pub text: String,
    pub pos: Pos,
}

/// One path + method the API serves.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// `operationId`, or a name derived from method and path.
    pub name: String,
    pub operation_id: Option<String>,
    pub method: Method,
    pub path: String,
    /// The method key in the path item.
    pub pos: Pos,
    pub summary: Option<String>,
    pub parameters: Vec<Parameter>,
    pub request_body: Option<RequestBody>,
    pub responses: Vec<Response>,
    /// The `responses` key, where findings about missing responses point.
    pub responses_pos: Option<Pos>,
    /// The declared effect, if any.
    pub declared_effect: Option<Located<Effect>>,
    /// The effect the operation's own words say, when none is declared.
    pub inferred_effect: Option<Inferred<Effect>>,
    pub key: KeyPolicy,
    pub class: RetryClass,
    /// `If-Match` is required and `412` documented.
    pub conditional: bool,
    pub unsafe_retry: Option<Located<String>>,
    pub phases: Option<Located<Vec<String>>>,
    pub settings: KeySettings,
    pub retry: RetryPolicy,
    /// The operation's own `x-admission` (the root's is the router's).
    pub admission: crate::vocab::AdmissionExt,
    /// `x-pagination`, when the operation says how (or that it does not) page.
    pub pagination: Option<Located<crate::vocab::PaginationExt>>,
    /// Dropshot's `x-dropshot-pagination` marks the operation.
    pub dropshot_paged: bool,
    /// The merged `x-idempotency` blocks, for rules that need positions.
    pub ext: IdempotencyExt,
    pub waivers: Vec<Waiver>,
    pub prose: Vec<Prose>,
    pub description: Option<String>,
    pub deprecated: bool,
    pub tags: Vec<String>,
    /// The operation's own `security` (scheme names of each alternative);
    /// `None` inherits the document's.
    pub security: Option<Vec<Vec<String>>>,
}

impl Operation {
    /// The name the operation is known by outside the generated code, kept
    /// from one generation to the next: its operationId as written, else
    /// the name derived from its method and path. Metrics label requests
    /// with it and a phased operation's key records store it, so it does
    /// not follow [`Operation::name`]'s shortening.
    pub fn stable_name(&self) -> &str {
        self.operation_id.as_deref().unwrap_or(&self.name)
    }

    /// The effect the retry class follows: declared; else inferred from the
    /// operation's words when that makes a repeat *less* safe (a PUT that
    /// adds, a DELETE that refunds); else the method's default (`None` for
    /// an undeclared POST or PATCH). An inferred read is not taken here: it
    /// never makes a client retry what it would not retry otherwise.
    pub fn effect(&self) -> Option<Effect> {
        self.declared_effect.map(|e| e.value).or_else(|| {
            self.inferred_effect
                .as_ref()
                .filter(|i| !i.value.is_idempotent())
                .map(|i| i.value)
                .or_else(|| self.method.default_effect())
        })
    }

    /// The effect shown to people: declared, else inferred (a read too),
    /// else the method's default.
    pub fn shown_effect(&self) -> Option<Effect> {
        self.declared_effect
            .map(|e| e.value)
            .or_else(|| self.inferred_effect.as_ref().map(|i| i.value))
            .or_else(|| self.method.default_effect())
    }

    /// Where [`Operation::shown_effect`] comes from.
    pub fn effect_source(&self) -> FactSource {
        if self.declared_effect.is_some() {
            FactSource::Declared
        } else if self.inferred_effect.is_some() {
            FactSource::Inferred
        } else {
            FactSource::Method
        }
    }

    /// The evidence of an inferred effect that decided the retry class (a
    /// PUT or DELETE whose words say a repeat repeats).
    pub fn effect_evidence(&self) -> Option<&Evidence> {
        if self.declared_effect.is_some() {
            return None;
        }
        self.inferred_effect.as_ref().map(|i| &i.evidence)
    }

    /// A POST with no declared effect whose words read as a query: the
    /// evidence. It stays `unsafe` until `effect: read` is declared.
    pub fn undeclared_read(&self) -> Option<&Evidence> {
        if self.declared_effect.is_some() || self.key.requirement != KeyRequirement::None {
            return None;
        }
        self.inferred_effect
            .as_ref()
            .filter(|i| i.value == Effect::Read && self.method == Method::Post)
            .map(|i| &i.evidence)
    }

    /// Whether the operation changes server state.
    pub fn is_state_changing(&self) -> bool {
        self.effect() != Some(Effect::Read)
    }

    /// Whether repeating the operation is harmless without a key.
    pub fn is_idempotent(&self) -> bool {
        self.conditional || self.effect().is_some_and(Effect::is_idempotent)
    }

    pub fn response(&self, status: &str) -> Option<&Response> {
        self.responses.iter().find(|r| r.status == status)
    }
}

/// Where a fact about an operation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FactSource {
    /// idem's vocabulary, or another tool's extension read as an alias.
    Declared,
    /// The spec's own words.
    Inferred,
    /// RFC 9110's default for the method.
    Method,
}

impl FactSource {
    pub fn as_str(self) -> &'static str {
        match self {
            FactSource::Declared => "declared",
            FactSource::Inferred => "inferred",
            FactSource::Method => "method",
        }
    }
}

/// A call the API makes to its integrators (OpenAPI 3.1 `webhooks`); not
/// audited as an operation the API serves.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    pub name: String,
    pub method: Method,
    pub operation_id: Option<String>,
    pub pos: Pos,
}

/// The document-level facts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Root {
    pub idempotency: IdempotencyExt,
    pub retry: RetryExt,
    pub admission: crate::vocab::AdmissionExt,
    pub prose: Vec<Prose>,
}

/// Everything idem knows about an API.
#[derive(Debug)]
pub struct Model {
    pub document: Document,
    pub title: String,
    pub root: Root,
    pub operations: Vec<Operation>,
    pub webhooks: Vec<Webhook>,
    pub extension_errors: Vec<ExtensionError>,
    /// Every named schema the operations use, and every one under
    /// `components/schemas`.
    pub schemas: Schemas,
    pub security_schemes: Vec<SecurityScheme>,
    /// The document's `security`: scheme names of each alternative.
    pub security: Vec<Vec<String>>,
    /// `servers[*].url`, in order.
    pub servers: Vec<String>,
    pub description: Option<String>,
    /// Whether [`Selection::narrow`] left only some operations: generation
    /// then defines only the schemas those reach.
    pub narrowed: bool,
}

impl Model {
    /// The path of the first server's URL, without a trailing `/`: what
    /// every operation's path is appended to (`/v2` for
    /// `https://api.example.com/v2`); empty when the first server has
    /// none, names none, or templates it.
    pub fn base_path(&self) -> &str {
        let Some(url) = self.servers.first() else {
            return "";
        };
        let (_, path) = shape::server_parts(url);
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let path = path.trim_end_matches('/');
        if !path.starts_with('/') || path.contains(['{', '}']) {
            return "";
        }
        path
    }

    /// The security alternatives `op` requires: its own `security`, or the
    /// document's when it names none.
    pub fn security_of<'m>(&'m self, op: &'m Operation) -> &'m [Vec<String>] {
        op.security.as_deref().unwrap_or(&self.security)
    }

    /// The security scheme named `name` under `components/securitySchemes`.
    pub fn scheme(&self, name: &str) -> Option<&SecurityScheme> {
        self.security_schemes.iter().find(|s| s.name == name)
    }

    /// Where the root's `x-idempotency` settings resolve for one field, for
    /// diagnostics about the document as a whole.
    pub fn root_pos(&self) -> Pos {
        self.document.root().pos
    }
}

/// Why a model could not be built (beyond what the audit reports).
pub type ModelError = LoadError;

/// Read an `x-idempotency` and `x-retry` block pair from `node`.
pub(crate) fn read_extensions(
    node: &Node,
    level: Level,
    reader: &mut Reader<'_>,
) -> (IdempotencyExt, RetryExt) {
    let idem = node
        .get("x-idempotency")
        .map(|n| reader.idempotency(n, level))
        .unwrap_or_default();
    let retry = node
        .get("x-retry")
        .map(|n| reader.retry(n, level))
        .unwrap_or_default();
    (idem, retry)
}

/// `inner` where set, else `outer`.
pub(crate) fn merge_idempotency(outer: &IdempotencyExt, inner: IdempotencyExt) -> IdempotencyExt {
    IdempotencyExt {
        header: inner.header.or_else(|| outer.header.clone()),
        key_max_length: inner.key_max_length.or(outer.key_max_length),
        scope: inner.scope.or(outer.scope),
        replay_window: inner.replay_window.or(outer.replay_window),
        reaper_after: inner.reaper_after.or(outer.reaper_after),
        retry_horizon: inner.retry_horizon.or(outer.retry_horizon),
        failure_replay: inner.failure_replay.or(outer.failure_replay),
        in_flight: inner.in_flight.or(outer.in_flight),
        claim: inner.claim.or(outer.claim),
        lock_timeout: inner.lock_timeout.or(outer.lock_timeout),
        store_wait: inner.store_wait.or(outer.store_wait),
        resume: inner.resume.or(outer.resume),
        effect: inner.effect,
        key: inner.key,
        key_in: inner.key_in.or(outer.key_in),
        unsafe_retry: inner.unsafe_retry,
        phases: inner.phases,
        allow: outer.allow.iter().cloned().chain(inner.allow).collect(),
    }
}

pub(crate) fn merge_retry(outer: &RetryExt, inner: RetryExt) -> RetryExt {
    RetryExt {
        max_attempts: inner.max_attempts.or(outer.max_attempts),
        backoff: inner.backoff.or(outer.backoff),
        base: inner.base.or(outer.base),
        cap: inner.cap.or(outer.cap),
        deadline: inner.deadline.or(outer.deadline),
        p99: inner.p99.or(outer.p99),
        budget: inner.budget.or(outer.budget),
    }
}

pub fn key_settings(ext: &IdempotencyExt) -> KeySettings {
    KeySettings {
        header: ext.header.as_ref().map_or_else(
            || KeySettings::DEFAULT_HEADER.to_owned(),
            |h| h.value.clone(),
        ),
        key_max_length: ext.key_max_length.map_or(255, |l| l.value),
        scope: ext.scope.map_or(Scope::Account, |s| s.value),
        replay_window: ext
            .replay_window
            .map_or(KeySettings::DEFAULT_REPLAY_WINDOW, |d| d.value),
        reaper_after: ext
            .reaper_after
            .map_or(KeySettings::DEFAULT_REAPER_AFTER, |d| d.value),
        retry_horizon: ext.retry_horizon.map(|d| d.value),
        failure_replay: ext.failure_replay.map(|f| f.value),
        in_flight: ext.in_flight.map_or(InFlight::Conflict, |f| f.value),
        claim: ext.claim.map_or(ClaimAt::Start, |c| c.value),
        lock_timeout: ext
            .lock_timeout
            .map_or(KeySettings::DEFAULT_LOCK_TIMEOUT, |d| d.value),
        store_wait: ext
            .store_wait
            .map_or(KeySettings::DEFAULT_STORE_WAIT, |d| d.value),
        resume: ext.resume.map(|r| r.value).unwrap_or_default(),
    }
}

pub(crate) fn retry_policy(ext: &RetryExt) -> RetryPolicy {
    let d = RetryPolicy::default();
    RetryPolicy {
        max_attempts: ext.max_attempts.map_or(d.max_attempts, |v| v.value),
        backoff: ext.backoff.map_or(d.backoff, |v| v.value),
        base: ext.base.map_or(d.base, |v| v.value),
        cap: ext.cap.map_or(d.cap, |v| v.value),
        deadline: ext.deadline.map_or(d.deadline, |v| v.value),
        p99: ext.p99.map(|v| v.value),
        budget: ext.budget.map_or(d.budget, |v| v.value),
    }
}

/// The key's name when it travels in the body.
pub const BODY_KEY_FIELD: &str = "idempotency_key";

/// Top-level request-body field names that carry a key: Square and Plaid
/// (`idempotency_key`), JavaScript-style APIs (`idempotencyKey`), Twilio
/// (`IdempotencyKey`). Matched exactly: a field named `key` is not a key.
pub const BODY_KEY_FIELDS: &[&str] = &[BODY_KEY_FIELD, "idempotencyKey", "IdempotencyKey"];

/// Header names real APIs use for the key, matched case-insensitively: the
/// IETF draft's `Idempotency-Key` (Stripe, Adyen, Xero, Dwolla, Lob,
/// Resend), Mercado Pago's `X-Idempotency-Key`, PayPal's `PayPal-Request-Id`
/// and Azure's `Repeatability-Request-ID` (OASIS Repeatable Requests).
/// Vendor-prefixed names ending in `-Idempotency-Key` or `-Idempotence-Key`
/// count too ([`is_common_key_header`]). Trace ids (`X-Request-Id`,
/// `X-Correlation-Id`) do not: a server does not deduplicate by them.
pub const COMMON_KEY_HEADERS: &[&str] = &[
    "Idempotency-Key",
    "X-Idempotency-Key",
    "PayPal-Request-Id",
    "Repeatability-Request-ID",
];

/// Whether `name` is a header real APIs carry the key in: one of
/// [`COMMON_KEY_HEADERS`], or a vendor-prefixed `…-Idempotency-Key` /
/// `…-Idempotence-Key` (Klarna's `Klarna-Idempotency-Key`, Qonto's
/// `X-Qonto-Idempotency-Key`, Chargebee's `chargebee-idempotency-key`,
/// Worldline's `X-GCS-Idempotence-Key`).
pub fn is_common_key_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    COMMON_KEY_HEADERS
        .iter()
        .any(|h| h.eq_ignore_ascii_case(&lower))
        || lower.ends_with("-idempotency-key")
        || lower.ends_with("-idempotence-key")
}
