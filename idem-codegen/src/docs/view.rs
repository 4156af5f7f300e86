//! The one view both templates render: every fact the page states, taken
//! from the model (and, for what the server sends, from
//! `idem_runtime::protocol`), as plain values. Spec text is cleaned here
//! and escaped by each template's escaper; no sentence of the page lives in
//! this file.

use std::time::Duration;

use idem_runtime::protocol;

use super::schedule::{self, Schedule};
use super::text;
use crate::model::shape::{self, sample::is_json};
use crate::model::{self, KeySource, Model, Operation, RetryClass, RetryPolicy};
use crate::vocab::{
    Backoff, ClaimAt, FailureReplay, InFlight, KeyRequirement, Scope, format_duration,
};

/// A setting's duration, two ways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// In words: `24 hours`.
    pub words: String,
    /// In seconds, with separators: `86,400`.
    pub seconds: String,
}

impl Span {
    fn of(d: Duration) -> Self {
        Span {
            words: text::duration_words(d),
            seconds: text::thousands(u128::from(d.as_secs())),
        }
    }
}

/// A setting an operation sets differently from the API as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// The vocabulary's field name, e.g. `replay-window`.
    pub setting: &'static str,
    /// Its value on this operation, as the vocabulary writes it.
    pub value: String,
}

/// One endpoint as the page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Fragment id, unique on the page.
    pub anchor: String,
    pub method: &'static str,
    pub path: String,
    /// `operationId`, or the name derived from method and path.
    pub operation: String,
    pub summary: Option<String>,
    /// The retry class (`safe`, `keyed`, `unsafe-documented`, `unsafe`).
    pub class: &'static str,
    /// Keyed: whether a request without a key is refused.
    pub key_required: bool,
    /// Keyed: the key travels in a body field rather than a header.
    pub key_in_body: bool,
    /// Keyed: the key travels in a query parameter (Google's `requestId`).
    pub key_in_query: bool,
    /// Keyed: the header or body field that carries the key.
    pub key_name: String,
    /// Unsafe: the spec's `unsafe-retry` warning (class `unsafe-documented`).
    pub warning: Option<String>,
    /// A PUT or DELETE whose own words say a repeat repeats: the words.
    pub inferred: Option<String>,
    /// Measured p99 latency and the per-attempt timeout it gives, where the
    /// operation declares its own.
    pub p99: Option<String>,
    pub attempt_timeout: Option<String>,
    /// Settings that differ from the API-wide ones.
    pub overrides: Vec<Override>,
}

/// One attempt of the worked schedule, formatted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepView {
    pub attempt: u32,
    pub first: bool,
    pub wait_min: String,
    pub wait_max: String,
    pub starts_by: String,
    pub timeout: String,
    pub ends_by: String,
}

/// The retry policy and its worked schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryView {
    pub max_attempts: u32,
    pub retries: u32,
    pub full_jitter: bool,
    pub base: String,
    pub cap: String,
    pub deadline: String,
    /// The API-wide measured p99 and its per-attempt timeout, when declared.
    pub p99: Option<String>,
    pub attempt_timeout: Option<String>,
    pub p99_factor: u32,
    pub steps: Vec<StepView>,
    pub cut_by_deadline: u32,
    pub total_wait_max: String,
    pub worst_case_end: String,
    pub budget_capacity: u32,
    pub budget_transient_cost: u32,
    pub budget_throttle_cost: u32,
    pub budget_refund: u32,
    /// Retries a full bucket pays for; `None` when that kind is free.
    pub budget_transient_retries: Option<u32>,
    pub budget_throttle_retries: Option<u32>,
    pub retryable_statuses: Vec<u16>,
    /// The retryable statuses other than 429 (gateway and availability).
    pub gateway_statuses: Vec<u16>,
    pub server_error_retries: u32,
}

/// The exact bodies the server sends, from `idem_runtime::protocol`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wire {
    pub in_use_code: &'static str,
    pub in_use_status: u16,
    pub in_use_body: String,
    pub reused_code: &'static str,
    /// 409, or 422 where the spec documents the mismatch as 422.
    pub reused_status: u16,
    pub reused_body: String,
    pub in_flight_code: &'static str,
    pub in_flight_status: u16,
    pub in_flight_body: String,
    pub status_url: String,
    pub missing_code: &'static str,
    pub missing_status: u16,
    /// The missing-key body for the API's header (`None` when no keyed
    /// operation takes its key in a header).
    pub missing_body: Option<String>,
    pub invalid_code: &'static str,
    pub invalid_status: u16,
    pub retry_after_secs: u64,
    pub replayed_header: String,
    pub replayed_value: &'static str,
    pub key_min_byte: String,
    pub key_max_byte: String,
    /// The protocol's other refusals, from `idem_runtime::protocol`.
    pub refusals: Vec<RefusalRow>,
}

/// One refusal a keyed request can meet besides the key conflicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalRow {
    pub situation: &'static str,
    pub status: u16,
    pub code: &'static str,
    pub action: &'static str,
}

/// A keyed operation that calls other systems (`phases`), and how the
/// server keeps trying when one of them fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resumed {
    pub endpoint: Endpoint,
    /// Its phases, in order.
    pub phases: Vec<String>,
    /// Runs the request may have, the first included.
    pub max_attempts: u32,
    /// The first wait's ceiling and the cap the doubling stops at.
    pub base: String,
    pub cap: String,
    /// Age past which no run starts.
    pub give_up_after: Span,
}

/// What the server answers while it resumes a request, and when it stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeWire {
    pub incomplete_code: &'static str,
    pub incomplete_status: u16,
    pub exhausted_code: &'static str,
    pub exhausted_status: u16,
    pub exhausted_body: String,
    pub unavailable_code: &'static str,
    pub unavailable_status: u16,
}

/// The code example: the most representative keyed operation (a keyed
/// create with a JSON body, before any other; else the first safe
/// operation), with its effective retry policy, its URL from the spec's
/// first server and its parameters and body from the spec's examples or
/// schemas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    pub method: &'static str,
    pub path: String,
    /// The request target: the server's base path and the path, its
    /// parameters filled in.
    pub target: String,
    /// The server's host, or `api.example.com` when the spec names none.
    pub host: String,
    /// The whole URL, or the base the caller must put in front of the path.
    pub url: String,
    /// Whether the spec names an absolute server URL.
    pub has_server: bool,
    /// The JSON body sent, compact, the key included when it travels there.
    pub body: Option<String>,
    /// The same body as a Python literal.
    pub py_body: Option<String>,
    pub keyed: bool,
    pub key_in_body: bool,
    pub key_name: String,
    /// The credential the operation's security scheme asks for, as a
    /// header with a placeholder the reader replaces.
    pub credential: Option<CredentialHeader>,
    pub max_attempts: u32,
    pub base_secs: String,
    pub cap_secs: String,
    pub deadline_secs: String,
    pub timeout_secs: String,
    pub full_jitter: bool,
}

/// A credential header in the examples: `Authorization: Bearer $API_TOKEN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialHeader {
    pub name: String,
    /// As raw HTTP shows it, the placeholder a shell variable.
    pub value: String,
    /// As a Python expression reading the environment variable.
    pub python: String,
}

/// The page, as values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocsView {
    /// The API's title (`info.title`), or empty.
    pub title: String,
    pub header: String,
    pub key_max_length: u32,
    /// The body field, when some keyed operation takes its key in the body.
    pub body_field: Option<String>,
    pub example_key: String,
    pub scope_account: bool,
    /// Neither: `scope: global`, stated as a warning.
    pub scope_credential: bool,
    pub replay_window: Span,
    /// Some keyed endpoint has a replay window of its own.
    pub replay_window_overridden: bool,
    pub reaper_after: Span,
    pub retry_horizon: Option<Span>,
    /// Neither: the spec leaves `failure-replay` undecided.
    pub failure_verbatim: bool,
    pub failure_reattempt: bool,
    /// In-flight modes used by the keyed operations (the API-wide one
    /// when none is keyed).
    pub in_flight_conflict: bool,
    pub in_flight_wait: bool,
    pub in_flight_accepted: bool,
    /// Operations whose key is claimed at commit (`claim: commit`): a
    /// duplicate waits for the replay rather than being refused, as
    /// `METHOD path`.
    pub commit_claimed: Vec<String>,
    pub wire: Wire,
    pub keyed: Vec<Endpoint>,
    pub unsafe_endpoints: Vec<Endpoint>,
    /// Unsafe endpoints without a warning (class `unsafe`), counted.
    pub undocumented_unsafe: usize,
    /// Keyed endpoints whose key is optional, counted: sent without one,
    /// they are unsafe to retry.
    pub optional_keys: usize,
    pub safe: Vec<Endpoint>,
    /// Operations whose own p99 differs from the API-wide one.
    pub timeouts: Vec<Endpoint>,
    /// Requests the server admits at once, API-wide.
    pub max_in_flight: usize,
    /// How long a request waits for the server's database before its 503
    /// (`store-wait`), in words.
    pub store_wait: String,
    /// Operations with an admission limit of their own: endpoint and limit.
    pub admission: Vec<(Endpoint, u32)>,
    /// List operations that page, and how the next page is asked for.
    pub paged: Vec<(Endpoint, String)>,
    /// Operations whose answer can stream as server-sent events.
    pub streamed: Vec<Endpoint>,
    pub retry: RetryView,
    /// Keyed operations with phases.
    pub resumed: Vec<Resumed>,
    pub resume_wire: ResumeWire,
    pub example: Option<Example>,
    /// Where the spec's own error schema for the key conflict lacks fields
    /// the protocol's refusals carry: which, said once.
    pub error_body_note: Option<String>,
    /// Whether the table of contents lists endpoints open (small APIs).
    pub toc_open: bool,
}

impl DocsView {
    /// Everything the page says about `model`.
    pub fn new(model: &Model) -> Self {
        let root = model::key_settings(&model.root.idempotency);
        let root_retry = model::retry_policy(&model.root.retry);
        let mut ops: Vec<&Operation> = model.operations.iter().collect();
        ops.sort_by(|a, b| (&a.path, a.method.as_str()).cmp(&(&b.path, b.method.as_str())));
        let mut anchors: Vec<String> = ops.iter().map(|o| text::anchor(&o.name)).collect();
        text::unique_anchors(&mut anchors);

        let mut keyed = Vec::new();
        let mut unsafe_endpoints = Vec::new();
        let mut safe = Vec::new();
        let mut timeouts = Vec::new();
        let mut admission = Vec::new();
        let (mut paged, mut streamed) = (Vec::new(), Vec::new());
        for (op, anchor) in ops.iter().zip(anchors) {
            let endpoint = endpoint(model, op, anchor, &root, &root_retry);
            if crate::model::shape::streams_events(op) {
                streamed.push(endpoint.clone());
            } else if let Ok(Some(paging)) = crate::model::shape::paging::recognise(model, op) {
                paged.push((endpoint.clone(), paging.describe()));
            }
            if endpoint.p99.is_some() {
                timeouts.push(endpoint.clone());
            }
            if let Some(max) = &op.admission.max_in_flight {
                admission.push((endpoint.clone(), max.value));
            }
            match op.class {
                RetryClass::Keyed => keyed.push(endpoint),
                RetryClass::UnsafeDocumented | RetryClass::Unsafe => {
                    unsafe_endpoints.push(endpoint);
                }
                RetryClass::Safe => safe.push(endpoint),
            }
        }
        let keyed_ops: Vec<&&Operation> = ops
            .iter()
            .filter(|o| o.class == RetryClass::Keyed)
            .collect();
        // Operations claimed at commit have their own section.
        let at_commit = |o: &Operation| o.settings.claim == ClaimAt::Commit && o.phases.is_none();
        let mode_used = |mode: fn(InFlight) -> bool| {
            if keyed_ops.is_empty() {
                mode(root.in_flight)
            } else {
                keyed_ops
                    .iter()
                    .any(|o| !at_commit(o) && mode(o.settings.in_flight))
            }
        };
        let body_field = keyed_ops.iter().find_map(|o| match &o.key.source {
            Some(KeySource::Body { field }) => Some(text::clean(field)),
            _ => None,
        });
        let header_keys = keyed_ops.is_empty()
            || keyed_ops
                .iter()
                .any(|o| matches!(o.key.source, Some(KeySource::Header { .. })));
        let header = text::clean(&root.header);
        let failure = root.failure_replay;
        // The operation the page's examples call, and the key they send.
        let shown = representative(&ops)
            .or_else(|| ops.iter().find(|o| o.class == RetryClass::Safe).copied());
        let key = shown.map_or_else(|| "request-1001".to_owned(), example_key);
        DocsView {
            title: text::clean(&model.title),
            key_max_length: root.key_max_length,
            body_field,
            example_key: text::clean(&key),
            scope_account: root.scope == Scope::Account,
            scope_credential: root.scope == Scope::Credential,
            replay_window: Span::of(root.replay_window),
            replay_window_overridden: keyed_ops
                .iter()
                .any(|o| o.settings.replay_window != root.replay_window),
            reaper_after: Span::of(root.reaper_after),
            retry_horizon: root.retry_horizon.map(Span::of),
            failure_verbatim: failure == Some(FailureReplay::Verbatim),
            failure_reattempt: failure == Some(FailureReplay::Reattempt),
            in_flight_conflict: mode_used(|m| m == InFlight::Conflict),
            in_flight_wait: mode_used(|m| m == InFlight::Wait),
            in_flight_accepted: mode_used(|m| m == InFlight::Accepted),
            commit_claimed: keyed_ops
                .iter()
                .filter(|o| at_commit(o))
                .map(|o| text::clean(&format!("{} {}", o.method, o.path)))
                .collect(),
            wire: wire(&header, &key, header_keys, mismatch_status(&keyed_ops)),
            undocumented_unsafe: ops.iter().filter(|o| o.class == RetryClass::Unsafe).count(),
            optional_keys: keyed.iter().filter(|e| !e.key_required).count(),
            toc_open: ops.len() <= 40,
            error_body_note: error_body_note(model, &keyed_ops),
            example: shown.map(|o| example(model, o, &key)),
            header,
            keyed,
            unsafe_endpoints,
            safe,
            timeouts,
            max_in_flight: model
                .root
                .admission
                .max_in_flight
                .as_ref()
                .map_or(idem_runtime::protocol::DEFAULT_MAX_IN_FLIGHT, |m| {
                    m.value as usize
                }),
            admission,
            paged,
            streamed,
            store_wait: text::duration_words(root.store_wait),
            retry: retry_view(&root_retry),
            resumed: keyed_ops
                .iter()
                .filter(|o| o.phases.as_ref().is_some_and(|p| !p.value.is_empty()))
                .map(|o| resumed(model, o, &root, &root_retry))
                .collect(),
            resume_wire: ResumeWire {
                incomplete_code: protocol::INCOMPLETE.code,
                incomplete_status: protocol::INCOMPLETE.status,
                exhausted_code: protocol::KEY_EXHAUSTED.code,
                exhausted_status: protocol::KEY_EXHAUSTED.status,
                exhausted_body: protocol::KEY_EXHAUSTED.body(),
                unavailable_code: protocol::UNAVAILABLE.code,
                unavailable_status: protocol::UNAVAILABLE.status,
            },
        }
    }
}

fn resumed(
    model: &Model,
    op: &Operation,
    root: &model::KeySettings,
    retry: &RetryPolicy,
) -> Resumed {
    let r = &op.settings.resume;
    Resumed {
        endpoint: endpoint(model, op, text::anchor(&op.name), root, retry),
        phases: op
            .phases
            .as_ref()
            .map(|p| p.value.iter().map(|s| text::clean(s)).collect())
            .unwrap_or_default(),
        max_attempts: r.max_attempts,
        base: text::duration_words(r.base),
        cap: text::duration_words(r.cap),
        give_up_after: Span::of(r.give_up_after),
    }
}

/// Whether the key travels in the body, and the header or field name.
fn key_carrier(op: &Operation) -> (bool, String) {
    match &op.key.source {
        Some(KeySource::Body { field }) => (true, text::clean(field)),
        Some(KeySource::Header { name, .. } | KeySource::Query { name, .. }) => {
            (false, text::clean(name))
        }
        None => (false, String::new()),
    }
}

/// `base`: the first server's path, which every path the page shows
/// starts with, as the client calls it and the router serves it.
fn endpoint(
    model: &Model,
    op: &Operation,
    anchor: String,
    root: &model::KeySettings,
    root_retry: &RetryPolicy,
) -> Endpoint {
    let (key_in_body, key_name) = key_carrier(op);
    let own_p99 = op.retry.p99.filter(|p| Some(*p) != root_retry.p99);
    Endpoint {
        anchor,
        method: op.method.as_str(),
        path: text::clean(&shape::full_path(model, op)),
        operation: text::clean(&op.name),
        summary: op
            .summary
            .as_deref()
            .map(text::clean)
            .filter(|s| !s.is_empty()),
        class: op.class.as_str(),
        key_required: op.key.requirement == KeyRequirement::Required,
        key_in_body,
        key_in_query: matches!(op.key.source, Some(KeySource::Query { .. })),
        key_name,
        warning: op.unsafe_retry.as_ref().map(|w| text::clean(&w.value)),
        inferred: op
            .effect_evidence()
            .filter(|_| op.method.default_effect().is_some() && !op.is_idempotent())
            .map(|e| text::clean(&format!("its {} says \u{201c}{}\u{201d}", e.field, e.words))),
        p99: own_p99.map(text::duration_short),
        attempt_timeout: own_p99
            .map(|p| text::duration_short(p.saturating_mul(protocol::P99_TIMEOUT_FACTOR))),
        overrides: if op.class == RetryClass::Keyed {
            overrides(op, root, root_retry)
        } else {
            Vec::new()
        },
    }
}

/// What a keyed operation sets differently from the API, in the order the
/// page discusses them.
fn overrides(op: &Operation, root: &model::KeySettings, retry: &RetryPolicy) -> Vec<Override> {
    let s = &op.settings;
    let r = &op.retry;
    let mut out = Vec::new();
    let mut push = |differs: bool, setting: &'static str, value: String| {
        if differs {
            out.push(Override { setting, value });
        }
    };
    push(
        s.key_max_length != root.key_max_length,
        "key-max-length",
        s.key_max_length.to_string(),
    );
    push(s.scope != root.scope, "scope", s.scope.to_string());
    push(
        s.replay_window != root.replay_window,
        "replay-window",
        format_duration(s.replay_window),
    );
    push(
        s.failure_replay != root.failure_replay,
        "failure-replay",
        s.failure_replay
            .map_or_else(|| "undecided".to_owned(), |f| f.to_string()),
    );
    push(
        s.in_flight != root.in_flight,
        "in-flight",
        s.in_flight.to_string(),
    );
    push(
        r.max_attempts != retry.max_attempts,
        "max-attempts",
        r.max_attempts.to_string(),
    );
    push(r.backoff != retry.backoff, "backoff", r.backoff.to_string());
    push(r.base != retry.base, "base", format_duration(r.base));
    push(r.cap != retry.cap, "cap", format_duration(r.cap));
    push(
        r.deadline != retry.deadline,
        "deadline",
        format_duration(r.deadline),
    );
    out
}

/// The payload-mismatch status: 422 where a keyed operation documents a
/// `422` and none documents the mismatch as a `409`, else the protocol's
/// default. The vocabulary has no field for it; the audit's
/// `missing-conflict-responses` reads the responses the same way.
fn mismatch_status(keyed: &[&&Operation]) -> u16 {
    let documents_422 = keyed.iter().any(|o| o.response("422").is_some());
    let mismatch_409 = keyed.iter().any(|o| {
        o.response("409")
            .is_some_and(|r| r.text.contains(protocol::KEY_REUSED.code))
    });
    if documents_422 && !mismatch_409 {
        protocol::KEY_REUSED_UNPROCESSABLE_STATUS
    } else {
        protocol::KEY_REUSED.status
    }
}

fn wire(header: &str, key: &str, header_keys: bool, reused_status: u16) -> Wire {
    let status_url = format!("{}/{key}", protocol::DEFAULT_STATUS_PREFIX);
    let byte = |b: u8| format!("0x{b:02X}");
    Wire {
        in_use_code: protocol::KEY_IN_USE.code,
        in_use_status: protocol::KEY_IN_USE.status,
        in_use_body: protocol::KEY_IN_USE.body(),
        reused_code: protocol::KEY_REUSED.code,
        reused_status,
        reused_body: protocol::KEY_REUSED.body(),
        in_flight_code: protocol::KEY_IN_FLIGHT.code,
        in_flight_status: protocol::KEY_IN_FLIGHT.status,
        in_flight_body: protocol::accepted_body(&status_url, None),
        status_url,
        missing_code: protocol::KEY_MISSING.code,
        missing_status: protocol::KEY_MISSING.status,
        missing_body: header_keys
            .then(|| protocol::KEY_MISSING.body_with(&protocol::key_missing_message(header))),
        invalid_code: protocol::KEY_INVALID.code,
        invalid_status: protocol::KEY_INVALID.status,
        retry_after_secs: protocol::IN_FLIGHT_RETRY_AFTER_SECS,
        replayed_header: text::header_case(protocol::IDEMPOTENT_REPLAYED),
        replayed_value: protocol::IDEMPOTENT_REPLAYED_VALUE,
        key_min_byte: byte(*protocol::KEY_BYTES.start()),
        key_max_byte: byte(*protocol::KEY_BYTES.end()),
        refusals: refusals(),
    }
}

/// The refusals every keyed request can meet, each as the server sends it.
fn refusals() -> Vec<RefusalRow> {
    let row = |situation, refusal: protocol::Refusal, action| RefusalRow {
        situation,
        status: refusal.status,
        code: refusal.code,
        action,
    };
    vec![
        row(
            "A parameter or body field breaks the API's schema (the body's `field` names it)",
            protocol::INVALID_REQUEST,
            "fix the field; the same key may be reused",
        ),
        row(
            "The body is in a media type the endpoint does not accept, or has no `Content-Type`",
            protocol::UNSUPPORTED_MEDIA_TYPE,
            "send one of the types the message lists",
        ),
        row(
            "The body is over the server's limit",
            protocol::BODY_TOO_LARGE,
            "send less",
        ),
        row(
            "The caller could not be identified",
            protocol::SCOPE_MISSING,
            "authenticate",
        ),
        row(
            "The caller's identity is empty, too long or not visible ASCII",
            protocol::SCOPE_INVALID,
            "fix the credentials",
        ),
        row(
            "The server is at its limit of requests in flight",
            protocol::OVERLOADED,
            "wait `Retry-After`, then send the same request with the same key",
        ),
        row(
            "Your deadline (`Idem-Timeout-Ms`) passed before the answer",
            protocol::DEADLINE_EXCEEDED,
            "send the same request with the same key to learn the outcome",
        ),
    ]
}

/// The keyed operation an integrator most likely calls first: a POST that
/// creates from a JSON body, then any POST, then the rest; the first of
/// equals in the page's order.
fn representative<'o>(ops: &[&'o Operation]) -> Option<&'o Operation> {
    let score = |o: &Operation| {
        let json_body = o
            .request_body
            .as_ref()
            .is_some_and(|b| b.media.iter().any(|m| is_json(&m.media_type)));
        (
            o.method == model::Method::Post,
            // Declared: a POST the words say starts a job is no better an
            // example than one that says nothing.
            o.declared_effect.map(|e| e.value) == Some(crate::vocab::Effect::Create),
            json_body,
        )
    };
    ops.iter()
        .filter(|o| o.class == RetryClass::Keyed)
        .enumerate()
        .max_by_key(|(i, o)| (score(o), std::cmp::Reverse(*i)))
        .map(|(_, o)| *o)
}

/// When the JSON body the keyed operations declare for their `409` is an
/// object without some of the refusal body's fields, a sentence naming
/// them, so the page never claims more of the spec's schema than it says.
fn error_body_note(model: &Model, keyed: &[&&Operation]) -> Option<String> {
    use crate::model::schema::Kind;
    let schema = keyed.iter().find_map(|op| {
        op.response("409")?
            .media
            .iter()
            .find(|m| is_json(&m.media_type))?
            .schema
            .as_ref()
    })?;
    let name = match &schema.kind {
        Kind::Ref(id) => model.schemas.get(*id).map(|n| text::clean(&n.name)),
        _ => None,
    };
    let Kind::Object(object) = &model.schemas.resolve(schema).kind else {
        return None;
    };
    let fields = |names: Vec<&str>| {
        let quoted: Vec<String> = names
            .iter()
            .map(|n| format!("`{}`", text::clean(n)))
            .collect();
        match quoted.as_slice() {
            [] => "no fields".to_owned(),
            [one] => one.clone(),
            [init @ .., last] => format!("{} and {last}", init.join(", ")),
        }
    };
    let declared: Vec<&str> = object.properties.iter().map(|p| p.name.as_str()).collect();
    let missing: Vec<&str> = ["code", "message", "retryable"]
        .into_iter()
        .filter(|f| !declared.contains(f))
        .collect();
    if missing.is_empty() || declared.len() > 12 {
        return None;
    }
    let what = name.map_or_else(
        || "The body the spec declares for its `409`".to_owned(),
        |n| format!("The spec's `{n}` schema, the body of its `409`,"),
    );
    Some(format!(
        "{what} declares {}; these refusals carry {} as well.",
        fields(declared),
        fields(missing)
    ))
}

/// A body for the page, as an integrator would write it: the spec's own
/// example or default where it shows one, field by field; elsewhere a
/// plausible value for the field's format and name (an address for an
/// email, dates that follow one another) rather than the probe's smallest
/// valid instance. The required fields of an object only.
fn sample(
    schemas: &model::Schemas,
    schema: &model::Schema,
    field: Option<&str>,
    dates: &mut u32,
    depth: usize,
) -> Option<serde_json::Value> {
    use crate::model::schema::{Kind, StringFormat};
    if let Some(example) = &schema.example {
        return Some((**example).clone());
    }
    let schema = schemas.resolve(schema);
    if let Some(shown) = schema.example.as_deref().or(schema.default.as_ref()) {
        return Some(shown.clone());
    }
    let constrained = schema.constraints.as_ref().is_some_and(|c| {
        c.pattern.is_some() || c.max_length.is_some_and(|m| m < 24) || c.min_length.is_some()
    });
    match &schema.kind {
        Kind::Object(object) if depth < 8 => {
            let mut out = serde_json::Map::new();
            for p in object
                .properties
                .iter()
                .filter(|p| p.required && !p.schema.read_only)
            {
                let value = sample(schemas, &p.schema, Some(&p.name), dates, depth + 1)?;
                out.insert(p.name.clone(), value);
            }
            Some(serde_json::Value::Object(out))
        }
        Kind::Array(items) if depth < 8 => {
            let item = sample(schemas, items, field, dates, depth + 1)?;
            Some(serde_json::Value::Array(vec![item]))
        }
        Kind::String(StringFormat::Date) => {
            *dates += 1;
            Some(serde_json::Value::String(format!(
                "2026-03-{:02}",
                11 + 3 * *dates
            )))
        }
        Kind::String(StringFormat::DateTime) => {
            *dates += 1;
            Some(serde_json::Value::String(format!(
                "2026-03-{:02}T15:00:00Z",
                11 + 3 * *dates
            )))
        }
        Kind::String(StringFormat::Uuid) => Some(serde_json::Value::String(
            "3f2c9a5e-7b1d-4c8e-9a21-6d5f0b8e4c17".to_owned(),
        )),
        Kind::String(StringFormat::Plain) if !constrained => {
            Some(serde_json::Value::String(plausible(field.unwrap_or(""))))
        }
        Kind::Integer(_) if schema.constraints.is_none() => Some(serde_json::Value::from(
            if field.is_some_and(|f| {
                let f = f.to_ascii_lowercase();
                f.contains("amount") || f.contains("price") || f.contains("total")
            }) {
                1200
            } else {
                2
            },
        )),
        _ => crate::model::shape::sample::instance(schemas, schema, depth).ok(),
    }
}

/// A JSON value as a Python literal.
fn python_literal(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => text::python_string(s),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(python_literal)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", text::python_string(k), python_literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The credential an operation's first security alternative asks for in
/// a header (a query-parameter key is left out: it is shown in the URL).
fn credential_header(model: &Model, op: &Operation) -> Option<CredentialHeader> {
    use crate::model::SecurityKind;
    let scheme = model
        .security_of(op)
        .iter()
        .flatten()
        .find_map(|name| model.scheme(name))?;
    let env = |var: &str| format!("os.environ[{}]", text::python_string(var));
    let (name, value, python) = match &scheme.kind {
        SecurityKind::Bearer => (
            "Authorization".to_owned(),
            "Bearer $API_TOKEN".to_owned(),
            format!("\"Bearer \" + {}", env("API_TOKEN")),
        ),
        SecurityKind::Basic => (
            "Authorization".to_owned(),
            "Basic $API_CREDENTIALS".to_owned(),
            format!("\"Basic \" + {}", env("API_CREDENTIALS")),
        ),
        SecurityKind::ApiKey {
            location,
            parameter,
        } if location == "header" => (
            text::clean(parameter),
            "$API_KEY".to_owned(),
            env("API_KEY"),
        ),
        SecurityKind::ApiKey {
            location,
            parameter,
        } if location == "cookie" => (
            "Cookie".to_owned(),
            format!("{}=$API_KEY", text::clean(parameter)),
            format!(
                "{} + {}",
                text::python_string(&format!("{parameter}=")),
                env("API_KEY")
            ),
        ),
        _ => return None,
    };
    Some(CredentialHeader {
        name,
        value,
        python,
    })
}

/// A string a person would put in a field called `field`.
fn plausible(field: &str) -> String {
    let name = field.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| name.contains(w));
    if has(&["email", "e_mail", "mail"]) {
        "guest@example.com".to_owned()
    } else if has(&["url", "uri", "link", "website", "href"]) {
        "https://example.com/".to_owned()
    } else if has(&["phone", "mobile"]) {
        "+1 555 0100".to_owned()
    } else if has(&["currency"]) {
        "usd".to_owned()
    } else if has(&["country"]) {
        "US".to_owned()
    } else if has(&["first_name", "firstname", "given"]) {
        "Ada".to_owned()
    } else if has(&["last_name", "lastname", "family", "surname"]) {
        "Lovelace".to_owned()
    } else if has(&["name"]) {
        "Ada Lovelace".to_owned()
    } else if has(&[
        "description",
        "note",
        "comment",
        "message",
        "reason",
        "memo",
        "text",
        "prompt",
        "content",
        "title",
        "summary",
        "query",
    ]) {
        "Example text".to_owned()
    } else if name.is_empty() {
        "example".to_owned()
    } else {
        // An identifier-like field: `room`, `room_id`, `roomId` → `room-1001`.
        let base = field
            .strip_suffix("_id")
            .or_else(|| field.strip_suffix("Id"))
            .or_else(|| field.eq_ignore_ascii_case("id").then_some(""))
            .unwrap_or(field)
            .to_ascii_lowercase();
        let word: String = base
            .trim_end_matches(['_', '-'])
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        if word.is_empty() {
            "1001".to_owned()
        } else {
            format!("{word}-1001")
        }
    }
}

/// The idempotency key the page's examples send, from the operation:
/// `createReservation` → `reservation-1001-create`.
fn example_key(op: &Operation) -> String {
    let snake = heck::ToSnakeCase::to_snake_case(op.name.as_str());
    let words: Vec<&str> = snake
        .split('_')
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    match words.split_first() {
        Some((verb, noun)) if !noun.is_empty() => format!("{}-1001-{verb}", noun.join("-")),
        Some((only, _)) => format!("{only}-1001"),
        None => "request-1001".to_owned(),
    }
}

fn example(model: &Model, op: &Operation, key: &str) -> Example {
    let (key_in_body, key_name) = key_carrier(op);
    let policy = &op.retry;
    let timeout = schedule::attempt_timeout(policy.p99, policy.deadline, policy.max_attempts);
    let request = crate::model::shape::sample::request(model, op, None, &[]).ok();
    let mut filled = request
        .as_ref()
        .map_or_else(|| op.path.clone(), |r| r.path.clone());
    if let Some(r) = request.as_ref().filter(|r| !r.query.is_empty()) {
        let query: Vec<String> = r.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        filled = format!("{filled}?{}", query.join("&"));
    }
    let server = shape::server_host(model);
    let host = server
        .clone()
        .unwrap_or_else(|| "api.example.com".to_owned());
    let base = model.base_path();
    let mut body = request.and_then(|r| r.json);
    if body.is_some()
        && let Some(schema) = op
            .request_body
            .as_ref()
            .and_then(|b| b.media.iter().find(|m| is_json(&m.media_type)))
            .and_then(|m| m.schema.as_ref())
        && let Some(shown) = sample(&model.schemas, schema, None, &mut 0, 0)
    {
        body = Some(shown);
    }
    if key_in_body && let Some(serde_json::Value::Object(map)) = body.as_mut() {
        map.insert(key_name.clone(), serde_json::Value::String(key.to_owned()));
    }
    // Spec text inside a code block: one line, and nothing that could close it.
    let body = body.filter(|b| {
        let text = b.to_string();
        text.len() <= 400 && !text.contains('`') && !text.contains('<')
    });
    Example {
        method: op.method.as_str(),
        path: text::clean(&op.path),
        target: text::clean(&format!("{base}{filled}")),
        url: text::clean(&format!("https://{host}{base}{filled}")),
        host: text::clean(&host),
        has_server: server.is_some(),
        py_body: body.as_ref().map(python_literal),
        body: body.map(|b| b.to_string()),
        keyed: op.class == RetryClass::Keyed,
        key_in_body,
        key_name,
        credential: credential_header(model, op),
        max_attempts: policy.max_attempts,
        base_secs: secs(policy.base),
        cap_secs: secs(policy.cap),
        deadline_secs: secs(policy.deadline),
        timeout_secs: secs(timeout),
        full_jitter: policy.backoff == Backoff::FullJitter,
    }
}

/// Seconds as a plain decimal for code: `0.1`, `10`, `2.4`.
fn secs(d: Duration) -> String {
    let ms = d.as_millis();
    let whole = ms / 1_000;
    match ms % 1_000 {
        0 => whole.to_string(),
        frac => format!("{whole}.{}", format!("{frac:03}").trim_end_matches('0')),
    }
}

fn retry_view(policy: &RetryPolicy) -> RetryView {
    let Schedule {
        steps,
        cut_by_deadline,
        total_wait_max,
    } = schedule::schedule(policy);
    let worst_case_end = steps.last().map_or(Duration::ZERO, |s| s.ends_by);
    let timeout = policy
        .p99
        .map(|p| p.saturating_mul(protocol::P99_TIMEOUT_FACTOR));
    let (transient, throttle) = schedule::budget_retries(&policy.budget);
    RetryView {
        max_attempts: policy.max_attempts,
        retries: policy.max_attempts.saturating_sub(1),
        full_jitter: policy.backoff == Backoff::FullJitter,
        base: text::duration_short(policy.base),
        cap: text::duration_short(policy.cap),
        deadline: text::duration_short(policy.deadline),
        p99: policy.p99.map(text::duration_short),
        attempt_timeout: timeout.map(text::duration_short),
        p99_factor: protocol::P99_TIMEOUT_FACTOR,
        steps: steps
            .iter()
            .map(|s| StepView {
                attempt: s.attempt,
                first: s.attempt == 1,
                wait_min: text::duration_short(s.wait_min),
                wait_max: text::duration_short(s.wait_max),
                starts_by: text::duration_short(s.starts_by),
                timeout: text::duration_short(s.timeout),
                ends_by: text::duration_short(s.ends_by),
            })
            .collect(),
        cut_by_deadline,
        total_wait_max: text::duration_short(total_wait_max),
        worst_case_end: text::duration_short(worst_case_end),
        budget_capacity: policy.budget.capacity,
        budget_transient_cost: policy.budget.transient_cost,
        budget_throttle_cost: policy.budget.throttle_cost,
        budget_refund: policy.budget.success_refund,
        budget_transient_retries: transient,
        budget_throttle_retries: throttle,
        retryable_statuses: protocol::RETRYABLE_STATUSES.to_vec(),
        gateway_statuses: protocol::RETRYABLE_STATUSES
            .iter()
            .copied()
            .filter(|s| *s != 429)
            .collect(),
        server_error_retries: protocol::SERVER_ERROR_RETRIES,
    }
}

#[cfg(test)]
mod tests {
    use super::secs;
    use std::time::Duration;

    #[test]
    fn seconds_for_code() {
        assert_eq!(secs(Duration::from_millis(100)), "0.1");
        assert_eq!(secs(Duration::from_secs(10)), "10");
        assert_eq!(secs(Duration::from_millis(2_400)), "2.4");
        assert_eq!(secs(Duration::from_millis(1_250)), "1.25");
    }
}
