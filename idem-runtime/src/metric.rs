//! The names idem's metrics are recorded under, and their descriptions.
//!
//! Everything goes through the [`metrics`](https://docs.rs/metrics) facade:
//! this crate installs no recorder and picks no exporter. With none
//! installed, recording a metric costs a load and a call on the no-op
//! recorder. Install the one you like (Prometheus, OTLP, StatsD) at
//! startup, then call [`describe`] so its output carries each metric's help
//! text and unit.
//!
//! The names and labels are public interface: dashboards and alerts are
//! written against them. `docs/operations.md` says what each one means,
//! what a healthy system shows and what to alert on.

/// Requests to a keyed or generated route, by `operation` and `outcome`
/// ([`server::Outcome`](crate::server::Outcome)): exactly one per request.
pub const REQUESTS_TOTAL: &str = "idem_requests_total";
/// How long each request took, by `operation` and `outcome`, in seconds.
pub const REQUEST_DURATION_SECONDS: &str = "idem_request_duration_seconds";
/// How long a request waited for a database connection, in seconds.
pub const STORE_WAIT_SECONDS: &str = "idem_store_wait_seconds";
/// 1 while the key store's database is known to be unreachable, else 0.
pub const STORE_OUTAGE: &str = "idem_store_outage";
/// Standbys of the key store's primary that a failover could lose
/// acknowledged commits on (asynchronous ones, or all when commits do not
/// wait for a standby), checked by the background jobs; 0 on SQLite.
pub const STORE_STANDBYS_AT_RISK: &str = "idem_store_standbys_at_risk";
/// Completer runs of abandoned phased requests, by `operation` and
/// `outcome` (`completed`, `final`, `rescheduled`, `exhausted`).
pub const COMPLETER_RUNS_TOTAL: &str = "idem_completer_runs_total";
/// Records the reaper deleted, by `state` (`complete`, `incomplete`).
pub const REAPED_TOTAL: &str = "idem_reaped_total";
/// Records in a state an operator watches, by `state` (`in_flight`,
/// `exhausted`, and `stale`: in flight past `lock-timeout` with their next
/// run due, which the completer should have taken), refreshed by the
/// background jobs.
pub const RECORDS: &str = "idem_records";

/// Logical client calls, by `operation` and `outcome` (`ok`, `error`,
/// `outcome_unknown`): exactly one per call.
pub const CLIENT_CALLS_TOTAL: &str = "idem_client_calls_total";
/// Client attempts, first ones included, by `operation` and `result`.
pub const CLIENT_ATTEMPTS_TOTAL: &str = "idem_client_attempts_total";
/// Tokens left in the client's retry budget.
pub const CLIENT_RETRY_BUDGET_TOKENS: &str = "idem_client_retry_budget_tokens";
/// 1 while the client's circuit breaker refuses a `host`, else 0.
pub const CLIENT_BREAKER_OPEN: &str = "idem_client_breaker_open";

/// Registers every metric's description and unit with the installed
/// recorder. Call it once, after installing one; recording works without it.
///
/// ```
/// idem_runtime::metric::describe();
/// ```
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        REQUESTS_TOTAL,
        Unit::Count,
        "Requests by operation and outcome: executed, replayed, in_flight, reused, refused, \
         store_unavailable, resumed"
    );
    describe_histogram!(
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time from a request's arrival to its answer, by operation and outcome"
    );
    describe_histogram!(
        STORE_WAIT_SECONDS,
        Unit::Seconds,
        "Time a request waited for a key store connection"
    );
    describe_gauge!(
        STORE_OUTAGE,
        Unit::Count,
        "1 while the key store's database is known to be unreachable"
    );
    describe_gauge!(
        STORE_STANDBYS_AT_RISK,
        Unit::Count,
        "Standbys a failover could lose acknowledged key records on"
    );
    describe_counter!(
        COMPLETER_RUNS_TOTAL,
        Unit::Count,
        "Completer runs of abandoned phased requests, by operation and outcome"
    );
    describe_counter!(
        REAPED_TOTAL,
        Unit::Count,
        "Key records the reaper deleted, by the state they were in"
    );
    describe_gauge!(
        RECORDS,
        Unit::Count,
        "Key records in flight, exhausted, or stale (in flight past lock-timeout and due), as of \
         the background jobs' last count"
    );
    describe_counter!(
        CLIENT_CALLS_TOTAL,
        Unit::Count,
        "Logical client calls by operation and outcome: ok, error, outcome_unknown"
    );
    describe_counter!(
        CLIENT_ATTEMPTS_TOTAL,
        Unit::Count,
        "Client attempts, first ones included, by operation and result"
    );
    describe_gauge!(
        CLIENT_RETRY_BUDGET_TOKENS,
        Unit::Count,
        "Tokens left in the client's retry budget"
    );
    describe_gauge!(
        CLIENT_BREAKER_OPEN,
        Unit::Count,
        "1 while the client's circuit breaker refuses the host"
    );
}
