//! Database faults under keyed load: a private PostgreSQL cluster is
//! restarted, crashed, stopped, hung and has its backends terminated while
//! workers charge orders through the generated client, each logical charge
//! with its own key. Every answer the server gives is recorded on the way
//! (status, code, latency, the deadline the attempt carried); afterwards the
//! calls that ended unknown are reconciled with their keys, and the database
//! is counted: duplicates, lost charges, keys left in flight.
//!
//! `payments-demo faults` runs it and prints a table; it exits 1 when a
//! charge was duplicated or lost, a key was left in flight, a fault reached
//! a caller as a non-retryable answer, an answer came after its caller's
//! deadline, or a payout's bank transfer happened other than once.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use idem_runtime::sqlx;

use crate::api::Client;
use crate::bank::Bank;
use crate::cluster::Cluster;
pub use crate::cluster::find_pg_bin;
use crate::demo::{Server, forward, order_body};
use crate::load::{charge_params, payout_body, payout_params};

/// A fault the scenarios inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// `pg_ctl restart -m fast`.
    Restart,
    /// SIGKILL of the postmaster; started again 5 s later.
    Crash,
    /// Stopped (`-m fast`) for the outage, then started.
    Down,
    /// Every client backend terminated every 2 s for the outage.
    Terminate,
    /// SIGSTOP of every PostgreSQL process for the outage, then SIGCONT: a
    /// database that hangs rather than refuses.
    Hang,
    /// Phased payouts in flight (the bank answering slowly) when the
    /// postmaster is SIGKILLed; back 5 s later.
    Payouts,
    /// Commits waiting for a synchronous standby that is gone
    /// (`synchronous_standby_names` naming none that streams), every wait
    /// cancelled (`pg_cancel_backend`) every 300 ms for the outage: each
    /// COMMIT returns with "committed locally, but might not have been
    /// replicated", what a primary being deposed answers. None may reach
    /// a caller as a success.
    Unreplicated,
}

impl Fault {
    pub const ALL: [Fault; 7] = [
        Fault::Restart,
        Fault::Crash,
        Fault::Down,
        Fault::Terminate,
        Fault::Hang,
        Fault::Payouts,
        Fault::Unreplicated,
    ];

    fn name(self) -> &'static str {
        match self {
            Fault::Restart => "fast restart",
            Fault::Crash => "crash (SIGKILL), back in 5 s",
            Fault::Down => "down",
            Fault::Terminate => "backends terminated every 2 s",
            Fault::Hang => "hang (SIGSTOP)",
            Fault::Payouts => "payouts in flight, crash",
            Fault::Unreplicated => "sync waits cancelled (committed locally only)",
        }
    }
}

/// The longest the backends are terminated, or the database hung.
const BRIEF: Duration = Duration::from_secs(20);

/// What the scenarios run with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub faults: Vec<Fault>,
    /// Workers, each charging one order at a time.
    pub workers: usize,
    /// How long `down` lasts; `terminate` and `hang` last as long, up to 20 s.
    pub outage: Duration,
    /// Load before the fault and after the database is back.
    pub settle: Duration,
    /// The directory holding `initdb` and `pg_ctl`.
    pub pg_bin: PathBuf,
}

/// One answer the server gave, seen between the client and the server.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    /// Since the scenario began.
    pub(crate) at: Duration,
    pub(crate) status: u16,
    pub(crate) code: String,
    /// Whether the body said `"retryable": true`; `None` without a body flag.
    pub(crate) retryable: Option<bool>,
    pub(crate) latency: Duration,
    /// The remaining deadline the attempt carried.
    pub(crate) deadline: Option<Duration>,
}

pub(crate) type Log = Arc<Mutex<Vec<Answer>>>;

/// An attempt on its way through the proxy.
struct Watch {
    log: Log,
    at: Duration,
    sent: Instant,
    deadline: Option<Duration>,
    answered: bool,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.answered {
            self.log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Answer {
                    at: self.at,
                    status: 0,
                    code: "abandoned by the client".to_owned(),
                    retryable: Some(true),
                    latency: self.sent.elapsed(),
                    deadline: self.deadline,
                });
        }
    }
}

/// A loopback proxy that forwards every request to the server and records
/// its answer.
pub(crate) async fn recorder(
    upstream: SocketAddr,
    began: Instant,
    log: Log,
) -> anyhow::Result<SocketAddr> {
    use idem_runtime::axum::{self, body::Body, extract::Request, response::Response};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let http = idem_runtime::reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let app = axum::Router::new().fallback(move |request: Request| {
        let (http, log) = (http.clone(), Arc::clone(&log));
        async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, 1 << 20)
                .await
                .unwrap_or_default();
            let deadline = parts
                .headers
                .get(idem_runtime::client::DEADLINE_HEADER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_millis);
            let sent = Instant::now();
            // Recorded as abandoned unless the answer comes: the client
            // closed the connection first (its attempt timed out).
            let mut watch = Watch {
                log: Arc::clone(&log),
                at: sent.duration_since(began),
                sent,
                deadline,
                answered: false,
            };
            let (status, headers, bytes) = match forward(&http, upstream, &parts, body).await {
                Ok(r) => {
                    let (status, headers) = (r.status(), r.headers().clone());
                    (status, headers, r.bytes().await.unwrap_or_default())
                }
                Err(_) => (
                    idem_runtime::http::StatusCode::BAD_GATEWAY,
                    Default::default(),
                    Default::default(),
                ),
            };
            watch.answered = true;
            let latency = sent.elapsed();
            let parsed: Option<idem_runtime::serde_json::Value> =
                idem_runtime::serde_json::from_slice(&bytes).ok();
            let field = |name: &str| parsed.as_ref().and_then(|v| v.get(name)).cloned();
            log.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Answer {
                    at: sent.duration_since(began),
                    status: status.as_u16(),
                    code: field("code")
                        .and_then(|c| c.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    retryable: field("retryable").and_then(|r| r.as_bool()),
                    latency,
                    deadline,
                });
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

/// What one scenario measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub fault: Option<Fault>,
    /// Logical calls made (charges, or payouts).
    pub calls: usize,
    pub duplicates: usize,
    pub lost: usize,
    /// Keys still `in_flight` once everything was reconciled.
    pub stuck: usize,
    /// `status code` → answers, from the fault until 2 s after the
    /// database was back.
    pub during: BTreeMap<String, usize>,
    /// Answers in that window that told the caller not to retry.
    pub non_retryable: usize,
    /// Answers that came after the deadline their attempt carried.
    pub past_deadline: usize,
    /// Latency of the `503 idempotency_store_unavailable` refusals.
    pub refusals: Vec<Duration>,
    /// From the database's return to the first success after it.
    pub recovery: Option<Duration>,
    /// The longest stretch without a success.
    pub longest_gap: Duration,
    /// Client calls that ended without an answer, and how many a call with
    /// their key settled afterwards.
    pub unknown: usize,
    pub reconciled: usize,
    /// Payouts: the transfers the bank made (distinct step keys; the bank
    /// is idempotent by key).
    pub transfers: Option<usize>,
    /// Successes answered while every COMMIT returned without the
    /// synchronous standby (from 1 s into the fault to its end): each
    /// would be an answer a failover could take back.
    pub unreplicated_successes: Option<usize>,
    pub seconds: f64,
}

impl Outcome {
    /// Every invariant the protocol promises under this fault.
    pub fn holds(&self) -> bool {
        self.duplicates == 0
            && self.lost == 0
            && self.stuck == 0
            && self.non_retryable == 0
            && self.past_deadline == 0
            && self.reconciled == self.unknown
            && self.transfers.is_none_or(|t| t == self.calls)
            && self.unreplicated_successes.is_none_or(|n| n == 0)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(rank).copied()
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// The table of every scenario.
pub fn report(settings: &Settings, outcomes: &[Outcome]) -> String {
    let mut out = format!(
        "{} workers, each call its own key, through the generated client; outage {} s\n\n",
        settings.workers,
        settings.outage.as_secs()
    );
    out.push_str(
        "| fault | calls | dup | lost | stuck | non-retryable | past deadline | refusals | refusal p50 ms | p99 ms | max ms | recovery ms | longest gap s | unknown | reconciled |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for o in outcomes {
        let name = match o.fault {
            Some(Fault::Down) => format!("down, {} s", settings.outage.as_secs()),
            Some(f @ (Fault::Terminate | Fault::Hang | Fault::Unreplicated)) => {
                format!("{}, {} s", f.name(), settings.outage.min(BRIEF).as_secs())
            }
            f => f.map_or("", Fault::name).to_owned(),
        };
        out.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {} |\n",
            o.calls,
            o.duplicates,
            o.lost,
            o.stuck,
            o.non_retryable,
            o.past_deadline,
            o.refusals.len(),
            percentile(&o.refusals, 0.5).map_or("-".to_owned(), ms),
            percentile(&o.refusals, 0.99).map_or("-".to_owned(), ms),
            o.refusals.last().map_or("-".to_owned(), |d| ms(*d)),
            o.recovery.map_or("-".to_owned(), ms),
            o.longest_gap.as_secs_f64(),
            o.unknown,
            o.reconciled,
        ));
    }
    out.push_str("\nanswers from the fault until 2 s after the database was back:\n");
    for o in outcomes {
        let counts: Vec<String> = o.during.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        out.push_str(&format!(
            "  {}: {}\n",
            o.fault.map_or("", Fault::name),
            counts.join(", ")
        ));
        if let Some(n) = o.unreplicated_successes {
            out.push_str(&format!(
                "  {}: {n} successes while every COMMIT returned unreplicated\n",
                o.fault.map_or("", Fault::name),
            ));
        }
        if let Some(transfers) = o.transfers {
            out.push_str(&format!(
                "  {}: {} payouts, {transfers} bank transfers\n",
                o.fault.map_or("", Fault::name),
                o.calls
            ));
        }
    }
    out
}

/// Runs every scenario in `settings`, each on a fresh cluster and server.
pub async fn run(settings: &Settings) -> anyhow::Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    for &fault in &settings.faults {
        eprintln!("fault: {}…", fault.name());
        let outcome = scenario(settings, fault)
            .await
            .with_context(|| format!("the `{}` scenario", fault.name()))?;
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

type Pending = Vec<(usize, Option<idem_runtime::client::IdempotencyKey>)>;

async fn scenario(settings: &Settings, fault: Fault) -> anyhow::Result<Outcome> {
    let cluster = Cluster::start(&settings.pg_bin).await?;
    let bank = Bank::start().await?;
    let mut args = vec![
        "--resume-base-ms".to_owned(),
        "200".to_owned(),
        "--resume-attempts".to_owned(),
        "40".to_owned(),
        "--bank-url".to_owned(),
        bank.url().to_owned(),
    ];
    if fault != Fault::Payouts {
        args.truncate(4);
        args.extend(["--fake-bank".to_owned()]);
    }
    let mut server = Server::new(&cluster.url(), args)?;
    server.start().await?;
    let began = Instant::now();
    let log: Log = Arc::default();
    let entry = recorder(server.listen(), began, Arc::clone(&log)).await?;
    let client = Client::new(&format!("http://{entry}"))?;
    let account = format!("acct-{:08x}", rand::random::<u32>());

    let mut outcome = Outcome {
        fault: Some(fault),
        ..Outcome::default()
    };
    let (fault_at, back_at, pending) = if fault == Fault::Payouts {
        payouts(
            settings,
            &cluster,
            &bank,
            &client,
            &account,
            began,
            &mut outcome,
        )
        .await?
    } else {
        charges(
            settings,
            &cluster,
            fault,
            &client,
            &account,
            began,
            &mut outcome,
        )
        .await?
    };

    // Reconciliation: the same call with the key the error carried, until
    // each has its answer.
    outcome.unknown = pending.len();
    let mut pending = pending;
    for _ in 0..30 {
        if pending.is_empty() {
            break;
        }
        let mut still = Vec::new();
        for (n, key) in pending {
            let settled = match fault {
                Fault::Payouts => {
                    let mut call = client
                        .payouts()
                        .create(&payout_params(&account), &payout_body(n));
                    if let Some(key) = key.clone() {
                        call = call.idempotency_key(key);
                    }
                    call.send().await.is_ok()
                }
                _ => {
                    let mut call = client
                        .charges()
                        .create(&charge_params(&account), &order_body(n));
                    if let Some(key) = key.clone() {
                        call = call.idempotency_key(key);
                    }
                    call.send().await.is_ok()
                }
            };
            if !settled {
                still.push((n, key));
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    outcome.reconciled = outcome.unknown - pending.len();

    // The database, counted.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&cluster.url())
        .await?;
    if fault == Fault::Payouts {
        // Each payout's transfer step has one derived key; the bank is
        // idempotent by it, so distinct keys are transfers made.
        let calls = bank.calls_to("transfers");
        let keys: HashSet<&str> = calls.iter().map(|c| c.key.as_str()).collect();
        let completed: Vec<(String,)> = sqlx::query_as(
            "SELECT idem_key FROM idem_keys WHERE scope = $1 AND state = 'complete'",
        )
        .bind(&account)
        .fetch_all(&pool)
        .await?;
        outcome.lost = outcome.calls.saturating_sub(completed.len());
        outcome.transfers = Some(keys.len());
        outcome.duplicates = keys.len().saturating_sub(outcome.calls);
    } else {
        let per_order: Vec<(String, i64)> = sqlx::query_as(
            "SELECT order_id, COUNT(*) FROM charges WHERE account = $1 GROUP BY order_id",
        )
        .bind(&account)
        .fetch_all(&pool)
        .await?;
        let charges: i64 = per_order.iter().map(|(_, n)| n).sum();
        outcome.duplicates = usize::try_from(charges).unwrap_or(0) - per_order.len();
        outcome.lost = outcome.calls.saturating_sub(per_order.len());
    }
    let (stuck,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM idem_keys WHERE scope = $1 AND state = 'in_flight'")
            .bind(&account)
            .fetch_one(&pool)
            .await?;
    outcome.stuck = usize::try_from(stuck).unwrap_or(0);
    pool.close().await;
    server.kill().await?;

    let answers = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
    summarize(&mut outcome, &answers, fault_at, back_at);
    if fault == Fault::Unreplicated {
        let window = fault_at + Duration::from_secs(1)..back_at;
        outcome.unreplicated_successes = Some(
            answers
                .iter()
                .filter(|a| (200..300).contains(&a.status) && window.contains(&(a.at + a.latency)))
                .count(),
        );
    }
    outcome.seconds = began.elapsed().as_secs_f64();
    Ok(outcome)
}

fn summarize(outcome: &mut Outcome, answers: &[Answer], fault_at: Duration, back_at: Duration) {
    let window = fault_at..back_at + Duration::from_secs(2);
    for a in answers.iter().filter(|a| window.contains(&a.at)) {
        let label = if a.status == 0 {
            a.code.clone()
        } else if a.code.is_empty() {
            a.status.to_string()
        } else {
            format!("{} {}", a.status, a.code)
        };
        *outcome.during.entry(label).or_default() += 1;
        // A success, a conflict the protocol marks retryable, or a refusal
        // that says to retry: anything else is final for the caller.
        let final_answer = a.status >= 400 && a.retryable != Some(true);
        // (An attempt the client abandoned got no answer at all.)
        if final_answer {
            outcome.non_retryable += 1;
        }
    }
    outcome.past_deadline = answers
        .iter()
        .filter(|a| {
            a.deadline
                .is_some_and(|d| a.latency > d + Duration::from_millis(50))
        })
        .count();
    outcome.refusals = answers
        .iter()
        .filter(|a| a.status == 503 && a.code == "idempotency_store_unavailable")
        .map(|a| a.latency)
        .collect();
    outcome.refusals.sort_unstable();
    let mut successes: Vec<Duration> = answers
        .iter()
        .filter(|a| (200..300).contains(&a.status))
        .map(|a| a.at + a.latency)
        .collect();
    successes.sort_unstable();
    outcome.recovery = successes
        .iter()
        .find(|&&t| t >= back_at)
        .map(|&t| t - back_at);
    outcome.longest_gap = successes
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
}

/// Keyed charges from `workers` workers while `fault` strikes. Returns when
/// the fault began and ended (since `began`), and the calls left unknown.
async fn charges(
    settings: &Settings,
    cluster: &Cluster,
    fault: Fault,
    client: &Client,
    account: &str,
    began: Instant,
    outcome: &mut Outcome,
) -> anyhow::Result<(Duration, Duration, Pending)> {
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let pending: Arc<Mutex<Pending>> = Arc::default();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..settings.workers {
        let (stop, next, pending, client) = (
            Arc::clone(&stop),
            Arc::clone(&next),
            Arc::clone(&pending),
            client.clone(),
        );
        let params = charge_params(account);
        workers.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let order = next.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = client
                    .charges()
                    .create(&params, &order_body(order))
                    .send()
                    .await
                {
                    pending
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((order, e.idempotency_key().cloned()));
                    // What a job runner does with a call it could not
                    // settle: set it aside for later, and pause.
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        });
    }
    tokio::time::sleep(settings.settle).await;
    let fault_at = began.elapsed();
    match fault {
        Fault::Restart => cluster.ctl("restart").await?,
        Fault::Crash => {
            cluster.signal("KILL", false)?;
            tokio::time::sleep(Duration::from_secs(5)).await;
            cluster.up().await?;
        }
        Fault::Down => {
            cluster.ctl("stop").await?;
            tokio::time::sleep(settings.outage).await;
            cluster.up().await?;
        }
        Fault::Terminate => {
            let until = Instant::now() + settings.outage.min(BRIEF);
            while Instant::now() < until {
                cluster.terminate_backends().await?;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        Fault::Hang => {
            cluster.signal("STOP", true)?;
            tokio::time::sleep(settings.outage.min(BRIEF)).await;
            cluster.signal("CONT", true)?;
        }
        Fault::Unreplicated => {
            cluster
                .execute("ALTER SYSTEM SET synchronous_standby_names = 'absent'")
                .await?;
            cluster.execute("SELECT pg_reload_conf()").await?;
            let until = Instant::now() + settings.outage.min(BRIEF);
            while Instant::now() < until {
                cluster
                    .execute(
                        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
                         WHERE wait_event = 'SyncRep'",
                    )
                    .await?;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
        Fault::Payouts => unreachable!("payouts run on their own"),
    }
    let back_at = began.elapsed();
    if fault == Fault::Unreplicated {
        // Commits still waiting are released when the setting goes,
        // without a warning: after `back_at`.
        cluster
            .execute("ALTER SYSTEM RESET synchronous_standby_names")
            .await?;
        cluster.execute("SELECT pg_reload_conf()").await?;
    }
    tokio::time::sleep(settings.settle).await;
    stop.store(true, Ordering::Relaxed);
    while workers.join_next().await.is_some() {}
    outcome.calls = next.load(Ordering::Relaxed);
    let pending = std::mem::take(&mut *pending.lock().unwrap_or_else(PoisonError::into_inner));
    Ok((fault_at, back_at, pending))
}

/// Phased payouts, each transfer taking 1 s at the bank, with the
/// postmaster SIGKILLed while they are in flight and back 5 s later.
async fn payouts(
    settings: &Settings,
    cluster: &Cluster,
    bank: &Bank,
    client: &Client,
    account: &str,
    began: Instant,
    outcome: &mut Outcome,
) -> anyhow::Result<(Duration, Duration, Pending)> {
    bank.answer_after(Duration::from_secs(1));
    let count = settings.workers * 2;
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..count {
        let (client, params) = (client.clone(), payout_params(account));
        calls.spawn(async move {
            match client
                .payouts()
                .create(&params, &payout_body(n))
                .send()
                .await
            {
                Ok(_) => None,
                Err(e) => Some((n, e.idempotency_key().cloned())),
            }
        });
    }
    // Once every payout has reached the bank, the crash.
    let reached = Instant::now();
    while bank.calls_to("transfers").len() < count && reached.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fault_at = began.elapsed();
    cluster.signal("KILL", false)?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.up().await?;
    let back_at = began.elapsed();
    bank.answer_after(Duration::ZERO);
    let mut pending = Vec::new();
    while let Some(done) = calls.join_next().await {
        if let Ok(Some(failed)) = done {
            pending.push(failed);
        }
    }
    outcome.calls = count;
    Ok((fault_at, back_at, pending))
}
