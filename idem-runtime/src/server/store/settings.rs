//! What one store knows of the server it talks to, which its backend reads
//! with every statement.

use std::time::Duration;

use super::postgres::notice::CommitWatch;
use super::postgres::primary::{Fence, ReadOnlySeen};

/// What one [`Store`](super::Store) knows of its server, handed to its
/// [`Backend`](super::Backend) with every statement.
///
/// Each store has its own: in one process, a PostgreSQL store behind
/// PgBouncer and another reached directly keep their own statement modes,
/// and a MySQL store leaves a MariaDB store its `SET STATEMENT`. Clones of
/// a store share the read-only sightings.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub(super) named_statements: bool,
    pub(super) set_statement: bool,
    pub(super) session_lock_wait: Option<Duration>,
    pub(super) read_only: ReadOnlySeen,
    pub(super) fence: Fence,
    pub(super) commit_watch: CommitWatch,
}

impl Default for StoreSettings {
    /// Named statements, `SET STATEMENT`, no session-wide lock wait.
    fn default() -> Self {
        StoreSettings {
            named_statements: true,
            set_statement: true,
            session_lock_wait: None,
            read_only: ReadOnlySeen::default(),
            fence: Fence::default(),
            commit_watch: CommitWatch::default(),
        }
    }
}

impl StoreSettings {
    /// Whether the store's statements may be named and cached on their
    /// connection (sqlx's default, one round trip per execution once
    /// prepared). Not behind a transaction pooler, which moves a client to
    /// another server connection between transactions, where the name
    /// means nothing or something else.
    pub fn named_statements(&self) -> bool {
        self.named_statements
    }

    /// Whether the server takes MariaDB's `SET STATEMENT … FOR`, which
    /// bounds a claim's wait behind a concurrent duplicate. MySQL does
    /// not: its claims wait for the connections' own
    /// `innodb_lock_wait_timeout`.
    pub fn set_statement(&self) -> bool {
        self.set_statement
    }

    /// The `lock_timeout` every connection of the pool runs with, when the
    /// store set it at connect
    /// ([`Store::connect_postgres_bounded`](super::Store::connect_postgres_bounded)).
    pub fn session_lock_wait(&self) -> Option<Duration> {
        self.session_lock_wait
    }

    /// Notes a statement's error: a read-only answer from PostgreSQL tells
    /// a store with a host list that its primary moved.
    pub(crate) fn note(&self, error: &sqlx::Error) {
        self.read_only.note(error);
    }

    /// The store's timeline and the connections it distrusts
    /// (PostgreSQL).
    pub(super) fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The store's read-only sightings, which its search for the primary
    /// watches.
    pub(super) fn read_only(&self) -> &ReadOnlySeen {
        &self.read_only
    }
}
