//! The scenario: 2,000 orders charged through a network that loses 15% of
//! the replies after the server has answered, with the server SIGKILLed once
//! mid-run; once through idem (keyed, the generated client), once through
//! the unkeyed endpoint with a plain retry loop, for contrast.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use idem_runtime::sqlx;
use rand::Rng as _;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::{Mutex, Semaphore};

use crate::api::{
    Client, CreateChargeParams, CreateLegacyChargeParams, NewCharge, NewChargeCurrency,
};

/// What the scenario runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub orders: usize,
    pub loss: f64,
    pub concurrency: usize,
    pub database_url: Option<String>,
    pub out: PathBuf,
}

/// One row of the table.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub label: &'static str,
    pub orders: usize,
    pub charges: usize,
    pub duplicates: usize,
    pub unknown: usize,
    pub reconciled: usize,
    pub overcharged: usize,
    pub lost: usize,
    /// Answers the server replayed (`Idempotent-Replayed`): a retry after
    /// the first reply was lost, answered with the stored charge.
    pub replayed: usize,
    pub seconds: f64,
}

/// The server process (`payments-demo serve`), restartable.
pub(crate) struct Server {
    exe: PathBuf,
    database_url: String,
    listen: SocketAddr,
    /// More arguments for `serve` (`--bank-url …`).
    extra: Vec<String>,
    child: Option<tokio::process::Child>,
    /// The warnings it logs, when captured.
    warnings: Option<Arc<std::sync::Mutex<Vec<String>>>>,
}

impl Server {
    /// A server on a loopback port the system picks when it first starts.
    pub(crate) fn new(database_url: &str, extra: Vec<String>) -> anyhow::Result<Server> {
        Ok(Server {
            exe: std::env::current_exe()?,
            database_url: database_url.to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            extra,
            child: None,
            warnings: None,
        })
    }

    /// Keeps the warnings the server logs from now on (its stderr, at
    /// `warn`), instead of letting them through.
    pub(crate) fn capture_warnings(&mut self) -> Arc<std::sync::Mutex<Vec<String>>> {
        Arc::clone(self.warnings.get_or_insert_with(Arc::default))
    }

    /// Where it listens (once started).
    pub(crate) fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// Starts the process and waits until it listens: on a port of its own
    /// choosing the first time, on the same port after a restart.
    pub(crate) async fn start(&mut self) -> anyhow::Result<()> {
        let mut command = tokio::process::Command::new(&self.exe);
        command
            .arg("serve")
            .arg("--database-url")
            .arg(&self.database_url)
            .arg("--listen")
            .arg(self.listen.to_string())
            .args(&self.extra)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        if self.warnings.is_some() {
            command
                .env("RUST_LOG", "warn")
                .env("NO_COLOR", "1")
                .stderr(std::process::Stdio::piped());
        }
        let mut child = command.spawn().context("cannot start the server process")?;
        // The rest of what it logs: why it exited, if it does.
        let others: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        if let (Some(warnings), Some(stderr)) = (&self.warnings, child.stderr.take()) {
            let (warnings, others) = (Arc::clone(warnings), Arc::clone(&others));
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let kept = if line.contains("WARN") {
                        &warnings
                    } else {
                        &others
                    };
                    kept.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(line);
                }
            });
        }
        let stdout = child.stdout.take().context("the server's stdout")?;
        self.child = Some(child);
        // Ready when it says where it listens; a server that cannot bind
        // exits instead, and its error is on stderr.
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .map_err(|_| anyhow::anyhow!("the server did not start listening within 30 s"))??
            .with_context(|| {
                // Its last words, when its stderr was read here.
                let said = others
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .join("\n");
                format!("the server exited before listening: {said}")
            })?;
        self.listen = line
            .strip_prefix("listening on ")
            .and_then(|addr| addr.parse().ok())
            .with_context(|| format!("unexpected first line from the server: {line}"))?;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(())
    }

    /// SIGKILL: no shutdown hook runs, whatever was in flight is cut.
    pub(crate) async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.start_kill()?;
            child.wait().await?;
        }
        Ok(())
    }
}

/// A loopback proxy that forwards every request and, for `loss` of them,
/// throws the server's answer away: the client never hears back, as when a
/// reply is lost on the way.
async fn proxy(upstream: SocketAddr, loss: f64) -> anyhow::Result<SocketAddr> {
    use idem_runtime::axum::{self, body::Body, extract::Request, response::Response};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let http = idem_runtime::reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let app = axum::Router::new().fallback(move |request: Request| {
        let http = http.clone();
        async move {
            let (parts, body) = request.into_parts();
            let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
                return Response::builder()
                    .status(400)
                    .body(Body::empty())
                    .unwrap_or_default();
            };
            let answered = match forward(&http, upstream, &parts, body).await {
                Ok(r) => r,
                // The server is down (killed, restarting): what a load
                // balancer answers then.
                Err(_) => {
                    return Response::builder()
                        .status(502)
                        .body(Body::empty())
                        .unwrap_or_default();
                }
            };
            let status = answered.status();
            let headers = answered.headers().clone();
            let bytes = answered.bytes().await.unwrap_or_default();
            if rand::rng().random_bool(loss) {
                // The server answered; the caller will never know. Held
                // until the caller gives up and closes the connection.
                std::future::pending::<()>().await;
            }
            let mut response = Response::new(Body::from(bytes));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

/// Sends the request `parts` + `body` on to `upstream`, as received.
pub(crate) async fn forward(
    http: &idem_runtime::reqwest::Client,
    upstream: SocketAddr,
    parts: &idem_runtime::http::request::Parts,
    body: idem_runtime::bytes::Bytes,
) -> Result<idem_runtime::reqwest::Response, idem_runtime::reqwest::Error> {
    let url = format!(
        "http://{upstream}{}",
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut request = http.request(parts.method.clone(), url).body(body);
    for (name, value) in &parts.headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    request.send().await
}

/// The charge for order number `order`: the same body on every retry.
pub(crate) fn order_body(order: usize) -> NewCharge {
    NewCharge {
        order_id: format!("order-{order}"),
        amount: 1_000 + i64::try_from(order % 97).unwrap_or(0),
        currency: NewChargeCurrency::Usd,
        description: None,
    }
}

/// Runs the whole story and returns the two rows.
pub async fn run(settings: &Settings) -> anyhow::Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    let database_url = settings.database_url.clone().unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("payments.db").display()
        )
    });
    let mut server = Server::new(&database_url, Vec::new())?;
    server.start().await?;
    let entry = proxy(server.listen(), settings.loss).await?;
    let base = format!("http://{entry}");
    let run_id = uuid_like();
    let server = Arc::new(Mutex::new(server));

    let keyed_account = format!("acct-keyed-{run_id}");
    let keyed = keyed_row(settings, &base, &keyed_account, &server).await?;
    let plain_account = format!("acct-plain-{run_id}");
    let plain = plain_row(settings, &base, &plain_account, &server).await?;
    server.lock().await.kill().await?;

    let keyed = count(&database_url, &keyed_account, keyed, settings.orders).await?;
    let plain = count(&database_url, &plain_account, plain, settings.orders).await?;
    write_docs(&settings.out)?;
    Ok(vec![keyed, plain])
}

fn uuid_like() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

/// Kills the server once, when half of the orders have been started.
async fn crash_midway(
    started: &AtomicUsize,
    orders: usize,
    server: &Mutex<Server>,
) -> anyhow::Result<()> {
    while started.load(Ordering::Relaxed) < orders / 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut server = server.lock().await;
    server.kill().await?;
    println!(
        "  server SIGKILLed after {} orders started; restarting",
        orders / 2
    );
    server.start().await?;
    Ok(())
}

async fn keyed_row(
    settings: &Settings,
    base: &str,
    account: &str,
    server: &Mutex<Server>,
) -> anyhow::Result<Row> {
    println!(
        "idem: {} orders through the generated client (keyed, retries on)…",
        settings.orders
    );
    let clock = Instant::now();
    let client = Client::new(base)?;
    let params = CreateChargeParams {
        x_account_id: account.to_owned(),
    };
    let started = Arc::new(AtomicUsize::new(0));
    let replayed = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(settings.concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for order in 0..settings.orders {
        let (client, params, gate, started, replayed) = (
            client.clone(),
            params.clone(),
            Arc::clone(&gate),
            Arc::clone(&started),
            Arc::clone(&replayed),
        );
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await;
            started.fetch_add(1, Ordering::Relaxed);
            let body = order_body(order);
            match client
                .charges()
                .create(&params, &body)
                .send_with_response()
                .await
            {
                // A retry whose first reply was lost gets the stored charge.
                Ok(charge) if charge.replayed() => {
                    replayed.fetch_add(1, Ordering::Relaxed);
                    None
                }
                Ok(_) => None,
                // Gave up (budget spent, deadline): the error carries the
                // key every attempt used.
                Err(e) => Some((order, e.idempotency_key().cloned())),
            }
        });
    }
    let crash = crash_midway(&started, settings.orders, server);
    let mut pending = Vec::new();
    let collect = async {
        while let Some(done) = tasks.join_next().await {
            if let Ok(Some(failed)) = done {
                pending.push(failed);
            }
        }
    };
    let (crashed, ()) = tokio::join!(crash, collect);
    crashed?;
    let unknown = pending.len();
    // Reconciliation, as an integrator would: call again with the key the
    // error carries, until every order has an answer.
    let mut passes = 0;
    while !pending.is_empty() && passes < 20 {
        passes += 1;
        let mut still = Vec::new();
        for (order, key) in pending {
            let body = order_body(order);
            let mut call = client.charges().create(&params, &body);
            if let Some(key) = key.clone() {
                call = call.idempotency_key(key);
            }
            if call.send().await.is_err() {
                still.push((order, key));
            }
        }
        pending = still;
    }
    Ok(Row {
        label: "idem (keyed, generated client)",
        orders: settings.orders,
        unknown,
        reconciled: unknown - pending.len(),
        replayed: replayed.load(Ordering::Relaxed),
        seconds: clock.elapsed().as_secs_f64(),
        ..Row::default()
    })
}

async fn plain_row(
    settings: &Settings,
    base: &str,
    account: &str,
    server: &Mutex<Server>,
) -> anyhow::Result<Row> {
    println!(
        "control: {} orders through the unkeyed endpoint, plain retry loop…",
        settings.orders
    );
    let clock = Instant::now();
    let client = Client::new(base)?;
    let params = CreateLegacyChargeParams {
        x_account_id: account.to_owned(),
    };
    let started = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(settings.concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    for order in 0..settings.orders {
        let (client, params, gate, started) = (
            client.clone(),
            params.clone(),
            Arc::clone(&gate),
            Arc::clone(&started),
        );
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await;
            started.fetch_add(1, Ordering::Relaxed);
            let body = order_body(order);
            // What integrators write when the SDK does not retry for them:
            // try again on any error, up to four times.
            for _ in 0..4 {
                let call = client.legacy_charges().create(&params, &body).send();
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(300), call).await {
                    return false;
                }
            }
            true
        });
    }
    let crash = crash_midway(&started, settings.orders, server);
    let mut unknown = 0;
    let collect = async {
        while let Some(done) = tasks.join_next().await {
            if let Ok(true) = done {
                unknown += 1;
            }
        }
    };
    let (crashed, ()) = tokio::join!(crash, collect);
    crashed?;
    Ok(Row {
        label: "control (no key, plain retry loop)",
        orders: settings.orders,
        unknown,
        seconds: clock.elapsed().as_secs_f64(),
        ..Row::default()
    })
}

/// Counts the effects in the database itself.
/// The rows `sql` selects for one bound text (`$1`, which MariaDB reads
/// as `?`), on any store.
pub(crate) async fn fetch_for<T>(
    database_url: &str,
    sql: &str,
    bind: &str,
) -> anyhow::Result<Vec<T>>
where
    T: Send + Unpin,
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    T: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>,
    T: for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow>,
{
    if database_url.starts_with("mysql:") || database_url.starts_with("mariadb:") {
        let url = database_url.replacen("mariadb:", "mysql:", 1);
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await?;
        let sql = sql.replace("$1", "?");
        Ok(sqlx::query_as(&sql).bind(bind).fetch_all(&pool).await?)
    } else if database_url.starts_with("postgres") {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(database_url)
            .await?;
        Ok(sqlx::query_as(sql).bind(bind).fetch_all(&pool).await?)
    } else {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect(database_url)
            .await?;
        Ok(sqlx::query_as(sql).bind(bind).fetch_all(&pool).await?)
    }
}

async fn count(
    database_url: &str,
    account: &str,
    mut row: Row,
    orders: usize,
) -> anyhow::Result<Row> {
    let per_order: Vec<(String, i64)> = fetch_for(
        database_url,
        "SELECT order_id, COUNT(*) FROM charges WHERE account = $1 GROUP BY order_id",
        account,
    )
    .await?;
    let charged = per_order.len();
    row.charges = per_order
        .iter()
        .map(|(_, n)| usize::try_from(*n).unwrap_or(0))
        .sum();
    row.duplicates = row.charges - charged;
    row.overcharged = per_order.iter().filter(|(_, n)| *n > 1).count();
    row.lost = orders.saturating_sub(charged);
    Ok(row)
}

/// The integrator docs page generated from the same spec, written out.
fn write_docs(out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let md = include_str!(concat!(env!("OUT_DIR"), "/docs/idempotency.md"));
    let html = include_str!(concat!(env!("OUT_DIR"), "/docs/idempotency.html"));
    std::fs::write(out.join("idempotency.md"), md)?;
    std::fs::write(out.join("idempotency.html"), html)?;
    Ok(())
}

/// The table, in the shape of the well-known simulation.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<36} {:>6} {:>8} {:>10} {:>8} {:>10} {:>11} {:>5} {:>7}\n",
        "",
        "orders",
        "charges",
        "duplicates",
        "unknown",
        "reconciled",
        "overcharged",
        "lost",
        "seconds"
    ));
    for r in rows {
        let reconciled = if r.label.starts_with("idem") {
            r.reconciled.to_string()
        } else {
            "-".to_owned()
        };
        out.push_str(&format!(
            "{:<36} {:>6} {:>8} {:>10} {:>8} {:>10} {:>11} {:>5} {:>7.1}\n",
            r.label,
            r.orders,
            r.charges,
            r.duplicates,
            r.unknown,
            reconciled,
            r.overcharged,
            r.lost,
            r.seconds
        ));
    }
    out
}
