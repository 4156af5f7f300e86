//! The key store at the size of a day of production traffic: what a keyed
//! request, the background jobs' statements and the operator's queries
//! cost when the key table holds 0, 1 M or 10 M records, and what a reaper
//! pass costs the requests running beside it.
//!
//! ```text
//! cargo run --release -p idem-runtime --example store_scale -- \
//!     --store sqlite|postgres|mysql [--url URL] [--rows 0,1000000,10000000] \
//!     [--open 0.001] [--concurrency 16] [--seconds 10] [--reap-seconds S] \
//!     [--explain]
//! cargo run --release -p idem-runtime --example store_scale -- \
//!     --store sqlite|postgres|mysql --soak MINUTES [--rows 1000000] [--retention 20]
//! ```
//!
//! PostgreSQL and MySQL/MariaDB take `--url`, or `IDEM_TEST_DATABASE_URL` and
//! `IDEM_TEST_MYSQL_URL`; SQLite uses a file in a temporary directory. The
//! bench drops and recreates idem's tables (and its own `scale_orders`)
//! there: point it at a scratch database.
//!
//! For each size the key table is filled by bulk SQL with records shaped
//! like real traffic, claimed evenly over the last 72 hours (`reaper-after`'s
//! default): one in ten of a phased operation with two steps, the rest
//! single-phase; every complete record stores a response of about 500
//! bytes; a share `--open` of all records (phased ones: half in flight with
//! a stale lock, half exhausted) is not complete. Then it measures:
//!
//! - keyed POSTs through the idempotency layer over loopback, from
//!   `--concurrency` tasks for `--seconds`: p50, p99 and requests a second;
//! - each periodic statement (the `idem_records` gauge's two counts, the
//!   completer's due scan, the exhausted list), the median of 7 runs, and
//!   one reaper batch (1,000 records; 500 on MariaDB, 200 on SQLite);
//! - `idem keys stats`, `list` and `show`;
//! - the bytes the key and step tables and their indexes take, per record;
//! - then a reaper pass deleting the oldest day (a third of the records)
//!   while the keyed load runs: p99 during the pass against p99 of the same
//!   load just before it, over as long a window, and the records deleted a
//!   second. The reaper paces itself
//!   (`REAPER_RATE`), so at 10 M records the day takes over 20 minutes:
//!   `--reap-seconds` cuts the pass off there and counts what it deleted.
//!
//! `--explain` prints each periodic statement's plan.
//!
//! `--soak` runs the table through turnover instead: records kept
//! `--retention` minutes, claimed at the pace that keeps the table at
//! `--rows`, the reaper deleting what expires, and a line a minute with the
//! table's size and what the engine says deleting left behind (PostgreSQL's
//! dead rows and vacuums, InnoDB's free space and purge backlog, SQLite's
//! free pages).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http::StatusCode;
use idem_runtime::server::{
    Backend, BoxFuture, HeaderScope, IdemTx, Idempotency, IdempotencyKey, Inspect, ListFilter,
    Policy, Store,
};
use sqlx::{MySql, Pool, Postgres, Sqlite};

const HOUR_MS: i64 = 3_600_000;
/// The window the records are claimed over: `reaper-after`'s default.
const WINDOW_MS: i64 = 72 * HOUR_MS;
/// Records per fill statement, so the fill reports progress.
const CHUNK: i64 = 500_000;

/// What one fill statement writes: records `from..to` of `total`.
struct Fill {
    from: i64,
    to: i64,
    total: i64,
    start_ms: i64,
    /// The span the records are claimed over, from `start_ms`.
    window_ms: i64,
    /// One phased record in `open_every` is open (in flight or exhausted).
    open_every: i64,
}

/// The engine-specific half of the bench: its bulk fill, its sizes and its
/// plans.
trait Scale: Backend + Inspect {
    /// What the completer's scan names after `FROM idem_keys` (MariaDB is
    /// told which index to read when it pages through the open records).
    const OPEN_INDEX_HINT: &'static str = "";
    /// Drops idem's tables and the bench's own, so `migrate` starts afresh.
    fn reset(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<()>>;
    /// Writes the records and steps of `fill`.
    fn fill<'a>(pool: &'a Pool<Self>, fill: &'a Fill) -> BoxFuture<'a, anyhow::Result<()>>;
    /// Refreshes the planner's statistics after the fill.
    fn analyze(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<()>>;
    /// Bytes of the key and step tables' rows, and of their indexes.
    fn bytes(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<(i64, i64)>>;
    /// How many records the key table holds claimed before `before` (ms).
    fn records(pool: &Pool<Self>, before: i64) -> BoxFuture<'_, anyhow::Result<i64>>;
    /// What deleting leaves behind in the key table, by the engine's own
    /// measures: dead rows and vacuums, free space, a purge backlog.
    fn churn(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<Vec<(&'static str, i64)>>>;
    /// The plan of `sql` with its `binds` (integers) in place.
    fn explain<'a>(
        pool: &'a Pool<Self>,
        sql: &'a str,
        binds: &'a [i64],
    ) -> BoxFuture<'a, anyhow::Result<String>>;
    /// The handler's own write.
    fn order<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;
}

// The record columns every engine's fill writes, in this order.
const FILL_COLUMNS: &str = "scope, idem_key, fingerprint, state, operation, request_method, \
     request_path, request_body, recovery_point, lock_generation, locked_at, response_status, \
     response_headers, response_body, created_at, completed_at, attempts";

/// The fill's SELECT list over a derived table with `g` (the record's
/// number), `p` (phased), `o` (open) and `t` (claimed at), with the
/// engine's string concatenation and 500-byte body expressions.
fn fill_select(
    concat: fn(&[&str]) -> String,
    fingerprint: &str,
    body: &str,
    request: &str,
) -> String {
    let scope = concat(&["'acct_'", "g % 5000"]);
    let key = concat(&["'fill-'", "g"]);
    format!(
        "{scope}, {key}, {fingerprint}, \
         CASE WHEN o THEN CASE WHEN g % 20 = 0 THEN 'in_flight' ELSE 'exhausted' END \
           ELSE 'complete' END, \
         CASE WHEN p THEN 'createPayout' ELSE 'createCharge' END, \
         CASE WHEN o THEN 'POST' END, CASE WHEN o THEN '/payouts' END, \
         CASE WHEN o THEN {request} END, \
         CASE WHEN o THEN 'submit:intent' ELSE 'finished' END, 1, \
         CASE WHEN o THEN t END, CASE WHEN o THEN NULL ELSE 201 END, \
         CASE WHEN o THEN NULL ELSE '[[\"content-type\",\"application/json\"]]' END, \
         CASE WHEN o THEN NULL ELSE {body} END, \
         t, CASE WHEN o THEN NULL ELSE t + 40 END, CASE WHEN o THEN 3 ELSE 1 END"
    )
}

/// The steps of the phased records: two each, the second only intended
/// where the record is open.
fn steps_select(concat: fn(&[&str]) -> String) -> String {
    let scope = concat(&["'acct_'", "g % 5000"]);
    let key = concat(&["'fill-'", "g"]);
    let derived = concat(&["'fill-'", "g", "':'", "step"]);
    format!(
        "{scope}, {key}, step, CASE WHEN o AND step = 'notify' THEN 'intent' ELSE 'done' END, \
         {derived}, '\"ok\"', t"
    )
}

fn pipes(parts: &[&str]) -> String {
    parts.join(" || ")
}

fn concat_fn(parts: &[&str]) -> String {
    format!("CONCAT({})", parts.join(", "))
}

impl Scale for Postgres {
    fn reset(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            sqlx::raw_sql(
                "DROP TABLE IF EXISTS idem_keys, idem_steps, idem_schema_migrations, scale_orders; \
                 CREATE TABLE scale_orders (id BIGSERIAL PRIMARY KEY, scope TEXT NOT NULL, \
                   body BYTEA NOT NULL)",
            )
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    fn fill<'a>(pool: &'a Pool<Self>, fill: &'a Fill) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let window = fill.window_ms;
            let rows = format!(
                "FROM (SELECT g, g % 10 = 0 AS p, g % 10 = 0 AND (g / 10) % $5 = 0 AS o, \
                 $4 + g * {window} / $3 AS t FROM generate_series($1::bigint, $2 - 1) g) s"
            );
            let keys = format!(
                "INSERT INTO idem_keys ({FILL_COLUMNS}) SELECT {} {rows}",
                fill_select(
                    pipes,
                    "md5(g::text) || md5((-g)::text)",
                    "convert_to(repeat(md5(g::text), 16), 'UTF8')",
                    "convert_to(repeat(md5(g::text), 4), 'UTF8')"
                )
            );
            let steps = format!(
                "INSERT INTO idem_steps (scope, idem_key, step, status, derived_key, output, \
                 updated_at) SELECT {} {rows} CROSS JOIN (VALUES ('submit'), ('notify')) v(step) \
                 WHERE p",
                steps_select(pipes)
            );
            for sql in [keys, steps] {
                sqlx::query(&sql)
                    .bind(fill.from)
                    .bind(fill.to)
                    .bind(fill.total)
                    .bind(fill.start_ms)
                    .bind(fill.open_every)
                    .execute(pool)
                    .await?;
            }
            Ok(())
        })
    }

    fn analyze(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            // One statement at a time: VACUUM refuses a multi-statement batch.
            for sql in ["VACUUM ANALYZE idem_keys", "VACUUM ANALYZE idem_steps"] {
                sqlx::raw_sql(sql).execute(pool).await?;
            }
            Ok(())
        })
    }

    fn records(pool: &Pool<Self>, before: i64) -> BoxFuture<'_, anyhow::Result<i64>> {
        Box::pin(async move {
            let sql = format!("SELECT COUNT(*) FROM idem_keys WHERE created_at < {before}");
            Ok(sqlx::query_scalar(&sql).fetch_one(pool).await?)
        })
    }

    fn bytes(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<(i64, i64)>> {
        Box::pin(async move {
            Ok(sqlx::query_as(
                "SELECT (pg_table_size('idem_keys') + pg_table_size('idem_steps'))::bigint, \
                 (pg_indexes_size('idem_keys') + pg_indexes_size('idem_steps'))::bigint",
            )
            .fetch_one(pool)
            .await?)
        })
    }

    fn churn(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<Vec<(&'static str, i64)>>> {
        Box::pin(async move {
            // By the table's oid: every test schema has an `idem_keys`.
            let (dead, vacuums): (i64, i64) = sqlx::query_as(
                "SELECT n_dead_tup, autovacuum_count + vacuum_count FROM pg_stat_user_tables \
                 WHERE relid = 'idem_keys'::regclass",
            )
            .fetch_one(pool)
            .await?;
            Ok(vec![("dead rows", dead), ("vacuums", vacuums)])
        })
    }

    fn explain<'a>(
        pool: &'a Pool<Self>,
        sql: &'a str,
        binds: &'a [i64],
    ) -> BoxFuture<'a, anyhow::Result<String>> {
        Box::pin(async move {
            let explain = format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}");
            let mut query = sqlx::query_scalar::<_, String>(&explain);
            for b in binds {
                query = query.bind(b);
            }
            let mut tx = pool.begin().await?;
            let lines = query.fetch_all(&mut *tx).await?;
            tx.rollback().await?;
            Ok(lines.join("\n"))
        })
    }

    fn order<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query("INSERT INTO scale_orders (scope, body) VALUES ($1, $2)")
                .bind(scope)
                .bind(body)
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }
}

impl Scale for MySql {
    const OPEN_INDEX_HINT: &'static str = " FORCE INDEX (idem_keys_open)";

    fn reset(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            sqlx::raw_sql(
                "DROP TABLE IF EXISTS idem_keys, idem_steps, idem_schema_migrations, scale_orders, \
                   scale_digits; \
                 CREATE TABLE scale_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                   scope VARCHAR(255) NOT NULL, body BLOB NOT NULL) ENGINE = InnoDB; \
                 CREATE TABLE scale_digits (d INT PRIMARY KEY); \
                 INSERT INTO scale_digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)",
            )
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    fn fill<'a>(pool: &'a Pool<Self>, fill: &'a Fill) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            // The record numbers from..to as six digit tables joined: no
            // recursion limits, the same on MySQL and MariaDB.
            let window = fill.window_ms;
            let numbers = "SELECT ? + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d \
                 + 100000 * h.d AS g FROM scale_digits a, scale_digits b, scale_digits c, \
                 scale_digits e, scale_digits f, scale_digits h";
            let rows = format!(
                "FROM (SELECT g, g % 10 = 0 AS p, g % 10 = 0 AND (g DIV 10) % ? = 0 AS o, \
                 ? + g * {window} DIV ? AS t FROM ({numbers}) n WHERE g < ?) s"
            );
            let keys = format!(
                "INSERT INTO idem_keys ({FILL_COLUMNS}) SELECT {} {rows}",
                fill_select(
                    concat_fn,
                    "CONCAT(md5(g), md5(-g))",
                    "REPEAT(md5(g), 16)",
                    "REPEAT(md5(g), 4)"
                )
            );
            let steps = format!(
                "INSERT INTO idem_steps (scope, idem_key, step, status, derived_key, output, \
                 updated_at) SELECT {} {rows} CROSS JOIN (SELECT 'submit' AS step UNION ALL \
                 SELECT 'notify') v WHERE p",
                steps_select(concat_fn)
            );
            // The digits reach 999,999 past `from`: a fill statement writes
            // at most `CHUNK` records.
            for sql in [keys, steps] {
                sqlx::query(&sql)
                    .bind(fill.open_every)
                    .bind(fill.start_ms)
                    .bind(fill.total)
                    .bind(fill.from)
                    .bind(fill.to)
                    .execute(pool)
                    .await?;
            }
            Ok(())
        })
    }

    fn analyze(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            sqlx::raw_sql("ANALYZE TABLE idem_keys, idem_steps")
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    fn records(pool: &Pool<Self>, before: i64) -> BoxFuture<'_, anyhow::Result<i64>> {
        Box::pin(async move {
            let sql = format!("SELECT COUNT(*) FROM idem_keys WHERE created_at < {before}");
            Ok(sqlx::query_scalar(&sql).fetch_one(pool).await?)
        })
    }

    fn bytes(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<(i64, i64)>> {
        Box::pin(async move {
            Ok(sqlx::query_as(
                "SELECT CAST(SUM(data_length) AS SIGNED), CAST(SUM(index_length) AS SIGNED) \
                 FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name IN ('idem_keys', 'idem_steps')",
            )
            .fetch_one(pool)
            .await?)
        })
    }

    fn churn(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<Vec<(&'static str, i64)>>> {
        Box::pin(async move {
            let free: i64 = sqlx::query_scalar(
                "SELECT CAST(data_free AS SIGNED) FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name = 'idem_keys'",
            )
            .fetch_one(pool)
            .await?;
            // Undo logs not yet purged: deleted rows InnoDB still keeps.
            let backlog: Option<i64> = sqlx::query_scalar(
                "SELECT CAST(count AS SIGNED) FROM information_schema.innodb_metrics \
                 WHERE name = 'trx_rseg_history_len'",
            )
            .fetch_optional(pool)
            .await?;
            Ok(vec![
                ("free MB", free >> 20),
                ("purge backlog", backlog.unwrap_or(-1)),
            ])
        })
    }

    fn explain<'a>(
        pool: &'a Pool<Self>,
        sql: &'a str,
        binds: &'a [i64],
    ) -> BoxFuture<'a, anyhow::Result<String>> {
        Box::pin(async move {
            let explain = format!("EXPLAIN {}", sql.replace(['$'], "?"));
            let explain = strip_numbers(&explain);
            let mut query = sqlx::query(&explain);
            for b in binds {
                query = query.bind(b);
            }
            let rows = query.fetch_all(pool).await?;
            let mut out = String::from("table | type | key | rows | Extra\n");
            for row in rows {
                use sqlx::Row as _;
                let text = |name: &str| -> String {
                    row.try_get::<Option<String>, _>(name)
                        .ok()
                        .flatten()
                        .unwrap_or_else(|| "-".to_owned())
                };
                // MariaDB reports the estimate unsigned, MySQL signed.
                let rows: Option<u64> = row
                    .try_get::<Option<u64>, _>("rows")
                    .ok()
                    .flatten()
                    .or_else(|| {
                        let signed: Option<i64> = row.try_get("rows").ok().flatten();
                        signed.and_then(|r| u64::try_from(r).ok())
                    });
                out.push_str(&format!(
                    "{} | {} | {} | {} | {}\n",
                    text("table"),
                    text("type"),
                    text("key"),
                    rows.map_or("-".to_owned(), |r| r.to_string()),
                    text("Extra")
                ));
            }
            Ok(out)
        })
    }

    fn order<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query("INSERT INTO scale_orders (scope, body) VALUES (?, ?)")
                .bind(scope)
                .bind(body)
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }
}

/// `$1`, `$2`, … as MySQL's `?` (the statements below are written once,
/// in PostgreSQL's numbering, in the order they bind).
fn strip_numbers(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '?' {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
        }
    }
    out
}

impl Scale for Sqlite {
    fn reset(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            sqlx::raw_sql(
                "DROP TABLE IF EXISTS idem_keys; DROP TABLE IF EXISTS idem_steps; \
                 DROP TABLE IF EXISTS idem_schema_migrations; DROP TABLE IF EXISTS scale_orders; \
                 CREATE TABLE scale_orders (id INTEGER PRIMARY KEY, scope TEXT NOT NULL, \
                   body BLOB NOT NULL)",
            )
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    fn fill<'a>(pool: &'a Pool<Self>, fill: &'a Fill) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            // SQLite has no md5(): the fingerprint is the record number in
            // 64 digits, which takes the same room.
            let window = fill.window_ms;
            let rows = format!(
                "FROM (WITH RECURSIVE n(g) AS (SELECT $1 UNION ALL SELECT g + 1 FROM n \
                 WHERE g + 1 < $2) SELECT g, g % 10 = 0 AS p, \
                 g % 10 = 0 AND (g / 10) % $5 = 0 AS o, $4 + g * {window} / $3 AS t FROM n) s"
            );
            let keys = format!(
                "INSERT INTO idem_keys ({FILL_COLUMNS}) SELECT {} {rows}",
                fill_select(
                    pipes,
                    "printf('%064d', g)",
                    "randomblob(512)",
                    "randomblob(128)"
                )
            );
            let steps = format!(
                "INSERT INTO idem_steps (scope, idem_key, step, status, derived_key, output, \
                 updated_at) SELECT {} {rows} CROSS JOIN (SELECT 'submit' AS step UNION ALL \
                 SELECT 'notify') v WHERE p",
                steps_select(pipes)
            );
            let mut tx = pool.begin().await?;
            for sql in [keys, steps] {
                sqlx::query(&sql)
                    .bind(fill.from)
                    .bind(fill.to)
                    .bind(fill.total)
                    .bind(fill.start_ms)
                    .bind(fill.open_every)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    fn analyze(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move {
            sqlx::raw_sql("ANALYZE").execute(pool).await?;
            Ok(())
        })
    }

    fn records(pool: &Pool<Self>, before: i64) -> BoxFuture<'_, anyhow::Result<i64>> {
        Box::pin(async move {
            let sql = format!("SELECT COUNT(*) FROM idem_keys WHERE created_at < {before}");
            Ok(sqlx::query_scalar(&sql).fetch_one(pool).await?)
        })
    }

    fn bytes(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<(i64, i64)>> {
        Box::pin(async move {
            // Without the dbstat table: the file's pages, all counted as rows.
            let (pages, size): (i64, i64) = sqlx::query_as(
                "SELECT (SELECT page_count FROM pragma_page_count()), \
                 (SELECT page_size FROM pragma_page_size())",
            )
            .fetch_one(pool)
            .await?;
            Ok((pages * size, 0))
        })
    }

    fn churn(pool: &Pool<Self>) -> BoxFuture<'_, anyhow::Result<Vec<(&'static str, i64)>>> {
        Box::pin(async move {
            let (free, size): (i64, i64) = sqlx::query_as(
                "SELECT (SELECT freelist_count FROM pragma_freelist_count()), \
                 (SELECT page_size FROM pragma_page_size())",
            )
            .fetch_one(pool)
            .await?;
            Ok(vec![("free MB", (free * size) >> 20)])
        })
    }

    fn explain<'a>(
        pool: &'a Pool<Self>,
        sql: &'a str,
        binds: &'a [i64],
    ) -> BoxFuture<'a, anyhow::Result<String>> {
        Box::pin(async move {
            let explain = format!("EXPLAIN QUERY PLAN {sql}");
            let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(&explain);
            for b in binds {
                query = query.bind(b);
            }
            let rows = query.fetch_all(pool).await?;
            Ok(rows
                .into_iter()
                .map(|(.., detail)| detail)
                .collect::<Vec<_>>()
                .join("\n"))
        })
    }

    fn order<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            sqlx::query("INSERT INTO scale_orders (scope, body) VALUES ($1, $2)")
                .bind(scope)
                .bind(body)
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

async fn order<DB: Scale>(key: IdempotencyKey, tx: IdemTx<DB>, body: Bytes) -> Response {
    place(key, tx, body, "{\"status\":\"accepted\"}".to_owned()).await
}

/// The soak's order: its answer (and so its stored response) about 500
/// bytes, like the filled records'.
async fn receipt<DB: Scale>(key: IdempotencyKey, tx: IdemTx<DB>, body: Bytes) -> Response {
    let receipt = format!(
        "{{\"status\":\"accepted\",\"receipt\":\"{}\"}}",
        "0123456789abcdef".repeat(30)
    );
    place(key, tx, body, receipt).await
}

/// Writes the order in the request's transaction and answers `201` with
/// `answer`.
async fn place<DB: Scale>(
    key: IdempotencyKey,
    mut tx: IdemTx<DB>,
    body: Bytes,
    answer: String,
) -> Response {
    match DB::order(&mut tx, &key.scope, &body).await {
        Ok(()) => (StatusCode::CREATED, answer).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The server, with its records kept for `reaper_after` and replayed for
/// half of it.
async fn serve<DB: Scale>(
    store: Store<DB>,
    reaper_after: Duration,
) -> anyhow::Result<(SocketAddr, Idempotency<DB>)> {
    let policy = Policy::new()
        .replay_window(reaper_after / 2)
        .reaper_after(reaper_after);
    let idem = Idempotency::builder(store)
        .policy(policy)
        .scope(HeaderScope::new("x-account-id"))
        .build()?;
    let app = Router::new()
        .route(
            "/orders",
            post(order::<DB>).route_layer(idem.layer().operation("createOrder")),
        )
        .route(
            "/receipts",
            post(receipt::<DB>).route_layer(idem.layer().operation("createReceipt")),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("server stopped: {e}");
        }
    });
    Ok((addr, idem))
}

/// One keyed POST, the `i`th of its task (scoped to one of 5,000
/// accounts): how long it took to its `201`, or `None` for anything else.
async fn keyed(client: &reqwest::Client, url: &str, i: u64, key: &str) -> Option<Duration> {
    let started = Instant::now();
    let answer = client
        .post(url)
        .header("x-account-id", format!("acct_{}", i % 5000))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(r#"{"amount":1999,"currency":"EUR","customer":"cus_42"}"#)
        .send()
        .await
        .ok()
        .filter(|r| r.status() == StatusCode::CREATED)?;
    answer.bytes().await.ok()?;
    Some(started.elapsed())
}

/// Keyed requests from `concurrency` tasks until `stop` is set: each
/// request's latency, in the order they finished, and the errors.
async fn load(
    addr: SocketAddr,
    tag: String,
    concurrency: usize,
    stop: Arc<AtomicBool>,
) -> (Vec<Duration>, u64) {
    let client = reqwest::Client::new();
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let (client, stop, errors) = (client.clone(), Arc::clone(&stop), Arc::clone(&errors));
        let tag = format!("{tag}-{task}");
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                match keyed(
                    &client,
                    &format!("http://{addr}/orders"),
                    i,
                    &format!("{tag}-{i}"),
                )
                .await
                {
                    Some(took) => latencies.push(took),
                    None => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap_or_default());
    }
    (all, errors.load(Ordering::Relaxed))
}

/// p50 and p99 of `latencies`, in ms.
fn percentiles(latencies: &mut [Duration]) -> (f64, f64) {
    latencies.sort_unstable();
    let at = |p: f64| {
        let rank = ((latencies.len().saturating_sub(1)) as f64 * p).round() as usize;
        latencies
            .get(rank)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    (at(0.50), at(0.99))
}

/// The median of 7 timed runs of `run`, in ms.
async fn median_ms<F, Fut>(mut run: F) -> anyhow::Result<f64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut times = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        run().await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[3])
}

struct Figures {
    rows: i64,
    fill_s: f64,
    bytes_per_key: (f64, f64),
    keyed: (f64, f64, f64),
    statements: Vec<(&'static str, f64)>,
    reap_pass: Option<ReapPass>,
}

struct ReapPass {
    deleted: usize,
    seconds: f64,
    p99_before: f64,
    p99_during: f64,
}

struct Args {
    engine: String,
    url: Option<String>,
    rows: Vec<i64>,
    open: f64,
    concurrency: usize,
    seconds: f64,
    reap_seconds: Option<f64>,
    explain: bool,
    soak_minutes: Option<f64>,
    retention_minutes: f64,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args {
        engine: String::new(),
        url: None,
        rows: vec![0, 1_000_000, 10_000_000],
        open: 0.001,
        concurrency: 16,
        seconds: 10.0,
        reap_seconds: None,
        explain: false,
        soak_minutes: None,
        retention_minutes: 20.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--store" => args.engine = value()?,
            "--url" => args.url = Some(value()?),
            "--rows" => {
                args.rows = value()?
                    .split(',')
                    .map(|n| n.trim().replace('_', "").parse())
                    .collect::<Result<_, _>>()
                    .context("--rows takes counts separated by commas")?;
            }
            "--open" => args.open = value()?.parse().context("--open takes a fraction")?,
            "--concurrency" => args.concurrency = value()?.parse()?,
            "--seconds" => args.seconds = value()?.parse()?,
            "--reap-seconds" => args.reap_seconds = Some(value()?.parse()?),
            "--explain" => args.explain = true,
            "--soak" => args.soak_minutes = Some(value()?.parse().context("--soak takes minutes")?),
            "--retention" => {
                args.retention_minutes = value()?.parse().context("--retention takes minutes")?;
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if !(0.0..=0.1).contains(&args.open) {
        bail!("--open is a fraction of all records, at most 0.1 (the phased share)");
    }
    Ok(args)
}

/// The periodic statements, with the binds `--explain` gives them.
fn periodic(now: i64, batch: i64, hint: &str) -> Vec<(&'static str, String, Vec<i64>)> {
    let lock_cutoff = now - 30_000;
    vec![
        (
            "gauge: in flight, exhausted, stale",
            "SELECT COUNT(*) FROM idem_keys WHERE request_method IS NOT NULL \
             AND state <> 'complete' AND (locked_at IS NULL OR locked_at < $1)"
                .to_owned(),
            vec![lock_cutoff],
        ),
        (
            "completer's due scan",
            format!(
                "SELECT scope, idem_key FROM idem_keys{hint} WHERE request_method IS NOT NULL \
                 AND state = 'in_flight' AND (locked_at IS NULL OR locked_at < $1) \
                 AND (next_attempt_at IS NULL OR next_attempt_at <= $2) \
                 ORDER BY created_at LIMIT $3"
            ),
            vec![lock_cutoff, now, 100],
        ),
        (
            "reaper batch (oldest first)",
            "SELECT scope, idem_key FROM idem_keys WHERE created_at < $1 \
             ORDER BY created_at LIMIT $2"
                .to_owned(),
            vec![now - WINDOW_MS + 24 * HOUR_MS, batch],
        ),
    ]
}

/// Drops and recreates idem's tables, and fills them with `rows` records
/// claimed over the `window_ms` before `now`: the seconds it took.
async fn fill_table<DB: Scale>(
    store: &Store<DB>,
    args: &Args,
    rows: i64,
    now: i64,
    window_ms: i64,
) -> anyhow::Result<f64> {
    let pool = store.pool();
    DB::reset(pool).await?;
    store.migrate().await?;
    // One phased record in ten; of those, one in `open_every` is open.
    let open_every = if args.open > 0.0 {
        ((0.1 / args.open).round() as i64).max(1)
    } else {
        i64::MAX
    };
    let filling = Instant::now();
    let mut from = 0;
    while from < rows {
        let to = (from + CHUNK).min(rows);
        DB::fill(
            pool,
            &Fill {
                from,
                to,
                total: rows,
                start_ms: now - window_ms,
                window_ms,
                open_every,
            },
        )
        .await
        .with_context(|| format!("filling records {from}..{to}"))?;
        from = to;
        eprint!(
            "\r  filled {from} of {rows} records ({:.0} s)",
            filling.elapsed().as_secs_f64()
        );
    }
    DB::analyze(pool).await?;
    if rows > 0 {
        eprintln!();
    }
    Ok(filling.elapsed().as_secs_f64())
}

async fn measure<DB: Scale>(store: &Store<DB>, args: &Args, rows: i64) -> anyhow::Result<Figures> {
    let pool = store.pool();
    let now = now_ms();
    let start_ms = now - WINDOW_MS;
    let fill_s = fill_table(store, args, rows, now, WINDOW_MS).await?;
    let (table, index) = DB::bytes(pool).await?;
    let per = |b: i64| {
        if rows > 0 {
            b as f64 / rows as f64
        } else {
            0.0
        }
    };

    let mut statements = Vec::new();
    let lock_cutoff = now - 30_000;
    statements.push((
        "gauge (count_watched)",
        median_ms(|| async {
            let mut conn = pool.acquire().await?;
            DB::count_watched(&mut conn, store.settings(), lock_cutoff, now_ms()).await?;
            Ok(())
        })
        .await?,
    ));
    statements.push((
        "gauge (count_exhausted)",
        median_ms(|| async {
            let mut conn = pool.acquire().await?;
            DB::count_exhausted(&mut conn, store.settings()).await?;
            Ok(())
        })
        .await?,
    ));
    statements.push((
        "completer's due scan (100)",
        median_ms(|| async {
            let mut conn = pool.acquire().await?;
            DB::abandoned(&mut conn, store.settings(), lock_cutoff, now_ms(), 100).await?;
            Ok(())
        })
        .await?,
    ));
    statements.push((
        "exhausted list (100)",
        median_ms(|| async {
            let mut conn = pool.acquire().await?;
            DB::exhausted(&mut conn, store.settings(), 100).await?;
            Ok(())
        })
        .await?,
    ));
    // One batch, rolled back: the table stays as filled for what follows.
    let day_old = start_ms + 24 * HOUR_MS;
    statements.push((
        "reaper batch (1,000; MariaDB 500, SQLite 200)",
        median_ms(|| async {
            let mut tx = pool.begin().await?;
            DB::reap(&mut tx, store.settings(), 0, day_old, DB::REAP_BATCH).await?;
            tx.rollback().await?;
            Ok(())
        })
        .await?,
    ));
    statements.push((
        "idem keys stats",
        median_ms(|| async {
            DB::stats(store, day_old).await?;
            Ok(())
        })
        .await?,
    ));
    let filter = ListFilter {
        state: None,
        operation: None,
        claimed_before: None,
        limit: 50,
    };
    statements.push((
        "idem keys list",
        median_ms(|| async {
            DB::list(store, &filter).await?;
            Ok(())
        })
        .await?,
    ));
    let exhausted = ListFilter {
        state: Some(idem_runtime::server::KeyState::Exhausted),
        ..filter.clone()
    };
    statements.push((
        "idem keys list --state exhausted",
        median_ms(|| async {
            DB::list(store, &exhausted).await?;
            Ok(())
        })
        .await?,
    ));
    let probe = format!("fill-{}", rows / 2);
    let scope = format!("acct_{}", (rows / 2) % 5000);
    statements.push((
        "idem keys show",
        median_ms(|| async {
            DB::inspect(store, &scope, &probe).await?;
            Ok(())
        })
        .await?,
    ));
    if args.explain {
        for (name, sql, binds) in periodic(now, DB::REAP_BATCH, DB::OPEN_INDEX_HINT) {
            println!(
                "\n-- {name} at {rows} records\n{}",
                DB::explain(pool, &sql, &binds).await?
            );
        }
    }

    // Keyed requests alone, then beside a reaper pass over the oldest day.
    // Records kept for 48 hours: the oldest of the filled 72 are the
    // reaper's.
    let (addr, idem) = serve(store.clone(), Duration::from_secs(48 * 3600)).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let running = tokio::spawn(load(
        addr,
        format!("k{rows}"),
        args.concurrency,
        Arc::clone(&stop),
    ));
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut latencies, errors) = running.await?;
    if errors > 0 {
        bail!("{errors} keyed requests failed");
    }
    let count = latencies.len();
    let (p50, p99) = percentiles(&mut latencies);
    let keyed = (p50, p99, count as f64 / args.seconds);

    let reap_pass = if rows > 0 {
        // The yardstick: the same load for as long as the pass is given
        // (or a minute), with no pass running, just before it.
        let quiet_window = args.reap_seconds.unwrap_or(60.0);
        let stop = Arc::new(AtomicBool::new(false));
        let quiet = tokio::spawn(load(
            addr,
            format!("q{rows}"),
            args.concurrency,
            Arc::clone(&stop),
        ));
        tokio::time::sleep(Duration::from_secs_f64(quiet_window)).await;
        stop.store(true, Ordering::Relaxed);
        let (mut quiet, errors) = quiet.await?;
        if errors > 0 {
            bail!("{errors} keyed requests failed before the reaper pass");
        }
        let (_, p99_quiet) = percentiles(&mut quiet);
        let stop = Arc::new(AtomicBool::new(false));
        let running = tokio::spawn(load(
            addr,
            format!("r{rows}"),
            args.concurrency,
            Arc::clone(&stop),
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        // With `--reap-seconds`, the pass is cut off there (its batch in
        // progress rolls back), and what it deleted is counted among the
        // records claimed before the load began.
        let filled_before = now_ms();
        let before = DB::records(store.pool(), filled_before).await?;
        let started = Instant::now();
        // The pass's own length: counting what a cut-off pass deleted
        // takes a while on a big table, and is not the pass.
        let (deleted, seconds) = match args.reap_seconds {
            None => {
                let deleted = idem.reap().await?.deleted;
                (deleted, started.elapsed().as_secs_f64())
            }
            Some(limit) => {
                let _ = tokio::time::timeout(Duration::from_secs_f64(limit), idem.reap()).await;
                let seconds = started.elapsed().as_secs_f64();
                stop.store(true, Ordering::Relaxed);
                let left = DB::records(store.pool(), filled_before).await?;
                (usize::try_from(before - left)?, seconds)
            }
        };
        stop.store(true, Ordering::Relaxed);
        let (mut during, errors) = running.await?;
        if errors > 0 {
            bail!("{errors} keyed requests failed during the reaper pass");
        }
        let (_, p99_during) = percentiles(&mut during);
        Some(ReapPass {
            deleted,
            seconds,
            p99_before: p99_quiet,
            p99_during,
        })
    } else {
        None
    };
    Ok(Figures {
        rows,
        fill_s,
        bytes_per_key: (per(table), per(index)),
        keyed,
        statements,
        reap_pass,
    })
}

fn print(engine: &str, concurrency: usize, all: &[Figures]) {
    println!("\n{engine}: keyed requests from {concurrency} tasks; statements in ms (median of 7)");
    let mut header = format!("{:<34}", "records");
    for f in all {
        header.push_str(&format!(" {:>12}", f.rows));
    }
    println!("{header}");
    let row = |name: &str, values: Vec<String>| {
        let mut line = format!("{name:<34}");
        for v in values {
            line.push_str(&format!(" {v:>12}"));
        }
        println!("{line}");
    };
    row(
        "fill (s)",
        all.iter().map(|f| format!("{:.0}", f.fill_s)).collect(),
    );
    row(
        "table bytes / record",
        all.iter()
            .map(|f| format!("{:.0}", f.bytes_per_key.0))
            .collect(),
    );
    row(
        "index bytes / record",
        all.iter()
            .map(|f| format!("{:.0}", f.bytes_per_key.1))
            .collect(),
    );
    row(
        "keyed p50 (ms)",
        all.iter().map(|f| format!("{:.2}", f.keyed.0)).collect(),
    );
    row(
        "keyed p99 (ms)",
        all.iter().map(|f| format!("{:.2}", f.keyed.1)).collect(),
    );
    row(
        "keyed requests / s",
        all.iter().map(|f| format!("{:.0}", f.keyed.2)).collect(),
    );
    if let Some(first) = all.first() {
        for (i, (name, _)) in first.statements.iter().enumerate() {
            row(
                name,
                all.iter()
                    .map(|f| format!("{:.2}", f.statements.get(i).map_or(0.0, |s| s.1)))
                    .collect(),
            );
        }
    }
    let pass = |f: &Figures, get: fn(&ReapPass) -> String| {
        f.reap_pass.as_ref().map_or("-".to_owned(), get)
    };
    row(
        "reaper pass: records deleted",
        all.iter()
            .map(|f| pass(f, |p| p.deleted.to_string()))
            .collect(),
    );
    row(
        "reaper pass: records / s",
        all.iter()
            .map(|f| pass(f, |p| format!("{:.0}", p.deleted as f64 / p.seconds)))
            .collect(),
    );
    row(
        "reaper pass: keyed p99 just before",
        all.iter()
            .map(|f| pass(f, |p| format!("{:.2}", p.p99_before)))
            .collect(),
    );
    row(
        "reaper pass: keyed p99 during",
        all.iter()
            .map(|f| pass(f, |p| format!("{:.2}", p.p99_during)))
            .collect(),
    );
}

/// `--soak MINUTES`: the key table turning over. It is filled with one
/// size of records claimed over the last `--retention` minutes, the
/// server keeps records that long (the reaper and completer on their
/// 10-second timer), and keyed requests arrive at the pace that claims as
/// many records as the retention holds. Every minute it prints the
/// records, the bytes, what deleting leaves behind, and the minute's p99.
async fn soak<DB: Scale>(store: Store<DB>, args: &Args, minutes: f64) -> anyhow::Result<()> {
    let rows = args.rows.last().copied().unwrap_or(1_000_000);
    let retention = Duration::from_secs_f64(args.retention_minutes * 60.0);
    let retention_ms = i64::try_from(retention.as_millis())?;
    let rate = rows as f64 / retention.as_secs_f64();
    eprintln!(
        "{}: soak, {rows} records kept {} minutes, {rate:.0} keyed requests a second for {minutes} \
         minutes",
        args.engine, args.retention_minutes
    );
    fill_table(&store, args, rows, now_ms(), retention_ms).await?;
    let pool = store.pool().clone();
    let (addr, idem) = serve(store, retention).await?;
    let jobs = idem.spawn_background_jobs(Duration::from_secs(10));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let errors = Arc::new(AtomicU64::new(0));
    let running = tokio::spawn(paced_load(
        addr,
        args.concurrency,
        rate,
        Arc::clone(&stop),
        Arc::clone(&latencies),
        Arc::clone(&errors),
    ));
    let churn_names: Vec<&str> = DB::churn(&pool).await?.iter().map(|c| c.0).collect();
    let mut header = format!(
        "{:>6} {:>10} {:>10} {:>10}",
        "minute", "records", "table MB", "index MB"
    );
    for name in &churn_names {
        header.push_str(&format!(" {name:>13}"));
    }
    header.push_str(&format!(
        " {:>9} {:>9} {:>7}",
        "requests", "p99 (ms)", "errors"
    ));
    println!(
        "\n{}: soak, {rows} records kept {} minutes\n{header}",
        args.engine, args.retention_minutes
    );
    let started = Instant::now();
    let mut minute = 0u32;
    while started.elapsed().as_secs_f64() < minutes * 60.0 {
        minute += 1;
        let due = Duration::from_secs(u64::from(minute) * 60);
        tokio::time::sleep(due.saturating_sub(started.elapsed())).await;
        let mut those =
            std::mem::take(&mut *latencies.lock().unwrap_or_else(PoisonError::into_inner));
        let requests = those.len();
        let (_, p99) = percentiles(&mut those);
        let records = DB::records(&pool, i64::MAX).await?;
        let (table, index) = DB::bytes(&pool).await?;
        let mut line = format!(
            "{minute:>6} {records:>10} {:>10} {:>10}",
            table >> 20,
            index >> 20
        );
        for (_, value) in DB::churn(&pool).await? {
            line.push_str(&format!(" {value:>13}"));
        }
        line.push_str(&format!(
            " {requests:>9} {p99:>9.2} {:>7}",
            errors.swap(0, Ordering::Relaxed)
        ));
        println!("{line}");
    }
    stop.store(true, Ordering::Relaxed);
    running.await?;
    jobs.abort();
    Ok(())
}

/// Keyed requests at `rate` a second, spread over `concurrency` tasks,
/// until `stop` is set; each latency goes to `latencies`.
async fn paced_load(
    addr: SocketAddr,
    concurrency: usize,
    rate: f64,
    stop: Arc<AtomicBool>,
    latencies: Arc<std::sync::Mutex<Vec<Duration>>>,
    errors: Arc<AtomicU64>,
) {
    let client = reqwest::Client::new();
    let period = Duration::from_secs_f64(concurrency as f64 / rate.max(1.0));
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let (client, stop) = (client.clone(), Arc::clone(&stop));
        let (latencies, errors) = (Arc::clone(&latencies), Arc::clone(&errors));
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                i += 1;
                let url = format!("http://{addr}/receipts");
                match keyed(&client, &url, i, &format!("soak-{task}-{i}")).await {
                    Some(took) => latencies
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(took),
                    None => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

async fn run<DB: Scale>(store: Store<DB>, args: &Args) -> anyhow::Result<()> {
    if let Some(minutes) = args.soak_minutes {
        return soak(store, args, minutes).await;
    }
    let mut all = Vec::new();
    for &rows in &args.rows {
        eprintln!("{}: {rows} records", args.engine);
        all.push(measure(&store, args, rows).await?);
    }
    print(&args.engine, args.concurrency, &all);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let env = |name: &str| std::env::var(name).ok();
    match args.engine.as_str() {
        "postgres" => {
            let url = args
                .url
                .clone()
                .or_else(|| env("IDEM_TEST_DATABASE_URL"))
                .context("--store postgres needs --url or IDEM_TEST_DATABASE_URL")?;
            run(Store::connect_postgres(&url, 32).await?, &args).await
        }
        "mysql" => {
            let url = args
                .url
                .clone()
                .or_else(|| env("IDEM_TEST_MYSQL_URL"))
                .context("--store mysql needs --url or IDEM_TEST_MYSQL_URL")?;
            run(Store::connect_mysql(&url, 32).await?, &args).await
        }
        "sqlite" => {
            let dir = tempfile::tempdir()?;
            let url = format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("scale.db").display()
            );
            run(Store::open_sqlite(&url).await?, &args).await
        }
        other => bail!("--store takes sqlite, postgres or mysql, not {other:?}"),
    }
}
