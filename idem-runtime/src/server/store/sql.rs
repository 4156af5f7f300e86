//! The statements SQLite and PostgreSQL share, written once in the dialect
//! both accept (`$N` placeholders, `INSERT … ON CONFLICT`, `RETURNING`),
//! and the reading of the rows every engine returns. `shared.rs` runs them
//! on either engine.

use std::time::Duration;

use sqlx::Row;

use super::error::StoreError;
use super::records::*;

pub(super) const SELECT_RECORD: &str = "SELECT scope, idem_key, fingerprint, state, operation, request_method, \
     request_path, request_body, recovery_point, lock_generation, locked_at, response_status, \
     response_headers, response_body, created_at, completed_at, attempts, next_attempt_at, \
     resumed_at FROM idem_keys \
     WHERE scope = $1 AND idem_key = $2";

// The claim of a single-phase request binds what it writes and nothing
// more (its operation's name, for operators); a phased request also keeps
// its request for the completer, until it completes. `$state` is the state
// column's value: PostgreSQL bounds the wait there.
macro_rules! claim_single {
    ($state:expr) => {
        concat!(
            "INSERT INTO idem_keys (scope, idem_key, fingerprint, state, operation, \
             recovery_point, lock_generation, locked_at, created_at) VALUES ($1, $2, $3, ",
            $state,
            ", $5, 'started', 1, $4, $4) \
             ON CONFLICT (scope, idem_key) DO NOTHING RETURNING lock_generation"
        )
    };
}
pub(super) use claim_single;
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
pub(super) use claim_phased;
pub(super) const CLAIM: &str = claim_single!("'in_flight'");
pub(super) const CLAIM_PHASED: &str = claim_phased!("'in_flight'");
// The claim at commit: the key row, complete, in the handler's transaction.
macro_rules! claim_complete {
    ($values:literal) => {
        concat!(
            "INSERT INTO idem_keys (scope, idem_key, fingerprint, state, recovery_point, \
             lock_generation, created_at, completed_at, response_status, response_headers, \
             response_body, operation) ",
            $values,
            " ON CONFLICT (scope, idem_key) DO NOTHING RETURNING lock_generation"
        )
    };
}
pub(super) use claim_complete;
pub(super) const CLAIM_COMPLETE: &str =
    claim_complete!("VALUES ($1, $2, $3, 'complete', 'finished', 1, $4, $4, $5, $6, $7, $8)");
pub(super) const DELETE_EXPIRED: &str = "DELETE FROM idem_keys \
     WHERE scope = $1 AND idem_key = $2 AND created_at < $3 AND state = 'complete'";

/// What a claim statement's outcome means: the generation won, `None` for a
/// key already taken, or [`StoreError::LockWaitExpired`] when the bound
/// `wait` passed first.
pub(super) fn claimed(
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
pub(super) fn arguments<'q, DB: sqlx::Database>(count: usize, bytes: usize) -> DB::Arguments<'q> {
    let mut arguments = DB::Arguments::<'q>::default();
    sqlx::Arguments::reserve(&mut arguments, count, bytes);
    arguments
}

/// What a value takes in an argument buffer: its bytes and a length word.
pub(super) fn size(bytes: &[u8]) -> usize {
    bytes.len() + 4
}

/// What an `i64` takes in an argument buffer.
pub(super) const INTEGER: usize = 12;

/// Room for the lock wait a bounded statement binds last (`'2000ms'`).
pub(super) const BOUND: usize = 16;

/// `wait` in whole milliseconds, at least one (PostgreSQL reads 0 as no
/// limit; the setting tops out at `i32::MAX` ms).
pub(super) fn lock_timeout_ms(wait: Duration) -> u128 {
    wait.as_millis().clamp(1, i32::MAX as u128)
}

/// `wait` as a `lock_timeout` value.
pub(super) fn lock_timeout_setting(wait: Duration) -> String {
    format!("{}ms", lock_timeout_ms(wait))
}

/// Whether connections that run with `lock_timeout = session` already bound
/// a claim's `wait`: the same value to the setting's resolution (a wait
/// that lost microseconds to the key's turn still rounds up to it).
pub(super) fn session_bounds(session: Option<Duration>, wait: Duration) -> bool {
    let ceil = wait.as_micros().div_ceil(1000).clamp(1, i32::MAX as u128);
    session
        .is_some_and(|session| (lock_timeout_ms(wait)..=ceil).contains(&lock_timeout_ms(session)))
}

/// SQLSTATE lock_not_available: a `lock_timeout` expired.
pub(super) const LOCK_NOT_AVAILABLE: &str = "55P03";

pub(super) const RECLAIM_EXPIRED: &str = "UPDATE idem_keys SET fingerprint = $3, state = 'in_flight', \
     operation = $4, request_method = $5, request_path = $6, request_body = $7, \
     recovery_point = 'started', lock_generation = lock_generation + 1, locked_at = $8, \
     response_status = NULL, response_headers = NULL, response_body = NULL, created_at = $8, \
     completed_at = NULL, attempts = 1, next_attempt_at = NULL, resumed_at = NULL \
     WHERE scope = $1 AND idem_key = $2 AND created_at < $9 \
       AND (state = 'complete' OR locked_at IS NULL OR locked_at < $10) \
     RETURNING lock_generation";

pub(super) const TAKE_OVER: &str = "UPDATE idem_keys SET locked_at = $4, lock_generation = lock_generation + 1, \
     attempts = attempts + 1 \
     WHERE scope = $1 AND idem_key = $2 AND state = 'in_flight' \
       AND (locked_at IS NULL OR locked_at < $3) \
       AND (next_attempt_at IS NULL OR next_attempt_at <= $4) \
     RETURNING lock_generation, attempts";

// The right-hand sides read the row as it was, so `attempts` is the count of
// runs including the one that just failed.
pub(super) const RESCHEDULE: &str = "UPDATE idem_keys SET locked_at = NULL, next_attempt_at = $4, \
     state = CASE WHEN attempts >= $5 OR $4 > COALESCE(resumed_at, created_at) + $6 \
       THEN 'exhausted' ELSE 'in_flight' END \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight' \
     RETURNING state, attempts";

// The takeover counted a run that never starts: it is taken back.
pub(super) const EXHAUST: &str = "UPDATE idem_keys SET state = 'exhausted', locked_at = NULL, \
     attempts = attempts - 1 \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight'";

// `stale`: in flight, its lock older than the cutoff and its next run due,
// which is what the completer takes: a count that stays above zero says the
// completer is not running or not keeping up.
//
// Only a phased record is ever committed anything but complete (a
// single-phase claim commits with its response), and it keeps its request
// until it completes: `request_method IS NOT NULL` names the open records,
// through an index the completion leaves alone where a single-phase record
// is concerned (its request is NULL before and after), so that update stays
// HOT. The watched statements below read that index, never the whole table.
pub(super) const COUNT_WATCHED: &str = "SELECT \
     COALESCE(SUM(CASE WHEN state = 'in_flight' THEN 1 ELSE 0 END), 0), \
     COALESCE(SUM(CASE WHEN state = 'exhausted' THEN 1 ELSE 0 END), 0), \
     COALESCE(SUM(CASE WHEN state = 'in_flight' AND (locked_at IS NULL OR locked_at < $1) \
       AND (next_attempt_at IS NULL OR next_attempt_at <= $2) THEN 1 ELSE 0 END), 0) \
     FROM idem_keys WHERE request_method IS NOT NULL AND state <> 'complete'";

pub(super) const COUNT_EXHAUSTED: &str =
    "SELECT COUNT(*) FROM idem_keys WHERE request_method IS NOT NULL AND state = 'exhausted'";

pub(super) const EXHAUSTED: &str = "SELECT scope, idem_key, operation, recovery_point, attempts, created_at \
     FROM idem_keys WHERE request_method IS NOT NULL AND state = 'exhausted' \
     ORDER BY created_at LIMIT $1";

pub(super) const ADVANCE: &str = "UPDATE idem_keys SET recovery_point = $4, locked_at = $5 \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight'";

pub(super) const RELEASE: &str = "UPDATE idem_keys SET locked_at = NULL \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight'";

// A phased record lets its request go as it completes, and so leaves the
// open records' index.
pub(super) const COMPLETE: &str = "UPDATE idem_keys SET state = 'complete', response_status = $4, \
     response_headers = $5, response_body = $6, completed_at = $7, locked_at = NULL, \
     recovery_point = 'finished', request_method = NULL, request_path = NULL, \
     request_body = NULL \
     WHERE scope = $1 AND idem_key = $2 AND lock_generation = $3 AND state = 'in_flight'";

pub(super) const LOAD_STEPS: &str = "SELECT step, status, derived_key, output FROM idem_steps \
     WHERE scope = $1 AND idem_key = $2";

pub(super) const RECORD_STEP: &str = "INSERT INTO idem_steps (scope, idem_key, step, status, derived_key, \
     output, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
     ON CONFLICT (scope, idem_key, step) DO UPDATE SET status = excluded.status, \
     derived_key = excluded.derived_key, output = excluded.output, updated_at = excluded.updated_at";

pub(super) const DELETE_STEPS: &str = "DELETE FROM idem_steps WHERE scope = $1 AND idem_key = $2";

pub(super) const ABANDONED: &str = "SELECT scope, idem_key FROM idem_keys \
     WHERE request_method IS NOT NULL AND state = 'in_flight' \
       AND (locked_at IS NULL OR locked_at < $1) \
       AND (next_attempt_at IS NULL OR next_attempt_at <= $2) \
     ORDER BY created_at LIMIT $3";

pub(super) const MIGRATIONS_APPLIED: &str = "SELECT version FROM idem_schema_migrations";

pub(super) const MIGRATION_RECORD: &str =
    "INSERT INTO idem_schema_migrations (version, description, applied_at) VALUES ($1, $2, $3)";

pub(super) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS idem_schema_migrations (\
     version BIGINT PRIMARY KEY, description TEXT NOT NULL, applied_at BIGINT NOT NULL)";

/// One embedded migration, on any engine.
#[derive(Debug)]
pub(super) struct Migration {
    pub(super) version: i64,
    pub(super) description: &'static str,
    pub(super) sql: &'static str,
}

// What `idem keys` reads. The list leaves the bodies out: a page of
// records stays small.
pub(super) const LIST_COLUMNS: &str = "scope, idem_key, fingerprint, state, operation, \
     request_method, request_path, NULL AS request_body, recovery_point, lock_generation, \
     locked_at, response_status, NULL AS response_headers, NULL AS response_body, created_at, \
     completed_at, attempts, next_attempt_at, resumed_at";

pub(super) const STEP_ORDER: &str =
    "SELECT step, updated_at FROM idem_steps WHERE scope = $1 AND idem_key = $2";

pub(super) const SCOPES_HOLDING: &str =
    "SELECT scope FROM idem_keys WHERE idem_key = $1 ORDER BY created_at LIMIT $2";

pub(super) const REAPABLE: &str = "SELECT state, COUNT(*) FROM idem_keys WHERE created_at < $1 \
     GROUP BY state ORDER BY state";

pub(super) const RESUME: &str = "UPDATE idem_keys SET state = 'in_flight', locked_at = NULL, \
     next_attempt_at = $3, attempts = 0, resumed_at = $3 \
     WHERE scope = $1 AND idem_key = $2 AND state = 'exhausted' AND request_method IS NOT NULL";

pub(super) const SCHEMA_FOUND: &str = "SELECT MAX(version) FROM idem_schema_migrations";

pub(super) fn record_from_row<R>(row: &R) -> Result<KeyRecord, StoreError>
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
        completed_at: row.try_get("completed_at")?,
        resumed_at: row.try_get("resumed_at")?,
        attempts: row.try_get("attempts")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
    })
}

pub(super) fn step_from_row<R>(row: &R) -> Result<StepRecord, StoreError>
where
    R: Row,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
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
    Ok(StepRecord {
        step: row.try_get("step")?,
        status,
        derived_key: row.try_get("derived_key")?,
        output: row.try_get("output")?,
    })
}

pub(super) fn exhausted_from_row<R>(row: &R) -> Result<ExhaustedRecord, StoreError>
where
    R: Row,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
    Ok(ExhaustedRecord {
        scope: row.try_get("scope")?,
        key: row.try_get("idem_key")?,
        operation: row.try_get("operation")?,
        recovery_point: row.try_get("recovery_point")?,
        attempts: row.try_get("attempts")?,
        created_at: row.try_get("created_at")?,
    })
}

pub(super) fn reaped_from_row<R>(row: &R) -> Result<ReapedRecord, StoreError>
where
    R: Row,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
    let state: String = row.try_get("state")?;
    Ok(ReapedRecord {
        scope: row.try_get("scope")?,
        key: row.try_get("idem_key")?,
        state: KeyState::parse(&state)?,
        operation: row.try_get("operation")?,
        recovery_point: row.try_get("recovery_point")?,
        created_at: row.try_get("created_at")?,
    })
}
