#![cfg(feature = "server")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! Crash gate: a real server process runs a two-phase checkout against a fake
//! payment provider (a second HTTP server, in this process, counting calls),
//! is killed with SIGKILL between phases, and is restarted.
//!
//! Runs on SQLite, and on PostgreSQL and MariaDB when their test URLs are
//! set. The binary is its own server: run with `IDEM_CRASH_CHILD=1` it serves the
//! checkout app instead of running the scenarios (`harness = false`).

mod support_server;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::{HeaderMap, StatusCode};
use idem_runtime::server::{
    BoxFuture, ClaimAt, HeaderScope, IdemTx, Idempotency, IdempotencyKey, Operation, Policy, Reply,
    Run, StepError, Store,
};
use serde_json::{Value, json};
use sqlx::{MySql, Postgres, Sqlite};
use support_server::{TestDb, serve};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

// ---------------------------------------------------------------- the child

struct Checkout<DB> {
    provider: String,
    client: reqwest::Client,
    pause_at: Option<String>,
    _db: PhantomData<fn() -> DB>,
}

impl<DB> Checkout<DB> {
    async fn pause_if(&self, point: &str) {
        if self.pause_at.as_deref() == Some(point) {
            println!("PAUSED {point}");
            std::future::pending::<()>().await;
        }
    }

    async fn call(&self, path: &str, key: &str) -> Result<String, StepError> {
        let response = self
            .client
            .post(format!("{}{path}", self.provider))
            .header("idempotency-key", key)
            .send()
            .await
            .map_err(|e| StepError::Transient(e.to_string()))?;
        let body: Value = response
            .json()
            .await
            .map_err(|e| StepError::Transient(e.to_string()))?;
        Ok(body["id"].as_str().unwrap_or_default().to_owned())
    }
}

impl<DB: TestDb> Operation<DB> for Checkout<DB> {
    fn name(&self) -> &'static str {
        "checkout"
    }

    fn run<'a>(&'a self, run: &'a mut Run<DB>) -> BoxFuture<'a, Result<Reply, StepError>> {
        Box::pin(async move {
            let scope = run.scope().to_owned();
            let order: i64 = run
                .local("create_order", move |tx| {
                    Box::pin(async move { Ok(DB::insert_order(tx, &scope, "checkout").await?) })
                })
                .await?;
            let charge: String = run
                .foreign("charge", |call| async move {
                    let id = self.call("/charges", &call.derived_key).await?;
                    self.pause_if("charge:called").await;
                    Ok(id)
                })
                .await?;
            self.pause_if("charge").await;
            let receipt: String = run
                .foreign("send_receipt", |call| async move {
                    self.call("/receipts", &call.derived_key).await
                })
                .await?;
            Ok(Reply::json(
                StatusCode::CREATED,
                &json!({ "order": order, "charge": charge, "receipt": receipt }),
            ))
        })
    }
}

/// A single-phase order under `claim: commit`: its effect, then (when told
/// to) a pause in which the process is killed, before anything commits.
async fn order<DB: TestDb>(key: IdempotencyKey, mut tx: IdemTx<DB>, pause: bool) -> Response {
    let id = match DB::insert_order(&mut tx, &key.scope, "order").await {
        Ok(id) => id,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    if pause {
        println!("PAUSED order");
        std::future::pending::<()>().await;
    }
    (StatusCode::CREATED, json!({ "id": id }).to_string()).into_response()
}

async fn child_app<DB: TestDb>(store: Store<DB>) {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let idem = Idempotency::builder(store)
        .policy(Policy::new().lock_timeout(Duration::from_secs(1)))
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let op = Checkout::<DB> {
        provider: env("IDEM_CRASH_PROVIDER").unwrap(),
        client: reqwest::Client::new(),
        pause_at: env("IDEM_CRASH_PAUSE_AT"),
        _db: PhantomData,
    };
    let pause_order = env("IDEM_CRASH_PAUSE_AT").as_deref() == Some("order");
    let at_commit = idem
        .with_policy(Policy::new().claim_at(ClaimAt::Commit))
        .unwrap();
    let app = Router::new()
        .route("/checkout", post(idem.phased(op)))
        .route(
            "/orders",
            post(move |key: IdempotencyKey, tx: IdemTx<DB>| order(key, tx, pause_order))
                .route_layer(at_commit.layer()),
        );
    if env("IDEM_CRASH_COMPLETER").is_some() {
        idem.spawn_background_jobs(Duration::from_millis(200));
    }
    let addr = serve(app).await;
    println!("LISTENING {addr}");
    std::future::pending::<()>().await;
}

async fn child() {
    let url = std::env::var("IDEM_CRASH_DB").unwrap();
    if url.starts_with("mysql:") {
        return child_app::<MySql>(Store::connect_mysql(&url, 5).await.unwrap()).await;
    }
    match std::env::var("IDEM_CRASH_SCHEMA") {
        Ok(schema) => {
            child_app::<Postgres>(support_server::postgres_in_schema(&url, &schema, 5).await).await
        }
        Err(_) => child_app::<Sqlite>(Store::open_sqlite(&url).await.unwrap()).await,
    }
}

// ------------------------------------------------------- the fake provider

/// Counts every call per endpoint and derived key, and answers the same id
/// for the same key, as a real payment provider's idempotency does.
#[derive(Clone, Default)]
struct Provider {
    calls: Arc<Mutex<HashMap<(String, String), usize>>>,
}

impl Provider {
    fn calls(&self, endpoint: &str, key: &str) -> usize {
        let calls = self.calls.lock().unwrap();
        calls
            .get(&(endpoint.to_owned(), key.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    fn total(&self, endpoint: &str) -> usize {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|((e, _), _)| e == endpoint)
            .map(|(_, n)| n)
            .sum()
    }
}

async fn provider_call(
    endpoint: &'static str,
    provider: Provider,
    headers: HeaderMap,
) -> axum::Json<Value> {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    *provider
        .calls
        .lock()
        .unwrap()
        .entry((endpoint.to_owned(), key.clone()))
        .or_default() += 1;
    axum::Json(json!({ "id": format!("{endpoint}_{key}") }))
}

async fn start_provider() -> (Provider, String) {
    let provider = Provider::default();
    let app = Router::new()
        .route(
            "/charges",
            post(|State(p): State<Provider>, h: HeaderMap| provider_call("charge", p, h)),
        )
        .route(
            "/receipts",
            post(|State(p): State<Provider>, h: HeaderMap| provider_call("receipt", p, h)),
        )
        .with_state(provider.clone());
    let addr = serve(app).await;
    (provider, format!("http://{addr}"))
}

// ------------------------------------------------------------ the scenarios

struct Server {
    child: Child,
    addr: SocketAddr,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Server {
    async fn start(db: &Db, provider: &str, pause_at: Option<&str>, completer: bool) -> Server {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .env("IDEM_CRASH_CHILD", "1")
            .env("IDEM_CRASH_DB", &db.url)
            .env("IDEM_CRASH_PROVIDER", provider)
            .env("IDEM_CRASH_PAUSE_AT", pause_at.unwrap_or(""))
            .env("IDEM_CRASH_COMPLETER", if completer { "1" } else { "" })
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        match &db.schema {
            Some(schema) => command.env("IDEM_CRASH_SCHEMA", schema),
            None => command.env_remove("IDEM_CRASH_SCHEMA"),
        };
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("child exited before listening");
        let addr = line.strip_prefix("LISTENING ").unwrap().parse().unwrap();
        Server { child, addr, lines }
    }

    async fn wait_for(&mut self, wanted: &str) {
        let line = self.lines.next_line().await.unwrap();
        assert_eq!(line.as_deref(), Some(wanted));
    }

    /// SIGKILL: no destructor, no rollback, no goodbye.
    async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }
}

struct Db {
    url: String,
    schema: Option<String>,
}

fn checkout(addr: SocketAddr, key: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("http://{addr}/checkout"))
        .header("x-account-id", "acct")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(r#"{"amount":1999}"#)
}

/// Retries like a client honouring `409 idempotency_key_in_use` until the
/// abandoned lock expires and the retry takes over.
async fn retry_until_done(addr: SocketAddr, key: &str) -> reqwest::Response {
    for _ in 0..200 {
        let response = checkout(addr, key).send().await.unwrap();
        if response.status() != StatusCode::CONFLICT {
            return response;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the key was never released");
}

/// The provider keys of a finished checkout, read back from its answer: the
/// charge id embeds the key the charge was made with, and the receipt's key
/// names the same claim.
fn provider_keys(body: &Value) -> (String, String) {
    let charge = body["charge"].as_str().unwrap_or_default();
    let key = charge
        .strip_prefix("charge_")
        .unwrap_or_default()
        .to_owned();
    let claim = key
        .strip_suffix(":charge")
        .expect("a provider key names its step");
    assert_eq!(claim.len(), 32, "{key}");
    let receipt = format!("{claim}:send_receipt");
    (key, receipt)
}

async fn scenarios<DB: TestDb>(store: Store<DB>, db: Db) {
    let (provider, provider_url) = start_provider().await;

    // 1. Killed after the charge is recorded; the client retries on a new process.
    let mut server = Server::start(&db, &provider_url, Some("charge"), false).await;
    let addr = server.addr;
    let pending = tokio::spawn(checkout(addr, "crash-1").send());
    server.wait_for("PAUSED charge").await;
    server.kill().await;
    assert!(
        pending.await.unwrap().is_err(),
        "the killed server answered"
    );
    assert_eq!(
        DB::key_state(&store, "crash-1").await.as_deref(),
        Some("in_flight")
    );
    let server = Server::start(&db, &provider_url, None, false).await;
    let response = retry_until_done(server.addr, "crash-1").await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    let (charge_key, receipt_key) = provider_keys(&body);
    assert_eq!(
        provider.calls("charge", &charge_key),
        1,
        "the charge was repeated"
    );
    assert_eq!(provider.calls("receipt", &receipt_key), 1);
    let replay = checkout(server.addr, "crash-1").send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.json::<Value>().await.unwrap(), body);
    assert_eq!(DB::count_orders(&store).await, 1);
    server.kill().await;

    // 2. Killed between the phases; the client never comes back: the completer finishes.
    let mut server = Server::start(&db, &provider_url, Some("charge"), false).await;
    let pending = tokio::spawn(checkout(server.addr, "crash-2").send());
    server.wait_for("PAUSED charge").await;
    server.kill().await;
    let _ = pending.await;
    let server = Server::start(&db, &provider_url, None, true).await;
    let mut done = false;
    for _ in 0..300 {
        if DB::key_state(&store, "crash-2").await.as_deref() == Some("complete") {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(done, "the completer never finished the abandoned request");
    let late = checkout(server.addr, "crash-2").send().await.unwrap();
    assert_eq!(late.status(), StatusCode::CREATED);
    assert_eq!(late.headers()["idempotent-replayed"], "true");
    let (charge_key, receipt_key) = provider_keys(&late.json::<Value>().await.unwrap());
    assert_eq!(provider.calls("charge", &charge_key), 1);
    assert_eq!(provider.calls("receipt", &receipt_key), 1);
    assert_eq!(DB::count_orders(&store).await, 2);
    server.kill().await;

    // 3. Killed after the provider charged but before the charge was recorded:
    //    only the intent survives. The retry calls again with the same derived
    //    key; the provider collapses it and returns the original charge.
    let mut server = Server::start(&db, &provider_url, Some("charge:called"), false).await;
    let pending = tokio::spawn(checkout(server.addr, "crash-3").send());
    server.wait_for("PAUSED charge:called").await;
    server.kill().await;
    let _ = pending.await;
    let server = Server::start(&db, &provider_url, None, false).await;
    let response = retry_until_done(server.addr, "crash-3").await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    let (charge_key, receipt_key) = provider_keys(&body);
    assert_eq!(provider.calls("charge", &charge_key), 2);
    assert_eq!(provider.calls("receipt", &receipt_key), 1);
    assert_eq!(DB::count_orders(&store).await, 3);
    // Across all three crashes: one distinct charge and one receipt per request.
    assert_eq!(provider.total("receipt"), 3);
    server.kill().await;

    // 4. `claim: commit`, killed after the handler's write and before its
    //    commit: neither the write nor a key row survives, and the retry on a
    //    new process runs once.
    let order = |addr: SocketAddr| {
        reqwest::Client::new()
            .post(format!("http://{addr}/orders"))
            .header("x-account-id", "acct")
            .header("idempotency-key", "crash-4")
    };
    let mut server = Server::start(&db, &provider_url, Some("order"), false).await;
    let pending = tokio::spawn(order(server.addr).send());
    server.wait_for("PAUSED order").await;
    server.kill().await;
    assert!(
        pending.await.unwrap().is_err(),
        "the killed server answered"
    );
    assert_eq!(DB::key_state(&store, "crash-4").await, None);
    assert_eq!(DB::count_orders(&store).await, 3);
    let server = Server::start(&db, &provider_url, None, false).await;
    let first = order(server.addr).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(!first.headers().contains_key("idempotent-replayed"));
    let replay = order(server.addr).send().await.unwrap();
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(DB::count_orders(&store).await, 4);
    assert_eq!(
        DB::key_state(&store, "crash-4").await.as_deref(),
        Some("complete")
    );
    server.kill().await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::var_os("IDEM_CRASH_CHILD").is_some() {
        runtime.block_on(child());
        return;
    }
    runtime.block_on(async {
        let (store, dir) = support_server::sqlite().await;
        let url = format!("sqlite://{}", dir.path().join("idem.db").display());
        scenarios(store, Db { url, schema: None }).await;
        println!("crash gate on SQLite: ok");
        // Without IDEM_TEST_DATABASE_URL, postgres_with_schema says it skipped.
        if let Some((store, schema)) = support_server::postgres_with_schema("crash gate").await {
            let url = support_server::postgres_url("crash gate").unwrap();
            let db = Db {
                url,
                schema: Some(schema),
            };
            scenarios(store, db).await;
            println!("crash gate on PostgreSQL: ok");
        }
        // Without IDEM_TEST_MYSQL_URL, mysql_with_url says it skipped.
        if let Some((store, url)) = support_server::mysql_with_url("crash gate").await {
            scenarios(store, Db { url, schema: None }).await;
            println!("crash gate on MariaDB: ok");
        }
    });
}
