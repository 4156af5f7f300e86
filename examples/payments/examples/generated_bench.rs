//! What the generated server costs on top of the hand-wired layer: keyed
//! `POST /v1/charges` through the generated router (typed input decoding,
//! the typed reply, per-route policy) against a handler written by hand
//! over `IdemTx` doing the same insert and the same JSON, in one process
//! over loopback, on SQLite and (with `IDEM_TEST_DATABASE_URL`) PostgreSQL.
//!
//! ```text
//! cargo run --release -p payments-demo --example generated_bench -- [--requests N] [--concurrency C] [--rounds R]
//! ```
//!
//! Rounds interleave the two paths; each reports its median round.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idem_runtime::axum::{self, Router, body::Bytes, response::IntoResponse, routing::post};
use idem_runtime::server::{Backend, HeaderScope, IdemTx, Idempotency, IdempotencyKey, Store};
use idem_runtime::sqlx::{self, Postgres, Sqlite};
use payments_demo::api::{Charge, ChargeCurrency, ChargeStatus, NewCharge, NewChargeCurrency};
use payments_demo::server::{POSTGRES_SCHEMA, Payments, SQLITE_SCHEMA};

macro_rules! hand_wired {
    ($name:ident, $db:ty) => {
        /// The same effect and the same reply, written by hand.
        async fn $name(
            key: IdempotencyKey,
            mut tx: IdemTx<$db>,
            body: Bytes,
        ) -> axum::response::Response {
            let Ok(charge) = idem_runtime::serde_json::from_slice::<NewCharge>(&body) else {
                return (http_status(400), "bad body").into_response();
            };
            let currency = match charge.currency {
                NewChargeCurrency::Usd => "usd",
                NewChargeCurrency::Eur => "eur",
                NewChargeCurrency::Gbp => "gbp",
            };
            let id: Result<i64, sqlx::Error> = sqlx::query_scalar(
                "INSERT INTO charges (account, order_id, amount, currency, description) \
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(&key.scope)
            .bind(&charge.order_id)
            .bind(charge.amount)
            .bind(currency)
            .bind(&charge.description)
            .fetch_one(&mut *tx)
            .await;
            match id {
                Ok(id) => (
                    http_status(201),
                    axum::Json(Charge {
                        id,
                        order_id: charge.order_id,
                        amount: charge.amount,
                        currency: ChargeCurrency::Usd,
                        status: ChargeStatus::Succeeded,
                        description: charge.description,
                    }),
                )
                    .into_response(),
                Err(e) => (http_status(500), e.to_string()).into_response(),
            }
        }
    };
}

fn http_status(code: u16) -> idem_runtime::http::StatusCode {
    idem_runtime::http::StatusCode::from_u16(code).unwrap_or_default()
}

hand_wired!(hand_sqlite, Sqlite);
hand_wired!(hand_postgres, Postgres);

async fn listen(app: Router) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// The generated router and the hand-wired route, over one store.
async fn servers<DB: Backend>(
    store: Store<DB>,
    hand: Router,
) -> anyhow::Result<(SocketAddr, SocketAddr)>
where
    Payments<DB>: payments_demo::api::Api<DB>,
{
    store.migrate().await?;
    let idem = Idempotency::builder(store.clone())
        .scope(HeaderScope::new("x-account-id"))
        .build()?;
    let generated = payments_demo::api::router(Payments::new(store.pool().clone(), None), &idem)?;
    let hand = hand.route_layer(idem.layer());
    Ok((listen(generated).await?, listen(hand).await?))
}

struct Round {
    per_second: f64,
    p50: Duration,
    p99: Duration,
    errors: usize,
}

async fn drive(
    addr: SocketAddr,
    path: &str,
    tag: &str,
    requests: usize,
    concurrency: usize,
) -> Round {
    let client = idem_runtime::reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap_or_default();
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let url = format!("http://{addr}{path}");
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
            let mut latencies = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= requests {
                    break latencies;
                }
                let body = format!(r#"{{"order_id":"o-{n}","amount":1999,"currency":"usd"}}"#);
                let t = Instant::now();
                let sent = client
                    .post(&url)
                    .header("x-account-id", "acct-bench")
                    .header("idempotency-key", format!("{tag}-{n}"))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().as_u16() == 201 => {
                        let _ = r.bytes().await;
                        latencies.push(t.elapsed());
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap_or_default());
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    let at = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Round {
        per_second: requests as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        errors: errors.load(Ordering::Relaxed),
    }
}

fn median(mut rounds: Vec<Round>) -> Round {
    rounds.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    let mid = rounds.len() / 2;
    rounds.swap_remove(mid)
}

async fn compare(
    store: &str,
    (generated, hand): (SocketAddr, SocketAddr),
    requests: usize,
    concurrency: usize,
    rounds: usize,
) {
    let run = uuid();
    // Warm-up.
    drive(
        generated,
        "/v1/charges",
        &format!("warm-g-{run}"),
        200,
        concurrency,
    )
    .await;
    drive(
        hand,
        "/v1/charges",
        &format!("warm-h-{run}"),
        200,
        concurrency,
    )
    .await;
    let (mut g, mut h) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        g.push(
            drive(
                generated,
                "/v1/charges",
                &format!("g-{run}-{round}"),
                requests,
                concurrency,
            )
            .await,
        );
        h.push(
            drive(
                hand,
                "/v1/charges",
                &format!("h-{run}-{round}"),
                requests,
                concurrency,
            )
            .await,
        );
    }
    for (label, r) in [
        ("hand-wired layer", median(h)),
        ("generated router", median(g)),
    ] {
        println!(
            "{store:<11} {label:<17} {:>9.0} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}",
            r.per_second,
            r.p50.as_secs_f64() * 1e3,
            r.p99.as_secs_f64() * 1e3,
            r.errors
        );
    }
}

fn uuid() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    )
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (requests, concurrency, rounds) = (
        arg("--requests", 4000),
        arg("--concurrency", 16),
        arg("--rounds", 5),
    );
    println!(
        "keyed POST /v1/charges, {requests} requests x {rounds} rounds, {concurrency} concurrent, median round"
    );
    let dir = tempfile::tempdir()?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("bench.db").display()
    );
    let store = Store::open_sqlite(&url).await?;
    sqlx::query(SQLITE_SCHEMA).execute(store.pool()).await?;
    let hand = Router::new().route("/v1/charges", post(hand_sqlite));
    compare(
        "SQLite",
        servers(store, hand).await?,
        requests,
        concurrency,
        rounds,
    )
    .await;
    match std::env::var("IDEM_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => {
            let store = Store::connect_postgres(&url, 16).await?;
            sqlx::query(POSTGRES_SCHEMA).execute(store.pool()).await?;
            let hand = Router::new().route("/v1/charges", post(hand_postgres));
            compare(
                "PostgreSQL",
                servers(store, hand).await?,
                requests,
                concurrency,
                rounds,
            )
            .await;
        }
        _ => println!("PostgreSQL skipped: IDEM_TEST_DATABASE_URL is not set"),
    }
    Ok(())
}
