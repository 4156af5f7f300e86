//! PostgreSQL failing over under keyed load: a primary and a streaming
//! standby on loopback (`initdb`, `pg_basebackup -R`), two
//! `payments-demo serve` processes given both hosts
//! (`postgres://…@primary,standby/…`), workers charging orders and paying
//! out through a bank stub, and then one of:
//!
//! - **sync**: the standby synchronous (`synchronous_standby_names`,
//!   `synchronous_commit = on`); the primary and all its processes
//!   SIGKILLed, the standby promoted;
//! - **async**: the same with the standby asynchronous: what a failover
//!   loses;
//! - **switchover**: the standby synchronous; the primary fenced
//!   (`default_transaction_read_only = on`, reloaded) and left running,
//!   the standby promoted once it has replayed everything: pooled
//!   connections to the old primary answer `25006`.
//!
//! Afterwards the calls left unknown are settled with their keys, and the
//! new primary is counted: charges acknowledged and missing, duplicated
//! charges, keys stuck in flight, bank transfers made again. Every answer
//! the servers gave is recorded on the way.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::api::Client;
use crate::bank::Bank;
use crate::cluster::Cluster;
use crate::demo::Server;
use crate::faults::{Answer, Log, recorder};
use crate::load::{self, Kind, Load};

/// How long the bank takes to answer a transfer: some are at the bank
/// when the primary goes.
pub(crate) const TRANSFER_TAKES: Duration = Duration::from_millis(100);

/// A transfer answered this long before the standby fell behind had its
/// result recorded and replicated (the server commits it within
/// milliseconds).
const RECORDED_WITHIN: Duration = Duration::from_millis(200);

/// A way the primary goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Synchronous standby; primary SIGKILLed, standby promoted.
    Sync,
    /// Asynchronous standby; primary SIGKILLed, standby promoted.
    Async,
    /// Synchronous standby; primary fenced read-only, standby promoted.
    Switchover,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::Sync, Scenario::Async, Scenario::Switchover];

    fn name(self) -> &'static str {
        match self {
            Scenario::Sync => "sync standby, primary killed",
            Scenario::Async => "async standby, primary killed",
            Scenario::Switchover => "sync standby, primary fenced (25006)",
        }
    }

    fn synchronous(self) -> bool {
        self != Scenario::Async
    }
}

/// What the scenarios run with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub scenarios: Vec<Scenario>,
    /// Workers charging, one order at a time each.
    pub workers: usize,
    /// Workers paying out.
    pub payout_workers: usize,
    /// Load before the failover and after it.
    pub settle: Duration,
    /// How long the standby is cut off its primary before the primary is
    /// killed: a standby behind, as the primary dies.
    pub lag: Duration,
    /// The directory holding `initdb`, `pg_ctl` and `pg_basebackup`.
    pub pg_bin: PathBuf,
}

/// What one scenario measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub scenario: Scenario,
    pub charges: usize,
    /// Charges acknowledged to their caller and missing on the new primary.
    pub lost: usize,
    pub duplicates: usize,
    pub payouts: usize,
    /// Payouts acknowledged and without a complete record on the new primary.
    pub payouts_lost: usize,
    /// Keys in flight once everything settled.
    pub stuck: usize,
    /// Transfers the bank took (distinct keys; the bank is idempotent by
    /// key), and payouts with more than one.
    pub transfers: usize,
    pub transfers_duplicated: usize,
    /// Calls the bank got again for a transfer it had made (a bank
    /// without idempotency keys pays each twice), and how many of them
    /// repeat a transfer answered 200 ms or more before the standby fell
    /// behind, whose recorded result the standby had: none may.
    pub repeated: usize,
    pub repeated_replicated: usize,
    /// Answers from the failover on that told the caller not to retry.
    pub non_retryable: usize,
    /// `503` refusals from the failover on, and the slowest of them.
    pub refusals: usize,
    pub refusal_max: Duration,
    /// Statements the servers logged as refused by a read-only host
    /// (SQLSTATE `25006`), each answered a retryable `503`.
    pub read_only: usize,
    /// From the fault to the first success after it, and from the
    /// promotion to it.
    pub recovery: Option<Duration>,
    pub after_promotion: Option<Duration>,
    /// From the promotion to the first success of a probe sending one
    /// keyed charge every 20 ms without retrying: the servers' own
    /// recovery, without callers' backoff.
    pub servers_back: Option<Duration>,
    /// How long `pg_ctl promote` took.
    pub promote: Duration,
    pub unknown: usize,
    pub reconciled: usize,
    /// Servers that warned, at start, that a failover could lose
    /// acknowledged commits (an asynchronous standby).
    pub warned: usize,
}

impl Outcome {
    /// What a synchronous standby promises: nothing lost, nothing twice.
    pub fn holds(&self) -> bool {
        // Every server warns of an asynchronous standby, and only of one.
        let warned = if self.scenario.synchronous() { 0 } else { 2 };
        let clean = self.warned == warned
            && self.duplicates == 0
            && self.stuck == 0
            && self.non_retryable == 0;
        if self.scenario.synchronous() {
            clean
                && self.lost == 0
                && self.transfers_duplicated == 0
                && self.payouts_lost == 0
                && self.repeated_replicated == 0
                && self.reconciled == self.unknown
        } else {
            // Asynchronous replication may lose; the table says how much.
            clean
        }
    }
}

/// Runs every scenario in `settings`, each on fresh clusters and servers.
pub async fn run(settings: &Settings) -> anyhow::Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    for &scenario in &settings.scenarios {
        eprintln!("failover: {}…", scenario.name());
        outcomes.push(
            one(settings, scenario)
                .await
                .with_context(|| format!("the `{}` scenario", scenario.name()))?,
        );
    }
    Ok(outcomes)
}

/// A primary and its standby, replicating as `scenario` says.
async fn pair(settings: &Settings, scenario: Scenario) -> anyhow::Result<(Cluster, Cluster)> {
    let primary = Cluster::start(&settings.pg_bin).await?;
    let standby = Cluster::standby_of(&primary, "standby").await?;
    let wanted = if scenario.synchronous() {
        primary
            .execute("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
            .await?;
        primary.execute("SELECT pg_reload_conf()").await?;
        "sync"
    } else {
        "async"
    };
    let since = Instant::now();
    loop {
        let standbys = primary.standbys().await?;
        if standbys
            .iter()
            .any(|(name, state)| name == "standby" && state == wanted)
        {
            break;
        }
        anyhow::ensure!(
            since.elapsed() < Duration::from_secs(20),
            "the standby is not streaming as {wanted} after 20 s: {standbys:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((primary, standby))
}

/// The two servers of a scenario, each behind its own answer recorder.
pub(crate) struct Fleet {
    pub(crate) servers: Vec<Server>,
    /// One client per server, through its recorder.
    pub(crate) clients: Vec<Client>,
    /// What each server logged at `warn`.
    pub(crate) warnings: Vec<Arc<std::sync::Mutex<Vec<String>>>>,
}

/// Starts one server on each of `urls`, paying out through `bank`, their
/// answers recorded into `log`.
pub(crate) async fn fleet(
    urls: &[String],
    bank: &Bank,
    began: Instant,
    log: &Log,
) -> anyhow::Result<Fleet> {
    let mut fleet = Fleet {
        servers: Vec::new(),
        clients: Vec::new(),
        warnings: Vec::new(),
    };
    for url in urls {
        let mut server = Server::new(
            url,
            [
                "--resume-base-ms",
                "200",
                "--resume-attempts",
                "40",
                "--bank-url",
                bank.url(),
            ]
            .map(str::to_owned)
            .to_vec(),
        )?;
        fleet.warnings.push(server.capture_warnings());
        server.start().await?;
        let entry = recorder(server.listen(), began, Arc::clone(log)).await?;
        fleet.clients.push(Client::new(&format!("http://{entry}"))?);
        fleet.servers.push(server);
    }
    Ok(fleet)
}

/// The scenario's fault: the primary fenced (a switchover) or killed after
/// the standby was cut off for `lag`. Returns when the primary was fenced
/// or died (since `began`), and since when the standby fell behind.
async fn fault(
    settings: &Settings,
    scenario: Scenario,
    primary: &Cluster,
    standby: &Cluster,
    began: Instant,
) -> anyhow::Result<(Duration, Instant)> {
    if scenario == Scenario::Switchover {
        let (fault_at, behind) = (began.elapsed(), Instant::now());
        primary
            .execute("ALTER SYSTEM SET default_transaction_read_only = on")
            .await?;
        primary.execute("SELECT pg_reload_conf()").await?;
        // Transactions begun before the fence end (they commit, waiting
        // for the standby, or give up); then the standby has it all.
        tokio::time::sleep(Duration::from_millis(500)).await;
        return Ok((fault_at, behind));
    }
    // The link to the standby breaks for `lag`, then the primary dies: the
    // standby has what reached it before the break.
    let behind = Instant::now();
    if !settings.lag.is_zero() {
        standby.cut_off().await?;
        tokio::time::sleep(settings.lag).await;
    }
    let fault_at = began.elapsed();
    primary.signal("KILL", true)?;
    Ok((fault_at, behind))
}

/// Each payout's transfer has one derived key: the bank's accepted calls
/// per key, and when the first was answered.
pub(crate) fn transfers_per_key(bank: &Bank) -> HashMap<String, (usize, Instant)> {
    let mut per_key: HashMap<String, (usize, Instant)> = HashMap::new();
    for call in bank.calls_to("transfers").iter().filter(|c| c.accepted) {
        let answered = call.at + TRANSFER_TAKES;
        per_key
            .entry(call.key.clone())
            .and_modify(|(n, _)| *n += 1)
            .or_insert((1, answered));
    }
    per_key
}

async fn one(settings: &Settings, scenario: Scenario) -> anyhow::Result<Outcome> {
    let (primary, standby) = pair(settings, scenario).await?;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres",
        primary.port(),
        standby.port()
    );
    let bank = Bank::start().await?;
    bank.answer_after(TRANSFER_TAKES);
    let began = Instant::now();
    let log: Log = Arc::default();
    let Fleet {
        mut servers,
        clients,
        warnings,
    } = fleet(&[url.clone(), url], &bank, began, &log).await?;
    let account = format!("acct-{:08x}", rand::random::<u32>());
    let (probe_stop, probed) = probe(servers.iter().map(Server::listen).collect(), began);
    let charges = Load::start(Kind::Charge, &clients, settings.workers, &account, 1, 0);
    let payouts = Load::start(
        Kind::Payout,
        &clients,
        settings.payout_workers,
        &account,
        1,
        0,
    );
    tokio::time::sleep(settings.settle).await;

    let (fault_at, behind) = fault(settings, scenario, &primary, &standby, began).await?;
    let promote_started = Instant::now();
    standby.promote().await?;
    let promote = promote_started.elapsed();
    let promoted_at = began.elapsed();

    tokio::time::sleep(settings.settle).await;
    probe_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut charged = charges.stop(0).await;
    let mut paid = payouts.stop(0).await;
    let unknown = charged.pending.len() + paid.pending.len();
    let mut reconciled = load::reconcile(&clients[0], Kind::Charge, &account, &mut charged).await;
    reconciled += load::reconcile(&clients[0], Kind::Payout, &account, &mut paid).await;
    // The completer finishes what a payout left half-done.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let charges_counted = load::count_charges(&standby.url(), &account, &charged.acked).await?;
    let payouts_counted = load::count_payouts(&standby.url(), &account, &paid.acked).await?;
    for server in &mut servers {
        server.kill().await?;
    }
    let per_key = transfers_per_key(&bank);
    let replicated_before = behind.checked_sub(RECORDED_WITHIN).unwrap_or(behind);
    let repeated = |only_replicated: bool| -> usize {
        per_key
            .values()
            .filter(|(_, first)| !only_replicated || *first < replicated_before)
            .map(|(n, _)| n - 1)
            .sum()
    };
    let logged = |needle: &str| -> Vec<usize> {
        warnings
            .iter()
            .map(|w| {
                w.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .filter(|line| line.contains(needle))
                    .count()
            })
            .collect()
    };
    let answers = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut outcome = Outcome {
        scenario,
        charges: charged.calls,
        lost: charges_counted.lost,
        duplicates: charges_counted.duplicates,
        payouts: paid.calls,
        payouts_lost: payouts_counted.lost,
        stuck: charges_counted.stuck + payouts_counted.stuck,
        transfers: per_key.len(),
        transfers_duplicated: per_key.len().saturating_sub(paid.calls),
        repeated: repeated(false),
        repeated_replicated: repeated(true),
        non_retryable: 0,
        refusals: 0,
        refusal_max: Duration::ZERO,
        recovery: None,
        after_promotion: None,
        servers_back: probed
            .await?
            .into_iter()
            .find(|&t| t > promoted_at)
            .map(|t| t - promoted_at),
        promote,
        unknown,
        reconciled,
        read_only: logged("read-only transaction").iter().sum(),
        warned: logged("replicates asynchronously")
            .iter()
            .filter(|&&n| n > 0)
            .count(),
    };
    summarize(&mut outcome, &answers, fault_at, promoted_at);
    Ok(outcome)
}

/// Sends one keyed charge every 20 ms, to each server in turn, without
/// retrying, under an account of its own; returns when each succeeded
/// (since `began`), once stopped.
pub(crate) fn probe(
    servers: Vec<std::net::SocketAddr>,
    began: Instant,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<Vec<Duration>>,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let task = tokio::spawn(async move {
        let http = idem_runtime::reqwest::Client::new();
        let account = format!("probe-{:08x}", rand::random::<u32>());
        let successes: Arc<std::sync::Mutex<Vec<Duration>>> = Arc::default();
        let mut sent = tokio::task::JoinSet::new();
        let mut n = 0_usize;
        // One charge every 20 ms, each on its own: one that hangs does not
        // hold back the next.
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            let request = http
                .post(format!("http://{}/v1/charges", servers[n % servers.len()]))
                .header("x-account-id", &account)
                .header("idempotency-key", format!("probe-{n}"))
                .json(&crate::demo::order_body(n))
                .timeout(Duration::from_secs(2));
            let successes = Arc::clone(&successes);
            sent.spawn(async move {
                if request.send().await.is_ok_and(|r| r.status().is_success()) {
                    successes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(began.elapsed());
                }
            });
            n += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        while sent.join_next().await.is_some() {}
        let mut successes =
            std::mem::take(&mut *successes.lock().unwrap_or_else(PoisonError::into_inner));
        successes.sort_unstable();
        successes
    });
    (stop, task)
}

fn summarize(outcome: &mut Outcome, answers: &[Answer], fault_at: Duration, promoted_at: Duration) {
    let after: Vec<&Answer> = answers.iter().filter(|a| a.at >= fault_at).collect();
    outcome.non_retryable = after
        .iter()
        .filter(|a| a.status >= 400 && a.retryable != Some(true))
        .count();
    let refusals: Vec<Duration> = after
        .iter()
        .filter(|a| a.status == 503)
        .map(|a| a.latency)
        .collect();
    outcome.refusals = refusals.len();
    outcome.refusal_max = refusals.into_iter().max().unwrap_or_default();
    let first_success = after
        .iter()
        .filter(|a| (200..300).contains(&a.status))
        .map(|a| a.at + a.latency)
        .filter(|&t| t > promoted_at)
        .min();
    outcome.recovery = first_success.map(|t| t - fault_at);
    outcome.after_promotion = first_success.map(|t| t - promoted_at);
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

/// The table of every scenario.
pub fn report(settings: &Settings, outcomes: &[Outcome]) -> String {
    let mut out = format!(
        "two servers on a primary and a streaming standby (host list), {} workers charging and \
         {} paying out, {} s of load before and after\n\n",
        settings.workers,
        settings.payout_workers,
        settings.settle.as_secs()
    );
    out.push_str(
        "| scenario | charges | lost | dup | payouts | lost | transfers | dup | repeated | of them replicated | stuck | non-retryable | 503s | slowest 503 ms | 25006 | promote ms | servers back ms | callers back ms | after promotion ms | unknown | settled | warned |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for o in outcomes {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/2 |\n",
            o.scenario.name(),
            o.charges,
            o.lost,
            o.duplicates,
            o.payouts,
            o.payouts_lost,
            o.transfers,
            o.transfers_duplicated,
            o.repeated,
            o.repeated_replicated,
            o.stuck,
            o.non_retryable,
            o.refusals,
            ms(o.refusal_max),
            o.read_only,
            ms(o.promote),
            o.servers_back.map_or("-".to_owned(), ms),
            o.recovery.map_or("-".to_owned(), ms),
            o.after_promotion.map_or("-".to_owned(), ms),
            o.unknown,
            o.reconciled,
            o.warned,
        ));
    }
    out.push_str(
        "\nlost: acknowledged to the caller, missing on the promoted standby. transfers: distinct \
         transfer keys the bank took; dup: more transfers than payouts. repeated: calls the bank \
         got again for a transfer it had made (a bank without idempotency keys pays each twice): \
         with the same derived key when its result could not be recorded (in flight, or waiting \
         for the standby), or lost with a record the standby lacked; of them replicated: \
         repeats of a transfer answered 200 ms or more before the standby fell behind. 25006: \
         answers refusing a write on a read-only host (retryable 503s). servers back: from the \
         promotion to the first success of a probe charging every 20 ms without retrying. \
         callers back: from the fault to the first success the workers saw (their retries wait \
         out Retry-After), and from the promotion. warned: \
         servers that logged, at start, that a failover could lose acknowledged commits.\n",
    );
    out
}
