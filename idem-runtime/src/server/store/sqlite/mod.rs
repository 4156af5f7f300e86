//! SQLite, the embedded default.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::error::StoreError;
use super::handle::Store;

mod backend;
mod inspect;
mod migrations;

impl Store<Sqlite> {
    /// Opens (creating if missing) an SQLite database with the settings the
    /// protocol wants: WAL journal, `synchronous = NORMAL`, a generous busy
    /// timeout, and a single pooled connection.
    ///
    /// SQLite admits one writer at a time. With one connection, concurrent
    /// requests queue fairly in the pool instead of spinning in SQLite's busy
    /// handler; build the pool yourself and use [`Store::new`] for another shape.
    /// A handler must use the transaction it is given, never a second
    /// connection from the same single-connection pool.
    pub async fn open_sqlite(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        Ok(Store::new(pool))
    }
}
