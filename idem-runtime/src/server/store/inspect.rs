//! Reading the key store for an operator (`idem keys`), and the one change
//! it makes when asked: an exhausted record made due again.

use super::backend::Backend;
use super::error::StoreError;
use super::handle::Store;
use super::records::{BoxFuture, KeyRecord, KeyState, StepRecord, StepStatus};

/// One record, whole: the key row and its phase steps.
#[derive(Debug, Clone)]
pub struct Inspected {
    /// The key row, stored request and response included.
    pub record: KeyRecord,
    /// The steps of a phased operation, by when each was last written.
    pub steps: Vec<StepRecord>,
}

/// Which records [`Inspect::list`] returns, oldest first.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only records in this state.
    pub state: Option<KeyState>,
    /// Only records of this operation (records written before schema
    /// version 5 name phased operations only).
    pub operation: Option<String>,
    /// Only records claimed before this time (ms since epoch).
    pub claimed_before: Option<i64>,
    /// At most this many.
    pub limit: i64,
}

/// What the store holds, by state and operation.
#[derive(Debug, Clone, Default)]
pub struct KeyStats {
    /// `(state, operation, count)`; the operation is `None` for
    /// single-phase records written before records named their operation.
    pub by_state: Vec<(KeyState, Option<String>, i64)>,
    /// The in-flight record claimed longest ago.
    pub oldest_in_flight: Option<KeyRecord>,
    /// `(state, count)` of the records the next reaper pass deletes.
    pub reapable: Vec<(KeyState, i64)>,
}

/// The schema a database holds, as [`Inspect::schema`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// No idem tables: not a key store, or one never migrated.
    Missing,
    /// The newest migration applied, and the newest this build knows.
    Version {
        /// Applied.
        found: i64,
        /// Known to this build.
        known: i64,
    },
}

/// The operator's queries, on each engine idem supports.
pub trait Inspect: Backend {
    /// Which schema version the database holds.
    fn schema(store: &Store<Self>) -> BoxFuture<'_, Result<Schema, StoreError>>;

    /// The record of `key` under `scope`, with its steps.
    fn inspect<'a>(
        store: &'a Store<Self>,
        scope: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Inspected>, StoreError>>;

    /// Every scope that holds `key` (at most `limit`).
    fn scopes_holding<'a>(
        store: &'a Store<Self>,
        key: &'a str,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>>;

    /// The records `filter` selects, oldest first, without their bodies.
    fn list<'a>(
        store: &'a Store<Self>,
        filter: &'a ListFilter,
    ) -> BoxFuture<'a, Result<Vec<KeyRecord>, StoreError>>;

    /// Counts by state and operation, the oldest in-flight record, and what
    /// a reaper pass with cutoff `reap_before` (ms since epoch) deletes.
    fn stats(store: &Store<Self>, reap_before: i64) -> BoxFuture<'_, Result<KeyStats, StoreError>>;

    /// Makes the exhausted phased record of `key` due again at `now`: back
    /// in flight, unlocked, its attempts and age counted afresh from `now`.
    /// Its finished steps stay finished. `false` when no exhausted phased
    /// record of that key exists.
    fn resume<'a>(
        store: &'a Store<Self>,
        scope: &'a str,
        key: &'a str,
        now: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

/// The list statement for `filter`, with only the conditions it sets, so
/// each combination is planned for what it asks: records oldest first
/// through the claim-time index, and a state other than complete through
/// the open records' index. `mark(n)` is the engine's `n`th placeholder;
/// the values bind in the order state, operation, claimed-before, each
/// only when set ([`bind_list`]). `open_index_hint` follows the table's
/// name when the open records' index is read (MariaDB's `FORCE INDEX`: with
/// a small limit it would rather walk the claim-time index for the order,
/// reading every record).
pub(super) fn list_statement(
    columns: &str,
    filter: &ListFilter,
    mark: fn(usize) -> String,
    open_index_hint: &str,
) -> String {
    let mut conditions = Vec::new();
    let mut n = 0;
    let mut next = || {
        n += 1;
        mark(n)
    };
    let mut table = "idem_keys".to_owned();
    if let Some(state) = filter.state {
        if state != KeyState::Complete {
            conditions.push("request_method IS NOT NULL".to_owned());
            table.push_str(open_index_hint);
        }
        conditions.push(format!("state = {}", next()));
    }
    if filter.operation.is_some() {
        conditions.push(format!("operation = {}", next()));
    }
    if filter.claimed_before.is_some() {
        conditions.push(format!("created_at < {}", next()));
    }
    let conditions = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    // The order names the table's columns, not the select list's (MySQL's
    // converts the key columns, and would sort by the conversion), so the
    // claim-time index serves it; the limit is written in, not bound, for
    // the same plan on MariaDB.
    format!(
        "SELECT {columns} FROM {table}{conditions} \
         ORDER BY idem_keys.created_at, idem_keys.scope, idem_keys.idem_key LIMIT {}",
        filter.limit.max(0)
    )
}

/// Binds `filter`'s values to the statement [`list_statement`] wrote.
pub(super) fn bind_list<'q, DB>(
    mut query: sqlx::query::Query<'q, DB, DB::Arguments<'q>>,
    filter: &'q ListFilter,
) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>>
where
    DB: sqlx::Database,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    if let Some(state) = filter.state {
        query = query.bind(state.as_str());
    }
    if let Some(operation) = &filter.operation {
        query = query.bind(operation.as_str());
    }
    if let Some(before) = filter.claimed_before {
        query = query.bind(before);
    }
    query
}

pub(super) const BY_STATE: &str = "SELECT state, operation, COUNT(*) FROM idem_keys \
     GROUP BY state, operation ORDER BY state, operation";

/// Puts `steps` in the order they were last written (`order`: each step's
/// `updated_at`). A step's intent is written after the steps before it are
/// done: within one millisecond, done steps come first.
pub(super) fn order_steps(steps: &mut [StepRecord], order: &[(String, i64)]) {
    let at = |step: &str| order.iter().find(|(s, _)| s == step).map(|(_, at)| *at);
    steps.sort_by_key(|s| (at(&s.step), s.status == StepStatus::Intent, s.step.clone()));
}

/// The filter of the in-flight record claimed longest ago.
pub(super) const OLDEST_IN_FLIGHT: ListFilter = ListFilter {
    state: Some(KeyState::InFlight),
    operation: None,
    claimed_before: None,
    limit: 1,
};

/// [`KeyStats`] from what [`Inspect::stats`] read: `(state, operation,
/// count)` rows, the oldest in-flight record, `(state, count)` rows of what
/// the reaper deletes.
pub(super) fn key_stats(
    by_state: Vec<(String, Option<String>, i64)>,
    oldest_in_flight: Option<KeyRecord>,
    reapable: Vec<(String, i64)>,
) -> Result<KeyStats, StoreError> {
    Ok(KeyStats {
        by_state: by_state
            .into_iter()
            .map(|(state, op, n)| Ok((KeyState::parse(&state)?, op, n)))
            .collect::<Result<_, StoreError>>()?,
        oldest_in_flight,
        reapable: reapable
            .into_iter()
            .map(|(state, n)| Ok((KeyState::parse(&state)?, n)))
            .collect::<Result<_, StoreError>>()?,
    })
}
