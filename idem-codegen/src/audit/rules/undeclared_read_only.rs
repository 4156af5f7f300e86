use crate::audit::{Findings, Rule, Severity};
use crate::model::Model;

pub(crate) static RULE: Rule = Rule {
    code: "IDEM016",
    slug: "undeclared-read-only",
    severity: Severity::Warning,
    summary: "a POST reads as a query in its own words but declares no effect",
    docs: r#"## What it does
Flags a POST with no declared `x-idempotency.effect` and no key whose own
words say it changes nothing: its summary, operationId or last path word leads
with a query verb (search, query, list, get, describe, validate, preview,
estimate, calculate, Google's `testIamPermissions`), or its text says "does
not create", "without saving" or "dry run". A write verb in its summary,
operationId or path (create, update, send, cancel, …) keeps it from being
read as a query.

Such a POST is not reported as `unkeyed-unsafe-write`: RPC-style APIs send
reads as POSTs, and an error on every one of them teaches a team to switch
the gate off. It is not retried either: the words are evidence, not a
promise, so the generated client and the docs page treat it as `unsafe`
until the spec declares `effect: read`.

## Why is this bad?
Until the effect is declared, integrators and generated clients cannot tell
this query from a write, and will not retry it after a timeout. Declaring it
makes the read retryable and the audit's judgement explicit; if the words are
wrong and the call does write, a key or an `unsafe-retry` warning is what it
needs instead.

## Example
```yaml
paths:
  /v1/orders/search:
    post:
      summary: Search orders by status and date
```

Use instead:
```yaml
paths:
  /v1/orders/search:
    post:
      summary: Search orders by status and date
      x-idempotency:
        effect: read
```
`idem suggest openapi.yaml` writes this declaration for every such POST, with
the words that decided it.
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in &model.operations {
        let Some(evidence) = op.undeclared_read() else {
            continue;
        };
        out.operation_evidence(
            op,
            op.pos,
            format!(
                "{} {} reads as a query (its {}: \"{}\") but declares no effect, so it is not retried",
                op.method, op.path, evidence.field, evidence.words
            ),
            Some(
                "declare `x-idempotency: { effect: read }` to confirm; if it does write, give it a key or an `unsafe-retry` warning"
                    .to_owned(),
            ),
            Some(evidence),
        );
    }
}
