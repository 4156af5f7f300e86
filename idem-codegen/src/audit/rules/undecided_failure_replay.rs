use crate::audit::{Findings, Rule, Severity};
use crate::model::{Model, RetryClass};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM009",
    slug: "undecided-failure-replay",
    severity: Severity::Warning,
    summary: "no failure-replay decision reaches a keyed operation",
    docs: r#"## What it does
Flags a keyed operation when neither it nor the document root sets
`x-idempotency.failure-replay`.

## Why is this bad?
When the first attempt failed, what should its retry get? `verbatim` replays
the stored failure as it was, so the outcome of a key never changes;
`reattempt` runs the request again, which is only safe when the failure had no
side effect. Both are defensible and payment APIs have shipped each; leaving it
undecided means the server does one thing, the docs say nothing, and
integrators guess.

## Example
```yaml
x-idempotency:
  header: Idempotency-Key
```

Use instead:
```yaml
x-idempotency:
  header: Idempotency-Key
  failure-replay: verbatim
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in model
        .operations
        .iter()
        .filter(|o| o.class == RetryClass::Keyed)
    {
        if op.settings.failure_replay.is_some() {
            continue;
        }
        out.operation(
            op,
            op.pos,
            format!(
                "keyed operation {} {} has no failure-replay decision",
                op.method, op.path
            ),
            Some(
                "set `failure-replay: verbatim` or `reattempt` under the root `x-idempotency`"
                    .into(),
            ),
        );
    }
}
