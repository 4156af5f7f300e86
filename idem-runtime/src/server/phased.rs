//! Operations that call foreign systems between local transactions.
//!
//! One transaction cannot roll back a card charge or an email, so such an
//! operation runs as named steps. A *local* step's writes commit together
//! with the step's recorded output and the key's recovery point. A *foreign*
//! step first commits an intent (with the key it will pass on, derived from
//! the claim and the step: see [`ForeignCall::derived_key`]), then calls out,
//! then commits its output as the new recovery point. The claim itself
//! commits inside the first step's transaction.
//!
//! A retry, a takeover after `lock-timeout`, or the completer re-runs the
//! operation from the top: finished steps return their recorded output
//! without running, so no finished foreign call is ever repeated. A step
//! found with only its intent was interrupted between calling out and
//! recording the result; it runs again with the same derived key, which the
//! foreign system uses to collapse the duplicate, and
//! [`ForeignCall::reconciling`] tells the closure so.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::request::Parts;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Transaction;

use super::clock::now_ms;
use super::config::FailureReplay;
use super::engine::Idempotency;
use super::error::IdempotencyError;
use super::key::provider_key;
use super::outcome::{Outcome, after_claim, marked, observed};
use super::response::Reply;
use super::store::StoreError;
use super::store::StoredResponse;
use super::store::{Backend, BoxFuture, KeyRecord, Rescheduled, StepRecord, StepStatus};

/// How one run of a phased request ended: the completer's outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunEnd {
    /// Its answer is stored.
    Completed,
    /// A step ended it with a final, declared answer, stored.
    Final,
    /// A step failed transiently; the next run is scheduled.
    Rescheduled,
    /// Its schedule ran out: the record is terminal.
    Exhausted,
    /// Nothing of the above: refused before it began, the store failed, the
    /// claim was lost, or the lock was let go for a retry.
    Left,
}

impl RunEnd {
    /// The `outcome` label of `idem_completer_runs_total`, where it has one.
    pub(crate) fn label(self) -> Option<&'static str> {
        match self {
            RunEnd::Completed => Some("completed"),
            RunEnd::Final => Some("final"),
            RunEnd::Rescheduled => Some("rescheduled"),
            RunEnd::Exhausted => Some("exhausted"),
            RunEnd::Left => None,
        }
    }
}

/// Why a step stopped.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A definitive answer (a declined card, a validation failure): stored and
    /// replayed like a success.
    #[error("operation answered {}", .0.status())]
    Reply(Box<Reply>),
    /// A refusal before the operation began executing (a malformed body, a
    /// failed precondition): answered, and nothing is recorded, so a
    /// corrected retry with the same key runs normally. Once a step has
    /// committed, execution has begun, and a rejection is stored like
    /// [`StepError::Reply`].
    #[error("operation refused the request with {}", .0.status())]
    Reject(Box<Reply>),
    /// A transient failure (a provider timeout, a `5xx`): nothing is stored;
    /// the next run is scheduled with backoff ([`ResumePolicy`](super::ResumePolicy)), and a retry
    /// or the completer resumes at the recovery point once it is due. At the
    /// schedule's bound the record becomes `exhausted`.
    #[error("{0}")]
    Transient(String),
    /// The server lacks what the operation needs (a missing upstream, a
    /// disabled feature, a setting). Before anything has committed it is
    /// answered `503 operation_unavailable` and nothing is recorded, so the
    /// same key works once the server is fixed; after a step has committed
    /// it is rescheduled like [`StepError::Transient`].
    #[error("{0}")]
    Unavailable(String),
    /// The key store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A recorded step output could not be (de)serialized.
    #[error("step {step} output: {source}")]
    Output {
        /// Step name.
        step: String,
        /// The serde error.
        source: serde_json::Error,
    },
    /// Another worker took over the key; this one must stop.
    #[error("the key was taken over by another worker")]
    LockLost,
}

/// How a foreign call that did not succeed ended, as a phase of a generated
/// server reports it. The two cases are distinct types of answer, so a
/// provider's refusal cannot be sent back as "try again later" by accident,
/// nor a timeout stored as the outcome.
///
/// - `Final(reply)`: the foreign system gave its answer and it is not a
///   success (a declined card, a refused payout). The operation ends with
///   `reply`, one of its documented answers: stored, and replayed to every
///   retry with the key. Execution had begun (the intent was recorded), so it
///   is never rolled back.
/// - `Transient(reason)`: no answer, or one that says to come back (a
///   timeout, a `5xx`, a `429`): nothing is stored, and the phase runs again
///   with the same derived key when the backoff allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PhaseError<R> {
    /// The operation's final, documented answer.
    Final(R),
    /// Try again later.
    Transient(String),
}

impl From<sqlx::Error> for StepError {
    fn from(e: sqlx::Error) -> Self {
        StepError::Store(StoreError::from(e))
    }
}

/// What a foreign step's closure receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignCall {
    /// The key to send to the foreign system, the same on every attempt of
    /// this step, takeovers and the completer included.
    ///
    /// Format: `{claim}:{step}`, where `{claim}` is 32 hex digits of SHA-256
    /// over the caller's scope, the idempotency key and the time the key was
    /// claimed. Two callers who happen to send the same key value therefore
    /// never hand the provider the same key, and a key re-used after its
    /// replay window (a new request) gets a new one. At most 97 bytes; a
    /// step name over 64 bytes or outside `[A-Za-z0-9_.-]` appears as 16 hex
    /// digits of its own digest.
    pub derived_key: String,
    /// `true` when an earlier attempt recorded its intent but not its result:
    /// the foreign system may already have acted on `derived_key`.
    pub reconciling: bool,
}

/// A multi-step operation the protocol can resume; registered by name so the
/// completer can finish it without its client.
///
/// ```
/// use idem_runtime::server::{BoxFuture, Operation, Reply, Run, StepError};
/// use sqlx::Sqlite;
///
/// struct Checkout;
/// impl Operation<Sqlite> for Checkout {
///     fn name(&self) -> &'static str { "checkout" }
///     fn run<'a>(&'a self, run: &'a mut Run<Sqlite>) -> BoxFuture<'a, Result<Reply, StepError>> {
///         Box::pin(async move {
///             let order: i64 = run.local("create_order", |tx| Box::pin(async move {
///                 let id: i64 = sqlx::query_scalar("INSERT INTO orders DEFAULT VALUES RETURNING id")
///                     .fetch_one(&mut *tx).await?;
///                 Ok(id)
///             })).await?;
///             let charge: String = run.foreign("charge_card", |call| async move {
///                 // provider.charge(&call.derived_key, …)
///                 Ok(format!("ch_{}", call.derived_key))
///             }).await?;
///             Ok(Reply::json(http::StatusCode::CREATED,
///                 &serde_json::json!({"order": order, "charge": charge})))
///         })
///     }
/// }
/// ```
pub trait Operation<DB: Backend>: Send + Sync + 'static {
    /// Stable name, stored with each key (renaming strands in-flight records).
    fn name(&self) -> &'static str;

    /// Runs (or resumes) the operation. Must be deterministic in its step
    /// names given the request.
    fn run<'a>(&'a self, run: &'a mut Run<DB>) -> BoxFuture<'a, Result<Reply, StepError>>;

    /// Checks the request before its key is claimed (default: accepts
    /// everything). A refusal is answered as it is and records nothing, so
    /// the caller can correct the request and retry with the same key.
    fn validate(&self, parts: &Parts, body: &[u8]) -> Result<(), Box<Reply>> {
        let _ = (parts, body);
        Ok(())
    }
}

/// The engine's registry of phased operations, typed: what goes in is an
/// `Arc<dyn Operation<DB>>`, so that is what comes out.
impl<DB: Backend> Idempotency<DB> {
    /// Registers a phased operation so the completer can resume it by name.
    pub(crate) fn register(&self, operation: Arc<dyn Operation<DB>>) {
        if let Ok(mut ops) = self.inner.shared.operations.write() {
            let name = operation.name().to_owned();
            let erased: Arc<dyn Any + Send + Sync> = Arc::new(operation);
            ops.insert(name, (erased, Arc::downgrade(&self.inner)));
        }
    }

    /// A registered operation and the instance (policy) it runs under.
    pub(crate) fn operation(
        &self,
        name: &str,
    ) -> Option<(Arc<dyn Operation<DB>>, Idempotency<DB>)> {
        let (erased, owner) = self
            .inner
            .shared
            .operations
            .read()
            .ok()
            .and_then(|ops| ops.get(name).cloned())?;
        let operation = erased.downcast_ref::<Arc<dyn Operation<DB>>>()?.clone();
        let owner = owner
            .upgrade()
            .map_or_else(|| self.clone(), |inner| Idempotency { inner });
        Some((operation, owner))
    }
}

/// The running state of one phased request: its key, request and recorded steps.
pub struct Run<DB: Backend> {
    idem: Idempotency<DB>,
    scope: String,
    key: String,
    generation: i64,
    /// The record's claim time: with scope and key, it names this claim.
    claimed_at: i64,
    method: String,
    path: String,
    body: Bytes,
    steps: HashMap<String, StepRecord>,
    /// The claim (or takeover), not yet committed: the first step commits it.
    pending: Option<Transaction<'static, DB>>,
    /// Whether anything of this request has committed (a step, an intent, or
    /// the claim of an earlier attempt): execution has begun.
    begun: bool,
    recovery_point: String,
    /// Runs of the request, this one included.
    attempts: i64,
}

impl<DB: Backend> std::fmt::Debug for Run<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("scope", &self.scope)
            .field("key", &self.key)
            .field("recovery_point", &self.recovery_point)
            .finish_non_exhaustive()
    }
}

impl<DB: Backend> Run<DB> {
    /// The idempotency key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The caller's scope.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// Request method.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// Request path and query.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Raw request body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body parsed as JSON; a malformed body is refused with `400`
    /// ([`StepError::Reject`]: not recorded when nothing has run yet).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, StepError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            StepError::Reject(Box::new(Reply::json(
                http::StatusCode::BAD_REQUEST,
                &serde_json::json!({"code": "invalid_body", "message": e.to_string(), "retryable": false}),
            )))
        })
    }

    /// The last recovery point reached (`started` for a fresh request).
    pub fn recovery_point(&self) -> &str {
        &self.recovery_point
    }

    /// The pending claim or takeover, if not yet committed, else a new
    /// transaction: whatever commits next carries it.
    async fn begin(&mut self) -> Result<Transaction<'static, DB>, StoreError> {
        match self.pending.take() {
            Some(tx) => Ok(tx),
            None => Ok(self.idem.store().pool().begin().await?),
        }
    }

    fn recorded<T: DeserializeOwned>(&self, step: &str) -> Result<Option<T>, StepError> {
        match self.steps.get(step) {
            Some(StepRecord {
                status: StepStatus::Done,
                output,
                ..
            }) => serde_json::from_str(output.as_deref().unwrap_or("null"))
                .map(Some)
                .map_err(|source| StepError::Output {
                    step: step.to_owned(),
                    source,
                }),
            _ => Ok(None),
        }
    }

    /// Records `step` done with `output` and moves the recovery point, in `tx`,
    /// then commits.
    async fn commit_step<T: Serialize>(
        &mut self,
        mut tx: Transaction<'static, DB>,
        step: &str,
        derived_key: Option<String>,
        output: &T,
    ) -> Result<(), StepError> {
        let output = serde_json::to_string(output).map_err(|source| StepError::Output {
            step: step.to_owned(),
            source,
        })?;
        let now = now_ms();
        if !DB::advance(
            &mut tx,
            self.idem.store().settings(),
            &self.scope,
            &self.key,
            self.generation,
            step,
            now,
        )
        .await?
        {
            return Err(StepError::LockLost);
        }
        let record = StepRecord {
            step: step.to_owned(),
            status: StepStatus::Done,
            derived_key,
            output: Some(output),
        };
        DB::record_step(
            &mut tx,
            self.idem.store().settings(),
            &self.scope,
            &self.key,
            &record,
            now,
        )
        .await?;
        self.idem.store().commit(tx).await?;
        self.begun = true;
        self.recovery_point = step.to_owned();
        self.steps.insert(step.to_owned(), record);
        Ok(())
    }

    /// A local step: `f`'s writes commit with the step's output and the new
    /// recovery point. Once done, later runs get the recorded output back.
    pub async fn local<T, F>(&mut self, step: &str, f: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: for<'t> FnOnce(&'t mut DB::Connection) -> BoxFuture<'t, Result<T, StepError>>,
    {
        if let Some(done) = self.recorded(step)? {
            return Ok(done);
        }
        let mut tx = self.begin().await?;
        let output = f(&mut tx).await?;
        self.commit_step(tx, step, None, &output).await?;
        Ok(output)
    }

    /// A foreign step: commits an intent, calls `f` with the derived key, then
    /// commits the output as the new recovery point. Once done it never runs
    /// again.
    pub async fn foreign<T, F, Fut>(&mut self, step: &str, f: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(ForeignCall) -> Fut,
        Fut: Future<Output = Result<T, StepError>>,
    {
        if let Some(done) = self.recorded(step)? {
            return Ok(done);
        }
        // An interrupted step calls again with the key its intent recorded:
        // that is the key the provider may already have acted on.
        let intent = match self.steps.get(step) {
            Some(StepRecord {
                status: StepStatus::Intent,
                derived_key,
                ..
            }) => Some(derived_key.clone()),
            _ => None,
        };
        let reconciling = intent.is_some();
        let derived_key = intent
            .flatten()
            .unwrap_or_else(|| provider_key(&self.scope, &self.key, self.claimed_at, step));
        if reconciling {
            tracing::warn!(
                scope = %self.scope,
                key = %self.key,
                step,
                "an earlier attempt recorded its intent but not its result; calling again with the same derived key"
            );
            // Committing the takeover, if one is pending, before calling out.
            if let Some(tx) = self.pending.take() {
                self.idem.store().commit(tx).await?;
            }
            self.begun = true;
        } else {
            let mut tx = self.begin().await?;
            let now = now_ms();
            let point = format!("{step}:intent");
            if !DB::advance(
                &mut tx,
                self.idem.store().settings(),
                &self.scope,
                &self.key,
                self.generation,
                &point,
                now,
            )
            .await?
            {
                return Err(StepError::LockLost);
            }
            let record = StepRecord {
                step: step.to_owned(),
                status: StepStatus::Intent,
                derived_key: Some(derived_key.clone()),
                output: None,
            };
            DB::record_step(
                &mut tx,
                self.idem.store().settings(),
                &self.scope,
                &self.key,
                &record,
                now,
            )
            .await?;
            self.idem.store().commit(tx).await?;
            self.begun = true;
            self.steps.insert(step.to_owned(), record);
        }
        let output = f(ForeignCall {
            derived_key: derived_key.clone(),
            reconciling,
        })
        .await?;
        let tx = self.begin().await?;
        self.commit_step(tx, step, Some(derived_key), &output)
            .await?;
        Ok(output)
    }

    /// A foreign step whose call says how it failed with a [`PhaseError`]:
    /// `Final(reply)` ends the operation with `answer(reply)`, stored and
    /// replayed; `Transient` schedules the next run. Generated phase methods
    /// call this, with their reply type's conversion as `answer`.
    pub async fn phase<T, R, F, Fut>(
        &mut self,
        step: &str,
        call: F,
        answer: fn(R) -> Reply,
    ) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(ForeignCall) -> Fut,
        Fut: Future<Output = Result<T, PhaseError<R>>>,
    {
        self.foreign(step, |foreign| async move {
            call(foreign).await.map_err(|e| match e {
                PhaseError::Final(reply) => StepError::Reply(Box::new(answer(reply))),
                PhaseError::Transient(reason) => StepError::Transient(reason),
            })
        })
        .await
    }
}

impl<DB: Backend> Idempotency<DB> {
    /// An axum handler running `operation` under the key protocol, and its
    /// registration with the completer. A key is always required here.
    ///
    /// ```no_run
    /// # use idem_runtime::server::*;
    /// # fn demo(idem: Idempotency<sqlx::Sqlite>, op: impl Operation<sqlx::Sqlite>) {
    /// let app: axum::Router = axum::Router::new()
    ///     .route("/checkout", axum::routing::post(idem.phased(op)));
    /// # }
    /// ```
    pub fn phased<O: Operation<DB>>(
        &self,
        operation: O,
    ) -> impl Fn(Request) -> BoxFuture<'static, Response> + Clone + Send + Sync + 'static {
        let operation: Arc<dyn Operation<DB>> = Arc::new(operation);
        self.register(Arc::clone(&operation));
        let idem = self.clone();
        move |request: Request| {
            let idem = idem.clone();
            let operation = Arc::clone(&operation);
            Box::pin(async move {
                observed(operation.name(), idem.serve_phased(operation, request)).await
            })
        }
    }

    async fn serve_phased(&self, operation: Arc<dyn Operation<DB>>, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let prepared = match self.prepare(&parts, body).await {
            Ok(p) => p,
            Err(e) => return e.into_response(),
        };
        let Some(key) = prepared.key.clone() else {
            return self.missing_key().into_response();
        };
        if let Err(refusal) = operation.validate(&parts, &prepared.body) {
            return marked(refusal.into_response(), Outcome::Refused);
        }
        // No per-key turn here: a phased claim commits with its first step,
        // after which duplicates see it and get the in-flight answer at once.
        let started = std::time::Instant::now();
        let won = match self
            .claim(&prepared, &key, Some(operation.name()), started)
            .await
        {
            Ok(Ok(won)) => won,
            Ok(Err(answer)) => return answer,
            Err(e) => return e.into_response(),
        };
        let ran = if won.resumed.is_some() {
            Outcome::Resumed
        } else {
            Outcome::Executed
        };
        let run = Run {
            idem: self.clone(),
            scope: prepared.scope,
            key,
            generation: won.generation,
            claimed_at: won.claimed_at,
            method: prepared.request.method,
            path: prepared.request.path,
            body: prepared.body,
            steps: HashMap::new(),
            begun: won.resumed.is_some(),
            pending: Some(won.tx),
            recovery_point: "started".to_owned(),
            attempts: won.attempts,
        };
        after_claim(self.drive(operation, run, won.resumed).await.0, ran)
    }

    /// Runs (or resumes) `run` to an answer, storing it when definitive,
    /// and says how the run ended.
    pub(crate) async fn drive(
        &self,
        operation: Arc<dyn Operation<DB>>,
        mut run: Run<DB>,
        resumed: Option<KeyRecord>,
    ) -> (Response, RunEnd) {
        if let Some(record) = resumed {
            run.recovery_point = record.recovery_point;
            let runs = u32::try_from(run.attempts).unwrap_or(u32::MAX);
            let age = std::time::Duration::from_millis(
                u64::try_from(
                    now_ms().saturating_sub(record.resumed_at.unwrap_or(record.created_at)),
                )
                .unwrap_or(0),
            );
            if self.policy().resume.exceeded(runs, age) {
                return self.exhaust(&mut run, &operation).await;
            }
            let steps = match run.pending.as_mut() {
                Some(tx) => DB::load_steps(tx, self.store().settings(), &run.scope, &run.key).await,
                None => Ok(Vec::new()),
            };
            match steps {
                Ok(steps) => {
                    run.steps = steps.into_iter().map(|s| (s.step.clone(), s)).collect();
                }
                Err(e) => return (self.store_error(e).into_response(), RunEnd::Left),
            }
        }
        let outcome = operation.run(&mut run).await;
        let (reply, ended) = match outcome {
            Ok(reply) => (reply, RunEnd::Completed),
            Err(StepError::Reject(reply)) if !run.begun => {
                // Nothing ran: dropping the uncommitted claim leaves no trace.
                drop(run.pending.take());
                return (
                    marked(reply.into_response(), Outcome::Refused),
                    RunEnd::Left,
                );
            }
            Err(StepError::Reply(reply) | StepError::Reject(reply)) => (*reply, RunEnd::Final),
            Err(StepError::LockLost) => {
                return (IdempotencyError::LockLost.into_response(), RunEnd::Left);
            }
            Err(StepError::Store(e)) => {
                self.release(&mut run).await;
                return (self.store_error(e).into_response(), RunEnd::Left);
            }
            Err(StepError::Unavailable(message)) if !run.begun => {
                // Nothing ran: the claim is dropped with its transaction.
                drop(run.pending.take());
                tracing::warn!(
                    scope = %run.scope,
                    key = %run.key,
                    operation = operation.name(),
                    reason = %message,
                    "operation unavailable; nothing recorded"
                );
                return (
                    IdempotencyError::Unavailable { message }.into_response(),
                    RunEnd::Left,
                );
            }
            Err(
                e
                @ (StepError::Transient(_) | StepError::Unavailable(_) | StepError::Output { .. }),
            ) => {
                return self.reschedule(&mut run, &operation, e.to_string()).await;
            }
        };
        if self.policy().failure_replay == FailureReplay::Reattempt
            && reply.status().is_server_error()
        {
            self.release(&mut run).await;
            return (reply.into_response(), RunEnd::Left);
        }
        let (status, headers, body) = reply.into_parts();
        if body.len() > self.policy().max_response_body {
            self.release(&mut run).await;
            let error = IdempotencyError::ResponseTooLarge {
                limit: self.policy().max_response_body,
            };
            return (error.into_response(), RunEnd::Left);
        }
        let stored = StoredResponse::capture(status, &headers, &self.inner.replay_headers, body);
        let result: Result<bool, StoreError> = async {
            let mut tx = run.begin().await?;
            if !DB::complete(
                &mut tx,
                self.store().settings(),
                &run.scope,
                &run.key,
                run.generation,
                &stored,
                now_ms(),
            )
            .await?
            {
                return Ok(false);
            }
            self.store().commit(tx).await?;
            Ok(true)
        }
        .await;
        match result {
            Ok(true) => {
                let mut response = stored.to_response();
                // Headers outside the allow-list still go to the first caller.
                for (name, value) in &headers {
                    if !response.headers().contains_key(name) {
                        response.headers_mut().append(name.clone(), value.clone());
                    }
                }
                (response, ended)
            }
            Ok(false) => (IdempotencyError::LockLost.into_response(), RunEnd::Left),
            Err(e) => (self.store_error(e).into_response(), RunEnd::Left),
        }
    }

    /// After a failed run: schedules the next one with full-jitter backoff, or
    /// ends the record `exhausted` at the schedule's bound. Runs in the
    /// pending transaction when there is one (a takeover that has not
    /// committed yet), so the run is counted either way. A claim that never
    /// committed is rolled back instead: nothing of the request remains.
    async fn reschedule(
        &self,
        run: &mut Run<DB>,
        operation: &Arc<dyn Operation<DB>>,
        message: String,
    ) -> (Response, RunEnd) {
        let resume = self.policy().resume;
        let recovery_point = run.recovery_point.clone();
        let incomplete = |retry_after| {
            IdempotencyError::Incomplete {
                recovery_point: recovery_point.clone(),
                message: message.clone(),
                retry_after,
            }
            .into_response()
        };
        if !run.begun {
            drop(run.pending.take());
            return (incomplete(self.policy().retry_after), RunEnd::Left);
        }
        let ceiling = resume.ceiling(u32::try_from(run.attempts).unwrap_or(u32::MAX));
        let wait = ceiling.mul_f64(rand::random::<f64>());
        let next_at = now_ms().saturating_add(super::clock::ms(wait));
        let outcome: Result<Option<Rescheduled>, StoreError> = async {
            let mut tx = run.begin().await?;
            let outcome = DB::reschedule(
                &mut tx,
                self.store().settings(),
                &run.scope,
                &run.key,
                run.generation,
                next_at,
                i64::from(resume.max_attempts),
                super::clock::ms(resume.give_up_after),
            )
            .await?;
            self.store().commit(tx).await?;
            Ok(outcome)
        }
        .await;
        match outcome {
            Ok(Some(Rescheduled::At(due))) => {
                tracing::warn!(
                    scope = %run.scope,
                    key = %run.key,
                    operation = operation.name(),
                    recovery_point = %run.recovery_point,
                    attempt = run.attempts,
                    next_attempt_in_ms = super::clock::ms(wait),
                    error = %message,
                    "run failed; next attempt scheduled"
                );
                (incomplete(super::engine::until(due)), RunEnd::Rescheduled)
            }
            Ok(Some(Rescheduled::Exhausted { attempts })) => {
                self.report_exhausted(run, operation, attempts, &message);
                let answer = IdempotencyError::Exhausted {
                    recovery_point: run.recovery_point.clone(),
                    attempts,
                };
                // This run ran: its request is executed or resumed, not a replay.
                let mut response = answer.into_response();
                response.extensions_mut().remove::<Outcome>();
                (response, RunEnd::Exhausted)
            }
            // Taken over meanwhile: the new holder decides what happens next.
            Ok(None) => (IdempotencyError::LockLost.into_response(), RunEnd::Left),
            Err(e) => {
                tracing::warn!(error = %e, key = %run.key, "could not schedule the next attempt; the lock expires after lock-timeout");
                (incomplete(self.policy().lock_timeout), RunEnd::Left)
            }
        }
    }

    /// A takeover found the record past its bound (a run that crashed on
    /// its last attempt, or a record older than `give-up-after`): ends it
    /// `exhausted` without running anything.
    async fn exhaust(
        &self,
        run: &mut Run<DB>,
        operation: &Arc<dyn Operation<DB>>,
    ) -> (Response, RunEnd) {
        let outcome: Result<bool, StoreError> = async {
            let mut tx = run.begin().await?;
            let done = DB::exhaust(
                &mut tx,
                self.store().settings(),
                &run.scope,
                &run.key,
                run.generation,
            )
            .await?;
            self.store().commit(tx).await?;
            Ok(done)
        }
        .await;
        match outcome {
            Ok(true) => {
                let attempts = run.attempts.saturating_sub(1);
                self.report_exhausted(run, operation, attempts, "its schedule ran out");
                let answer = IdempotencyError::Exhausted {
                    recovery_point: run.recovery_point.clone(),
                    attempts,
                };
                (answer.into_response(), RunEnd::Exhausted)
            }
            Ok(false) => (IdempotencyError::LockLost.into_response(), RunEnd::Left),
            Err(e) => (self.store_error(e).into_response(), RunEnd::Left),
        }
    }

    fn report_exhausted(
        &self,
        run: &Run<DB>,
        operation: &Arc<dyn Operation<DB>>,
        attempts: i64,
        last_error: &str,
    ) {
        tracing::error!(
            scope = %run.scope,
            key = %run.key,
            operation = operation.name(),
            recovery_point = %run.recovery_point,
            attempts,
            last_error,
            "request exhausted its attempts and will not be resumed; its effects stop at this recovery point"
        );
    }

    /// Lets go of the lock so a retry can resume at once. An uncommitted claim
    /// is simply rolled back: nothing of the request remains.
    async fn release(&self, run: &mut Run<DB>) {
        if run.pending.take().is_some() {
            return;
        }
        let released: Result<(), StoreError> = async {
            let mut tx = self.store().pool().begin().await?;
            DB::release(
                &mut tx,
                self.store().settings(),
                &run.scope,
                &run.key,
                run.generation,
            )
            .await?;
            self.store().commit(tx).await?;
            Ok(())
        }
        .await;
        if let Err(e) = released {
            tracing::warn!(error = %e, key = %run.key, "could not release the lock; it expires after lock-timeout");
        }
    }

    /// Resumes one abandoned record (the completer's unit of work): how its
    /// run ended, and the operation's name; `None` when someone else holds
    /// or finished it.
    pub(crate) async fn resume_abandoned(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<(RunEnd, String)>, StoreError> {
        // The operation first: its own policy's lock timeout decides whether
        // the record may be taken over.
        let name = {
            let mut tx = self.store().pool().begin().await?;
            match DB::load(&mut tx, self.store().settings(), scope, key).await? {
                Some(KeyRecord {
                    operation: Some(name),
                    ..
                }) => name,
                _ => return Ok(None),
            }
        };
        let Some((operation, owner)) = self.operation(&name) else {
            tracing::warn!(scope, key, operation = %name, "abandoned request of an operation this process does not register");
            return Ok(None);
        };
        let now = now_ms();
        let cutoff = now.saturating_sub(super::clock::ms(owner.policy().lock_timeout));
        let mut tx = owner.store().pool().begin().await?;
        let Some((generation, attempts)) =
            DB::take_over(&mut tx, owner.store().settings(), scope, key, cutoff, now).await?
        else {
            return Ok(None);
        };
        let Some(record) = DB::load(&mut tx, owner.store().settings(), scope, key).await? else {
            return Ok(None);
        };
        let Some(request) = record.request.clone() else {
            return Ok(None);
        };
        let run = Run {
            idem: owner.clone(),
            scope: scope.to_owned(),
            key: key.to_owned(),
            generation,
            claimed_at: record.created_at,
            method: request.method,
            path: request.path,
            body: Bytes::from(request.body),
            steps: HashMap::new(),
            pending: Some(tx),
            begun: true,
            recovery_point: record.recovery_point.clone(),
            attempts,
        };
        let (_, ended) = owner.drive(operation, run, Some(record)).await;
        Ok(Some((ended, name)))
    }
}
