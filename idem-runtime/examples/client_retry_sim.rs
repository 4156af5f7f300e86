//! Retry storms and retry budgets, simulated with the client's own policy
//! objects in virtual time, beside the figures of the reference lesson
//! (shared/reference/000: `backoff.py`).
//!
//! ```text
//! cargo run --release -p idem-runtime --no-default-features --features client --example client_retry_sim
//! ```
//!
//! Experiment 1 reproduces the lesson's storm model exactly: 500 clients send
//! at t = 0 to a server that accepts 20 requests per millisecond; arrivals in
//! a millisecond are shuffled, 20 succeed, the rest sleep per the policy and
//! arrive again at `slot + 1 + floor(sleep_ms)`. Waits come from
//! [`Backoff`] (base 1 ms, cap 2 s, as in the lesson).
//!
//! Experiment 2 runs 1,000 user requests through three layers, each a real
//! [`RetryClient`] allowing 4 attempts, in front of a database that fails
//! every call — inside a paused tokio runtime, so the backoff sleeps are
//! real sleeps of virtual time.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem_runtime::client::{
    Backoff, Operation, RandomSource, RetryBudget, RetryClass, RetryClient, RetryError,
    RetryPolicy, SeededRandom,
};

const CLIENTS: usize = 500;
const CAPACITY: usize = 20;
const SEEDS: u64 = 100;

#[derive(Debug, Clone, Copy)]
enum Storm {
    NoBackoff,
    Exponential,
    FullJitter,
    EqualJitter,
    Decorrelated,
}

impl Storm {
    fn name(self) -> &'static str {
        match self {
            Storm::NoBackoff => "no backoff",
            Storm::Exponential => "exponential",
            Storm::FullJitter => "full jitter",
            Storm::EqualJitter => "equal jitter",
            Storm::Decorrelated => "decorrelated",
        }
    }

    /// The lesson's printed (calls, all done at ms).
    fn reference(self) -> (u64, u64) {
        match self {
            Storm::NoBackoff => (6500, 25),
            Storm::Exponential => (6500, 28_072),
            Storm::FullJitter => (2499, 45),
            Storm::EqualJitter => (2685, 61),
            Storm::Decorrelated => (2025, 48),
        }
    }

    fn offered(self) -> &'static str {
        match self {
            Storm::FullJitter => "default",
            Storm::Decorrelated => "selectable",
            _ => "not offered",
        }
    }

    /// The wait before retry number `retry` (from 0), given the last wait.
    fn wait(self, retry: u32, last: Duration, random: &dyn RandomSource) -> Duration {
        let full = Backoff::full_jitter(Duration::from_millis(1), Duration::from_secs(2));
        let decorrelated =
            Backoff::decorrelated_jitter(Duration::from_millis(1), Duration::from_secs(2));
        match self {
            Storm::NoBackoff => Duration::ZERO,
            // Plain exponential is the full-jitter window without the jitter.
            Storm::Exponential => full.ceiling(retry),
            Storm::FullJitter => full.delay(retry, last, random),
            Storm::EqualJitter => {
                let half = full.ceiling(retry) / 2;
                half + half.mul_f64(random.unit())
            }
            Storm::Decorrelated => decorrelated.delay(retry, last, random),
        }
    }
}

/// One storm: (total calls, millisecond at which the last client succeeded).
fn storm(policy: Storm, seed: u64) -> (u64, u64) {
    let random = SeededRandom::new(seed);
    let mut pending: BTreeMap<u64, Vec<(u32, Duration)>> = BTreeMap::new();
    pending.insert(0, vec![(0, Duration::ZERO); CLIENTS]);
    let (mut calls, mut slot, mut done) = (0u64, 0u64, 0usize);
    while done < CLIENTS {
        let mut arrivals = pending.remove(&slot).unwrap_or_default();
        shuffle(&mut arrivals, &random);
        calls += arrivals.len() as u64;
        done += arrivals.len().min(CAPACITY);
        for &(retry, last) in arrivals.iter().skip(CAPACITY) {
            let wait = policy.wait(retry, last, &random);
            let at = slot + 1 + wait.as_millis() as u64;
            pending.entry(at).or_default().push((retry + 1, wait));
        }
        slot += 1;
    }
    (calls, slot)
}

/// Fisher–Yates with the simulation's random source.
fn shuffle<T>(items: &mut [T], random: &dyn RandomSource) {
    for i in (1..items.len()).rev() {
        let j = ((random.unit() * (i + 1) as f64) as usize).min(i);
        items.swap(i, j);
    }
}

const LAYERS: usize = 3;
const REQUESTS: usize = 1_000;
const CALL: Operation = Operation::new("layerCall", RetryClass::Safe);

fn unavailable() -> reqwest::Response {
    let response = http::Response::builder()
        .status(503)
        .body("database unavailable");
    reqwest::Response::from(response.unwrap_or_else(|_| http::Response::new("")))
}

/// One call into `layer`; the layer below the last is the database, which
/// fails every call. A layer whose call fails answers 503 to its caller.
fn call_layer<'a>(
    clients: &'a [RetryClient],
    layer: usize,
    db_calls: &'a AtomicU64,
) -> Pin<Box<dyn Future<Output = Result<reqwest::Response, RetryError>> + 'a>> {
    Box::pin(async move {
        let Some(client) = clients.get(layer) else {
            db_calls.fetch_add(1, Ordering::Relaxed);
            return Ok(unavailable());
        };
        client
            .execute_with(&CALL, None, None, |_| async move {
                match call_layer(clients, layer + 1, db_calls).await {
                    Ok(response) => Ok(response),
                    Err(_) => Ok(unavailable()),
                }
            })
            .await
    })
}

struct Outage {
    db_calls: u64,
    /// Calls each layer sent to the one below it (first attempts + retries).
    sent: Vec<u64>,
    retries: Vec<u64>,
    tokens: Vec<Option<u32>>,
}

/// Runs `batches` batches of 1,000 requests during the outage with one set
/// of layer clients, reporting each batch separately.
fn outage(budget: impl Fn() -> RetryBudget, batches: usize) -> Vec<Outage> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    let Ok(runtime) = runtime else {
        eprintln!("could not start a tokio runtime");
        return Vec::new();
    };
    runtime.block_on(async {
        let policy = RetryPolicy::default()
            .max_attempts(4)
            .deadline(Duration::from_secs(3600));
        let clients: Vec<RetryClient> = (0..LAYERS)
            .map(|layer| {
                RetryClient::builder(reqwest::Client::new())
                    .policy(policy.clone())
                    .budget(budget())
                    .random(Arc::new(SeededRandom::new(layer as u64)))
                    .build()
            })
            .collect();
        let db_calls = AtomicU64::new(0);
        let mut results = Vec::new();
        let (mut sent_before, mut retries_before) = (vec![0; LAYERS], vec![0; LAYERS]);
        for _ in 0..batches {
            let db_before = db_calls.load(Ordering::Relaxed);
            for _ in 0..REQUESTS {
                let _ = call_layer(&clients, 0, &db_calls).await;
            }
            let metrics: Vec<_> = clients.iter().map(RetryClient::metrics).collect();
            let sent: Vec<u64> = metrics.iter().map(|m| m.attempts).collect();
            let retries: Vec<u64> = metrics.iter().map(|m| m.retries).collect();
            results.push(Outage {
                db_calls: db_calls.load(Ordering::Relaxed) - db_before,
                sent: sent.iter().zip(&sent_before).map(|(a, b)| a - b).collect(),
                retries: retries
                    .iter()
                    .zip(&retries_before)
                    .map(|(a, b)| a - b)
                    .collect(),
                tokens: metrics.iter().map(|m| m.budget_available).collect(),
            });
            (sent_before, retries_before) = (sent, retries);
        }
        results
    })
}

fn main() {
    println!(
        "Experiment 1: 500 clients at once, server accepts 20 requests/ms (base 1 ms, cap 2 s)"
    );
    println!("  seed 3 as in the lesson; mean and range over {SEEDS} seeds beside it\n");
    println!(
        "  {:<13} {:>6} {:>7} {:>8} | {:>7} {:>13} {:>26} | {:>9} {:>7} {:>8} | in idem",
        "policy",
        "calls",
        "/client",
        "done at",
        "mean",
        "range",
        "done at, ms: mean (range)",
        "ref calls",
        "/client",
        "done at",
    );
    for policy in [
        Storm::NoBackoff,
        Storm::Exponential,
        Storm::FullJitter,
        Storm::EqualJitter,
        Storm::Decorrelated,
    ] {
        let (calls, done) = storm(policy, 3);
        let runs: Vec<(u64, u64)> = (0..SEEDS).map(|seed| storm(policy, seed)).collect();
        let mean = runs.iter().map(|r| r.0).sum::<u64>() as f64 / SEEDS as f64;
        let mean_done = runs.iter().map(|r| r.1).sum::<u64>() as f64 / SEEDS as f64;
        let done_min = runs.iter().map(|r| r.1).min().unwrap_or(0);
        let done_max = runs.iter().map(|r| r.1).max().unwrap_or(0);
        let min = runs.iter().map(|r| r.0).min().unwrap_or(0);
        let max = runs.iter().map(|r| r.0).max().unwrap_or(0);
        let (ref_calls, ref_done) = policy.reference();
        println!(
            "  {:<13} {:>6} {:>7.1} {:>6}ms | {:>7.0} {:>13} {:>26} | {:>9} {:>7.1} {:>6}ms | {}",
            policy.name(),
            calls,
            calls as f64 / CLIENTS as f64,
            done,
            mean,
            format!("{min}–{max}"),
            format!("{mean_done:.0} ({done_min}–{done_max})"),
            ref_calls,
            ref_calls as f64 / CLIENTS as f64,
            ref_done,
            policy.offered()
        );
    }

    println!("\nExperiment 2: 1,000 user requests, 3 layers × 4 attempts, database down");
    println!("  (real RetryClient per layer, paused tokio time)\n");
    let none = outage(RetryBudget::unlimited, 1);
    let bucket = outage(RetryBudget::default, 2);
    println!(
        "  {:<34} {:>9} {:>22} {:>22} {:>14} | reference",
        "budget", "db calls", "calls sent by layer", "retries/layer", "tokens left"
    );
    let row = |name: &str, o: &Outage, reference: &str| {
        let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" / ");
        let tokens = o
            .tokens
            .iter()
            .map(|t| t.map_or("∞".to_owned(), |t| t.to_string()))
            .collect::<Vec<_>>()
            .join(" / ");
        println!(
            "  {:<34} {:>9} {:>22} {:>22} {:>14} | {}",
            name,
            o.db_calls,
            join(&o.sent),
            join(&o.retries),
            tokens,
            reference
        );
    };
    if let Some(o) = none.first() {
        row("none", o, "64000");
    }
    if let Some(o) = bucket.first() {
        row("token bucket 500, 14/5, +1", o, "1331 (10% ratio budget)");
    }
    if let Some(o) = bucket.get(1) {
        row("  next 1,000, bucket drained", o, "—");
    }
    if let Some(o) = bucket.first() {
        let added: Vec<String> = o
            .retries
            .iter()
            .map(|r| format!("{:.1}%", 100.0 * *r as f64 / REQUESTS as f64))
            .collect();
        println!(
            "\n  load added by retries per layer, first 1,000 requests: {}",
            added.join(" / ")
        );
    }
    if let Some(o) = bucket.get(1) {
        let added: Vec<String> = o
            .retries
            .iter()
            .map(|r| format!("{:.1}%", 100.0 * *r as f64 / REQUESTS as f64))
            .collect();
        println!(
            "  load added by retries per layer, once drained:        {}",
            added.join(" / ")
        );
    }
}
