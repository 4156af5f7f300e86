use crate::audit::{Findings, Rule, Severity};
use crate::model::Model;

pub(crate) static RULE: Rule = Rule {
    code: "IDEM011",
    slug: "missing-retry-after",
    severity: Severity::Warning,
    summary: "a 429 or 503 response does not document `Retry-After`",
    docs: r#"## What it does
Flags every `429` and `503` response that declares no `Retry-After` header.

## Why is this bad?
These two statuses mean "come back later", and only the server knows when.
Without `Retry-After`, every client guesses with its own backoff, and guesses
made from the same moment tend to arrive together. Clients that honour the
header spread out exactly as the server needs while it recovers.

## Example
```yaml
responses:
  "429": { description: Too many requests }
```

Use instead:
```yaml
responses:
  "429":
    description: Too many requests
    headers:
      Retry-After:
        description: Seconds to wait before retrying
        schema: { type: integer, minimum: 0 }
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in &model.operations {
        for r in op
            .responses
            .iter()
            .filter(|r| r.status == "429" || r.status == "503")
        {
            if r.has_header("Retry-After") {
                continue;
            }
            out.operation(
                op,
                r.pos,
                format!("`{}` response of {} {} does not declare `Retry-After`", r.status, op.method, op.path),
                Some("add a `Retry-After` header (seconds or an HTTP date) so clients wait as long as the server needs".into()),
            );
        }
    }
}
