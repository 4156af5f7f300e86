//! The key store: embedded migrations and every statement the protocol runs,
//! for SQLite and PostgreSQL.
//!
//! The statements are written once, in the dialect both engines accept
//! (`$N` placeholders, `INSERT … ON CONFLICT`, `RETURNING`), and instantiated
//! per backend by a macro so each instantiation works on concrete sqlx types.
//! Any Postgres-wire engine with those features (CockroachDB, YugabyteDB) can
//! run the PostgreSQL instantiation unchanged.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, Postgres};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Pool, Sqlite};

use super::error::StoreError;
use super::gate::KeyGate;
use super::health::{Admit, Failure, Health, classify};

mod backend;
#[macro_use]
mod sql;
mod inspect;
mod mysql;
mod mysql_inspect;
mod postgres;
mod primary;
mod records;
mod replication;
mod sqlite;

pub use backend::Backend;
pub use inspect::{Inspect, Inspected, KeyStats, ListFilter, Schema};
use primary::Primary;
pub(crate) use primary::note as note_error;
pub use records::*;
pub use replication::{Replication, Standby};
use sql::lock_timeout_setting;

/// Set once a PostgreSQL store in this process is behind a transaction
/// pooler: idem's statements on PostgreSQL are then unnamed, never cached.
static BEHIND_POOLER: AtomicBool = AtomicBool::new(false);

/// Whether idem's statements on PostgreSQL may be named and cached on their
/// connection (sqlx's default, one round trip per execution once
/// prepared). Not behind a transaction pooler, which moves a client to
/// another server connection between transactions, where the name means
/// nothing or something else.
pub(crate) fn named_statements() -> bool {
    !BEHIND_POOLER.load(Ordering::Relaxed)
}

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
    /// The `lock_timeout` every connection of the pool runs with, when the
    /// store set it at connect.
    session_lock_wait: Option<Duration>,
    /// Given a host list: starts a search for the primary (`true`: a
    /// request found no connection).
    follow: Option<Follow>,
}

/// A store's search for its primary, started from the generic code.
#[derive(Clone)]
struct Follow(Arc<dyn Fn(bool) + Send + Sync>);

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
            session_lock_wait: self.session_lock_wait,
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
            session_lock_wait: None,
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
        self.session_lock_wait
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
        DB::migrate(&self.pool).await
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

impl Store<sqlx::MySql> {
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
        mysql::note_server(&version);
        Ok(Store::new(pool))
    }
}

impl Store<Postgres> {
    /// Connects to PostgreSQL (or a Postgres-wire engine) with a pool of
    /// `max_connections`.
    ///
    /// Each claim bounds its own wait for a concurrent duplicate, inside its
    /// insert, so the handlers' statements run with the connection's own
    /// `lock_timeout`. [`Store::connect_postgres_bounded`] trades that for a
    /// cheaper claim.
    ///
    /// A pooled connection is not pinged before each use: a connection that
    /// died while idle fails the request's first statement, which is answered
    /// `503` with `Retry-After` with nothing committed, and the pool drops it.
    ///
    /// `url` may list several hosts, in libpq's form
    /// (`postgres://app@db1:5432,db2:5432/pay`): the pool connects to the
    /// first that accepts writes and follows the primary when it moves (a
    /// failover, a switchover). New connections are checked with
    /// `SHOW transaction_read_only`; a request that finds no connection, or a
    /// statement answered `25006` (read-only transaction), starts a search
    /// of the list in order, and connections opened before the primary moved
    /// are discarded. One host with `target_session_attrs=read-write` gets
    /// the same checks (a name that a failover repoints). Connecting fails
    /// when no host accepts writes.
    pub async fn connect_postgres(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        Self::connect_with(url, max_connections, None, false).await
    }

    /// Connects like [`Store::connect_postgres`], and opens every connection
    /// with `SET lock_timeout` to `duplicate_wait`. A claim whose wait for a
    /// concurrent duplicate is that value (the default
    /// [`Policy::duplicate_wait`](super::Policy::duplicate_wait) is 2s) is
    /// then the plain insert: it sets and restores nothing, which is about a
    /// tenth of the claim's cost in the database. Claims with another bound
    /// (a route's own `duplicate_wait`, or `in-flight: wait`) still carry
    /// theirs, as with [`Store::connect_postgres`].
    ///
    /// The price: every statement on these connections, the handlers' and
    /// the unkeyed routes' included, gives up after waiting `duplicate_wait`
    /// for a lock (SQLSTATE `55P03`, answered `503` with `Retry-After`, the
    /// transaction rolled back).
    pub async fn connect_postgres_bounded(
        url: &str,
        max_connections: u32,
        duplicate_wait: Duration,
    ) -> Result<Self, StoreError> {
        let set = format!(
            "SET lock_timeout = '{}'",
            lock_timeout_setting(duplicate_wait)
        );
        let store = Self::connect_with(url, max_connections, Some(set), false).await?;
        Ok(Store {
            session_lock_wait: Some(duplicate_wait),
            ..store
        })
    }

    /// Every PostgreSQL constructor: `url` is one host, or a host list
    /// whose primary the pool follows; `set` runs on every new connection.
    async fn connect_with(
        url: &str,
        max_connections: u32,
        set: Option<String>,
        pooled: bool,
    ) -> Result<Self, StoreError> {
        let tune = |options: PgConnectOptions| {
            if pooled {
                options.statement_cache_capacity(0)
            } else {
                options
            }
        };
        let pool_options = Self::pool_options(max_connections);
        let Some(hosts) = primary::hosts(url)? else {
            let pool_options = match set {
                Some(set) => pool_options.after_connect(move |conn, _| {
                    let set = set.clone();
                    Box::pin(async move {
                        sqlx::Executor::execute(conn, set.as_str()).await?;
                        Ok(())
                    })
                }),
                None => pool_options,
            };
            let pool = pool_options
                .connect_with(tune(PgConnectOptions::from_str(url)?))
                .await?;
            return Ok(Store::new(pool));
        };
        let (primary, first) = Primary::find(hosts.into_iter().map(tune).collect()).await?;
        let pool = primary.hooks(pool_options, set).connect_with(first).await?;
        let watched = pool.clone();
        let follow = Follow(Arc::new(move |failed: bool| {
            if failed || primary.wanted() {
                primary.search(&watched);
            }
        }));
        Ok(Store {
            follow: Some(follow),
            ..Store::new(pool)
        })
    }

    /// Connects through a pooler in transaction pooling mode, such as
    /// PgBouncer with `pool_mode = transaction`: like
    /// [`Store::connect_postgres`], with no statement cache, and the store
    /// marked [behind a transaction pooler](Store::behind_transaction_pooler).
    ///
    /// PgBouncer must let sqlx's startup parameter through:
    /// `ignore_startup_parameters = extra_float_digits` in `pgbouncer.ini`.
    pub async fn connect_postgres_pooled(
        url: &str,
        max_connections: u32,
    ) -> Result<Self, StoreError> {
        let store = Self::connect_with(url, max_connections, None, true).await?;
        Ok(store.behind_transaction_pooler())
    }

    /// Says a pooler in transaction pooling mode (PgBouncer's
    /// `pool_mode = transaction`, or Odyssey, or PgCat) stands between this
    /// store and PostgreSQL, which hands each transaction whatever server
    /// connection is free:
    ///
    /// - idem's statements are unnamed and never cached (a named one would
    ///   be missing, or another client's, on the next server connection);
    /// - every statement runs inside an explicit transaction, which keeps
    ///   its parse and its execution on one server connection (sqlx sends
    ///   them in two round trips);
    /// - nothing is set on the session: the claim bounds its wait with a
    ///   transaction-local setting, the migrations lock with a
    ///   transaction-scoped advisory lock.
    ///
    /// It holds for every PostgreSQL store in the process: a process rarely
    /// reaches one database both ways, and unnamed statements are correct
    /// on a direct connection too, at one more round trip each. Give the
    /// pool no statement cache (`statement_cache_capacity(0)`), as
    /// [`Store::connect_postgres_pooled`] does.
    pub fn behind_transaction_pooler(self) -> Self {
        BEHIND_POOLER.store(true, Ordering::Relaxed);
        Store {
            session_lock_wait: None,
            ..self
        }
    }

    fn pool_options(max_connections: u32) -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false)
    }
}
