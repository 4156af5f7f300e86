//! `idem keys` on the MySQL family: the operator's reads, and the resume of
//! an exhausted record, in MariaDB's dialect.

use sqlx::mysql::MySql;

use super::super::backend::Backend;
use super::super::error::StoreError;
use super::super::handle::Store;
use super::super::inspect::{
    BY_STATE, Inspect, Inspected, KeyStats, ListFilter, OLDEST_IN_FLIGHT, Schema, bind_list,
    key_stats, list_statement, order_steps,
};
use super::super::records::{BoxFuture, KeyRecord};
use super::super::sql::record_from_row;
use super::backend::COLUMNS;
use super::migrations::SCHEMA_VERSION;

// The list leaves the bodies out: a page of records stays small.
const LIST_COLUMNS: &str = "CONVERT(scope USING utf8mb4) AS scope, \
     CONVERT(idem_key USING utf8mb4) AS idem_key, fingerprint, state, operation, \
     request_method, request_path, NULL AS request_body, recovery_point, lock_generation, \
     locked_at, response_status, NULL AS response_headers, NULL AS response_body, created_at, \
     completed_at, attempts, next_attempt_at, resumed_at";

impl Inspect for MySql {
    fn schema(store: &Store<Self>) -> BoxFuture<'_, Result<Schema, StoreError>> {
        let pool = store.pool();
        Box::pin(async move {
            let tables: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = DATABASE() \
                   AND table_name IN ('idem_keys', 'idem_schema_migrations')",
            )
            .fetch_one(pool)
            .await?;
            if tables < 2 {
                return Ok(Schema::Missing);
            }
            let found: Option<i64> =
                sqlx::query_scalar("SELECT MAX(version) FROM idem_schema_migrations")
                    .fetch_one(pool)
                    .await?;
            Ok(Schema::Version {
                found: found.unwrap_or(0),
                known: SCHEMA_VERSION,
            })
        })
    }

    fn inspect<'a>(
        store: &'a Store<Self>,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Inspected>, StoreError>> {
        let pool = store.pool();
        Box::pin(async move {
            // The record and its steps from one snapshot (InnoDB's default,
            // REPEATABLE READ, takes it at the first read): a step's intent
            // commits with the record's recovery point.
            let mut tx = pool.begin().await?;
            let select =
                format!("SELECT {COLUMNS} FROM idem_keys WHERE scope = ? AND idem_key = ?");
            let row = sqlx::query(&select)
                .bind(scope)
                .bind(key)
                .fetch_optional(&mut *tx)
                .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            let record = record_from_row(&row)?;
            let mut steps =
                <MySql as Backend>::load_steps(&mut tx, store.settings(), scope, key).await?;
            let order: Vec<(String, i64)> = sqlx::query_as(
                "SELECT CONVERT(step USING utf8mb4), updated_at FROM idem_steps \
                 WHERE scope = ? AND idem_key = ?",
            )
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
        let pool = store.pool();
        Box::pin(async move {
            Ok(sqlx::query_scalar(
                "SELECT CONVERT(scope USING utf8mb4) FROM idem_keys WHERE idem_key = ? \
                 ORDER BY created_at LIMIT ?",
            )
            .bind(key)
            .bind(limit)
            .fetch_all(pool)
            .await?)
        })
    }

    fn list<'a>(
        store: &'a Store<Self>,
        filter: &'a ListFilter,
    ) -> BoxFuture<'a, Result<Vec<KeyRecord>, StoreError>> {
        let pool = store.pool();
        Box::pin(async move {
            let sql = list_statement(
                LIST_COLUMNS,
                filter,
                |_| "?".to_owned(),
                " FORCE INDEX (idem_keys_open)",
            );
            let rows = bind_list(sqlx::query(&sql), filter).fetch_all(pool).await?;
            rows.iter().map(record_from_row).collect()
        })
    }

    fn stats(store: &Store<Self>, reap_before: i64) -> BoxFuture<'_, Result<KeyStats, StoreError>> {
        let pool = store.pool();
        Box::pin(async move {
            let by_state = sqlx::query_as(BY_STATE).fetch_all(pool).await?;
            let oldest_in_flight = Self::list(store, &OLDEST_IN_FLIGHT)
                .await?
                .into_iter()
                .next();
            let reapable = sqlx::query_as(
                "SELECT state, COUNT(*) FROM idem_keys WHERE created_at < ? \
                 GROUP BY state ORDER BY state",
            )
            .bind(reap_before)
            .fetch_all(pool)
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
        let pool = store.pool();
        Box::pin(async move {
            let done = sqlx::query(
                "UPDATE idem_keys SET state = 'in_flight', locked_at = NULL, \
                 next_attempt_at = ?, attempts = 0, resumed_at = ? \
                 WHERE scope = ? AND idem_key = ? AND state = 'exhausted' \
                   AND request_method IS NOT NULL",
            )
            .bind(now)
            .bind(now)
            .bind(scope)
            .bind(key)
            .execute(pool)
            .await?;
            Ok(done.rows_affected() == 1)
        })
    }
}
