use crate::audit::{Findings, Rule, Severity};
use crate::model::{Model, Operation, RetryClass};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM013",
    slug: "undeclared-protocol-refusals",
    severity: Severity::Warning,
    summary: "a keyed operation does not declare the refusals of the key protocol",
    docs: concat!(
        r#"## What it does
For each keyed operation, checks that its responses declare the statuses the
idempotency-key protocol itself answers with, whatever the handler does:

- `400`: the key is missing (`idempotency_key_missing`) or malformed
  (`idempotency_key_invalid`: empty, too long, not visible ASCII);
- `503`: the server is at its admission limit (`overloaded`, with
  `Retry-After`), or its key store is unavailable;
- `504`: the caller's deadline (`Idem-Timeout-Ms`) passed before the answer
  (`deadline_exceeded`).

A range (`4XX`, `5XX`) or `default` counts as declaring them.

## Why is this bad?
Integrators generate clients from the spec, in languages idem does not
generate for. A status the spec does not declare reaches their code as an
"unexpected response": their client cannot tell "fix the key" (`400`, never
retry) from "come back later with the same key" (`503`) or "ask again with
the same key to learn what happened" (`504`). Peer testers (Schemathesis,
Prism) flag every such answer as a contract break, and they are right.

## Example
```yaml
responses:
  "201": { description: Created }
  "409": { description: "`idempotency_key_in_use` or `idempotency_key_reused`" }
```

Use instead:
```yaml
responses:
  "201": { description: Created }
  "400": { description: "`idempotency_key_missing` or `idempotency_key_invalid`" }
  "409": { description: "`idempotency_key_in_use` or `idempotency_key_reused`" }
  "503":
    description: "`overloaded`: retry after the delay, with the same key"
    headers:
      Retry-After: { schema: { type: integer } }
  "504": { description: "`deadline_exceeded`: retry with the same key to learn the outcome" }
```

"#,
        keyed_operation_example!()
    ),
    check,
};

/// The statuses, each with what it means to a client.
const REFUSALS: &[(&str, &str)] = &[
    ("400", "a missing or malformed key"),
    ("503", "the admission limit or an unavailable key store"),
    ("504", "the caller's deadline passing"),
];

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in model
        .operations
        .iter()
        .filter(|o| o.class == RetryClass::Keyed && o.key.source.is_some())
    {
        let missing: Vec<String> = REFUSALS
            .iter()
            .filter(|(status, _)| !declares(op, status))
            .map(|(status, why)| format!("`{status}` ({why})"))
            .collect();
        if missing.is_empty() {
            continue;
        }
        out.operation(
            op,
            op.responses_pos.unwrap_or(op.pos),
            format!(
                "keyed operation {} {} leaves out the key protocol's own answers: {}",
                op.method,
                op.path,
                missing.join(", ")
            ),
            Some("declare each with its code, so clients generated from the spec handle the key protocol's own answers".into()),
        );
    }
}

/// Whether `status` is declared exactly, by its range (`5XX`) or by `default`.
fn declares(op: &Operation, status: &str) -> bool {
    let range = format!("{}XX", &status[..1]);
    op.responses.iter().any(|r| {
        r.status == status || r.status.eq_ignore_ascii_case(&range) || r.status == "default"
    })
}
