//! The MySQL family (MariaDB, MySQL, Galera clusters), through sqlx's
//! MySQL driver.

use std::time::Duration;

use sqlx::mysql::MySql;

use super::error::StoreError;
use super::handle::Store;

mod backend;
mod inspect;
mod migrations;

/// Whether the server, by its `VERSION()`, is MariaDB, which takes
/// `SET STATEMENT … FOR`.
fn takes_set_statement(version: &str) -> bool {
    let mariadb = version.contains("MariaDB");
    if !mariadb {
        tracing::warn!(
            version,
            "the key store is MySQL, not MariaDB: a claim's wait behind a concurrent \
             duplicate is bounded by the connections' innodb_lock_wait_timeout (50s by \
             default), not by the route's duplicate wait"
        );
    }
    mariadb
}

impl Store<MySql> {
    /// Connects to MariaDB (or one node of a Galera cluster) with a pool
    /// of `max_connections`. MySQL works too, untested here.
    ///
    /// The claim bounds its wait behind a concurrent claim of the same key
    /// with `SET STATEMENT innodb_lock_wait_timeout` (MariaDB), in whole
    /// seconds. MySQL has no `SET STATEMENT`: there the claim waits for the
    /// connections' own `innodb_lock_wait_timeout` (50 s by default; set it
    /// lower), and connecting logs so. On a Galera cluster, a claim that lost to one on another
    /// node fails at `COMMIT` (error 1213), its effects rolled back, and is
    /// answered `503` with `Retry-After`; the retry finds the winner's record.
    pub async fn connect_mysql(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false)
            .connect(url)
            .await?;
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&pool)
            .await?;
        let mut store = Store::new(pool);
        store.settings.set_statement = takes_set_statement(&version);
        Ok(store)
    }

    /// Says the server does not take MariaDB's `SET STATEMENT … FOR`
    /// (MySQL): a claim's wait behind a concurrent duplicate is then bounded
    /// by the connections' own `innodb_lock_wait_timeout`, not by the
    /// route's duplicate wait. [`Store::connect_mysql`] finds this out from
    /// the server's `VERSION()`; a store made with [`Store::new`] from a
    /// pool of your own assumes MariaDB.
    ///
    /// It holds for this store and its clones only: a MariaDB store of the
    /// same process keeps bounding its claims.
    pub fn without_set_statement(mut self) -> Self {
        self.settings.set_statement = false;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::takes_set_statement;

    #[test]
    fn mariadb_is_told_from_mysql_by_its_version() {
        assert!(takes_set_statement("10.11.6-MariaDB-0+deb12u1"));
        assert!(!takes_set_statement("8.0.36"));
    }
}
