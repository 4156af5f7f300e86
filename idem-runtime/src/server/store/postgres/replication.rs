//! Whether the primary the store writes to replicates synchronously: with
//! an asynchronous standby, a failover to it can lose commits the primary
//! acknowledged, key records and recovery points among them.

/// What PostgreSQL says of its standbys (`pg_stat_replication`) and of its
/// commits (`synchronous_commit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// The primary's `synchronous_commit`.
    pub synchronous_commit: String,
    /// Every standby streaming from it.
    pub standbys: Vec<Standby>,
    /// The server the store reads: `inet_server_addr():inet_server_port()`
    /// (`None` over a Unix socket). Through a proxy (HAProxy, a
    /// PgBouncer), the server behind it.
    pub server: Option<String>,
    /// Its `cluster_name`: the scope, under Patroni.
    pub cluster_name: String,
    /// Its `synchronous_standby_names`: Patroni sets and clears it as
    /// standbys come and go.
    pub synchronous_standby_names: String,
    /// Its timeline; each promotion starts a new one. `None` on a standby.
    pub timeline: Option<i64>,
    /// Whether Patroni manages it: one of Patroni's own sessions
    /// (`application_name` `Patroni …`) is connected.
    pub patroni: bool,
}

/// The server facts [`REPLICATION`] reads, beside the standbys.
pub(crate) type ServerRow = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    String,
    String,
    String,
);

/// One standby streaming from the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standby {
    /// Its `application_name`.
    pub name: String,
    /// `sync`, `quorum`, `potential` or `async`; `None` when the store's
    /// role may not read it (grant `pg_monitor` to see it).
    pub sync_state: Option<String>,
}

impl std::fmt::Display for Standby {
    /// `name (sync_state)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.sync_state.as_deref().unwrap_or("state unknown");
        write!(f, "{} ({state})", self.name)
    }
}

impl Replication {
    /// The standbys a failover could lose acknowledged commits on: those
    /// not confirmed synchronous, or all of them when commits do not wait
    /// for a standby (`synchronous_commit` is `off` or `local`).
    ///
    /// Under Patroni with a synchronous standby confirmed, none: Patroni's
    /// `synchronous_mode` promotes only a synchronous standby.
    pub fn at_risk(&self) -> Vec<&Standby> {
        if self.patroni && self.synchronous() {
            return Vec::new();
        }
        let commits_wait = !matches!(self.synchronous_commit.as_str(), "off" | "local");
        self.standbys
            .iter()
            .filter(|s| {
                !commits_wait || !matches!(s.sync_state.as_deref(), Some("sync" | "quorum"))
            })
            .collect()
    }

    /// Whether an acknowledged commit is on a standby too: commits wait
    /// for one (`synchronous_commit` neither `off` nor `local`) and one is
    /// confirmed synchronous.
    pub fn synchronous(&self) -> bool {
        !matches!(self.synchronous_commit.as_str(), "off" | "local")
            && self
                .standbys
                .iter()
                .any(|s| matches!(s.sync_state.as_deref(), Some("sync" | "quorum")))
    }

    /// One [`REPLICATION`] row per standby, as read.
    pub(crate) fn from_rows(rows: Vec<ServerRow>) -> Replication {
        let first = rows.first().cloned();
        let timeline = first.as_ref().and_then(|r| {
            let file = r.6.as_str();
            file.get(..8).and_then(|t| i64::from_str_radix(t, 16).ok())
        });
        Replication {
            synchronous_commit: first.as_ref().map(|r| r.0.clone()).unwrap_or_default(),
            server: first.as_ref().and_then(|r| r.3.clone()),
            cluster_name: first.as_ref().map(|r| r.4.clone()).unwrap_or_default(),
            synchronous_standby_names: first.as_ref().map(|r| r.5.clone()).unwrap_or_default(),
            timeline,
            patroni: first.as_ref().is_some_and(|r| r.7 == "patroni"),
            standbys: rows
                .into_iter()
                .filter_map(|(_, name, sync_state, ..)| {
                    Some(Standby {
                        name: name?,
                        sync_state,
                    })
                })
                .collect(),
        }
    }

    /// Whether the primary acknowledges commits that are on no standby
    /// while its HA manager would fail over to one: Patroni manages it, no
    /// standby streams from it, and commits do not wait
    /// (`synchronous_standby_names` empty: `synchronous_mode` without
    /// `strict` drops a lost synchronous standby).
    pub fn alone(&self) -> bool {
        self.patroni && self.standbys.is_empty() && self.synchronous_standby_names.is_empty()
    }

    /// What an operator should hear, when a standby is at risk.
    pub fn warning(&self) -> Option<String> {
        if self.alone() {
            return Some(
                "the key store's primary is managed by Patroni and has no standby: it \
                 acknowledges commits that are on this server alone (synchronous_mode without \
                 synchronous_mode_strict drops a lost synchronous standby), so a failover to a \
                 standby that returns loses them, key records and recovery points among them. \
                 Bring a standby back; synchronous_mode_strict refuses commits instead"
                    .to_owned(),
            );
        }
        let at_risk = self.at_risk();
        if at_risk.is_empty() {
            return None;
        }
        let names: Vec<String> = at_risk.iter().map(ToString::to_string).collect();
        Some(format!(
            "the key store's primary replicates asynchronously to {} with synchronous_commit = \
             {}: a failover to such a standby can lose commits the primary acknowledged, so a \
             charge answered to its caller loses its key record and a retry runs it again, and a \
             phased request loses the recovery point written after an external call, which the \
             completer or a retry then makes again. Make the standby synchronous \
             (synchronous_standby_names naming it, synchronous_commit = on) and fail over only to \
             a synchronous standby",
            names.join(", "),
            self.synchronous_commit
        ))
    }
}

/// One row per standby (or one row of NULLs without any), each with the
/// primary's `synchronous_commit`, address, `cluster_name`,
/// `synchronous_standby_names`, current WAL file (named by its timeline)
/// and whether a Patroni session is connected.
pub(super) const REPLICATION: &str = "SELECT current_setting('synchronous_commit'), \
     r.application_name::text, r.sync_state::text, \
     host(inet_server_addr()) || ':' || inet_server_port(), \
     current_setting('cluster_name'), current_setting('synchronous_standby_names'), \
     CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_walfile_name(pg_current_wal_lsn()) END, \
     CASE WHEN EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'Patroni%') \
     THEN 'patroni' ELSE '' END \
     FROM (SELECT 1) AS one LEFT JOIN pg_stat_replication AS r ON true";

#[cfg(test)]
mod tests {
    use super::*;

    fn standby(name: &str, state: &str) -> Standby {
        Standby {
            name: name.to_owned(),
            sync_state: Some(state.to_owned()),
        }
    }

    #[test]
    fn only_unconfirmed_standbys_are_at_risk_when_commits_wait() {
        let replication = Replication {
            synchronous_commit: "on".to_owned(),
            standbys: vec![standby("a", "sync"), standby("b", "async")],
            server: None,
            cluster_name: String::new(),
            synchronous_standby_names: "a".to_owned(),
            timeline: Some(1),
            patroni: false,
        };
        let names: Vec<&str> = replication
            .at_risk()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["b"]);
        assert!(replication.warning().unwrap().contains("b (async)"));
        let sync = Replication {
            standbys: vec![standby("a", "sync")],
            ..replication.clone()
        };
        assert_eq!(sync.warning(), None);
        let local = Replication {
            synchronous_commit: "local".to_owned(),
            ..sync
        };
        assert_eq!(local.at_risk().len(), 1, "commits that do not wait");
        let alone = Replication {
            synchronous_commit: "on".to_owned(),
            standbys: Vec::new(),
            ..replication.clone()
        };
        assert_eq!(alone.warning(), None);
        assert!(!alone.synchronous(), "no standby confirms");
        let patroni_alone = Replication {
            patroni: true,
            synchronous_standby_names: String::new(),
            ..alone.clone()
        };
        assert!(patroni_alone.warning().unwrap().contains("has no standby"));
        let patroni_sync = Replication {
            patroni: true,
            ..replication.clone()
        };
        assert!(
            patroni_sync.at_risk().is_empty(),
            "Patroni promotes the synchronous standby only"
        );
        let strict = Replication {
            synchronous_standby_names: "*".to_owned(),
            ..patroni_alone
        };
        assert_eq!(strict.warning(), None, "strict: commits wait instead");
        assert!(replication.synchronous());
    }
}
