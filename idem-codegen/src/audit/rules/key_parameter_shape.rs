use crate::audit::{Findings, Rule, Severity};
use crate::model::{BODY_KEY_FIELD, KeySource, Model, Operation, is_common_key_header};
use crate::source::Pos;
use crate::vocab::{IdempotencyExt, KeyIn, KeyRequirement};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM010",
    slug: "key-parameter-shape",
    severity: Severity::Warning,
    summary: "the key parameter is not a bounded header string, or disagrees with `key:`",
    docs: concat!(
        r#"## What it does
Checks the idempotency key wherever the spec shows it, declared or inferred:
a key parameter is a header (not a query or path parameter); the header, or
the key-named request-body field (`idempotency_key`, `idempotencyKey`,
`IdempotencyKey`), is a string with a `maxLength` of at most the configured
`key-max-length` (255 by default); and its `required` agrees with
`x-idempotency.key` (the operation's own, or the document root's default).
`key: none` on an operation that shows a key header or field is reported, and
so is a `key:` or `key-in: body` on an operation that shows no key.

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
        keyed_operation_example!()
    ),
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in &model.operations {
        check_operation(op, &model.root.idempotency, out);
    }
}

/// The key as the spec shows it: a header parameter or a body field.
struct Shown<'o> {
    /// `parameter` or `field`, for messages.
    what: &'static str,
    name: &'o str,
    required: bool,
    schema_type: Option<&'o str>,
    max_length: Option<u64>,
    pos: Pos,
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
    if let Some(d) = declared.filter(|d| d.value == KeyRequirement::None) {
        none_but_shown(op, d.pos, out);
        return;
    }
    let shown = match &op.key.source {
        Some(KeySource::Body { field }) => op
            .request_body
            .as_ref()
            .and_then(|b| b.key_field(field))
            .map(|f| Shown {
                what: "field",
                name: &f.name,
                required: f.required,
                schema_type: f.schema_type.as_deref(),
                max_length: f.max_length,
                pos: f.pos,
            }),
        Some(source) => source
            .parameter()
            .and_then(|i| op.parameters.get(i))
            .map(|p| Shown {
                what: "parameter",
                name: &p.name,
                required: p.required,
                schema_type: p.schema_type.as_deref(),
                max_length: p.max_length,
                pos: p.pos,
            }),
        None => None,
    };
    if let Some(k) = &shown {
        check_shape(op, k, limit, out);
        if let Some(d) = declared {
            let shown_says = if k.required {
                KeyRequirement::Required
            } else {
                KeyRequirement::Optional
            };
            if d.value != shown_says {
                let state = if k.required { "required" } else { "optional" };
                let wants = d.value == KeyRequirement::Required;
                let help = Some(match k.what {
                    "field" if wants => format!(
                        "make them agree: list `{}` in the body schema's `required`",
                        k.name
                    ),
                    "field" => format!(
                        "make them agree: drop `{}` from the body schema's `required`",
                        k.name
                    ),
                    _ => format!("make them agree: `required: {wants}` on the parameter"),
                });
                if op.key.from_root() {
                    // The root's default disagrees with this operation's own
                    // key: say so where the key is, once per definition.
                    out.operation(
                        op,
                        k.pos,
                        format!(
                            "the document's `key: {}` but key {} `{}` is {state}",
                            d.value, k.what, k.name
                        ),
                        help,
                    );
                } else {
                    // At the operation's `key:`, not the parameter: a shared
                    // parameter would put every operation's finding on one
                    // line, where identical findings collapse into one.
                    out.operation(
                        op,
                        d.pos,
                        format!("`key: {}` but {} `{}` is {state}", d.value, k.what, k.name),
                        help,
                    );
                }
            }
        }
        return;
    }
    // The root's `key:` names no parameter or field on each operation: the
    // header (or field) is the document's, and generators add it.
    if let Some(d) = declared.filter(|_| !op.key.from_root()) {
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
            Some(KeySource::Body { field }) => out.operation(
                op,
                d.pos,
                format!("`key-in: body` but the request body has no `{field}` field"),
                Some(format!(
                    "add `{field}` (a string with `maxLength: {limit}`) to the request body schema"
                )),
            ),
            Some(KeySource::Query { .. }) | None => {}
        }
    } else if declared.is_none()
        && let Some(key_in) = op.ext.key_in.filter(|k| k.value == KeyIn::Body)
        // Set on this operation, not inherited: a root `key-in: body` does
        // not make every operation without a body field promise a key.
        && root.key_in.is_none_or(|r| r.pos != key_in.pos)
        && op.key.source.is_none()
    {
        // Without the field the operation takes no key at all, so the
        // `key-in: body` it asked for is silently ignored.
        out.operation(
            op,
            key_in.pos,
            format!("`key-in: body` but the request body has no `{BODY_KEY_FIELD}` field"),
            Some(format!(
                "add `{BODY_KEY_FIELD}` (a string with `maxLength: {limit}`) to the request body schema"
            )),
        );
    }
}

/// `key: none` on an operation whose spec shows a key header or body field.
fn none_but_shown(op: &Operation, at: Pos, out: &mut Findings<'_>) {
    let header = op.parameters.iter().find(|p| {
        p.location == "header"
            && (p.name.eq_ignore_ascii_case(&op.settings.header) || is_common_key_header(&p.name))
    });
    if let Some(p) = header {
        out.operation(
            op,
            at,
            format!(
                "`key: none` but the operation declares the `{}` header",
                p.name
            ),
            Some("remove the parameter, or declare `key: optional` or `required`".into()),
        );
    } else if let Some(f) = op.request_body.as_ref().and_then(|b| b.key_fields.first()) {
        out.operation(
            op,
            at,
            format!(
                "`key: none` but the request body has the key field `{}`",
                f.name
            ),
            Some("if the server deduplicates by it, declare `key: optional` or `required`".into()),
        );
    }
}

fn check_shape(op: &Operation, k: &Shown<'_>, limit: u32, out: &mut Findings<'_>) {
    if let Some(ty) = k.schema_type.filter(|t| *t != "string") {
        out.operation(
            op,
            k.pos,
            format!(
                "key {} `{}` is of type `{ty}`, not a string",
                k.what, k.name
            ),
            Some("keys are opaque strings such as UUIDs or `order-739-confirm`".into()),
        );
    }
    match k.max_length {
        None => out.operation(
            op,
            k.pos,
            format!("key {} `{}` has no `maxLength`", k.what, k.name),
            Some(format!(
                "add `maxLength: {limit}` so integrators know the limit before production does"
            )),
        ),
        Some(n) if n > u64::from(limit) => out.operation(
            op,
            k.pos,
            format!(
                "key {} `{}` allows {n} characters, more than the {limit} the server accepts",
                k.what, k.name
            ),
            Some(format!("set `maxLength: {limit}`")),
        ),
        Some(_) => {}
    }
}
