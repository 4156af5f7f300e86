use crate::audit::{Findings, Rule, Severity};
use crate::model::{BODY_KEY_FIELD, KeySource, Model, Operation};
use crate::vocab::{IdempotencyExt, KeyIn, KeyRequirement};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM010",
    slug: "key-parameter-shape",
    severity: Severity::Warning,
    summary: "the key parameter is not a bounded header string, or disagrees with `key:`",
    docs: r#"## What it does
Checks the idempotency-key parameter: it is a header (not a query or path
parameter), its schema is a string with a `maxLength` of at most the
configured `key-max-length` (255 by default), and its `required` agrees with
`x-idempotency.key`. With `key-in: body`, the request body has an
`idempotency_key` field.

## Why is this bad?
A key in the query string ends up in access logs and caches. Without a
`maxLength`, integrators learn the limit from a production 400. And when the
parameter says "optional" while `key:` says "required" (or the parameter is
missing), generated clients and the docs page disagree with the server.

## Example
```yaml
parameters:
  - name: Idempotency-Key
    in: header
    schema: { type: string }
```

Use instead:
```yaml
parameters:
  - name: Idempotency-Key
    in: header
    required: true
    schema: { type: string, minLength: 1, maxLength: 255 }
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in &model.operations {
        check_operation(op, &model.root.idempotency, out);
    }
}

fn check_operation(op: &Operation, root: &IdempotencyExt, out: &mut Findings<'_>) {
    let limit = op.settings.key_max_length;
    if let Some(p) = op.key.misplaced.and_then(|i| op.parameters.get(i)) {
        out.operation(
            op,
            p.pos,
            format!(
                "the idempotency key `{}` is a {} parameter",
                p.name, p.location
            ),
            Some(format!(
                "send it in the `{}` header: query strings end up in logs and caches",
                op.settings.header
            )),
        );
    }
    let declared = op.key.declared;
    let header = match &op.key.source {
        Some(KeySource::Header { parameter, .. }) => parameter.and_then(|i| op.parameters.get(i)),
        _ => None,
    };
    // A key parameter the policy ignores because `key: none` was declared.
    let ignored = (declared.map(|d| d.value) == Some(KeyRequirement::None))
        .then(|| {
            op.parameters.iter().find(|p| {
                p.location == "header"
                    && (p.name.eq_ignore_ascii_case(&op.settings.header)
                        || crate::model::COMMON_KEY_HEADERS
                            .iter()
                            .any(|h| h.eq_ignore_ascii_case(&p.name)))
            })
        })
        .flatten();
    if let (Some(p), Some(d)) = (ignored, declared) {
        out.operation(
            op,
            d.pos,
            format!(
                "`key: none` but the operation declares the `{}` header",
                p.name
            ),
            Some("remove the parameter, or declare `key: optional` or `required`".into()),
        );
    }
    if let Some(p) = header {
        if p.schema_type.as_deref().is_some_and(|t| t != "string") {
            out.operation(
                op,
                p.pos,
                format!(
                    "key parameter `{}` is of type `{}`, not a string",
                    p.name,
                    p.schema_type.as_deref().unwrap_or("")
                ),
                Some("keys are opaque strings such as UUIDs or `order-739-confirm`".into()),
            );
        }
        match p.max_length {
            None => out.operation(
                op,
                p.pos,
                format!("key parameter `{}` has no `maxLength`", p.name),
                Some(format!("add `maxLength: {limit}` so integrators know the limit before production does")),
            ),
            Some(n) if n > u64::from(limit) => out.operation(
                op,
                p.pos,
                format!("key parameter `{}` allows {n} characters, more than the {limit} the server accepts", p.name),
                Some(format!("set `maxLength: {limit}`")),
            ),
            Some(_) => {}
        }
        if let Some(d) = declared {
            let param_says = if p.required {
                KeyRequirement::Required
            } else {
                KeyRequirement::Optional
            };
            if d.value != KeyRequirement::None && d.value != param_says {
                // At the operation's `key:`, not the parameter: a shared
                // parameter would put every operation's finding on one line,
                // where identical findings collapse into one.
                out.operation(
                    op,
                    d.pos,
                    format!(
                        "`key: {}` but parameter `{}` is {}",
                        d.value,
                        p.name,
                        if p.required { "required" } else { "optional" }
                    ),
                    Some(format!(
                        "make them agree: `required: {}` on the parameter",
                        d.value == KeyRequirement::Required
                    )),
                );
            }
        }
    } else if let Some(d) = declared.filter(|d| d.value != KeyRequirement::None) {
        match &op.key.source {
            Some(KeySource::Header { name, .. }) => out.operation(
                op,
                d.pos,
                format!(
                    "`key: {}` but the operation does not declare the `{name}` header",
                    d.value
                ),
                Some("declare the header parameter so clients and docs show it".into()),
            ),
            Some(KeySource::Body { field }) => {
                let has_field = op
                    .request_body
                    .as_ref()
                    .is_some_and(|b| b.properties.iter().any(|p| p == field));
                if !has_field {
                    out.operation(
                        op,
                        d.pos,
                        format!("`key-in: body` but the request body has no `{BODY_KEY_FIELD}` field"),
                        Some(format!("add `{BODY_KEY_FIELD}` (a string with `maxLength: {limit}`) to the request body schema")),
                    );
                }
            }
            None => {}
        }
    } else if declared.is_none()
        && let Some(key_in) = op.ext.key_in.filter(|k| k.value == KeyIn::Body)
        // Set on this operation, not inherited: a root `key-in: body` does
        // not make every operation without a body field promise a key.
        && root.key_in.is_none_or(|r| r.pos != key_in.pos)
        && !op.request_body.as_ref().is_some_and(|b| b.properties.iter().any(|p| p == BODY_KEY_FIELD))
    {
        // Without the field the operation takes no key at all, so the
        // `key-in: body` it asked for is silently ignored.
        out.operation(
            op,
            key_in.pos,
            format!("`key-in: body` but the request body has no `{BODY_KEY_FIELD}` field"),
            Some(format!("add `{BODY_KEY_FIELD}` (a string with `maxLength: {limit}`) to the request body schema")),
        );
    }
}
