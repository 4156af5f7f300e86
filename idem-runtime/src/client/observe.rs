//! The client's metrics, counted where the engine decides each thing:
//! one call outcome per logical call, one result per attempt, the budget
//! after it changes. (The breaker sets its own gauge as it opens and closes.)

use super::budget::RetryBudget;
use super::classify::{Observation, Verdict};
use super::error::RetryError;
use crate::metric;

/// `idem_client_calls_total{operation, outcome}`: one per logical call.
pub(super) fn call(operation: &'static str, outcome: &'static str) {
    metrics::counter!(
        metric::CLIENT_CALLS_TOTAL,
        "operation" => operation,
        "outcome" => outcome,
    )
    .increment(1);
}

/// The call failed: `outcome_unknown` when it may have taken effect and
/// could not be sent again, `error` otherwise.
pub(super) fn failed(error: &RetryError) {
    let outcome = match error {
        RetryError::OutcomeUnknown { .. } => "outcome_unknown",
        _ => "error",
    };
    call(error.operation(), outcome);
}

/// `idem_client_attempts_total{operation, result}`: one per attempt, a
/// breaker's local refusal included.
pub(super) fn attempt(operation: &'static str, observation: &Observation, verdict: Verdict) {
    metrics::counter!(
        metric::CLIENT_ATTEMPTS_TOTAL,
        "operation" => operation,
        "result" => result(observation, verdict),
    )
    .increment(1);
}

/// `idem_client_retry_budget_tokens`: what the budget holds now (an
/// unlimited budget reports nothing).
pub(super) fn budget(budget: &RetryBudget) {
    if let Some(tokens) = budget.available() {
        metrics::gauge!(metric::CLIENT_RETRY_BUDGET_TOKENS).set(f64::from(tokens));
    }
}

/// The `result` label: what one attempt came to.
fn result(observation: &Observation, verdict: Verdict) -> &'static str {
    match (observation, verdict) {
        (Observation::Status { .. }, Verdict::Accept) => "answered",
        (Observation::Status { .. }, _) => "status",
        (Observation::KeyInUse, _) => "key_in_use",
        (Observation::KeyReused, _) => "key_reused",
        (Observation::NotSent, _) => "not_sent",
        (Observation::TimedOut, _) => "timed_out",
        (Observation::Interrupted, _) => "interrupted",
        (Observation::CircuitOpen, _) => "circuit_open",
    }
}
