//! What can go wrong in the key store.

use std::time::Duration;

/// A failure of the key store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or refused the statement.
    #[error("key store error: {0}")]
    Database(#[source] sqlx::Error),
    /// An embedded migration failed.
    #[error("key store migration {version} failed: {source}")]
    Migration {
        /// Migration version.
        version: i64,
        /// What the database said.
        source: sqlx::Error,
    },
    /// The claim waited `waited` for another transaction holding an
    /// uncommitted claim on the same key, and gave up (PostgreSQL SQLSTATE
    /// `55P03`, lock_not_available). The key is in flight; nothing was written.
    #[error("the key's claim is held by an uncommitted transaction; gave up after {waited:?}")]
    LockWaitExpired {
        /// The bound that passed.
        waited: Duration,
    },
    /// No connection came within the request's bound (`store-wait`, or the
    /// caller's deadline when sooner): the pool was busy or the database
    /// slow. Nothing reached the database.
    #[error("no database connection within {waited:?}")]
    NoConnection {
        /// The bound that passed.
        waited: Duration,
    },
    /// The database is known to be unreachable and the request was refused
    /// without waiting. Nothing reached the database.
    #[error("the database has been unreachable for {down_for:?}")]
    Down {
        /// How long the outage has lasted so far.
        down_for: Duration,
    },
    /// PostgreSQL answered the COMMIT without its synchronous standby's
    /// confirmation, with the warning that the transaction "has already
    /// committed locally, but might not have been replicated to the
    /// standby" (a wait for the standby cancelled, or its backend
    /// terminated). The server may be a primary being deposed, and what the
    /// transaction wrote may be missing after a failover: the request is
    /// answered as retryable, never with a final answer.
    #[error(
        "the key store's COMMIT returned without its synchronous standby ({warning}): \
         committed locally, but might not have been replicated"
    )]
    Unreplicated {
        /// PostgreSQL's warning.
        warning: &'static str,
    },
    /// A stored value is not one this version wrote.
    #[error("key store holds an unexpected {what}: {value:?}")]
    Corrupt {
        /// Which column.
        what: &'static str,
        /// The value found.
        value: String,
    },
}

impl StoreError {
    /// A transaction aborted by the database to keep transactions
    /// serializable (SQLSTATE `40001`: PostgreSQL's serialization failure,
    /// MySQL's deadlock, a Galera certification conflict at `COMMIT`).
    /// Nothing of it was written, and the transaction it lost to has
    /// committed: the retry may come at once.
    pub fn is_serialization_failure(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(db))
            if db.code().as_deref() == Some("40001"))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        StoreError::Database(error)
    }
}
