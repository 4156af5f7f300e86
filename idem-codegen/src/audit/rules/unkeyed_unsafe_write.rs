use crate::audit::{Findings, Rule, Severity};
use crate::model::{BODY_KEY_FIELD, Model, RetryClass};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM001",
    slug: "unkeyed-unsafe-write",
    severity: Severity::Error,
    summary: "a state-changing operation is unsafe to retry and has neither a key nor a warning",
    docs: r#"## What it does
Flags every operation of class `unsafe`: it changes state in a way that is not
idempotent (a POST or PATCH with no declared effect, or any method whose
`x-idempotency.effect` is `create`, `append`, `increment`, `decrement` or
`external`), it accepts no idempotency key, and it carries no `unsafe-retry`
warning for integrators.

## Why is this bad?
Networks fail after the server acted and before the client heard back. The
client cannot tell "never arrived" from "done, answer lost", so it retries,
and every retry repeats the effect: a second charge, a second payout. The HTTP
method is no protection: RFC 9110 calls PUT and DELETE idempotent, but a PUT
that appends a note or a DELETE that decrements a balance breaks that promise,
and RFC 9110 says nothing about idempotency keys at all. Verify what the
operation does; do not trust its method.

## Example
```yaml
paths:
  /v2/orders/{id}/notes:
    put:
      x-idempotency:
        effect: append      # each call adds an entry to the activity log
```

Use instead:
```yaml
paths:
  /v2/orders/{id}/notes:
    put:
      x-idempotency:
        effect: append
        key: required
      parameters:
        - $ref: '#/components/parameters/IdempotencyKey'
```
or, when a key is not possible yet, warn integrators:
```yaml
      x-idempotency:
        effect: append
        unsafe-retry: "Each call appends a note; read the log before retrying."
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in model
        .operations
        .iter()
        .filter(|o| o.class == RetryClass::Unsafe)
    {
        let message = match op.declared_effect {
            Some(effect) if op.method.default_effect().is_some() => format!(
                "{} {} declares effect `{}`, which breaks the idempotency RFC 9110 promises for {}, and it accepts no idempotency key",
                op.method, op.path, effect.value, op.method
            ),
            Some(effect) => format!(
                "{} {} has effect `{}` and accepts no idempotency key",
                op.method, op.path, effect.value
            ),
            None => format!(
                "{} {} is not idempotent and accepts no idempotency key",
                op.method, op.path
            ),
        };
        let body_key = op
            .request_body
            .as_ref()
            .is_some_and(|b| b.properties.iter().any(|p| p == BODY_KEY_FIELD));
        let help = if body_key {
            format!(
                "the request body has an `{BODY_KEY_FIELD}` field; if that is the key, declare `x-idempotency: {{ key-in: body }}`"
            )
        } else {
            format!(
                "accept an `{}` header (`x-idempotency: {{ key: required }}` and the parameter), or warn integrators with `unsafe-retry: \"…\"`",
                op.settings.header
            )
        };
        out.operation(op, op.pos, message, Some(help));
    }
}
