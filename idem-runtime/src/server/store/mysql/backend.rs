//! The MySQL family (MariaDB, MySQL, Galera clusters): the protocol's
//! statements in the dialect they share, through sqlx's MySQL driver.
//!
//! What differs from the other engines, and how the store deals with it:
//!
//! - no `UPDATE … RETURNING`: a conditional `UPDATE` reports the rows it
//!   matched (sqlx sets `CLIENT_FOUND_ROWS`), and what it wrote is read
//!   back in the same transaction, under the row lock the update took;
//! - no `INSERT … ON CONFLICT DO NOTHING` that tells an insert from a
//!   duplicate (`INSERT IGNORE` hides other errors too, and `ON DUPLICATE
//!   KEY UPDATE` counts an unchanged row as 1 with `CLIENT_FOUND_ROWS`): the
//!   claim is a plain `INSERT`, and a duplicate key (error 1062) is the lost
//!   claim. InnoDB rolls back the failed statement only, so the transaction
//!   goes on to read the record;
//! - the wait behind a concurrent claim is bounded by `SET STATEMENT
//!   innodb_lock_wait_timeout = n FOR INSERT …` (MariaDB), in whole
//!   seconds, rounded up; its expiry is error 1205, which rolls back the
//!   statement only;
//! - a Galera cluster certifies a transaction at `COMMIT`: two claims of
//!   one key on two nodes both insert locally, and the second `COMMIT` fails
//!   with 1213 (SQLSTATE `40001`), its effects rolled back. That is a
//!   database fault like any other: answered `503` with `Retry-After`,
//!   never a final answer; the retry finds the first claim.

use std::time::Duration;

use sqlx::Pool;
use sqlx::mysql::MySql;

use super::super::backend::Backend;
use super::super::error::StoreError;
use super::super::postgres::replication::Replication;
use super::super::records::*;
use super::super::settings::StoreSettings;
use super::super::sql::{exhausted_from_row, reaped_from_row, record_from_row, step_from_row};
use super::migrations;

// The key columns compare bytes (`ascii_bin`), which the MySQL protocol
// reports as binary: they are read back converted to text.
pub(super) const COLUMNS: &str = "CONVERT(scope USING utf8mb4) AS scope, \
     CONVERT(idem_key USING utf8mb4) AS idem_key, fingerprint, state, operation, request_method, \
     request_path, request_body, recovery_point, lock_generation, locked_at, response_status, \
     response_headers, response_body, created_at, completed_at, attempts, next_attempt_at, \
     resumed_at";

const CLAIM: &str = "INSERT INTO idem_keys (scope, idem_key, fingerprint, state, \
     operation, request_method, request_path, request_body, recovery_point, lock_generation, \
     locked_at, created_at) VALUES (?, ?, ?, 'in_flight', ?, ?, ?, ?, 'started', 1, ?, ?)";

const CLAIM_COMPLETE: &str = "INSERT INTO idem_keys (scope, idem_key, fingerprint, state, \
     recovery_point, lock_generation, created_at, completed_at, response_status, \
     response_headers, response_body, operation) \
     VALUES (?, ?, ?, 'complete', 'finished', 1, ?, ?, ?, ?, ?, ?)";

/// Error 1062: duplicate entry for a unique key.
const DUPLICATE_KEY: u16 = 1062;
/// Error 1205: lock wait timeout exceeded.
const LOCK_WAIT_TIMEOUT: u16 = 1205;

/// The MySQL error number of a database error.
fn number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(sqlx::mysql::MySqlDatabaseError::number),
        _ => None,
    }
}

/// `wait` in whole seconds, at least one: `innodb_lock_wait_timeout`'s unit.
fn wait_seconds(wait: Duration) -> u64 {
    wait.as_millis().div_ceil(1000).clamp(1, 1 << 30) as u64
}

/// The claim's outcome: won (generation 1), lost to a committed or
/// concurrent duplicate, or the bound passed first.
fn claimed(
    result: Result<sqlx::mysql::MySqlQueryResult, sqlx::Error>,
    wait: Duration,
) -> Result<Option<i64>, StoreError> {
    match result {
        Ok(_) => Ok(Some(1)),
        Err(e) if number(&e) == Some(DUPLICATE_KEY) => Ok(None),
        Err(e) if number(&e) == Some(LOCK_WAIT_TIMEOUT) => {
            Err(StoreError::LockWaitExpired { waited: wait })
        }
        Err(e) => Err(e.into()),
    }
}

/// Prefixes a statement with its lock-wait bound (MariaDB).
fn bounded(settings: &StoreSettings, statement: &str, wait: Duration) -> String {
    if !settings.set_statement() {
        return statement.to_owned();
    }
    format!(
        "SET STATEMENT innodb_lock_wait_timeout = {} FOR {statement}",
        wait_seconds(wait)
    )
}

/// Reads `lock_generation` (and `attempts`) back after a conditional update.
async fn generation_of(
    conn: &mut sqlx::MySqlConnection,
    scope: &str,
    key: &str,
) -> Result<(i64, i64), StoreError> {
    Ok(sqlx::query_as(
        "SELECT lock_generation, attempts FROM idem_keys WHERE scope = ? AND idem_key = ?",
    )
    .bind(scope)
    .bind(key)
    .fetch_one(&mut *conn)
    .await?)
}

/// Runs one statement, binding each value in order.
macro_rules! run {
    ($conn:expr, $sql:expr $(, $value:expr)* $(,)?) => {
        sqlx::query($sql)$(.bind($value))*.execute(&mut *$conn).await
    };
}

impl Backend for MySql {
    // `VARCHAR(600)` and `VARCHAR(2372)`, ASCII: with the step name's 100
    // they fill InnoDB's 3,072-byte index.
    const KEY_COLUMNS: Option<(usize, usize)> = Some((600, 2372));

    // InnoDB deletes a record's secondary index entries and its steps row
    // by row: half the others' batch keeps one under 50 ms at ten million
    // records.
    const REAP_BATCH: i64 = 500;

    fn migrate<'a>(
        pool: &'a Pool<Self>,
        _settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(migrations::migrate(pool))
    }

    fn claim<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        c: &'a NewClaim<'a>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        Box::pin(async move {
            // One statement for both kinds: a single-phase claim's request
            // columns are NULL.
            let sql = bounded(settings, CLAIM, wait);
            let result = run!(
                conn,
                &sql,
                c.scope,
                c.key,
                c.fingerprint,
                c.operation,
                c.request.map(|r| r.method.as_str()),
                c.request.map(|r| r.path.as_str()),
                c.request.map(|r| r.body.as_slice()),
                c.now,
                c.now,
            );
            claimed(result, wait)
        })
    }

    fn lift_claim_bound<'a>(
        _conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        // The bound was the claim statement's own.
        Box::pin(async { Ok(()) })
    }

    fn claim_complete<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        c: &'a NewClaim<'a>,
        response: &'a StoredResponse,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        Box::pin(async move {
            let sql = bounded(settings, CLAIM_COMPLETE, wait);
            let result = run!(
                conn,
                &sql,
                c.scope,
                c.key,
                c.fingerprint,
                c.now,
                c.now,
                i64::from(response.status),
                response.headers_json(),
                response.body.as_ref(),
                c.operation,
            );
            claimed(result, wait)
        })
    }

    fn delete_expired<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        created_before: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let deleted = run!(
                conn,
                "DELETE FROM idem_keys WHERE scope = ? AND idem_key = ? AND created_at < ? \
                 AND state = 'complete'",
                scope,
                key,
                created_before,
            )?;
            if deleted.rows_affected() == 0 {
                return Ok(false);
            }
            run!(
                conn,
                "DELETE FROM idem_steps WHERE scope = ? AND idem_key = ?",
                scope,
                key
            )?;
            Ok(true)
        })
    }

    fn reclaim_expired<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        c: &'a NewClaim<'a>,
        created_before: i64,
        locked_before: i64,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        Box::pin(async move {
            let done = run!(
                conn,
                "UPDATE idem_keys SET fingerprint = ?, state = 'in_flight', operation = ?, \
                 request_method = ?, request_path = ?, request_body = ?, \
                 recovery_point = 'started', lock_generation = lock_generation + 1, \
                 locked_at = ?, response_status = NULL, response_headers = NULL, \
                 response_body = NULL, created_at = ?, completed_at = NULL, attempts = 1, \
                 next_attempt_at = NULL, resumed_at = NULL \
                 WHERE scope = ? AND idem_key = ? AND created_at < ? \
                   AND (state = 'complete' OR locked_at IS NULL OR locked_at < ?)",
                c.fingerprint,
                c.operation,
                c.request.map(|r| r.method.as_str()),
                c.request.map(|r| r.path.as_str()),
                c.request.map(|r| r.body.as_slice()),
                c.now,
                c.now,
                c.scope,
                c.key,
                created_before,
                locked_before,
            )?;
            if done.rows_affected() != 1 {
                return Ok(None);
            }
            Ok(Some(generation_of(conn, c.scope, c.key).await?.0))
        })
    }

    fn load<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<KeyRecord>, StoreError>> {
        Box::pin(async move {
            let sql = format!("SELECT {COLUMNS} FROM idem_keys WHERE scope = ? AND idem_key = ?");
            let row = sqlx::query(&sql)
                .bind(scope)
                .bind(key)
                .fetch_optional(&mut *conn)
                .await?;
            row.as_ref().map(record_from_row).transpose()
        })
    }

    fn take_over<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        locked_before: i64,
        now: i64,
    ) -> BoxFuture<'a, Result<Option<(i64, i64)>, StoreError>> {
        Box::pin(async move {
            let done = run!(
                conn,
                "UPDATE idem_keys SET locked_at = ?, lock_generation = lock_generation + 1, \
                 attempts = attempts + 1 \
                 WHERE scope = ? AND idem_key = ? AND state = 'in_flight' \
                   AND (locked_at IS NULL OR locked_at < ?) \
                   AND (next_attempt_at IS NULL OR next_attempt_at <= ?)",
                now,
                scope,
                key,
                locked_before,
                now,
            )?;
            if done.rows_affected() != 1 {
                return Ok(None);
            }
            Ok(Some(generation_of(conn, scope, key).await?))
        })
    }

    fn reschedule<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        next_at: i64,
        max_attempts: i64,
        give_up_after_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Rescheduled>, StoreError>> {
        Box::pin(async move {
            // MySQL assigns left to right: `state` is decided before
            // anything it reads is changed.
            let done = run!(
                conn,
                "UPDATE idem_keys SET state = CASE WHEN attempts >= ? \
                   OR ? > COALESCE(resumed_at, created_at) + ? \
                   THEN 'exhausted' ELSE 'in_flight' END, \
                 locked_at = NULL, next_attempt_at = ? \
                 WHERE scope = ? AND idem_key = ? AND lock_generation = ? \
                   AND state = 'in_flight'",
                max_attempts,
                next_at,
                give_up_after_ms,
                next_at,
                scope,
                key,
                generation,
            )?;
            if done.rows_affected() != 1 {
                return Ok(None);
            }
            let (state, attempts): (String, i64) = sqlx::query_as(
                "SELECT state, attempts FROM idem_keys WHERE scope = ? AND idem_key = ?",
            )
            .bind(scope)
            .bind(key)
            .fetch_one(&mut *conn)
            .await?;
            Ok(Some(match KeyState::parse(&state)? {
                KeyState::Exhausted => Rescheduled::Exhausted { attempts },
                _ => Rescheduled::At(next_at),
            }))
        })
    }

    fn exhaust<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let done = run!(
                conn,
                "UPDATE idem_keys SET state = 'exhausted', locked_at = NULL, \
                 attempts = attempts - 1 \
                 WHERE scope = ? AND idem_key = ? AND lock_generation = ? AND state = 'in_flight'",
                scope,
                key,
                generation,
            )?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn count_exhausted<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<i64, StoreError>> {
        Box::pin(async move {
            Ok(sqlx::query_scalar(
                "SELECT COUNT(*) FROM idem_keys \
                     WHERE request_method IS NOT NULL AND state = 'exhausted'",
            )
            .fetch_one(&mut *conn)
            .await?)
        })
    }

    fn count_watched<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        lock_cutoff: i64,
        now: i64,
    ) -> BoxFuture<'a, Result<WatchedCounts, StoreError>> {
        Box::pin(async move {
            // `SUM` is a DECIMAL in MySQL: cast back to a BIGINT.
            let (in_flight, exhausted, stale): (i64, i64, i64) = sqlx::query_as(
                "SELECT \
                 CAST(COALESCE(SUM(state = 'in_flight'), 0) AS SIGNED), \
                 CAST(COALESCE(SUM(state = 'exhausted'), 0) AS SIGNED), \
                 CAST(COALESCE(SUM(state = 'in_flight' \
                   AND (locked_at IS NULL OR locked_at < ?) \
                   AND (next_attempt_at IS NULL OR next_attempt_at <= ?)), 0) AS SIGNED) \
                 FROM idem_keys WHERE request_method IS NOT NULL AND state <> 'complete'",
            )
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

    fn replication<'a>(
        _conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<Option<Replication>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    fn exhausted<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<ExhaustedRecord>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT CONVERT(scope USING utf8mb4) AS scope, \
                 CONVERT(idem_key USING utf8mb4) AS idem_key, operation, recovery_point, \
                 attempts, created_at FROM idem_keys FORCE INDEX (idem_keys_open) \
                 WHERE request_method IS NOT NULL AND state = 'exhausted' \
                 ORDER BY created_at LIMIT ?",
            )
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?;
            rows.iter().map(exhausted_from_row).collect()
        })
    }

    fn advance<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        recovery_point: &'a str,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let done = run!(
                conn,
                "UPDATE idem_keys SET recovery_point = ?, locked_at = ? \
                 WHERE scope = ? AND idem_key = ? AND lock_generation = ? AND state = 'in_flight'",
                recovery_point,
                now,
                scope,
                key,
                generation,
            )?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn release<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let done = run!(
                conn,
                "UPDATE idem_keys SET locked_at = NULL \
                 WHERE scope = ? AND idem_key = ? AND lock_generation = ? AND state = 'in_flight'",
                scope,
                key,
                generation,
            )?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn complete<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        response: &'a StoredResponse,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let done = run!(
                conn,
                "UPDATE idem_keys SET state = 'complete', response_status = ?, \
                 response_headers = ?, response_body = ?, completed_at = ?, locked_at = NULL, \
                 recovery_point = 'finished', request_method = NULL, request_path = NULL, \
                 request_body = NULL \
                 WHERE scope = ? AND idem_key = ? AND lock_generation = ? AND state = 'in_flight'",
                i64::from(response.status),
                response.headers_json(),
                response.body.as_ref(),
                now,
                scope,
                key,
                generation,
            )?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn load_steps<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Vec<StepRecord>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT CONVERT(step USING utf8mb4) AS step, status, derived_key, output FROM idem_steps \
                 WHERE scope = ? AND idem_key = ?",
            )
            .bind(scope)
            .bind(key)
            .fetch_all(&mut *conn)
            .await?;
            rows.iter().map(step_from_row).collect()
        })
    }

    fn record_step<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        step: &'a StepRecord,
        now: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            run!(
                conn,
                "INSERT INTO idem_steps (scope, idem_key, step, status, derived_key, output, \
                 updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) \
                 ON DUPLICATE KEY UPDATE status = VALUES(status), \
                 derived_key = VALUES(derived_key), output = VALUES(output), \
                 updated_at = VALUES(updated_at)",
                scope,
                key,
                &step.step,
                step.status.as_str(),
                step.derived_key.as_deref(),
                step.output.as_deref(),
                now,
            )?;
            Ok(())
        })
    }

    fn delete_steps<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            run!(
                conn,
                "DELETE FROM idem_steps WHERE scope = ? AND idem_key = ?",
                scope,
                key
            )?;
            Ok(())
        })
    }

    fn abandoned<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        locked_before: i64,
        now: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            Ok(sqlx::query_as(
                "SELECT CONVERT(scope USING utf8mb4), CONVERT(idem_key USING utf8mb4) \
                 FROM idem_keys FORCE INDEX (idem_keys_open) \
                 WHERE request_method IS NOT NULL AND state = 'in_flight' \
                   AND (locked_at IS NULL OR locked_at < ?) \
                   AND (next_attempt_at IS NULL OR next_attempt_at <= ?) \
                 ORDER BY created_at LIMIT ?",
            )
            .bind(locked_before)
            .bind(now)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?)
        })
    }

    fn reap<'a>(
        conn: &'a mut Self::Connection,
        _settings: &'a StoreSettings,
        from: i64,
        created_before: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<ReapedRecord>, StoreError>> {
        Box::pin(async move {
            // The batch is read first, locked, skipping what another
            // transaction holds (a claim, another process's reaper), and
            // deleted by key with its steps, in the same transaction.
            let rows = sqlx::query(
                "SELECT CONVERT(scope USING utf8mb4) AS scope, \
                 CONVERT(idem_key USING utf8mb4) AS idem_key, state, operation, recovery_point, \
                 created_at FROM idem_keys WHERE created_at >= ? AND created_at < ? \
                 ORDER BY created_at LIMIT ? FOR UPDATE SKIP LOCKED",
            )
            .bind(from)
            .bind(created_before)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?;
            let reaped = rows
                .iter()
                .map(reaped_from_row)
                .collect::<Result<Vec<_>, _>>()?;
            if reaped.is_empty() {
                return Ok(reaped);
            }
            let pairs = vec!["(?, ?)"; reaped.len()].join(", ");
            let sql = format!("DELETE FROM idem_steps WHERE (scope, idem_key) IN ({pairs})");
            let mut query = sqlx::query(&sql);
            for r in &reaped {
                query = query.bind(&r.scope).bind(&r.key);
            }
            query.execute(&mut *conn).await?;
            // By the whole primary key: the batch's rows are neighbours in
            // it, reached without a lookup through the unique key.
            let triples = vec!["(?, ?, ?)"; reaped.len()].join(", ");
            let sql =
                format!("DELETE FROM idem_keys WHERE (created_at, scope, idem_key) IN ({triples})");
            let mut query = sqlx::query(&sql);
            for r in &reaped {
                query = query.bind(r.created_at).bind(&r.scope).bind(&r.key);
            }
            query.execute(&mut *conn).await?;
            Ok(reaped)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_whole_seconds_and_never_none() {
        assert_eq!(wait_seconds(Duration::from_millis(1)), 1);
        assert_eq!(wait_seconds(Duration::from_millis(2000)), 2);
        assert_eq!(wait_seconds(Duration::from_millis(2001)), 3);
        assert!(
            bounded(&StoreSettings::default(), CLAIM, Duration::from_secs(2))
                .starts_with("SET STATEMENT innodb_lock_wait_timeout = 2 FOR INSERT")
        );
    }
}
