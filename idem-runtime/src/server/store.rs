//! The key store: embedded migrations and every statement the protocol runs,
//! for SQLite and PostgreSQL.
//!
//! The statements are written once, in the dialect both engines accept
//! (`$N` placeholders, `INSERT … ON CONFLICT`, `RETURNING`), and instantiated
//! per backend by a macro so each instantiation works on concrete sqlx types.
//! Any Postgres-wire engine with those features (CockroachDB, YugabyteDB) can
//! run the PostgreSQL instantiation unchanged.

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgPoolOptions, Postgres};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Pool, Row, Sqlite};

use super::error::StoreError;
use super::gate::KeyGate;
use super::health::{Admit, Failure, Health, classify};
use super::response::StoredResponse;

/// A boxed, sendable future, as the backend trait returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// State of a key record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Claimed; the request has not stored its response yet.
    InFlight,
    /// The response is stored and replays on every retry inside the window.
    Complete,
    /// A phased request reached its resume bound (attempts or age) before it
    /// finished: terminal. Nothing resumes it; a retry is refused with
    /// [`KEY_EXHAUSTED`](crate::protocol::KEY_EXHAUSTED).
    Exhausted,
}

impl KeyState {
    /// The value stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::InFlight => "in_flight",
            KeyState::Complete => "complete",
            KeyState::Exhausted => "exhausted",
        }
    }

    fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "in_flight" => Ok(KeyState::InFlight),
            "complete" => Ok(KeyState::Complete),
            "exhausted" => Ok(KeyState::Exhausted),
            other => Err(StoreError::Corrupt {
                what: "state",
                value: other.to_owned(),
            }),
        }
    }
}

/// The request a phased operation needs to be resumed without its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRequest {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Raw body bytes.
    pub body: Vec<u8>,
}

/// What a claim writes.
#[derive(Debug, Clone)]
pub struct NewClaim<'a> {
    /// Caller scope.
    pub scope: &'a str,
    /// The idempotency key.
    pub key: &'a str,
    /// SHA-256 of method, path and canonical body, hex.
    pub fingerprint: &'a str,
    /// Registered operation name, for phased operations the completer can resume.
    pub operation: Option<&'a str>,
    /// The request, kept for phased operations only.
    pub request: Option<&'a StoredRequest>,
    /// Milliseconds since the Unix epoch.
    pub now: i64,
}

/// One stored key row.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    /// Caller scope.
    pub scope: String,
    /// The idempotency key.
    pub key: String,
    /// Request fingerprint the key was first used with.
    pub fingerprint: String,
    /// In flight or complete.
    pub state: KeyState,
    /// Operation name of a phased operation.
    pub operation: Option<String>,
    /// The stored request of a phased operation.
    pub request: Option<StoredRequest>,
    /// Last recovery point reached.
    pub recovery_point: String,
    /// Fencing token: bumped on every claim, reclaim and takeover.
    pub lock_generation: i64,
    /// When the current holder last proved it was alive (ms since epoch).
    pub locked_at: Option<i64>,
    /// The stored response once complete.
    pub response: Option<StoredResponse>,
    /// When the key was claimed (ms since epoch); the replay window starts here.
    pub created_at: i64,
    /// Runs of the request so far, the first included: every takeover (by a
    /// retry or the completer) adds one.
    pub attempts: i64,
    /// When the next run may start (ms since epoch), after a failed one.
    pub next_attempt_at: Option<i64>,
}

/// Whether a step of a phased operation has only its intent recorded or is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepStatus {
    /// Written and committed before a foreign call; its outcome is not recorded.
    Intent,
    /// The step's output is recorded; it never runs again.
    Done,
}

impl StepStatus {
    fn as_str(self) -> &'static str {
        match self {
            StepStatus::Intent => "intent",
            StepStatus::Done => "done",
        }
    }
}

/// One stored step of a phased operation.
#[derive(Debug, Clone)]
pub struct StepRecord {
    /// Step name.
    pub step: String,
    /// Intent or done.
    pub status: StepStatus,
    /// Key passed to the foreign system for this step.
    pub derived_key: Option<String>,
    /// JSON output of a done step.
    pub output: Option<String>,
}

/// A record the reaper deleted.
#[derive(Debug, Clone)]
pub struct ReapedRecord {
    /// Caller scope.
    pub scope: String,
    /// The idempotency key.
    pub key: String,
    /// State it was in when deleted; `InFlight` means it never finished.
    pub state: KeyState,
    /// Operation name, if phased.
    pub operation: Option<String>,
    /// Last recovery point reached.
    pub recovery_point: String,
}

/// A phased request in the terminal state [`KeyState::Exhausted`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExhaustedRecord {
    /// Caller scope.
    pub scope: String,
    /// The idempotency key.
    pub key: String,
    /// Operation name.
    pub operation: Option<String>,
    /// Where its effects stop.
    pub recovery_point: String,
    /// Runs it was given.
    pub attempts: i64,
    /// When the key was claimed (ms since epoch).
    pub created_at: i64,
}

/// What a failed run of a phased request left: rescheduled, or at its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rescheduled {
    /// In flight, due again at this time (ms since epoch).
    At(i64),
    /// The bound is reached: the record is now [`KeyState::Exhausted`].
    Exhausted {
        /// Runs it was given.
        attempts: i64,
    },
}

/// A database engine the key store runs on.
///
/// Implemented for [`Sqlite`] and [`Postgres`]. Every method runs on a
/// connection the caller provides — usually the transaction that also carries
/// the business effect — so the key's state changes commit with it.
pub trait Backend: sqlx::Database + Sized {
    /// Creates or upgrades the schema; safe to call from several processes at once.
    fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The claim: one `INSERT … ON CONFLICT (scope, idem_key) DO NOTHING RETURNING`.
    /// `Some(generation)` means this caller won.
    ///
    /// When another transaction holds an uncommitted claim on the same key
    /// the insert waits for it to end; `wait` bounds that wait, after which
    /// the claim fails with [`StoreError::LockWaitExpired`] and the
    /// transaction is aborted. A won claim lifts the bound in the same
    /// statement, so it never applies to the handler's statements. A lost
    /// one leaves it for the statements that examine the record;
    /// [`Backend::lift_claim_bound`] lifts it before a record won some
    /// other way (re-claimed, taken over) goes to a handler. (SQLite never
    /// waits here: its one writer connection is held by whoever claimed.)
    ///
    /// `session` is the `lock_timeout` every connection of the pool already
    /// runs with ([`Store::connect_postgres_bounded`]). When it is `wait`, to
    /// the setting's millisecond, the claim is the plain insert and sets
    /// nothing.
    fn claim<'a>(
        conn: &'a mut Self::Connection,
        claim: &'a NewClaim<'a>,
        wait: Duration,
        session: Option<Duration>,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>>;

    /// Puts back the lock wait the transaction had before a lost
    /// [`Backend::claim`] bounded it (a no-op where nothing was bounded, and
    /// on SQLite).
    fn lift_claim_bound(conn: &mut Self::Connection) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The claim at commit ([`ClaimAt::Commit`](super::ClaimAt::Commit)):
    /// inserts the key row complete, with `response`, as the last statement
    /// of the handler's transaction. `Some(generation)` means this caller
    /// won; `None` that the key has a committed record (the transaction is
    /// still usable, to read it).
    ///
    /// When another transaction holds an uncommitted row for the key, the
    /// insert waits for it to end; on PostgreSQL `wait` bounds that wait,
    /// after which the claim fails with [`StoreError::LockWaitExpired`] and
    /// the transaction is aborted. The bound is set by the statement itself
    /// (unless `session` already is `wait`, as in [`Backend::claim`]) and
    /// stays for the rest of the transaction, which only commits, reads the
    /// record or rolls back.
    fn claim_complete<'a>(
        conn: &'a mut Self::Connection,
        claim: &'a NewClaim<'a>,
        response: &'a StoredResponse,
        wait: Duration,
        session: Option<Duration>,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>>;

    /// Deletes a complete record claimed before `created_before` and its
    /// steps, so that a claim at commit can take the key: past its replay
    /// window a key names a new request. `true` when it was deleted.
    fn delete_expired<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
        created_before: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Re-claims a record whose replay window has passed, in one conditional
    /// `UPDATE`; a complete record, or an in-flight one whose lock is stale.
    fn reclaim_expired<'a>(
        conn: &'a mut Self::Connection,
        claim: &'a NewClaim<'a>,
        created_before: i64,
        locked_before: i64,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>>;

    /// Reads one record.
    fn load<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<KeyRecord>, StoreError>>;

    /// Takes over an in-flight record whose lock is older than `locked_before`
    /// and whose next run is due at `now`: one conditional `UPDATE` that
    /// bumps the fencing generation and counts the run. Returns the new
    /// generation and the runs so far, this one included.
    fn take_over<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
        locked_before: i64,
        now: i64,
    ) -> BoxFuture<'a, Result<Option<(i64, i64)>, StoreError>>;

    /// After a failed run, if `generation` still holds the record: releases
    /// the lock and sets the next run for `next_at`, or, when the record has
    /// had `max_attempts` runs or `next_at` is past `give_up_after_ms` from
    /// its claim, moves it to [`KeyState::Exhausted`]. One conditional
    /// `UPDATE`.
    fn reschedule<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        next_at: i64,
        max_attempts: i64,
        give_up_after_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Rescheduled>, StoreError>>;

    /// Moves a record `generation` holds to [`KeyState::Exhausted`] (a takeover
    /// found it past its bound).
    fn exhaust<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
        generation: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// How many records are [`KeyState::Exhausted`].
    fn count_exhausted(conn: &mut Self::Connection) -> BoxFuture<'_, Result<i64, StoreError>>;

    /// Up to `limit` exhausted records, oldest first.
    fn exhausted(
        conn: &mut Self::Connection,
        limit: i64,
    ) -> BoxFuture<'_, Result<Vec<ExhaustedRecord>, StoreError>>;

    /// Moves the record to its recovery point and refreshes the lock, if
    /// `generation` still holds it.
    fn advance<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        recovery_point: &'a str,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Lets go of the lock so a retry can take over at once.
    fn release<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
        generation: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Stores the response and marks the record complete, if `generation`
    /// still holds the lock.
    fn complete<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        response: &'a StoredResponse,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Reads the steps of a phased operation.
    fn load_steps<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Vec<StepRecord>, StoreError>>;

    /// Writes (or overwrites) one step.
    fn record_step<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
        step: &'a StepRecord,
        now: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Deletes the steps of one key (a reclaimed key starts over).
    fn delete_steps<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// In-flight records of phased operations whose lock is older than
    /// `locked_before` and whose next run is due at `now`.
    fn abandoned<'a>(
        conn: &'a mut Self::Connection,
        locked_before: i64,
        now: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>>;

    /// Deletes records claimed before `created_before` (and their steps) and
    /// returns what was deleted.
    fn reap<'a>(
        conn: &'a mut Self::Connection,
        created_before: i64,
    ) -> BoxFuture<'a, Result<Vec<ReapedRecord>, StoreError>>;
}

const SELECT_RECORD: &str = "SELECT scope, idem_key, fingerprint, state, operation, request_method, \
     request_path, request_body, recovery_point, lock_generation, locked_at, response_status, \
     response_headers, response_body, created_at, attempts, next_attempt_at FROM idem_keys \
     WHERE scope = $1 AND idem_key = $2";

// The claim of a single-phase request binds what it writes and nothing
// more; a phased request also keeps its operation and request for the
// completer. `$state` is the state column's value: PostgreSQL bounds the
// wait there.
macro_rules! claim_single {
    ($state:expr) => {
        concat!(
            "INSERT INTO idem_keys (scope, idem_key, fingerprint, state, recovery_point, \
             lock_generation, locked_at, created_at) VALUES ($1, $2, $3, ",
            $state,
            ", 'started', 1, $4, $4) \
             ON CONFLICT (scope, idem_key) DO NOTHING RETURNING lock_generation"
        )
    };
}
macro_rules! claim_phased {
    ($state:expr) => {
        concat!(
            "INSERT INTO idem_keys (scope, idem_key, fingerprint, state, operation, \
             request_method, request_path, request_body, recovery_point, lock_generation, \
             locked_at, created_at) VALUES ($1, $2, $3, ",
            $state,
            ", $5, $6, $7, $8, 'started', 1, $4, $4) \
             ON CONFLICT (scope, idem_key) DO NOTHING RETURNING lock_generation"
        )
    };
}
// PostgreSQL bounds the wait for an uncommitted duplicate with a
// transaction-local `lock_timeout`, inside the insert itself, so the bound
// costs neither a statement nor a round trip. The row's values are computed
// before the row is inserted and its key checked, which is where the wait
// happens; so the `state` value sets the bound on its way (the inner
// `set_config`, an argument of the outer, runs first and keeps the
// transaction's value aside in a placeholder setting). The `RETURNING`
// list is computed for an inserted row only, after any wait, and puts that
// value back: a won claim leaves the handler's statements unbounded. A
// conflict returns no row and leaves the bound on for the statements that
// examine the record; `lift_bound!` puts it back there when needed. When
// the wait expires the statement fails with 55P03 and the aborted
// transaction discards the setting anyway.
macro_rules! bounded_state {
    ($wait:literal) => {
        concat!(
            "'in_flight' || left(set_config('lock_timeout', ",
            $wait,
            " || left(set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), \
             true), 0), true), 0)"
        )
    };
}
// The value kept aside, or the current one where no claim bounded this
// transaction (a placeholder setting once used in a session reads as ''
// after its transaction).
macro_rules! lift_bound {
    () => {
        "set_config('lock_timeout', \
         COALESCE(NULLIF(current_setting('idem.outer_lock_timeout', true), ''), \
         current_setting('lock_timeout')), true)"
    };
}

const CLAIM: &str = claim_single!("'in_flight'");
const CLAIM_PHASED: &str = claim_phased!("'in_flight'");
const CLAIM_POSTGRES: &str = concat!(claim_single!(bounded_state!("$5")), ", ", lift_bound!());
const CLAIM_PHASED_POSTGRES: &str =
    concat!(claim_phased!(bounded_state!("$9")), ", ", lift_bound!());
const LIFT_BOUND_POSTGRES: &str = concat!("SELECT ", lift_bound!());

// The claim at commit: the key row, complete, in the handler's transaction.
macro_rules! claim_complete {
    ($values:literal) => {
        concat!(
            "INSERT INTO idem_keys (scope, idem_key, fingerprint, state, recovery_point, \
             lock_generation, created_at, completed_at, response_status, response_headers, \
             response_body) ",
            $values,
            " ON CONFLICT (scope, idem_key) DO NOTHING RETURNING lock_generation"
        )
    };
}
const CLAIM_COMPLETE: &str =
    claim_complete!("VALUES ($1, $2, $3, 'complete', 'finished', 1, $4, $4, $5, $6, $7)");
// PostgreSQL's sets its bound first: a MATERIALIZED CTE is computed before
// the insert reads its row from it. Nothing after it in the transaction
// waits on a lock, so the bound is left to end with the transaction.
const CLAIM_COMPLETE_POSTGRES: &str = concat!(
    "WITH bound AS MATERIALIZED (SELECT set_config('lock_timeout', $8, true)) ",
    claim_complete!("SELECT $1, $2, $3, 'complete', 'finished', 1, $4, $4, $5, $6, $7 FROM bound")
);

const DELETE_EXPIRED: &str = "DELETE FROM idem_keys \
     WHERE scope = $1 AND idem_key = $2 AND created_at < $3 AND state = 'complete'";

/// What a claim statement's outcome means: the generation won, `None` for a
/// key already taken, or [`StoreError::LockWaitExpired`] when the bound
/// `wait` passed first.
fn claimed(
    outcome: Result<Option<(i64,)>, sqlx::Error>,
    wait: Duration,
) -> Result<Option<i64>, StoreError> {
    match outcome {
        Ok(row) => Ok(row.map(|(generation,)| generation)),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
            Err(StoreError::LockWaitExpired { waited: wait })
        }
        Err(e) => Err(e.into()),
    }
}

/// Arguments with room for `count` values of `bytes` in all, so binding the
/// hot statements' values does not grow the buffers value by value.
fn arguments<'q, DB: sqlx::Database>(count: usize, bytes: usize) -> DB::Arguments<'q> {
    let mut arguments = DB::Arguments::<'q>::default();
    sqlx::Arguments::reserve(&mut arguments, count, bytes);
    arguments
}

/// What a value takes in an argument buffer: its bytes and a length word.
fn size(bytes: &[u8]) -> usize {
    bytes.len() + 4
}

/// What an `i64` takes in an argument buffer.
const INTEGER: usize = 12;

/// Room for the lock wait a bounded statement binds last (`'2000ms'`).
const BOUND: usize = 16;

/// `wait` in whole milliseconds, at least one (PostgreSQL reads 0 as no
/// limit; the setting tops out at `i32::MAX` ms).
fn lock_timeout_ms(wait: Duration) -> u128 {
    wait.as_millis().clamp(1, i32::MAX as u128)
}

/// `wait` as a `lock_timeout` value.
fn lock_timeout_setting(wait: Duration) -> String {
    format!("{}ms", lock_timeout_ms(wait))
}

/// Whether connections that run with `lock_timeout = session` already bound
/// a claim's `wait`: the same value to the setting's resolution (a wait
/// that lost microseconds to the key's turn still rounds up to it).
fn session_bounds(session: Option<Duration>, wait: Duration) -> bool {
    let ceil = wait.as_micros().div_ceil(1000).clamp(1, i32::MAX as u128);
    session
        .is_some_and(|session| (lock_timeout_ms(wait)..=ceil).contains(&lock_timeout_ms(session)))
}

/// SQLSTATE lock_not_available: a `lock_timeout` expired.
const LOCK_NOT_AVAILABLE: &str = "55P03";

const RECLAIM_EXPIRED: &str = "UPDATE idem_keys SET fingerprint = $3, state = 'in_flight', \
     operation = $4, request_method = $5, request_path = $6, request_body = $7, \
     recovery_point = 'started', lock_generation = lock_generation + 1, locked_at = $8, \
     response_status = NULL, response_headers = NULL, response_body = NULL, created_at = $8, \
     completed_at = NULL, attempts = 1, next_attempt_at = NULL \
     WHERE scope = $1 AND idem_key = $2 AND created_at < $9 \
       AND (state = 'complete' OR locked_at IS NULL OR locked_at < $10) \
     RETURNING lock_generation";

const TAKE_OVER: &str = "UPDATE idem_keys SET locked_at = $4, lock_generation = lock_generation + 1, \
     attempts = attempts + 1 \
     WHERE scope = $1 AND idem_key = $2 AND state = 'in_flight' \
       AND (locked_at IS NULL OR locked_at < $3) \
       AND (next_attempt_at IS NULL OR next_attempt_at <= $4) \
     RETURNING lock_generation, attempts";

// The right-hand sides read the row as it was, so `attempts` is the count of
// runs including the one that just failed.
const RESCHEDULE: &str = "UPDATE idem_keys SET locked_at = NULL, next_attempt_at = $4, \
     state = CASE WHEN attempts >= $5 OR $4 > created_at + $6 THEN 'exhausted' ELSE 'in_flight' END \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight' \
     RETURNING state, attempts";

// The takeover counted a run that never starts: it is taken back.
const EXHAUST: &str = "UPDATE idem_keys SET state = 'exhausted', locked_at = NULL, \
     attempts = attempts - 1 \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight'";

const COUNT_EXHAUSTED: &str = "SELECT COUNT(*) FROM idem_keys WHERE state = 'exhausted'";

const EXHAUSTED: &str = "SELECT scope, idem_key, operation, recovery_point, attempts, created_at \
     FROM idem_keys WHERE state = 'exhausted' ORDER BY created_at LIMIT $1";

const ADVANCE: &str = "UPDATE idem_keys SET recovery_point = $4, locked_at = $5 \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight'";

const RELEASE: &str = "UPDATE idem_keys SET locked_at = NULL \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight'";

const COMPLETE: &str = "UPDATE idem_keys SET state = 'complete', response_status = $4, \
     response_headers = $5, response_body = $6, completed_at = $7, locked_at = NULL, \
     recovery_point = 'finished' \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight'";

const LOAD_STEPS: &str = "SELECT step, status, derived_key, output FROM idem_steps \
     WHERE scope = $1 AND idem_key = $2";

const RECORD_STEP: &str = "INSERT INTO idem_steps (scope, idem_key, step, status, derived_key, \
     output, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
     ON CONFLICT (scope, idem_key, step) DO UPDATE SET status = excluded.status, \
     derived_key = excluded.derived_key, output = excluded.output, updated_at = excluded.updated_at";

const DELETE_STEPS: &str = "DELETE FROM idem_steps WHERE scope = $1 AND idem_key = $2";

const ABANDONED: &str = "SELECT scope, idem_key FROM idem_keys \
     WHERE state = 'in_flight' AND operation IS NOT NULL \
       AND (locked_at IS NULL OR locked_at < $1) \
       AND (next_attempt_at IS NULL OR next_attempt_at <= $2) \
     ORDER BY created_at LIMIT $3";

const REAP: &str = "DELETE FROM idem_keys WHERE created_at < $1 \
     RETURNING scope, idem_key, state, operation, recovery_point";

const REAP_STEPS: &str = "DELETE FROM idem_steps WHERE NOT EXISTS (SELECT 1 FROM idem_keys k \
     WHERE k.scope = idem_steps.scope AND k.idem_key = idem_steps.idem_key)";

const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS idem_schema_migrations (\
     version BIGINT PRIMARY KEY, description TEXT NOT NULL, applied_at BIGINT NOT NULL)";

/// One embedded migration.
struct Migration {
    version: i64,
    description: &'static str,
    sql: &'static str,
}

const SQLITE_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "idempotency keys and steps",
        sql: include_str!("../../migrations/sqlite/0001_idempotency_keys.sql"),
    },
    Migration {
        version: 2,
        description: "resume schedule and the exhausted state",
        sql: include_str!("../../migrations/sqlite/0002_resume_schedule.sql"),
    },
];

const POSTGRES_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "idempotency keys and steps",
        sql: include_str!("../../migrations/postgres/0001_idempotency_keys.sql"),
    },
    Migration {
        version: 2,
        description: "resume schedule and the exhausted state",
        sql: include_str!("../../migrations/postgres/0002_resume_schedule.sql"),
    },
    Migration {
        version: 3,
        description: "the state column without its CHECK constraint",
        sql: include_str!("../../migrations/postgres/0003_state_unchecked.sql"),
    },
];

// Both engines serialize the migration run: SQLite through its single writer
// (the first statement writes), PostgreSQL through a transaction-scoped
// advisory lock, so two processes starting together never race.
const SQLITE_MIGRATION_LOCK: &str = "SELECT 1";
const POSTGRES_MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(7263541209)";

fn record_from_row<R>(row: &R) -> Result<KeyRecord, StoreError>
where
    R: Row,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<Vec<u8>>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
    let state: String = row.try_get("state")?;
    let method: Option<String> = row.try_get("request_method")?;
    let path: Option<String> = row.try_get("request_path")?;
    let body: Option<Vec<u8>> = row.try_get("request_body")?;
    let request = match (method, path) {
        (Some(method), Some(path)) => Some(StoredRequest {
            method,
            path,
            body: body.unwrap_or_default(),
        }),
        _ => None,
    };
    let status: Option<i64> = row.try_get("response_status")?;
    let headers: Option<String> = row.try_get("response_headers")?;
    let response_body: Option<Vec<u8>> = row.try_get("response_body")?;
    let response = match status {
        Some(status) => Some(StoredResponse::from_columns(
            status,
            headers.as_deref(),
            response_body.unwrap_or_default(),
        )?),
        None => None,
    };
    Ok(KeyRecord {
        scope: row.try_get("scope")?,
        key: row.try_get("idem_key")?,
        fingerprint: row.try_get("fingerprint")?,
        state: KeyState::parse(&state)?,
        operation: row.try_get("operation")?,
        request,
        recovery_point: row.try_get("recovery_point")?,
        lock_generation: row.try_get("lock_generation")?,
        locked_at: row.try_get("locked_at")?,
        response,
        created_at: row.try_get("created_at")?,
        attempts: row.try_get("attempts")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
    })
}

fn now_for_migrations() -> i64 {
    super::clock::now_ms()
}

macro_rules! impl_backend {
    ($db:ty, $migrations:expr, $lock:expr, $claims:expr, $complete:expr, $lift:expr) => {
        impl Backend for $db {
            fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), StoreError>> {
                Box::pin(async move {
                    let mut tx = pool.begin().await?;
                    sqlx::query(MIGRATIONS_TABLE).execute(&mut *tx).await?;
                    sqlx::query($lock).execute(&mut *tx).await?;
                    let applied: Vec<i64> =
                        sqlx::query_scalar("SELECT version FROM idem_schema_migrations")
                            .fetch_all(&mut *tx)
                            .await?;
                    for m in $migrations {
                        if applied.contains(&m.version) {
                            continue;
                        }
                        sqlx::Executor::execute(&mut *tx, m.sql)
                            .await
                            .map_err(|source| StoreError::Migration {
                                version: m.version,
                                source,
                            })?;
                        sqlx::query(
                            "INSERT INTO idem_schema_migrations (version, description, applied_at) \
                             VALUES ($1, $2, $3)",
                        )
                        .bind(m.version)
                        .bind(m.description)
                        .bind(now_for_migrations())
                        .execute(&mut *tx)
                        .await?;
                    }
                    tx.commit().await?;
                    Ok(())
                })
            }

            fn claim<'a>(
                conn: &'a mut Self::Connection,
                c: &'a NewClaim<'a>,
                wait: Duration,
                session: Option<Duration>,
            ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
                Box::pin(async move {
                    let ((plain_single, plain_phased), bounding) = $claims;
                    let bounded = bounding.filter(|_| !session_bounds(session, wait));
                    let (single, phased) = bounded.unwrap_or((plain_single, plain_phased));
                    let statement = if c.operation.is_some() || c.request.is_some() {
                        sqlx::query_as::<_, (i64,)>(phased)
                            .bind(c.scope)
                            .bind(c.key)
                            .bind(c.fingerprint)
                            .bind(c.now)
                            .bind(c.operation)
                            .bind(c.request.map(|r| r.method.as_str()))
                            .bind(c.request.map(|r| r.path.as_str()))
                            .bind(c.request.map(|r| r.body.as_slice()))
                    } else {
                        let bytes = size(c.scope.as_bytes())
                            + size(c.key.as_bytes())
                            + size(c.fingerprint.as_bytes())
                            + INTEGER
                            + BOUND;
                        sqlx::query_as_with::<_, (i64,), _>(single, arguments::<$db>(5, bytes))
                            .bind(c.scope)
                            .bind(c.key)
                            .bind(c.fingerprint)
                            .bind(c.now)
                    };
                    let statement = if bounded.is_some() {
                        statement.bind(lock_timeout_setting(wait))
                    } else {
                        statement
                    };
                    claimed(statement.fetch_optional(&mut *conn).await, wait)
                })
            }

            fn claim_complete<'a>(
                conn: &'a mut Self::Connection,
                c: &'a NewClaim<'a>,
                response: &'a StoredResponse,
                wait: Duration,
                session: Option<Duration>,
            ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
                Box::pin(async move {
                    let (plain, bounding) = $complete;
                    let bounded = bounding.filter(|_| !session_bounds(session, wait));
                    let statement = bounded.unwrap_or(plain);
                    let headers = response.headers_json();
                    let bytes = size(c.scope.as_bytes())
                        + size(c.key.as_bytes())
                        + size(c.fingerprint.as_bytes())
                        + size(headers.as_deref().unwrap_or_default().as_bytes())
                        + size(&response.body)
                        + 2 * INTEGER
                        + BOUND;
                    let mut query =
                        sqlx::query_as_with::<_, (i64,), _>(statement, arguments::<$db>(8, bytes))
                            .bind(c.scope)
                            .bind(c.key)
                            .bind(c.fingerprint)
                            .bind(c.now)
                            .bind(i64::from(response.status))
                            .bind(headers)
                            .bind(response.body.as_ref());
                    if bounded.is_some() {
                        query = query.bind(lock_timeout_setting(wait));
                    }
                    claimed(query.fetch_optional(&mut *conn).await, wait)
                })
            }

            fn delete_expired<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
                created_before: i64,
            ) -> BoxFuture<'a, Result<bool, StoreError>> {
                Box::pin(async move {
                    let deleted = sqlx::query(DELETE_EXPIRED)
                        .bind(scope)
                        .bind(key)
                        .bind(created_before)
                        .execute(&mut *conn)
                        .await?;
                    if deleted.rows_affected() == 0 {
                        return Ok(false);
                    }
                    sqlx::query(DELETE_STEPS)
                        .bind(scope)
                        .bind(key)
                        .execute(&mut *conn)
                        .await?;
                    Ok(true)
                })
            }

            fn lift_claim_bound(
                conn: &mut Self::Connection,
            ) -> BoxFuture<'_, Result<(), StoreError>> {
                Box::pin(async move {
                    if let Some(lift) = $lift {
                        sqlx::query(lift).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            }

            fn reclaim_expired<'a>(
                conn: &'a mut Self::Connection,
                c: &'a NewClaim<'a>,
                created_before: i64,
                locked_before: i64,
            ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
                Box::pin(async move {
                    let generation: Option<i64> = sqlx::query_scalar(RECLAIM_EXPIRED)
                        .bind(c.scope)
                        .bind(c.key)
                        .bind(c.fingerprint)
                        .bind(c.operation)
                        .bind(c.request.map(|r| r.method.as_str()))
                        .bind(c.request.map(|r| r.path.as_str()))
                        .bind(c.request.map(|r| r.body.as_slice()))
                        .bind(c.now)
                        .bind(created_before)
                        .bind(locked_before)
                        .fetch_optional(&mut *conn)
                        .await?;
                    Ok(generation)
                })
            }

            fn load<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
            ) -> BoxFuture<'a, Result<Option<KeyRecord>, StoreError>> {
                Box::pin(async move {
                    let row = sqlx::query(SELECT_RECORD)
                        .bind(scope)
                        .bind(key)
                        .fetch_optional(&mut *conn)
                        .await?;
                    row.as_ref().map(record_from_row).transpose()
                })
            }

            fn take_over<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
                locked_before: i64,
                now: i64,
            ) -> BoxFuture<'a, Result<Option<(i64, i64)>, StoreError>> {
                Box::pin(async move {
                    let taken: Option<(i64, i64)> = sqlx::query_as(TAKE_OVER)
                        .bind(scope)
                        .bind(key)
                        .bind(locked_before)
                        .bind(now)
                        .fetch_optional(&mut *conn)
                        .await?;
                    Ok(taken)
                })
            }

            fn reschedule<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
                generation: i64,
                next_at: i64,
                max_attempts: i64,
                give_up_after_ms: i64,
            ) -> BoxFuture<'a, Result<Option<Rescheduled>, StoreError>> {
                Box::pin(async move {
                    let row: Option<(String, i64)> = sqlx::query_as(RESCHEDULE)
                        .bind(scope)
                        .bind(key)
                        .bind(generation)
                        .bind(next_at)
                        .bind(max_attempts)
                        .bind(give_up_after_ms)
                        .fetch_optional(&mut *conn)
                        .await?;
                    row.map(|(state, attempts)| match KeyState::parse(&state)? {
                        KeyState::Exhausted => Ok(Rescheduled::Exhausted { attempts }),
                        _ => Ok(Rescheduled::At(next_at)),
                    })
                    .transpose()
                })
            }

            fn exhaust<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
                generation: i64,
            ) -> BoxFuture<'a, Result<bool, StoreError>> {
                Box::pin(async move {
                    let done = sqlx::query(EXHAUST)
                        .bind(scope)
                        .bind(key)
                        .bind(generation)
                        .execute(&mut *conn)
                        .await?;
                    Ok(done.rows_affected() == 1)
                })
            }

            fn count_exhausted(
                conn: &mut Self::Connection,
            ) -> BoxFuture<'_, Result<i64, StoreError>> {
                Box::pin(async move {
                    let count: i64 = sqlx::query_scalar(COUNT_EXHAUSTED)
                        .fetch_one(&mut *conn)
                        .await?;
                    Ok(count)
                })
            }

            fn exhausted(
                conn: &mut Self::Connection,
                limit: i64,
            ) -> BoxFuture<'_, Result<Vec<ExhaustedRecord>, StoreError>> {
                Box::pin(async move {
                    let rows = sqlx::query(EXHAUSTED)
                        .bind(limit)
                        .fetch_all(&mut *conn)
                        .await?;
                    let mut records = Vec::with_capacity(rows.len());
                    for row in rows {
                        records.push(ExhaustedRecord {
                            scope: row.try_get("scope")?,
                            key: row.try_get("idem_key")?,
                            operation: row.try_get("operation")?,
                            recovery_point: row.try_get("recovery_point")?,
                            attempts: row.try_get("attempts")?,
                            created_at: row.try_get("created_at")?,
                        });
                    }
                    Ok(records)
                })
            }

            fn advance<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
                generation: i64,
                recovery_point: &'a str,
                now: i64,
            ) -> BoxFuture<'a, Result<bool, StoreError>> {
                Box::pin(async move {
                    let done = sqlx::query(ADVANCE)
                        .bind(scope)
                        .bind(key)
                        .bind(generation)
                        .bind(recovery_point)
                        .bind(now)
                        .execute(&mut *conn)
                        .await?;
                    Ok(done.rows_affected() == 1)
                })
            }

            fn release<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
                generation: i64,
            ) -> BoxFuture<'a, Result<bool, StoreError>> {
                Box::pin(async move {
                    let done = sqlx::query(RELEASE)
                        .bind(scope)
                        .bind(key)
                        .bind(generation)
                        .execute(&mut *conn)
                        .await?;
                    Ok(done.rows_affected() == 1)
                })
            }

            fn complete<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
                generation: i64,
                response: &'a StoredResponse,
                now: i64,
            ) -> BoxFuture<'a, Result<bool, StoreError>> {
                Box::pin(async move {
                    let headers = response.headers_json();
                    let bytes = size(scope.as_bytes())
                        + size(key.as_bytes())
                        + size(headers.as_deref().unwrap_or_default().as_bytes())
                        + size(&response.body)
                        + 3 * INTEGER;
                    let done = sqlx::query_with(COMPLETE, arguments::<$db>(7, bytes))
                        .bind(scope)
                        .bind(key)
                        .bind(generation)
                        .bind(i64::from(response.status))
                        .bind(headers)
                        .bind(response.body.as_ref())
                        .bind(now)
                        .execute(&mut *conn)
                        .await?;
                    Ok(done.rows_affected() == 1)
                })
            }

            fn load_steps<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
            ) -> BoxFuture<'a, Result<Vec<StepRecord>, StoreError>> {
                Box::pin(async move {
                    let rows = sqlx::query(LOAD_STEPS)
                        .bind(scope)
                        .bind(key)
                        .fetch_all(&mut *conn)
                        .await?;
                    let mut steps = Vec::with_capacity(rows.len());
                    for row in rows {
                        let status: String = row.try_get("status")?;
                        let status = match status.as_str() {
                            "intent" => StepStatus::Intent,
                            "done" => StepStatus::Done,
                            _ => {
                                return Err(StoreError::Corrupt {
                                    what: "step status",
                                    value: status,
                                });
                            }
                        };
                        steps.push(StepRecord {
                            step: row.try_get("step")?,
                            status,
                            derived_key: row.try_get("derived_key")?,
                            output: row.try_get("output")?,
                        });
                    }
                    Ok(steps)
                })
            }

            fn record_step<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
                step: &'a StepRecord,
                now: i64,
            ) -> BoxFuture<'a, Result<(), StoreError>> {
                Box::pin(async move {
                    sqlx::query(RECORD_STEP)
                        .bind(scope)
                        .bind(key)
                        .bind(step.step.as_str())
                        .bind(step.status.as_str())
                        .bind(step.derived_key.as_deref())
                        .bind(step.output.as_deref())
                        .bind(now)
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            }

            fn delete_steps<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                key: &'a str,
            ) -> BoxFuture<'a, Result<(), StoreError>> {
                Box::pin(async move {
                    sqlx::query(DELETE_STEPS)
                        .bind(scope)
                        .bind(key)
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            }

            fn abandoned<'a>(
                conn: &'a mut Self::Connection,
                locked_before: i64,
                now: i64,
                limit: i64,
            ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
                Box::pin(async move {
                    let rows: Vec<(String, String)> = sqlx::query_as(ABANDONED)
                        .bind(locked_before)
                        .bind(now)
                        .bind(limit)
                        .fetch_all(&mut *conn)
                        .await?;
                    Ok(rows)
                })
            }

            fn reap<'a>(
                conn: &'a mut Self::Connection,
                created_before: i64,
            ) -> BoxFuture<'a, Result<Vec<ReapedRecord>, StoreError>> {
                Box::pin(async move {
                    let rows = sqlx::query(REAP)
                        .bind(created_before)
                        .fetch_all(&mut *conn)
                        .await?;
                    let mut reaped = Vec::with_capacity(rows.len());
                    for row in rows {
                        let state: String = row.try_get("state")?;
                        reaped.push(ReapedRecord {
                            scope: row.try_get("scope")?,
                            key: row.try_get("idem_key")?,
                            state: KeyState::parse(&state)?,
                            operation: row.try_get("operation")?,
                            recovery_point: row.try_get("recovery_point")?,
                        });
                    }
                    sqlx::query(REAP_STEPS).execute(&mut *conn).await?;
                    Ok(reaped)
                })
            }
        }
    };
}

impl_backend!(
    Sqlite,
    SQLITE_MIGRATIONS,
    SQLITE_MIGRATION_LOCK,
    ((CLAIM, CLAIM_PHASED), None::<(&'static str, &'static str)>),
    (CLAIM_COMPLETE, None::<&'static str>),
    None::<&'static str>
);
impl_backend!(
    Postgres,
    POSTGRES_MIGRATIONS,
    POSTGRES_MIGRATION_LOCK,
    (
        (CLAIM, CLAIM_PHASED),
        Some((CLAIM_POSTGRES, CLAIM_PHASED_POSTGRES))
    ),
    (CLAIM_COMPLETE, Some(CLAIM_COMPLETE_POSTGRES)),
    Some(LIFT_BOUND_POSTGRES)
);

/// The key store: a connection pool and the schema in it.
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::server::StoreError> {
/// use idem_runtime::server::Store;
/// // An embedded file, created if missing; `sqlite::memory:` works too.
/// let store = Store::open_sqlite("sqlite://app.db").await?;
/// store.migrate().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Store<DB: Backend> {
    pool: Pool<DB>,
    /// Per-key turns in this process; shared by clones, like the pool whose
    /// connections it keeps duplicates from queueing for.
    gate: Arc<KeyGate>,
    /// What this process has seen of the database; shared by clones.
    health: Arc<Health>,
    /// The `lock_timeout` every connection of the pool runs with, when the
    /// store set it at connect.
    session_lock_wait: Option<Duration>,
}

impl<DB: Backend> Clone for Store<DB> {
    fn clone(&self) -> Self {
        Store {
            pool: self.pool.clone(),
            gate: Arc::clone(&self.gate),
            health: Arc::clone(&self.health),
            session_lock_wait: self.session_lock_wait,
        }
    }
}

impl<DB: Backend> Store<DB> {
    /// Wraps a pool the application already has (the business tables live there too).
    pub fn new(pool: Pool<DB>) -> Self {
        Store {
            pool,
            gate: Arc::default(),
            health: Arc::default(),
            session_lock_wait: None,
        }
    }

    /// Opens a transaction for a request, waiting at most `wait` for a
    /// connection.
    ///
    /// - While the database is known to be down, it fails at once with
    ///   [`StoreError::Down`], except for one probe at a time (every 100ms
    ///   at most), which tries for real: its success ends the outage.
    /// - A pooled connection found dead (its backend terminated, the server
    ///   restarted) is discarded and another tried, within the bound: `BEGIN`
    ///   has no effect, so trying again is safe.
    /// - A refused connection opens an outage; so does a wait that ran out
    ///   when nothing got a connection for twice the bound (a database that
    ///   hangs rather than refuses). A wait that ran out while other requests
    ///   got connections is a busy pool: [`StoreError::NoConnection`].
    pub async fn begin_within(
        &self,
        wait: Duration,
    ) -> Result<sqlx::Transaction<'static, DB>, StoreError> {
        if let Admit::Refuse(down_for) = self.health.admit(wait) {
            return Err(StoreError::Down { down_for });
        }
        let until = tokio::time::Instant::now() + wait;
        // A caller that gives up first (its attempt timed out, it closed the
        // connection) drops this future: the wait it saw still counts.
        let mut watch = Abandoned {
            health: &self.health,
            started: std::time::Instant::now(),
            armed: true,
        };
        // Dead pooled connections met before giving up; each is discarded.
        let mut dead = 0;
        loop {
            let error = match tokio::time::timeout_at(until, self.pool.begin()).await {
                Ok(Ok(tx)) => {
                    watch.armed = false;
                    self.health.answered();
                    return Ok(tx);
                }
                Ok(Err(e)) => Some(e),
                Err(_) => None,
            };
            let failure = error.as_ref().map_or(Failure::Timeout, classify);
            if failure == Failure::Lost && dead < 8 && tokio::time::Instant::now() < until {
                dead += 1;
                continue;
            }
            watch.armed = false;
            if let Some(down_for) = self.health.failed(failure, wait) {
                if let Some(e) = &error {
                    tracing::debug!(error = %e, "no database connection");
                }
                return Err(StoreError::Down { down_for });
            }
            return Err(match error {
                Some(e) => StoreError::Database(e),
                None => StoreError::NoConnection { waited: wait },
            });
        }
    }

    /// The `lock_timeout` the pool's connections were opened with, if the
    /// store set one ([`Store::connect_postgres_bounded`]).
    pub fn session_lock_wait(&self) -> Option<Duration> {
        self.session_lock_wait
    }

    pub(crate) fn gate(&self) -> &Arc<KeyGate> {
        &self.gate
    }

    /// The pool; business code shares it.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Creates or upgrades the key tables from the migrations embedded in the
    /// binary. Idempotent, and safe when several processes start at once. Its
    /// own bookkeeping table (`idem_schema_migrations`) never collides with
    /// the application's `sqlx migrate` history.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        DB::migrate(&self.pool).await
    }
}

/// A request's wait for a connection, reported to the store's health if
/// the request is dropped while waiting.
struct Abandoned<'a> {
    health: &'a Health,
    started: std::time::Instant,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.health.abandoned(self.started.elapsed());
        }
    }
}

impl Store<Sqlite> {
    /// Opens (creating if missing) an SQLite database with the settings the
    /// protocol wants: WAL journal, `synchronous = NORMAL`, a generous busy
    /// timeout, and a single pooled connection.
    ///
    /// SQLite admits one writer at a time. With one connection, concurrent
    /// requests queue fairly in the pool instead of spinning in SQLite's busy
    /// handler; build the pool yourself and use [`Store::new`] for another shape.
    /// A handler must use the transaction it is given, never a second
    /// connection from the same single-connection pool.
    pub async fn open_sqlite(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        Ok(Store::new(pool))
    }
}

impl Store<Postgres> {
    /// Connects to PostgreSQL (or a Postgres-wire engine) with a pool of
    /// `max_connections`.
    ///
    /// Each claim bounds its own wait for a concurrent duplicate, inside its
    /// insert, so the handlers' statements run with the connection's own
    /// `lock_timeout`. [`Store::connect_postgres_bounded`] trades that for a
    /// cheaper claim.
    ///
    /// A pooled connection is not pinged before each use: a connection that
    /// died while idle fails the request's first statement, which is answered
    /// `503` with `Retry-After` with nothing committed, and the pool drops it.
    pub async fn connect_postgres(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let pool = Self::pool_options(max_connections).connect(url).await?;
        Ok(Store::new(pool))
    }

    /// Connects like [`Store::connect_postgres`], and opens every connection
    /// with `SET lock_timeout` to `duplicate_wait`. A claim whose wait for a
    /// concurrent duplicate is that value (the default
    /// [`Policy::duplicate_wait`](super::Policy::duplicate_wait) is 2s) is
    /// then the plain insert: it sets and restores nothing, which is about a
    /// tenth of the claim's cost in the database. Claims with another bound
    /// (a route's own `duplicate_wait`, or `in-flight: wait`) still carry
    /// theirs, as with [`Store::connect_postgres`].
    ///
    /// The price: every statement on these connections, the handlers' and
    /// the unkeyed routes' included, gives up after waiting `duplicate_wait`
    /// for a lock (SQLSTATE `55P03`, answered `503` with `Retry-After`, the
    /// transaction rolled back).
    pub async fn connect_postgres_bounded(
        url: &str,
        max_connections: u32,
        duplicate_wait: Duration,
    ) -> Result<Self, StoreError> {
        let set = format!(
            "SET lock_timeout = '{}'",
            lock_timeout_setting(duplicate_wait)
        );
        let pool = Self::pool_options(max_connections)
            .after_connect(move |conn, _| {
                let set = set.clone();
                Box::pin(async move {
                    sqlx::Executor::execute(conn, set.as_str()).await?;
                    Ok(())
                })
            })
            .connect(url)
            .await?;
        Ok(Store {
            session_lock_wait: Some(duplicate_wait),
            ..Store::new(pool)
        })
    }

    fn pool_options(max_connections: u32) -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false)
    }
}
