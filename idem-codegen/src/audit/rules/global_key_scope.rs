use super::{pos_of, settings_scopes};
use crate::audit::{Findings, Rule, Severity};
use crate::model::Model;
use crate::vocab::Scope;

pub(crate) static RULE: Rule = Rule {
    code: "IDEM002",
    slug: "global-key-scope",
    severity: Severity::Error,
    summary: "idempotency keys share one namespace across all callers",
    docs: r#"## What it does
Flags `x-idempotency.scope: global`, at the document root or on an operation.

## Why is this bad?
Keys are minted by clients. With one global namespace, two customers who pick
the same key (a shared library's counter, an order number both systems use)
collide: the second customer is told "conflict", or worse, receives the first
customer's stored response, which leaks data across accounts. Uniqueness must
be per caller: `(account_id, key)`.

## Example
```yaml
x-idempotency:
  scope: global
```

Use instead:
```yaml
x-idempotency:
  scope: account      # or `credential` when one account has several API keys
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for scope in settings_scopes(model, |e| vec![pos_of(&e.scope)]) {
        let ext = scope.map_or(&model.root.idempotency, |op| &op.ext);
        let Some(s) = ext.scope.filter(|s| s.value == Scope::Global) else {
            continue;
        };
        let message = "`scope: global` makes one caller's key collide with another's".to_owned();
        let help = Some("use `scope: account` so keys are unique per caller".to_owned());
        match scope {
            Some(op) => out.operation(op, s.pos, message, help),
            None => out.document(s.pos, message, help),
        }
    }
}
