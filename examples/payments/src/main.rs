//! The payments demo binary: `payments-demo` runs the scenario,
//! `payments-demo serve` the generated server it starts and kills.

use payments_demo::{demo, server};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// Serve the generated payments API (what the demo starts and kills).
    Serve {
        #[arg(long)]
        database_url: String,
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// The bank payouts go through.
        #[arg(long)]
        bank_url: Option<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let result = match args.command {
        Some(Command::Serve {
            database_url,
            listen,
            bank_url,
        }) => server::serve(&database_url, listen, bank_url)
            .await
            .map(|()| true),
        None => scenario(&args).await,
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
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
        "reference simulation (2,000 orders, plain retries): 337 duplicates.\n\
         unknown: calls the client gave up on (retry budget spent, deadline); reconciled: settled by calling again with the key the error carried."
    );
    println!("docs page: {}", args.out.join("idempotency.html").display());
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
