//! `idem suggest`: the declarations the audit can decide, written as an
//! OpenAPI Overlay 1.0 document for a person to review and commit beside the
//! spec, the way `cargo fix` proposes and a person accepts.
//!
//! What it declares, each action with a comment that says why:
//! - the effects read from the operations' words (a PUT that adds, a POST
//!   that reads), quoting the words;
//! - the keys read from the inputs' descriptions, quoting them;
//! - on every other unkeyed unsafe write, the key header parameter (with its
//!   `maxLength`) and `key: required`;
//! - on every keyed operation, the conflicts with their codes;
//! - `Retry-After` on every `429` and `503`;
//! - a `failure-replay` decision at the root.
//!
//! What needs a person stays for the audit to report once the overlay is
//! applied: an `external` effect needs `phases`, a key scope needs a caller.
//! Only nodes of the spec's root file can be reached by an overlay: an
//! operation or response defined in another file through `$ref` is listed in
//! a comment instead, with the file to declare it in.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::load::{Version, ref_target};
use crate::model::{KeySource, Method, Model, Operation, RetryClass};
use crate::tree::Node;
use crate::vocab::{Effect, KeyRequirement};

/// The overlay `idem suggest` writes, with what it could not reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suggestion {
    /// The overlay document, YAML.
    pub text: String,
    /// How many actions it holds.
    pub actions: usize,
    /// Declarations an overlay cannot reach (defined in another file) or
    /// that need a person: `METHOD /path — why`.
    pub unreachable: Vec<String>,
}

/// One overlay action, before it is written.
struct Action {
    comment: Vec<String>,
    target: String,
    /// The update's YAML, indented under `update:`.
    update: String,
}

/// The overlay that declares what `model`'s audit can decide.
pub fn suggest(model: &Model) -> Suggestion {
    let root = model.document.root();
    let swagger = model.document.version == Version::V2_0;
    let header = model
        .root
        .idempotency
        .header
        .as_ref()
        .map_or("Idempotency-Key", |h| h.value.as_str())
        .to_owned();
    let max = model
        .root
        .idempotency
        .key_max_length
        .map_or(255, |l| l.value);
    let mut actions = Vec::new();
    let mut unreachable = Vec::new();
    let mut advice: Vec<String> = Vec::new();
    let mut keyed_after = false;
    let mut touched_responses: BTreeSet<String> = BTreeSet::new();

    for op in &model.operations {
        let Some(target) = operation_target(root, op) else {
            let throttled = op
                .responses
                .iter()
                .any(|r| (r.status == "429" || r.status == "503") && !r.has_header("Retry-After"));
            if needs_declaration(op) || op.class == RetryClass::Keyed || throttled {
                unreachable.push(format!(
                    "{} {} — defined in {}; declare it there",
                    op.method,
                    op.path,
                    model.document.sources.display(op.pos.file)
                ));
            }
            keyed_after |= op.class == RetryClass::Keyed;
            continue;
        };
        let mut idem: Vec<String> = Vec::new();
        let mut comment: Vec<String> = Vec::new();
        let mut parameters = String::new();

        // The effect the words say, declared where it decides the class
        // (a PUT or DELETE that repeats, a POST that reads). A POST that
        // says it sends or charges is unsafe by its method already: the
        // words are passed on as advice, since declaring `external` asks
        // for phases only a person can name.
        let inferred = op
            .inferred_effect
            .as_ref()
            .filter(|_| op.declared_effect.is_none());
        if let Some(inferred) = inferred
            && op.method.default_effect().is_none()
            && inferred.value == Effect::External
        {
            let e = &inferred.evidence;
            advice.push(format!(
                "{} {}: its {} says \"{}\"; if it calls another system, declare `effect: external` and its `phases`",
                op.method,
                op.path,
                e.field,
                one_line(&e.words)
            ));
        }
        if let Some(inferred) = inferred
            && (op.undeclared_read().is_some()
                || (op.method.default_effect().is_some() && !inferred.value.is_idempotent()))
        {
            comment.push(said(
                model,
                op,
                &inferred.evidence,
                &format!("effect `{}`", inferred.value.as_str()),
            ));
            idem.push(format!("effect: {}", inferred.value.as_str()));
        }
        let reads = op.undeclared_read().is_some();

        // The key the inputs describe.
        let mut keyed = op.class == RetryClass::Keyed;
        if let (Some(e), None, Some(source)) =
            (&op.key.evidence, op.key.declared, op.key.source.as_ref())
        {
            comment.push(said(model, op, e, "the key"));
            idem.push(format!("key: {}", op.key.requirement.as_str()));
            idem.push(format!("key-in: {}", source.location()));
            if let KeySource::Header { name, .. } = source
                && !name.eq_ignore_ascii_case(&header)
            {
                idem.push(format!("header: {}", yaml_str(name)));
            }
        }

        // Every other unkeyed unsafe write takes the key header, unless
        // the spec says outright that it takes none (`key: none`): that
        // decision is a person's to revisit.
        let refused = op
            .key
            .declared
            .is_some_and(|d| d.value == KeyRequirement::None);
        if refused && op.class == RetryClass::Unsafe && !reads {
            unreachable.push(format!(
                "{} {} — declares `key: none`; give it a key or an `unsafe-retry` warning",
                op.method, op.path
            ));
        }
        if op.class == RetryClass::Unsafe && !reads && !refused {
            comment.push(format!(
                "{} {} is unsafe to retry and takes no key: it requires `{header}`",
                op.method, op.path
            ));
            idem.push("key: required".to_owned());
            parameters = key_parameter(&header, max, swagger);
            keyed = true;
        }
        keyed_after |= keyed;

        if !idem.is_empty() || !parameters.is_empty() {
            let mut update = format!("x-idempotency: {{ {} }}\n", idem.join(", "));
            if idem.is_empty() {
                update.clear();
            }
            update.push_str(&parameters);
            actions.push(Action {
                comment,
                target: target.clone(),
                update,
            });
        }

        // The conflicts of a keyed operation, with their codes.
        if keyed {
            conflicts(
                model,
                op,
                &target,
                swagger,
                &mut actions,
                &mut touched_responses,
                &mut unreachable,
            );
        }
        // Retry-After on 429 and 503.
        for r in op
            .responses
            .iter()
            .filter(|r| (r.status == "429" || r.status == "503") && !r.has_header("Retry-After"))
        {
            let Some(response_target) = response_target(root, &target, op, &r.status) else {
                unreachable.push(format!(
                    "{} {} — its `{}` is defined in another file; declare `Retry-After` there",
                    op.method, op.path, r.status
                ));
                continue;
            };
            if !touched_responses.insert(format!("{response_target}#retry-after")) {
                continue;
            }
            actions.push(Action {
                comment: vec![format!(
                    "`{}` without `Retry-After`: clients wait as long as the server asks",
                    r.status
                )],
                target: response_target,
                update: retry_after(swagger),
            });
        }
    }

    // A failure-replay decision, when keyed operations have none.
    if keyed_after
        && model.root.idempotency.failure_replay.is_none()
        && model
            .operations
            .iter()
            .all(|o| o.settings.failure_replay.is_none())
    {
        actions.insert(
            0,
            Action {
                comment: vec![
                    "A stored failure is replayed as it was (`verbatim`), so a retry never runs"
                        .to_owned(),
                    "a request twice; `reattempt` re-runs one whose failure had no side effect."
                        .to_owned(),
                    "Choose; the docs page states the decision to integrators.".to_owned(),
                ],
                target: "$".to_owned(),
                update: "x-idempotency: { failure-replay: verbatim }\n".to_owned(),
            },
        );
    }

    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Written by `idem suggest`: what the audit could decide, with why."
    );
    let _ = writeln!(
        text,
        "# Review each action, then commit this file beside the spec and pass it"
    );
    let _ = writeln!(
        text,
        "# with --overlay; what the audit still reports needs a person."
    );
    for line in &unreachable {
        let _ = writeln!(text, "# Not reachable by an overlay: {line}.");
    }
    for line in &advice {
        let _ = writeln!(text, "# For a person: {line}.");
    }
    text.push_str("overlay: 1.0.0\ninfo:\n");
    let _ = writeln!(
        text,
        "  title: {}",
        yaml_str(&format!("{}: idempotency declarations", model.title))
    );
    text.push_str("  version: 1.0.0\n");
    text.push_str("actions:\n");
    if actions.is_empty() {
        // An overlay holds at least one action: this one changes nothing.
        text.push_str("  # Nothing to declare: the audit decides nothing more for this spec.\n");
        text.push_str("  - target: \"$\"\n    update: {}\n");
    }
    for action in &actions {
        for line in &action.comment {
            let _ = writeln!(text, "  # {line}");
        }
        let _ = writeln!(text, "  - target: {}", yaml_str(&action.target));
        text.push_str("    update:\n");
        for line in action.update.lines() {
            let _ = writeln!(text, "      {line}");
        }
    }
    Suggestion {
        text,
        actions: actions.len(),
        unreachable,
    }
}

/// "METHOD /path: its FIELD says "WORDS" (file:line:column): WHAT".
fn said(model: &Model, op: &Operation, e: &crate::model::Evidence, what: &str) -> String {
    format!(
        "{} {}: its {} says \"{}\" ({}:{}:{}): {what}",
        op.method,
        op.path,
        e.field,
        one_line(&e.words),
        model.document.sources.display(e.pos.file),
        e.pos.line,
        e.pos.column
    )
}

/// Whether the audit asks something of `op` that an action would declare.
fn needs_declaration(op: &Operation) -> bool {
    op.class == RetryClass::Unsafe || op.key.evidence.is_some() || op.inferred_effect.is_some()
}

/// The JSONPath of `op`'s node in the root file, when it is written there
/// (not behind a `$ref` to another file or inside one).
fn operation_target(root: &Node, op: &Operation) -> Option<String> {
    if op.pos.file != root.pos.file {
        return None;
    }
    let item = root.get("paths")?.get(&op.path)?;
    if ref_target(item).is_some() {
        return None;
    }
    let method = method_key(op.method);
    let node = item.get(method)?;
    if ref_target(node).is_some() {
        return None;
    }
    Some(format!("$.paths[{}].{method}", path_name(&op.path)))
}

/// Where `op`'s response `status` can be updated: inline, or the
/// component it names in the root file.
fn response_target(root: &Node, op_target: &str, op: &Operation, status: &str) -> Option<String> {
    let item = root.get("paths")?.get(&op.path)?;
    let response = item
        .get(method_key(op.method))?
        .get("responses")?
        .get(status)?;
    match ref_target(response) {
        None => Some(format!("{op_target}.responses[{}]", path_name(status))),
        Some(reference) => {
            let pointer = reference.strip_prefix("#/")?;
            let mut target = "$".to_owned();
            for part in pointer.split('/') {
                let part = part.replace("~1", "/").replace("~0", "~");
                let _ = write!(target, "[{}]", path_name(&part));
            }
            crate::load::pointer(root, &format!("/{pointer}"))?;
            Some(target)
        }
    }
}

fn method_key(method: Method) -> &'static str {
    Method::ALL
        .iter()
        .find(|(m, _)| *m == method)
        .map_or("post", |(_, k)| k)
}

/// A name selector (RFC 9535): single-quoted, `\` and `'` escaped.
fn path_name(name: &str) -> String {
    format!("'{}'", name.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A YAML scalar: plain when it is safe, else double-quoted (JSON's escapes).
fn yaml_str(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

fn one_line(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 100 {
        let cut: String = line.chars().take(100).collect();
        format!("{cut}…")
    } else {
        line
    }
}

/// The key header parameter, as the document's version writes one.
fn key_parameter(header: &str, max: u32, swagger: bool) -> String {
    let description = yaml_str(
        "A key you mint once per logical request and send unchanged on every retry; the server runs the request once and replays its answer.",
    );
    if swagger {
        format!(
            "parameters:\n  - name: {}\n    in: header\n    required: true\n    type: string\n    maxLength: {max}\n    description: {description}\n",
            yaml_str(header)
        )
    } else {
        format!(
            "parameters:\n  - name: {}\n    in: header\n    required: true\n    schema: {{ type: string, maxLength: {max} }}\n    description: {description}\n",
            yaml_str(header)
        )
    }
}

fn retry_after(swagger: bool) -> String {
    let description = yaml_str("Seconds to wait, or an HTTP date, before retrying.");
    if swagger {
        format!("headers:\n  Retry-After:\n    type: string\n    description: {description}\n")
    } else {
        format!(
            "headers:\n  Retry-After:\n    schema: {{ type: string }}\n    description: {description}\n"
        )
    }
}

/// The `409` that names both key conflicts: added, or its description
/// extended when the operation already documents a `409` for its own
/// conflicts.
fn conflicts(
    model: &Model,
    op: &Operation,
    target: &str,
    swagger: bool,
    actions: &mut Vec<Action>,
    touched: &mut BTreeSet<String>,
    unreachable: &mut Vec<String>,
) {
    const CODES: &str = "`idempotency_key_in_use`: a request with this key is still in flight; retry later with the same key. `idempotency_key_reused`: this key was used with a different request; never retry it.";
    let lower = |s: &str| s.to_ascii_lowercase();
    let existing = op.response("409");
    if existing.is_some_and(|r| {
        let t = lower(&r.text);
        (t.contains("idempotency_key_in_use")
            || t.contains("in use")
            || t.contains("in progress")
            || t.contains("in flight"))
            && (t.contains("reused") || t.contains("mismatch") || t.contains("different"))
    }) {
        return;
    }
    let root = model.document.root();
    let description = match existing.and_then(|r| r.description.as_deref()) {
        // Its own words end as a sentence before the codes begin.
        Some(own) => {
            let own = own.trim_end();
            let stop = if own.ends_with(['.', '!', '?', ':']) {
                ""
            } else {
                "."
            };
            format!("{own}{stop} {CODES}")
        }
        None => format!("Idempotency-key conflict. {CODES}"),
    };
    let update = if swagger || existing.is_some() {
        format!("description: {}\n", yaml_str(&description))
    } else {
        format!(
            "description: {}\ncontent:\n  application/json:\n    schema:\n      type: object\n      properties:\n        code: {{ type: string, enum: [idempotency_key_in_use, idempotency_key_reused] }}\n        message: {{ type: string }}\n",
            yaml_str(&description)
        )
    };
    let response = if existing.is_some() {
        match response_target(root, target, op, "409") {
            Some(t) => t,
            None => {
                unreachable.push(format!(
                    "{} {} — its `409` is defined in another file; name both key conflicts there",
                    op.method, op.path
                ));
                return;
            }
        }
    } else {
        format!("{target}.responses")
    };
    if !touched.insert(format!("{response}#409")) {
        return;
    }
    let (target, update) = if existing.is_some() {
        (response, update)
    } else {
        let mut nested = "'409':\n".to_owned();
        for line in update.lines() {
            let _ = writeln!(nested, "  {line}");
        }
        (response, nested)
    };
    actions.push(Action {
        comment: vec![format!(
            "{} {} is keyed: its `409` names both key conflicts",
            op.method, op.path
        )],
        target,
        update,
    });
}
