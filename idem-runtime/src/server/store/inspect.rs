//! Reading the key store for an operator (`idem keys`), and the one change
//! it makes when asked: an exhausted record made due again.

use sqlx::postgres::Postgres;
use sqlx::{Pool, Sqlite};

use crate::server::error::StoreError;

use super::backend::Backend;
use super::postgres::POSTGRES_SCHEMA_VERSION;
use super::records::{BoxFuture, KeyRecord, KeyState, StepRecord, StepStatus};
use super::sql::record_from_row;
use super::sqlite::SQLITE_SCHEMA_VERSION;

/// One record, whole: the key row and its phase steps.
#[derive(Debug, Clone)]
pub struct Inspected {
    /// The key row, stored request and response included.
    pub record: KeyRecord,
    /// The steps of a phased operation, by when each was last written.
    pub steps: Vec<StepRecord>,
}

/// Which records [`Inspect::list`] returns, oldest first.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only records in this state.
    pub state: Option<KeyState>,
    /// Only records of this operation (records written before schema
    /// version 5 name phased operations only).
    pub operation: Option<String>,
    /// Only records claimed before this time (ms since epoch).
    pub claimed_before: Option<i64>,
    /// At most this many.
    pub limit: i64,
}

/// What the store holds, by state and operation.
#[derive(Debug, Clone, Default)]
pub struct KeyStats {
    /// `(state, operation, count)`; the operation is `None` for
    /// single-phase records written before records named their operation.
    pub by_state: Vec<(KeyState, Option<String>, i64)>,
    /// The in-flight record claimed longest ago.
    pub oldest_in_flight: Option<KeyRecord>,
    /// `(state, count)` of the records the next reaper pass deletes.
    pub reapable: Vec<(KeyState, i64)>,
}

/// The schema a database holds, as [`Inspect::schema`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// No idem tables: not a key store, or one never migrated.
    Missing,
    /// The newest migration applied, and the newest this build knows.
    Version {
        /// Applied.
        found: i64,
        /// Known to this build.
        known: i64,
    },
}

/// The operator's queries, on each engine idem supports.
pub trait Inspect: Backend {
    /// Which schema version the database holds.
    fn schema(pool: &Pool<Self>) -> BoxFuture<'_, Result<Schema, StoreError>>;

    /// The record of `key` under `scope`, with its steps.
    fn inspect<'a>(
        pool: &'a Pool<Self>,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Inspected>, StoreError>>;

    /// Every scope that holds `key` (at most `limit`).
    fn scopes_holding<'a>(
        pool: &'a Pool<Self>,
        key: &'a str,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>>;

    /// The records `filter` selects, oldest first, without their bodies.
    fn list<'a>(
        pool: &'a Pool<Self>,
        filter: &'a ListFilter,
    ) -> BoxFuture<'a, Result<Vec<KeyRecord>, StoreError>>;

    /// Counts by state and operation, the oldest in-flight record, and what
    /// a reaper pass with cutoff `reap_before` (ms since epoch) deletes.
    fn stats(pool: &Pool<Self>, reap_before: i64) -> BoxFuture<'_, Result<KeyStats, StoreError>>;

    /// Makes the exhausted phased record of `key` due again at `now`: back
    /// in flight, unlocked, its attempts and age counted afresh from `now`.
    /// Its finished steps stay finished. `false` when no exhausted phased
    /// record of that key exists.
    fn resume<'a>(
        pool: &'a Pool<Self>,
        scope: &'a str,
        key: &'a str,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

const COLUMNS: &str = "scope, idem_key, fingerprint, state, operation, request_method, \
     request_path, request_body, recovery_point, lock_generation, locked_at, response_status, \
     response_headers, response_body, created_at, completed_at, attempts, next_attempt_at, \
     resumed_at";

// The list leaves the bodies out: a page of records stays small.
const LIST_COLUMNS: &str = "scope, idem_key, fingerprint, state, operation, request_method, \
     request_path, NULL AS request_body, recovery_point, lock_generation, locked_at, \
     response_status, NULL AS response_headers, NULL AS response_body, created_at, completed_at, \
     attempts, next_attempt_at, resumed_at";

/// The list statement for `filter`, with only the conditions it sets, so
/// each combination is planned for what it asks: records oldest first
/// through the claim-time index, and a state other than complete through
/// the open records' index. `mark(n)` is the engine's `n`th placeholder;
/// the values bind in the order state, operation, claimed-before, each
/// only when set ([`bind_list`]).
pub(super) fn list_statement(
    columns: &str,
    filter: &ListFilter,
    mark: fn(usize) -> String,
) -> String {
    let mut conditions = Vec::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        mark(n)
    };
    if let Some(state) = filter.state {
        if state != KeyState::Complete {
            conditions.push("request_method IS NOT NULL".to_owned());
        }
        conditions.push(format!("state = {}", next()));
    }
    if filter.operation.is_some() {
        conditions.push(format!("operation = {}", next()));
    }
    if filter.claimed_before.is_some() {
        conditions.push(format!("created_at < {}", next()));
    }
    let conditions = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    // The order names the table's columns, not the select list's (MySQL's
    // converts the key columns, and would sort by the conversion), so the
    // claim-time index serves it; the limit is written in, not bound, for
    // the same plan on MariaDB.
    format!(
        "SELECT {columns} FROM idem_keys{conditions} \
         ORDER BY idem_keys.created_at, idem_keys.scope, idem_keys.idem_key LIMIT {}",
        filter.limit.max(0)
    )
}

/// Binds `filter`'s values to the statement [`list_statement`] wrote.
pub(super) fn bind_list<'q, DB>(
    mut query: sqlx::query::Query<'q, DB, DB::Arguments<'q>>,
    filter: &'q ListFilter,
) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>>
where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    if let Some(state) = filter.state {
        query = query.bind(state.as_str());
    }
    if let Some(operation) = &filter.operation {
        query = query.bind(operation.as_str());
    }
    if let Some(before) = filter.claimed_before {
        query = query.bind(before);
    }
    query
}

const STEP_ORDER: &str =
    "SELECT step, updated_at FROM idem_steps WHERE scope = $1 AND idem_key = $2";

const SCOPES_HOLDING: &str =
    "SELECT scope FROM idem_keys WHERE idem_key = $1 ORDER BY created_at LIMIT $2";

pub(super) const BY_STATE: &str = "SELECT state, operation, COUNT(*) FROM idem_keys \
     GROUP BY state, operation ORDER BY state, operation";

const REAPABLE: &str = "SELECT state, COUNT(*) FROM idem_keys WHERE created_at < $1 \
     GROUP BY state ORDER BY state";

const RESUME: &str = "UPDATE idem_keys SET state = 'in_flight', locked_at = NULL, \
     next_attempt_at = $3, attempts = 0, resumed_at = $3 \
     WHERE scope = $1 AND idem_key = $2 AND state = 'exhausted' AND request_method IS NOT NULL";

const SQLITE_HAS_TABLES: &str = "SELECT COUNT(*) FROM sqlite_master \
     WHERE type = 'table' AND name IN ('idem_keys', 'idem_schema_migrations')";
const POSTGRES_HAS_TABLES: &str = "SELECT COUNT(*) FROM pg_catalog.pg_tables \
     WHERE schemaname = ANY (current_schemas(false)) \
       AND tablename IN ('idem_keys', 'idem_schema_migrations')";

/// Puts `steps` in the order they were last written (`order`: each step's
/// `updated_at`). A step's intent is written after the steps before it are
/// done: within one millisecond, done steps come first.
pub(super) fn order_steps(steps: &mut [StepRecord], order: &[(String, i64)]) {
    let at = |step: &str| order.iter().find(|(s, _)| s == step).map(|(_, at)| *at);
    steps.sort_by_key(|s| (at(&s.step), s.status == StepStatus::Intent, s.step.clone()));
}

/// The filter of the in-flight record claimed longest ago.
pub(super) const OLDEST_IN_FLIGHT: ListFilter = ListFilter {
    state: Some(KeyState::InFlight),
    operation: None,
    claimed_before: None,
    limit: 1,
};

/// [`KeyStats`] from what [`Inspect::stats`] read: `(state, operation,
/// count)` rows, the oldest in-flight record, `(state, count)` rows of what
/// the reaper deletes.
pub(super) fn key_stats(
    by_state: Vec<(String, Option<String>, i64)>,
    oldest_in_flight: Option<KeyRecord>,
    reapable: Vec<(String, i64)>,
) -> Result<KeyStats, StoreError> {
    Ok(KeyStats {
        by_state: by_state
            .into_iter()
            .map(|(state, op, n)| Ok((KeyState::parse(&state)?, op, n)))
            .collect::<Result<_, StoreError>>()?,
        oldest_in_flight,
        reapable: reapable
            .into_iter()
            .map(|(state, n)| Ok((KeyState::parse(&state)?, n)))
            .collect::<Result<_, StoreError>>()?,
    })
}

macro_rules! impl_inspect {
    ($db:ty, $has_tables:expr, $known:expr, $named:expr, $snapshot:expr) => {
        impl Inspect for $db {
            fn schema(pool: &Pool<Self>) -> BoxFuture<'_, Result<Schema, StoreError>> {
                Box::pin(async move {
                    // One transaction per read: behind a transaction pooler,
                    // an unnamed statement is only safe inside one.
                    let mut tx = pool.begin().await?;
                    let tables: i64 = sqlx::query_scalar($has_tables)
                        .persistent($named)
                        .fetch_one(&mut *tx)
                        .await?;
                    if tables < 2 {
                        return Ok(Schema::Missing);
                    }
                    let found: Option<i64> =
                        sqlx::query_scalar("SELECT MAX(version) FROM idem_schema_migrations")
                            .persistent($named)
                            .fetch_one(&mut *tx)
                            .await?;
                    Ok(Schema::Version {
                        found: found.unwrap_or(0),
                        known: $known,
                    })
                })
            }

            fn inspect<'a>(
                pool: &'a Pool<Self>,
                scope: &'a str,
                key: &'a str,
            ) -> BoxFuture<'a, Result<Option<Inspected>, StoreError>> {
                Box::pin(async move {
                    // One transaction per read: behind a transaction pooler,
                    // an unnamed statement is only safe inside one. The
                    // record and its steps are read from one snapshot: a
                    // step's intent commits with the record's recovery point.
                    let mut tx = pool.begin().await?;
                    if let Some(snapshot) = $snapshot {
                        sqlx::query(snapshot)
                            .persistent($named)
                            .execute(&mut *tx)
                            .await?;
                    }
                    let select = format!(
                        "SELECT {COLUMNS} FROM idem_keys WHERE scope = $1 AND idem_key = $2"
                    );
                    let row = sqlx::query(&select)
                        .persistent($named)
                        .bind(scope)
                        .bind(key)
                        .fetch_optional(&mut *tx)
                        .await?;
                    let Some(row) = row else {
                        return Ok(None);
                    };
                    let record = record_from_row(&row)?;
                    let mut steps = <$db as Backend>::load_steps(&mut tx, scope, key).await?;
                    let order: Vec<(String, i64)> = sqlx::query_as(STEP_ORDER)
                        .persistent($named)
                        .bind(scope)
                        .bind(key)
                        .fetch_all(&mut *tx)
                        .await?;
                    order_steps(&mut steps, &order);
                    Ok(Some(Inspected { record, steps }))
                })
            }

            fn scopes_holding<'a>(
                pool: &'a Pool<Self>,
                key: &'a str,
                limit: i64,
            ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
                Box::pin(async move {
                    // One transaction per read: behind a transaction pooler,
                    // an unnamed statement is only safe inside one.
                    let mut tx = pool.begin().await?;
                    Ok(sqlx::query_scalar(SCOPES_HOLDING)
                        .persistent($named)
                        .bind(key)
                        .bind(limit)
                        .fetch_all(&mut *tx)
                        .await?)
                })
            }

            fn list<'a>(
                pool: &'a Pool<Self>,
                filter: &'a ListFilter,
            ) -> BoxFuture<'a, Result<Vec<KeyRecord>, StoreError>> {
                Box::pin(async move {
                    // One transaction per read: behind a transaction pooler,
                    // an unnamed statement is only safe inside one.
                    let mut tx = pool.begin().await?;
                    let sql = list_statement(LIST_COLUMNS, filter, |n| format!("${n}"));
                    let rows = bind_list(sqlx::query(&sql).persistent($named), filter)
                        .fetch_all(&mut *tx)
                        .await?;
                    rows.iter().map(record_from_row).collect()
                })
            }

            fn stats(
                pool: &Pool<Self>,
                reap_before: i64,
            ) -> BoxFuture<'_, Result<KeyStats, StoreError>> {
                Box::pin(async move {
                    // One transaction per read: behind a transaction pooler,
                    // an unnamed statement is only safe inside one.
                    let mut tx = pool.begin().await?;
                    let by_state: Vec<(String, Option<String>, i64)> = sqlx::query_as(BY_STATE)
                        .persistent($named)
                        .fetch_all(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    let oldest_in_flight = Self::list(pool, &OLDEST_IN_FLIGHT)
                        .await?
                        .into_iter()
                        .next();
                    let mut tx = pool.begin().await?;
                    let reapable: Vec<(String, i64)> = sqlx::query_as(REAPABLE)
                        .persistent($named)
                        .bind(reap_before)
                        .fetch_all(&mut *tx)
                        .await?;
                    key_stats(by_state, oldest_in_flight, reapable)
                })
            }

            fn resume<'a>(
                pool: &'a Pool<Self>,
                scope: &'a str,
                key: &'a str,
                now: i64,
            ) -> BoxFuture<'a, Result<bool, StoreError>> {
                Box::pin(async move {
                    // One transaction per read: behind a transaction pooler,
                    // an unnamed statement is only safe inside one.
                    let mut tx = pool.begin().await?;
                    let done = sqlx::query(RESUME)
                        .persistent($named)
                        .bind(scope)
                        .bind(key)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(done.rows_affected() == 1)
                })
            }
        }
    };
}

impl_inspect!(
    Sqlite,
    SQLITE_HAS_TABLES,
    SQLITE_SCHEMA_VERSION,
    true,
    None::<&'static str>
);
impl_inspect!(
    Postgres,
    POSTGRES_HAS_TABLES,
    POSTGRES_SCHEMA_VERSION,
    super::named_statements(),
    Some("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
);
