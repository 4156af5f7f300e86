//! The payments demo binary: `payments-demo` runs the scenario,
//! `payments-demo serve` the generated server it starts and kills.

use payments_demo::{demo, server};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    about = "2,000 charges through a lossy network and a crashing server, with and without idem"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Orders to charge per row.
    #[arg(long, default_value_t = 2000)]
    orders: usize,
    /// Share of replies the network loses after the server has answered.
    #[arg(long, default_value_t = 0.15)]
    loss: f64,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// The store (default: a fresh embedded SQLite file); `postgres://…` for PostgreSQL.
    #[arg(long)]
    database_url: Option<String>,
    /// Where the docs page is written.
    #[arg(long, default_value = "target/payments-demo")]
    out: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Payouts while the bank is down, then healthy: the server's own
    /// retries, call by call.
    Outage {
        /// Payouts sent (once each) while the bank is down.
        #[arg(long, default_value_t = 100)]
        payouts: usize,
        /// Seconds the bank answers 503.
        #[arg(long, default_value_t = 300)]
        down_secs: u64,
        /// The store (default: a fresh embedded SQLite file).
        #[arg(long)]
        database_url: Option<String>,
        /// Replace the spec's resume schedule: backoff base in ms.
        #[arg(long, requires = "resume_attempts")]
        resume_base_ms: Option<u64>,
        /// Replace the spec's resume schedule: runs per payout.
        #[arg(long, requires = "resume_base_ms")]
        resume_attempts: Option<u32>,
    },
    /// Database faults under keyed load through the generated client, on a
    /// private PostgreSQL cluster: what callers saw, and what was stored.
    Faults {
        /// The faults to inject (default: all, in order).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<payments_demo::faults::Fault>,
        /// Workers, each charging one order at a time with its own key.
        #[arg(long, default_value_t = 20)]
        workers: usize,
        /// Seconds the database stays down, hung, or has its backends
        /// terminated.
        #[arg(long, default_value_t = 30)]
        outage_secs: u64,
        /// Seconds of load before each fault and after the database is back.
        #[arg(long, default_value_t = 5)]
        settle_secs: u64,
        /// PostgreSQL's server binaries (initdb, pg_ctl); found under
        /// IDEM_PG_BIN, /usr/lib/postgresql or PATH when not given.
        #[arg(long)]
        pg_bin: Option<std::path::PathBuf>,
    },
    /// PostgreSQL failing over under keyed load: a primary and a streaming
    /// standby, two servers given both hosts; the primary killed or fenced,
    /// the standby promoted. What was lost, done twice, and how long it took.
    Failover {
        /// The scenarios (default: all, in order).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<payments_demo::failover::Scenario>,
        /// Workers charging orders, each call with its own key.
        #[arg(long, default_value_t = 16)]
        workers: usize,
        /// Workers paying out through the bank stub.
        #[arg(long, default_value_t = 4)]
        payout_workers: usize,
        /// Seconds of load before the failover and after it.
        #[arg(long, default_value_t = 5)]
        settle_secs: u64,
        /// Milliseconds the standby is cut off its primary before the
        /// primary is killed: how far behind it is.
        #[arg(long, default_value_t = 1000)]
        standby_lag_ms: u64,
        /// PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup);
        /// found under IDEM_PG_BIN, /usr/lib/postgresql or PATH when not given.
        #[arg(long)]
        pg_bin: Option<std::path::PathBuf>,
    },
    /// Through PgBouncer in transaction pooling mode: what sqlx's
    /// statements do through it, then three servers under keyed load with
    /// concurrent duplicates, directly, through PgBouncer, and through a
    /// PgBouncer killed midway.
    Pgbouncer {
        /// Workers, each sending one call to two servers at once.
        #[arg(long, default_value_t = 24)]
        workers: usize,
        /// Seconds of load per row.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// PgBouncer's default_pool_size (server connections).
        #[arg(long, default_value_t = 4)]
        pool_size: u32,
        /// PostgreSQL's server binaries; found under IDEM_PG_BIN,
        /// /usr/lib/postgresql or PATH when not given.
        #[arg(long)]
        pg_bin: Option<std::path::PathBuf>,
        /// The pgbouncer binary; /usr/sbin/pgbouncer or PATH when not given.
        #[arg(long)]
        pgbouncer: Option<std::path::PathBuf>,
    },
    /// A three-node MariaDB Galera cluster on loopback, one server per node:
    /// concurrent duplicates over three nodes, a node killed under load,
    /// payouts with their node killed between phases.
    Galera {
        /// The scenarios (default: all, in order).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<payments_demo::galera::Scenario>,
        /// Workers, each making one call at a time.
        #[arg(long, default_value_t = 12)]
        workers: usize,
        /// Copies of each charge, sent at once over the three servers.
        #[arg(long, default_value_t = 20)]
        copies: usize,
        /// Seconds of load per scenario (before and after a fault, each).
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// mariadbd; /usr/sbin/mariadbd or PATH when not given.
        #[arg(long)]
        mariadbd: Option<std::path::PathBuf>,
        /// The Galera provider; /usr/lib/galera/libgalera_smm.so when not given.
        #[arg(long)]
        galera: Option<std::path::PathBuf>,
    },
    /// PostgreSQL under Patroni: etcd, three Patroni members and HAProxy on
    /// loopback, two servers (through HAProxy, and given the host list)
    /// under keyed load; the leader killed, hung and resumed, switched
    /// over, a synchronous standby lost, etcd stopped. What was lost, done
    /// twice, or answered by a member that was not the leader.
    Patroni {
        /// The scenarios (default: all, in order).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<payments_demo::patroni::Scenario>,
        /// Workers charging orders, each call with its own key.
        #[arg(long, default_value_t = 12)]
        workers: usize,
        /// Workers paying out through the bank stub.
        #[arg(long, default_value_t = 3)]
        payout_workers: usize,
        /// Seconds of load before the fault and after it.
        #[arg(long, default_value_t = 5)]
        settle_secs: u64,
        /// The `patroni` executable (default: Patroni from PyPI, in a
        /// virtual environment created under the temporary directory).
        #[arg(long)]
        patroni: Option<std::path::PathBuf>,
        /// Run the scenarios on one cluster, healed between them, where
        /// their synchronous modes agree (faster; each row's cluster then
        /// starts as the last one left it).
        #[arg(long)]
        one_cluster: bool,
        /// An `idem` executable: each row then says which member `idem
        /// keys stats --patroni` names (it must be the leader).
        #[arg(long)]
        idem: Option<std::path::PathBuf>,
        /// HAProxy without `on-marked-down shutdown-sessions`: what keeping
        /// the sessions to a member marked down does.
        #[arg(long)]
        haproxy_keeps_sessions: bool,
        /// PostgreSQL's server binaries; found under IDEM_PG_BIN,
        /// /usr/lib/postgresql or PATH when not given.
        #[arg(long)]
        pg_bin: Option<std::path::PathBuf>,
    },
    /// Serve the generated payments API (what the demo starts and kills).
    Serve {
        #[arg(long)]
        database_url: String,
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// The bank payouts go through.
        #[arg(long, conflicts_with = "fake_bank")]
        bank_url: Option<String>,
        /// Start the demo's fake bank in this process (always accepting) and
        /// pay out through it: what a peer API tester runs against.
        #[arg(long)]
        fake_bank: bool,
        /// Replace the spec's resume schedule: backoff base in ms.
        #[arg(long, requires = "resume_attempts")]
        resume_base_ms: Option<u64>,
        /// Replace the spec's resume schedule: runs per payout.
        #[arg(long, requires = "resume_base_ms")]
        resume_attempts: Option<u32>,
        /// Answer `GET /metrics` (Prometheus' text format) on this address,
        /// a listener of its own.
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<SocketAddr>,
        /// The database URL reaches PostgreSQL through a pooler in
        /// transaction pooling mode (PgBouncer's `pool_mode = transaction`).
        #[arg(long)]
        behind_pooler: bool,
    },
}

const NO_PG_BIN: &str = "no PostgreSQL server binaries (initdb, pg_ctl) found: install \
                         PostgreSQL or pass --pg-bin DIR";

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut args = Args::parse();
    let result = match args.command.take() {
        Some(command) => run(command).await,
        None => scenario(&args).await,
    };
    // 0: every check held; 1: one did not; 2: the run could not happen.
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs a subcommand: whether what it checks held.
async fn run(command: Command) -> anyhow::Result<bool> {
    match command {
        Command::Serve {
            database_url,
            listen,
            bank_url,
            fake_bank,
            resume_base_ms,
            resume_attempts,
            metrics_listen,
            behind_pooler,
        } => {
            if let Some(addr) = metrics_listen {
                server::serve_metrics(addr).await?;
            }
            // Kept alive while serving.
            let bank = if fake_bank {
                Some(
                    payments_demo::bank::Bank::start()
                        .await
                        .context("the fake bank did not start")?,
                )
            } else {
                None
            };
            let bank_url = bank_url.or_else(|| bank.as_ref().map(|b| b.url().to_owned()));
            let resume = resume_base_ms
                .zip(resume_attempts)
                .map(|(base, attempts)| resume_policy(base, attempts));
            server::serve(&database_url, listen, bank_url, resume, behind_pooler).await?;
            Ok(true)
        }
        Command::Outage {
            payouts,
            down_secs,
            database_url,
            resume_base_ms,
            resume_attempts,
        } => {
            use payments_demo::outage;
            let settings = outage::Settings {
                payouts,
                down: std::time::Duration::from_secs(down_secs),
                database_url,
                resume: resume_base_ms
                    .zip(resume_attempts)
                    .map(|(base, runs)| (std::time::Duration::from_millis(base), runs)),
            };
            let outcome = outage::run(&settings).await?;
            print!("{}", outage::report(&settings, &outcome));
            Ok(outcome.holds(payouts))
        }
        Command::Faults {
            only,
            workers,
            outage_secs,
            settle_secs,
            pg_bin,
        } => {
            use payments_demo::faults;
            let settings = faults::Settings {
                faults: all_unless(only, &faults::Fault::ALL),
                workers,
                outage: std::time::Duration::from_secs(outage_secs),
                settle: std::time::Duration::from_secs(settle_secs),
                pg_bin: pg_bin_or_found(pg_bin)?,
            };
            let outcomes = faults::run(&settings).await?;
            print!("{}", faults::report(&settings, &outcomes));
            Ok(outcomes.iter().all(faults::Outcome::holds))
        }
        Command::Failover {
            only,
            workers,
            payout_workers,
            settle_secs,
            standby_lag_ms,
            pg_bin,
        } => {
            use payments_demo::failover;
            let settings = failover::Settings {
                lag: std::time::Duration::from_millis(standby_lag_ms),
                scenarios: all_unless(only, &failover::Scenario::ALL),
                workers,
                payout_workers,
                settle: std::time::Duration::from_secs(settle_secs),
                pg_bin: pg_bin_or_found(pg_bin)?,
            };
            let outcomes = failover::run(&settings).await?;
            print!("{}", failover::report(&settings, &outcomes));
            Ok(outcomes.iter().all(failover::Outcome::holds))
        }
        Command::Pgbouncer {
            workers,
            seconds,
            pool_size,
            pg_bin,
            pgbouncer,
        } => {
            use payments_demo::pgbouncer as bouncer;
            let settings = bouncer::Settings {
                workers,
                seconds,
                pool_size,
                pg_bin: pg_bin_or_found(pg_bin)?,
                pgbouncer: pgbouncer.or_else(bouncer::find_pgbouncer).context(
                    "no pgbouncer found: install it (Debian: apt-get install pgbouncer) or \
                     pass --pgbouncer PATH",
                )?,
            };
            let outcome = bouncer::run(&settings).await?;
            print!("{}", bouncer::report(&settings, &outcome));
            Ok(outcome.holds())
        }
        Command::Galera {
            only,
            workers,
            copies,
            seconds,
            mariadbd,
            galera,
        } => {
            use payments_demo::galera as cluster;
            let (mariadbd, provider) = galera_binaries(mariadbd, galera)?;
            let settings = cluster::Settings {
                scenarios: all_unless(only, &cluster::Scenario::ALL),
                workers,
                copies,
                seconds,
                mariadbd,
                provider,
            };
            let outcomes = cluster::run(&settings).await?;
            print!("{}", cluster::report(&settings, &outcomes));
            Ok(outcomes.iter().all(cluster::Outcome::holds))
        }
        Command::Patroni {
            only,
            workers,
            payout_workers,
            settle_secs,
            patroni,
            one_cluster,
            idem,
            haproxy_keeps_sessions,
            pg_bin,
        } => {
            use payments_demo::patroni as cluster;
            let pg_bin = pg_bin
                .or_else(payments_demo::faults::find_pg_bin)
                .context(NO_PG_BIN)?;
            let tool = |name: &str, package: &str| {
                cluster::find_tool(name).with_context(|| {
                    format!("no `{name}` found: install it (Debian: apt-get install {package})")
                })
            };
            let settings = cluster::Settings {
                scenarios: all_unless(only, &cluster::Scenario::ALL),
                workers,
                payout_workers,
                settle: std::time::Duration::from_secs(settle_secs),
                patroni: match patroni {
                    Some(path) => path,
                    None => cluster::patroni_from_pypi().await?,
                },
                pg_bin,
                etcd: tool("etcd", "etcd-server")?,
                haproxy: tool("haproxy", "haproxy")?,
                one_cluster,
                idem,
                haproxy_keeps_sessions,
            };
            let outcomes = cluster::run(&settings).await?;
            print!("{}", cluster::report(&settings, &outcomes));
            Ok(outcomes.iter().all(cluster::Outcome::holds))
        }
    }
}

/// The server's resume schedule from `--resume-base-ms` and
/// `--resume-attempts`: doubling from `base_ms`, capped at 64 times it.
fn resume_policy(base_ms: u64, attempts: u32) -> idem_runtime::server::ResumePolicy {
    let base = std::time::Duration::from_millis(base_ms);
    idem_runtime::server::ResumePolicy {
        max_attempts: attempts,
        base,
        cap: base * 64,
        ..idem_runtime::server::ResumePolicy::default()
    }
}

/// `--mariadbd` and `--galera`, or what this machine has installed.
fn galera_binaries(
    mariadbd: Option<PathBuf>,
    galera: Option<PathBuf>,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    use payments_demo::galera::{find_galera, find_mariadbd};
    match (mariadbd.or_else(find_mariadbd), galera.or_else(find_galera)) {
        (Some(mariadbd), Some(provider)) => Ok((mariadbd, provider)),
        _ => anyhow::bail!(
            "no mariadbd or Galera provider found: install them (Debian: apt-get install \
             mariadb-server galera-4 rsync) or pass --mariadbd and --galera"
        ),
    }
}

/// The scenarios `--only` names, or every one.
fn all_unless<T: Clone>(only: Vec<T>, all: &[T]) -> Vec<T> {
    if only.is_empty() { all.to_vec() } else { only }
}

/// `--pg-bin`, or the PostgreSQL binaries found on this machine.
fn pg_bin_or_found(pg_bin: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    pg_bin
        .or_else(payments_demo::faults::find_pg_bin)
        .context(NO_PG_BIN)
}

async fn scenario(args: &Args) -> anyhow::Result<bool> {
    let store = match &args.database_url {
        Some(url) if url.starts_with("postgres") => "PostgreSQL",
        _ => "embedded SQLite",
    };
    println!(
        "payments demo: fixtures/payments.yaml audited and generated at build time (server, client, docs)"
    );
    println!(
        "{} orders per row, {:.0}% of replies lost after the server answered, {} in flight, {store}\n",
        args.orders,
        args.loss * 100.0,
        args.concurrency
    );
    let settings = demo::Settings {
        orders: args.orders,
        loss: args.loss,
        concurrency: args.concurrency,
        database_url: args.database_url.clone(),
        out: args.out.clone(),
    };
    let rows = demo::run(&settings).await?;
    println!("\n{}", demo::table(&rows));
    println!(
        "unknown: idem, the calls the client gave up on (retry budget spent, deadline); \
         control, the orders whose four tries all failed (an error, or no answer in 300 ms).\n\
         reconciled: settled by calling again with the key the error carried."
    );
    println!("docs page: {}", args.out.join("idempotency.html").display());
    if let Some(idem) = rows.first() {
        println!(
            "idem: {} answers were replays (`.send_with_response()`, `.replayed()`): the first \
             reply was lost, the retry got the stored charge.",
            idem.replayed
        );
    }
    let ok = rows
        .first()
        .is_some_and(|idem| idem.duplicates == 0 && idem.lost == 0 && idem.overcharged == 0);
    if ok {
        println!("idem: 0 duplicates, 0 lost.");
    } else {
        println!("idem: FAILED: duplicates or lost charges through idem.");
    }
    Ok(ok)
}
