use crate::audit::{Findings, Rule, Severity};
use crate::model::{Model, RetryClass};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM012",
    slug: "phases-without-key",
    severity: Severity::Error,
    summary: "an operation declares phases but accepts no idempotency key",
    docs: r#"## What it does
Flags an operation that lists `phases` but is not keyed.

## Why is this bad?
Recovery points are found by the idempotency key: a retry carrying the same
key resumes after the last foreign call that finished. Without a key, a retry
is indistinguishable from a new request, so it starts from the first phase and
repeats every foreign call the phases were meant to protect.

## Example
```yaml
post:
  x-idempotency:
    effect: external
    phases: [charge_card, send_receipt]
```

Use instead:
```yaml
post:
  x-idempotency:
    effect: external
    key: required
    phases: [charge_card, send_receipt]
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in &model.operations {
        let Some(phases) = &op.phases else { continue };
        if op.class == RetryClass::Keyed {
            continue;
        }
        out.operation(
            op,
            phases.pos,
            format!(
                "{} {} declares phases but accepts no idempotency key to resume them by",
                op.method, op.path
            ),
            Some("add `key: required` and the key header parameter".into()),
        );
    }
}
