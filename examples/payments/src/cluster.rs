//! A private PostgreSQL cluster in a temporary directory, for the
//! scenarios: started, restarted, crashed, hung, and, with a standby built
//! by `pg_basebackup`, replicated and failed over.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use idem_runtime::sqlx;

/// The directory of PostgreSQL's server binaries: `IDEM_PG_BIN`, else the
/// newest `/usr/lib/postgresql/*/bin`, else wherever `initdb` is on `PATH`.
pub fn find_pg_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("IDEM_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().or_else(|| {
        std::env::var_os("PATH")
            .and_then(|path| std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file()))
    })
}

/// A private PostgreSQL cluster in a temporary directory, owned by this run.
pub(crate) struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// Run as this user (`postgres`) when we are root: the server refuses root.
    user: Option<String>,
    /// More `-c name=value` settings for the server.
    settings: Vec<String>,
}

impl Cluster {
    /// A new cluster (`initdb`), started.
    pub(crate) async fn start(bin: &Path) -> anyhow::Result<Cluster> {
        let cluster = Cluster::empty(bin, Vec::new())?;
        let data = cluster.data();
        cluster
            .pg(&format!(
                "'{}' -D '{data}' -U postgres --auth=trust -E UTF8 >/dev/null",
                cluster.tool("initdb")
            ))
            .await
            .context("initdb failed")?;
        cluster.up().await?;
        Ok(cluster)
    }

    /// A streaming standby of `primary`, named `name` (its
    /// `application_name` in `pg_stat_replication`), copied with
    /// `pg_basebackup -R` and started.
    pub(crate) async fn standby_of(primary: &Cluster, name: &str) -> anyhow::Result<Cluster> {
        let cluster = Cluster::empty(&primary.bin, vec![format!("cluster_name={name}")])?;
        cluster
            .pg(&format!(
                "'{}' -h 127.0.0.1 -p {} -U postgres -D '{}' -R -X stream -c fast >/dev/null 2>&1",
                cluster.tool("pg_basebackup"),
                primary.port,
                cluster.data()
            ))
            .await
            .context("pg_basebackup failed")?;
        cluster.up().await?;
        Ok(cluster)
    }

    fn empty(bin: &Path, settings: Vec<String>) -> anyhow::Result<Cluster> {
        let dir = tempfile::Builder::new().prefix("idem-pg-").tempdir()?;
        let root = std::process::Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false);
        let user = root.then(|| "postgres".to_owned());
        if let Some(user) = &user {
            let status = std::process::Command::new("chown")
                .arg(user)
                .arg(dir.path())
                .status()?;
            if !status.success() {
                bail!(
                    "running as root, and the `postgres` user the server must run as is \
                     missing: create it, or run as another user"
                );
            }
        }
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
            probe.local_addr()?.port()
        };
        Ok(Cluster {
            bin: bin.to_owned(),
            dir,
            port,
            user,
            settings,
        })
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `pg_ctl promote`: the standby becomes a primary.
    pub(crate) async fn promote(&self) -> anyhow::Result<()> {
        self.pg(&format!(
            "'{}' -D '{}' -w promote >/dev/null",
            self.tool("pg_ctl"),
            self.data()
        ))
        .await
    }

    /// Runs one statement as the superuser.
    pub(crate) async fn execute(&self, statement: &str) -> anyhow::Result<()> {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&self.url()).await?;
        sqlx::Executor::execute(&mut conn, statement).await?;
        conn.close().await?;
        Ok(())
    }

    /// Cuts this standby off its primary, as a broken link does: its
    /// `primary_conninfo` pointed at a port nothing listens on (reloaded;
    /// the WAL receiver restarts with it and cannot connect).
    pub(crate) async fn cut_off(&self) -> anyhow::Result<()> {
        self.execute("ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 user=postgres'")
            .await?;
        self.execute("SELECT pg_reload_conf()").await
    }

    /// The `sync_state` of each standby streaming from this server.
    pub(crate) async fn standbys(&self) -> anyhow::Result<Vec<(String, String)>> {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&self.url()).await?;
        let rows = sqlx::query_as(
            "SELECT application_name::text, sync_state::text FROM pg_stat_replication",
        )
        .fetch_all(&mut conn)
        .await?;
        conn.close().await?;
        Ok(rows)
    }

    pub(crate) fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    pub(crate) fn tool(&self, name: &str) -> String {
        self.bin.join(name).display().to_string()
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs a shell command as the cluster's owner.
    pub(crate) async fn pg(&self, command: &str) -> anyhow::Result<()> {
        let mut cmd = match &self.user {
            Some(user) => {
                let mut cmd = tokio::process::Command::new("su");
                cmd.args([user.as_str(), "-s", "/bin/sh", "-c", command]);
                cmd
            }
            None => {
                let mut cmd = tokio::process::Command::new("sh");
                cmd.args(["-c", command]);
                cmd
            }
        };
        let out = cmd.stdin(Stdio::null()).output().await?;
        if !out.status.success() {
            bail!(
                "`{command}` failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Starts the server, retrying while a killed one's processes exit.
    pub(crate) async fn up(&self) -> anyhow::Result<()> {
        let command = format!(
            "'{}' -D '{}' -l '{}/log' -o \"-p {} -k {} -c listen_addresses=127.0.0.1 \
             -c max_connections=100 -c fsync=off{}\" -w start >/dev/null",
            self.tool("pg_ctl"),
            self.data(),
            self.dir.path().display(),
            self.port,
            self.dir.path().display(),
            self.settings
                .iter()
                .map(|s| format!(" -c {s}"))
                .collect::<String>(),
        );
        let mut last = None;
        for _ in 0..40 {
            match self.pg(&command).await {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("PostgreSQL did not start")))
    }

    pub(crate) async fn ctl(&self, action: &str) -> anyhow::Result<()> {
        self.pg(&format!(
            "'{}' -D '{}' -m fast -w {action} >/dev/null",
            self.tool("pg_ctl"),
            self.data()
        ))
        .await
    }

    pub(crate) fn postmaster(&self) -> anyhow::Result<String> {
        let pid = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid"))?;
        pid.lines()
            .next()
            .map(str::to_owned)
            .context("an empty postmaster.pid")
    }

    /// Sends `signal` to the postmaster, and with `children` to every
    /// process it started.
    pub(crate) fn signal(&self, signal: &str, children: bool) -> anyhow::Result<()> {
        let pid = self.postmaster()?;
        // The children first (one may exit between the listing and the
        // signal: not an error), then the postmaster, which must get it.
        let kill = |pids: &[String]| {
            std::process::Command::new("kill")
                .arg(format!("-{signal}"))
                .args(pids)
                .stderr(Stdio::null())
                .status()
        };
        if children {
            let pids = children_of(&pid);
            if !pids.is_empty() {
                kill(&pids)?;
            }
        }
        let status = kill(std::slice::from_ref(&pid))?;
        anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
        Ok(())
    }

    pub(crate) async fn terminate_backends(&self) -> anyhow::Result<u64> {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&self.url()).await?;
        let n: Vec<(bool,)> = sqlx::query_as(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        .fetch_all(&mut conn)
        .await?;
        Ok(n.len() as u64)
    }
}

/// The processes whose parent is `pid`, from `/proc`.
pub(crate) fn children_of(pid: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid = after.split_whitespace().nth(1)?;
            (ppid == pid).then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Resumed first, in case a hang was cut short.
        let _ = self.signal("CONT", true);
        let command = format!(
            "'{}' -D '{}' -m immediate stop >/dev/null 2>&1",
            self.tool("pg_ctl"),
            self.data()
        );
        let _ = match &self.user {
            Some(user) => std::process::Command::new("su")
                .args([user.as_str(), "-s", "/bin/sh", "-c", &command])
                .status(),
            None => std::process::Command::new("sh")
                .args(["-c", &command])
                .status(),
        };
    }
}
