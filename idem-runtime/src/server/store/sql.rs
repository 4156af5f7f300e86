//! The statements SQLite and PostgreSQL share, written once in the dialect
//! both accept, and the `Backend` implementation they instantiate on
//! their concrete sqlx types (`sqlite.rs`, `postgres.rs`: each engine's
//! migrations, lock and quirks).

use std::time::Duration;

use sqlx::Row;

use crate::server::error::StoreError;
use crate::server::response::StoredResponse;

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

// One reaper batch: the `$3` oldest records claimed at or after `$1` and
// before `$2`, found through the `created_at` index from where the last
// batch ended (`$1`), so a batch reads what it deletes and never the index
// entries earlier batches left dead. Their steps go in the same
// transaction, found by key.
//
// SQLite (one writer: the two statements see the same rows) deletes the
// steps first, then the records.
pub(super) const REAP_STEPS_SQLITE: &str = "DELETE FROM idem_steps WHERE (scope, idem_key) IN \
     (SELECT scope, idem_key FROM idem_keys WHERE created_at >= $1 AND created_at < $2 \
      ORDER BY created_at LIMIT $3)";
pub(super) const REAP_SQLITE: &str = "DELETE FROM idem_keys WHERE (scope, idem_key) IN \
     (SELECT scope, idem_key FROM idem_keys WHERE created_at >= $1 AND created_at < $2 \
      ORDER BY created_at LIMIT $3) \
     RETURNING scope, idem_key, state, operation, recovery_point, created_at";
// PostgreSQL skips a record another transaction holds (a claim re-taking an
// expired key, another process's reaper), so the reaper never waits on a
// claim, and deletes the steps of what it deleted in the same statement.
// The steps' key columns have the database's collation, the records' "C":
// the join compares in the steps' own, so it looks them up by their index.
pub(super) const REAP_POSTGRES: &str = "WITH gone AS (\
     DELETE FROM idem_keys WHERE (scope, idem_key) IN \
       (SELECT scope, idem_key FROM idem_keys WHERE created_at >= $1 AND created_at < $2 \
        ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
     RETURNING scope, idem_key, state, operation, recovery_point, created_at), \
   steps AS (DELETE FROM idem_steps s USING gone \
     WHERE s.scope = gone.scope COLLATE \"default\" \
       AND s.idem_key = gone.idem_key COLLATE \"default\") \
   SELECT scope, idem_key, state, operation, recovery_point, created_at FROM gone";

pub(super) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS idem_schema_migrations (\
     version BIGINT PRIMARY KEY, description TEXT NOT NULL, applied_at BIGINT NOT NULL)";

/// One embedded migration.
pub(super) struct Migration {
    pub(super) version: i64,
    pub(super) description: &'static str,
    pub(super) sql: &'static str,
}

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

pub(super) fn now_for_migrations() -> i64 {
    crate::server::clock::now_ms()
}

/// The `Backend` implementation of an engine of the shared dialect.
macro_rules! impl_backend {
    ($db:ty, $migrations:expr, $lock:expr, $claims:expr, $complete:expr, $lift:expr, $named:expr, $replication:expr, $reap:expr, $reap_batch:expr) => {
        impl Backend for $db {
            const REAP_BATCH: i64 = $reap_batch;

            fn migrate(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), StoreError>> {
                Box::pin(async move {
                    let mut tx = pool.begin().await?;
                    sqlx::query(MIGRATIONS_TABLE)
                        .persistent($named)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query($lock)
                        .persistent($named)
                        .execute(&mut *tx)
                        .await?;
                    let applied: Vec<i64> =
                        sqlx::query_scalar("SELECT version FROM idem_schema_migrations")
                            .persistent($named)
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
                        .persistent($named)
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
                    let statement = if c.request.is_some() {
                        sqlx::query_as::<_, (i64,)>(phased)
                            .persistent($named)
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
                            + size(c.operation.unwrap_or_default().as_bytes())
                            + INTEGER
                            + BOUND;
                        sqlx::query_as_with::<_, (i64,), _>(single, arguments::<$db>(6, bytes))
                            .persistent($named)
                            .bind(c.scope)
                            .bind(c.key)
                            .bind(c.fingerprint)
                            .bind(c.now)
                            .bind(c.operation)
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
                        + size(c.operation.unwrap_or_default().as_bytes())
                        + 2 * INTEGER
                        + BOUND;
                    let mut query =
                        sqlx::query_as_with::<_, (i64,), _>(statement, arguments::<$db>(9, bytes))
                            .persistent($named)
                            .bind(c.scope)
                            .bind(c.key)
                            .bind(c.fingerprint)
                            .bind(c.now)
                            .bind(i64::from(response.status))
                            .bind(headers)
                            .bind(response.body.as_ref())
                            .bind(c.operation);
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
                        .persistent($named)
                        .bind(scope)
                        .bind(key)
                        .bind(created_before)
                        .execute(&mut *conn)
                        .await?;
                    if deleted.rows_affected() == 0 {
                        return Ok(false);
                    }
                    sqlx::query(DELETE_STEPS)
                        .persistent($named)
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
                        sqlx::query(lift)
                            .persistent($named)
                            .execute(&mut *conn)
                            .await?;
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
                        .persistent($named)
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
                        .persistent($named)
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
                        .persistent($named)
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
                        .persistent($named)
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
                        .persistent($named)
                        .bind(scope)
                        .bind(key)
                        .bind(generation)
                        .execute(&mut *conn)
                        .await?;
                    Ok(done.rows_affected() == 1)
                })
            }

            fn count_watched(
                conn: &mut Self::Connection,
                lock_cutoff: i64,
                now: i64,
            ) -> BoxFuture<'_, Result<WatchedCounts, StoreError>> {
                Box::pin(async move {
                    let (in_flight, exhausted, stale): (i64, i64, i64) =
                        sqlx::query_as(COUNT_WATCHED)
                            .persistent($named)
                            .bind(lock_cutoff)
                            .bind(now)
                            .fetch_one(&mut *conn)
                            .await?;
                    Ok(WatchedCounts {
                        in_flight,
                        exhausted,
                        stale,
                    })
                })
            }

            fn count_exhausted(
                conn: &mut Self::Connection,
            ) -> BoxFuture<'_, Result<i64, StoreError>> {
                Box::pin(async move {
                    let count: i64 = sqlx::query_scalar(COUNT_EXHAUSTED)
                        .persistent($named)
                        .fetch_one(&mut *conn)
                        .await?;
                    Ok(count)
                })
            }

            fn replication(
                conn: &mut Self::Connection,
            ) -> BoxFuture<'_, Result<Option<super::Replication>, StoreError>> {
                Box::pin(async move {
                    let Some(sql) = $replication else {
                        return Ok(None);
                    };
                    let rows: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(sql)
                        .persistent($named)
                        .fetch_all(&mut *conn)
                        .await?;
                    let synchronous_commit = rows.first().map(|r| r.0.clone()).unwrap_or_default();
                    let standbys = rows
                        .into_iter()
                        .filter_map(|(_, name, sync_state)| {
                            Some(super::Standby {
                                name: name?,
                                sync_state,
                            })
                        })
                        .collect();
                    Ok(Some(super::Replication {
                        synchronous_commit,
                        standbys,
                    }))
                })
            }

            fn exhausted(
                conn: &mut Self::Connection,
                limit: i64,
            ) -> BoxFuture<'_, Result<Vec<ExhaustedRecord>, StoreError>> {
                Box::pin(async move {
                    let rows = sqlx::query(EXHAUSTED)
                        .persistent($named)
                        .bind(limit)
                        .fetch_all(&mut *conn)
                        .await?;
                    rows.iter().map(exhausted_from_row).collect()
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
                        .persistent($named)
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
                        .persistent($named)
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
                        .persistent($named)
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
                        .persistent($named)
                        .bind(scope)
                        .bind(key)
                        .fetch_all(&mut *conn)
                        .await?;
                    rows.iter().map(step_from_row).collect()
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
                        .persistent($named)
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
                        .persistent($named)
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
                        .persistent($named)
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
                from: i64,
                created_before: i64,
                limit: i64,
            ) -> BoxFuture<'a, Result<Vec<ReapedRecord>, StoreError>> {
                Box::pin(async move {
                    let (steps_first, records): (Option<&'static str>, &'static str) = $reap;
                    if let Some(steps) = steps_first {
                        sqlx::query(steps)
                            .persistent($named)
                            .bind(from)
                            .bind(created_before)
                            .bind(limit)
                            .execute(&mut *conn)
                            .await?;
                    }
                    let rows = sqlx::query(records)
                        .persistent($named)
                        .bind(from)
                        .bind(created_before)
                        .bind(limit)
                        .fetch_all(&mut *conn)
                        .await?;
                    rows.iter().map(reaped_from_row).collect()
                })
            }
        }
    };
}
