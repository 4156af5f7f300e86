//! Bounded, key-aware retries for reqwest callers.
//!
//! Turns transient failures into successes without ever duplicating a side
//! effect or amplifying an outage:
//!
//! - **classification** by [`RetryClass`]: connection errors, timeouts, 429,
//!   502, 503 and 504 are retried; 500 only for `safe` and `keyed` operations
//!   and at most once; other 4xx never. An `unsafe` operation is never sent
//!   again once the request may have reached the server: the call fails with
//!   [`RetryError::OutcomeUnknown`], which says why.
//! - **keys**: a `keyed` operation gets one [`IdempotencyKey`] per logical
//!   call (a UUIDv4 unless the caller supplies or derives one), sent
//!   unchanged on every attempt and returned inside every error.
//! - **backoff**: full jitter by default, decorrelated on request
//!   ([`Backoff`]), bounded by attempts *and* one deadline per call;
//!   per-attempt timeouts fit inside the deadline; the time left travels in
//!   [`DEADLINE_HEADER`]; `Retry-After` (seconds or HTTP-date) and
//!   `retry-after-ms` are honoured, and a wait past the deadline stops the
//!   call at once.
//! - **budget**: a [`RetryBudget`] token bucket shared by every clone of the
//!   client; when it is empty, first attempts still go out, retries do not.
//! - **circuit breaker** (optional, per host): [`CircuitBreaker`]. Stacking
//!   order: retry → circuit breaker → (rate limiter) → call.
//! - **observability**: each retry is a `tracing` event (operation, attempt,
//!   error, next wait, budget left); [`RetryClient::metrics`] reads counters.
//! - **determinism**: [`Clock`] and [`RandomSource`] are injectable; the
//!   default clock is tokio's, so paused time drives everything.
//!
//! ```no_run
//! use idem_runtime::client::{IdempotencyKey, Operation, RetryClass, RetryClient};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! const CONFIRM_ORDER: Operation = Operation::new("confirmOrder", RetryClass::Keyed);
//! let client = RetryClient::new(reqwest::Client::new());
//! let key = IdempotencyKey::derived(["order", "739", "confirm"])?;
//! let response = client
//!     .send_with_key(&CONFIRM_ORDER, key, |http| {
//!         http.post("https://api.example.com/orders/739/confirm").json(&"{}")
//!     })
//!     .await?;
//! # let _ = response; Ok(()) }
//! ```
//!
//! See `docs/client.md` for the defaults, the classification table and the
//! simulation results.

mod attempt;
mod backoff;
mod breaker;
mod budget;
mod class;
mod classify;
mod clock;
mod engine;
mod error;
mod key;
mod observe;
mod policy;
pub mod sse;
mod streams;
pub mod support;

pub use backoff::Backoff;
pub use breaker::{BreakerConfig, CircuitBreaker, CircuitState, Permit, Refused};
pub use budget::{BudgetConfig, RetryBudget, RetryCost};
pub use class::{Operation, RetryClass, UnknownRetryClass};
pub use classify::{
    Observation, RETRY_AFTER_MS_HEADER, RETRY_HINT_HEADER, STRIPE_RETRY_HINT_HEADER, Verdict,
    classify, retry_after, retry_hint,
};
pub use clock::{Clock, RandomSource, SeededRandom, Sleep, ThreadRandom, TokioClock};
pub use engine::{Attempt, RetryClient, RetryClientBuilder, RetryMetrics};
pub use error::{AttemptError, GiveUp, RetryError};
/// `.next().await` on a list's items and pages and on an event stream, so a
/// caller of a generated client needs no `futures` dependency of its own
/// (the generated crate's `prelude` brings it into scope).
pub use futures_util::{Stream, StreamExt};
pub use key::{IdempotencyKey, InvalidKey};
pub use policy::{DEADLINE_HEADER, DEFAULT_KEY_HEADER, RetryPolicy};
pub use streams::{
    ByteStream, EventError, EventStream, Events, Items, NextPage, PageError, PageSpec, Paged,
    Pages, Resume,
};
pub use support::ApiError;
