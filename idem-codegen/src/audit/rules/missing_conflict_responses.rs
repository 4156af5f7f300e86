use crate::audit::{Findings, Rule, Severity};
use crate::model::{Model, Operation, RetryClass};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM008",
    slug: "missing-conflict-responses",
    severity: Severity::Warning,
    summary: "a keyed operation does not document both key conflicts",
    docs: concat!(
        r#"## What it does
For each keyed operation, checks that the responses document both conflicts
the key protocol answers with, each by what it says:
- the in-flight duplicate: a `409` that names `idempotency_key_in_use` or
  says the request is still running (`in use`, `in progress`, `in flight`,
  `still running`, `concurrent`);
- the payload mismatch: a `409` or `422` that names `idempotency_key_reused`
  or says the key came with a different request (`reused`, `mismatch`,
  `different`, `another request`, `does not match`).

One `409` documents both when it says both. A `409` or `422` is read from
its description and its examples; its status alone documents nothing, so a
business conflict ("the transfer can no longer be cancelled") is not taken
for the key's. A `409` that names neither conflict is reported as such.

## Why is this bad?
The two conflicts ask for opposite reactions. In-flight means "the first
attempt is still running: wait and retry with the same key". Mismatch means
"this key was used for a different request: a client bug; never retry".
Integrators who cannot tell them apart either give up on a request that was
about to succeed or hammer the server with a request that can never succeed.
A business `409` on the same operation asks for a third reaction; only the
codes let a client tell the three apart.

## Example
```yaml
responses:
  "201": { description: Created }
  "409": { description: The transfer can no longer be cancelled }
```

Use instead:
one `409` that names both codes (the generated server's default), and
the business conflict's own:
```yaml
responses:
  "201": { description: Created }
  "409":
    description: >-
      `idempotency_key_in_use`: a request with this key is still running;
      retry later with the same key. `idempotency_key_reused`: this key was
      sent with a different request; do not retry. `transfer_final`: the
      transfer can no longer be cancelled.
```
A server that answers the mismatch with `422` documents it there instead,
and the `409` names `idempotency_key_in_use` alone.

"#,
        keyed_operation_example!()
    ),
    check,
};

const IN_FLIGHT_WORDS: &[&str] = &[
    "idempotency_key_in_use",
    "in use",
    "in progress",
    "in flight",
    "in-flight",
    "still running",
    "still being processed",
    "concurrent",
];

const MISMATCH_WORDS: &[&str] = &[
    "idempotency_key_reused",
    "reused",
    "mismatch",
    "different",
    "another request",
    "another body",
    "other request",
    "does not match",
    "doesn't match",
];

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in model
        .operations
        .iter()
        .filter(|o| o.class == RetryClass::Keyed)
    {
        let conflict = op.response("409");
        let in_flight = conflict.is_some_and(|r| mentions(&r.text, IN_FLIGHT_WORDS));
        let mismatch = [conflict, op.response("422")]
            .into_iter()
            .flatten()
            .any(|r| mentions(&r.text, MISMATCH_WORDS));
        if in_flight && mismatch {
            continue;
        }
        if let Some(r) = conflict.filter(|_| !in_flight && !mismatch) {
            out.operation(
                op,
                r.pos,
                format!(
                    "the `409` of keyed operation {} {} names neither key conflict (`idempotency_key_in_use`, `idempotency_key_reused`)",
                    op.method, op.path
                ),
                Some("if the key protocol answers this `409` too, name its codes in the description or an example; as written it reads as a business conflict, and integrators cannot tell \"wait and retry\" from \"never retry\" (`idem explain IDEM008` shows a complete keyed operation)".into()),
            );
            continue;
        }
        let missing = match (in_flight, mismatch) {
            (false, false) => "either key conflict (in-flight `409`, payload mismatch `409`/`422`)",
            (false, true) => "the in-flight conflict (`409` `idempotency_key_in_use`)",
            _ => "the payload-mismatch conflict (`409`/`422` `idempotency_key_reused`)",
        };
        out.operation(
            op,
            responses_pos(op),
            format!("keyed operation {} {} does not document {missing}", op.method, op.path),
            Some("document both, each with its machine-readable code, so integrators can tell \"wait and retry\" from \"never retry\" (`idem explain IDEM008` shows a complete keyed operation)".into()),
        );
    }
}

fn mentions(text: &str, words: &[&str]) -> bool {
    let lower = text.to_ascii_lowercase();
    words.iter().any(|w| lower.contains(w))
}

fn responses_pos(op: &Operation) -> crate::source::Pos {
    op.responses_pos.unwrap_or(op.pos)
}
