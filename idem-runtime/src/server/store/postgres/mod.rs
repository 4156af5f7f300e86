//! PostgreSQL (and Postgres-wire engines): connecting, directly, through a
//! transaction pooler, or to whichever host of a list is the primary.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, Postgres};

use super::error::StoreError;
use super::handle::{Follow, Store};
use super::settings::StoreSettings;
use super::sql::lock_timeout_setting;

mod backend;
mod inspect;
mod migrations;
pub(super) mod notice;
pub(super) mod primary;
pub(super) mod replication;

use primary::Primary;

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
    /// [`Policy::duplicate_wait`](crate::server::Policy::duplicate_wait) is 2s) is
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
        let mut store = Self::connect_with(url, max_connections, Some(set), false).await?;
        store.settings.session_lock_wait = Some(duplicate_wait);
        Ok(store)
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
        let settings = StoreSettings::default();
        let fence = settings.fence().clone();
        let Some(hosts) = primary::hosts(url)? else {
            let on_acquire = fence.clone();
            let pool = pool_options
                .after_connect(move |conn, _| {
                    let (set, fence) = (set.clone(), fence.clone());
                    Box::pin(async move {
                        fence.check(conn).await?;
                        if let Some(set) = set {
                            sqlx::Executor::execute(conn, set.as_str()).await?;
                        }
                        Ok(())
                    })
                })
                .before_acquire(move |_, meta| {
                    let keeps = on_acquire.keeps(meta.age);
                    Box::pin(async move { Ok(keeps) })
                })
                .connect_with(tune(PgConnectOptions::from_str(url)?))
                .await?;
            let mut store = Store::new(pool);
            store.settings = settings;
            return Ok(store);
        };
        let (primary, first) = Primary::find(
            hosts.into_iter().map(tune).collect(),
            settings.read_only().clone(),
        )
        .await?;
        let pool = primary
            .hooks(pool_options, set, fence)
            .connect_with(first)
            .await?;
        let watched = pool.clone();
        let follow = Follow(Arc::new(move |failed: bool| {
            if failed || primary.wanted() {
                primary.search(&watched);
            }
        }));
        let mut store = Store::new(pool);
        store.settings = settings;
        store.follow = Some(follow);
        Ok(store)
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
    /// It holds for this store and its clones only: another store of the
    /// process, reaching PostgreSQL directly, keeps its named statements.
    /// Give the pool no statement cache (`statement_cache_capacity(0)`), as
    /// [`Store::connect_postgres_pooled`] does.
    pub fn behind_transaction_pooler(mut self) -> Self {
        self.settings.named_statements = false;
        self.settings.session_lock_wait = None;
        self
    }

    fn pool_options(max_connections: u32) -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .test_before_acquire(false)
    }
}
