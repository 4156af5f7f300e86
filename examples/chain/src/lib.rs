//! Retry amplification across a call chain, measured in real processes.
//!
//! `fixtures/chain.yaml` has one keyed operation, `doWork`. Each layer is a
//! process serving the generated router; a middle layer's handler calls the
//! next layer through the generated client, the bottom one writes to a
//! database that is down and answers `503`. A driver sends user requests to
//! the top and counts the calls that reached the bottom, in three
//! configurations:
//!
//! - [`Mode::Idem`]: idem's defaults. The driver's client retries (4
//!   attempts, shared budget); a layer's client is an inner hop: it inherits
//!   the inbound deadline and makes one attempt with a key derived from the
//!   inbound one.
//! - [`Mode::Retry`]: every layer retries (4 attempts) with no budget, the
//!   way per-call SDK retries behave: the inner call runs in a task spawned
//!   without the request's context, so it knows nothing of its layer.
//! - [`Mode::Budget`]: the same with a retry budget of about 10% per layer.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use idem_runtime::client::{Backoff, BudgetConfig, RetryBudget, RetryClient, RetryPolicy};
use idem_runtime::server::support::Context;
use idem_runtime::server::{Fault, IdemTx};
use idem_runtime::sqlx::{MySql, Sqlite};

/// The server, client and types generated from `fixtures/chain.yaml`.
pub mod api {
    idem_runtime::include_api!("chain");
}

use api::{
    Api, DoWorkInput, DoWorkParams, DoWorkReply, DoWorkReplyServiceUnavailable, Problem, SlowReply,
    Stats, StatsReply, Work,
};

/// How the clients of the chain retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// idem's defaults: the top retries within a budget, inner hops do not.
    Idem,
    /// Every layer retries 4 times, no budget.
    Retry,
    /// Every layer retries 4 times within a budget of about 10%.
    Budget,
}

/// The retry client of a layer in `mode`; `budget_retries` sizes the
/// [`Mode::Budget`] bucket.
pub fn retry_client(mode: Mode, budget_retries: u32) -> RetryClient {
    let http = idem_runtime::reqwest::Client::new();
    match mode {
        Mode::Idem => api::RETRY_DEFAULTS.retry_client(http),
        Mode::Retry | Mode::Budget => {
            let d = api::RETRY_DEFAULTS;
            let policy = RetryPolicy::default()
                .max_attempts(d.max_attempts)
                .backoff(Backoff::full_jitter(d.base, d.cap))
                .deadline(Duration::from_secs(60));
            let budget = if mode == Mode::Retry {
                RetryBudget::unlimited()
            } else {
                RetryBudget::new(BudgetConfig {
                    capacity: budget_retries * d.budget.transient_cost,
                    ..d.budget
                })
            };
            RetryClient::builder(http)
                .policy(policy)
                .budget(budget)
                .build()
        }
    }
}

/// One layer: the next layer's client, or none at the bottom; its key
/// store on `DB` (SQLite by default, MariaDB with a `mysql://` URL).
#[derive(Debug)]
pub struct Layer<DB: idem_runtime::sqlx::Database = Sqlite> {
    pub depth: i32,
    pub next: Option<api::Client>,
    pub mode: Mode,
    pub slow: Duration,
    pub calls: AtomicI64,
    /// The bottom's database: `None` while it is down; up, `doWork` takes
    /// `slow` and then writes a row in the key's transaction.
    pub database: Option<idem_runtime::sqlx::Pool<DB>>,
}

impl Layer {
    /// The same layer, its store (and the bottom's table) on `DB`.
    fn on<DB: idem_runtime::sqlx::Database>(self) -> Layer<DB> {
        Layer {
            depth: self.depth,
            next: self.next,
            mode: self.mode,
            slow: self.slow,
            calls: self.calls,
            database: None,
        }
    }
}

fn unavailable(message: String) -> DoWorkReply {
    DoWorkReply::ServiceUnavailable(DoWorkReplyServiceUnavailable {
        body: Problem {
            code: "unavailable".into(),
            message,
            retryable: Some(true),
        },
        retry_after: None,
    })
    // Nothing was done: the key is not kept, so a retry runs again.
    .unrecorded()
}

macro_rules! layer_api {
    ($db:ty, $insert:literal) => {
        impl Api<$db> for Layer<$db> {
            async fn do_work(
                &self,
                _cx: Context,
                mut tx: IdemTx<$db>,
                input: DoWorkInput,
            ) -> Result<DoWorkReply, Fault> {
                self.calls.fetch_add(1, Ordering::Relaxed);
                let Some(next) = &self.next else {
                    if self.database.is_none() {
                        return Ok(unavailable("the database is down".into()));
                    }
                    tokio::time::sleep(self.slow).await;
                    // A database fault is the protocol's 503, unrecorded.
                    idem_runtime::sqlx::query($insert)
                        .bind(&input.body.id)
                        .execute(&mut *tx)
                        .await?;
                    return Ok(DoWorkReply::Created(Work {
                        id: input.body.id,
                        layer: Some(self.depth),
                    }));
                };
                let params = DoWorkParams {
                    x_caller: input.x_caller.clone(),
                };
                let result = match self.mode {
                    // Inside the request: an inner hop.
                    Mode::Idem => next.work().do_work(&params, &input.body).send().await,
                    // A task spawned without the request's context: the client
                    // retries as if it were the top layer.
                    Mode::Retry | Mode::Budget => {
                        let (next, body) = (next.clone(), input.body.clone());
                        match tokio::spawn(async move {
                            next.work().do_work(&params, &body).send().await
                        })
                        .await
                        {
                            Ok(result) => result,
                            Err(e) => return Ok(unavailable(e.to_string())),
                        }
                    }
                };
                Ok(match result {
                    Ok(work) => DoWorkReply::Created(Work {
                        id: work.id,
                        layer: Some(self.depth),
                    }),
                    Err(e) => unavailable(format!("layer {} below failed: {e}", self.depth + 1)),
                })
            }

            async fn slow(&self, _cx: Context) -> Result<SlowReply, Fault> {
                tokio::time::sleep(self.slow).await;
                Ok(SlowReply::Ok(Work {
                    id: "slow".into(),
                    layer: Some(self.depth),
                }))
            }

            async fn stats(&self, _cx: Context) -> Result<StatsReply, Fault> {
                let effects = match &self.database {
                    Some(pool) => {
                        idem_runtime::sqlx::query_scalar("SELECT COUNT(*) FROM work")
                            .fetch_one(pool)
                            .await?
                    }
                    None => 0,
                };
                Ok(StatsReply::Ok(Stats {
                    calls: self.calls.load(Ordering::Relaxed),
                    effects,
                }))
            }
        }
    };
}

layer_api!(Sqlite, "INSERT INTO work (id) VALUES ($1)");
layer_api!(MySql, "INSERT INTO work (id) VALUES (?)");

/// Serves `layer` on `listen` over an embedded SQLite key store, or a
/// MariaDB one with a `mysql://` URL; with `database_up`, the bottom's own
/// table lives in the same database. The port is
/// bound once the store is ready, and the address bound (port `0` picks one)
/// is printed as `listening on ADDR`: whoever started the process reads it
/// there rather than guessing a free port that another socket could take.
pub async fn serve(
    layer: Layer,
    listen: std::net::SocketAddr,
    database_url: &str,
    database_up: bool,
) -> anyhow::Result<()> {
    use idem_runtime::server::Store;
    if database_url.starts_with("mysql:") {
        let store = Store::connect_mysql(database_url, 16).await?;
        return serve_on(layer.on(), store, listen, database_up).await;
    }
    let store = Store::open_sqlite(database_url).await?;
    serve_on(layer, store, listen, database_up).await
}

async fn serve_on<DB: idem_runtime::server::Backend>(
    mut layer: Layer<DB>,
    store: idem_runtime::server::Store<DB>,
    listen: std::net::SocketAddr,
    database_up: bool,
) -> anyhow::Result<()>
where
    Layer<DB>: Api<DB>,
    for<'c> &'c idem_runtime::sqlx::Pool<DB>: idem_runtime::sqlx::Executor<'c, Database = DB>,
{
    use idem_runtime::server::{HeaderScope, Idempotency};
    store.migrate().await?;
    if database_up {
        idem_runtime::sqlx::raw_sql("CREATE TABLE IF NOT EXISTS work (id TEXT NOT NULL)")
            .execute(store.pool())
            .await?;
        layer.database = Some(store.pool().clone());
    }
    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-caller"))
        .build()?;
    let refusals = Refusals::default();
    let app = with_refusal_timing(api::router(layer, &idem)?, refusals);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening on {}", listener.local_addr()?);
    idem_runtime::axum::serve(listener, app).await?;
    Ok(())
}

/// How long the server took to answer each `503`, from the moment the
/// request reached the router: what admission control costs a refused
/// caller, without the load generator's own scheduling.
#[derive(Debug, Clone, Default)]
pub struct Refusals(std::sync::Arc<std::sync::Mutex<Vec<Duration>>>);

fn with_refusal_timing(
    app: idem_runtime::axum::Router,
    refusals: Refusals,
) -> idem_runtime::axum::Router {
    use idem_runtime::axum::{self, extract::Request, middleware::Next, routing::get};
    let timed = refusals.clone();
    let app = app.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let timed = timed.clone();
            async move {
                let started = std::time::Instant::now();
                let response = next.run(request).await;
                if response.status() == 503
                    && let Ok(mut all) = timed.0.lock()
                {
                    all.push(started.elapsed());
                }
                response
            }
        },
    ));
    let report = move || {
        let refusals = refusals.clone();
        async move {
            let mut all = refusals.0.lock().map(|a| a.clone()).unwrap_or_default();
            all.sort_unstable();
            let at = |q: f64| {
                all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
                    .map_or(0, |d| d.as_micros() as u64)
            };
            idem_runtime::axum::Json(idem_runtime::serde_json::json!({
                "count": all.len(), "p50_us": at(0.5), "p99_us": at(0.99), "max_us": at(1.0),
            }))
        }
    };
    axum::Router::new()
        .route("/_refusals", get(report))
        .merge(app)
}

pub mod run;
