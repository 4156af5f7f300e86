use crate::audit::{Findings, Rule, Severity};
use crate::model::Model;

pub(crate) static RULE: Rule = Rule {
    code: "IDEM017",
    slug: "undeclared-path-parameter",
    severity: Severity::Warning,
    summary: "a path template names a parameter the operation does not declare",
    docs: r#"## What it does
Flags a `{name}` in a path template that neither the operation nor its path
item declares as an `in: path` parameter. OpenAPI requires every template
name to be declared, and every OpenAPI linter reports the omission.

idem still generates the operation as the template reads: the client takes
the segment as a `&str` argument and the server's handler receives it as a
`String`, so the two agree. The warning asks for the declaration that gives
the segment its type, its description and its constraints.

## Why is this bad?
Tools that follow the document strictly disagree about an undeclared
segment: some drop it from the server's inputs, some from the client's
arguments, and the docs page cannot describe it. A caller learns what the
segment holds only by reading the URL.

## Example
```yaml
paths:
  /v1/transfers/{id}:
    delete:
      operationId: cancelTransfer
      responses:
        "204": { description: Cancelled }
```

Use instead:
```yaml
paths:
  /v1/transfers/{id}:
    parameters:
      - name: id
        in: path
        required: true
        description: The transfer's id, as `createTransfer` returned it.
        schema: { type: string }
    delete:
      operationId: cancelTransfer
      responses:
        "204": { description: Cancelled }
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in &model.operations {
        for p in op.parameters.iter().filter(|p| !p.declared) {
            out.operation(
                op,
                p.pos,
                format!(
                    "{} {} names `{{{}}}` in its path, but declares no path parameter `{}`",
                    op.method, op.path, p.name, p.name
                ),
                Some(format!(
                    "declare `{{ name: {}, in: path, required: true, schema: {{ type: string }} }}` on the path item; until then it is generated as a required string",
                    p.name
                )),
            );
        }
    }
}
