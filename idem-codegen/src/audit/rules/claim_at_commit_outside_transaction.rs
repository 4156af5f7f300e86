use crate::audit::{Findings, Rule, Severity};
use crate::model::Model;
use crate::vocab::{ClaimAt, Effect, InFlight};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM015",
    slug: "claim-at-commit-outside-transaction",
    severity: Severity::Error,
    summary: "an operation claims its key at commit but its effect is not only its transaction",
    docs: r#"## What it does
Flags an operation with `claim: commit` that calls another system
(`effect: external`), declares `phases`, or answers duplicates with
`in-flight: accepted`.

## Why is this bad?
With `claim: commit` nothing is written before the handler runs: the key row
is inserted, complete with the response, as the handler's transaction
commits. A duplicate that arrives meanwhile runs the handler too, finds the
key taken when it commits, rolls its own transaction back and replays the
first response. That is only safe when the rollback undoes everything the
handler did. A card charge, an email or a message sent by the duplicate's
handler cannot be rolled back: the customer is charged twice despite the key.
Phases commit their steps one by one, so they need the key claimed before
the first one. And `in-flight: accepted` points a duplicate at the in-flight
record, which a claim at commit never writes.

## Example
```yaml
post:
  x-idempotency:
    effect: external
    key: required
    claim: commit
```

Use instead:
```yaml
post:
  x-idempotency:
    effect: external
    key: required
    phases: [charge_card]
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in &model.operations {
        let Some(claim) = op.ext.claim.filter(|c| c.value == ClaimAt::Commit) else {
            continue;
        };
        let external = op
            .declared_effect
            .is_some_and(|e| e.value == Effect::External);
        let why = if external {
            "calls another system, and a duplicate's handler would call it again before rolling back"
        } else if op.phases.is_some() {
            "declares phases, which commit step by step and need the key claimed before the first"
        } else if op.settings.in_flight == InFlight::Accepted {
            "answers duplicates with `in-flight: accepted`, whose status resource needs the in-flight record a claim at commit never writes"
        } else {
            continue;
        };
        out.operation(
            op,
            claim.pos,
            format!(
                "{} {} claims its key at commit but {why}",
                op.method, op.path
            ),
            Some("remove `claim: commit`: the key is then claimed before the handler runs".into()),
        );
    }
}
