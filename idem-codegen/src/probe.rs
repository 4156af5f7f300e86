//! `idem probe`: hold a running service to the key contract its spec
//! declares.
//!
//! [`plan`] reads the model: every keyed operation gets the checks of
//! [`CHECKS`], each with the requests it will send, and every operation that
//! is unsafe to retry is listed and never sent. [`run`](run::run) sends the
//! plan over HTTP (never retrying a request of its own, every request under
//! a timeout) and [`report`] renders what it found as text, JSON, SARIF or
//! JUnit.

use std::time::Duration;

use crate::model::{KeySource, Model, Operation, RetryClass};
use crate::source::Pos;
use crate::vocab::KeyRequirement;

#[cfg(feature = "cli")]
mod checks;
#[cfg(feature = "cli")]
pub mod cli;
mod keys;
#[cfg(feature = "cli")]
pub mod report;
#[cfg(feature = "cli")]
pub mod run;

use crate::model::shape::sample as body;
pub use crate::model::shape::sample::Body;
pub use keys::{KeyMaker, KeyShape};

/// One property of the key contract, checked from outside.
#[derive(Debug)]
pub struct Check {
    pub kind: CheckKind,
    /// `PROBE001`…; never reused.
    pub code: &'static str,
    /// Kebab-case name.
    pub slug: &'static str,
    /// One line for the plan and the report.
    pub summary: &'static str,
    /// The page `idem explain` prints.
    pub docs: &'static str,
}

/// Which property a [`Check`] holds the service to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckKind {
    Replay,
    PayloadMismatch,
    CallerIsolation,
    ConcurrentDuplicates,
    KeyRequired,
    KeyBounds,
    FailedNotStored,
}

macro_rules! checks {
    ($($name:ident = $kind:ident, $code:literal, $slug:literal, $summary:literal, $docs:literal;)*) => {
        $(
            #[doc = $summary]
            pub const $name: Check = Check {
                kind: CheckKind::$kind,
                code: $code,
                slug: $slug,
                summary: $summary,
                docs: $docs,
            };
        )*
        /// Every check, in the order a run makes them.
        pub const CHECKS: &[&Check] = &[$(&$name),*];
    };
}

checks! {
    REPLAY = Replay, "PROBE001", "replay",
        "the same key and body twice: the second answer is the first's",
        "## What it sends\n\nOne valid request with a fresh key, then the same request again. Every key \
         the probe sends is made to fit the key's schema (`format: uuid`, a `pattern`, `minLength`, \
         `maxLength`) and is unique to the run. When the first answer is a `5xx`, the same request is sent \
         once more with the same key, to tell a transient failure from a stored one.\n\n\
         ## What holds\n\nThe second answer has the first's status and the same body (compared as JSON \
         when both are JSON, byte for byte otherwise), so the same resource id. When the spec declares a \
         replay header on the operation's responses (`Idempotent-Replayed`), the second answer carries it \
         with the value `true`, and the first does not say `true` (`Idempotent-Replayed: false` on an \
         original is fine). A `5xx` replayed to the retry under the same key fails the check: the failure \
         was stored, and no retry can succeed. A `5xx` to a well-formed key is the service's own failure, \
         and the report says so.\n\n\
         ## Why it matters\n\nA replay that runs the request again, or that answers a new id, is the bug \
         the key exists to prevent: the client's retry of a lost reply becomes a second charge.\n\n\
         ## The checks that build on it\n\nPayload mismatch, caller isolation, concurrent duplicates and \
         failed request not stored start from this check's original answer. When the replay holds, they \
         judge by it. When it fails only in its status or headers (the original body under `409`), or \
         does not replay at all but each answer names the resource it made (a body `id` or a `Location`), \
         they judge by *effects*: the distinct resources the answers name. Where the spec has a \
         `GET {path}/{id}` beside the operation, each named resource is read back through it, so an id \
         made up for an answer is not counted as a resource. The report marks those verdicts \
         \"decided from effects\". They are undecided only when no request succeeded, or when no answer \
         names a resource.\n";
    PAYLOAD_MISMATCH = PayloadMismatch, "PROBE002", "payload-mismatch",
        "the same key with another body: the declared reuse conflict",
        "## What it sends\n\nThe replay check's key again, with a body that differs in one field and is \
         still valid.\n\n\
         ## What holds\n\nA `409` or `422` (the reuse conflict), never a `2xx`: not the first answer \
         replayed, which would tell the caller its second request succeeded, and not a second original. \
         Decided from effects (see `replay`), a `2xx` naming the first answer's resource is the first \
         answer replayed, and one naming a new resource that reads back is a second original.\n\n\
         ## Why it matters\n\nA key reused for another request is a client bug. A server that ignores the \
         body hides it, and the caller believes an order for 5 went through when the order for 2 did.\n";
    CALLER_ISOLATION = CallerIsolation, "PROBE003", "caller-isolation",
        "another caller's request with the same key value is its own request",
        "## What it sends\n\nThe replay check's key and body again, as the caller `--second-caller` names \
         (a header, such as another account's `Authorization`).\n\n\
         ## What holds\n\nA new original: a `2xx` whose body is not the first caller's answer. Decided \
         from effects (see `replay`), any answer that names the first caller's resource, under any \
         status, fails.\n\n\
         ## Why it matters\n\nKeys are chosen by callers, and two callers choose `order-1` alike. In one \
         key space for all callers, the second gets the first's answer: a silent failure for it, and a leak \
         of the first's data. Without `--second-caller` the check is skipped, and the report says so.\n";
    CONCURRENT_DUPLICATES = ConcurrentDuplicates, "PROBE004", "concurrent-duplicates",
        "identical requests at once: exactly one original",
        "## What it sends\n\n`--concurrency` identical requests (default 20) with one fresh key, all at \
         once, in two rounds with a key each. Every round runs, whatever the one before found.\n\n\
         ## What holds\n\nEach round makes one effect: every `2xx` answer carries the same body (one \
         resource id), and every other answer is the in-flight conflict (`409`, or `425`/`429`/`503` \
         where declared). Where the spec declares a replay header, exactly one `2xx` answer in a round \
         lacks `true` in it. Decided from effects (see `replay`), the effects are the distinct resources \
         the round's answers name, each read back where the spec can read it. The report gives each \
         round's effects and the other statuses it got: `round 1: 1 effect, 19 × 423; round 2: 4 \
         effects`.\n\n\
         ## Why it matters\n\nA client that times out and retries while its first request is still \
         running sends exactly this. A server that checks for the key and then inserts, without an atomic \
         claim, runs both. The report says how many rounds it made: a race that did not show in them is \
         not proof of its absence.\n";
    KEY_REQUIRED = KeyRequired, "PROBE005", "key-required",
        "no key where the key is required: a 4xx and no effect",
        "## What it sends\n\nA valid request without the key, where the spec says the key is required; \
         then the same request with a fresh key.\n\n\
         ## What holds\n\nThe first answer is a `4xx` (the spec's `400`), and the second is a new \
         original (`2xx`), showing no trace of the first.\n\n\
         ## Why it matters\n\nA server that runs a keyless request cannot deduplicate its retries. The \
         check is skipped for an operation whose key is optional.\n";
    KEY_BOUNDS = KeyBounds, "PROBE006", "key-bounds",
        "a key the spec forbids is refused with a 4xx, never a 5xx",
        "## What it sends\n\nA valid request whose key is one character over the declared maximum (the \
         key's `maxLength`, or `key-max-length`; 255, idem's own, when neither is declared), and one \
         whose key holds a space and a non-ASCII character.\n\n\
         ## What holds\n\nThe check holds the service only to what the spec declares, and reports length \
         and characters apart. A key over a declared maximum, or one the key's schema forbids \
         (`format: uuid`, or a `pattern` that refuses a space), is answered `4xx`. Where the spec declares \
         nothing, a key that idem's protocol would refuse (over 255 characters, or not visible ASCII) and \
         the service takes is a note in the report, not a failure. A `5xx` to either key fails, declared \
         or not.\n\n\
         ## Why it matters\n\nA `5xx` tells a client to retry what will never succeed; a `2xx` means the \
         server stored a key it documents as invalid, or truncated it, so two different keys may meet.\n";
    FAILED_NOT_STORED = FailedNotStored, "PROBE007", "failed-request-not-stored",
        "a refused request does not use up its key",
        "## What it sends\n\nAn invalid body with a fresh key, then a valid body with the same key.\n\n\
         ## What holds\n\nThe invalid body is answered `4xx`, and the valid one runs: a `2xx` original, \
         not the stored `400` replayed and not a reuse conflict. It needs no working replay, only a \
         request that succeeds; it runs whenever `replay` found one, held or decided from effects.\n\n\
         ## Why it matters\n\nA client that fixes its request and retries with the same key (as it \
         should, for one logical call) is refused for good when the server stored the refusal. \
         Validation happens before the key is claimed.\n";
}

impl Check {
    /// Find a check by code or slug (case-insensitive code).
    pub fn find(name: &str) -> Option<&'static Check> {
        CHECKS
            .iter()
            .copied()
            .find(|c| c.slug == name || c.code.eq_ignore_ascii_case(name))
    }

    /// The check's page as `idem explain` prints it.
    pub fn page(&self) -> String {
        format!(
            "# {} ({})\n\nA check of `idem probe`: {}.\n\n{}",
            self.slug, self.code, self.summary, self.docs
        )
    }
}

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Identical requests per round of the concurrency check.
    pub concurrency: usize,
    /// Rounds of the concurrency check.
    pub rounds: usize,
    /// The caller's identity (`--header`), sent on every request.
    pub headers: Vec<(String, String)>,
    /// Values of path, query, header or cookie parameters (`--param`), by name.
    pub params: Vec<(String, String)>,
    /// A second caller's identity (`--second-caller`), for the isolation check.
    pub second_caller: Option<(String, String)>,
    /// Each request's timeout.
    pub timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrency: 20,
            rounds: 2,
            headers: Vec::new(),
            params: Vec::new(),
            second_caller: None,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Where an operation's key travels.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyPlace {
    Header(String),
    /// A top-level field of a JSON body.
    Body(String),
    /// A query parameter (Google's `requestId`).
    Query(String),
}

/// One keyed operation and the checks it gets.
#[derive(Debug)]
pub struct Target {
    /// The operation's index in the model.
    pub index: usize,
    pub label: String,
    pub key: KeyPlace,
    pub key_required: bool,
    /// What the spec says a key may be: lengths, pattern, format.
    pub key_shape: KeyShape,
    /// The declared replay header (`Idempotent-Replayed`), if any: an
    /// answer is a replay when it carries it with the value `true`.
    pub replay_header: Option<String>,
    /// The operation that reads one created resource back
    /// (`GET {path}/{id}`), to tell a real effect from an id made up.
    pub read_back: Option<usize>,
    /// The request this operation is probed with, or why there is none.
    pub body: Result<Body, String>,
    /// Each check, with the requests it sends, or why it is skipped.
    pub checks: Vec<(&'static Check, Result<usize, String>)>,
}

impl Target {
    /// Requests this target's checks send at most.
    pub fn requests(&self) -> usize {
        self.checks
            .iter()
            .filter_map(|(_, n)| n.as_ref().ok())
            .sum()
    }
}

/// An operation that is unsafe to retry: listed, never sent.
#[derive(Debug)]
pub struct NotSent {
    pub label: String,
    pub class: RetryClass,
    pub pos: Pos,
}

/// What a run will send.
#[derive(Debug)]
pub struct Plan {
    pub targets: Vec<Target>,
    pub not_sent: Vec<NotSent>,
}

impl Plan {
    /// Requests the whole run sends at most.
    pub fn requests(&self) -> usize {
        self.targets.iter().map(Target::requests).sum()
    }
}

/// Why no plan could be made: the call names what the spec does not hold.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("no operation `{name}` in the spec{hint}")]
    UnknownOperation { name: String, hint: String },
    #[error("`--body {0}`: the operation is not keyed, so the probe never sends it")]
    BodyForUnprobed(String),
    #[error(
        "the spec declares no keyed operation{selected}: there is nothing to probe (`idem audit` lists each operation's class)"
    )]
    NothingKeyed { selected: &'static str },
}

/// The `GET {path}/{id}` beside a create at `{path}`, with one path
/// parameter more: where a created resource can be read back.
fn read_back(model: &Model, op: &Operation) -> Option<usize> {
    let prefix = format!("{}/{{", op.path.trim_end_matches('/'));
    model.operations.iter().position(|o| {
        o.method == crate::model::Method::Get
            && o.path.strip_prefix(&prefix).is_some_and(|rest| {
                rest.ends_with('}') && !rest.contains('/') && rest.matches('{').count() == 0
            })
    })
}

/// The name an operation is selected and reported by: its `operationId`, or
/// `METHOD /path`.
pub fn label(op: &Operation) -> String {
    op.operation_id
        .clone()
        .unwrap_or_else(|| format!("{} {}", op.method, op.path))
}

/// Plan the run: the keyed operations (all, or those `only` names), each
/// with its request and its checks; the unsafe ones listed, not sent.
/// `bodies` are `--body` files already read, by operation name.
pub fn plan(
    model: &Model,
    only: &[String],
    bodies: &[(String, Vec<u8>)],
    settings: &Settings,
) -> Result<Plan, PlanError> {
    let labels: Vec<String> = model.operations.iter().map(label).collect();
    for name in only.iter().chain(bodies.iter().map(|(n, _)| n)) {
        if !labels.iter().any(|l| l == name) {
            let names: Vec<&str> = labels.iter().map(String::as_str).collect();
            let hint = crate::vocab::did_you_mean(name, &names)
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_default();
            return Err(PlanError::UnknownOperation {
                name: name.clone(),
                hint,
            });
        }
    }
    let mut targets = Vec::new();
    let mut not_sent = Vec::new();
    for (index, op) in model.operations.iter().enumerate() {
        let name = &labels[index];
        if !only.is_empty() && !only.contains(name) {
            continue;
        }
        match op.class {
            RetryClass::Keyed => {}
            RetryClass::Unsafe | RetryClass::UnsafeDocumented => {
                if let Some((n, _)) = bodies.iter().find(|(n, _)| n == name) {
                    return Err(PlanError::BodyForUnprobed(n.clone()));
                }
                not_sent.push(NotSent {
                    label: name.clone(),
                    class: op.class,
                    pos: op.pos,
                });
                continue;
            }
            RetryClass::Safe => {
                if let Some((n, _)) = bodies.iter().find(|(n, _)| n == name) {
                    return Err(PlanError::BodyForUnprobed(n.clone()));
                }
                continue;
            }
        }
        let key = match &op.key.source {
            Some(KeySource::Header { name, .. }) => KeyPlace::Header(name.clone()),
            Some(KeySource::Body { field }) => KeyPlace::Body(field.clone()),
            Some(KeySource::Query { name, .. }) => KeyPlace::Query(name.clone()),
            None => KeyPlace::Header(op.settings.header.clone()),
        };
        let given = bodies
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice());
        let body = body::request(model, op, given, &settings.params);
        let body = body.and_then(|b| match (&key, &b.json) {
            (KeyPlace::Body(field), None) => Err(format!(
                "the key travels in the body field `{field}`, and the probe sets it only in a JSON body"
            )),
            _ => Ok(b),
        });
        let replay_header = op
            .responses
            .iter()
            .filter(|r| r.status.starts_with('2'))
            .flat_map(|r| r.headers.iter())
            .find(|h| h.to_ascii_lowercase().contains("replayed"))
            .cloned();
        let key_required = op.key.requirement == KeyRequirement::Required;
        let key_shape = KeyShape::of(model, op);
        // The spec's key rules may leave no key the probe can make.
        let body = body.and_then(|b| {
            KeyMaker::new("000000000000", &key_shape)?;
            Ok(b)
        });
        let mut checks = Vec::new();
        for check in CHECKS {
            let planned = match &body {
                Err(reason) => Err(format!("no request to send: {reason}")),
                Ok(b) => match check.kind {
                    // A first answer of 5xx is asked once more with its key,
                    // to tell a transient failure from a stored one.
                    CheckKind::Replay => Ok(3),
                    CheckKind::KeyBounds => Ok(2),
                    CheckKind::PayloadMismatch => match b.variant {
                        Some(_) => Ok(1),
                        None => Err("no second valid body differs from the first in a field the probe can change; give one with `--body`".into()),
                    },
                    CheckKind::CallerIsolation => match settings.second_caller {
                        Some(_) => Ok(1),
                        None => Err("no `--second-caller` was given".into()),
                    },
                    CheckKind::ConcurrentDuplicates => Ok(settings.concurrency * settings.rounds),
                    CheckKind::KeyRequired if !key_required => Err("the key is optional".into()),
                    CheckKind::KeyRequired => Ok(2),
                    CheckKind::FailedNotStored => match b.invalid {
                        Some(_) => Ok(2),
                        None => Err("the probe cannot make a body the spec forbids that is otherwise the same; give the operation a body schema with a required field".into()),
                    },
                },
            };
            checks.push((*check, planned));
        }
        targets.push(Target {
            index,
            label: name.clone(),
            key,
            key_required,
            key_shape,
            replay_header,
            read_back: read_back(model, op),
            body,
            checks,
        });
    }
    if targets.is_empty() {
        return Err(PlanError::NothingKeyed {
            selected: if only.is_empty() {
                ""
            } else {
                " among the selected operations"
            },
        });
    }
    Ok(Plan { targets, not_sent })
}
