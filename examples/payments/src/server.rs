//! The payments service: the generated `Api` trait implemented over a
//! `charges` table, served by the generated router.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use idem_runtime::http::StatusCode;
use idem_runtime::server::support::Context;
use idem_runtime::server::{
    Backend, Fault, HeaderScope, IdemTx, Idempotency, PhaseError, ResumePolicy, StepError, Store,
};
use idem_runtime::sqlx::{self, MySql, Pool, Postgres, Sqlite};

use crate::api::{
    Api, Charge, ChargeCurrency, ChargeStatus, CreateChargeInput, CreateChargeReply,
    CreateLegacyChargeInput, CreateLegacyChargeReply, CreatePayoutDone, CreatePayoutInput,
    CreatePayoutReply, CreatePayoutSteps, GetChargeInput, GetChargeReply, ListChargesInput,
    ListChargesReply, NewChargeCurrency, Payout, Problem,
};

/// The service's state: its pool, and the bank payouts go through.
#[derive(Debug, Clone)]
pub struct Payments<DB: Backend> {
    pool: Pool<DB>,
    bank: Option<String>,
    http: idem_runtime::reqwest::Client,
    /// Whether statements may be named and cached on their connection:
    /// not behind a transaction pooler.
    named: bool,
}

impl<DB: Backend> Payments<DB> {
    /// The service over `pool`, paying out through `bank` when given.
    pub fn new(pool: Pool<DB>, bank: Option<String>) -> Self {
        Payments {
            pool,
            bank,
            http: idem_runtime::reqwest::Client::new(),
            named: true,
        }
    }

    /// The service behind a transaction pooler (PgBouncer's
    /// `pool_mode = transaction`): its statements are unnamed, never
    /// cached, and each runs inside a transaction, as idem's do.
    pub fn behind_pooler(self) -> Self {
        Payments {
            named: false,
            ..self
        }
    }
}

/// Runs one statement that needs no transaction: on its own over a direct
/// connection, inside a transaction behind a transaction pooler, where an
/// unnamed statement is safe only inside one.
macro_rules! single {
    ($service:ident, $query:expr, $fetch:ident) => {
        if $service.named {
            $query.$fetch(&$service.pool).await?
        } else {
            let mut tx = $service.pool.begin().await?;
            let out = $query.$fetch(&mut *tx).await?;
            tx.commit().await?;
            out
        }
    };
}

fn currency(c: NewChargeCurrency) -> ChargeCurrency {
    match c {
        NewChargeCurrency::Usd => ChargeCurrency::Usd,
        NewChargeCurrency::Eur => ChargeCurrency::Eur,
        NewChargeCurrency::Gbp => ChargeCurrency::Gbp,
    }
}

fn currency_code(c: ChargeCurrency) -> &'static str {
    match c {
        ChargeCurrency::Usd => "usd",
        ChargeCurrency::Eur => "eur",
        ChargeCurrency::Gbp => "gbp",
    }
}

fn parse_currency(code: &str) -> ChargeCurrency {
    match code {
        "eur" => ChargeCurrency::Eur,
        "gbp" => ChargeCurrency::Gbp,
        _ => ChargeCurrency::Usd,
    }
}

fn problem(code: &str, message: impl Into<String>) -> Problem {
    Problem {
        code: code.to_owned(),
        message: message.into(),
        field: None,
        retryable: Some(false),
    }
}

type Row = (i64, String, i64, String, Option<String>);

fn charge((id, order_id, amount, currency, description): Row) -> Charge {
    Charge {
        id,
        order_id,
        amount,
        currency: parse_currency(&currency),
        status: ChargeStatus::Succeeded,
        description,
    }
}

/// One foreign call to the bank with the step's derived key.
///
/// The bank's `4xx` is its answer: the payout is refused, which ends the
/// operation with the documented `402`, stored and replayed. A `5xx`, a
/// `429`, a timeout or a lost reply says nothing about the payout, so the
/// phase runs again later with the same key.
async fn bank_call(
    http: &idem_runtime::reqwest::Client,
    url: String,
    key: &str,
    body: idem_runtime::serde_json::Value,
) -> Result<String, PhaseError<CreatePayoutReply>> {
    let response = http
        .post(url)
        .header("Idempotency-Key", key)
        .json(&body)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| PhaseError::Transient(format!("bank unreachable: {e}")))?;
    let status = response.status();
    if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
        let reason = response.text().await.unwrap_or_default();
        return Err(PhaseError::Final(CreatePayoutReply::PaymentRequired(
            problem(
                "bank_refused",
                format!("the bank refused the payout ({status}): {reason}"),
            ),
        )));
    }
    if !status.is_success() {
        return Err(PhaseError::Transient(format!("bank answered {status}")));
    }
    response
        .text()
        .await
        .map_err(|e| PhaseError::Transient(format!("bank reply lost: {e}")))
}

/// The service's statements, in one engine's placeholders.
struct Statements {
    insert: &'static str,
    list: &'static str,
    get: &'static str,
}

/// `$N` placeholders: SQLite and PostgreSQL.
const NUMBERED: Statements = Statements {
    insert: "INSERT INTO charges (account, order_id, amount, currency, description) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
    list: "SELECT id, order_id, amount, currency, description FROM charges \
           WHERE account = $1 AND order_id = COALESCE($2, order_id) ORDER BY id LIMIT $3",
    get: "SELECT id, order_id, amount, currency, description FROM charges \
          WHERE account = $1 AND id = $2",
};

/// `?` placeholders: MariaDB (which has `INSERT … RETURNING`) and MySQL.
const POSITIONAL: Statements = Statements {
    insert: "INSERT INTO charges (account, order_id, amount, currency, description) \
             VALUES (?, ?, ?, ?, ?) RETURNING id",
    list: "SELECT id, order_id, amount, currency, description FROM charges \
           WHERE account = ? AND order_id = COALESCE(?, order_id) ORDER BY id LIMIT ?",
    get: "SELECT id, order_id, amount, currency, description FROM charges \
          WHERE account = ? AND id = ?",
};

macro_rules! payments_api {
    ($db:ty, $sql:expr) => {
        impl Api<$db> for Payments<$db> {
            async fn create_charge(
                &self,
                _cx: Context,
                mut tx: IdemTx<$db>,
                input: CreateChargeInput,
            ) -> Result<CreateChargeReply, Fault> {
                // The spec's `minimum: 1` on `amount` was checked before the
                // key was claimed: no zero charge reaches this point.
                let body = input.body;
                let currency = currency(body.currency);
                // A database fault here (the connection dropped, the server
                // restarted) is `?`'d into a `Fault`: answered 503 with
                // `Retry-After`, nothing committed, the key's claim rolled
                // back with the write, so the retry with the key runs again.
                let (id,): (i64,) = sqlx::query_as(
                    $sql.insert,
                )
                .persistent(self.named)
                .bind(&input.x_account_id)
                .bind(&body.order_id)
                .bind(body.amount)
                .bind(currency_code(currency))
                .bind(&body.description)
                .fetch_one(&mut *tx)
                .await?;
                Ok(CreateChargeReply::Created(Charge {
                    id,
                    order_id: body.order_id,
                    amount: body.amount,
                    currency,
                    status: ChargeStatus::Succeeded,
                    description: body.description,
                }))
            }

            async fn create_legacy_charge(
                &self,
                _cx: Context,
                input: CreateLegacyChargeInput,
            ) -> Result<CreateLegacyChargeReply, Fault> {
                let body = input.body;
                let currency = currency(body.currency);
                let (id,): (i64,) = single!(
                    self,
                    sqlx::query_as($sql.insert)
                        .persistent(self.named)
                        .bind(&input.x_account_id)
                        .bind(&body.order_id)
                        .bind(body.amount)
                        .bind(currency_code(currency))
                        .bind(&body.description),
                    fetch_one
                );
                Ok(CreateLegacyChargeReply::Created(Charge {
                    id,
                    order_id: body.order_id,
                    amount: body.amount,
                    currency,
                    status: ChargeStatus::Succeeded,
                    description: body.description,
                }))
            }

            async fn list_charges(
                &self,
                _cx: Context,
                input: ListChargesInput,
            ) -> Result<ListChargesReply, Fault> {
                let limit = i64::from(input.limit.unwrap_or(10_000).max(1));
                let rows: Vec<Row> = single!(
                    self,
                    sqlx::query_as($sql.list)
                        .persistent(self.named)
                        .bind(&input.x_account_id)
                        .bind(&input.order_id)
                        .bind(limit),
                    fetch_all
                );
                Ok(ListChargesReply::Ok(rows.into_iter().map(charge).collect()))
            }

            async fn get_charge(
                &self,
                _cx: Context,
                input: GetChargeInput,
            ) -> Result<GetChargeReply, Fault> {
                let row: Option<Row> = single!(
                    self,
                    sqlx::query_as($sql.get)
                        .persistent(self.named)
                        .bind(&input.x_account_id)
                        .bind(input.charge_id),
                    fetch_optional
                );
                Ok(match row {
                    Some(row) => GetChargeReply::Ok(charge(row)),
                    None => GetChargeReply::NotFound(problem("not_found", "no such charge")),
                })
            }

            async fn create_payout<'a>(
                &'a self,
                steps: CreatePayoutSteps<'a, $db>,
                input: CreatePayoutInput,
            ) -> Result<CreatePayoutDone, StepError> {
                // A server without a bank cannot pay out, but that is not the
                // caller's outcome: nothing is recorded, and the same key
                // works once the bank is configured.
                let Some(bank) = self.bank.clone() else {
                    return Err(StepError::Unavailable(
                        "this server has no bank configured (--bank-url)".to_owned(),
                    ));
                };
                let body = input.body;
                let transfer = idem_runtime::serde_json::json!({
                    "vendor_id": body.vendor_id,
                    "amount": body.amount,
                });
                let http = self.http.clone();
                let (reference, steps) = steps
                    .submit_to_bank(|call| {
                        let (http, url) = (http.clone(), format!("{bank}/transfers"));
                        async move { bank_call(&http, url, &call.derived_key, transfer).await }
                    })
                    .await?;
                let note = idem_runtime::serde_json::json!({
                    "vendor_id": body.vendor_id,
                    "reference": reference,
                });
                let (_, steps) = steps
                    .notify_vendor(|call| {
                        let url = format!("{bank}/notifications");
                        async move { bank_call(&http, url, &call.derived_key, note).await }
                    })
                    .await?;
                Ok(steps.finish(CreatePayoutReply::Created(Payout {
                    vendor_id: body.vendor_id,
                    amount: body.amount,
                    bank_reference: reference,
                    notified: true,
                })))
            }
        }
    };
}

payments_api!(Sqlite, NUMBERED);
payments_api!(Postgres, NUMBERED);
payments_api!(MySql, POSITIONAL);

/// The application's own table, next to idem's.
pub const SQLITE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    account TEXT NOT NULL,
    order_id TEXT NOT NULL,
    amount BIGINT NOT NULL,
    currency TEXT NOT NULL,
    description TEXT
)";

pub const MYSQL_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS charges (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    account VARCHAR(255) NOT NULL,
    order_id VARCHAR(255) NOT NULL,
    amount BIGINT NOT NULL,
    currency VARCHAR(8) NOT NULL,
    description TEXT,
    KEY charges_account (account, order_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4";

/// PostgreSQL's: each charge also records the server that wrote it (the
/// `idem.node` setting the Patroni scenario gives each member, `NULL`
/// elsewhere) and when, for the scenarios' accounts afterwards.
pub const POSTGRES_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS charges (
    id BIGSERIAL PRIMARY KEY,
    account TEXT NOT NULL,
    order_id TEXT NOT NULL,
    amount BIGINT NOT NULL,
    currency TEXT NOT NULL,
    description TEXT,
    written_on TEXT DEFAULT current_setting('idem.node', true),
    written_at TIMESTAMPTZ DEFAULT clock_timestamp()
)";

/// Opens the store and serves the generated router on `listen` until
/// killed. `resume` replaces the spec's resume schedule (for tests and
/// scenarios that cannot wait minutes).
pub async fn serve(
    database_url: &str,
    listen: SocketAddr,
    bank: Option<String>,
    resume: Option<ResumePolicy>,
    behind_pooler: bool,
) -> anyhow::Result<()> {
    if database_url.starts_with("postgres") {
        let store = if behind_pooler {
            // No session state through a transaction pooler: the claims
            // bound their own lock waits.
            Store::connect_postgres_pooled(database_url, 16).await?
        } else {
            // Every connection bounds its lock waits by the routes'
            // duplicate wait (the default, 2s), so the claims themselves
            // set nothing.
            let wait = idem_runtime::server::Policy::new().duplicate_wait_bound();
            Store::connect_postgres_bounded(database_url, 16, wait).await?
        };
        // Servers starting together on one database would race to create
        // the table (PostgreSQL's `IF NOT EXISTS` is not safe under
        // concurrency): one of them at a time, under an advisory lock.
        let mut tx = store.pool().begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(7263541210)")
            .persistent(!behind_pooler)
            .execute(&mut *tx)
            .await?;
        sqlx::query(POSTGRES_SCHEMA)
            .persistent(!behind_pooler)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        run(store, listen, bank, resume, behind_pooler).await
    } else if database_url.starts_with("mysql:") || database_url.starts_with("mariadb:") {
        let url = database_url.replacen("mariadb:", "mysql:", 1);
        let store = Store::connect_mysql(&url, 16).await?;
        // `CREATE TABLE IF NOT EXISTS` is atomic in MariaDB: servers
        // starting together need no lock.
        sqlx::raw_sql(MYSQL_SCHEMA).execute(store.pool()).await?;
        run(store, listen, bank, resume, false).await
    } else {
        let store = Store::open_sqlite(database_url).await?;
        sqlx::query(SQLITE_SCHEMA).execute(store.pool()).await?;
        run(store, listen, bank, resume, false).await
    }
}

async fn run<DB: Backend>(
    store: Store<DB>,
    listen: SocketAddr,
    bank: Option<String>,
    resume: Option<ResumePolicy>,
    behind_pooler: bool,
) -> anyhow::Result<()>
where
    Payments<DB>: Api<DB>,
{
    store.migrate().await?;
    let api = Payments::new(store.pool().clone(), bank);
    let api = if behind_pooler {
        api.behind_pooler()
    } else {
        api
    };
    // Keys are scoped to the calling account; there is no global scope.
    let mut idem = Idempotency::builder(store).scope(HeaderScope::new("x-account-id"));
    if let Some(schedule) = resume {
        idem = idem.resume_override(schedule);
    }
    let idem = idem.build()?;
    let app = crate::api::router(api, &idem)?;
    // The completer finishes payouts a crash left half-done; the reaper
    // drops records past their horizon.
    let _jobs = idem.spawn_background_jobs(Duration::from_millis(500));
    // Listening last: a caller that can connect finds the store ready.
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    // With `--listen 127.0.0.1:0` the system picks the port; whoever started
    // the process reads it here, and no other process can hold it meanwhile.
    println!("listening on {}", listener.local_addr()?);
    idem_runtime::axum::serve(listener, app).await?;
    Ok(())
}

/// Installs the Prometheus recorder and answers `GET /metrics` on `addr`,
/// a listener of its own: the API's port serves the API only.
pub async fn serve_metrics(addr: SocketAddr) -> anyhow::Result<()> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    // Buckets for every `_seconds` histogram, so `histogram_quantile` works
    // across instances: from a millisecond (a replay) to ten seconds.
    let buckets = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &buckets)?
        .install_recorder()?;
    idem_runtime::metric::describe();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for metrics"))?;
    eprintln!("metrics on http://{}/metrics", listener.local_addr()?);
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let app = idem_runtime::axum::Router::new().route(
        "/metrics",
        idem_runtime::axum::routing::get(move || std::future::ready(handle.render())),
    );
    tokio::spawn(async move { idem_runtime::axum::serve(listener, app).await });
    Ok(())
}
