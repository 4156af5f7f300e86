//! A three-node MariaDB Galera cluster on loopback, every node taking
//! writes, with one `payments-demo serve` process on each node:
//!
//! - **duplicates**: every charge sent 20 times at once with one key,
//!   spread over the three servers, so that its claims race on three
//!   nodes: certification lets one commit and aborts the others at
//!   `COMMIT` (error 1213), which the server answers as a retryable `503`;
//! - **node killed**: the third node SIGKILLed under keyed load, and
//!   started again 5 s later, rejoining the cluster;
//! - **payouts**: phased payouts at a bank that takes a second, and the
//!   node of the server running them killed between their phases.
//!
//! Then the calls left without an answer are settled with their keys and
//! the cluster is counted: duplicated charges, acknowledged charges or
//! payouts missing, keys stuck in flight, transfers made twice. A plain
//! MariaDB server takes the duplicates load first, for the throughput
//! against one machine.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use idem_runtime::sqlx::{self, Connection as _};

use crate::api::Client;
use crate::bank::Bank;
use crate::demo::Server;
use crate::faults::{Log, recorder};
use crate::load::{self, Kind, Load};

/// A scenario on the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Every charge sent 20 times at once over the three nodes.
    Duplicates,
    /// A node SIGKILLed under load, then rejoining.
    NodeKilled,
    /// Phased payouts with their node killed between phases.
    Payouts,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [
        Scenario::Duplicates,
        Scenario::NodeKilled,
        Scenario::Payouts,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Duplicates => "20 copies of each charge over 3 nodes",
            Scenario::NodeKilled => "node 3 SIGKILLed, rejoins 5 s later",
            Scenario::Payouts => "payouts, their node killed between phases",
        }
    }
}

/// What the scenarios run with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub scenarios: Vec<Scenario>,
    /// Workers charging, one call at a time each.
    pub workers: usize,
    /// Copies of each charge in the duplicates scenario.
    pub copies: usize,
    /// Seconds of load per scenario (before and after a fault, each).
    pub seconds: u64,
    pub mariadbd: PathBuf,
    /// The Galera provider library (`libgalera_smm.so`).
    pub provider: PathBuf,
}

/// `mariadbd` (or `mysqld`) under `/usr/sbin` or on `PATH`.
pub fn find_mariadbd() -> Option<PathBuf> {
    ["/usr/sbin/mariadbd", "/usr/sbin/mysqld"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join("mariadbd"))
                    .find(|p| p.is_file())
            })
        })
}

/// The Galera 4 provider, where Debian's `galera-4` puts it.
pub fn find_galera() -> Option<PathBuf> {
    [
        "/usr/lib/galera/libgalera_smm.so",
        "/usr/lib/libgalera_smm.so",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// One `mariadbd`, alone or a Galera node.
struct Node {
    mariadbd: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// `--wsrep-*` options, empty for a server alone.
    wsrep: Vec<String>,
    child: Option<tokio::process::Child>,
}

impl Node {
    async fn new(mariadbd: &Path, wsrep: Vec<String>) -> anyhow::Result<Node> {
        let dir = tempfile::Builder::new().prefix("idem-galera-").tempdir()?;
        let user: &[&str] = if root() { &["--user=mysql"] } else { &[] };
        if root() {
            let status = std::process::Command::new("chown")
                .arg("mysql")
                .arg(dir.path())
                .status()?;
            anyhow::ensure!(status.success(), "cannot hand {:?} to mysql", dir.path());
        }
        let out = tokio::process::Command::new("mariadb-install-db")
            .args(user)
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .output()
            .await
            .context("mariadb-install-db")?;
        anyhow::ensure!(
            out.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(Node {
            mariadbd: mariadbd.to_owned(),
            port: free_port()?,
            dir,
            wsrep,
            child: None,
        })
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// Starts the server (`extra`: `--wsrep-new-cluster` for the first
    /// node) and waits until it answers on its socket.
    async fn start(&mut self, extra: &[&str]) -> anyhow::Result<()> {
        let d = self.dir.path();
        let mut command = tokio::process::Command::new(&self.mariadbd);
        command.arg("--no-defaults");
        if root() {
            command.arg("--user=mysql");
        }
        command
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--log-error={}", d.join("mariadb.err").display()))
            .args([
                "--skip-log-bin",
                "--binlog-format=ROW",
                "--default-storage-engine=InnoDB",
                "--innodb-autoinc-lock-mode=2",
                "--innodb-flush-log-at-trx-commit=2",
                "--max-connections=400",
            ])
            .args(&self.wsrep)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        self.child = Some(command.spawn().context("cannot start mariadbd")?);
        let since = Instant::now();
        while self.admin().await.is_err() {
            anyhow::ensure!(
                since.elapsed() < Duration::from_secs(120),
                "mariadbd on port {} did not answer within 120 s: see {}",
                self.port,
                d.join("mariadb.err").display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// A root connection over the socket.
    async fn admin(&self) -> anyhow::Result<sqlx::MySqlConnection> {
        let options = sqlx::mysql::MySqlConnectOptions::new()
            .socket(self.socket())
            .username("root");
        Ok(sqlx::MySqlConnection::connect_with(&options).await?)
    }

    async fn status(&self, name: &str) -> anyhow::Result<String> {
        let mut conn = self.admin().await?;
        let row: Option<(String, String)> = sqlx::query_as(&format!("SHOW STATUS LIKE '{name}'"))
            .fetch_optional(&mut conn)
            .await?;
        conn.close().await?;
        Ok(row.map(|(_, v)| v).unwrap_or_default())
    }

    /// Waits until the node is a synced member of a cluster of `size`.
    async fn synced(&self, size: usize) -> anyhow::Result<()> {
        let since = Instant::now();
        loop {
            let state = self
                .status("wsrep_local_state_comment")
                .await
                .unwrap_or_default();
            let members = self.status("wsrep_cluster_size").await.unwrap_or_default();
            if state == "Synced" && members == size.to_string() {
                return Ok(());
            }
            anyhow::ensure!(
                since.elapsed() < Duration::from_secs(120),
                "node on port {} is {state:?} in a cluster of {members:?} after 120 s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn url(&self) -> String {
        format!("mysql://idem@127.0.0.1:{}/payments", self.port)
    }

    /// SIGKILL: the node leaves the cluster without a word.
    async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.start_kill()?;
            child.wait().await?;
        }
        Ok(())
    }
}

/// The application's user and database (replicated to every node).
async fn provision(node: &Node) -> anyhow::Result<()> {
    let mut conn = node.admin().await?;
    for statement in [
        "CREATE USER IF NOT EXISTS 'idem'@'%'",
        "GRANT ALL ON *.* TO 'idem'@'%'",
        "CREATE DATABASE IF NOT EXISTS payments",
    ] {
        sqlx::Executor::execute(&mut conn, statement).await?;
    }
    conn.close().await?;
    Ok(())
}

/// Three Galera nodes on loopback, the first bootstrapping the cluster.
async fn cluster(settings: &Settings) -> anyhow::Result<Vec<Node>> {
    let gcomm: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let address = format!(
        "gcomm://{}",
        gcomm
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut nodes = Vec::new();
    for (i, port) in gcomm.iter().enumerate() {
        let (ist, sst) = (free_port()?, free_port()?);
        let wsrep = vec![
            "--wsrep-on=ON".to_owned(),
            format!("--wsrep-provider={}", settings.provider.display()),
            "--wsrep-cluster-name=idem".to_owned(),
            format!("--wsrep-cluster-address={address}"),
            format!("--wsrep-node-address=127.0.0.1:{port}"),
            format!("--wsrep-node-name=node{}", i + 1),
            format!(
                "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{port};\
                 ist.recv_addr=127.0.0.1:{ist}"
            ),
            "--wsrep-sst-method=rsync".to_owned(),
            format!("--wsrep-sst-receive-address=127.0.0.1:{sst}"),
        ];
        nodes.push(Node::new(&settings.mariadbd, wsrep).await?);
    }
    nodes[0].start(&["--wsrep-new-cluster"]).await?;
    for node in &mut nodes[1..] {
        node.start(&[]).await?;
    }
    for node in &nodes {
        node.synced(3).await?;
    }
    provision(&nodes[0]).await?;
    Ok(nodes)
}

/// What one scenario measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub scenario: Option<Scenario>,
    /// What the row ran.
    pub label: String,
    /// `Galera, 3 nodes` or `MariaDB alone`.
    pub setup: &'static str,
    pub calls: usize,
    pub requests: usize,
    pub per_second: f64,
    pub duplicates: usize,
    pub lost: usize,
    pub stuck: usize,
    /// Payouts: distinct transfer keys the bank took, and payouts
    /// transferred under more than one.
    pub transfers: Option<(usize, usize)>,
    /// Answers that told the caller not to retry.
    pub non_retryable: usize,
    /// `503` answers (certification aborts among them).
    pub refusals: usize,
    /// Certification aborts (error 1213) the servers logged.
    pub aborts: usize,
    pub unknown: usize,
    pub reconciled: usize,
}

impl Outcome {
    /// The protocol's promise on a multi-primary cluster.
    pub fn holds(&self) -> bool {
        self.duplicates == 0
            && self.lost == 0
            && self.stuck == 0
            && self.non_retryable == 0
            && self.reconciled == self.unknown
            && self.transfers.is_none_or(|(_, twice)| twice == 0)
    }
}

/// Servers, one per URL, each with its answers recorded and its warnings kept.
struct Servers {
    servers: Vec<Server>,
    clients: Vec<Client>,
    log: Log,
    warnings: Vec<Arc<std::sync::Mutex<Vec<String>>>>,
}

impl Servers {
    async fn start(urls: &[String], bank: &Bank) -> anyhow::Result<Servers> {
        let began = Instant::now();
        let log: Log = Arc::default();
        let mut servers = Servers {
            servers: Vec::new(),
            clients: Vec::new(),
            log: Arc::clone(&log),
            warnings: Vec::new(),
        };
        for url in urls {
            let extra = [
                "--resume-base-ms",
                "200",
                "--resume-attempts",
                "40",
                "--bank-url",
                bank.url(),
            ]
            .map(str::to_owned)
            .to_vec();
            let mut server = Server::new(url, extra)?;
            servers.warnings.push(server.capture_warnings());
            server.start().await?;
            let entry = recorder(server.listen(), began, Arc::clone(&log)).await?;
            servers
                .clients
                .push(Client::new(&format!("http://{entry}"))?);
            servers.servers.push(server);
        }
        Ok(servers)
    }

    /// Counts the answers and the logged aborts into `outcome`, and stops.
    async fn finish(mut self, outcome: &mut Outcome) -> anyhow::Result<()> {
        for server in &mut self.servers {
            server.kill().await?;
        }
        let answers = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        outcome.non_retryable = answers
            .iter()
            .filter(|a| a.status >= 400 && a.retryable != Some(true))
            .count();
        outcome.refusals = answers.iter().filter(|a| a.status == 503).count();
        outcome.aborts = self
            .warnings
            .iter()
            .map(|w| {
                w.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .filter(|l| l.contains("Deadlock found") || l.contains("1213"))
                    .count()
            })
            .sum();
        Ok(())
    }
}

/// Runs every scenario in `settings`, each on a fresh cluster.
pub async fn run(settings: &Settings) -> anyhow::Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    if settings.scenarios.contains(&Scenario::Duplicates) {
        eprintln!("galera: the same load on MariaDB alone…");
        let mut alone = Node::new(&settings.mariadbd, Vec::new()).await?;
        alone.start(&[]).await?;
        provision(&alone).await?;
        let urls = vec![alone.url(); 3];
        for copies in [1, settings.copies] {
            outcomes.push(charges(settings, &urls, copies, "MariaDB alone", None).await?);
        }
    }
    for &scenario in &settings.scenarios {
        eprintln!("galera: {}…", scenario.name());
        let mut nodes = cluster(settings).await?;
        let urls: Vec<String> = nodes.iter().map(Node::url).collect();
        let done = match scenario {
            Scenario::Duplicates => {
                let mut both = Vec::new();
                for copies in [1, settings.copies] {
                    both.push(charges(settings, &urls, copies, "Galera, 3 nodes", None).await?);
                }
                Ok(both)
            }
            Scenario::NodeKilled => {
                charges(settings, &urls, 1, "Galera, 3 nodes", Some(&mut nodes[2]))
                    .await
                    .map(|o| vec![o])
            }
            Scenario::Payouts => payouts(settings, &mut nodes).await.map(|o| vec![o]),
        }
        .with_context(|| format!("the `{}` scenario", scenario.name()))?;
        for outcome in done {
            outcomes.push(Outcome {
                scenario: Some(scenario),
                label: if outcome.label.is_empty() {
                    scenario.name().to_owned()
                } else {
                    outcome.label.clone()
                },
                ..outcome
            });
        }
    }
    Ok(outcomes)
}

/// Keyed charges over the servers at `urls`, each sent `copies` times at
/// once with its key; with `killed`, that node is SIGKILLed after
/// `seconds` of load, started again 5 s later, and the load goes on for
/// `seconds` once it has rejoined.
async fn charges(
    settings: &Settings,
    urls: &[String],
    copies: usize,
    setup: &'static str,
    killed: Option<&mut Node>,
) -> anyhow::Result<Outcome> {
    let bank = Bank::start().await?;
    let servers = Servers::start(urls, &bank).await?;
    let account = format!("acct-{:08x}", rand::random::<u32>());
    let started = Instant::now();
    let load = Load::start(
        Kind::Charge,
        &servers.clients,
        settings.workers,
        &account,
        copies,
        0,
    );
    tokio::time::sleep(Duration::from_secs(settings.seconds)).await;
    let fault = killed.is_some();
    if let Some(node) = killed {
        node.kill().await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        node.start(&[]).await?;
        node.synced(3).await?;
        tokio::time::sleep(Duration::from_secs(settings.seconds)).await;
    }
    let mut done = load.stop(0).await;
    let elapsed = started.elapsed();
    let unknown = done.pending.len();
    let reconciled = load::reconcile(&servers.clients[0], Kind::Charge, &account, &mut done).await;
    let counted = load::count_charges(&urls[0], &account, &done.acked).await?;
    let mut outcome = Outcome {
        scenario: Some(Scenario::Duplicates),
        // A fault's row is named after its scenario.
        label: if fault {
            String::new()
        } else if copies == 1 {
            "one copy of each charge".to_owned()
        } else {
            format!("{copies} copies of each charge over 3 servers")
        },
        setup,
        calls: done.calls,
        requests: done.sent,
        per_second: done.calls as f64 / elapsed.as_secs_f64(),
        duplicates: counted.duplicates,
        lost: counted.lost,
        stuck: counted.stuck,
        unknown,
        reconciled,
        ..Outcome::default()
    };
    servers.finish(&mut outcome).await?;
    Ok(outcome)
}

async fn payouts(settings: &Settings, nodes: &mut [Node]) -> anyhow::Result<Outcome> {
    let bank = Bank::start().await?;
    bank.answer_after(Duration::from_secs(1));
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let servers = Servers::start(&urls, &bank).await?;
    let account = format!("acct-{:08x}", rand::random::<u32>());
    // Every payout through the server on node 2.
    let count = settings.workers;
    let mut calls = tokio::task::JoinSet::new();
    let keys: Vec<_> = (0..count)
        .map(|_| idem_runtime::client::IdempotencyKey::new_v4())
        .collect();
    for (n, key) in keys.iter().enumerate() {
        let (client, account, key) = (servers.clients[1].clone(), account.clone(), key.clone());
        calls.spawn(async move { (n, load::call(&client, Kind::Payout, &account, n, key).await) });
    }
    // Once every payout is at the bank, its node dies.
    let since = Instant::now();
    while bank.calls_to("transfers").len() < count && since.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes[1].kill().await?;
    bank.answer_after(Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(5)).await;
    nodes[1].start(&[]).await?;
    nodes[1].synced(3).await?;
    let mut done = load::Done::default();
    while let Some(answer) = calls.join_next().await {
        let (n, ok) = answer?;
        let key = keys[n].clone();
        if ok {
            done.acked.insert(n, key.as_str().to_owned());
        } else {
            done.pending.push((n, key));
        }
    }
    done.calls = count;
    let unknown = done.pending.len();
    // Settled through another node's server.
    let reconciled = load::reconcile(&servers.clients[0], Kind::Payout, &account, &mut done).await;
    let counted = load::count_payouts(&urls[0], &account, &done.acked).await?;
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for call in bank.calls_to("transfers").iter().filter(|c| c.accepted) {
        *per_key.entry(call.key.clone()).or_default() += 1;
    }
    let mut outcome = Outcome {
        setup: "Galera, 3 nodes",
        calls: count,
        requests: count,
        lost: counted.lost,
        stuck: counted.stuck,
        transfers: Some((per_key.len(), per_key.len().saturating_sub(count))),
        unknown,
        reconciled,
        ..Outcome::default()
    };
    servers.finish(&mut outcome).await?;
    Ok(outcome)
}

/// The table of every scenario.
pub fn report(settings: &Settings, outcomes: &[Outcome]) -> String {
    let mut out = format!(
        "MariaDB Galera, 3 nodes on loopback, one server per node; {} workers, {} s of load\n\n\
         | scenario | setup | calls | requests | calls/s | dup | lost | stuck | transfers | twice | non-retryable | 503s | certification aborts | unknown | settled |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        settings.workers, settings.seconds
    );
    for o in outcomes {
        let (transfers, twice) = o
            .transfers
            .map_or(("-".to_owned(), "-".to_owned()), |(t, d)| {
                (t.to_string(), d.to_string())
            });
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {transfers} | {twice} | {} | {} | {} | {} | {} |\n",
            o.label,
            o.setup,
            o.calls,
            o.requests,
            o.per_second,
            o.duplicates,
            o.lost,
            o.stuck,
            o.non_retryable,
            o.refusals,
            o.aborts,
            o.unknown,
            o.reconciled,
        ));
    }
    out.push_str(
        "\ndup: charges beyond the first of an order. lost: acknowledged to the caller, missing \
         from the cluster. twice: payouts the bank took under two keys. certification aborts: \
         claims that lost to one on another node at COMMIT (error 1213), each answered a \
         retryable 503 and rolled back.\n",
    );
    out
}
