//! The store handle: a connection pool, what the store knows of its
//! server, and what this process has seen of the database.

use std::sync::Arc;
use std::time::Duration;

use sqlx::Pool;

use crate::server::gate::KeyGate;
use crate::server::health::{Admit, Failure, Health, classify};

use super::backend::Backend;
use super::error::StoreError;
use super::settings::StoreSettings;

/// The key store: a connection pool and the schema in it.
///
/// ```no_run
/// # async fn demo() -> Result<(), idem_runtime::server::StoreError> {
/// use idem_runtime::server::Store;
/// // An embedded file, created if missing; `sqlite::memory:` works too.
/// let store = Store::open_sqlite("sqlite://app.db").await?;
/// store.migrate().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Store<DB: Backend> {
    pool: Pool<DB>,
    /// Per-key turns in this process; shared by clones, like the pool whose
    /// connections it keeps duplicates from queueing for.
    gate: Arc<KeyGate>,
    /// What this process has seen of the database; shared by clones.
    health: Arc<Health>,
    /// What the store knows of its server, for its backend.
    pub(super) settings: StoreSettings,
    /// Given a host list: starts a search for the primary (`true`: a
    /// request found no connection).
    pub(super) follow: Option<Follow>,
}

/// A store's search for its primary, started from the generic code.
#[derive(Clone)]
pub(super) struct Follow(pub(super) Arc<dyn Fn(bool) + Send + Sync>);

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Follow")
    }
}

impl<DB: Backend> Clone for Store<DB> {
    fn clone(&self) -> Self {
        Store {
            pool: self.pool.clone(),
            gate: Arc::clone(&self.gate),
            health: Arc::clone(&self.health),
            settings: self.settings.clone(),
            follow: self.follow.clone(),
        }
    }
}

impl<DB: Backend> Store<DB> {
    /// Wraps a pool the application already has (the business tables live there too).
    pub fn new(pool: Pool<DB>) -> Self {
        Store {
            pool,
            gate: Arc::default(),
            health: Arc::default(),
            settings: StoreSettings::default(),
            follow: None,
        }
    }

    /// Opens a transaction for a request, waiting at most `wait` for a
    /// connection.
    ///
    /// - While the database is known to be down, it fails at once with
    ///   [`StoreError::Down`], except for one probe at a time (every 100ms
    ///   at most), which tries for real: its success ends the outage.
    /// - A pooled connection found dead (its backend terminated, the server
    ///   restarted) is discarded and another tried, within the bound: `BEGIN`
    ///   has no effect, so trying again is safe.
    /// - A refused connection opens an outage; so does a wait that ran out
    ///   when nothing got a connection for twice the bound (a database that
    ///   hangs rather than refuses). A wait that ran out while other requests
    ///   got connections is a busy pool: [`StoreError::NoConnection`].
    pub async fn begin_within(
        &self,
        wait: Duration,
    ) -> Result<sqlx::Transaction<'static, DB>, StoreError> {
        if let Some(Follow(follow)) = &self.follow {
            follow(false);
        }
        if let Admit::Refuse(down_for) = self.health.admit(wait) {
            return Err(StoreError::Down { down_for });
        }
        let until = tokio::time::Instant::now() + wait;
        // A caller that gives up first (its attempt timed out, it closed the
        // connection) drops this future: the wait it saw still counts.
        let mut watch = Abandoned {
            health: &self.health,
            started: std::time::Instant::now(),
            armed: true,
        };
        // Dead pooled connections met before giving up; each is discarded.
        let mut dead = 0;
        let started = watch.started;
        let waited = || {
            metrics::histogram!(crate::metric::STORE_WAIT_SECONDS)
                .record(started.elapsed().as_secs_f64());
        };
        loop {
            let error = match tokio::time::timeout_at(until, self.pool.begin()).await {
                Ok(Ok(tx)) => {
                    waited();
                    watch.armed = false;
                    self.health.answered();
                    return Ok(tx);
                }
                Ok(Err(e)) => Some(e),
                Err(_) => None,
            };
            let failure = error.as_ref().map_or(Failure::Timeout, classify);
            if failure == Failure::Lost && dead < 8 && tokio::time::Instant::now() < until {
                dead += 1;
                continue;
            }
            waited();
            watch.armed = false;
            if let Some(Follow(follow)) = &self.follow {
                follow(true);
            }
            if let Some(down_for) = self.health.failed(failure, wait) {
                if let Some(e) = &error {
                    tracing::debug!(error = %e, "no database connection");
                }
                return Err(StoreError::Down { down_for });
            }
            return Err(match error {
                Some(e) => StoreError::Database(e),
                None => StoreError::NoConnection { waited: wait },
            });
        }
    }

    /// The `lock_timeout` the pool's connections were opened with, if the
    /// store set one ([`Store::connect_postgres_bounded`]).
    pub fn session_lock_wait(&self) -> Option<Duration> {
        self.settings.session_lock_wait()
    }

    /// What the store knows of its server: every [`Backend`] function takes it.
    pub fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    /// Notes an error a request met: a read-only answer from PostgreSQL
    /// starts the search for the primary of a store with a host list.
    pub(crate) fn note(&self, error: &StoreError) {
        if let StoreError::Database(e) = error {
            self.settings.note(e);
        }
    }

    /// Commits `tx`. On PostgreSQL a COMMIT that returns with the warning
    /// that it "has already committed locally, but might not have been
    /// replicated" fails with [`StoreError::Unreplicated`], and every
    /// connection of the store opened before it is discarded: the server
    /// may be a primary being deposed, and what the transaction wrote may
    /// be missing after a failover.
    pub(crate) async fn commit(&self, tx: sqlx::Transaction<'_, DB>) -> Result<(), StoreError> {
        if !DB::SYNCHRONOUS_STANDBYS {
            return tx.commit().await.map_err(StoreError::from);
        }
        let (result, warning) = self.settings.commit_watch.run(tx.commit()).await;
        if let Some(warning) = warning {
            self.settings.fence.distrust();
            tracing::warn!(
                warning,
                "the key store committed without its synchronous standby's confirmation; the \
                 request is answered as retryable and the store's connections are discarded"
            );
            return Err(StoreError::Unreplicated { warning });
        }
        result.map_err(StoreError::from)
    }

    pub(crate) fn gate(&self) -> &Arc<KeyGate> {
        &self.gate
    }

    /// The pool; business code shares it.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Creates or upgrades the key tables from the migrations embedded in the
    /// binary. Idempotent, and safe when several processes start at once. Its
    /// own bookkeeping table (`idem_schema_migrations`) never collides with
    /// the application's `sqlx migrate` history.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        DB::migrate(&self.pool, &self.settings).await
    }
}

/// A request's wait for a connection, reported to the store's health if
/// the request is dropped while waiting.
struct Abandoned<'a> {
    health: &'a Health,
    started: std::time::Instant,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.health.abandoned(self.started.elapsed());
        }
    }
}
