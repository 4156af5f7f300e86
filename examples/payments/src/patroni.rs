//! PostgreSQL under Patroni, the HA manager production teams run: a
//! private etcd, three Patroni members on loopback (PostgreSQL with
//! `use_pg_rewind`, short `ttl` and `loop_wait`) and HAProxy routing to
//! the member whose `GET /primary` answers 200. Two `payments-demo serve`
//! processes under keyed load, one through HAProxy and one given the
//! members as a libpq host list, charging orders and paying out through a
//! bank stub, while one of these happens, each on a fresh cluster:
//!
//! - the leader's Patroni and PostgreSQL SIGKILLed;
//! - the leader's Patroni and PostgreSQL SIGSTOPped past `ttl`, then
//!   resumed: a primary that was deposed while it hung;
//! - a planned switchover (`POST /switchover`) under load;
//! - the synchronous standby SIGKILLed, in `synchronous_mode` and in
//!   `synchronous_mode_strict`;
//! - both standbys SIGKILLed, then the leader, then a failover by hand to
//!   a standby: what `synchronous_mode` without `strict` loses;
//! - the leader SIGKILLed with asynchronous standbys (`synchronous_mode`
//!   off);
//! - etcd stopped for longer than `ttl`, then restarted.
//!
//! Afterwards every stopped member is started again (it rejoins, rewound
//! by `pg_rewind` where it diverged), and the counts are read from the
//! final leader and from every member: charges acknowledged and missing,
//! duplicated, charges written by a member that did not hold the leader
//! key at that moment (etcd is polled every 50 ms for it), payouts and
//! their bank transfers, keys left in flight.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use idem_runtime::serde_json::{self, Value, json};
use idem_runtime::sqlx::{self, Connection as _};

use crate::bank::Bank;
use crate::demo::Server;
use crate::failover::{Fleet, TRANSFER_TAKES, fleet, ms, probe, transfers_per_key};
use crate::faults::{Answer, Log};
use crate::load::{self, Kind, Load};

/// The members' names; the leader key's value is one of them.
const MEMBERS: [&str; 3] = ["m1", "m2", "m3"];

/// Patroni's `ttl`: 20 s, the least Patroni 3.2 and later keep (they
/// raise a smaller one to 20 without a word).
const TTL: u64 = 20;

/// How long the leader runs without a standby in `standbys-lost`.
const ALONE: Duration = Duration::from_secs(32);

/// A way the cluster is hurt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// The leader's Patroni and PostgreSQL SIGKILLed (synchronous mode).
    Kill,
    /// The leader's Patroni and PostgreSQL SIGSTOPped past ttl, then
    /// resumed (synchronous mode).
    Hang,
    /// A planned switchover to the synchronous standby under load.
    Switchover,
    /// The synchronous standby SIGKILLed, synchronous_mode on.
    SyncStandby,
    /// The synchronous standby SIGKILLed, synchronous_mode_strict.
    SyncStandbyStrict,
    /// Both standbys SIGKILLed, then the leader; a failover by hand to a
    /// standby, synchronous_mode on.
    StandbysLost,
    /// The same with synchronous_mode_strict.
    StandbysLostStrict,
    /// The leader SIGKILLed, synchronous_mode off (asynchronous standbys).
    Async,
    /// etcd stopped for longer than ttl, then restarted.
    Etcd,
}

/// How the cluster replicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    On,
    Strict,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::On => "on",
            Mode::Strict => "strict",
        }
    }
}

impl Scenario {
    pub const ALL: [Scenario; 9] = [
        Scenario::Kill,
        Scenario::Hang,
        Scenario::Switchover,
        Scenario::SyncStandby,
        Scenario::SyncStandbyStrict,
        Scenario::StandbysLost,
        Scenario::StandbysLostStrict,
        Scenario::Async,
        Scenario::Etcd,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Kill => "leader SIGKILLed",
            Scenario::Hang => "leader SIGSTOPped past ttl, resumed",
            Scenario::Switchover => "switchover under load",
            Scenario::SyncStandby => "sync standby SIGKILLed",
            Scenario::SyncStandbyStrict => "sync standby SIGKILLed",
            Scenario::StandbysLost => "both standbys lost, leader killed, failover by hand",
            Scenario::StandbysLostStrict => "both standbys lost, leader killed, failover by hand",
            Scenario::Async => "leader SIGKILLed",
            Scenario::Etcd => "etcd stopped past ttl, restarted",
        }
    }

    fn mode(self) -> Mode {
        match self {
            Scenario::SyncStandbyStrict | Scenario::StandbysLostStrict => Mode::Strict,
            Scenario::Async => Mode::Off,
            _ => Mode::On,
        }
    }

    /// Whether the mode promises that nothing acknowledged is lost.
    fn promises(self) -> bool {
        !matches!(self, Scenario::Async | Scenario::StandbysLost)
    }
}

/// What the scenarios run with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub scenarios: Vec<Scenario>,
    pub workers: usize,
    pub payout_workers: usize,
    /// Load before the fault, and after the cluster has a leader again.
    pub settle: Duration,
    /// The `patroni` executable.
    pub patroni: PathBuf,
    /// PostgreSQL's server binaries.
    pub pg_bin: PathBuf,
    pub etcd: PathBuf,
    pub haproxy: PathBuf,
    /// Run the scenarios one after the other on one cluster, healed
    /// between them, where their synchronous modes agree (a short run).
    pub one_cluster: bool,
    /// HAProxy without `on-marked-down shutdown-sessions`: the sessions
    /// to a member it marks down are kept.
    pub haproxy_keeps_sessions: bool,
    /// An `idem` executable: after each scenario, `idem keys stats
    /// --patroni` is asked which member the store reads.
    pub idem: Option<PathBuf>,
}

/// `patroni` from a virtual environment of its own under the temporary
/// directory, created (`python3 -m venv`, `pip install 'patroni[etcd3]'
/// psycopg2-binary`) when missing. The interpreter must be one the
/// `postgres` user may run when we are root: `/usr/bin/python3` first.
pub async fn patroni_from_pypi() -> anyhow::Result<PathBuf> {
    let venv = std::env::temp_dir().join("idem-patroni-venv");
    let patroni = venv.join("bin/patroni");
    if patroni.is_file() {
        return Ok(patroni);
    }
    let python = ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| {
            std::process::Command::new(p)
                .args(["-m", "venv", "--help"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .context("no python3 with the venv module (Debian: apt-get install python3-venv)")?;
    eprintln!(
        "patroni: creating {} and installing Patroni from PyPI…",
        venv.display()
    );
    let status = tokio::process::Command::new(python)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .await?;
    anyhow::ensure!(status.success(), "python3 -m venv failed");
    let status = tokio::process::Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "patroni[etcd3]", "psycopg2-binary"])
        .status()
        .await?;
    if !status.success() {
        let _ = std::fs::remove_dir_all(&venv);
        bail!("pip install patroni[etcd3] psycopg2-binary failed");
    }
    Ok(patroni)
}

/// `etcd` and `haproxy` where Debian puts them, or on `PATH`.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
        .or_else(|| {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// `patroni --version`'s number.
pub fn patroni_version(patroni: &Path) -> String {
    std::process::Command::new(patroni)
        .arg("--version")
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .replace("patroni ", "")
        })
        .unwrap_or_else(|| "?".to_owned())
}

/// Ports below the kernel's ephemeral range (32768–60999), free now.
fn ports(n: usize) -> anyhow::Result<Vec<u16>> {
    for _ in 0..50 {
        let base = 20_000 + (rand::random::<u16>() % 1_200) * 10;
        let candidates: Vec<u16> = (0..n)
            .map(|i| base + u16::try_from(i).unwrap_or(0))
            .collect();
        if candidates
            .iter()
            .all(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        {
            return Ok(candidates);
        }
    }
    bail!("no {n} free ports below 32768")
}

/// The user PostgreSQL and Patroni run as when we are root.
fn postgres_ids() -> anyhow::Result<Option<(u32, u32)>> {
    let out = std::process::Command::new("id").arg("-u").output()?;
    if String::from_utf8_lossy(&out.stdout).trim() != "0" {
        return Ok(None);
    }
    let id = |flag: &str| -> anyhow::Result<u32> {
        let out = std::process::Command::new("id")
            .args([flag, "postgres"])
            .output()?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .context("running as root, and there is no `postgres` user to run PostgreSQL as")
    };
    Ok(Some((id("-u")?, id("-g")?)))
}

fn signal(signal: &str, pids: &[String]) {
    if pids.is_empty() {
        return;
    }
    let _ = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids)
        .stderr(Stdio::null())
        .status();
}

/// One Patroni member.
struct Member {
    name: &'static str,
    pg_port: u16,
    rest_port: u16,
    config: PathBuf,
    data: PathBuf,
    process: Option<tokio::process::Child>,
}

impl Member {
    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.pg_port)
    }

    /// The postmaster and every process it started.
    fn postgres_pids(&self) -> Vec<String> {
        let Ok(pid) = std::fs::read_to_string(self.data.join("postmaster.pid")) else {
            return Vec::new();
        };
        let Some(pid) = pid.lines().next().map(str::to_owned) else {
            return Vec::new();
        };
        if !Path::new("/proc").join(&pid).exists() {
            return Vec::new();
        }
        let mut pids = crate::cluster::children_of(&pid);
        pids.push(pid);
        pids
    }

    fn patroni_pid(&self) -> Option<String> {
        self.process
            .as_ref()
            .and_then(tokio::process::Child::id)
            .map(|p| p.to_string())
    }

    /// Patroni and its PostgreSQL, all at once.
    fn signal_all(&self, name: &str) {
        let mut pids = self.postgres_pids();
        pids.extend(self.patroni_pid());
        signal(name, &pids);
    }
}

/// etcd, three Patroni members and HAProxy, in a temporary directory.
struct Patroni {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    etcd_port: u16,
    etcd_peer: u16,
    haproxy_port: u16,
    etcd: Option<tokio::process::Child>,
    haproxy: Option<tokio::process::Child>,
    ids: Option<(u32, u32)>,
    mode: Mode,
    settings: Settings,
    http: idem_runtime::reqwest::Client,
}

impl Patroni {
    async fn start(settings: &Settings, mode: Mode) -> anyhow::Result<Patroni> {
        let dir = tempfile::Builder::new().prefix("idem-patroni-").tempdir()?;
        let ids = postgres_ids()?;
        let p = ports(9)?;
        let mut cluster = Patroni {
            members: MEMBERS
                .iter()
                .enumerate()
                .map(|(i, &name)| Member {
                    name,
                    pg_port: p[3 + i],
                    rest_port: p[6 + i],
                    config: dir.path().join(format!("{name}.yml")),
                    data: dir.path().join(name),
                    process: None,
                })
                .collect(),
            etcd_port: p[0],
            etcd_peer: p[1],
            haproxy_port: p[2],
            dir,
            etcd: None,
            haproxy: None,
            ids,
            mode,
            settings: settings.clone(),
            http: idem_runtime::reqwest::Client::builder()
                .timeout(Duration::from_millis(800))
                .build()?,
        };
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(cluster.dir.path(), Some(uid), Some(gid))?;
        }
        cluster.write_configs(mode)?;
        cluster.start_etcd().await?;
        // HAProxy's checks settle while the members start.
        cluster.start_haproxy()?;
        // The first member bootstraps the cluster; the others copy it.
        cluster.start_member(0)?;
        cluster
            .wait_for("the first member to lead", Duration::from_secs(60), |c| {
                c.iter().any(|m| m.role == "leader" && m.state == "running")
            })
            .await?;
        cluster.start_member(1)?;
        cluster.start_member(2)?;
        cluster
            .wait_for("both standbys to stream", Duration::from_secs(90), |c| {
                c.iter()
                    .filter(|m| m.role != "leader" && m.replicating())
                    .count()
                    == 2
                    && (mode == Mode::Off || c.iter().any(|m| m.role == "sync_standby"))
            })
            .await?;
        anyhow::ensure!(
            cluster.standbys_streaming(Duration::from_secs(60)).await,
            "the standbys are not streaming from the leader after 60 s; logs in {}",
            cluster.dir.path().display()
        );
        cluster.routed().await?;
        Ok(cluster)
    }

    fn write_configs(&self, mode: Mode) -> anyhow::Result<()> {
        let dir = self.dir.path().display();
        let bin = self.settings.pg_bin.display();
        for m in &self.members {
            let config = format!(
                "scope: idem\n\
                 name: {name}\n\
                 log: {{level: INFO}}\n\
                 restapi: {{listen: '127.0.0.1:{rest}', connect_address: '127.0.0.1:{rest}'}}\n\
                 etcd3: {{hosts: '127.0.0.1:{etcd}'}}\n\
                 bootstrap:\n  \
                   dcs:\n    \
                     ttl: {TTL}\n    \
                     loop_wait: 2\n    \
                     retry_timeout: 5\n    \
                     maximum_lag_on_failover: {max_lag}\n    \
                     synchronous_mode: {sync}\n    \
                     synchronous_mode_strict: {strict}\n    \
                     postgresql:\n      \
                       use_pg_rewind: true\n      \
                       use_slots: true\n      \
                       parameters: {{wal_log_hints: 'on', max_connections: 100, fsync: 'off', wal_keep_size: '256MB'}}\n  \
                   initdb: [{{encoding: UTF8}}]\n  \
                   pg_hba: ['local all all trust', 'host all all 127.0.0.1/32 trust', 'host replication all 127.0.0.1/32 trust']\n\
                 postgresql:\n  \
                   listen: '127.0.0.1:{pg}'\n  \
                   connect_address: '127.0.0.1:{pg}'\n  \
                   data_dir: '{data}'\n  \
                   bin_dir: '{bin}'\n  \
                   pgpass: '{dir}/pgpass-{name}'\n  \
                   authentication:\n    \
                     replication: {{username: postgres}}\n    \
                     superuser: {{username: postgres}}\n    \
                     rewind: {{username: postgres}}\n  \
                   parameters: {{unix_socket_directories: '{dir}', idem.node: {name}}}\n",
                name = m.name,
                rest = m.rest_port,
                etcd = self.etcd_port,
                sync = mode != Mode::Off,
                // Asynchronous standbys a second behind may be promoted.
                max_lag = if mode == Mode::Off { 1 << 30 } else { 1 << 20 },
                strict = mode == Mode::Strict,
                pg = m.pg_port,
                data = m.data.display(),
            );
            std::fs::write(&m.config, config)?;
            if let Some((uid, gid)) = self.ids {
                std::os::unix::fs::chown(&m.config, Some(uid), Some(gid))?;
            }
        }
        let servers: String = self
            .members
            .iter()
            .map(|m| {
                format!(
                    "  server {} 127.0.0.1:{} maxconn 100 check port {}\n",
                    m.name, m.pg_port, m.rest_port
                )
            })
            .collect();
        std::fs::write(
            self.dir.path().join("haproxy.cfg"),
            format!(
                "global\n  maxconn 400\n\
                 defaults\n  mode tcp\n  timeout connect 4s\n  timeout client 30m\n  \
                 timeout server 30m\n  timeout check 2s\n\
                 listen primary\n  bind 127.0.0.1:{}\n  option httpchk OPTIONS /primary\n  \
                 http-check expect status 200\n  \
                 default-server inter 3s fall 3 rise 2{}\n{servers}",
                self.haproxy_port,
                haproxy_down(&self.settings),
            ),
        )?;
        Ok(())
    }

    fn log(&self, name: &str) -> anyhow::Result<Stdio> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))?;
        Ok(Stdio::from(file))
    }

    async fn start_etcd(&mut self) -> anyhow::Result<()> {
        let peer = format!("http://127.0.0.1:{}", self.etcd_peer);
        let client = format!("http://127.0.0.1:{}", self.etcd_port);
        let child = tokio::process::Command::new(&self.settings.etcd)
            .args(["--name", "e0", "--data-dir"])
            .arg(self.dir.path().join("etcd"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &format!("e0={peer}"),
                "--log-level",
                "warn",
            ])
            .stdin(Stdio::null())
            .stdout(self.log("etcd")?)
            .stderr(self.log("etcd")?)
            .kill_on_drop(true)
            .spawn()
            .context("starting etcd")?;
        self.etcd = Some(child);
        let since = Instant::now();
        while self
            .http
            .get(format!("{client}/version"))
            .send()
            .await
            .is_err()
        {
            anyhow::ensure!(
                since.elapsed() < Duration::from_secs(20),
                "etcd did not answer within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    async fn stop_etcd(&mut self) -> anyhow::Result<()> {
        if let Some(mut etcd) = self.etcd.take() {
            if let Some(pid) = etcd.id() {
                signal("TERM", &[pid.to_string()]);
            }
            etcd.wait().await?;
        }
        Ok(())
    }

    fn start_member(&mut self, i: usize) -> anyhow::Result<()> {
        let log = self.log(self.members[i].name)?;
        let log_err = self.log(self.members[i].name)?;
        let mut command = tokio::process::Command::new(&self.settings.patroni);
        command
            .arg(&self.members[i].config)
            .env("HOME", self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(true);
        if let Some((uid, gid)) = self.ids {
            command.uid(uid).gid(gid);
        }
        self.members[i].process = Some(command.spawn().context("starting patroni")?);
        Ok(())
    }

    fn start_haproxy(&mut self) -> anyhow::Result<()> {
        let child = tokio::process::Command::new(&self.settings.haproxy)
            .arg("-f")
            .arg(self.dir.path().join("haproxy.cfg"))
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(self.log("haproxy")?)
            .stderr(self.log("haproxy")?)
            .kill_on_drop(true)
            .spawn()
            .context("starting haproxy")?;
        self.haproxy = Some(child);
        Ok(())
    }

    /// Waits until HAProxy routes to the leader alone.
    async fn routed(&self) -> anyhow::Result<()> {
        // HAProxy counts every server up until its checks fail (`fall 3`,
        // `inter 3s`): ready once ten connections in a row reach the
        // leader, round robin over three servers.
        let since = Instant::now();
        let mut in_a_row = 0;
        loop {
            let url = self.haproxy_url();
            let routed = async {
                let mut conn = sqlx::PgConnection::connect(&url).await?;
                let row: (bool,) = sqlx::query_as("SELECT pg_is_in_recovery()")
                    .fetch_one(&mut conn)
                    .await?;
                anyhow::Ok(!row.0)
            };
            if matches!(
                tokio::time::timeout(Duration::from_secs(2), routed).await,
                Ok(Ok(true))
            ) {
                in_a_row += 1;
                if in_a_row == 10 {
                    return Ok(());
                }
                continue;
            }
            in_a_row = 0;
            anyhow::ensure!(
                since.elapsed() < Duration::from_secs(30),
                "HAProxy did not route to the leader within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn haproxy_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.haproxy_port
        )
    }

    fn host_list_url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.pg_port))
            .collect();
        format!("postgres://postgres@{}/postgres", hosts.join(","))
    }

    fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_port)
    }

    /// `GET /cluster` from the first member that answers.
    async fn members(&self) -> Option<Vec<MemberState>> {
        for m in &self.members {
            let Ok(response) = self
                .http
                .get(format!("http://127.0.0.1:{}/cluster", m.rest_port))
                .send()
                .await
            else {
                continue;
            };
            let Ok(body) = response.json::<Value>().await else {
                continue;
            };
            let states = body["members"]
                .as_array()
                .map(|list| {
                    list.iter()
                        .map(|m| MemberState {
                            name: m["name"].as_str().unwrap_or_default().to_owned(),
                            role: m["role"].as_str().unwrap_or_default().to_owned(),
                            state: m["state"].as_str().unwrap_or_default().to_owned(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            return Some(states);
        }
        None
    }

    async fn wait_for(
        &self,
        what: &str,
        within: Duration,
        done: impl Fn(&[MemberState]) -> bool,
    ) -> anyhow::Result<Duration> {
        let since = Instant::now();
        loop {
            if let Some(states) = self.members().await
                && done(&states)
            {
                return Ok(since.elapsed());
            }
            if since.elapsed() > within {
                bail!(
                    "waited {} s for {what}; the members: {:?}; logs in {}",
                    within.as_secs(),
                    self.members().await,
                    self.dir.path().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The member `role` names (`leader`, `sync_standby`), by index.
    async fn with_role(&self, role: &str) -> anyhow::Result<usize> {
        let states = self.members().await.context("no member answers")?;
        let name = states
            .iter()
            .find(|m| m.role == role)
            .map(|m| m.name.clone())
            .with_context(|| format!("no {role}: {states:?}"))?;
        self.index(&name)
    }

    fn index(&self, name: &str) -> anyhow::Result<usize> {
        self.members
            .iter()
            .position(|m| m.name == name)
            .with_context(|| format!("no member {name}"))
    }

    /// SIGKILLs a member's Patroni and PostgreSQL.
    async fn kill(&mut self, i: usize) {
        self.members[i].signal_all("KILL");
        if let Some(mut child) = self.members[i].process.take() {
            let _ = child.wait().await;
        }
    }

    /// Whether two standbys stream from the leader (its
    /// `pg_stat_replication`) within `within`: Patroni before 3.0.4 says
    /// `running` of a standby that may not stream yet.
    async fn standbys_streaming(&self, within: Duration) -> bool {
        let since = Instant::now();
        while since.elapsed() < within {
            if let Ok(leader) = self.with_role("leader").await {
                let counted = async {
                    let mut conn = sqlx::PgConnection::connect(&self.members[leader].url()).await?;
                    let (n,): (i64,) = sqlx::query_as(
                        "SELECT COUNT(*) FROM pg_stat_replication WHERE state = 'streaming'",
                    )
                    .fetch_one(&mut conn)
                    .await?;
                    let _ = conn.close().await;
                    anyhow::Ok(n)
                };
                if matches!(counted.await, Ok(2)) {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    /// What Patroni stored: `GET /config`.
    async fn stored_config(&self) -> Value {
        for m in &self.members {
            if let Ok(r) = self
                .http
                .get(format!("http://127.0.0.1:{}/config", m.rest_port))
                .send()
                .await
                && let Ok(v) = r.json::<Value>().await
            {
                return v;
            }
        }
        Value::Null
    }

    /// Asks for a switchover or failover at member `via`'s REST API.
    async fn request(&self, via: usize, action: &str, body: Value) -> anyhow::Result<String> {
        let response = idem_runtime::reqwest::Client::new()
            .post(format!(
                "http://127.0.0.1:{}/{action}",
                self.members[via].rest_port
            ))
            .json(&body)
            .timeout(Duration::from_secs(60))
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        anyhow::ensure!(status.is_success(), "{action}: {status} {text}");
        Ok(text)
    }

    /// Every stopped member started again, and all three running (the
    /// leader) or streaming; `false` when that did not happen in time.
    async fn heal(&mut self) -> anyhow::Result<bool> {
        if self.etcd.is_none() {
            self.start_etcd().await?;
        }
        for i in 0..self.members.len() {
            let alive = self.members[i]
                .process
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_none());
            if !alive {
                // A SIGKILLed postmaster's children may still be exiting.
                self.members[i].signal_all("KILL");
                tokio::time::sleep(Duration::from_millis(500)).await;
                self.start_member(i)?;
            }
        }
        Ok(self
            .wait_for("every member to rejoin", Duration::from_secs(120), |c| {
                c.len() == 3
                    && c.iter().filter(|m| m.role == "leader").count() == 1
                    && c.iter()
                        .filter(|m| m.role != "leader")
                        .all(MemberState::replicating)
            })
            .await
            .is_ok()
            && self.standbys_streaming(Duration::from_secs(60)).await)
    }
}

impl Drop for Patroni {
    fn drop(&mut self) {
        for m in &self.members {
            m.signal_all("CONT");
            m.signal_all("KILL");
        }
        if let Some(pid) = self.haproxy.as_ref().and_then(tokio::process::Child::id) {
            signal("KILL", &[pid.to_string()]);
        }
        if let Some(pid) = self.etcd.as_ref().and_then(tokio::process::Child::id) {
            signal("KILL", &[pid.to_string()]);
        }
    }
}

#[derive(Debug, Clone)]
struct MemberState {
    name: String,
    role: String,
    state: String,
}

impl MemberState {
    /// A standby that follows the leader: `streaming` from Patroni 3.0.4
    /// on, `running` before.
    fn replicating(&self) -> bool {
        self.state == "streaming" || self.state == "running"
    }
}

/// Who held the leader key, polled from etcd every 50 ms: `(since the
/// scenario began, holder)`, `None` while the key is absent, and nothing
/// while etcd does not answer.
type Leaders = Arc<Mutex<Vec<(Duration, Option<String>)>>>;

/// `/service/idem/leader`, base64 as etcd's JSON gateway wants keys.
const LEADER_KEY: &str = "L3NlcnZpY2UvaWRlbS9sZWFkZXI=";

/// The members' names, base64 as the gateway returns values.
fn holder(value: &str) -> Option<String> {
    let names = [("bTE=", "m1"), ("bTI=", "m2"), ("bTM=", "m3")];
    names
        .iter()
        .find(|(encoded, _)| *encoded == value)
        .map(|(_, name)| (*name).to_owned())
}

fn watch_leader(
    etcd: String,
    began: Instant,
    stop: Arc<AtomicBool>,
) -> (Leaders, tokio::task::JoinHandle<()>) {
    let leaders: Leaders = Arc::default();
    let seen = Arc::clone(&leaders);
    let task = tokio::spawn(async move {
        let http = idem_runtime::reqwest::Client::builder()
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap_or_default();
        let mut last: Option<Option<String>> = None;
        while !stop.load(Ordering::Relaxed) {
            let asked = began.elapsed();
            let answer = http
                .post(format!("{etcd}/v3/kv/range"))
                .json(&json!({ "key": LEADER_KEY }))
                .send()
                .await;
            if let Ok(r) = answer
                && let Ok(v) = r.json::<Value>().await
            {
                let now = v["kvs"][0]["value"].as_str().and_then(holder);
                if last.as_ref() != Some(&now) {
                    seen.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((asked, now.clone()));
                    last = Some(now);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    (leaders, task)
}

/// The holder of the leader key at `at`, if it is known.
fn leader_at(leaders: &[(Duration, Option<String>)], at: Duration) -> Option<Option<&str>> {
    leaders
        .iter()
        .rev()
        .find(|(t, _)| *t <= at)
        .map(|(_, holder)| holder.as_deref())
}

/// What one scenario measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub scenario: Option<Scenario>,
    pub patroni: String,
    pub charges: usize,
    /// Charges acknowledged to their caller and missing on the final leader.
    pub lost: usize,
    pub duplicates: usize,
    /// Charges on the final leader written by a member that did not hold
    /// the leader key at that moment.
    pub non_leader: usize,
    pub payouts: usize,
    pub payouts_lost: usize,
    pub transfers_duplicated: usize,
    /// Calls the bank got again for a transfer it had made.
    pub repeated: usize,
    pub stuck: usize,
    pub non_retryable: usize,
    pub refusals: usize,
    pub refusal_max: Duration,
    /// COMMITs the servers logged as returned without the synchronous
    /// standby (answered retryable).
    pub unreplicated: usize,
    /// Connections the servers refused because their server was on a
    /// timeline below one they had written to: a deposed primary.
    pub deposed: usize,
    /// Holders of the leader key, in order.
    pub leaders: Vec<String>,
    /// The longest stretch without a success that began during the
    /// fault: for the probe charging every 20 ms without retrying (the
    /// servers' own recovery), and for the workers (callers, whose
    /// retries wait out `Retry-After`).
    pub servers_back: Option<Duration>,
    pub callers_back: Option<Duration>,
    pub unknown: usize,
    pub reconciled: usize,
    /// Servers that warned that acknowledged commits were on the primary
    /// alone (an asynchronous standby, or none under Patroni).
    pub warned: usize,
    /// Members whose charges match the final leader's, once rejoined.
    pub converged: usize,
    pub rejoined: bool,
    /// What `idem keys stats --patroni` said of the final leader: its
    /// member, role and replication (`None` without `idem`).
    pub stats: Option<String>,
    pub note: String,
}

impl Outcome {
    /// What the scenario's mode promises.
    pub fn holds(&self) -> bool {
        let Some(scenario) = self.scenario else {
            return false;
        };
        let clean = self.duplicates == 0
            && self.stuck == 0
            && self.non_retryable == 0
            && self.reconciled == self.unknown
            && self.rejoined
            && self.converged == MEMBERS.len();
        if scenario.promises() {
            clean
                && self.lost == 0
                && self.payouts_lost == 0
                && self.transfers_duplicated == 0
                && self.non_leader == 0
        } else {
            // A lost payout record is claimed afresh by its retry, under
            // a new derived key: counted, as the loss is.
            clean
        }
    }
}

/// Runs every scenario in `settings`, each on a fresh cluster.
pub async fn run(settings: &Settings) -> anyhow::Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    let version = patroni_version(&settings.patroni);
    let mut kept: Option<Patroni> = None;
    for &scenario in &settings.scenarios {
        eprintln!(
            "patroni {version}: {} (synchronous_mode {})…",
            scenario.name(),
            scenario.mode().name()
        );
        let cluster = match kept.take() {
            Some(cluster) if cluster.mode == scenario.mode() => cluster,
            _ => Patroni::start(settings, scenario.mode()).await?,
        };
        let (mut outcome, cluster) = one(settings, scenario, cluster)
            .await
            .with_context(|| format!("the `{}` scenario", scenario.name()))?;
        if settings.one_cluster && outcome.rejoined {
            kept = Some(cluster);
        }
        outcome.patroni.clone_from(&version);
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// The fault; returns when it began and when it ended (since `began`),
/// and what to say of it.
async fn fault(
    cluster: &mut Patroni,
    scenario: Scenario,
    began: Instant,
    leaders: &Leaders,
) -> anyhow::Result<(Duration, String)> {
    let leader = cluster.with_role("leader").await?;
    let new_leader = |leaders: &Leaders, old: &str| {
        leaders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(_, h)| h.as_deref().is_some_and(|h| h != old))
    };
    let old = cluster.members[leader].name;
    let wait_new_leader = |leaders: Leaders| async move {
        let since = Instant::now();
        while !new_leader(&leaders, old) && since.elapsed() < Duration::from_secs(90) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let fault_at = began.elapsed();
    let note = match scenario {
        Scenario::Kill => {
            cluster.kill(leader).await;
            wait_new_leader(Arc::clone(leaders)).await;
            format!("{old} killed")
        }
        Scenario::Async => {
            // The leader's WAL senders hung for a second, so the standbys
            // are behind when it dies, as a slow network leaves them.
            let senders: Vec<String> = cluster.members[leader]
                .postgres_pids()
                .into_iter()
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("walsender"))
                })
                .collect();
            signal("STOP", &senders);
            tokio::time::sleep(Duration::from_secs(1)).await;
            cluster.kill(leader).await;
            wait_new_leader(Arc::clone(leaders)).await;
            format!("{} WAL senders hung 1 s, then {old} killed", senders.len())
        }
        Scenario::Hang => {
            cluster.members[leader].signal_all("STOP");
            // Past ttl: the key expires and a standby is promoted.
            wait_new_leader(Arc::clone(leaders)).await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            cluster.members[leader].signal_all("CONT");
            format!(
                "{old} stopped, resumed after {:.1} s",
                (began.elapsed() - fault_at).as_secs_f64()
            )
        }
        Scenario::Switchover => {
            let candidate = cluster.with_role("sync_standby").await?;
            let name = cluster.members[candidate].name;
            cluster
                .request(
                    leader,
                    "switchover",
                    json!({ "leader": old, "candidate": name }),
                )
                .await?;
            wait_new_leader(Arc::clone(leaders)).await;
            format!("{old} to {name}")
        }
        Scenario::SyncStandby | Scenario::SyncStandbyStrict => {
            let sync = cluster.with_role("sync_standby").await?;
            let name = cluster.members[sync].name;
            cluster.kill(sync).await;
            // Patroni names the other standby synchronous.
            let took = cluster
                .wait_for("another sync standby", Duration::from_secs(60), |c| {
                    c.iter().any(|m| m.role == "sync_standby" && m.name != name)
                })
                .await;
            format!(
                "{name} killed; {}",
                took.map_or(
                    "no other standby became synchronous".to_owned(),
                    |t| format!("another standby synchronous after {:.1} s", t.as_secs_f64())
                )
            )
        }
        Scenario::StandbysLost | Scenario::StandbysLostStrict => {
            let standbys: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
            for &i in &standbys {
                cluster.kill(i).await;
            }
            // The leader alone, under load, past the servers' replication
            // check (every 30 s).
            tokio::time::sleep(ALONE).await;
            cluster.kill(leader).await;
            for &i in &standbys {
                cluster.start_member(i)?;
            }
            cluster
                .wait_for("the standbys to run", Duration::from_secs(60), |c| {
                    c.iter()
                        .filter(|m| m.state == "running" || m.state == "streaming")
                        .count()
                        >= 2
                })
                .await?;
            // Patroni promotes no standby the leader did not name
            // synchronous: an operator fails over by hand.
            let candidate = standbys[0];
            let name = cluster.members[candidate].name;
            let mut asked = cluster
                .request(candidate, "failover", json!({ "candidate": name }))
                .await;
            for _ in 0..20 {
                if asked.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                asked = cluster
                    .request(candidate, "failover", json!({ "candidate": name }))
                    .await;
            }
            asked?;
            wait_new_leader(Arc::clone(leaders)).await;
            format!(
                "{old} alone {} s, killed; failover to {name} by hand",
                ALONE.as_secs()
            )
        }
        Scenario::Etcd => {
            cluster.stop_etcd().await?;
            tokio::time::sleep(Duration::from_secs(TTL + 5)).await;
            cluster.start_etcd().await?;
            cluster
                .wait_for("a leader", Duration::from_secs(60), |c| {
                    c.iter().any(|m| m.role == "leader" && m.state == "running")
                })
                .await?;
            format!("etcd down {} s", TTL + 5)
        }
    };
    Ok((fault_at, note))
}

async fn one(
    settings: &Settings,
    scenario: Scenario,
    mut cluster: Patroni,
) -> anyhow::Result<(Outcome, Patroni)> {
    let stored = cluster.stored_config().await;
    let bank = Bank::start().await?;
    bank.answer_after(TRANSFER_TAKES);
    let began = Instant::now();
    let wall_began = SystemTime::now();
    let log: Log = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (leaders, watcher) = watch_leader(cluster.etcd_url(), began, Arc::clone(&stop));
    let urls = [cluster.haproxy_url(), cluster.host_list_url()];
    let Fleet {
        mut servers,
        clients,
        warnings,
    } = fleet(&urls, &bank, began, &log).await?;
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
    let (fault_at, mut note) = fault(&mut cluster, scenario, began, &leaders).await?;
    let settled_at = began.elapsed();
    tokio::time::sleep(settings.settle).await;
    probe_stop.store(true, Ordering::Relaxed);
    let mut charged = charges.stop(0).await;
    let mut paid = payouts.stop(0).await;
    let unknown = charged.pending.len() + paid.pending.len();
    let mut reconciled = load::reconcile(&clients[0], Kind::Charge, &account, &mut charged).await;
    reconciled += load::reconcile(&clients[0], Kind::Payout, &account, &mut paid).await;
    // The completer finishes what a payout left half-done.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for server in &mut servers {
        server.kill().await?;
    }
    let rejoined = cluster.heal().await?;
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.await;
    let leaders = leaders
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();

    let final_leader = cluster.with_role("leader").await?;
    let leader_url = cluster.members[final_leader].url();
    let stats = match &settings.idem {
        Some(idem) => Some(keys_stats(idem, &cluster, final_leader).await?),
        None => None,
    };
    let charges_counted = load::count_charges(&leader_url, &account, &charged.acked).await?;
    let payouts_counted = load::count_payouts(&leader_url, &account, &paid.acked).await?;
    let written = written_by(&leader_url, &account).await?;
    let non_leader = written
        .values()
        .filter(|(node, at)| {
            let since = at.duration_since(wall_began).unwrap_or_default();
            matches!(leader_at(&leaders, since), Some(Some(holder)) if holder != node)
        })
        .count();
    // A rejoined member may still be replaying: up to 30 s to agree.
    let mut converged = 0;
    for _ in 0..60 {
        converged = 0;
        for m in &cluster.members {
            if let Ok(theirs) = written_by(&m.url(), &account).await
                && theirs == written
            {
                converged += 1;
            }
        }
        if converged == cluster.members.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let per_key = transfers_per_key(&bank);
    let logged = |needle: &str| -> usize {
        warnings
            .iter()
            .map(|w| {
                w.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .filter(|line| line.contains(needle))
                    .count()
            })
            .sum()
    };
    let answers = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let after: Vec<&Answer> = answers.iter().filter(|a| a.at >= fault_at).collect();
    let refusals: Vec<Duration> = after
        .iter()
        .filter(|a| a.status == 503)
        .map(|a| a.latency)
        .collect();
    let mut successes: Vec<Duration> = after
        .iter()
        .filter(|a| (200..300).contains(&a.status))
        .map(|a| a.at + a.latency)
        .collect();
    successes.sort_unstable();
    let holders: Vec<String> = leaders
        .iter()
        .map(|(_, h)| h.clone().unwrap_or_else(|| "-".to_owned()))
        .collect();
    if let Some(ttl) = stored.get("ttl") {
        note.push_str(&format!("; stored ttl {ttl}"));
    }
    let outcome = Outcome {
        scenario: Some(scenario),
        patroni: String::new(),
        charges: charged.calls,
        lost: charges_counted.lost,
        duplicates: charges_counted.duplicates,
        non_leader,
        payouts: paid.calls,
        payouts_lost: payouts_counted.lost,
        transfers_duplicated: per_key.len().saturating_sub(paid.calls),
        repeated: per_key.values().map(|(n, _)| n - 1).sum(),
        stuck: charges_counted.stuck + payouts_counted.stuck,
        non_retryable: after
            .iter()
            .filter(|a| a.status >= 400 && a.retryable != Some(true))
            .count(),
        refusals: refusals.len(),
        refusal_max: refusals.into_iter().max().unwrap_or_default(),
        unreplicated: logged("without its synchronous standby"),
        deposed: logged("a deposed primary"),
        warned: warnings
            .iter()
            .filter(|w| {
                w.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .any(|line| {
                        line.contains("replicates asynchronously")
                            || line.contains("has no standby")
                    })
            })
            .count(),
        leaders: holders,
        servers_back: longest_gap(&probed.await?, fault_at, settled_at),
        callers_back: longest_gap(&successes, fault_at, settled_at),
        unknown,
        reconciled,
        converged,
        rejoined,
        stats,
        note,
    };
    Ok((outcome, cluster))
}

/// `idem keys stats --patroni` through the host list: the member it
/// names, its role, and whether replication is synchronous, as `m2
/// (leader), synchronous`; an error when it names another member than
/// the leader's.
async fn keys_stats(idem: &Path, cluster: &Patroni, leader: usize) -> anyhow::Result<String> {
    let rest = format!("http://127.0.0.1:{}", cluster.members[0].rest_port);
    let out = tokio::process::Command::new(idem)
        .args(["keys", "stats", "--format", "json", "--database-url"])
        .arg(cluster.host_list_url())
        .args(["--patroni", &rest])
        .output()
        .await
        .context("running idem keys stats")?;
    anyhow::ensure!(
        out.status.success(),
        "idem keys stats failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Value = serde_json::from_slice(&out.stdout)?;
    let member = stats["patroni"]["member"].as_str().unwrap_or("-");
    anyhow::ensure!(
        member == cluster.members[leader].name,
        "idem keys stats names {member}, the leader is {}: {stats}",
        cluster.members[leader].name
    );
    Ok(format!(
        "{member} ({}), {}",
        stats["patroni"]["role"].as_str().unwrap_or("-"),
        if stats["replication"]["synchronous"] == Value::Bool(true) {
            "synchronous"
        } else {
            "not synchronous"
        }
    ))
}

/// The longest stretch without a success (`successes` sorted) that
/// begins between the fault (`from`) and the end of it (`to`).
fn longest_gap(successes: &[Duration], from: Duration, to: Duration) -> Option<Duration> {
    let mut last = from;
    let mut longest = None::<Duration>;
    for &t in successes.iter().filter(|&&t| t >= from) {
        if last <= to {
            let gap = t - last;
            longest = Some(longest.map_or(gap, |l| l.max(gap)));
        }
        last = t;
    }
    longest
}

/// Each charge of `account` on the server at `url`: `order_id` to the
/// member that wrote it and when.
async fn written_by(
    url: &str,
    account: &str,
) -> anyhow::Result<BTreeMap<String, (String, SystemTime)>> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let rows: Vec<(String, Option<String>, f64)> = sqlx::query_as(
        "SELECT order_id, written_on, EXTRACT(EPOCH FROM written_at)::float8 FROM charges \
         WHERE account = $1",
    )
    .bind(account)
    .fetch_all(&mut conn)
    .await?;
    let _ = conn.close().await;
    Ok(rows
        .into_iter()
        .map(|(order, node, at)| {
            (
                order,
                (
                    node.unwrap_or_default(),
                    SystemTime::UNIX_EPOCH + Duration::from_secs_f64(at.max(0.0)),
                ),
            )
        })
        .collect())
}

/// What HAProxy does with the sessions to a member it marks down.
fn haproxy_down(settings: &Settings) -> &'static str {
    if settings.haproxy_keeps_sessions {
        ""
    } else {
        " on-marked-down shutdown-sessions"
    }
}

/// The table of every scenario.
pub fn report(settings: &Settings, outcomes: &[Outcome]) -> String {
    let mut out = format!(
        "etcd, three Patroni members (ttl {TTL} s, loop_wait 2 s, use_pg_rewind), HAProxy with \
         `GET /primary` checks (inter 3s fall 3 rise 2{}); two servers, one through HAProxy \
         and one given the host list; {} workers charging and {} paying out, {} s of load \
         before the fault and after\n\n",
        haproxy_down(settings),
        settings.workers,
        settings.payout_workers,
        settings.settle.as_secs()
    );
    out.push_str(
        "| scenario | synchronous_mode | Patroni | charges | lost | dup | written by a non-leader | payouts | lost | transfers dup | repeated | stuck | non-retryable | 503s | slowest 503 ms | unreplicated commits refused | deposed primary refused | leader key | servers back ms | callers back ms | unknown | settled | members agree | warned | keys stats | what happened |\n\
         | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n",
    );
    for o in outcomes {
        let Some(scenario) = o.scenario else { continue };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/3 | {}/2 | {} | {} |\n",
            scenario.name(),
            scenario.mode().name(),
            o.patroni,
            o.charges,
            o.lost,
            o.duplicates,
            o.non_leader,
            o.payouts,
            o.payouts_lost,
            o.transfers_duplicated,
            o.repeated,
            o.stuck,
            o.non_retryable,
            o.refusals,
            ms(o.refusal_max),
            o.unreplicated,
            o.deposed,
            o.leaders.join(" → "),
            o.servers_back.map_or("-".to_owned(), ms),
            o.callers_back.map_or("-".to_owned(), ms),
            o.unknown,
            o.reconciled,
            o.converged,
            o.warned,
            o.stats.as_deref().unwrap_or("-"),
            o.note,
        ));
    }
    out.push_str(
        "\nlost: acknowledged to the caller, missing on the final leader. written by a \
         non-leader: charges on the final leader whose member (`idem.node`) did not hold \
         the leader key in etcd when it wrote them. repeated: calls the bank got again for a \
         transfer it had made, with the same derived key. unreplicated commits refused: COMMITs \
         that returned with PostgreSQL's \"committed locally, but might not have been \
         replicated\" warning, each answered as retryable. deposed primary refused: connections \
         refused because their server was on a timeline below one the servers had written to. \
         leader key: its holders in order \
         (`-`: none). servers back: the longest stretch without a success that began during \
         the fault, for a probe charging every 20 ms without retrying; callers back: the same \
         for the workers, whose retries wait out `Retry-After`. members agree: members (rejoined, rewound where they diverged) whose \
         charges of the run equal the final leader's. warned: servers that logged that \
         acknowledged commits were on the primary alone (asynchronous standbys, or none under \
         Patroni). keys stats: the member `idem keys stats --patroni` names, read through the \
         host list once the members rejoined.\n",
    );
    out
}
