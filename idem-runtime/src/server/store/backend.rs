//! The engine-specific half of the store: every statement the protocol
//! runs, as one trait each engine implements.

use std::time::Duration;

use sqlx::Pool;

use super::error::StoreError;
use super::postgres::replication::Replication;
use super::records::*;
use super::settings::StoreSettings;

/// A database engine the key store runs on.
///
/// Implemented for [`Sqlite`](sqlx::Sqlite), [`Postgres`](sqlx::Postgres)
/// and [`MySql`](sqlx::MySql). Every method runs on a connection the caller
/// provides (usually the transaction that also carries the business
/// effect), so the key's state changes commit with it, and takes the
/// [`StoreSettings`] of the store the connection came from
/// ([`Store::settings`](crate::server::Store::settings)).
pub trait Backend: sqlx::Database + Sized {
    /// The longest scope and key, in bytes, the engine's key columns hold,
    /// when narrower than [`MAX_INDEXED_BYTES`](crate::server::MAX_INDEXED_BYTES)
    /// together: an instance whose bounds exceed them is refused when it is
    /// built ([`ConfigError::KeyColumnsTooNarrow`](crate::server::ConfigError::KeyColumnsTooNarrow)).
    const KEY_COLUMNS: Option<(usize, usize)> = None;

    /// How many records one reaper batch deletes, in one transaction: what
    /// a batch holds up is the rows it deletes, except on SQLite, whose one
    /// writer makes every claim wait for the batch, so its batches are
    /// smaller.
    const REAP_BATCH: i64 = 1_000;

    /// Whether a commit may wait for a synchronous standby (PostgreSQL):
    /// the store then watches each COMMIT for the warning that it returned
    /// without one, and confirms a read record before it answers
    /// ([`Backend::confirm_read`]).
    const SYNCHRONOUS_STANDBYS: bool = false;

    /// Creates or upgrades the schema; safe to call from several processes at once.
    fn migrate<'a>(
        pool: &'a Pool<Self>,
        settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The claim: one `INSERT … ON CONFLICT (scope, idem_key) DO NOTHING RETURNING`.
    /// `Some(generation)` means this caller won.
    ///
    /// When another transaction holds an uncommitted claim on the same key
    /// the insert waits for it to end; `wait` bounds that wait, after which
    /// the claim fails with [`StoreError::LockWaitExpired`] and the
    /// transaction is aborted. A won claim lifts the bound in the same
    /// statement, so it never applies to the handler's statements. A lost
    /// one leaves it for the statements that examine the record;
    /// [`Backend::lift_claim_bound`] lifts it before a record won some
    /// other way (re-claimed, taken over) goes to a handler. (SQLite never
    /// waits here: its one writer connection is held by whoever claimed.)
    ///
    /// When every connection of the pool already runs with `wait` as its
    /// `lock_timeout` ([`StoreSettings::session_lock_wait`], set by
    /// [`Store::connect_postgres_bounded`](crate::server::Store::connect_postgres_bounded)),
    /// to the setting's millisecond, the claim is the plain insert and sets
    /// nothing.
    fn claim<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        claim: &'a NewClaim<'a>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>>;

    /// Makes the transaction `conn` is in wait, at its COMMIT, for the
    /// record of `key` under `scope` it read to be on the synchronous
    /// standby, before the record answers a request (a replay, a reused
    /// key, an exhausted one).
    ///
    /// On PostgreSQL a record can be visible on the primary without being
    /// on its synchronous standby: its commit's wait for the standby was
    /// cancelled ("committed locally, but might not have been
    /// replicated"), or the primary restarted and recovered it from its
    /// WAL. A standby a failover promotes may lack it. A transaction that
    /// wrote no WAL does not wait for the standby at its COMMIT, so this
    /// takes the lightest row lock on the record (`FOR KEY SHARE`, which
    /// conflicts only with its deletion), which is written to the WAL: the
    /// COMMIT then waits for the standby to have everything up to it, the
    /// record included, and the store checks it as a write's. Fails with
    /// [`StoreError::Corrupt`] when the record is gone (reaped meanwhile:
    /// nothing confirmed). A no-op elsewhere.
    fn confirm_read<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = (conn, settings, scope, key);
        Box::pin(async { Ok(()) })
    }

    /// Puts back the lock wait the transaction had before a lost
    /// [`Backend::claim`] bounded it (a no-op where nothing was bounded, and
    /// on SQLite).
    fn lift_claim_bound<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The claim at commit ([`ClaimAt::Commit`](crate::server::ClaimAt::Commit)):
    /// inserts the key row complete, with `response`, as the last statement
    /// of the handler's transaction. `Some(generation)` means this caller
    /// won; `None` that the key has a committed record (the transaction is
    /// still usable, to read it).
    ///
    /// When another transaction holds an uncommitted row for the key, the
    /// insert waits for it to end; on PostgreSQL `wait` bounds that wait,
    /// after which the claim fails with [`StoreError::LockWaitExpired`] and
    /// the transaction is aborted. The bound is set by the statement itself
    /// (unless the session's already is `wait`, as in [`Backend::claim`]) and
    /// stays for the rest of the transaction, which only commits, reads the
    /// record or rolls back.
    fn claim_complete<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        claim: &'a NewClaim<'a>,
        response: &'a StoredResponse,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>>;

    /// Deletes a complete record claimed before `created_before` and its
    /// steps, so that a claim at commit can take the key: past its replay
    /// window a key names a new request. `true` when it was deleted.
    fn delete_expired<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        created_before: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Re-claims a record whose replay window has passed, in one conditional
    /// `UPDATE`; a complete record, or an in-flight one whose lock is stale.
    fn reclaim_expired<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        claim: &'a NewClaim<'a>,
        created_before: i64,
        locked_before: i64,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>>;

    /// Reads one record.
    fn load<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<KeyRecord>, StoreError>>;

    /// Takes over an in-flight record whose lock is older than `locked_before`
    /// and whose next run is due at `now`: one conditional `UPDATE` that
    /// bumps the fencing generation and counts the run. Returns the new
    /// generation and the runs so far, this one included.
    fn take_over<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        locked_before: i64,
        now: i64,
    ) -> BoxFuture<'a, Result<Option<(i64, i64)>, StoreError>>;

    /// After a failed run, if `generation` still holds the record: releases
    /// the lock and sets the next run for `next_at`, or, when the record has
    /// had `max_attempts` runs or `next_at` is past `give_up_after_ms` from
    /// its claim, moves it to [`KeyState::Exhausted`]. One conditional
    /// `UPDATE`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the record's key, its fencing generation and the schedule, each a value of the one UPDATE"
    )]
    fn reschedule<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        next_at: i64,
        max_attempts: i64,
        give_up_after_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Rescheduled>, StoreError>>;

    /// Moves a record `generation` holds to [`KeyState::Exhausted`] (a takeover
    /// found it past its bound).
    fn exhaust<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// How many records are [`KeyState::Exhausted`].
    fn count_exhausted<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<i64, StoreError>>;

    /// How many records are in flight, exhausted, and stale (in flight with
    /// a lock older than `lock_cutoff` and a next run due at `now`).
    fn count_watched<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        lock_cutoff: i64,
        now: i64,
    ) -> BoxFuture<'a, Result<WatchedCounts, StoreError>>;

    /// Whether the primary replicates to standbys, and how
    /// ([`Replication`]); `None` where the engine has no
    /// such thing (SQLite).
    fn replication<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
    ) -> BoxFuture<'a, Result<Option<Replication>, StoreError>>;

    /// Up to `limit` exhausted records, oldest first.
    fn exhausted<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<ExhaustedRecord>, StoreError>>;

    /// Moves the record to its recovery point and refreshes the lock, if
    /// `generation` still holds it.
    fn advance<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        recovery_point: &'a str,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Lets go of the lock so a retry can take over at once.
    fn release<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Stores the response and marks the record complete, if `generation`
    /// still holds the lock.
    fn complete<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        generation: i64,
        response: &'a StoredResponse,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Reads the steps of a phased operation.
    fn load_steps<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Vec<StepRecord>, StoreError>>;

    /// Writes (or overwrites) one step.
    fn record_step<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
        step: &'a StepRecord,
        now: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Deletes the steps of one key (a reclaimed key starts over).
    fn delete_steps<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// In-flight records of phased operations whose lock is older than
    /// `locked_before` and whose next run is due at `now`.
    fn abandoned<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        locked_before: i64,
        now: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>>;

    /// One reaper batch: deletes at most `limit` records claimed at or
    /// after `from` and before `created_before`, the oldest first, and
    /// their steps, and returns what was deleted. A pass starts `from` 0
    /// and each next batch from the last one's newest `created_at`. Where
    /// the engine can skip a record another transaction holds (PostgreSQL,
    /// MySQL), it is left for the next pass, so the reaper never waits on
    /// a claim.
    fn reap<'a>(
        conn: &'a mut Self::Connection,
        settings: &'a StoreSettings,
        from: i64,
        created_before: i64,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<ReapedRecord>, StoreError>>;
}
