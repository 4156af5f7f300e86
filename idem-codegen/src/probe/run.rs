//! Sending a [`Plan`]: each target's checks in order, over one HTTP client
//! that never retries and times every request out.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Check, CheckKind, KeyMaker, KeyPlace, Plan, REPLAY, Settings, Target};
use crate::model::Model;

/// How a check ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Held,
    /// The service broke the contract; the reason says how.
    Failed(String),
    /// The check ran and could not tell; the reason says why.
    Undecided(String),
    /// The check was not run; the reason says why.
    Skipped(String),
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::Failed(_) => "failed",
            Verdict::Undecided(_) => "undecided",
            Verdict::Skipped(_) => "skipped",
        }
    }

    pub fn reason(&self) -> Option<&str> {
        match self {
            Verdict::Held => None,
            Verdict::Failed(r) | Verdict::Undecided(r) | Verdict::Skipped(r) => Some(r),
        }
    }
}

/// One request and what came back, cut for a report.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// `POST /v1/orders (key …-3, the probe's body)`.
    pub request: String,
    /// The status, or `None` when no answer came.
    pub status: Option<u16>,
    /// The answer's first bytes, or the transport error.
    pub answer: String,
}

impl Exchange {
    pub(super) fn answered(request: String, answer: &Answer) -> Exchange {
        Exchange {
            request,
            status: Some(answer.status),
            answer: cut(&answer.body),
        }
    }

    pub(super) fn of(request: String, result: &Result<Answer, String>) -> Exchange {
        match result {
            Ok(answer) => Exchange::answered(request, answer),
            Err(e) => Exchange {
                request,
                status: None,
                answer: e.clone(),
            },
        }
    }
}

/// One check of one operation.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub check: &'static Check,
    pub verdict: Verdict,
    pub evidence: Vec<Exchange>,
    /// For checks that depend on timing: how many tries they made.
    pub tries: Option<String>,
    /// How the verdict was reached when not from a working replay: from
    /// effects, the resources the answers name.
    pub basis: Option<String>,
    /// What the service does that idem's protocol advises against and the
    /// spec does not forbid: advice, never a failure.
    pub notes: Vec<String>,
}

/// How the checks after the replay judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Basis {
    /// By a working replay: the original's body, the replay header.
    Replay,
    /// By the resources the answers name.
    Effects,
}

impl Basis {
    pub(super) fn describe(self, read_back: bool) -> String {
        match (self, read_back) {
            (Basis::Replay, _) => "by the replay".to_owned(),
            (Basis::Effects, true) => "decided from effects: the resources the answers name, each read back through the spec's `GET` (the replay did not hold)".to_owned(),
            (Basis::Effects, false) => "decided from effects: the resources the answers name (the replay did not hold, and the spec has no `GET` to read them back)".to_owned(),
        }
    }
}

pub(super) fn outcome(check: &'static Check, verdict: Verdict, evidence: Vec<Exchange>) -> Outcome {
    Outcome {
        check,
        verdict,
        evidence,
        tries: None,
        basis: None,
        notes: Vec::new(),
    }
}

/// One operation's outcomes.
#[derive(Debug, Clone)]
pub struct TargetReport {
    pub index: usize,
    pub label: String,
    pub body_source: Option<&'static str>,
    pub outcomes: Vec<Outcome>,
}

/// A resource the probe's requests created, for cleaning up.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Created {
    pub operation: String,
    pub id: String,
    pub key: String,
    /// Created under `--second-caller`'s identity.
    pub second_caller: bool,
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub base_url: String,
    pub key_prefix: String,
    pub planned: usize,
    pub sent: usize,
    /// `GET`s that read a created resource back, to count effects.
    pub reads: usize,
    pub elapsed: Duration,
    pub targets: Vec<TargetReport>,
    pub created: Vec<Created>,
}

impl RunReport {
    /// Outcomes with each verdict kind, counted.
    pub fn count(&self, kind: &str) -> usize {
        self.targets
            .iter()
            .flat_map(|t| &t.outcomes)
            .filter(|o| o.verdict.as_str() == kind)
            .count()
    }
}

/// Why a run stopped before it could judge anything.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("`{0}` is not a base URL: {1}")]
    BaseUrl(String, String),
    #[error("cannot start the HTTP client: {0}")]
    Client(String),
    #[error("the service at {url} did not answer the first request: {reason}")]
    Unreachable { url: String, reason: String },
}

/// Where a run reports what it is doing, for a progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub sent: AtomicUsize,
    pub doing: Mutex<String>,
}

impl Progress {
    fn set(&self, target: &str, check: &Check) {
        if let Ok(mut doing) = self.doing.lock() {
            *doing = format!("{target} · {}", check.slug);
        }
    }
}

/// An answer, whole.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) body: Vec<u8>,
}

impl Answer {
    pub(super) fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub(super) fn client_error(&self) -> bool {
        (400..500).contains(&self.status)
    }

    pub(super) fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The same body: equal as JSON when both are JSON, else byte for byte.
    pub(super) fn same_body(&self, other: &Answer) -> bool {
        match (self.json(), other.json()) {
            (Some(a), Some(b)) => a == b,
            _ => self.body == other.body,
        }
    }

    /// The resource the answer names: its `Location`, or the body's `id`.
    pub(super) fn resource_id(&self) -> Option<String> {
        if let Some(location) = self.headers.get("location").and_then(|v| v.to_str().ok()) {
            return Some(location.to_owned());
        }
        match self.json()?.get("id")? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// Whether the declared replay header says this answer is a replay:
    /// present with the value `true` (or `1`). `Idempotent-Replayed: false`
    /// on an original is not a replay.
    pub(super) fn replayed(&self, header: Option<&str>) -> bool {
        header
            .and_then(|h| self.headers.get(h))
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                let v = v.trim();
                v.eq_ignore_ascii_case("true") || v == "1"
            })
    }
}

/// Which body a request carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Payload {
    Valid,
    Variant,
    Invalid,
}

/// Which key a request carries.
#[derive(Debug, Clone)]
pub(super) enum KeyValue {
    None,
    Some(String),
}

/// Who sends a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Caller {
    First,
    Second,
}

/// One request to send.
#[derive(Debug, Clone)]
pub(super) struct Send {
    pub(super) payload: Payload,
    pub(super) key: KeyValue,
    pub(super) caller: Caller,
}

/// How many bytes of an answer a report shows.
const ANSWER_BYTES: usize = 200;

pub(super) struct Runner<'a> {
    pub(super) http: reqwest::Client,
    pub(super) base: String,
    pub(super) model: &'a Model,
    pub(super) settings: &'a Settings,
    /// Twelve hex digits, in every key of the run.
    prefix: String,
    /// Each target's key maker, by operation index.
    makers: HashMap<usize, KeyMaker>,
    next_key: AtomicUsize,
    pub(super) progress: Arc<Progress>,
    created: Mutex<BTreeSet<Created>>,
    /// Reads made to tell real effects from ids made up, and what they found.
    reads: AtomicUsize,
    seen: Mutex<HashMap<String, bool>>,
}

/// Send `plan` to `base_url` and judge each check.
pub async fn run(
    model: &Model,
    plan: &Plan,
    base_url: &str,
    settings: &Settings,
    progress: Arc<Progress>,
) -> Result<RunReport, RunError> {
    let base = check_base_url(base_url)?;
    let http = reqwest::Client::builder()
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(settings.concurrency.max(1))
        .build()
        .map_err(|e| RunError::Client(e.to_string()))?;
    let prefix = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let makers = plan
        .targets
        .iter()
        .filter_map(|t| Some((t.index, KeyMaker::new(&prefix, &t.key_shape).ok()?)))
        .collect();
    let runner = Runner {
        http,
        base,
        model,
        settings,
        prefix,
        makers,
        next_key: AtomicUsize::new(1),
        progress,
        created: Mutex::new(BTreeSet::new()),
        reads: AtomicUsize::new(0),
        seen: Mutex::new(HashMap::new()),
    };
    let started = Instant::now();
    let mut targets = Vec::new();
    for target in &plan.targets {
        targets.push(runner.target(target).await?);
    }
    let created = runner
        .created
        .lock()
        .map(|c| c.iter().cloned().collect())
        .unwrap_or_default();
    // How the report names the keys: the first target's spelling.
    let key_prefix = plan
        .targets
        .first()
        .and_then(|t| Some(runner.makers.get(&t.index)?.pattern(&t.key_shape)))
        .map_or_else(
            || runner.prefix.clone(),
            |p| p.trim_end_matches('*').to_owned(),
        );
    Ok(RunReport {
        base_url: runner.base.clone(),
        key_prefix,
        planned: plan.requests(),
        sent: runner.progress.sent.load(Ordering::Relaxed),
        reads: runner.reads.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        targets,
        created,
    })
}

/// `base_url` without its trailing `/`, if it is an http or https URL.
pub fn check_base_url(base_url: &str) -> Result<String, RunError> {
    let base = base_url.trim_end_matches('/').to_owned();
    let parsed = reqwest::Url::parse(&base)
        .map_err(|e| RunError::BaseUrl(base_url.to_owned(), e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(RunError::BaseUrl(
            base_url.to_owned(),
            "the scheme must be http or https".into(),
        ));
    }
    Ok(base)
}

impl Runner<'_> {
    async fn target(&self, target: &Target) -> Result<TargetReport, RunError> {
        let mut outcomes = Vec::new();
        let body = match &target.body {
            Ok(body) => body,
            Err(_) => {
                for (check, planned) in &target.checks {
                    let reason = planned.as_ref().err().cloned().unwrap_or_default();
                    outcomes.push(outcome(check, Verdict::Skipped(reason), Vec::new()));
                }
                return Ok(TargetReport {
                    index: target.index,
                    label: target.label.clone(),
                    body_source: None,
                    outcomes,
                });
            }
        };
        // The replay check's key and original answer, and how the checks
        // that build on it can judge: from a working replay, or from the
        // effects the answers name when the replay is wrong or missing.
        let mut original: Option<(String, Answer, Basis)> = None;
        let mut unjudged = String::new();
        for (check, planned) in &target.checks {
            if let Err(reason) = planned {
                outcomes.push(outcome(check, Verdict::Skipped(reason.clone()), Vec::new()));
                continue;
            }
            self.progress.set(&target.label, check);
            let mut evidence = Vec::new();
            let mut tries = None;
            let mut notes = Vec::new();
            let basis = original.as_ref().map(|(_, _, b)| *b);
            let verdict = match (check.kind, &original) {
                (CheckKind::Replay, _) => {
                    let replay = self.replay(target, &mut evidence).await?;
                    original = replay.original;
                    unjudged = replay.unjudged;
                    replay.verdict
                }
                (CheckKind::KeyRequired, _) => self.key_required(target, &mut evidence).await,
                (CheckKind::KeyBounds, _) => {
                    self.key_bounds(target, &mut evidence, &mut notes).await
                }
                (
                    kind @ (CheckKind::PayloadMismatch | CheckKind::CallerIsolation),
                    Some((key, first, basis)),
                ) => {
                    let mismatch = kind == CheckKind::PayloadMismatch;
                    let again = if mismatch {
                        (Payload::Variant, Caller::First)
                    } else {
                        (Payload::Valid, Caller::Second)
                    };
                    match self
                        .after_original(target, again, key, first, &mut evidence)
                        .await
                    {
                        Ok(answer) if mismatch => {
                            self.mismatch(target, &answer, first, *basis).await
                        }
                        Ok(answer) => self.isolation(target, &answer, first, *basis).await,
                        Err(verdict) => verdict,
                    }
                }
                (CheckKind::ConcurrentDuplicates, Some((_, _, basis))) => {
                    let (verdict, made) = self.concurrent(target, *basis, &mut evidence).await;
                    tries = Some(made);
                    verdict
                }
                (CheckKind::FailedNotStored, Some(_)) => {
                    self.failed_not_stored(target, &mut evidence).await
                }
                (_, None) => Verdict::Undecided(format!(
                    "it builds on `{}`, which did not hold, and {unjudged}",
                    REPLAY.slug
                )),
            };
            let basis = match (check.kind, basis) {
                (CheckKind::Replay | CheckKind::KeyRequired | CheckKind::KeyBounds, _) => None,
                (_, Some(Basis::Effects)) if verdict.as_str() != "skipped" => {
                    Some(Basis::Effects.describe(target.read_back.is_some()))
                }
                _ => None,
            };
            outcomes.push(Outcome {
                check,
                verdict,
                evidence,
                tries,
                basis,
                notes,
            });
        }
        Ok(TargetReport {
            index: target.index,
            label: target.label.clone(),
            body_source: Some(body.source),
            outcomes,
        })
    }

    /// Send one request; its exchange goes to `evidence`.
    pub(super) async fn send(
        &self,
        target: &Target,
        send: &Send,
        evidence: &mut Vec<Exchange>,
    ) -> Result<Answer, String> {
        let (text, result) = self.exchange(target, send).await;
        evidence.push(Exchange::of(text, &result));
        result
    }

    pub(super) async fn exchange(
        &self,
        target: &Target,
        send: &Send,
    ) -> (String, Result<Answer, String>) {
        let Ok(body) = &target.body else {
            return (String::new(), Err("no request".into()));
        };
        let op = &self.model.operations[target.index];
        let mut url = format!("{}{}", self.base, body.path);
        if !body.query.is_empty() {
            let pairs: Vec<String> = body
                .query
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}={}",
                        crate::model::shape::sample::percent_encode(k),
                        crate::model::shape::sample::percent_encode(v)
                    )
                })
                .collect();
            url.push('?');
            url.push_str(&pairs.join("&"));
        }
        let method = reqwest::Method::from_bytes(op.method.as_str().as_bytes())
            .unwrap_or(reqwest::Method::POST);
        let mut request = self.http.request(method, &url);
        let second = self.settings.second_caller.as_ref();
        for (name, value) in &body.headers {
            let given = self
                .settings
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
                || second.is_some_and(|(n, _)| n.eq_ignore_ascii_case(name));
            if !given {
                request = request.header(name, value);
            }
        }
        for (name, value) in &self.settings.headers {
            let replaced = send.caller == Caller::Second
                && second.is_some_and(|(n, _)| n.eq_ignore_ascii_case(name));
            if !replaced {
                request = request.header(name, value);
            }
        }
        if send.caller == Caller::Second
            && let Some((name, value)) = second
        {
            request = request.header(name, value);
        }
        let mut note = Vec::new();
        match (&send.key, &target.key) {
            (KeyValue::None, _) => note.push("no key".to_owned()),
            (KeyValue::Some(k), KeyPlace::Header(h)) => {
                match reqwest::header::HeaderValue::from_bytes(k.as_bytes()) {
                    Ok(v) => request = request.header(h, v),
                    Err(_) => {
                        return (
                            String::new(),
                            Err(format!("`{k}` cannot be a header value")),
                        );
                    }
                }
                note.push(format!("key {}", shown_key(k)));
            }
            (KeyValue::Some(k), KeyPlace::Query(name)) => {
                request = request.query(&[(name.as_str(), k.as_str())]);
                note.push(format!("key {}", shown_key(k)));
            }
            (KeyValue::Some(k), KeyPlace::Body(_)) => note.push(format!("key {}", shown_key(k))),
        }
        if send.caller == Caller::Second {
            note.push("as the second caller".into());
        }
        let json = match send.payload {
            Payload::Valid => body.json.clone(),
            Payload::Variant => {
                note.push("another body".into());
                body.variant.clone()
            }
            Payload::Invalid => {
                note.push("a body the schema forbids".into());
                body.invalid.clone()
            }
        };
        let bytes = match json {
            Some(mut value) => {
                if let (KeyPlace::Body(field), Value::Object(map)) = (&target.key, &mut value) {
                    // An example's own key never travels: the probe's, or none.
                    match &send.key {
                        KeyValue::Some(k) => map.insert(field.clone(), Value::String(k.clone())),
                        KeyValue::None => map.remove(field),
                    };
                }
                Some(serde_json::to_vec(&value).unwrap_or_default())
            }
            None => body.raw.clone(),
        };
        if let Some(bytes) = bytes {
            if let Some(media) = &body.media_type {
                request = request.header("content-type", media);
            }
            request = request.body(bytes);
        }
        let text = format!("{} {} ({})", op.method, body.path, note.join(", "));
        self.progress.sent.fetch_add(1, Ordering::Relaxed);
        let result = async {
            let response = request.send().await.map_err(describe)?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response.bytes().await.map_err(describe)?.to_vec();
            Ok(Answer {
                status,
                headers,
                body,
            })
        }
        .await;
        if let (Ok(answer), KeyValue::Some(k)) = (&result, &send.key)
            && answer.ok()
            && let Ok(mut created) = self.created.lock()
        {
            created.insert(Created {
                operation: target.label.clone(),
                id: answer
                    .resource_id()
                    .unwrap_or_else(|| "(the answer names no id)".to_owned()),
                key: k.clone(),
                second_caller: send.caller == Caller::Second,
            });
        }
        (text, result)
    }

    pub(super) fn valid(&self, key: KeyValue) -> Send {
        Send {
            payload: Payload::Valid,
            key,
            caller: Caller::First,
        }
    }

    /// Whether resource `id`, which an answer named, can be read back: a
    /// real effect, not an id made up for the answer. `None` when the
    /// spec has no operation to read it with, or the read says nothing.
    pub(super) async fn exists(&self, target: &Target, id: &str) -> Option<bool> {
        // Read back through `GET {path}/{id}` only where the spec has it.
        target.read_back?;
        if let Some(known) = self.seen.lock().ok()?.get(id).copied() {
            return Some(known);
        }
        let Ok(body) = &target.body else {
            return None;
        };
        // The create's own path (its parameters filled in) and the id.
        let path = format!(
            "{}/{}",
            body.path.trim_end_matches('/'),
            crate::model::shape::sample::percent_encode(id)
        );
        let mut request = self.http.get(format!("{}{path}", self.base));
        for (name, value) in &self.settings.headers {
            request = request.header(name, value);
        }
        for (name, value) in &body.headers {
            if !self
                .settings
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
            {
                request = request.header(name, value);
            }
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let status = request.send().await.ok()?.status().as_u16();
        let known = match status {
            200..=299 => true,
            404 | 410 => false,
            _ => return None,
        };
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(id.to_owned(), known);
        }
        Some(known)
    }

    /// Key number `n` of the run for `target`.
    pub(super) fn key(&self, target: &Target) -> String {
        let n = self.next_key.fetch_add(1, Ordering::Relaxed);
        match self.makers.get(&target.index) {
            Some(maker) => maker.key(n, &target.key_shape),
            None => format!("{}-{n}", self.prefix),
        }
    }
}

/// The first bytes of an answer, as text.
pub(super) fn cut(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(ANSWER_BYTES)]).into_owned();
    if body.len() > ANSWER_BYTES {
        format!("{text}…")
    } else {
        text
    }
}

/// A key as a report shows it: long ones shortened.
pub(super) fn shown_key(key: &str) -> String {
    if key.chars().count() > 40 {
        let head: String = key.chars().take(24).collect();
        format!("{head}… ({} characters)", key.chars().count())
    } else {
        key.to_owned()
    }
}

fn describe(e: reqwest::Error) -> String {
    use std::error::Error as _;
    let mut text = if e.is_timeout() {
        "no answer within the timeout (`--timeout`)".to_owned()
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else if e.is_body() || e.is_decode() {
        "the answer's body could not be read".to_owned()
    } else {
        "the answer is not HTTP".to_owned()
    };
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}
