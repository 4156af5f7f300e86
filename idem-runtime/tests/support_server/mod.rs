//! Shared helpers for the server tests: a store per backend (SQLite in a
//! temporary file, PostgreSQL in a fresh schema when `IDEM_TEST_DATABASE_URL`
//! is set), a small business table, and an axum app served on loopback.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::str::FromStr;

use axum::Router;
use idem_runtime::server::{Backend, BoxFuture, Store};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{MySql, Postgres, Sqlite};

/// Business-table access written once per engine.
pub trait TestDb: Backend {
    fn create_tables(store: &Store<Self>) -> BoxFuture<'_, ()>;
    fn insert_order<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        body: &'a str,
    ) -> BoxFuture<'a, Result<i64, sqlx::Error>>;
    fn count_orders(store: &Store<Self>) -> BoxFuture<'_, i64>;
    fn count_keys(store: &Store<Self>) -> BoxFuture<'_, i64>;
    fn key_state<'a>(store: &'a Store<Self>, key: &'a str) -> BoxFuture<'a, Option<String>>;
    /// Makes every move of a key named `fault…` to complete fail in the database.
    fn install_fault(store: &Store<Self>) -> BoxFuture<'_, ()>;
    fn remove_fault(store: &Store<Self>) -> BoxFuture<'_, ()>;
    /// Moves every timestamp of `key` back by `ms`, as if time had passed.
    fn age_key<'a>(store: &'a Store<Self>, key: &'a str, ms: i64) -> BoxFuture<'a, ()>;
}

macro_rules! impl_test_db {
    ($db:ty, $ddl:expr, $fault:expr, $unfault:expr, $insert:expr, $state:expr, $age:expr) => {
        impl TestDb for $db {
            fn install_fault(store: &Store<Self>) -> BoxFuture<'_, ()> {
                Box::pin(async move {
                    for sql in $fault {
                        sqlx::raw_sql(sql).execute(store.pool()).await.unwrap();
                    }
                })
            }
            fn remove_fault(store: &Store<Self>) -> BoxFuture<'_, ()> {
                Box::pin(async move {
                    sqlx::raw_sql($unfault).execute(store.pool()).await.unwrap();
                })
            }
            fn create_tables(store: &Store<Self>) -> BoxFuture<'_, ()> {
                Box::pin(async move {
                    sqlx::raw_sql($ddl).execute(store.pool()).await.unwrap();
                })
            }
            fn insert_order<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                body: &'a str,
            ) -> BoxFuture<'a, Result<i64, sqlx::Error>> {
                Box::pin(async move {
                    sqlx::query_scalar($insert)
                        .bind(scope)
                        .bind(body)
                        .fetch_one(&mut *conn)
                        .await
                })
            }
            fn count_orders(store: &Store<Self>) -> BoxFuture<'_, i64> {
                Box::pin(async move {
                    sqlx::query_scalar("SELECT COUNT(*) FROM orders")
                        .fetch_one(store.pool())
                        .await
                        .unwrap()
                })
            }
            fn count_keys(store: &Store<Self>) -> BoxFuture<'_, i64> {
                Box::pin(async move {
                    sqlx::query_scalar("SELECT COUNT(*) FROM idem_keys")
                        .fetch_one(store.pool())
                        .await
                        .unwrap()
                })
            }
            fn key_state<'a>(
                store: &'a Store<Self>,
                key: &'a str,
            ) -> BoxFuture<'a, Option<String>> {
                Box::pin(async move {
                    sqlx::query_scalar($state)
                        .bind(key)
                        .fetch_optional(store.pool())
                        .await
                        .unwrap()
                })
            }
            fn age_key<'a>(store: &'a Store<Self>, key: &'a str, ms: i64) -> BoxFuture<'a, ()> {
                Box::pin(async move {
                    sqlx::query($age)
                        .bind(ms)
                        .bind(ms)
                        .bind(ms)
                        .bind(key)
                        .execute(store.pool())
                        .await
                        .unwrap();
                })
            }
        }
    };
}

impl_test_db!(
    Sqlite,
    "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, body TEXT NOT NULL)",
    ["CREATE TRIGGER idem_fault BEFORE UPDATE ON idem_keys \
         WHEN NEW.state = 'complete' AND NEW.idem_key LIKE 'fault%' \
         BEGIN SELECT RAISE(ABORT, 'injected fault'); END"],
    "DROP TRIGGER idem_fault",
    INSERT_ORDER,
    KEY_STATE,
    AGE_KEY
);
impl_test_db!(
    Postgres,
    "CREATE TABLE IF NOT EXISTS orders (id BIGSERIAL PRIMARY KEY, scope TEXT NOT NULL, body TEXT NOT NULL)",
    [
        "CREATE FUNCTION idem_fault() RETURNS trigger AS $$ BEGIN \
         IF NEW.state = 'complete' AND NEW.idem_key LIKE 'fault%' THEN \
         RAISE EXCEPTION 'injected fault'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER idem_fault BEFORE UPDATE ON idem_keys FOR EACH ROW EXECUTE FUNCTION idem_fault()"
    ],
    "DROP TRIGGER idem_fault ON idem_keys",
    INSERT_ORDER,
    KEY_STATE,
    AGE_KEY
);
impl_test_db!(
    MySql,
    "CREATE TABLE IF NOT EXISTS orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, scope TEXT NOT NULL, body TEXT NOT NULL)",
    [
        "CREATE TRIGGER idem_fault BEFORE UPDATE ON idem_keys FOR EACH ROW BEGIN \
         IF NEW.state = 'complete' AND NEW.idem_key LIKE 'fault%' THEN \
         SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected fault'; END IF; END"
    ],
    "DROP TRIGGER idem_fault",
    "INSERT INTO orders (scope, body) VALUES (?, ?) RETURNING id",
    "SELECT state FROM idem_keys WHERE idem_key = ?",
    "UPDATE idem_keys SET created_at = created_at - ?, locked_at = locked_at - ?, \
     next_attempt_at = next_attempt_at - ? WHERE idem_key = ?"
);

const INSERT_ORDER: &str = "INSERT INTO orders (scope, body) VALUES ($1, $2) RETURNING id";
const KEY_STATE: &str = "SELECT state FROM idem_keys WHERE idem_key = $1";
const AGE_KEY: &str = "UPDATE idem_keys SET created_at = created_at - $1, \
     locked_at = locked_at - $2, next_attempt_at = next_attempt_at - $3 WHERE idem_key = $4";

/// The MariaDB (or MySQL) URL, or `None` (and a note on stderr) when tests
/// must skip.
pub fn mysql_url(test: &str) -> Option<String> {
    match std::env::var("IDEM_TEST_MYSQL_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped {test} on MariaDB: IDEM_TEST_MYSQL_URL is not set"
            );
            None
        }
    }
}

/// A migrated MariaDB store in a fresh database of the test server.
pub async fn mysql(test: &str) -> Option<Store<MySql>> {
    mysql_with_url(test).await.map(|(store, _)| store)
}

/// Like [`mysql`], also giving the fresh database's URL (for another
/// process to join).
pub async fn mysql_with_url(test: &str) -> Option<(Store<MySql>, String)> {
    let url = mysql_url(test)?;
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let server = url
        .rsplit_once('/')
        .map_or(url.as_str(), |(server, _)| server);
    let url = format!("{server}/{name}");
    let store = Store::connect_mysql(&url, 20).await.unwrap();
    store.migrate().await.unwrap();
    MySql::create_tables(&store).await;
    Some((store, url))
}

/// A migrated SQLite store in a temporary directory (kept alive by the guard).
pub async fn sqlite() -> (Store<Sqlite>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("idem.db").display());
    let store = Store::open_sqlite(&url).await.unwrap();
    store.migrate().await.unwrap();
    Sqlite::create_tables(&store).await;
    (store, dir)
}

/// The PostgreSQL URL, or `None` (and a note on stderr) when tests must skip.
pub fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("IDEM_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            // Written straight to the stream: the test harness captures
            // `eprintln!`, and a skip must be visible in every run.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped {test} on PostgreSQL: IDEM_TEST_DATABASE_URL is not set"
            );
            None
        }
    }
}

/// A migrated PostgreSQL store in a fresh schema of the test database.
pub async fn postgres(test: &str) -> Option<Store<Postgres>> {
    postgres_with_schema(test).await.map(|(store, _)| store)
}

/// A pool on `url` whose connections resolve names in `schema`.
pub async fn postgres_in_schema(url: &str, schema: &str, max: u32) -> Store<Postgres> {
    let options = PgConnectOptions::from_str(url)
        .unwrap()
        .options([("search_path", schema)]);
    let pool = PgPoolOptions::new()
        .max_connections(max)
        .connect_with(options)
        .await
        .unwrap();
    Store::new(pool)
}

/// Like [`postgres`], also naming the schema (for another process to join).
pub async fn postgres_with_schema(test: &str) -> Option<(Store<Postgres>, String)> {
    let url = postgres_url(test)?;
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let store = postgres_in_schema(&url, &schema, 20).await;
    store.migrate().await.unwrap();
    Postgres::create_tables(&store).await;
    Some((store, schema))
}

/// Like [`postgres`], its connections opened by
/// `Store::connect_postgres_bounded` with `wait` as their `lock_timeout`.
pub async fn postgres_bounded(test: &str, wait: std::time::Duration) -> Option<Store<Postgres>> {
    let (_, schema) = postgres_with_schema(test).await?;
    let url = postgres_url(test)?;
    let joint = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{joint}options[search_path]={schema}");
    Some(
        Store::connect_postgres_bounded(&url, 20, wait)
            .await
            .unwrap(),
    )
}

/// Serves `app` on an ephemeral loopback port.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

/// Runs a generic test body against SQLite and (when configured) PostgreSQL and MariaDB.
#[macro_export]
macro_rules! on_every_backend {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let (store, _dir) = $crate::support_server::sqlite().await;
                super::$name(store).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                if let Some(store) =
                    $crate::support_server::postgres(concat!(stringify!($name))).await
                {
                    super::$name(store).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn mariadb() {
                if let Some(store) = $crate::support_server::mysql(stringify!($name)).await {
                    super::$name(store).await;
                }
            }
        }
    };
}
