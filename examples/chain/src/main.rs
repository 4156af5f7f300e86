//! `chain bench`: retry amplification through three layers of generated
//! servers and clients, each its own process, the bottom one's database
//! down; then an overload test of the admission limit. `chain layer` is one
//! layer (what the bench starts).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use chain_demo::{Layer, Mode, api, run};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(about = "Retries through a three-layer chain, and overload, measured")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure: the chain in three configurations, then overload.
    Bench {
        /// Only the overload test.
        #[arg(long)]
        overload_only: bool,
        /// User requests per configuration.
        #[arg(long, default_value_t = 1000)]
        requests: usize,
        /// User requests in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Callers offered to the slow route (its limit is 32).
        #[arg(long, default_value_t = 96)]
        offered: usize,
    },
    /// Serve one layer.
    Layer {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        database_url: String,
        #[arg(long)]
        depth: i32,
        /// The layer below; none at the bottom, whose database is down.
        #[arg(long)]
        next: Option<String>,
        #[arg(long, value_enum, default_value = "idem")]
        mode: Mode,
        #[arg(long, default_value_t = 0)]
        budget_retries: u32,
        #[arg(long, default_value_t = 20)]
        slow_ms: u64,
        /// At the bottom: the database is up, and doWork takes --slow-ms.
        #[arg(long)]
        database_up: bool,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    match Args::parse().command {
        Command::Layer {
            listen,
            database_url,
            depth,
            next,
            mode,
            budget_retries,
            slow_ms,
            database_up,
        } => {
            let next = match next {
                Some(url) => match api::Client::with_retry_client(
                    &url,
                    chain_demo::retry_client(mode, budget_retries),
                ) {
                    Ok(c) => Some(c),
                    Err(e) => return fail(e),
                },
                None => None,
            };
            let layer = Layer {
                depth,
                next,
                mode,
                slow: Duration::from_millis(slow_ms),
                calls: AtomicI64::new(0),
                database: None,
            };
            match chain_demo::serve(layer, listen, &database_url, database_up).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Command::Bench {
            overload_only,
            requests,
            concurrency,
            offered,
        } => match bench(requests, concurrency, offered, overload_only).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => fail(e),
        },
    }
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(2)
}

async fn bench(
    requests: usize,
    concurrency: usize,
    offered: usize,
    overload_only: bool,
) -> anyhow::Result<bool> {
    let exe = std::env::current_exe()?;
    let mut ok = true;
    if !overload_only {
        ok = chains(&exe, requests, concurrency).await?;
    }
    let o = run::overload(&exe, offered, 20, 3.0).await?;
    ok &= o.server_p99 < Duration::from_millis(1);
    println!(
        "\noverload: {} callers on GET /v1/slow (20 ms each, admission limit {}), 3 s",
        o.offered, o.limit
    );
    println!(
        "  refused {:>7}  p50 {:>7.3} ms  p99 {:>7.3} ms  in the server (request in to 503 out)",
        o.refused,
        o.server_p50.as_secs_f64() * 1e3,
        o.server_p99.as_secs_f64() * 1e3
    );
    println!(
        "  refused {:>7}  p50 {:>7.3} ms  p99 {:>7.3} ms  at the callers (round trip, same 2 cores)",
        o.refused,
        o.refused_p50.as_secs_f64() * 1e3,
        o.refused_p99.as_secs_f64() * 1e3
    );
    println!(
        "  accepted {:>6}  p50 {:>7.3} ms  p99 {:>7.3} ms  goodput {:.0}/s of an ideal {:.0}/s",
        o.accepted,
        o.accepted_p50.as_secs_f64() * 1e3,
        o.accepted_p99.as_secs_f64() * 1e3,
        o.goodput,
        o.ideal
    );
    Ok(ok)
}

async fn chains(
    exe: &std::path::Path,
    requests: usize,
    concurrency: usize,
) -> anyhow::Result<bool> {
    println!(
        "{requests} user requests, {concurrency} in flight, through top -> middle -> bottom (database down)\n"
    );
    println!(
        "{:<44} {:>14} {:>9} {:>14} {:>13} {:>8}",
        "configuration", "bottom calls", "x users", "seed figure", "slowest (ms)", "seconds"
    );
    let mut ok = true;
    for (mode, label, seed) in [
        (Mode::Idem, "idem defaults (inner hops do not retry)", "-"),
        (
            Mode::Retry,
            "4 attempts at every layer, no budget",
            "64,000",
        ),
        (
            Mode::Budget,
            "4 attempts at every layer, 10% budget",
            "1,331",
        ),
    ] {
        let r = run::chain(exe, mode, requests, concurrency).await?;
        let ratio = r.bottom as f64 / requests as f64;
        println!(
            "{label:<44} {:>14} {:>9.2} {:>14} {:>13} {:>8.1}",
            r.bottom,
            ratio,
            seed,
            r.slowest.as_millis(),
            r.seconds
        );
        if mode == Mode::Idem {
            let within = r.overrun <= Duration::from_millis(50);
            ok &= ratio <= 1.1 && within;
            println!(
                "{:<44} goal: <= 1.10 x users, every request within its deadline + 50 ms: {}",
                "",
                if ratio <= 1.1 && within {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
    }
    Ok(ok)
}
