use crate::audit::{Findings, Rule, Severity};
use crate::model::{Model, Prose};

pub(crate) static RULE: Rule = Rule {
    code: "IDEM006",
    slug: "exactly-once-claim",
    severity: Severity::Error,
    summary: "a title, summary or description promises exactly-once delivery or processing",
    docs: r#"## What it does
Searches the document's title, summaries and descriptions (info, tags, path
items, operations) for a claim of exactly-once delivery or processing. A
sentence that denies it ("this is not exactly-once") is not flagged.

## Why is this bad?
Over a network that can lose any message, no protocol delivers exactly once:
the sender must retry, so delivery is at-least-once. What idempotency keys add
is duplicate collapse: within a key's scope and replay window, repeated
deliveries take effect once. Promising more invites integrators to skip their
own safeguards and is false the first time a key expires or a caller mints a
new key per attempt.

## Example
```yaml
info:
  description: Guaranteed exactly-once delivery, powered by idempotency keys.
```

Use instead:
```yaml
info:
  description: >
    Retries are safe: a request repeated with the same Idempotency-Key within
    24 hours takes effect once and returns the original response.
```
"#,
    check,
};

fn check(model: &Model, out: &mut Findings<'_>) {
    let message = |p: &Prose| {
        format!(
            "text claims exactly-once {}; networks deliver at least once and keys only collapse duplicates",
            if p.text.to_ascii_lowercase().contains("deliver") {
                "delivery"
            } else {
                "processing"
            }
        )
    };
    let help =
        "say what holds: retries with the same key inside the replay window take effect once"
            .to_owned();
    for prose in model
        .root
        .prose
        .iter()
        .filter(|p| claims_exactly_once(&p.text))
    {
        out.document(prose.pos, message(prose), Some(help.clone()));
    }
    for op in &model.operations {
        for prose in op.prose.iter().filter(|p| claims_exactly_once(&p.text)) {
            out.operation(op, prose.pos, message(prose), Some(help.clone()));
        }
    }
}

/// Whether `text` asserts exactly-once semantics (and does not deny them).
pub(crate) fn claims_exactly_once(text: &str) -> bool {
    let lower = text.to_ascii_lowercase().replace(['\n', '\t'], " ");
    let phrases = ["exactly-once", "exactly once", "exactly one time"];
    // A negation governs the phrase only when it is one of the three words
    // right before it ("not exactly-once", "cannot guarantee exactly once");
    // "refunds with no fee are processed exactly once" is still a claim.
    let negations = ["not", "no", "never", "cannot", "without"];
    let judgements = ["impossible", "myth", "false"];
    // Denials that follow the phrase: "exactly-once delivery is a myth".
    let denials_after = [
        "impossible",
        "myth",
        "false",
        "not possible",
        "isn't possible",
    ];
    let mut found = false;
    for phrase in phrases {
        for (at, _) in lower.match_indices(phrase) {
            let start = lower[..at]
                .char_indices()
                .rev()
                .nth(40)
                .map_or(0, |(i, _)| i);
            let before = &lower[start..at];
            let sentence = before.rsplit(['.', ';', ':']).next().unwrap_or(before);
            let negated = sentence.split_whitespace().rev().take(3).any(|w| {
                let w = w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '\'');
                negations.contains(&w) || w.ends_with("n't")
            }) || judgements.iter().any(|j| sentence.contains(j));
            let rest = lower.get(at + phrase.len()..).unwrap_or_default();
            let end = rest.char_indices().nth(40).map_or(rest.len(), |(i, _)| i);
            let after = rest.get(..end).unwrap_or(rest);
            let after = after.split(['.', ';', ':']).next().unwrap_or(after);
            if !negated && !denials_after.iter().any(|n| after.contains(n)) {
                found = true;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::claims_exactly_once;

    #[test]
    fn claims_and_denials() {
        assert!(claims_exactly_once("Guaranteed exactly-once delivery"));
        assert!(claims_exactly_once("Payments are processed exactly once."));
        assert!(claims_exactly_once(
            "No setup needed. Exactly once processing."
        ));
        assert!(!claims_exactly_once("This is not exactly-once delivery"));
        assert!(claims_exactly_once(
            "Refunds with no fee are processed exactly once"
        ));
        assert!(claims_exactly_once(
            "Our piano lessons are billed exactly once"
        ));
        assert!(!claims_exactly_once(
            "We never promise exactly once processing"
        ));
        assert!(!claims_exactly_once("Delivered at least once"));
        assert!(!claims_exactly_once(
            "Exactly one of the fields must be set"
        ));
        assert!(!claims_exactly_once(
            "Exactly-once delivery is impossible over a network"
        ));
        assert!(!claims_exactly_once("Exactly once processing is a myth."));
        assert!(claims_exactly_once(
            "Processed exactly once. Losing an event is impossible."
        ));
    }
}
