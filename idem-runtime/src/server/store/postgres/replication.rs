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
}

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
    pub fn at_risk(&self) -> Vec<&Standby> {
        let commits_wait = !matches!(self.synchronous_commit.as_str(), "off" | "local");
        self.standbys
            .iter()
            .filter(|s| {
                !commits_wait || !matches!(s.sync_state.as_deref(), Some("sync" | "quorum"))
            })
            .collect()
    }

    /// What an operator should hear, when a standby is at risk.
    pub fn warning(&self) -> Option<String> {
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

/// One row per standby (or one row of NULLs without any) and the
/// primary's `synchronous_commit`.
pub(super) const REPLICATION: &str = "SELECT current_setting('synchronous_commit'), \
     r.application_name::text, r.sync_state::text \
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
        };
        assert_eq!(alone.warning(), None);
    }
}
