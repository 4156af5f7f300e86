//! What a keyed request costs through the generated payments server, set
//! beside a careful hand-written axum + sqlx server of the same design: an
//! atomic claim (`INSERT … ON CONFLICT DO NOTHING RETURNING`), the effect in
//! the same transaction, the response stored with it, a fingerprint mismatch
//! answered 409, the lock wait bounded by a `lock_timeout` set once per
//! connection (idem's store through `Store::connect_postgres_bounded`, to
//! the routes' duplicate wait). Every run starts both key tables empty.
//! Both serve keyed `POST /v1/charges` and unkeyed
//! `POST /v1/legacy-charges` over loopback, on SQLite and (with
//! `IDEM_TEST_DATABASE_URL`) PostgreSQL. A fifth configuration runs the
//! hand-written charge handler over the idempotency layer with the claim at
//! commit (`ClaimAt::Commit`), a sixth over the layer with the claim at the
//! start, as the generated server claims: the difference between the
//! generated server and the sixth is what the generated handler costs.
//!
//! ```text
//! cargo run --release -p payments-demo --example keyed_bench -- \
//!     [--requests N] [--concurrency C] [--rounds R] [--store sqlite|postgres] \
//!     [--only 1,2] [--recorder none|prometheus]
//! ```
//!
//! `--recorder prometheus` installs the Prometheus recorder, so every
//! request's metrics are recorded as an exporting deployment's would.
//!
//! `--store` runs one engine; `--only` runs only the numbered
//! configurations (1–6 in the order of the tables), for a profiler.
//!
//! Every round runs the configurations one after another, in an order
//! that alternates between rounds; the ratios are taken within each round
//! (paired) and reported as median and interquartile range. On PostgreSQL
//! with `pg_stat_statements` loaded, the statements each path sends are
//! counted by the database itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idem_runtime::axum::extract::State;
use idem_runtime::axum::http::HeaderMap;
use idem_runtime::axum::response::{IntoResponse, Response};
use idem_runtime::axum::{self, Router, body::Bytes, routing::post};
use idem_runtime::server::{
    Backend, ClaimAt, HeaderScope, IdemTx, Idempotency, IdempotencyKey, Policy, Store,
};
use idem_runtime::sqlx::postgres::PgPoolOptions;
use idem_runtime::sqlx::{self, Executor as _, Pool, Postgres, Sqlite};
use payments_demo::api::{Charge, ChargeCurrency, ChargeStatus, NewCharge, NewChargeCurrency};
use payments_demo::server::{POSTGRES_SCHEMA, Payments, SQLITE_SCHEMA};
use sha2::{Digest, Sha256};

/// The reference server's key table: what a careful engineer keeps.
const REFERENCE_KEYS: &str = "CREATE TABLE IF NOT EXISTS reference_keys (
    account TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    fingerprint BYTEA NOT NULL,
    status INTEGER,
    body BYTEA,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (account, idem_key)
)";

fn status(code: u16) -> idem_runtime::http::StatusCode {
    idem_runtime::http::StatusCode::from_u16(code).unwrap_or_default()
}

fn problem(code: u16, message: &str) -> Response {
    (
        status(code),
        [("content-type", "application/json")],
        format!(r#"{{"error":"{message}"}}"#),
    )
        .into_response()
}

fn created(body: Vec<u8>) -> Response {
    (status(201), [("content-type", "application/json")], body).into_response()
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Decodes and checks the body as the spec says (`amount ≥ 1`,
/// `description` ≤ 500 characters).
fn new_charge(body: &[u8]) -> Option<NewCharge> {
    idem_runtime::serde_json::from_slice::<NewCharge>(body)
        .ok()
        .filter(|c| {
            c.amount >= 1
                && c.description
                    .as_ref()
                    .is_none_or(|d| d.chars().count() <= 500)
        })
}

/// The caller and the charge, or the status and code of the refusal.
fn caller_and_charge<'h>(
    headers: &'h HeaderMap,
    body: &[u8],
) -> Result<(&'h str, NewCharge), (u16, &'static str)> {
    let account = header(headers, "x-account-id")
        .filter(|a| !a.is_empty())
        .ok_or((401, "caller_unidentified"))?;
    let charge = new_charge(body).ok_or((400, "invalid_request"))?;
    Ok((account, charge))
}

fn currency(c: NewChargeCurrency) -> (ChargeCurrency, &'static str) {
    match c {
        NewChargeCurrency::Usd => (ChargeCurrency::Usd, "usd"),
        NewChargeCurrency::Eur => (ChargeCurrency::Eur, "eur"),
        NewChargeCurrency::Gbp => (ChargeCurrency::Gbp, "gbp"),
    }
}

fn charge_json(id: i64, charge: NewCharge) -> Vec<u8> {
    let (currency, _) = currency(charge.currency);
    idem_runtime::serde_json::to_vec(&Charge {
        id,
        order_id: charge.order_id,
        amount: charge.amount,
        currency,
        status: ChargeStatus::Succeeded,
        description: charge.description,
    })
    .unwrap_or_default()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The hand-written server, once per engine.
macro_rules! reference {
    ($module:ident, $db:ty) => {
        mod $module {
            use super::*;

            type Stored = (Vec<u8>, Option<i32>, Option<Vec<u8>>);

            /// The business write: one charge row.
            pub async fn insert_charge<'e, E>(
                executor: E,
                account: &str,
                charge: &NewCharge,
            ) -> Result<i64, sqlx::Error>
            where
                E: sqlx::Executor<'e, Database = $db>,
            {
                let (_, code) = currency(charge.currency);
                sqlx::query_scalar(
                    "INSERT INTO charges (account, order_id, amount, currency, description) \
                     VALUES ($1, $2, $3, $4, $5) RETURNING id",
                )
                .bind(account)
                .bind(&charge.order_id)
                .bind(charge.amount)
                .bind(code)
                .bind(&charge.description)
                .fetch_one(executor)
                .await
            }

            pub async fn keyed(
                State(pool): State<Pool<$db>>,
                headers: HeaderMap,
                body: Bytes,
            ) -> Response {
                let (account, charge) = match caller_and_charge(&headers, &body) {
                    Ok(request) => request,
                    Err((status, code)) => return problem(status, code),
                };
                let Some(key) =
                    header(&headers, "idempotency-key").filter(|k| !k.is_empty() && k.len() <= 255)
                else {
                    return problem(400, "idempotency_key_invalid");
                };
                let fingerprint = Sha256::digest(&body).to_vec();
                let outcome: Result<Response, sqlx::Error> = async {
                    let mut tx = pool.begin().await?;
                    let claimed: Option<i32> = sqlx::query_scalar(
                        "INSERT INTO reference_keys (account, idem_key, fingerprint, created_at) \
                         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1",
                    )
                    .bind(account)
                    .bind(key)
                    .bind(&fingerprint)
                    .bind(now_ms())
                    .fetch_optional(&mut *tx)
                    .await?;
                    if claimed.is_none() {
                        let stored: Option<Stored> = sqlx::query_as(
                            "SELECT fingerprint, status, body FROM reference_keys \
                             WHERE account = $1 AND idem_key = $2",
                        )
                        .bind(account)
                        .bind(key)
                        .fetch_optional(&mut *tx)
                        .await?;
                        return Ok(match stored {
                            Some((f, _, _)) if f != fingerprint => {
                                problem(409, "idempotency_key_reused")
                            }
                            Some((_, Some(code), Some(body))) => {
                                let mut r = (
                                    status(code as u16),
                                    [("content-type", "application/json")],
                                    body,
                                )
                                    .into_response();
                                r.headers_mut().insert(
                                    "idempotent-replayed",
                                    "true".parse().unwrap_or_else(|_| unreachable!()),
                                );
                                r
                            }
                            _ => problem(409, "idempotency_key_in_use"),
                        });
                    }
                    let id = insert_charge(&mut *tx, account, &charge).await?;
                    let json = charge_json(id, charge);
                    sqlx::query(
                        "UPDATE reference_keys SET status = 201, body = $3 \
                         WHERE account = $1 AND idem_key = $2",
                    )
                    .bind(account)
                    .bind(key)
                    .bind(&json)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    Ok(created(json))
                }
                .await;
                outcome.unwrap_or_else(|e| problem(503, &e.to_string()))
            }

            pub async fn unkeyed(
                State(pool): State<Pool<$db>>,
                headers: HeaderMap,
                body: Bytes,
            ) -> Response {
                let (account, charge) = match caller_and_charge(&headers, &body) {
                    Ok(request) => request,
                    Err((status, code)) => return problem(status, code),
                };
                match insert_charge(&pool, account, &charge).await {
                    Ok(id) => created(charge_json(id, charge)),
                    Err(e) => problem(503, &e.to_string()),
                }
            }

            pub fn router(pool: Pool<$db>) -> Router {
                Router::new()
                    .route("/v1/charges", post(keyed))
                    .route("/v1/legacy-charges", post(unkeyed))
                    .with_state(pool)
            }
        }
    };
}

reference!(reference_sqlite, Sqlite);
reference!(reference_postgres, Postgres);

async fn listen(app: Router) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// The same charge written over the idempotency layer by hand: with the
/// claim at commit, and with the claim at the start as the generated server
/// makes it, which separates the layer's cost from the generated handler's.
macro_rules! charge_over_layer {
    ($name:ident, $db:ty, $insert:path) => {
        async fn $name(key: IdempotencyKey, mut tx: IdemTx<$db>, body: Bytes) -> Response {
            let Some(charge) = new_charge(&body) else {
                return problem(400, "invalid_request");
            };
            match $insert(&mut *tx, &key.scope, &charge).await {
                Ok(id) => created(charge_json(id, charge)),
                Err(e) => problem(503, &e.to_string()),
            }
        }
    };
}

charge_over_layer!(layered_sqlite, Sqlite, reference_sqlite::insert_charge);
charge_over_layer!(
    layered_postgres,
    Postgres,
    reference_postgres::insert_charge
);

/// The servers under test.
#[derive(Clone, Copy)]
struct Servers {
    /// The generated payments server.
    idem: SocketAddr,
    /// The hand-written reference.
    reference: SocketAddr,
    /// The layer with `claim: commit` over the same charge.
    commit: SocketAddr,
    /// The layer with the claim at the start over the same charge.
    layered: SocketAddr,
}

/// The generated server, then the hand-written charge over the layer with
/// the claim at commit and at the start, over `store`.
async fn idem_servers<DB: Backend>(
    store: Store<DB>,
    charge_route: Router,
) -> anyhow::Result<(SocketAddr, SocketAddr, SocketAddr)>
where
    Payments<DB>: payments_demo::api::Api<DB>,
{
    store.migrate().await?;
    let idem = Idempotency::builder(store.clone())
        .scope(HeaderScope::new("x-account-id"))
        .build()?;
    let generated = listen(payments_demo::api::router(
        Payments::new(store.pool().clone(), None),
        &idem,
    )?)
    .await?;
    let at_commit = idem.with_policy(Policy::new().claim_at(ClaimAt::Commit))?;
    let commit = listen(charge_route.clone().route_layer(at_commit.layer())).await?;
    let layered =
        listen(charge_route.route_layer(idem.with_policy(Policy::new())?.layer())).await?;
    Ok((generated, commit, layered))
}

#[derive(Clone, Copy)]
enum Config {
    IdemKeyed,
    ReferenceKeyed,
    IdemUnkeyed,
    ReferenceUnkeyed,
    IdemCommit,
    IdemLayered,
}

const CONFIGS: [(Config, &str); 6] = [
    (Config::IdemKeyed, "idem, keyed"),
    (Config::ReferenceKeyed, "hand-written, keyed"),
    (Config::IdemUnkeyed, "idem, unkeyed"),
    (Config::ReferenceUnkeyed, "hand-written, unkeyed"),
    (Config::IdemCommit, "idem layer, keyed, claim at commit"),
    (
        Config::IdemLayered,
        "idem layer, keyed, hand-written handler",
    ),
];

impl Config {
    fn path(self) -> &'static str {
        match self {
            Config::IdemUnkeyed | Config::ReferenceUnkeyed => "/v1/legacy-charges",
            _ => "/v1/charges",
        }
    }

    fn keyed(self) -> bool {
        !matches!(self, Config::IdemUnkeyed | Config::ReferenceUnkeyed)
    }

    fn server(self, servers: Servers) -> SocketAddr {
        match self {
            Config::IdemKeyed | Config::IdemUnkeyed => servers.idem,
            Config::ReferenceKeyed | Config::ReferenceUnkeyed => servers.reference,
            Config::IdemCommit => servers.commit,
            Config::IdemLayered => servers.layered,
        }
    }
}

/// Requests per second of one run; failed requests are counted, not timed.
async fn drive(
    addr: SocketAddr,
    config: Config,
    tag: &str,
    requests: usize,
    concurrency: usize,
) -> (f64, usize) {
    let client = idem_runtime::reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap_or_default();
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let url = format!("http://{addr}{}", config.path());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, next, errors, url, tag) = (
            client.clone(),
            Arc::clone(&next),
            Arc::clone(&errors),
            url.clone(),
            tag.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= requests {
                    break;
                }
                let body = format!(r#"{{"order_id":"o-{n}","amount":1999,"currency":"usd"}}"#);
                let mut request = client
                    .post(&url)
                    .header("x-account-id", "acct-bench")
                    .header("content-type", "application/json")
                    .body(body);
                if config.keyed() {
                    request = request.header("idempotency-key", format!("{tag}-{n}"));
                }
                // Every key is new: a replay would be measuring the wrong path.
                match request.send().await {
                    Ok(r)
                        if r.status().as_u16() == 201
                            && !r.headers().contains_key("idempotent-replayed") =>
                    {
                        let _ = r.bytes().await;
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    (
        requests as f64 / started.elapsed().as_secs_f64(),
        errors.load(Ordering::Relaxed),
    )
}

/// `(q1, median, q3)` of `values`.
fn quartiles(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    (at(0.25), at(0.5), at(0.75))
}

async fn compare(
    store: &str,
    servers: Servers,
    requests: usize,
    concurrency: usize,
    rounds: usize,
) {
    let run = format!("{:x}", now_ms());
    for (i, (config, _)) in CONFIGS.iter().enumerate() {
        if !only().contains(&i) {
            continue;
        }
        let config = *config;
        drive(
            config.server(servers),
            config,
            &format!("warm-{run}-{i}"),
            requests / 10,
            concurrency,
        )
        .await;
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); CONFIGS.len()];
    let mut errors = [0usize; CONFIGS.len()];
    let chosen = only();
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..CONFIGS.len()).filter(|i| chosen.contains(i)).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (config, _) = CONFIGS[i];
            let (rate, failed) = drive(
                config.server(servers),
                config,
                &format!("{run}-{i}-{round}"),
                requests,
                concurrency,
            )
            .await;
            rates[i].push(rate);
            errors[i] += failed;
        }
    }
    println!("\n{store}");
    println!("| configuration | median req/s | errors |");
    println!("| --- | ---: | ---: |");
    for (i, (_, label)) in CONFIGS.iter().enumerate() {
        if rates[i].is_empty() {
            continue;
        }
        let (_, median, _) = quartiles(&rates[i]);
        println!("| {label} | {median:.0} | {} |", errors[i]);
    }
    let ratio = |a: usize, b: usize| -> Vec<f64> {
        rates[a].iter().zip(&rates[b]).map(|(x, y)| x / y).collect()
    };
    println!("\n| paired ratio | median | interquartile range |");
    println!("| --- | ---: | --- |");
    for (label, values) in [
        ("idem keyed / hand-written keyed", ratio(0, 1)),
        ("idem unkeyed / hand-written unkeyed", ratio(2, 3)),
        ("idem keyed / idem unkeyed", ratio(0, 2)),
        ("hand-written keyed / hand-written unkeyed", ratio(1, 3)),
        ("idem claim at commit / hand-written keyed", ratio(4, 1)),
        ("idem claim at commit / idem unkeyed", ratio(4, 2)),
        (
            "idem layer, hand-written handler / hand-written keyed",
            ratio(5, 1),
        ),
        ("idem keyed / idem layer, hand-written handler", ratio(0, 5)),
    ] {
        if values.is_empty() {
            continue;
        }
        let (q1, median, q3) = quartiles(&values);
        println!("| {label} | {median:.3} | {q1:.3}–{q3:.3} |");
    }
}

/// Statements per request on each path, from `pg_stat_statements`.
async fn statement_counts(
    admin: &Pool<Postgres>,
    servers: Servers,
    concurrency: usize,
) -> anyhow::Result<()> {
    let loaded = admin
        .execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .is_ok()
        && sqlx::query("SELECT 1 FROM pg_stat_statements LIMIT 1")
            .execute(admin)
            .await
            .is_ok();
    if !loaded {
        println!(
            "\nstatement counts: skipped (start PostgreSQL with \
             shared_preload_libraries=pg_stat_statements to see them)"
        );
        return Ok(());
    }
    let requests = 200usize;
    println!("\n| path (PostgreSQL, pg_stat_statements) | statements per request |");
    println!("| --- | --- |");
    let run = format!("count-{:x}", now_ms());
    for (i, (config, label)) in CONFIGS.into_iter().enumerate() {
        sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(admin)
            .await?;
        let tag = format!("{run}-{i}");
        drive(config.server(servers), config, &tag, requests, concurrency).await;
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT query, calls FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
             WHERE d.datname = current_database() AND query NOT LIKE '%pg_stat_statements%' \
             ORDER BY calls DESC, query",
        )
        .fetch_all(admin)
        .await?;
        let total: i64 = rows.iter().map(|(_, c)| c).sum();
        let each: Vec<String> = rows
            .iter()
            .filter(|(_, calls)| *calls as usize >= requests / 2)
            .map(|(q, calls)| {
                let verb = q
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_ascii_uppercase();
                format!("{verb} ×{:.2}", *calls as f64 / requests as f64)
            })
            .collect();
        println!(
            "| {label} | {:.2}: {} |",
            total as f64 / requests as f64,
            each.join(", ")
        );
    }
    Ok(())
}

fn text_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn arg(name: &str, default: usize) -> usize {
    text_arg(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The configurations `--only` names (1-based), or all of them.
fn only() -> Vec<usize> {
    match text_arg("--only") {
        Some(list) => list
            .split(',')
            .filter_map(|n| n.trim().parse::<usize>().ok())
            .filter(|n| (1..=CONFIGS.len()).contains(n))
            .map(|n| n - 1)
            .collect(),
        None => (0..CONFIGS.len()).collect(),
    }
}

/// Whether `--store` leaves `engine` in.
fn runs(engine: &str) -> bool {
    text_arg("--store").is_none_or(|s| s == engine)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (requests, concurrency, rounds) = (
        arg("--requests", 4000),
        arg("--concurrency", 16),
        arg("--rounds", 9),
    );
    let recorder = text_arg("--recorder").unwrap_or_else(|| "none".to_owned());
    match recorder.as_str() {
        "none" => {}
        "prometheus" => {
            metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
            idem_runtime::metric::describe();
        }
        other => anyhow::bail!("--recorder {other}: use none or prometheus"),
    }
    println!(
        "{requests} requests per run, {concurrency} connections, a unique key per request, \
         {rounds} paired rounds, loopback, metrics recorder: {recorder}"
    );
    let dir = tempfile::tempdir()?;
    let sqlite_url = |name: &str| format!("sqlite://{}?mode=rwc", dir.path().join(name).display());
    let store = Store::open_sqlite(&sqlite_url("idem.db")).await?;
    sqlx::query(SQLITE_SCHEMA).execute(store.pool()).await?;
    let reference = Store::open_sqlite(&sqlite_url("reference.db")).await?;
    let pool = reference.pool().clone();
    sqlx::query(SQLITE_SCHEMA).execute(&pool).await?;
    sqlx::query(REFERENCE_KEYS).execute(&pool).await?;
    let (idem, commit, layered) = idem_servers(
        store,
        Router::new().route("/v1/charges", post(layered_sqlite)),
    )
    .await?;
    let servers = Servers {
        idem,
        reference: listen(reference_sqlite::router(pool)).await?,
        commit,
        layered,
    };
    if runs("sqlite") {
        compare("SQLite", servers, requests, concurrency, rounds).await;
    }

    match std::env::var("IDEM_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() && runs("postgres") => {
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .connect(&url)
                .await?;
            // Both key tables start empty, so neither side pays for an
            // index grown by earlier runs.
            for table in [
                "charges",
                "reference_keys",
                "idem_steps",
                "idem_keys",
                "idem_schema_migrations",
            ] {
                admin
                    .execute(format!("DROP TABLE IF EXISTS {table}").as_str())
                    .await?;
            }
            admin.execute(POSTGRES_SCHEMA).await?;
            admin.execute(REFERENCE_KEYS).await?;
            // Both bound a claim's wait for a duplicate once per connection,
            // at connect: idem to the routes' duplicate wait (2s).
            let store = Store::connect_postgres_bounded(&url, 16, Duration::from_secs(2)).await?;
            let pool = PgPoolOptions::new()
                .max_connections(16)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        conn.execute("SET lock_timeout = '2s'").await?;
                        Ok(())
                    })
                })
                .connect(&url)
                .await?;
            let (idem, commit, layered) = idem_servers(
                store,
                Router::new().route("/v1/charges", post(layered_postgres)),
            )
            .await?;
            let servers = Servers {
                idem,
                reference: listen(reference_postgres::router(pool)).await?,
                commit,
                layered,
            };
            compare("PostgreSQL", servers, requests, concurrency, rounds).await;
            if text_arg("--only").is_none() {
                statement_counts(&admin, servers, concurrency).await?;
            }
        }
        _ if !runs("postgres") => {}
        _ => println!("\nPostgreSQL skipped: IDEM_TEST_DATABASE_URL is not set"),
    }
    Ok(())
}
