//! Throughput and latency of keyed POSTs through the idempotency layer versus
//! the same insert without it, over loopback, on SQLite and PostgreSQL.
//!
//! ```text
//! cargo run --release -p idem-runtime --no-default-features --features server \
//!     --example server_bench -- [--requests N] [--concurrency C] \
//!     [--recorder none|prometheus]
//! ```
//!
//! `--recorder prometheus` installs the Prometheus recorder, so every
//! request's metrics are recorded as a deployment that exports them would;
//! without it (`none`), the metrics go to the facade's no-op recorder.
//!
//! PostgreSQL runs when `IDEM_TEST_DATABASE_URL` is set. Each scenario sends
//! N requests from C concurrent tasks after a warm-up, all through one
//! keep-alive client; the server runs in the same process. Scenarios are
//! interleaved over R rounds (`--rounds`, default 3) and each reports its
//! median round.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http::StatusCode;
use idem_runtime::server::{
    Backend, BoxFuture, HeaderScope, IdemTx, Idempotency, IdempotencyKey, Store,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Pool, Postgres, Sqlite};
use tokio::sync::Mutex;

/// The business write, per engine.
trait BenchDb: Backend {
    fn create_table(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), sqlx::Error>>;
    fn noop(conn: &mut Self::Connection) -> BoxFuture<'_, Result<(), sqlx::Error>>;
    fn insert<'a>(
        conn: &'a mut Self::Connection,
        scope: &'a str,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<i64, sqlx::Error>>;
}

macro_rules! bench_db {
    ($db:ty, $ddl:expr) => {
        impl BenchDb for $db {
            fn create_table(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    sqlx::query($ddl).execute(pool).await?;
                    Ok(())
                })
            }
            fn noop(conn: &mut Self::Connection) -> BoxFuture<'_, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    sqlx::query("SELECT 1").execute(&mut *conn).await?;
                    Ok(())
                })
            }
            fn insert<'a>(
                conn: &'a mut Self::Connection,
                scope: &'a str,
                body: &'a [u8],
            ) -> BoxFuture<'a, Result<i64, sqlx::Error>> {
                Box::pin(async move {
                    sqlx::query_scalar(
                        "INSERT INTO orders (scope, body) VALUES ($1, $2) RETURNING id",
                    )
                    .bind(scope)
                    .bind(body)
                    .fetch_one(&mut *conn)
                    .await
                })
            }
        }
    };
}
bench_db!(
    Sqlite,
    "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY AUTOINCREMENT, scope TEXT NOT NULL, body BLOB NOT NULL)"
);
bench_db!(
    Postgres,
    "CREATE TABLE IF NOT EXISTS orders (id BIGSERIAL PRIMARY KEY, scope TEXT NOT NULL, body BYTEA NOT NULL)"
);

fn created(id: i64) -> Response {
    (
        StatusCode::CREATED,
        [("content-type", "application/json")],
        format!("{{\"id\":{id},\"status\":\"accepted\"}}"),
    )
        .into_response()
}

/// Baseline: the same insert in one transaction, no key handling.
async fn unkeyed<DB: BenchDb>(State(pool): State<Pool<DB>>, body: Bytes) -> Response {
    let result: Result<i64, sqlx::Error> = async {
        let mut tx = pool.begin().await?;
        let id = DB::insert(&mut tx, "bench", &body).await?;
        tx.commit().await?;
        Ok(id)
    }
    .await;
    match result {
        Ok(id) => created(id),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Calibration: the baseline plus two trivial statements, the number the
/// keyed path adds (its claim and its completion).
async fn unkeyed_plus_two<DB: BenchDb>(State(pool): State<Pool<DB>>, body: Bytes) -> Response {
    let result: Result<i64, sqlx::Error> = async {
        let mut tx = pool.begin().await?;
        DB::noop(&mut tx).await?;
        let id = DB::insert(&mut tx, "bench", &body).await?;
        DB::noop(&mut tx).await?;
        tx.commit().await?;
        Ok(id)
    }
    .await;
    match result {
        Ok(id) => created(id),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Keyed: the layer's transaction carries the claim, the insert and the completion.
async fn keyed<DB: BenchDb>(key: IdempotencyKey, mut tx: IdemTx<DB>, body: Bytes) -> Response {
    match DB::insert(&mut tx, &key.scope, &body).await {
        Ok(id) => created(id),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn serve<DB: BenchDb>(store: Store<DB>) -> anyhow::Result<SocketAddr> {
    DB::create_table(store.pool()).await?;
    store.migrate().await?;
    let idem = Idempotency::builder(store.clone())
        .scope(HeaderScope::new("x-account-id"))
        .build()?;
    let app = Router::new()
        .route("/keyed", post(keyed::<DB>).route_layer(idem.layer()))
        .route("/unkeyed", post(unkeyed::<DB>))
        .route("/calibration", post(unkeyed_plus_two::<DB>))
        .with_state(store.pool().clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("server stopped: {e}");
        }
    });
    Ok(addr)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Unkeyed,
    Keyed,
    /// Every tenth request repeats an earlier, completed key.
    KeyedWithRetries,
    /// Every request repeats a key completed in the first-executions run.
    ReplaysOnly,
    /// The baseline plus two trivial statements.
    Calibration,
}

#[derive(Default)]
struct Samples {
    first: Vec<Duration>,
    replays: Vec<Duration>,
    errors: usize,
}

struct Outcome {
    elapsed: Duration,
    samples: Samples,
}

async fn drive(
    addr: SocketAddr,
    kind: Kind,
    tag: &str,
    requests: usize,
    concurrency: usize,
) -> Outcome {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap_or_default();
    let next = Arc::new(AtomicUsize::new(0));
    let done_keys: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let body = Bytes::from_static(br#"{"amount":1999,"currency":"EUR","customer":"cus_42"}"#);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, next, done_keys, body, tag) = (
            client.clone(),
            Arc::clone(&next),
            Arc::clone(&done_keys),
            body.clone(),
            tag.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut samples = Samples::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    break;
                }
                let path = match kind {
                    Kind::Unkeyed => "unkeyed",
                    Kind::Calibration => "calibration",
                    _ => "keyed",
                };
                let mut request = client
                    .post(format!("http://{addr}/{path}"))
                    .header("x-account-id", "acct-bench")
                    .header("content-type", "application/json")
                    .body(body.clone());
                let mut retry_of = None;
                if kind == Kind::ReplaysOnly {
                    retry_of = Some(format!("{tag}-{i}"));
                }
                if matches!(
                    kind,
                    Kind::Keyed | Kind::KeyedWithRetries | Kind::ReplaysOnly
                ) {
                    if kind == Kind::KeyedWithRetries && i % 10 == 9 {
                        let keys = done_keys.lock().await;
                        if !keys.is_empty() {
                            // A spread-out pick among completed keys.
                            let pick = (i.wrapping_mul(2_654_435_761)) % keys.len();
                            retry_of = keys.get(pick).cloned();
                        }
                    }
                    let key = retry_of.clone().unwrap_or_else(|| format!("{tag}-{i}"));
                    request = request.header("idempotency-key", key);
                }
                let t = Instant::now();
                let response = request.send().await;
                let ok = match response {
                    Ok(r) => {
                        let replayed = r.headers().contains_key("idempotent-replayed");
                        let status = r.status();
                        let _ = r.bytes().await;
                        status == StatusCode::CREATED && replayed == retry_of.is_some()
                    }
                    Err(_) => false,
                };
                let latency = t.elapsed();
                if !ok {
                    samples.errors += 1;
                } else if retry_of.is_some() {
                    samples.replays.push(latency);
                } else {
                    samples.first.push(latency);
                    if kind == Kind::KeyedWithRetries {
                        done_keys.lock().await.push(format!("{tag}-{i}"));
                    }
                }
            }
            samples
        }));
    }
    let mut samples = Samples::default();
    for task in tasks {
        if let Ok(s) = task.await {
            samples.first.extend(s.first);
            samples.replays.extend(s.replays);
            samples.errors += s.errors;
        }
    }
    Outcome {
        elapsed: started.elapsed(),
        samples,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(rank).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

struct Row {
    store: &'static str,
    scenario: &'static str,
    rps: f64,
    p50: Duration,
    p99: Duration,
    errors: usize,
}

/// One measured run of one scenario.
struct Measured {
    rps: f64,
    p50: Duration,
    p99: Duration,
    errors: usize,
    /// In the 10%-retries run: first-execution and replay p50/p99, replay count.
    split: Option<(Duration, Duration, Duration, Duration, usize)>,
}

const SCENARIOS: [(Kind, &str); 5] = [
    (Kind::Unkeyed, "unkeyed baseline"),
    (Kind::Calibration, "unkeyed + 2 no-op statements"),
    (Kind::Keyed, "keyed, first executions"),
    (Kind::KeyedWithRetries, "keyed, 10% retries"),
    (Kind::ReplaysOnly, "keyed, replays only"),
];

async fn bench_store<DB: BenchDb>(
    name: &'static str,
    store: Store<DB>,
    requests: usize,
    concurrency: usize,
    rounds: usize,
    rows: &mut Vec<Row>,
    replay_rows: &mut Vec<(String, Duration, Duration, Duration, Duration)>,
) -> anyhow::Result<()> {
    let addr = serve(store).await?;
    // Scenarios are interleaved round by round, so load from elsewhere on
    // the machine spreads over all of them; each reports its median round.
    let mut measured: Vec<Vec<Measured>> = SCENARIOS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (index, (kind, scenario)) in SCENARIOS.iter().enumerate() {
            // Replays repeat the keys of this round's first-executions run.
            let tag = match kind {
                Kind::Keyed | Kind::ReplaysOnly => format!("{name}-keyed-{round}"),
                _ => format!("{name}-{}-{round}", scenario.len()),
            };
            if *kind != Kind::ReplaysOnly {
                let warm = format!("warm-{tag}");
                drive(addr, *kind, &warm, requests / 10, concurrency).await;
            }
            let outcome = drive(addr, *kind, &tag, requests, concurrency).await;
            let mut all: Vec<Duration> = outcome
                .samples
                .first
                .iter()
                .chain(&outcome.samples.replays)
                .copied()
                .collect();
            all.sort();
            let split = (*kind == Kind::KeyedWithRetries).then(|| {
                let mut first = outcome.samples.first.clone();
                let mut replays = outcome.samples.replays.clone();
                first.sort();
                replays.sort();
                (
                    percentile(&first, 0.5),
                    percentile(&first, 0.99),
                    percentile(&replays, 0.5),
                    percentile(&replays, 0.99),
                    replays.len(),
                )
            });
            if let Some(runs) = measured.get_mut(index) {
                runs.push(Measured {
                    rps: requests as f64 / outcome.elapsed.as_secs_f64(),
                    p50: percentile(&all, 0.50),
                    p99: percentile(&all, 0.99),
                    errors: outcome.samples.errors,
                    split,
                });
            }
        }
    }
    for ((_, scenario), mut runs) in SCENARIOS.iter().zip(measured) {
        runs.sort_by(|a, b| a.rps.total_cmp(&b.rps));
        let Some(median) = runs.get(runs.len() / 2) else {
            continue;
        };
        rows.push(Row {
            store: name,
            scenario,
            rps: median.rps,
            p50: median.p50,
            p99: median.p99,
            errors: runs.iter().map(|r| r.errors).sum(),
        });
        if let Some((f50, f99, r50, r99, n)) = median.split {
            replay_rows.push((format!("{name} ({n} replays)"), f50, f99, r50, r99));
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut requests = 20_000usize;
    let mut concurrency = 32usize;
    let mut pg_pool = 16u32;
    let mut rounds = 3usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--requests" => requests = args.next().context("--requests N")?.parse()?,
            "--concurrency" => concurrency = args.next().context("--concurrency C")?.parse()?,
            "--pg-pool" => pg_pool = args.next().context("--pg-pool N")?.parse()?,
            "--rounds" => rounds = args.next().context("--rounds R")?.parse()?,
            "--recorder" => match args.next().as_deref() {
                Some("none") => {}
                Some("prometheus") => {
                    metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
                    idem_runtime::metric::describe();
                }
                _ => anyhow::bail!("--recorder none|prometheus"),
            },
            other => anyhow::bail!(
                "unknown argument {other}; use --requests N --concurrency C --pg-pool N --rounds R \
                 --recorder none|prometheus"
            ),
        }
    }
    let mut rows = Vec::new();
    let mut replay_rows = Vec::new();

    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let sqlite = Store::open_sqlite(&url).await?;
    bench_store(
        "sqlite",
        sqlite,
        requests,
        concurrency,
        rounds,
        &mut rows,
        &mut replay_rows,
    )
    .await?;

    match std::env::var("IDEM_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let schema = format!("bench_{}", std::process::id());
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .connect(&url)
                .await?;
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&admin)
                .await?;
            sqlx::query(&format!("CREATE SCHEMA {schema}"))
                .execute(&admin)
                .await?;
            let options =
                PgConnectOptions::from_str(&url)?.options([("search_path", schema.as_str())]);
            let pool = PgPoolOptions::new()
                .max_connections(pg_pool)
                .connect_with(options)
                .await?;
            bench_store(
                "postgres",
                Store::new(pool),
                requests,
                concurrency,
                rounds,
                &mut rows,
                &mut replay_rows,
            )
            .await?;
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&admin)
                .await?;
        }
        _ => println!("postgres: skipped (IDEM_TEST_DATABASE_URL is not set)"),
    }

    println!(
        "\n{requests} requests per scenario, {concurrency} concurrent connections, loopback, \
         median of {rounds} interleaved rounds\n"
    );
    println!("| store | scenario | req/s | vs baseline | p50 ms | p99 ms | errors |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for row in &rows {
        let baseline = rows
            .iter()
            .find(|r| r.store == row.store && r.scenario == "unkeyed baseline")
            .map_or(row.rps, |r| r.rps);
        println!(
            "| {} | {} | {:.0} | {:.0}% | {} | {} | {} |",
            row.store,
            row.scenario,
            row.rps,
            100.0 * row.rps / baseline,
            ms(row.p50),
            ms(row.p99),
            row.errors
        );
    }
    println!(
        "\n| store (10% retries run) | first p50 ms | first p99 ms | replay p50 ms | replay p99 ms |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (name, f50, f99, r50, r99) in &replay_rows {
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(*f50),
            ms(*f99),
            ms(*r50),
            ms(*r99)
        );
    }
    Ok(())
}
