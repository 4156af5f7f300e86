//! The backend of the dialect SQLite and PostgreSQL share: one
//! implementation of [`Backend`] and [`Inspect`] for both, which runs the
//! statements in `sql.rs` and the few each engine writes its own way
//! ([`Statements`]).

use std::future::Future;
use std::time::Duration;

use sqlx::Pool;

use crate::server::clock::now_ms;

use super::backend::Backend;
use super::error::StoreError;
use super::handle::Store;
use super::inspect::{
    BY_STATE, Inspect, Inspected, KeyStats, ListFilter, OLDEST_IN_FLIGHT, Schema, bind_list,
    key_stats, list_statement, order_steps,
};
use super::postgres::replication::{Replication, ServerRow};
use super::records::*;
use super::settings::StoreSettings;
use super::sql::*;

/// What an engine of the shared dialect writes its own way.
#[derive(Debug)]
pub struct Statements {
    /// Its migrations, oldest first.
    pub(super) migrations: &'static [Migration],
    /// The newest schema version among them.
    pub(super) schema_version: i64,
    /// Run first in the migrations' transaction: serialises concurrent runs.
    pub(super) migration_lock: &'static str,
    /// Claims that bound their own wait behind a concurrent duplicate;
    /// `None` where a claim never waits (SQLite's one writer).
    pub(super) bounded: Option<BoundedClaims>,
    /// Puts back the lock wait a lost bounded claim left in the transaction.
    pub(super) lift_bound: Option<&'static str>,
    /// One reaper batch: `$1` from, `$2` before, `$3` at most; returns
    /// what it deleted.
    pub(super) reap: &'static str,
    /// Run before [`Statements::reap`] with the same values, where the
    /// batch's steps cannot go in the same statement.
    pub(super) reap_steps_first: Option<&'static str>,
    /// How many records one reaper batch deletes.
    pub(super) reap_batch: i64,
    /// The replication check: one row per standby; `None` where the engine
    /// has no such thing.
    pub(super) replication: Option<&'static str>,
    /// Counts the idem tables present (2 when migrated).
    pub(super) has_tables: &'static str,
    /// Run first in a transaction that reads a record and its steps
    /// together, where the engine's default does not give one snapshot.
    pub(super) snapshot: Option<&'static str>,
    /// Run in a transaction that read a record before the record answers
    /// a request: `$1` scope, `$2` key; locks the record so that the
    /// COMMIT waits for the synchronous standby like a write's. `None`
    /// where nothing waits.
    pub(super) confirm_read: Option<&'static str>,
}

/// The claims that carry their own bound on the wait behind a concurrent
/// duplicate, bound last as a `lock_timeout` value.
#[derive(Debug)]
pub struct BoundedClaims {
    /// A single-phase claim.
    pub(super) claim: &'static str,
    /// A phased claim, which keeps its request.
    pub(super) claim_phased: &'static str,
    /// The claim at commit.
    pub(super) claim_complete: &'static str,
}

/// An engine of the shared dialect.
pub trait Dialect: sqlx::Database + sqlx::database::HasStatementCache {
    /// What it writes its own way.
    const STATEMENTS: Statements;

    /// How many rows a statement changed (or matched).
    fn rows_affected(result: &Self::QueryResult) -> u64;
}

/// Runs one backend call, noting the database error it ends with on the
/// store's settings (a read-only answer from PostgreSQL).
fn noted<'a, T: Send + 'a>(
    settings: &'a StoreSettings,
    call: impl Future<Output = Result<T, StoreError>> + Send + 'a,
) -> BoxFuture<'a, Result<T, StoreError>> {
    Box::pin(async move {
        let result = call.await;
        if let Err(StoreError::Database(e)) = &result {
            settings.note(e);
        }
        result
    })
}

impl<DB> Backend for DB
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q [u8]: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q [u8]>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<String>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> String: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> Option<String>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> Option<Vec<u8>>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> i64: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> Option<i64>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> &'r str: sqlx::ColumnIndex<DB::Row>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    const SYNCHRONOUS_STANDBYS: bool = DB::STATEMENTS.confirm_read.is_some();

    const REAP_BATCH: i64 = DB::STATEMENTS.reap_batch;

    fn migrate<'a>(
        pool: &'a Pool<Self>,
        settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        noted(settings, async move {
            let mut tx = pool.begin().await?;
            sqlx::query(MIGRATIONS_TABLE)
                .persistent(settings.named_statements())
                .execute(&mut *tx)
                .await?;
            sqlx::query(DB::STATEMENTS.migration_lock)
                .persistent(settings.named_statements())
                .execute(&mut *tx)
                .await?;
            let applied: Vec<i64> = sqlx::query_scalar(MIGRATIONS_APPLIED)
                .persistent(settings.named_statements())
                .fetch_all(&mut *tx)
                .await?;
            for m in DB::STATEMENTS.migrations {
                if applied.contains(&m.version) {
                    continue;
                }
                sqlx::Executor::execute(&mut *tx, m.sql)
                    .await
                    .map_err(|source| StoreError::Migration {
                        version: m.version,
                        source,
                    })?;
                sqlx::query(MIGRATION_RECORD)
                    .persistent(settings.named_statements())
                    .bind(m.version)
                    .bind(m.description)
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn claim<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        c: &'a NewClaim<'a>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        noted(settings, async move {
            let bounded = DB::STATEMENTS
                .bounded
                .as_ref()
                .filter(|_| !session_bounds(settings.session_lock_wait(), wait));
            let (single, phased) = match bounded {
                Some(b) => (b.claim, b.claim_phased),
                None => (CLAIM, CLAIM_PHASED),
            };
            let statement = if c.request.is_some() {
                sqlx::query_as::<_, (i64,)>(phased)
                    .persistent(settings.named_statements())
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
                sqlx::query_as_with::<_, (i64,), _>(single, arguments::<DB>(6, bytes))
                    .persistent(settings.named_statements())
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
        settings: &'a StoreSettings,
        c: &'a NewClaim<'a>,
        response: &'a StoredResponse,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        noted(settings, async move {
            let bounded = DB::STATEMENTS
                .bounded
                .as_ref()
                .filter(|_| !session_bounds(settings.session_lock_wait(), wait));
            let statement = bounded.map_or(CLAIM_COMPLETE, |b| b.claim_complete);
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
                sqlx::query_as_with::<_, (i64,), _>(statement, arguments::<DB>(9, bytes))
                    .persistent(settings.named_statements())
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
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        created_before: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        noted(settings, async move {
            let deleted = sqlx::query(DELETE_EXPIRED)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .bind(created_before)
                .execute(&mut *conn)
                .await?;
            if DB::rows_affected(&deleted) == 0 {
                return Ok(false);
            }
            sqlx::query(DELETE_STEPS)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .execute(&mut *conn)
                .await?;
            Ok(true)
        })
    }

    fn confirm_read<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        noted(settings, async move {
            let Some(confirm) = DB::STATEMENTS.confirm_read else {
                return Ok(());
            };
            let locked = sqlx::query(confirm)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .fetch_optional(&mut *conn)
                .await?;
            if locked.is_none() {
                return Err(StoreError::Corrupt {
                    what: "record deleted before its answer was confirmed",
                    value: key.to_owned(),
                });
            }
            Ok(())
        })
    }

    fn lift_claim_bound<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        noted(settings, async move {
            if let Some(lift) = DB::STATEMENTS.lift_bound {
                sqlx::query(lift)
                    .persistent(settings.named_statements())
                    .execute(&mut *conn)
                    .await?;
            }
            Ok(())
        })
    }

    fn reclaim_expired<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        c: &'a NewClaim<'a>,
        created_before: i64,
        locked_before: i64,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        noted(settings, async move {
            let generation: Option<i64> = sqlx::query_scalar(RECLAIM_EXPIRED)
                .persistent(settings.named_statements())
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
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<KeyRecord>, StoreError>> {
        noted(settings, async move {
            let row = sqlx::query(SELECT_RECORD)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .fetch_optional(&mut *conn)
                .await?;
            row.as_ref().map(record_from_row).transpose()
        })
    }

    fn take_over<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        locked_before: i64,
        now: i64,
    ) -> BoxFuture<'a, Result<Option<(i64, i64)>, StoreError>> {
        noted(settings, async move {
            let taken: Option<(i64, i64)> = sqlx::query_as(TAKE_OVER)
                .persistent(settings.named_statements())
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
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        next_at: i64,
        max_attempts: i64,
        give_up_after_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Rescheduled>, StoreError>> {
        noted(settings, async move {
            let row: Option<(String, i64)> = sqlx::query_as(RESCHEDULE)
                .persistent(settings.named_statements())
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
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        noted(settings, async move {
            let done = sqlx::query(EXHAUST)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .bind(generation)
                .execute(&mut *conn)
                .await?;
            Ok(DB::rows_affected(&done) == 1)
        })
    }

    fn count_watched<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        lock_cutoff: i64,
        now: i64,
    ) -> BoxFuture<'a, Result<WatchedCounts, StoreError>> {
        noted(settings, async move {
            let (in_flight, exhausted, stale): (i64, i64, i64) = sqlx::query_as(COUNT_WATCHED)
                .persistent(settings.named_statements())
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

    fn count_exhausted<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<i64, StoreError>> {
        noted(settings, async move {
            let count: i64 = sqlx::query_scalar(COUNT_EXHAUSTED)
                .persistent(settings.named_statements())
                .fetch_one(&mut *conn)
                .await?;
            Ok(count)
        })
    }

    fn replication<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<Option<Replication>, StoreError>> {
        noted(settings, async move {
            let Some(sql) = DB::STATEMENTS.replication else {
                return Ok(None);
            };
            let rows: Vec<ServerRow> = sqlx::query_as(sql)
                .persistent(settings.named_statements())
                .fetch_all(&mut *conn)
                .await?;
            Ok(Some(Replication::from_rows(rows)))
        })
    }

    fn exhausted<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<ExhaustedRecord>, StoreError>> {
        noted(settings, async move {
            let rows = sqlx::query(EXHAUSTED)
                .persistent(settings.named_statements())
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?;
            rows.iter().map(exhausted_from_row).collect()
        })
    }

    fn advance<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        recovery_point: &'a str,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        noted(settings, async move {
            let done = sqlx::query(ADVANCE)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .bind(generation)
                .bind(recovery_point)
                .bind(now)
                .execute(&mut *conn)
                .await?;
            Ok(DB::rows_affected(&done) == 1)
        })
    }

    fn release<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        noted(settings, async move {
            let done = sqlx::query(RELEASE)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .bind(generation)
                .execute(&mut *conn)
                .await?;
            Ok(DB::rows_affected(&done) == 1)
        })
    }

    fn complete<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        response: &'a StoredResponse,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        noted(settings, async move {
            let headers = response.headers_json();
            let bytes = size(scope.as_bytes())
                + size(key.as_bytes())
                + size(headers.as_deref().unwrap_or_default().as_bytes())
                + size(&response.body)
                + 3 * INTEGER;
            let done = sqlx::query_with(COMPLETE, arguments::<DB>(7, bytes))
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .bind(generation)
                .bind(i64::from(response.status))
                .bind(headers)
                .bind(response.body.as_ref())
                .bind(now)
                .execute(&mut *conn)
                .await?;
            Ok(DB::rows_affected(&done) == 1)
        })
    }

    fn load_steps<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Vec<StepRecord>, StoreError>> {
        noted(settings, async move {
            let rows = sqlx::query(LOAD_STEPS)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .fetch_all(&mut *conn)
                .await?;
            rows.iter().map(step_from_row).collect()
        })
    }

    fn record_step<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        step: &'a StepRecord,
        now: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        noted(settings, async move {
            sqlx::query(RECORD_STEP)
                .persistent(settings.named_statements())
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
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        noted(settings, async move {
            sqlx::query(DELETE_STEPS)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }

    fn abandoned<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        locked_before: i64,
        now: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        noted(settings, async move {
            let rows: Vec<(String, String)> = sqlx::query_as(ABANDONED)
                .persistent(settings.named_statements())
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
        settings: &'a StoreSettings,
        from: i64,
        created_before: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<ReapedRecord>, StoreError>> {
        noted(settings, async move {
            let (steps_first, records) = (DB::STATEMENTS.reap_steps_first, DB::STATEMENTS.reap);
            if let Some(steps) = steps_first {
                sqlx::query(steps)
                    .persistent(settings.named_statements())
                    .bind(from)
                    .bind(created_before)
                    .bind(limit)
                    .execute(&mut *conn)
                    .await?;
            }
            let rows = sqlx::query(records)
                .persistent(settings.named_statements())
                .bind(from)
                .bind(created_before)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?;
            rows.iter().map(reaped_from_row).collect()
        })
    }
}

impl<DB> Inspect for DB
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> &'q [u8]: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<&'q [u8]>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<String>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'r> String: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> Option<String>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> Option<Vec<u8>>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> i64: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> Option<i64>: sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    for<'r> &'r str: sqlx::ColumnIndex<DB::Row>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    fn schema(store: &Store<Self>) -> BoxFuture<'_, Result<Schema, StoreError>> {
        let settings = store.settings();
        noted(settings, async move {
            // One transaction per read: behind a transaction pooler, an
            // unnamed statement is only safe inside one.
            let mut tx = store.pool().begin().await?;
            let tables: i64 = sqlx::query_scalar(DB::STATEMENTS.has_tables)
                .persistent(settings.named_statements())
                .fetch_one(&mut *tx)
                .await?;
            if tables < 2 {
                return Ok(Schema::Missing);
            }
            let found: Option<i64> = sqlx::query_scalar(SCHEMA_FOUND)
                .persistent(settings.named_statements())
                .fetch_one(&mut *tx)
                .await?;
            Ok(Schema::Version {
                found: found.unwrap_or(0),
                known: DB::STATEMENTS.schema_version,
            })
        })
    }

    fn inspect<'a>(
        store: &'a Store<Self>,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Inspected>, StoreError>> {
        let settings = store.settings();
        noted(settings, async move {
            // The record and its steps are read from one snapshot: a
            // step's intent commits with the record's recovery point.
            let mut tx = store.pool().begin().await?;
            if let Some(snapshot) = DB::STATEMENTS.snapshot {
                sqlx::query(snapshot)
                    .persistent(settings.named_statements())
                    .execute(&mut *tx)
                    .await?;
            }
            let row = sqlx::query(SELECT_RECORD)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .fetch_optional(&mut *tx)
                .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            let record = record_from_row(&row)?;
            let mut steps = DB::load_steps(&mut tx, settings, scope, key).await?;
            let order: Vec<(String, i64)> = sqlx::query_as(STEP_ORDER)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .fetch_all(&mut *tx)
                .await?;
            order_steps(&mut steps, &order);
            Ok(Some(Inspected { record, steps }))
        })
    }

    fn scopes_holding<'a>(
        store: &'a Store<Self>,
        key: &'a str,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        let settings = store.settings();
        noted(settings, async move {
            let mut tx = store.pool().begin().await?;
            Ok(sqlx::query_scalar(SCOPES_HOLDING)
                .persistent(settings.named_statements())
                .bind(key)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?)
        })
    }

    fn list<'a>(
        store: &'a Store<Self>,
        filter: &'a ListFilter,
    ) -> BoxFuture<'a, Result<Vec<KeyRecord>, StoreError>> {
        let settings = store.settings();
        noted(settings, async move {
            let mut tx = store.pool().begin().await?;
            let sql = list_statement(LIST_COLUMNS, filter, |n| format!("${n}"), "");
            let query = sqlx::query(&sql).persistent(settings.named_statements());
            let rows = bind_list(query, filter).fetch_all(&mut *tx).await?;
            rows.iter().map(record_from_row).collect()
        })
    }

    fn stats(store: &Store<Self>, reap_before: i64) -> BoxFuture<'_, Result<KeyStats, StoreError>> {
        let settings = store.settings();
        noted(settings, async move {
            let mut tx = store.pool().begin().await?;
            let by_state: Vec<(String, Option<String>, i64)> = sqlx::query_as(BY_STATE)
                .persistent(settings.named_statements())
                .fetch_all(&mut *tx)
                .await?;
            tx.commit().await?;
            let oldest_in_flight = Self::list(store, &OLDEST_IN_FLIGHT)
                .await?
                .into_iter()
                .next();
            let mut tx = store.pool().begin().await?;
            let reapable: Vec<(String, i64)> = sqlx::query_as(REAPABLE)
                .persistent(settings.named_statements())
                .bind(reap_before)
                .fetch_all(&mut *tx)
                .await?;
            key_stats(by_state, oldest_in_flight, reapable)
        })
    }

    fn resume<'a>(
        store: &'a Store<Self>,
        scope: &'a str,
        key: &'a str,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let settings = store.settings();
        noted(settings, async move {
            let mut tx = store.pool().begin().await?;
            let done = sqlx::query(RESUME)
                .persistent(settings.named_statements())
                .bind(scope)
                .bind(key)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(DB::rows_affected(&done) == 1)
        })
    }
}
