//! The idempotency-key protocol, server side.
//!
//! A keyed request is claimed with one atomic
//! `INSERT … ON CONFLICT (scope, idem_key) DO NOTHING RETURNING`; the
//! handler's writes and the key's move to *complete* (with the stored
//! response) commit in one transaction; every retry inside the replay window
//! gets the stored response back byte-for-byte with `Idempotent-Replayed: true`.
//! A concurrent duplicate gets `409 idempotency_key_in_use` (or waits, or
//! `202`); the same key with another payload gets `409 idempotency_key_reused`.
//!
//! - [`Store`]: SQLite (embedded default) or PostgreSQL, schema from embedded migrations.
//! - [`Idempotency`]: the protocol, built with a [`Policy`] and a [`ScopeExtractor`].
//! - [`IdempotencyLayer`] + [`IdemTx`]: single-phase axum handlers.
//! - [`Operation`] + [`Run`]: phased operations around foreign calls, resumable.
//! - [`Idempotency::status_router`]: the key status resource `in-flight: accepted` points at.
//! - [`Idempotency::complete_abandoned`], [`Idempotency::reap`],
//!   [`Idempotency::spawn_background_jobs`]: the completer and the reaper.
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use idem_runtime::server::{HeaderScope, IdemTx, Idempotency, Store};
//! use sqlx::Sqlite;
//!
//! async fn create_order(mut tx: IdemTx<Sqlite>, body: String) -> (http::StatusCode, String) {
//!     let id: i64 = sqlx::query_scalar("INSERT INTO orders (body) VALUES ($1) RETURNING id")
//!         .bind(body)
//!         .fetch_one(&mut *tx)
//!         .await
//!         .unwrap_or(-1);
//!     (http::StatusCode::CREATED, format!("{{\"id\":{id}}}"))
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::open_sqlite("sqlite://app.db").await?;
//! store.migrate().await?;
//! let idem = Idempotency::builder(store).scope(HeaderScope::new("x-account-id")).build()?;
//! let app: Router = Router::new()
//!     .route("/orders", post(create_order))
//!     .route_layer(idem.layer());
//! # Ok(()) }
//! ```

mod canonical;
mod clock;
mod config;
mod engine;
mod error;
mod gate;
mod health;
mod jobs;
mod key;
mod layer;
mod outcome;
mod phased;
mod response;
mod scope;
mod status;
mod store;
pub mod support;
mod upload;

pub use config::{
    BODY_KEY_FIELD, ClaimAt, DEFAULT_SCOPE_MAX_LENGTH, DEFAULT_STATUS_PREFIX, DEFAULT_STORE_WAIT,
    FailureReplay, InFlight, KeyIn, KeyRequirement, MAX_INDEXED_BYTES, MismatchStatus, Policy,
    ResumePolicy,
};
pub use engine::Idempotency;
pub use engine::builder::IdempotencyBuilder;
pub use error::{ConfigError, IdempotencyError, KeyProblem};
pub use jobs::{CompleterReport, REAPER_RATE, RECORDS_EVERY, ReaperReport};
pub use key::IdempotencyKey;
pub use layer::{Claimed, IdemTx, IdempotencyLayer, IdempotencyService, KeyedRequest, Validator};
pub use outcome::{Outcome, is_rejection, observed, scope_digest};
pub use phased::{ForeignCall, Operation, PhaseError, Run, StepError};
pub use response::{Fault, IDEMPOTENT_REPLAYED, Reject, Reply, Unavailable};
pub use scope::{
    Credential, CredentialScope, HeaderScope, MIN_DIGEST_KEY, Requirement, ScopeExtractor,
    ScopeRejection, credential_digest,
};
pub use store::{
    Backend, BoxFuture, ExhaustedRecord, Inspect, Inspected, KeyRecord, KeyState, KeyStats,
    ListFilter, NewClaim, ReapedRecord, Replication, Rescheduled, Schema, Standby, StepRecord,
    StepStatus, Store, StoreError, StoreSettings, StoredRequest, StoredResponse, WatchedCounts,
};
