use crate::audit::{Findings, Rule, Severity};
use crate::model::{KeySource, Model, Operation, RetryClass, SecurityKind};
use crate::vocab::Scope;

pub(crate) static RULE: Rule = Rule {
    code: "IDEM014",
    slug: "unidentified-key-scope",
    severity: Severity::Warning,
    summary: "nothing in the spec says whose namespace a keyed operation's keys are in",
    docs: r#"## What it does
Flags a keyed operation whose key scope has no source the spec names:
- `scope: credential` on an operation whose `security` names no credential
  the server can read (no requirement at all, only an empty one, or only
  schemes such as mutual TLS);
- `scope: account` (the default) on an operation with neither a `security`
  requirement nor a required header naming the caller (an account header
  set by a gateway).

## Why is this bad?
Keys are unique per caller. A server that cannot tell callers apart either
refuses every keyed request (`401`) or, worse, is wired to one shared scope,
where a customer who picks the same key as another receives that customer's
stored response. The generated server derives a credential scope by itself
and takes an account scope from the app's extractor; the spec should say
which, so integrators, the docs page and the audit know who owns a key.

If the caller is identified some other way (a session your middleware
reads, mutual TLS terminated in front of the service), say so with a
waiver: `allow: { unidentified-key-scope: "…" }`.

## Example
```yaml
x-idempotency:
  scope: credential
paths:
  /v1/payments:
    post:
      x-idempotency: { key: required }   # and no `security` anywhere
```

Use instead:
```yaml
x-idempotency:
  scope: credential
security:
  - bearerAuth: []
components:
  securitySchemes:
    bearerAuth: { type: http, scheme: bearer }
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in &model.operations {
        if op.class != RetryClass::Keyed || op.key.source.is_none() {
            continue;
        }
        let security = model.security_of(op);
        let readable = security.iter().any(|alternative| {
            !alternative.is_empty()
                && alternative.iter().all(|name| {
                    model
                        .scheme(name)
                        .is_some_and(|s| !matches!(s.kind, SecurityKind::Other(_)))
                })
        });
        let message = match op.settings.scope {
            Scope::Credential if !readable => format!(
                "{} {} scopes its keys by credential, but declares no credential to derive \
                 the scope from",
                op.method, op.path
            ),
            Scope::Account if security.iter().all(Vec::is_empty) && !account_header(op) => {
                format!(
                    "{} {} scopes its keys by account, but names neither a security \
                     requirement nor an account header to identify the caller by",
                    op.method, op.path
                )
            }
            _ => continue,
        };
        let help = match op.settings.scope {
            Scope::Credential => {
                "add the operation's `security` requirement (bearer, basic or an API key)"
            }
            _ => {
                "declare the `security` requirement or the account header your gateway sets; \
                 if an extractor of your own identifies the caller, waive this with a reason"
            }
        };
        out.operation(op, op.pos, message, Some(help.to_owned()));
    }
}

/// A required header parameter other than the key itself.
fn account_header(op: &Operation) -> bool {
    op.parameters.iter().any(|p| {
        p.location == "header"
            && p.required
            && !matches!(&op.key.source, Some(KeySource::Header { name, .. }) if name.eq_ignore_ascii_case(&p.name))
    })
}
