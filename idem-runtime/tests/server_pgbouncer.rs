#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed setup step should abort the test"
)]
//! The key protocol through a real PgBouncer in transaction pooling mode,
//! whose pool (3 server connections) is smaller than the store's (16):
//! first as sqlx connects by default (named, cached statements), which
//! PgBouncer 1.18 breaks; then with `Store::connect_postgres_pooled`,
//! under keyed load with concurrent duplicates and a PgBouncer killed and
//! started again in the middle: every key charges exactly once.
//!
//! Runs when `IDEM_TEST_DATABASE_URL` is set and `pgbouncer` is installed
//! (`/usr/sbin/pgbouncer` or on `PATH`); says so and passes otherwise. In
//! the same process, a store reaching PostgreSQL directly keeps its named
//! statements beside the store behind PgBouncer.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use http::StatusCode;
use idem_runtime::server::{Backend, HeaderScope, IdemTx, Idempotency, NewClaim, Store};
use sqlx::Postgres;

fn pgbouncer_binary() -> Option<PathBuf> {
    let fixed = PathBuf::from("/usr/sbin/pgbouncer");
    if fixed.exists() {
        return Some(fixed);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("pgbouncer"))
            .find(|p| p.exists())
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A PgBouncer in front of the server at `upstream`, in transaction mode.
struct Bouncer {
    binary: PathBuf,
    config: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Bouncer {
    fn new(binary: PathBuf, dir: &Path, upstream: SocketAddr) -> Bouncer {
        let port = free_port();
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        let config = dir.join("pgbouncer.ini");
        std::fs::write(
            &config,
            format!(
                "[databases]\n* = host={} port={}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
                 listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {}\n\
                 pool_mode = transaction\ndefault_pool_size = 3\nmin_pool_size = 0\n\
                 max_client_conn = 500\nignore_startup_parameters = extra_float_digits\n\
                 logfile = {}\n",
                upstream.ip(),
                upstream.port(),
                dir.join("users.txt").display(),
                dir.join("pgbouncer.log").display(),
            ),
        )
        .unwrap();
        let mut bouncer = Bouncer {
            binary,
            config,
            port,
            child: None,
        };
        bouncer.start();
        bouncer
    }

    fn start(&mut self) {
        // PgBouncer refuses to run as root: as root, it runs as `postgres`,
        // exec'd by setpriv so that the child is PgBouncer itself.
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"));
        let mut command = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"])
                .arg(&self.binary);
            c
        } else {
            Command::new(&self.binary)
        };
        // It logs to its file; its own stderr would bury the test's output.
        command
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(command.spawn().unwrap());
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("pgbouncer did not listen on {}", self.port);
    }

    /// A hard stop: clients see their connections closed mid-way. Returns
    /// once the port is free.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            for _ in 0..100 {
                if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            panic!("pgbouncer still listens on {} after SIGKILL", self.port);
        }
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn charge(mut tx: IdemTx<Postgres>, body: String) -> (StatusCode, String) {
    match sqlx::query("INSERT INTO pgb_charges (order_id) VALUES ($1)")
        .persistent(false)
        .bind(&body)
        .execute(&mut *tx)
        .await
    {
        Ok(_) => (StatusCode::CREATED, format!("{{\"order\":{body:?}}}")),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// Serves `store` on loopback; returns its address.
async fn serve(store: Store<Postgres>) -> String {
    let idem = Idempotency::builder(store)
        .scope(HeaderScope::new("x-account-id"))
        .build()
        .unwrap();
    let app: Router = Router::new()
        .route("/charges", post(charge))
        .route_layer(idem.layer());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// Sends `orders` keys three times each, all at once, each until it is
/// answered 201; counts in `final_errors` the answers no retry can fix, in
/// `retried` the 503s and failed connections.
async fn load(
    base: &str,
    prefix: &str,
    orders: usize,
    final_errors: &Arc<AtomicUsize>,
    retried: &Arc<AtomicUsize>,
) {
    let http = reqwest::Client::new();
    let sends = (0..orders * 3).map(|i| {
        let (http, base) = (http.clone(), base.to_owned());
        let order = format!("{prefix}-{}", i % orders);
        let final_errors = Arc::clone(final_errors);
        let retried = Arc::clone(retried);
        async move {
            for _ in 0..400 {
                let sent = http
                    .post(format!("{base}/charges"))
                    .header("x-account-id", "acct_1")
                    .header("idempotency-key", &order)
                    .body(order.clone())
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
                match sent.map(|r| r.status().as_u16()) {
                    Ok(201) => return,
                    // A duplicate in flight: expected, not counted.
                    Ok(409) => {}
                    Ok(503) | Err(_) => {
                        retried.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {
                        final_errors.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("{order} was never answered 201");
        }
    });
    futures_util::future::join_all(sends).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keyed_requests_through_pgbouncer_in_transaction_mode_charge_once() {
    let Some(admin_url) = std::env::var("IDEM_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("skipped: IDEM_TEST_DATABASE_URL is not set");
        return;
    };
    let Some(binary) = pgbouncer_binary() else {
        eprintln!("skipped: pgbouncer is not installed (Debian: apt-get install pgbouncer)");
        return;
    };
    let options: sqlx::postgres::PgConnectOptions = admin_url.parse().unwrap();
    let upstream: SocketAddr = format!("{}:{}", options.get_host(), options.get_port())
        .parse()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], options.get_port())));
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&admin_url)
        .await
        .unwrap();
    let database = format!("pgb_{:x}", rand::random::<u32>());
    sqlx::query(&format!("CREATE DATABASE {database}"))
        .execute(&admin)
        .await
        .unwrap();
    let direct_url = match admin_url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{database}"),
        None => panic!("IDEM_TEST_DATABASE_URL has no database name"),
    };
    let direct = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&direct_url)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE pgb_charges (id BIGSERIAL PRIMARY KEY, order_id TEXT NOT NULL)")
        .execute(&direct)
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    // PgBouncer may run as another user: it reads its files and writes its log here.
    let _ = Command::new("chmod").arg("777").arg(dir.path()).status();
    let mut bouncer = Bouncer::new(binary, dir.path(), upstream);

    Store::new(direct.clone()).migrate().await.unwrap();
    // The same load on a direct connection, for comparison.
    let failed = Arc::new(AtomicUsize::new(0));
    let retried = Arc::new(AtomicUsize::new(0));
    let orders = 150;
    let direct_base = serve(Store::connect_postgres(&direct_url, 16).await.unwrap()).await;
    let started = std::time::Instant::now();
    load(&direct_base, "direct", orders, &failed, &retried).await;
    let direct_took = started.elapsed();

    // Named, cached statements (sqlx's default) through the pooler: the
    // statement prepared on one server connection is looked for on another.
    let named = Store::connect_postgres(&bouncer.url(&database), 16)
        .await
        .unwrap();
    let broken = {
        let base = serve(named.clone()).await;
        let http = reqwest::Client::new();
        let sends = (0..200).map(|i| {
            let (http, base) = (http.clone(), base.clone());
            async move {
                http.post(format!("{base}/charges"))
                    .header("x-account-id", "acct_1")
                    .header("idempotency-key", format!("named-{i}"))
                    .body(format!("named-{i}"))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            }
        });
        let statuses = futures_util::future::join_all(sends).await;
        statuses.iter().filter(|s| **s != 201).count()
    };
    named.pool().close().await;
    eprintln!("named statements through PgBouncer: {broken} of 200 requests failed");
    assert!(
        broken > 0,
        "named statements were expected to fail through PgBouncer 1.18"
    );

    // Behind the pooler, declared: unnamed statements, each in a transaction.
    let pooled = Store::connect_postgres_pooled(&bouncer.url(&database), 16)
        .await
        .unwrap();
    pooled.migrate().await.unwrap();
    let pooled_settings = pooled.settings().clone();
    let base = serve(pooled).await;
    let started = std::time::Instant::now();
    load(&base, "calm", orders, &failed, &retried).await;
    let pooled_took = started.elapsed();
    eprintln!(
        "{} requests ({orders} keys, 3 each at once): {:.0} req/s direct, {:.0} req/s through \
         PgBouncer (3 server connections for 16 clients)",
        orders * 3,
        (orders * 3) as f64 / direct_took.as_secs_f64(),
        (orders * 3) as f64 / pooled_took.as_secs_f64()
    );
    // Under load, PgBouncer is killed and started again.
    let before_restart = retried.load(Ordering::SeqCst);
    let during = load(&base, "restart", orders * 2, &failed, &retried);
    let restart = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        bouncer.kill();
        tokio::time::sleep(Duration::from_millis(500)).await;
        bouncer.start();
        eprintln!("pgbouncer killed under load and started again");
    };
    tokio::join!(during, restart);

    let refused = retried.load(Ordering::SeqCst) - before_restart;
    eprintln!("{refused} attempts answered 503 or cut off around the restart, then retried");
    assert!(refused > 0, "the restart came after the load had finished");
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "answers no retry could fix"
    );
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT order_id, COUNT(*) FROM pgb_charges WHERE order_id NOT LIKE 'named-%' \
         GROUP BY order_id",
    )
    .fetch_all(&direct)
    .await
    .unwrap();
    let duplicates: Vec<_> = rows.iter().filter(|(_, n)| *n > 1).collect();
    assert!(
        duplicates.is_empty(),
        "charged more than once: {duplicates:?}"
    );
    assert_eq!(rows.len(), orders * 4, "every order charged, none lost");

    // Two stores in one process: the one behind PgBouncer runs unnamed
    // statements, and one reaching PostgreSQL directly still names and
    // caches its own, as PostgreSQL's list of the connection's prepared
    // statements shows.
    assert!(!pooled_settings.named_statements());
    let direct_store = Store::connect_postgres(&direct_url, 2).await.unwrap();
    assert!(direct_store.settings().named_statements());
    let mut tx = direct_store.pool().begin().await.unwrap();
    let claim = NewClaim {
        scope: "acct_2",
        key: "two-stores",
        fingerprint: "fp",
        operation: Some("charge"),
        request: None,
        now: 1_000,
    };
    let won = Postgres::claim(
        &mut tx,
        direct_store.settings(),
        &claim,
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert_eq!(won, Some(1));
    let prepared: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO idem_keys%'",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(prepared, 1, "the direct store's claim is a named statement");
    tx.rollback().await.unwrap();
    let behind = base.clone();
    let answered = reqwest::Client::new()
        .post(format!("{behind}/charges"))
        .header("x-account-id", "acct_2")
        .header("idempotency-key", "after-two-stores")
        .body("after-two-stores")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(
        answered,
        StatusCode::CREATED,
        "the pooled store still answers"
    );
}
