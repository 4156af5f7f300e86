use crate::audit::{Findings, Rule, Severity};
use crate::model::{Model, RetryClass};
use crate::vocab::Effect;

pub(crate) static RULE: Rule = Rule {
    code: "IDEM005",
    slug: "external-effect-without-phases",
    severity: Severity::Error,
    summary: "a keyed operation calls out to another system but declares no phases",
    docs: r#"## What it does
Flags a keyed operation with `effect: external` and no `phases`.

## Why is this bad?
A database transaction can undo its own writes, not a card charge at a payment
provider or an email already sent. If the whole request is one transaction and
the process dies after the foreign call, the rollback erases the evidence and
the retry calls out again: the customer is charged twice despite the key. Each
foreign call needs its own phase: an intent recorded before it, a recovery
point committed after it, and retries that resume from the last recovery point.

## Example
```yaml
post:
  x-idempotency:
    effect: external
    key: required
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
        let Some(effect) = op.declared_effect.filter(|e| e.value == Effect::External) else {
            continue;
        };
        if op.class != RetryClass::Keyed || op.phases.is_some() {
            continue;
        }
        out.operation(
            op,
            effect.pos,
            format!(
                "{} {} calls another system but declares no phases, so one transaction cannot undo the foreign call",
                op.method, op.path
            ),
            Some("list each foreign, non-rollbackable call in order: `phases: [charge_card, send_receipt]`".into()),
        );
    }
}
