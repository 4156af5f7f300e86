//! The bank-outage scenario: payouts whose bank is down for a while, then
//! healthy. Every payout is sent once and never retried by its caller, so
//! every later bank call is the server's own: the completer, on the resume
//! schedule. Prints how many calls the bank got, when, and how the payouts
//! ended.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use idem_runtime::reqwest;
use idem_runtime::serde_json::json;

use crate::bank::{Answer, Bank};
use crate::demo::{Server, fetch_for};

/// What the scenario runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Payouts sent while the bank is down.
    pub payouts: usize,
    /// How long the bank stays down after the first payout.
    pub down: Duration,
    /// The store (default: a fresh SQLite file).
    pub database_url: Option<String>,
    /// Replaces the spec's schedule: (base, runs).
    pub resume: Option<(Duration, u32)>,
}

/// What it measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub completed: usize,
    pub exhausted: usize,
    pub transfer_calls: usize,
    pub calls_during_outage: usize,
    pub calls_after_recovery: usize,
    /// Transfer calls per payout, sorted.
    pub per_payout: Vec<usize>,
    /// Seconds from recovery to each payout's completion, sorted.
    pub completed_after: Vec<f64>,
    /// Runs the store counted per payout; each bank call is one of them.
    pub runs: Vec<i64>,
    /// The most runs one payout may have.
    pub max_runs: u32,
    /// The first payout's calls, in seconds from its first.
    pub schedule: Vec<f64>,
    /// Payouts a retry answered from the store.
    pub replayed: usize,
}

impl Outcome {
    /// Every payout ended, and no payout had more bank calls than runs, nor
    /// more runs than the schedule allows.
    pub fn holds(&self, payouts: usize) -> bool {
        self.completed + self.exhausted == payouts
            && self.runs.len() == payouts
            && self.per_payout.iter().all(|&n| n <= self.max_runs as usize)
            && self.runs.iter().all(|&r| r <= i64::from(self.max_runs))
            && self.transfer_calls <= self.runs.iter().sum::<i64>().try_into().unwrap_or(0)
    }
}

/// Runs the scenario.
pub async fn run(settings: &Settings) -> anyhow::Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let database_url = settings.database_url.clone().unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("outage.db").display()
        )
    });
    let bank = Bank::start().await?;
    bank.answer_transfers(Answer::Down);
    let mut args = vec!["--bank-url".to_owned(), bank.url().to_owned()];
    let max_runs = match settings.resume {
        Some((base, runs)) => {
            args.extend([
                "--resume-base-ms".to_owned(),
                base.as_millis().to_string(),
                "--resume-attempts".to_owned(),
                runs.to_string(),
            ]);
            runs
        }
        None => idem_runtime::server::ResumePolicy::default().max_attempts,
    };
    let mut server = Server::new(&database_url, args)?;
    server.start().await?;
    let base = format!("http://{}", server.listen());
    let run_id = format!("{:08x}", rand::random::<u32>());
    let account = format!("acct-outage-{run_id}");
    let keys: Vec<String> = (0..settings.payouts)
        .map(|i| format!("payout-{run_id}-{i}"))
        .collect();
    let http = reqwest::Client::new();
    let send = |key: String| {
        let (http, base, account) = (http.clone(), base.clone(), account.clone());
        async move {
            http.post(format!("{base}/v1/payouts"))
                .header("x-account-id", account)
                .header("idempotency-key", key)
                .json(&json!({"vendor_id": "v-1", "amount": 5000}))
                .send()
                .await
        }
    };

    let started = Instant::now();
    let mut first = tokio::task::JoinSet::new();
    for key in &keys {
        first.spawn(send(key.clone()));
    }
    while let Some(answer) = first.join_next().await {
        let status = answer?.context("a payout was not answered")?.status();
        anyhow::ensure!(
            status == 503,
            "a payout sent while the bank is down was answered {status}, not 503"
        );
    }
    tokio::time::sleep(settings.down.saturating_sub(started.elapsed())).await;
    let recovered = Instant::now();
    bank.answer_transfers(Answer::Accept);

    // Until every payout has ended: the schedule's span bounds the wait.
    let states = "SELECT idem_key, state, attempts FROM idem_keys WHERE scope = $1";
    let patience = Duration::from_secs(24 * 3600);
    let mut completed_at: std::collections::HashMap<String, f64> = Default::default();
    let rows = loop {
        let rows: Vec<(String, String, i64)> = fetch_for(&database_url, states, &account).await?;
        for (key, state, _) in &rows {
            if state == "complete" {
                completed_at
                    .entry(key.clone())
                    .or_insert_with(|| recovered.elapsed().as_secs_f64());
            }
        }
        let ended = rows.iter().filter(|(_, s, _)| s != "in_flight").count();
        if ended == keys.len() || recovered.elapsed() > patience {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let mut replayed = 0;
    for key in &keys {
        let answer = send(key.clone()).await?;
        if answer.headers().contains_key("idempotent-replayed") {
            replayed += 1;
        }
    }
    server.kill().await?;

    let transfers = bank.calls_to("transfers");
    let mut per_payout = per_key_counts(&transfers);
    per_payout.sort_unstable();
    let first_key = transfers.first().map(|c| c.key.clone()).unwrap_or_default();
    let first_at = transfers.first().map(|c| c.at);
    let schedule = transfers
        .iter()
        .filter(|c| c.key == first_key)
        .filter_map(|c| first_at.map(|t| (c.at - t).as_secs_f64()))
        .collect();
    let mut completed_after: Vec<f64> = completed_at.into_values().collect();
    completed_after.sort_by(f64::total_cmp);
    let mut runs: Vec<i64> = rows.iter().map(|(_, _, n)| *n).collect();
    runs.sort_unstable();
    Ok(Outcome {
        completed: rows.iter().filter(|(_, s, _)| s == "complete").count(),
        exhausted: rows.iter().filter(|(_, s, _)| s == "exhausted").count(),
        transfer_calls: transfers.len(),
        calls_during_outage: transfers.iter().filter(|c| c.at < recovered).count(),
        calls_after_recovery: transfers.iter().filter(|c| c.at >= recovered).count(),
        per_payout,
        completed_after,
        runs,
        max_runs,
        schedule,
        replayed,
    })
}

/// Transfer calls per derived key (one key per payout).
fn per_key_counts(transfers: &[crate::bank::Call]) -> Vec<usize> {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for call in transfers {
        *counts.entry(call.key.as_str()).or_default() += 1;
    }
    counts.into_values().collect()
}

/// Prints the outcome.
pub fn report(settings: &Settings, outcome: &Outcome) -> String {
    let pick = |v: &[usize], q: f64| -> usize {
        v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    let pick_f = |v: &[f64], q: f64| -> f64 {
        v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let schedule = match settings.resume {
        Some((base, runs)) => format!("{runs} runs, base {} ms (overridden)", base.as_millis()),
        None => {
            let d = idem_runtime::server::ResumePolicy::default();
            format!(
                "{} runs, base {} s, cap {} min, give up after {} h (the defaults)",
                d.max_attempts,
                d.base.as_secs(),
                d.cap.as_secs() / 60,
                d.give_up_after.as_secs() / 3600
            )
        }
    };
    let n = settings.payouts;
    let mut out = String::new();
    out.push_str(&format!(
        "bank outage: {n} payouts sent once while the bank answers 503 for {} s, then healthy\n\
         resume schedule: {schedule}\n\n",
        settings.down.as_secs()
    ));
    let rows = [
        ("payouts completed", format!("{} of {n}", outcome.completed)),
        ("payouts exhausted", outcome.exhausted.to_string()),
        (
            "bank transfer calls",
            format!(
                "{} (bound: {n} × {} runs = {})",
                outcome.transfer_calls,
                outcome.max_runs,
                n * outcome.max_runs as usize
            ),
        ),
        (
            "  during the outage",
            outcome.calls_during_outage.to_string(),
        ),
        ("  after recovery", outcome.calls_after_recovery.to_string()),
        (
            "calls per payout",
            format!(
                "min {}  median {}  max {}",
                pick(&outcome.per_payout, 0.0),
                pick(&outcome.per_payout, 0.5),
                pick(&outcome.per_payout, 1.0)
            ),
        ),
        (
            "completed after recovery",
            format!(
                "median {:.1} s  max {:.1} s",
                pick_f(&outcome.completed_after, 0.5),
                pick_f(&outcome.completed_after, 1.0)
            ),
        ),
        (
            "one payout's calls (s)",
            outcome
                .schedule
                .iter()
                .map(|t| format!("{t:.1}"))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        ("replayed on retry", format!("{} of {n}", outcome.replayed)),
    ];
    for (label, value) in rows {
        out.push_str(&format!("{label:<28} {value}\n"));
    }
    out
}
