use crate::audit::{Findings, Rule, Severity};
use crate::model::{Method, Model, Operation, RetryClass};

/// Words that name a read: RPC-style APIs (Plaid's `/accounts/get`, Square's
/// `/v2/customers/search`) send reads as POSTs.
const QUERY_WORDS: &[&str] = &[
    "get", "list", "search", "query", "find", "lookup", "retrieve", "fetch",
];

pub(crate) static RULE: Rule = Rule {
    code: "IDEM001",
    slug: "unkeyed-unsafe-write",
    severity: Severity::Error,
    summary: "a state-changing operation is unsafe to retry and has neither a key nor a warning",
    docs: concat!(
        r#"## What it does
Flags every operation of class `unsafe`: it changes state in a way that is not
idempotent (a POST or PATCH with no declared effect, any method whose
`x-idempotency.effect` is `create`, `append`, `increment`, `decrement` or
`external`, or a PUT or DELETE whose own words say a repeat repeats: "Each
call adds `points` to the balance", "refunds the deposit", "creates a new
version"), it accepts no idempotency key, and it carries no `unsafe-retry`
warning for integrators. When words decided it, the message quotes them and
the report says where they stand; `x-idempotency: { effect: replace }` (or
`delete`) overrules words that misread the operation. A POST whose words read
as a query is `undeclared-read-only`'s instead.

An operation accepts a key when it declares `key: required | optional`,
inherits the document root's `key:`, or already shows one: a key header
(`Idempotency-Key`, `X-Idempotency-Key`, `PayPal-Request-Id`,
`Repeatability-Request-ID`, `…-Idempotency-Key`) or a top-level request-body
field named `idempotency_key`, `idempotencyKey` or `IdempotencyKey`. A trace
id such as `X-Request-Id` is not a key. When a POST's path or operationId
reads like a query (`…/search`, `/accounts/get`, `listOrders`), the help line
suggests `effect: read`: RPC-style APIs send reads as POSTs.

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
        keyed_operation_example!()
    ),
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    for op in model
        .operations
        .iter()
        // A POST whose words read as a query is `undeclared-read-only`'s.
        .filter(|o| o.class == RetryClass::Unsafe && o.undeclared_read().is_none())
    {
        let inferred = op
            .effect_evidence()
            .zip(op.inferred_effect.as_ref())
            .filter(|(_, i)| !i.value.is_idempotent());
        let message = match (op.declared_effect, inferred) {
            (None, Some((evidence, i))) if op.method.default_effect().is_some() => format!(
                "{} {} says it {}: its {} reads \"{}\", which breaks the idempotency RFC 9110 promises for {}, and it accepts no idempotency key",
                op.method,
                op.path,
                effect_words(i.value),
                evidence.field,
                evidence.words,
                op.method
            ),
            (None, Some((evidence, i))) => format!(
                "{} {} says it {} (its {}: \"{}\") and accepts no idempotency key",
                op.method,
                op.path,
                effect_words(i.value),
                evidence.field,
                evidence.words
            ),
            (declared, _) => match declared {
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
            },
        };
        let body_key = op
            .request_body
            .as_ref()
            .and_then(|b| b.key_fields.first())
            .map(|f| f.name.as_str());
        let mut help = match body_key {
            Some(field) if op.key.declared.is_some() => format!(
                "the request body has an `{field}` field; if that is the key, remove `key: none`"
            ),
            Some(field) => format!(
                "the request body has an `{field}` field; if that is the key, declare `x-idempotency: {{ key-in: body }}`"
            ),
            None => format!(
                "accept an `{header}` header: `x-idempotency: {{ key: required }}` and a required header parameter `{header}`, a string of `maxLength: {max}`, and the `409` conflicts (`idem explain IDEM001` shows a whole keyed operation); or warn integrators with `unsafe-retry: \"…\"`",
                header = op.settings.header,
                max = op.settings.key_max_length,
            ),
        };
        if op.method == Method::Post
            && op.declared_effect.is_none()
            && let Some(word) = reads_like_query(op)
        {
            help = format!(
                "it reads like a query (`{word}`): if it changes nothing, declare `x-idempotency: {{ effect: read }}`; otherwise {help}"
            );
        }
        if let Some(default) = inferred.and(op.method.default_effect()) {
            help = format!(
                "{help}; if a repeat does nothing more, declare `x-idempotency: {{ effect: {} }}` to overrule the words",
                default.as_str()
            );
        }
        out.operation_evidence(op, op.pos, message, Some(help), inferred.map(|(e, _)| e));
    }
}

/// What an inferred effect says a repeat does, for the message.
fn effect_words(effect: crate::vocab::Effect) -> &'static str {
    use crate::vocab::Effect;
    match effect {
        Effect::Append => "appends or adds",
        Effect::Increment => "increments",
        Effect::Decrement => "decrements",
        Effect::External => {
            "has an effect outside the API (it sends, charges, refunds, pays or transfers)"
        }
        Effect::Create => "makes something new on each call",
        Effect::Read | Effect::Replace | Effect::Delete => "changes state",
    }
}

/// The query word an operation's last path segment or operationId leads or
/// ends with (`/accounts/get`, `searchCustomers`, `batch-retrieve`), if any.
fn reads_like_query(op: &Operation) -> Option<String> {
    let segment = op
        .path
        .rsplit('/')
        .find(|s| !s.is_empty() && !s.starts_with('{'))
        .unwrap_or("");
    [segment, op.operation_id.as_deref().unwrap_or("")]
        .into_iter()
        .find_map(|name| {
            let words = words(name);
            // `batchRetrieveOrders`, `bulk-get`: the verb after the prefix.
            let lead = match words.first().map(String::as_str) {
                Some("batch" | "bulk") => words.get(1),
                _ => words.first(),
            };
            [lead, words.last()]
                .into_iter()
                .flatten()
                .find(|w| QUERY_WORDS.contains(&w.as_str()))
                .cloned()
        })
}

/// `searchCatalogObjects` / `batch-retrieve` / `Accounts_Get` → lower-case words.
fn words(name: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn splits_names_into_words() {
        assert_eq!(
            words("searchCatalogObjects"),
            ["search", "catalog", "objects"]
        );
        assert_eq!(words("batch-retrieve"), ["batch", "retrieve"]);
        assert_eq!(words("Accounts_Get"), ["accounts", "get"]);
        assert_eq!(words("getV2Orders"), ["get", "v2", "orders"]);
        assert_eq!(words(""), Vec::<String>::new());
    }
}
