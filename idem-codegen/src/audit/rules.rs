//! The rule table. Codes are stable and never reused; add new rules at the end.

use super::Rule;

/// The page section every key rule ends with: one keyed operation that
/// every rule passes, whole (a test audits it), so a reader copies what
/// they need from one place.
macro_rules! keyed_operation_example {
    () => {
        r#"## A complete keyed operation
The key as a header parameter with its length, the conflicts and the key
protocol's own refusals with their codes. With `scope: account` (the
default) or `credential`, the operation also needs a `security` requirement
that names the caller; and a document-wide `x-idempotency: { failure-replay:
verbatim }` decides how failures replay.
```yaml
paths:
  /v1/transfers:
    post:
      operationId: createTransfer
      summary: Move money between two accounts
      x-idempotency:
        key: required
      parameters:
        - name: Idempotency-Key
          in: header
          required: true
          description: One key per transfer, sent again on every retry of it.
          schema: { type: string, minLength: 1, maxLength: 255 }
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [amount, to]
              properties:
                amount: { type: integer, minimum: 1 }
                to: { type: string }
      responses:
        "201":
          description: The transfer was made.
        "400":
          description: >-
            `idempotency_key_missing` or `idempotency_key_invalid`: send one
            key of 1 to 255 visible ASCII characters.
        "409":
          description: >-
            `idempotency_key_in_use`: a request with this key is still
            running; retry later with the same key.
            `idempotency_key_reused`: this key was sent with a different
            request; a client bug, never retried.
        "503":
          description: >-
            `overloaded` or `idempotency_store_unavailable`: retry after the
            delay, with the same key.
          headers:
            Retry-After: { schema: { type: integer } }
        "504":
          description: "`deadline_exceeded`: retry with the same key to learn the outcome."
```
"#
    };
}

mod claim_at_commit_outside_transaction;
mod exactly_once_claim;
mod external_effect_without_phases;
mod global_key_scope;
mod invalid_extension;
mod key_parameter_shape;
mod missing_conflict_responses;
mod missing_retry_after;
mod phases_without_key;
mod reaper_before_replay_window;
mod replay_window_shorter_than_retry_horizon;
mod undecided_failure_replay;
mod undeclared_path_parameter;
mod undeclared_protocol_refusals;
mod undeclared_read_only;
mod unidentified_key_scope;
mod unkeyed_unsafe_write;

/// Every rule, in code order.
pub static RULES: &[&Rule] = &[
    &unkeyed_unsafe_write::RULE,
    &global_key_scope::RULE,
    &replay_window_shorter_than_retry_horizon::RULE,
    &reaper_before_replay_window::RULE,
    &external_effect_without_phases::RULE,
    &exactly_once_claim::RULE,
    &invalid_extension::RULE,
    &missing_conflict_responses::RULE,
    &undecided_failure_replay::RULE,
    &key_parameter_shape::RULE,
    &missing_retry_after::RULE,
    &phases_without_key::RULE,
    &undeclared_protocol_refusals::RULE,
    &unidentified_key_scope::RULE,
    &claim_at_commit_outside_transaction::RULE,
    &undeclared_read_only::RULE,
    &undeclared_path_parameter::RULE,
];

use crate::model::{Model, Operation};
use crate::source::Pos;
use crate::vocab::Located;

/// For document-wide settings: yields the root (when it set any of the fields
/// involved) and then each operation that overrides one of them, so a root
/// mistake is reported once rather than once per operation.
pub(crate) fn settings_scopes(
    model: &Model,
    fields: impl Fn(&crate::vocab::IdempotencyExt) -> Vec<Option<Pos>>,
) -> Vec<Option<&Operation>> {
    let root_fields = fields(&model.root.idempotency);
    let mut scopes = vec![None];
    for op in &model.operations {
        let own = fields(&op.ext);
        if own
            .iter()
            .zip(&root_fields)
            .any(|(o, r)| o.is_some() && o != r)
        {
            scopes.push(Some(op));
        }
    }
    scopes
}

/// Where to point a finding about one scope's settings: the first of `fields`
/// that the scope sets itself (its position differs from the root's), else
/// the first that is set at all. A finding about an operation then points at
/// the operation's own override that caused it, not at the root setting it
/// inherited (which may be fine on its own).
pub(crate) fn blame(
    ext: &crate::vocab::IdempotencyExt,
    root: &crate::vocab::IdempotencyExt,
    fields: impl Fn(&crate::vocab::IdempotencyExt) -> Vec<Option<Pos>>,
) -> Option<Pos> {
    let own = fields(ext);
    let inherited = fields(root);
    own.iter()
        .zip(&inherited)
        .find_map(|(o, r)| o.filter(|p| Some(*p) != *r))
        .or_else(|| own.iter().flatten().next().copied())
}

pub(crate) fn pos_of<T>(field: &Option<Located<T>>) -> Option<Pos> {
    field.as_ref().map(|l| l.pos)
}
