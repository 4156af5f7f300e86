//! Finding the primary among several PostgreSQL hosts, and following it
//! when it moves.
//!
//! sqlx connects to one host. A store given a host list
//! (`postgres://user@db1:5432,db2:5432/app`, libpq's syntax, or one host with
//! `target_session_attrs=read-write`) keeps its pool pointed at the first
//! host that accepts writes:
//!
//! - every new connection is asked `SHOW transaction_read_only` (one round
//!   trip, simple protocol); a standby, or a primary fenced with
//!   `default_transaction_read_only`, is refused, and the hosts are tried
//!   again in order;
//! - a request that cannot get a connection (the primary died), or a
//!   statement answered SQLSTATE `25006` (a read-only transaction: the
//!   host was demoted or fenced), starts the same search in the
//!   background, at most one at a time;
//! - when the search moves the pool to another host, or a `25006` was
//!   seen, every connection opened before is discarded the next time it
//!   would be handed out, so no request runs on the old host.
//!
//! The requests that meet the failover are answered `503` with
//! `Retry-After` by the store's usual rules; nothing is written to a host
//! that is not the primary.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions, Postgres};
use sqlx::{Connection as _, Executor as _, Pool, Row as _};

use crate::server::store::error::StoreError;

/// The last time (by [`clock_ms`]) a statement of one store was answered
/// `25006` (read-only transaction) by PostgreSQL: a store with a host list
/// discards its connections opened before then. Shared by the store's
/// clones and its search for the primary; `0` is never.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadOnlySeen(Arc<AtomicI64>);

impl ReadOnlySeen {
    /// Notes an error: a `25006` means the host the store writes to is no
    /// longer the primary.
    pub(crate) fn note(&self, error: &sqlx::Error) {
        if let sqlx::Error::Database(db) = error
            && db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some()
            && db.code().as_deref() == Some("25006")
        {
            self.0.fetch_max(clock_ms(), Ordering::Relaxed);
        }
    }

    /// The last sighting.
    fn last(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What a store has learnt of the servers it writes to, beyond a host
/// list: the highest timeline a primary of it has been on, and since when
/// its connections are not to be trusted. Shared by the store's clones.
///
/// - Every new connection reads its server's timeline. A timeline above
///   the highest seen means a standby was promoted: connections opened
///   before are discarded the next time they would be handed out (they
///   may reach the old primary, through a proxy that keeps sessions). A
///   timeline below it is a primary that was deposed and does not know it
///   yet (a hung server resumed): the connection is refused.
/// - A COMMIT answered with the "committed locally, but might not have
///   been replicated" warning discards every connection opened before it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fence(Arc<FenceState>);

#[derive(Debug)]
struct FenceState {
    /// The highest timeline seen; `0` is none yet.
    timeline: AtomicI64,
    /// Connections opened before this (by [`clock_ms`]) are discarded;
    /// `i64::MIN` is never (a connection may be older than the clock).
    distrust_before: AtomicI64,
    /// When (by [`clock_ms`]) a server below the highest timeline was
    /// first refused, in the current run of refusals; `0` is none.
    lower_since: AtomicI64,
}

impl Default for FenceState {
    fn default() -> Self {
        FenceState {
            timeline: AtomicI64::new(0),
            distrust_before: AtomicI64::new(i64::MIN),
            lower_since: AtomicI64::new(0),
        }
    }
}

/// How long a server below the highest timeline seen is refused. A
/// deposed primary that resumes is demoted by its HA manager within
/// seconds; one that still answers as the primary after this is a cluster
/// created anew (restored, re-bootstrapped), and is taken as the primary.
const DEPOSED_FOR_AT_MOST: Duration = Duration::from_secs(60);

/// The timeline of the server behind a connection: `Some(0)` on a standby,
/// `None` where the engine has no such functions (a Postgres-wire engine).
/// A primary's current WAL file is named by its timeline.
async fn timeline(conn: &mut PgConnection) -> Result<Option<i64>, sqlx::Error> {
    let statement = "SELECT CASE WHEN pg_is_in_recovery() THEN '' \
                     ELSE pg_walfile_name(pg_current_wal_lsn()) END";
    let row = match conn.fetch_one(statement).await {
        Ok(row) => row,
        Err(sqlx::Error::Database(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let file: String = row.try_get(0)?;
    if file.is_empty() {
        return Ok(Some(0));
    }
    Ok(file.get(..8).and_then(|t| i64::from_str_radix(t, 16).ok()))
}

impl Fence {
    /// Checks a new connection: `Err` when its server is a deposed
    /// primary, on a timeline below one this store has written to.
    pub(crate) async fn check(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        let Some(found) = timeline(conn).await? else {
            return Ok(());
        };
        if found == 0 {
            // A standby: the host-list checks refuse it; one host is let
            // through, and its writes answer `25006`.
            return Ok(());
        }
        let highest = self.0.timeline.fetch_max(found, Ordering::AcqRel);
        if found < highest {
            let now = clock_ms();
            let since = match self.0.lower_since.compare_exchange(
                0,
                now,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => now,
                Err(since) => since,
            };
            let limit = i64::try_from(DEPOSED_FOR_AT_MOST.as_millis()).unwrap_or(i64::MAX);
            if now - since > limit {
                self.0.timeline.store(found, Ordering::Release);
                self.0.lower_since.store(0, Ordering::Release);
                tracing::warn!(
                    timeline = found,
                    previous = highest,
                    "the key store's primary has been on a timeline below one seen before for \
                     over a minute: taken as a cluster created anew, and written to"
                );
                return Ok(());
            }
            self.distrust();
            return Err(sqlx::Error::Protocol(format!(
                "the server is on timeline {found}, and a primary on timeline {highest} \
                     was promoted since: a deposed primary, not written to"
            )));
        }
        self.0.lower_since.store(0, Ordering::Release);
        if highest != 0 && found > highest {
            self.distrust();
            tracing::warn!(
                timeline = found,
                previous = highest,
                "the key store's primary is on a new timeline (a standby was promoted); \
                 connections opened before are discarded"
            );
        }
        Ok(())
    }

    /// Discards every connection opened before now.
    pub(crate) fn distrust(&self) {
        self.0
            .distrust_before
            .fetch_max(clock_ms(), Ordering::Relaxed);
    }

    /// Whether a connection of `age` may be handed out.
    pub(crate) fn keeps(&self, age: Duration) -> bool {
        let opened = clock_ms().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
        opened >= self.0.distrust_before.load(Ordering::Relaxed)
    }
}

/// Milliseconds on a monotonic clock, from the first call on: the unit of
/// every time here, comparable with a connection's age (the wall clock can
/// step back).
fn clock_ms() -> i64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    // From 1: zero means "never".
    i64::try_from(
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_millis(),
    )
    .unwrap_or(i64::MAX)
    .saturating_add(1)
}

/// How long one host may take to answer whether it is the primary.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Shortest spacing of two searches.
const SEARCH_EVERY: Duration = Duration::from_millis(100);

/// The hosts of a URL in libpq's multi-host form, each as its own URL, and
/// whether the URL asks for the primary. `None` for a plain one-host URL
/// without `target_session_attrs`.
pub(crate) fn hosts(url: &str) -> Result<Option<Vec<PgConnectOptions>>, StoreError> {
    let config = |message: String| StoreError::Database(sqlx::Error::Configuration(message.into()));
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(None);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostlist) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let mut wants_primary = false;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("target_session_attrs", value)) => match value {
                "read-write" | "primary" => wants_primary = true,
                "any" => {}
                other => {
                    return Err(config(format!(
                        "target_session_attrs={other}: the key store writes, so it needs \
                         the primary (read-write)"
                    )));
                }
            },
            _ => kept.push(pair),
        }
    }
    let list: Vec<&str> = hostlist.split(',').collect();
    if list.len() < 2 && !wants_primary {
        return Ok(None);
    }
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    list.iter()
        .map(|host| {
            if host.is_empty() {
                return Err(config(format!(
                    "an empty host in the host list {hostlist:?}"
                )));
            }
            let one = format!("{scheme}://{userinfo}{host}{path}{query}");
            PgConnectOptions::from_str(&one).map_err(StoreError::Database)
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `host:port` of some options, for logs and errors.
fn label(options: &PgConnectOptions) -> String {
    format!("{}:{}", options.get_host(), options.get_port())
}

/// Whether the server behind `conn` accepts writes.
async fn writable(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    // A statement without parameters goes by the simple protocol: one
    // round trip, nothing prepared, safe behind a transaction pooler too.
    let row = conn.fetch_one("SHOW transaction_read_only").await?;
    Ok(row.try_get::<String, _>(0)? == "off")
}

/// The host list of one store and which host its pool points at.
#[derive(Debug)]
pub(crate) struct Primary {
    hosts: Vec<PgConnectOptions>,
    current: AtomicUsize,
    /// The store's read-only sightings.
    read_only: ReadOnlySeen,
    /// Connections opened before this (by [`clock_ms`]) are discarded.
    discard_before: AtomicI64,
    /// The `25006` sighting already acted on.
    read_only_handled: AtomicI64,
    /// A new connection found its host read-only: search.
    wanted: AtomicBool,
    searching: AtomicBool,
    last_search: AtomicI64,
}

impl Primary {
    /// Tries the hosts in order and returns the state pointed at the
    /// first that accepts writes, with its options.
    pub(crate) async fn find(
        hosts: Vec<PgConnectOptions>,
        read_only: ReadOnlySeen,
    ) -> Result<(Arc<Primary>, PgConnectOptions), StoreError> {
        let index = search(&hosts).await.ok_or_else(|| {
            let labels: Vec<String> = hosts.iter().map(label).collect();
            StoreError::Database(sqlx::Error::Configuration(
                format!(
                    "none of the hosts {} accepts writes: each is down, a standby, or \
                     read-only",
                    labels.join(", ")
                )
                .into(),
            ))
        })?;
        let options = hosts[index].clone();
        let primary = Primary {
            hosts,
            current: AtomicUsize::new(index),
            discard_before: AtomicI64::new(i64::MIN),
            read_only_handled: AtomicI64::new(read_only.last()),
            read_only,
            wanted: AtomicBool::new(false),
            searching: AtomicBool::new(false),
            last_search: AtomicI64::new(0),
        };
        Ok((Arc::new(primary), options))
    }

    /// The pool options' hooks: new connections must accept writes, and
    /// connections older than the last move or `25006` are discarded.
    /// `set` is a statement every new connection runs once it is known to
    /// be the primary's.
    pub(crate) fn hooks(
        self: &Arc<Self>,
        options: PgPoolOptions,
        set: Option<String>,
        fence: Fence,
    ) -> PgPoolOptions {
        let on_connect = Arc::clone(self);
        let on_acquire = Arc::clone(self);
        let fence_acquire = fence.clone();
        options
            .after_connect(move |conn, _| {
                let (primary, set, fence) = (Arc::clone(&on_connect), set.clone(), fence.clone());
                Box::pin(async move {
                    if !writable(conn).await? {
                        primary.wanted.store(true, Ordering::Relaxed);
                        return Err(sqlx::Error::Protocol(
                            "the host is read-only (a standby, or fenced): not the primary".into(),
                        ));
                    }
                    if let Err(e) = fence.check(conn).await {
                        primary.wanted.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                    if let Some(set) = set {
                        conn.execute(set.as_str()).await?;
                    }
                    Ok(())
                })
            })
            .before_acquire(move |_, meta| {
                let (primary, fence) = (Arc::clone(&on_acquire), fence_acquire.clone());
                Box::pin(async move { Ok(primary.keeps(meta.age) && fence.keeps(meta.age)) })
            })
    }

    /// Takes in a `25006` seen since the last one: connections opened
    /// before it are to be discarded, and the primary searched for.
    fn take_read_only(&self) {
        let seen = self.read_only.last();
        if seen > self.read_only_handled.load(Ordering::Relaxed) {
            self.read_only_handled.fetch_max(seen, Ordering::Relaxed);
            self.discard_before.fetch_max(seen, Ordering::Relaxed);
            self.wanted.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a connection of `age` may be handed out.
    fn keeps(&self, age: Duration) -> bool {
        self.take_read_only();
        let opened = clock_ms().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
        opened >= self.discard_before.load(Ordering::Relaxed)
    }

    /// Whether something asked for a search since the last one.
    pub(crate) fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
            || self.read_only.last() > self.read_only_handled.load(Ordering::Relaxed)
    }

    /// Searches the hosts for the primary in the background (at most one
    /// search at a time, one every 100ms), and points `pool` at it.
    pub(crate) fn search(self: &Arc<Self>, pool: &Pool<Postgres>) {
        let now = clock_ms();
        let spacing = i64::try_from(SEARCH_EVERY.as_millis()).unwrap_or(100);
        let last = self.last_search.load(Ordering::Relaxed);
        if (last != 0 && now - last < spacing) || self.searching.swap(true, Ordering::AcqRel) {
            return;
        }
        self.last_search.store(now, Ordering::Relaxed);
        // A `25006` is taken in now, not only when a pooled connection is
        // next handed out: it asks for this search and no other.
        self.take_read_only();
        self.wanted.store(false, Ordering::Relaxed);
        let (primary, pool) = (Arc::clone(self), pool.clone());
        tokio::spawn(async move {
            // Cleared however the task ends (a panic, a runtime shut down):
            // a store that can never search again would never follow.
            let _done = Searching(Arc::clone(&primary));
            let found = search(&primary.hosts).await;
            if let Some(index) = found
                && primary.current.swap(index, Ordering::AcqRel) != index
            {
                pool.set_connect_options(primary.hosts[index].clone());
                primary
                    .discard_before
                    .fetch_max(clock_ms(), Ordering::Relaxed);
                tracing::warn!(
                    primary = %label(&primary.hosts[index]),
                    "the key store's primary moved; connections to the old one are discarded"
                );
            } else if found.is_none() {
                tracing::debug!("no host of the key store's list accepts writes yet");
            }
        });
    }
}

/// Marks a search ended when dropped.
struct Searching(Arc<Primary>);

impl Drop for Searching {
    fn drop(&mut self) {
        self.0.searching.store(false, Ordering::Release);
    }
}

/// The first host of `hosts` that accepts writes, with its index.
async fn search(hosts: &[PgConnectOptions]) -> Option<usize> {
    for (index, options) in hosts.iter().enumerate() {
        let probe = async {
            let mut conn = PgConnection::connect_with(options).await?;
            let ok = writable(&mut conn).await;
            let _ = conn.close().await;
            ok
        };
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(true)) => return Some(index),
            Ok(Ok(false)) => tracing::debug!(host = %label(options), "read-only: not the primary"),
            Ok(Err(e)) => tracing::debug!(host = %label(options), error = %e, "unreachable"),
            Err(_) => tracing::debug!(host = %label(options), "no answer within 1s"),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_list_becomes_one_url_per_host() {
        let hosts = hosts("postgres://app:pw@db1:5432,db2:5433,[::1]:5434/pay?sslmode=disable")
            .unwrap()
            .unwrap();
        let labels: Vec<String> = hosts.iter().map(label).collect();
        assert_eq!(labels, ["db1:5432", "db2:5433", "[::1]:5434"]);
        assert_eq!(hosts[1].get_database(), Some("pay"));
        assert_eq!(hosts[1].get_username(), "app");
    }

    #[test]
    fn one_host_is_a_list_only_when_it_asks_for_the_primary() {
        assert!(hosts("postgres://db1:5432/pay").unwrap().is_none());
        let one = hosts("postgres://db1:5432/pay?target_session_attrs=read-write")
            .unwrap()
            .unwrap();
        assert_eq!(one.len(), 1);
        let refused = hosts("postgres://db1,db2/pay?target_session_attrs=standby").unwrap_err();
        assert!(
            refused.to_string().contains("needs the primary"),
            "{refused}"
        );
        assert!(hosts("postgres://db1,,db2/pay").is_err());
    }

    #[test]
    fn a_distrusted_store_discards_what_it_opened_before() {
        let fence = Fence::default();
        assert!(fence.keeps(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(2));
        fence.distrust();
        assert!(!fence.keeps(Duration::from_secs(60)), "opened before");
        std::thread::sleep(Duration::from_millis(5));
        assert!(fence.keeps(Duration::ZERO), "opened after");
    }

    #[test]
    fn a_read_only_answer_discards_older_connections() {
        let seen = ReadOnlySeen::default();
        seen.note(&sqlx::Error::Protocol("not a database error".into()));
        let primary = Primary {
            hosts: Vec::new(),
            current: AtomicUsize::new(0),
            read_only: seen.clone(),
            discard_before: AtomicI64::new(i64::MIN),
            read_only_handled: AtomicI64::new(seen.last()),
            wanted: AtomicBool::new(false),
            searching: AtomicBool::new(false),
            last_search: AtomicI64::new(0),
        };
        assert!(primary.keeps(Duration::from_secs(60)));
        assert!(!primary.wanted());
        seen.0.fetch_max(clock_ms(), Ordering::Relaxed);
        assert!(primary.wanted());
        assert!(
            !primary.keeps(Duration::from_secs(60)),
            "opened before the sighting"
        );
        std::thread::sleep(Duration::from_millis(5));
        assert!(primary.keeps(Duration::ZERO), "opened after it");
    }
}
