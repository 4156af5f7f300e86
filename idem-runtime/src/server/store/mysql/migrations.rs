//! The MySQL family's schema: its embedded migrations, and their runner.

use sqlx::MySqlConnection;
use sqlx::Pool;
use sqlx::mysql::MySql;

use crate::server::clock::now_ms;

use super::super::error::StoreError;
use super::super::sql::Migration;

/// The newest schema version this build writes on the MySQL family.
pub(super) const SCHEMA_VERSION: i64 = 3;

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "idempotency keys and steps",
        sql: include_str!("../../../../migrations/mysql/0001_idempotency_keys.sql"),
    },
    Migration {
        version: 2,
        description: "operation names on every record, and the open records' index",
        sql: include_str!("../../../../migrations/mysql/0002_open_records.sql"),
    },
    Migration {
        version: 3,
        description: "records in claim-time order, one per key by a unique key",
        sql: include_str!("../../../../migrations/mysql/0003_claim_time_order.sql"),
    },
];

/// Creates or upgrades the schema. DDL commits on its own in MySQL: the
/// run is serialised by a named lock held by one connection, not by a
/// transaction.
pub(super) async fn migrate(pool: &Pool<MySql>) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await?;
    let (locked,): (Option<i64>,) = sqlx::query_as("SELECT GET_LOCK('idem_migrations', 60)")
        .fetch_one(&mut *conn)
        .await?;
    if locked != Some(1) {
        return Err(StoreError::Database(sqlx::Error::Protocol(
            "another process held the migration lock for 60s".into(),
        )));
    }
    let result = apply(&mut conn).await;
    sqlx::query("SELECT RELEASE_LOCK('idem_migrations')")
        .execute(&mut *conn)
        .await?;
    result
}

/// Applies the migrations not yet recorded, on a connection holding the
/// migration lock.
async fn apply(conn: &mut MySqlConnection) -> Result<(), StoreError> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS idem_schema_migrations (version BIGINT PRIMARY KEY, \
         description TEXT NOT NULL, applied_at BIGINT NOT NULL) ENGINE = InnoDB",
    )
    .execute(&mut *conn)
    .await?;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM idem_schema_migrations")
        .fetch_all(&mut *conn)
        .await?;
    for m in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        // Every statement of the file in one text-protocol batch.
        sqlx::Executor::execute(&mut *conn, m.sql)
            .await
            .map_err(|source| StoreError::Migration {
                version: m.version,
                source,
            })?;
        sqlx::query(
            "INSERT INTO idem_schema_migrations (version, description, applied_at) \
             VALUES (?, ?, ?)",
        )
        .bind(m.version)
        .bind(m.description)
        .bind(now_ms())
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}
