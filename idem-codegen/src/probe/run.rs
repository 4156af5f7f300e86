//! Sending a [`Plan`]: each target's checks in order, over one HTTP client
//! that never retries and times every request out.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Check, CheckKind, KeyPlace, Plan, REPLAY, Settings, Target};
use crate::model::Model;
use crate::vocab::InFlight;

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
    fn answered(request: String, answer: &Answer) -> Exchange {
        Exchange {
            request,
            status: Some(answer.status),
            answer: cut(&answer.body),
        }
    }

    fn of(request: String, result: &Result<Answer, String>) -> Exchange {
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
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    fn client_error(&self) -> bool {
        (400..500).contains(&self.status)
    }

    fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The same body: equal as JSON when both are JSON, else byte for byte.
    fn same_body(&self, other: &Answer) -> bool {
        match (self.json(), other.json()) {
            (Some(a), Some(b)) => a == b,
            _ => self.body == other.body,
        }
    }

    /// The resource the answer names: its `Location`, or the body's `id`.
    fn resource_id(&self) -> Option<String> {
        if let Some(location) = self.headers.get("location").and_then(|v| v.to_str().ok()) {
            return Some(location.to_owned());
        }
        match self.json()?.get("id")? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    fn has(&self, header: Option<&str>) -> bool {
        header.is_some_and(|h| self.headers.contains_key(h))
    }
}

/// Which body a request carries.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Payload {
    Valid,
    Variant,
    Invalid,
}

/// Which key a request carries.
#[derive(Debug, Clone)]
enum KeyValue {
    None,
    Some(String),
}

/// Who sends a request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Caller {
    First,
    Second,
}

/// One request to send.
#[derive(Debug, Clone)]
struct Send {
    payload: Payload,
    key: KeyValue,
    caller: Caller,
}

/// How many bytes of an answer a report shows.
const ANSWER_BYTES: usize = 200;

struct Runner<'a> {
    http: reqwest::Client,
    base: String,
    model: &'a Model,
    settings: &'a Settings,
    prefix: String,
    next_key: AtomicUsize,
    progress: Arc<Progress>,
    created: Mutex<BTreeSet<Created>>,
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
    let runner = Runner {
        http,
        base,
        model,
        settings,
        prefix: format!(
            "idem-probe-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ),
        next_key: AtomicUsize::new(1),
        progress,
        created: Mutex::new(BTreeSet::new()),
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
    Ok(RunReport {
        base_url: runner.base.clone(),
        key_prefix: runner.prefix.clone(),
        planned: plan.requests(),
        sent: runner.progress.sent.load(Ordering::Relaxed),
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
    fn key(&self, max: u32) -> String {
        let n = self.next_key.fetch_add(1, Ordering::Relaxed);
        let key = format!("{}-{n}", self.prefix);
        let max = max as usize;
        if key.len() > max {
            key[key.len() - max..].to_owned()
        } else {
            key
        }
    }

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
        // The replay check's key and original answer, once it has held: the
        // checks that build on a working replay start from them.
        let mut replayed: Option<(String, Answer)> = None;
        for (check, planned) in &target.checks {
            if let Err(reason) = planned {
                outcomes.push(outcome(check, Verdict::Skipped(reason.clone()), Vec::new()));
                continue;
            }
            self.progress.set(&target.label, check);
            let mut evidence = Vec::new();
            let mut tries = None;
            let verdict = match (check.kind, &replayed) {
                (CheckKind::Replay, _) => {
                    let (verdict, first) = self.replay(target, &mut evidence).await?;
                    replayed = first.filter(|_| verdict == Verdict::Held);
                    verdict
                }
                (CheckKind::KeyRequired, _) => self.key_required(target, &mut evidence).await,
                (CheckKind::KeyBounds, _) => self.key_bounds(target, &mut evidence).await,
                (
                    kind @ (CheckKind::PayloadMismatch | CheckKind::CallerIsolation),
                    Some((key, first)),
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
                        Ok(answer) if mismatch => self.mismatch(target, &answer, first),
                        Ok(answer) => isolation(target, &answer, first),
                        Err(verdict) => verdict,
                    }
                }
                (CheckKind::ConcurrentDuplicates, Some(_)) => {
                    let (verdict, made) = self.concurrent(target, &mut evidence).await;
                    tries = Some(made);
                    verdict
                }
                (CheckKind::FailedNotStored, Some(_)) => {
                    self.failed_not_stored(target, &mut evidence).await
                }
                (_, None) => Verdict::Undecided(format!(
                    "it builds on `{}`, which did not hold: a service that does not replay cannot be judged on the rest",
                    REPLAY.slug
                )),
            };
            outcomes.push(Outcome {
                check,
                verdict,
                evidence,
                tries,
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
    async fn send(
        &self,
        target: &Target,
        send: &Send,
        evidence: &mut Vec<Exchange>,
    ) -> Result<Answer, String> {
        let (text, result) = self.exchange(target, send).await;
        evidence.push(Exchange::of(text, &result));
        result
    }

    async fn exchange(&self, target: &Target, send: &Send) -> (String, Result<Answer, String>) {
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
                        super::body::percent_encode(k),
                        super::body::percent_encode(v)
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

    fn valid(&self, key: KeyValue) -> Send {
        Send {
            payload: Payload::Valid,
            key,
            caller: Caller::First,
        }
    }

    async fn replay(
        &self,
        target: &Target,
        evidence: &mut Vec<Exchange>,
    ) -> Result<(Verdict, Option<(String, Answer)>), RunError> {
        let key = self.key(target.key_max_length);
        let send = self.valid(KeyValue::Some(key.clone()));
        let first = match self.send(target, &send, evidence).await {
            Ok(a) => a,
            Err(reason) => {
                // The first request of a target: no answer means no service.
                return Err(RunError::Unreachable {
                    url: self.base.clone(),
                    reason,
                });
            }
        };
        if !first.ok() {
            return Ok((not_a_success(&first), None));
        }
        let second = match self.send(target, &send, evidence).await {
            Ok(a) => a,
            Err(e) => {
                return Ok((
                    Verdict::Undecided(format!("the retry got no answer: {e}")),
                    None,
                ));
            }
        };
        let header = target.replay_header.as_deref();
        let verdict = if second.status != first.status {
            Verdict::Failed(format!(
                "the retry was answered {}, the original {}",
                second.status, first.status
            ))
        } else if !first.same_body(&second) {
            match (first.resource_id(), second.resource_id()) {
                (Some(a), Some(b)) if a != b => Verdict::Failed(format!(
                    "the retry answered another resource, `{b}` after `{a}`: the request ran twice, or its replay was made anew"
                )),
                _ => Verdict::Failed("the retry's body differs from the original's".into()),
            }
        } else if header.is_some() && !second.has(header) {
            Verdict::Failed(format!(
                "the retry lacks the `{}` header the spec declares",
                header.unwrap_or_default()
            ))
        } else if header.is_some() && first.has(header) {
            Verdict::Failed(format!(
                "the original carries `{}`, which the spec keeps for replays",
                header.unwrap_or_default()
            ))
        } else {
            Verdict::Held
        };
        Ok((verdict, Some((key, first))))
    }

    /// Send `payload` as `caller` with the replay check's key; the evidence shows the
    /// original answer first.
    async fn after_original(
        &self,
        target: &Target,
        (payload, caller): (Payload, Caller),
        key: &str,
        first: &Answer,
        evidence: &mut Vec<Exchange>,
    ) -> Result<Answer, Verdict> {
        evidence.push(original(first));
        let send = Send {
            payload,
            key: KeyValue::Some(key.to_owned()),
            caller,
        };
        self.send(target, &send, evidence)
            .await
            .map_err(|e| Verdict::Undecided(format!("no answer: {e}")))
    }

    /// The answer to the replay check's key with another body.
    fn mismatch(&self, target: &Target, answer: &Answer, first: &Answer) -> Verdict {
        let declared = declared_of(self.model, target, &[409, 422]);
        if answer.ok() {
            if answer.same_body(first) {
                Verdict::Failed("the key's first answer was replayed for another body: the key ignores the body".into())
            } else {
                Verdict::Failed("the other body ran as a second original under the same key".into())
            }
        } else if declared.contains(&answer.status) {
            Verdict::Held
        } else {
            Verdict::Failed(format!(
                "answered {}, not the reuse conflict ({})",
                answer.status,
                list(&declared)
            ))
        }
    }

    async fn concurrent(&self, target: &Target, evidence: &mut Vec<Exchange>) -> (Verdict, String) {
        let n = self.settings.concurrency.max(1);
        let mut in_flight = declared_of(self.model, target, &[409, 425, 429, 503]);
        // `in-flight: accepted`: a duplicate of a running request is told
        // `202` and where to follow it; that is not a second original.
        let accepted = self.model.operations[target.index].settings.in_flight == InFlight::Accepted;
        if accepted {
            in_flight.push(202);
        }
        let header = target.replay_header.as_deref();
        let mut made = 0;
        for round in 0..self.settings.rounds {
            made = round + 1;
            let key = self.key(target.key_max_length);
            let send = self.valid(KeyValue::Some(key));
            let barrier = tokio::sync::Barrier::new(n);
            let requests = (0..n).map(|_| async {
                barrier.wait().await;
                self.exchange(target, &send).await
            });
            let results = futures_util::future::join_all(requests).await;
            let mut originals: Vec<Answer> = Vec::new();
            let mut fresh = 0;
            let mut problem = None;
            let mut shown = Vec::new();
            for (text, result) in results {
                match result {
                    Ok(a) if accepted && a.status == 202 => {}
                    Ok(a) if a.ok() => {
                        if !a.has(header) {
                            fresh += 1;
                        }
                        if !originals.iter().any(|o| o.same_body(&a)) {
                            shown.push(Exchange::answered(text, &a));
                            originals.push(a);
                        }
                    }
                    Ok(a) if in_flight.contains(&a.status) => {}
                    Ok(a) => {
                        shown.push(Exchange::answered(text, &a));
                        problem.get_or_insert(format!(
                            "a duplicate was answered {}, neither a replay nor the in-flight conflict ({})",
                            a.status,
                            list(&in_flight)
                        ));
                    }
                    Err(e) => {
                        problem.get_or_insert(format!("a duplicate got no answer: {e}"));
                        shown.push(Exchange::of(text, &Err(e)));
                    }
                }
            }
            let tries = format!("{made} of {} rounds of {n} requests", self.settings.rounds);
            if originals.len() > 1 {
                let ids: Vec<String> = originals.iter().filter_map(Answer::resource_id).collect();
                evidence.extend(shown);
                let which = if ids.len() > 1 {
                    format!(": `{}`", ids.join("`, `"))
                } else {
                    String::new()
                };
                return (
                    Verdict::Failed(format!(
                        "{n} identical requests at once made {} different answers{which}: the request ran more than once",
                        originals.len()
                    )),
                    tries,
                );
            }
            if header.is_some() && fresh > 1 {
                evidence.extend(shown);
                return (
                    Verdict::Failed(format!(
                        "{fresh} answers lack the replay header: more than one original"
                    )),
                    tries,
                );
            }
            if let Some(problem) = problem {
                evidence.extend(shown);
                return (Verdict::Failed(problem), tries);
            }
            if originals.is_empty() {
                evidence.extend(shown);
                return (
                    Verdict::Undecided(format!("none of {n} requests was answered 2xx")),
                    tries,
                );
            }
        }
        (
            Verdict::Held,
            format!("{made} rounds of {n} requests at once"),
        )
    }

    async fn key_required(&self, target: &Target, evidence: &mut Vec<Exchange>) -> Verdict {
        let keyless = match self
            .send(target, &self.valid(KeyValue::None), evidence)
            .await
        {
            Ok(a) => a,
            Err(e) => return Verdict::Undecided(format!("no answer: {e}")),
        };
        if keyless.ok() {
            return Verdict::Failed(format!(
                "a request without its required key was answered {}: it ran, and a retry of it would run again",
                keyless.status
            ));
        }
        if !keyless.client_error() {
            return Verdict::Failed(format!(
                "a request without its required key was answered {}, not a 4xx",
                keyless.status
            ));
        }
        let fresh = self.valid(KeyValue::Some(self.key(target.key_max_length)));
        match self.send(target, &fresh, evidence).await {
            Ok(a) if a.ok() && !a.has(target.replay_header.as_deref()) => Verdict::Held,
            Ok(a) if a.ok() => Verdict::Failed(
                "a fresh key after the keyless request was answered as a replay".into(),
            ),
            Ok(a) => Verdict::Undecided(format!(
                "the keyless request was refused {}, but the same request with a fresh key was answered {}",
                keyless.status, a.status
            )),
            Err(e) => Verdict::Undecided(format!("no answer: {e}")),
        }
    }

    async fn key_bounds(&self, target: &Target, evidence: &mut Vec<Exchange>) -> Verdict {
        let max = target.key_max_length as usize;
        let mut long = self.key(target.key_max_length);
        while long.len() <= max {
            long.push('x');
        }
        let invisible = format!("{} é", self.key(target.key_max_length.saturating_sub(4)));
        let mut problems = Vec::new();
        for (what, key) in [
            (
                format!("a key of {} characters (the maximum is {max})", max + 1),
                long,
            ),
            (
                "a key holding a space and a non-ASCII character".to_owned(),
                invisible,
            ),
        ] {
            match self
                .send(target, &self.valid(KeyValue::Some(key)), evidence)
                .await
            {
                Ok(a) if a.client_error() => {}
                Ok(a) => problems.push(format!("{what} was answered {}", a.status)),
                Err(e) => problems.push(format!("{what} got no answer: {e}")),
            }
        }
        if problems.is_empty() {
            Verdict::Held
        } else {
            Verdict::Failed(format!("{}; it should be a 4xx", problems.join("; ")))
        }
    }

    async fn failed_not_stored(&self, target: &Target, evidence: &mut Vec<Exchange>) -> Verdict {
        let key = self.key(target.key_max_length);
        let invalid = Send {
            payload: Payload::Invalid,
            key: KeyValue::Some(key.clone()),
            caller: Caller::First,
        };
        let refused = match self.send(target, &invalid, evidence).await {
            Ok(a) => a,
            Err(e) => return Verdict::Undecided(format!("no answer: {e}")),
        };
        if !refused.client_error() {
            return Verdict::Undecided(format!(
                "the body the schema forbids was answered {}, not refused, so there is no refusal to look for",
                refused.status
            ));
        }
        let answer = match self
            .send(target, &self.valid(KeyValue::Some(key)), evidence)
            .await
        {
            Ok(a) => a,
            Err(e) => return Verdict::Undecided(format!("no answer: {e}")),
        };
        if answer.ok() {
            Verdict::Held
        } else if answer.status == refused.status && answer.same_body(&refused) {
            Verdict::Failed(format!(
                "the refusal ({}) was stored under the key and replayed for the valid request",
                refused.status
            ))
        } else if matches!(answer.status, 409 | 422) {
            Verdict::Failed(format!(
                "the refused request used up its key: the valid request with it was answered {}",
                answer.status
            ))
        } else {
            Verdict::Undecided(format!(
                "the valid request after the refusal was answered {}",
                answer.status
            ))
        }
    }
}

/// The second caller's answer to the first caller's key and body.
fn isolation(target: &Target, answer: &Answer, first: &Answer) -> Verdict {
    let header = target.replay_header.as_deref();
    if answer.ok() && (answer.same_body(first) || answer.has(header)) {
        Verdict::Failed(
            "the second caller got the first caller's answer: one key space for every caller"
                .into(),
        )
    } else if answer.ok() {
        Verdict::Held
    } else if matches!(answer.status, 409 | 422) {
        Verdict::Failed(format!(
            "the second caller's request was refused {} as a conflict with the first caller's key: keys are not kept apart per caller",
            answer.status
        ))
    } else {
        Verdict::Undecided(format!(
            "the second caller was answered {}; is `--second-caller` an identity the service accepts?",
            answer.status
        ))
    }
}

/// The replay check's original answer, shown beside what a later check got.
fn original(first: &Answer) -> Exchange {
    Exchange::answered(
        "the same key's original request (check `replay`)".into(),
        first,
    )
}

fn outcome(check: &'static Check, verdict: Verdict, evidence: Vec<Exchange>) -> Outcome {
    Outcome {
        check,
        verdict,
        evidence,
        tries: None,
    }
}

/// The statuses of `candidates` the operation declares, or all of them when
/// it declares none.
fn declared_of(model: &Model, target: &Target, candidates: &[u16]) -> Vec<u16> {
    let op = &model.operations[target.index];
    let declared: Vec<u16> = candidates
        .iter()
        .copied()
        .filter(|s| {
            let text = s.to_string();
            op.responses.iter().any(|r| {
                r.status == text
                    || (r.status.len() == 3
                        && r.status.ends_with("XX")
                        && text.starts_with(&r.status[..1]))
            })
        })
        .collect();
    if declared.is_empty() {
        candidates.to_vec()
    } else {
        declared
    }
}

fn list(statuses: &[u16]) -> String {
    statuses
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(" or ")
}

fn not_a_success(answer: &Answer) -> Verdict {
    Verdict::Undecided(format!(
        "the probe's request was answered {}, so there is no success to replay; give a body that succeeds with `--body OPERATION=@FILE`, or the identity it needs with `--header`",
        answer.status
    ))
}

/// The first bytes of an answer, as text.
fn cut(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(ANSWER_BYTES)]).into_owned();
    if body.len() > ANSWER_BYTES {
        format!("{text}…")
    } else {
        text
    }
}

/// A key as a report shows it: long ones shortened.
fn shown_key(key: &str) -> String {
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
