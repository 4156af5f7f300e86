use crate::audit::{Findings, Rule, Severity};
use crate::model::Model;

pub(crate) static RULE: Rule = Rule {
    code: "IDEM007",
    slug: "invalid-extension",
    severity: Severity::Error,
    summary: "an x-idempotency or x-retry field is unknown or has a bad value",
    docs: r#"## What it does
Reports every unknown field, bad value, bad duration and misplaced field in
`x-idempotency` and `x-retry`, with a did-you-mean when a known name is close.
This rule cannot be waived.

## Why is this bad?
These extensions are the retry contract. A typo such as `replay-windw: 7d` or
`effect: apend` would otherwise be ignored and the default would silently
apply: the audit would pass while the server kept records for a day and the
client treated an appending call as safe to retry.

## Example
```yaml
x-idempotency:
  replay-windw: 7d
  lock-timeout: 60
```

Use instead:
```yaml
x-idempotency:
  replay-window: 7d
  lock-timeout: 60s
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for error in &model.extension_errors {
        out.document(error.pos, error.message.clone(), error.help.clone());
    }
}
