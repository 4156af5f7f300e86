//! PostgreSQL through PgBouncer in transaction pooling mode: first what
//! sqlx's statements do through it, then three `payments-demo serve`
//! processes through one PgBouncer whose pool is smaller than their
//! connections, under keyed load where every call goes to two servers at
//! once with the same key, against the same three servers connected
//! directly; last, the same through PgBouncer killed and started again in
//! the middle. The database is counted after each: duplicated charges,
//! acknowledged charges missing, keys stuck in flight.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use idem_runtime::sqlx;

use crate::api::Client;
use crate::cluster::Cluster;
use crate::demo::Server;
use crate::faults::{Log, recorder};
use crate::load::{self, Kind, Load};

/// What the scenario runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Workers, each making one call (two requests) at a time.
    pub workers: usize,
    /// Seconds of load per row.
    pub seconds: u64,
    /// PgBouncer's `default_pool_size`: server connections per database.
    pub pool_size: u32,
    pub pg_bin: PathBuf,
    pub pgbouncer: PathBuf,
}

/// `pgbouncer` under `/usr/sbin` or on `PATH`.
pub fn find_pgbouncer() -> Option<PathBuf> {
    let fixed = PathBuf::from("/usr/sbin/pgbouncer");
    if fixed.is_file() {
        return Some(fixed);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("pgbouncer"))
            .find(|p| p.is_file())
    })
}

/// Whether this process runs as root (PgBouncer then runs as `postgres`).
fn root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// A PgBouncer in front of one server, in transaction pooling mode.
struct Bouncer {
    binary: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<tokio::process::Child>,
}

impl Bouncer {
    async fn start(binary: &Path, upstream: u16, pool_size: u32) -> anyhow::Result<Bouncer> {
        let dir = tempfile::Builder::new()
            .prefix("idem-pgbouncer-")
            .tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let users = dir.path().join("users.txt");
        std::fs::write(&users, "\"postgres\" \"\"\n")?;
        std::fs::write(
            dir.path().join("pgbouncer.ini"),
            format!(
                "[databases]\n* = host=127.0.0.1 port={upstream}\n\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {}\npool_mode = transaction\n\
                 default_pool_size = {pool_size}\nmin_pool_size = 0\nmax_client_conn = 1000\n\
                 ignore_startup_parameters = extra_float_digits\nlogfile = {}\n",
                users.display(),
                dir.path().join("pgbouncer.log").display(),
            ),
        )?;
        if root() {
            let status = std::process::Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir.path())
                .status()?;
            anyhow::ensure!(status.success(), "cannot hand {:?} to postgres", dir.path());
        }
        let mut bouncer = Bouncer {
            binary: binary.to_owned(),
            dir,
            port,
            child: None,
        };
        bouncer.up().await?;
        Ok(bouncer)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    async fn up(&mut self) -> anyhow::Result<()> {
        // PgBouncer refuses to run as root: as root it runs as `postgres`,
        // exec'd by setpriv so that the child is PgBouncer itself.
        let mut command = if root() {
            let mut c = tokio::process::Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"])
                .arg(&self.binary);
            c
        } else {
            tokio::process::Command::new(&self.binary)
        };
        command
            .arg(self.dir.path().join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        self.child = Some(command.spawn().context("cannot start pgbouncer")?);
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        anyhow::bail!("pgbouncer did not listen on {} within 5 s", self.port)
    }

    /// SIGKILL, and started again once its port is free: every client
    /// connection is cut, and new ones are refused meanwhile.
    async fn restart(&mut self) -> anyhow::Result<Duration> {
        let began = Instant::now();
        if let Some(mut child) = self.child.take() {
            child.start_kill()?;
            child.wait().await?;
        }
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        self.up().await?;
        Ok(began.elapsed())
    }
}

/// What one way of sending statements did through PgBouncer.
#[derive(Debug, Clone)]
pub struct Probe {
    pub mode: &'static str,
    pub queries: usize,
    /// Queries that failed (`prepared statement … does not exist`, …).
    pub errors: usize,
    /// Queries that returned a result other than their own, silently.
    pub wrong: usize,
    /// One of the errors.
    pub example: Option<String>,
}

/// One row of load.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub path: String,
    pub calls: usize,
    pub requests: usize,
    pub per_second: f64,
    pub duplicates: usize,
    pub lost: usize,
    pub stuck: usize,
    /// Answers that told the caller not to retry.
    pub non_retryable: usize,
    pub unknown: usize,
    pub reconciled: usize,
    /// How long PgBouncer was away, when it was restarted.
    pub restart: Option<Duration>,
}

/// Everything the scenario measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub probes: Vec<Probe>,
    pub rows: Vec<Row>,
}

impl Outcome {
    /// What idem promises through a transaction pooler: its way of sending
    /// statements is exact, and no call is lost or done twice.
    pub fn holds(&self) -> bool {
        self.probes
            .iter()
            .filter(|p| p.mode == UNNAMED_IN_TRANSACTION)
            .all(|p| p.errors == 0 && p.wrong == 0)
            && self.rows.iter().all(|r| {
                r.duplicates == 0
                    && r.lost == 0
                    && r.stuck == 0
                    && r.non_retryable == 0
                    && r.reconciled == r.unknown
            })
    }
}

const UNNAMED_IN_TRANSACTION: &str = "unnamed, inside a transaction (idem's)";

/// Sends `SELECT $1::int8 + <task>` from 16 tasks, 50 times each, through
/// `url`, as `mode` says, and checks every answer.
async fn probe(url: &str, mode: &'static str) -> anyhow::Result<Probe> {
    use std::str::FromStr as _;
    let named = mode.starts_with("named");
    let mut options = sqlx::postgres::PgConnectOptions::from_str(url)?;
    if mode.contains("no cache") || !named {
        options = options.statement_cache_capacity(0);
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect_with(options)
        .await?;
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..16_i64 {
        let pool = pool.clone();
        tasks.spawn(async move {
            // Each task its own statement text: a statement of another
            // client answers with another sum.
            let sql = format!("SELECT $1::int8 + {task}");
            let (mut errors, mut wrong, mut example) = (0, 0, None);
            for n in 0..50_i64 {
                let query = sqlx::query_scalar::<_, i64>(&sql).persistent(named).bind(n);
                let got = if mode == UNNAMED_IN_TRANSACTION {
                    match pool.begin().await {
                        Ok(mut tx) => {
                            let got = query.fetch_one(&mut *tx).await;
                            let _ = tx.commit().await;
                            got
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    query.fetch_one(&pool).await
                };
                match got {
                    Ok(v) if v == n + task => {}
                    Ok(_) => wrong += 1,
                    Err(e) => {
                        errors += 1;
                        example.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (errors, wrong, example)
        });
    }
    let mut probe = Probe {
        mode,
        queries: 16 * 50,
        errors: 0,
        wrong: 0,
        example: None,
    };
    while let Some(done) = tasks.join_next().await {
        let (errors, wrong, example) = done?;
        probe.errors += errors;
        probe.wrong += wrong;
        if probe.example.is_none() {
            probe.example = example;
        }
    }
    pool.close().await;
    Ok(probe)
}

/// Runs the probes and the three rows.
pub async fn run(settings: &Settings) -> anyhow::Result<Outcome> {
    let cluster = Cluster::start(&settings.pg_bin).await?;
    let mut bouncer =
        Bouncer::start(&settings.pgbouncer, cluster.port(), settings.pool_size).await?;
    eprintln!("pgbouncer: sqlx's statements through it…");
    let mut probes = Vec::new();
    for mode in [
        "named, cached (sqlx's default)",
        "named, no cache (statement_cache_capacity(0))",
        "unnamed, outside a transaction",
        UNNAMED_IN_TRANSACTION,
    ] {
        probes.push(probe(&bouncer.url(), mode).await?);
    }
    let mut rows = Vec::new();
    eprintln!("pgbouncer: three servers, directly…");
    let direct = cluster.url();
    rows.push(
        row(
            settings,
            (&direct, &direct),
            false,
            None,
            "direct, 3 × 16 connections",
        )
        .await?,
    );
    eprintln!("pgbouncer: three servers through PgBouncer…");
    let path = format!(
        "PgBouncer, 3 × 16 clients on {} server connections",
        settings.pool_size
    );
    let url = bouncer.url();
    rows.push(row(settings, (&url, &direct), true, None, &path).await?);
    eprintln!("pgbouncer: the same, PgBouncer killed and started again midway…");
    let path = format!("{path}, PgBouncer killed midway");
    rows.push(row(settings, (&url, &direct), true, Some(&mut bouncer), &path).await?);
    Ok(Outcome { probes, rows })
}

/// `url` is where the servers connect; `direct` where the database is
/// counted afterwards.
async fn row(
    settings: &Settings,
    (url, direct): (&str, &str),
    pooled: bool,
    restart: Option<&mut Bouncer>,
    path: &str,
) -> anyhow::Result<Row> {
    let began = Instant::now();
    let log: Log = Arc::default();
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let extra = if pooled {
            vec!["--fake-bank".to_owned(), "--behind-pooler".to_owned()]
        } else {
            vec!["--fake-bank".to_owned()]
        };
        let mut server = Server::new(url, extra)?;
        server.start().await?;
        let entry = recorder(server.listen(), began, Arc::clone(&log)).await?;
        clients.push(Client::new(&format!("http://{entry}"))?);
        servers.push(server);
    }
    let account = format!("acct-{:08x}", rand::random::<u32>());
    let started = Instant::now();
    let charges = Load::start(Kind::Charge, &clients, settings.workers, &account, 2, 0);
    let whole = Duration::from_secs(settings.seconds);
    let mut restarted = None;
    if let Some(bouncer) = restart {
        tokio::time::sleep(whole / 2).await;
        restarted = Some(bouncer.restart().await?);
        tokio::time::sleep(whole / 2).await;
    } else {
        tokio::time::sleep(whole).await;
    }
    let mut done = charges.stop(0).await;
    let elapsed = started.elapsed();
    let unknown = done.pending.len();
    let reconciled = load::reconcile(&clients[0], Kind::Charge, &account, &mut done).await;
    for server in &mut servers {
        server.kill().await?;
    }
    let counted = load::count_charges(direct, &account, &done.acked).await?;
    let answers = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Ok(Row {
        path: path.to_owned(),
        calls: done.calls,
        requests: done.sent,
        per_second: done.calls as f64 / elapsed.as_secs_f64(),
        duplicates: counted.duplicates,
        lost: counted.lost,
        stuck: counted.stuck,
        non_retryable: answers
            .iter()
            .filter(|a| a.status >= 400 && a.retryable != Some(true))
            .count(),
        unknown,
        reconciled,
        restart: restarted,
    })
}

/// The tables.
pub fn report(settings: &Settings, outcome: &Outcome) -> String {
    let mut out = format!(
        "PgBouncer in transaction pooling mode, default_pool_size = {}\n\n\
         sqlx's statements through it (16 clients × 50 queries, each client its own statement):\n\n\
         | statements | queries | errors | wrong results | first error |\n\
         | --- | ---: | ---: | ---: | --- |\n",
        settings.pool_size
    );
    for p in &outcome.probes {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            p.mode,
            p.queries,
            p.errors,
            p.wrong,
            p.example.as_deref().unwrap_or("-")
        ));
    }
    out.push_str(&format!(
        "\nthree servers, {} workers, each call sent to two servers at once with one key, {} s per row:\n\n\
         | path | calls | requests | calls/s | dup | lost | stuck | non-retryable | unknown | settled | PgBouncer away ms |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        settings.workers, settings.seconds
    ));
    for r in &outcome.rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.path,
            r.calls,
            r.requests,
            r.per_second,
            r.duplicates,
            r.lost,
            r.stuck,
            r.non_retryable,
            r.unknown,
            r.reconciled,
            r.restart.map_or("-".to_owned(), |d| format!(
                "{:.0}",
                d.as_secs_f64() * 1000.0
            )),
        ));
    }
    out
}
