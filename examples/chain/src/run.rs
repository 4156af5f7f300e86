//! The measurements: a three-layer chain per configuration, and an
//! overload test, each on processes of their own.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::Semaphore;

use crate::Mode;
use crate::api::{self, DoWorkParams, Work};

/// A layer process, killed when dropped.
#[derive(Debug)]
pub struct Process {
    child: tokio::process::Child,
    pub addr: SocketAddr,
}

impl Process {
    /// Starts `chain layer` at depth `depth`, calling `next` if given.
    pub async fn layer(
        exe: &Path,
        dir: &Path,
        depth: i32,
        next: Option<SocketAddr>,
        mode: Mode,
        budget_retries: u32,
        slow_ms: u64,
    ) -> anyhow::Result<Process> {
        Self::start(exe, dir, depth, next, mode, budget_retries, slow_ms, false).await
    }

    /// A bottom layer whose database is up: `doWork` takes `slow_ms`, then
    /// writes a row in its key's transaction.
    pub async fn bottom_with_database(
        exe: &Path,
        dir: &Path,
        slow_ms: u64,
    ) -> anyhow::Result<Process> {
        Self::start(exe, dir, 1, None, Mode::Idem, 0, slow_ms, true).await
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one flag each, passed straight to the process"
    )]
    async fn start(
        exe: &Path,
        dir: &Path,
        depth: i32,
        next: Option<SocketAddr>,
        mode: Mode,
        budget_retries: u32,
        slow_ms: u64,
        database_up: bool,
    ) -> anyhow::Result<Process> {
        let mut command = tokio::process::Command::new(exe);
        command
            .arg("layer")
            .args(["--listen", "127.0.0.1:0"])
            .args(["--depth", &depth.to_string()])
            .args(["--mode", mode_name(mode)])
            .args(["--budget-retries", &budget_retries.to_string()])
            .args(["--slow-ms", &slow_ms.to_string()])
            .arg("--database-url")
            .arg(format!(
                "sqlite://{}?mode=rwc",
                dir.join(format!("layer-{depth}.db")).display()
            ))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(next) = next {
            command.args(["--next", &format!("http://{next}")]);
        }
        if database_up {
            command.arg("--database-up");
        }
        let mut child = command.spawn().context("cannot start a layer")?;
        // Ready when it says where it listens (after its store is ready).
        let stdout = child.stdout.take().context("no stdout from the layer")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .with_context(|| format!("layer {depth} did not start"))??
            .with_context(|| format!("layer {depth} exited before listening"))?;
        let addr: SocketAddr = first
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("layer {depth} said {first:?}, not where it listens"))?;
        // The rest of its output is drained, so a full pipe never blocks it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Process { child, addr })
    }

    /// The number of `doWork` calls its handler ran.
    pub async fn calls(&self) -> anyhow::Result<i64> {
        Ok(self.stats().await?.calls)
    }

    /// Its handler's calls and the rows it wrote.
    pub async fn stats(&self) -> anyhow::Result<api::Stats> {
        let client = api::Client::new(&format!("http://{}", self.addr))?;
        Ok(client.stats().stats().send().await?)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Idem => "idem",
        Mode::Retry => "retry",
        Mode::Budget => "budget",
    }
}

/// One configuration's result.
#[derive(Debug, Clone)]
pub struct Chain {
    pub mode: Mode,
    pub requests: usize,
    /// `doWork` calls that reached the bottom layer.
    pub bottom: i64,
    /// The slowest user request, and by how much it overran its deadline.
    pub slowest: Duration,
    pub overrun: Duration,
    pub seconds: f64,
}

/// Budget retries of the bucket at depth `depth` in [`Mode::Budget`]: 10%
/// of the requests that layer's client is expected to see.
fn budget_at(requests: usize, depth: u32) -> u32 {
    let seen = requests as f64 * 1.1_f64.powi(depth as i32);
    (seen * 0.1).round() as u32
}

/// Runs `requests` user requests through a fresh three-layer chain.
pub async fn chain(
    exe: &Path,
    mode: Mode,
    requests: usize,
    concurrency: usize,
) -> anyhow::Result<Chain> {
    let dir = tempfile::tempdir()?;
    let bottom = Process::layer(exe, dir.path(), 3, None, mode, 0, 0).await?;
    let middle = Process::layer(
        exe,
        dir.path(),
        2,
        Some(bottom.addr),
        mode,
        budget_at(requests, 2),
        0,
    )
    .await?;
    let top = Process::layer(
        exe,
        dir.path(),
        1,
        Some(middle.addr),
        mode,
        budget_at(requests, 1),
        0,
    )
    .await?;
    let client = api::Client::with_retry_client(
        &format!("http://{}", top.addr),
        crate::retry_client(mode, budget_at(requests, 0)),
    )?;
    let deadline = client.retry_client().policy().overall_deadline();
    let gate = std::sync::Arc::new(Semaphore::new(concurrency));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..requests {
        let (client, gate) = (client.clone(), std::sync::Arc::clone(&gate));
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await;
            let params = DoWorkParams {
                x_caller: "user".into(),
            };
            let body = Work {
                id: format!("request-{n}"),
                layer: None,
            };
            let t = Instant::now();
            let _ = client.work().do_work(&params, &body).send().await;
            t.elapsed()
        });
    }
    let mut slowest = Duration::ZERO;
    while let Some(done) = tasks.join_next().await {
        slowest = slowest.max(done.unwrap_or_default());
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Chain {
        mode,
        requests,
        bottom: bottom.calls().await?,
        slowest,
        overrun: slowest.saturating_sub(deadline),
        seconds,
    })
}

/// The overload test's result.
#[derive(Debug, Clone)]
pub struct Overload {
    pub limit: usize,
    pub offered: usize,
    pub accepted: usize,
    pub refused: usize,
    pub refused_p50: Duration,
    pub refused_p99: Duration,
    pub accepted_p50: Duration,
    pub accepted_p99: Duration,
    pub goodput: f64,
    pub ideal: f64,
    /// Server side: from the request reaching the router to its `503`.
    pub server_p50: Duration,
    pub server_p99: Duration,
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * q) as usize).min(sorted.len() - 1);
    sorted[i]
}

/// Offers `offered` closed-loop callers to `GET /v1/slow` (admission limit
/// `limit`, `slow_ms` per request) for `seconds`.
pub async fn overload(
    exe: &Path,
    offered: usize,
    slow_ms: u64,
    seconds: f64,
) -> anyhow::Result<Overload> {
    let dir = tempfile::tempdir()?;
    let layer = Process::layer(exe, dir.path(), 1, None, Mode::Idem, 0, slow_ms).await?;
    let url = format!("http://{}/v1/slow", layer.addr);
    let http = idem_runtime::reqwest::Client::builder()
        .pool_max_idle_per_host(offered)
        .build()?;
    // Warm the connections.
    for _ in 0..offered.min(32) {
        let _ = http.get(&url).send().await;
    }
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..offered {
        let (http, url) = (http.clone(), url.clone());
        tasks.spawn(async move {
            let (mut ok, mut refused) = (Vec::new(), Vec::new());
            while Instant::now() < until {
                let t = Instant::now();
                match http.get(&url).send().await {
                    Ok(r) if r.status() == 200 => {
                        let _ = r.bytes().await;
                        ok.push(t.elapsed());
                    }
                    Ok(r) if r.status() == 503 => {
                        let _ = r.bytes().await;
                        refused.push(t.elapsed());
                        // What a caller does with `Retry-After`, shortened
                        // so the offered load stays up.
                        tokio::time::sleep(Duration::from_millis(slow_ms)).await;
                    }
                    _ => {}
                }
            }
            (ok, refused)
        });
    }
    let (mut ok, mut refused) = (Vec::new(), Vec::new());
    while let Some(done) = tasks.join_next().await {
        if let Ok((o, r)) = done {
            ok.extend(o);
            refused.extend(r);
        }
    }
    ok.sort_unstable();
    refused.sort_unstable();
    let stats: idem_runtime::serde_json::Value = http
        .get(format!("http://{}/_refusals", layer.addr))
        .send()
        .await?
        .json()
        .await?;
    let micros = |k: &str| Duration::from_micros(stats[k].as_u64().unwrap_or(0));
    let limit = 32;
    Ok(Overload {
        limit,
        offered,
        accepted: ok.len(),
        refused: refused.len(),
        refused_p50: quantile(&refused, 0.5),
        refused_p99: quantile(&refused, 0.99),
        accepted_p50: quantile(&ok, 0.5),
        accepted_p99: quantile(&ok, 0.99),
        goodput: ok.len() as f64 / seconds,
        ideal: limit as f64 * 1000.0 / slow_ms as f64,
        server_p50: micros("p50_us"),
        server_p99: micros("p99_us"),
    })
}
