use crate::audit::{Findings, Rule, Severity};
use crate::model::{Model, Operation, RetryClass};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM008",
    slug: "missing-conflict-responses",
    severity: Severity::Warning,
    summary: "a keyed operation does not document both key conflicts",
    docs: r#"## What it does
For each keyed operation, checks that the responses document both conflicts:
the in-flight duplicate (`409`, code `idempotency_key_in_use`) and the payload
mismatch (`409` or `422`, code `idempotency_key_reused`). A single `409` counts
for both when its description or examples mention the mismatch (`reused`,
`mismatch`, `different`).

## Why is this bad?
The two conflicts ask for opposite reactions. In-flight means "the first
attempt is still running: wait and retry with the same key". Mismatch means
"this key was used for a different request: a client bug; never retry".
Integrators who cannot tell them apart either give up on a request that was
about to succeed or hammer the server with a request that can never succeed.

## Example
```yaml
responses:
  "201": { description: Created }
```

Use instead:
```yaml
responses:
  "201": { description: Created }
  "409": { description: "`idempotency_key_in_use`: a request with this key is still running; retry later" }
  "422": { description: "`idempotency_key_reused`: this key was used with a different request body" }
```
"#,
    check,
};

const MISMATCH_WORDS: &[&str] = &[
    "reused",
    "mismatch",
    "different",
    "does not match",
    "doesn't match",
];

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in model
        .operations
        .iter()
        .filter(|o| o.class == RetryClass::Keyed)
    {
        let in_flight = op.response("409").is_some();
        let mismatch = op.response("422").is_some()
            || op
                .response("409")
                .is_some_and(|r| mentions_mismatch(&r.text));
        let missing = match (in_flight, mismatch) {
            (true, true) => continue,
            (false, false) => "either key conflict (in-flight `409`, payload mismatch `409`/`422`)",
            (false, true) => "the in-flight conflict (`409` `idempotency_key_in_use`)",
            (true, false) => "the payload-mismatch conflict (`409`/`422` `idempotency_key_reused`)",
        };
        out.operation(
            op,
            responses_pos(op),
            format!("keyed operation {} {} does not document {missing}", op.method, op.path),
            Some("document both, each with its machine-readable code, so integrators can tell \"wait and retry\" from \"never retry\"".into()),
        );
    }
}

fn mentions_mismatch(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    MISMATCH_WORDS.iter().any(|w| lower.contains(w))
}

fn responses_pos(op: &Operation) -> crate::source::Pos {
    op.responses_pos.unwrap_or(op.pos)
}
