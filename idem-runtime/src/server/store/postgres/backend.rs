//! PostgreSQL's [`Backend`](super::super::Backend) (and Postgres-wire
//! engines'): the shared dialect, with claims that bound their own wait
//! behind a concurrent duplicate, and a reaper that skips what another
//! transaction holds.

use sqlx::postgres::Postgres;

use super::super::shared::{BoundedClaims, Dialect, Statements};
use super::super::sql::{claim_complete, claim_phased, claim_single};
use super::{inspect, migrations, replication};

// PostgreSQL bounds the wait for an uncommitted duplicate with a
// transaction-local `lock_timeout`, inside the insert itself, so the bound
// costs neither a statement nor a round trip. The row's values are computed
// before the row is inserted and its key checked, which is where the wait
// happens; so the `state` value sets the bound on its way (the inner
// `set_config`, an argument of the outer, runs first and keeps the
// transaction's value aside in a placeholder setting). The `RETURNING`
// list is computed for an inserted row only, after any wait, and puts that
// value back: a won claim leaves the handler's statements unbounded. A
// conflict returns no row and leaves the bound on for the statements that
// examine the record; `lift_bound!` puts it back there when needed. When
// the wait expires the statement fails with 55P03 and the aborted
// transaction discards the setting anyway.
macro_rules! bounded_state {
    ($wait:literal) => {
        concat!(
            "'in_flight' || left(set_config('lock_timeout', ",
            $wait,
            " || left(set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), \
             true), 0), true), 0)"
        )
    };
}
// The value kept aside, or the current one where no claim bounded this
// transaction (a placeholder setting once used in a session reads as ''
// after its transaction).
macro_rules! lift_bound {
    () => {
        "set_config('lock_timeout', \
         COALESCE(NULLIF(current_setting('idem.outer_lock_timeout', true), ''), \
         current_setting('lock_timeout')), true)"
    };
}

const CLAIM: &str = concat!(claim_single!(bounded_state!("$6")), ", ", lift_bound!());
const CLAIM_PHASED: &str = concat!(claim_phased!(bounded_state!("$9")), ", ", lift_bound!());
const LIFT_BOUND: &str = concat!("SELECT ", lift_bound!());

// PostgreSQL's sets its bound first: a MATERIALIZED CTE is computed before
// the insert reads its row from it. Nothing after it in the transaction
// waits on a lock, so the bound is left to end with the transaction.
const CLAIM_COMPLETE: &str = concat!(
    "WITH bound AS MATERIALIZED (SELECT set_config('lock_timeout', $9, true)) ",
    claim_complete!(
        "SELECT $1, $2, $3, 'complete', 'finished', 1, $4, $4, $5, $6, $7, $8 FROM bound"
    )
);

// One reaper batch: the `$3` oldest records claimed at or after `$1` and
// before `$2`, found through the `created_at` index from where the last
// batch ended (`$1`), so a batch reads what it deletes and never the index
// entries earlier batches left dead. A record another transaction holds (a
// claim re-taking an expired key, another process's reaper) is skipped, so
// the reaper never waits on a claim; the steps of what was deleted go in
// the same statement. The steps' key columns have the database's
// collation, the records' "C": the join compares in the steps' own, so it
// looks them up by their index.
const REAP: &str = "WITH gone AS (\
     DELETE FROM idem_keys WHERE (scope, idem_key) IN \
       (SELECT scope, idem_key FROM idem_keys WHERE created_at >= $1 AND created_at < $2 \
        ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
     RETURNING scope, idem_key, state, operation, recovery_point, created_at), \
   steps AS (DELETE FROM idem_steps s USING gone \
     WHERE s.scope = gone.scope COLLATE \"default\" \
       AND s.idem_key = gone.idem_key COLLATE \"default\") \
   SELECT scope, idem_key, state, operation, recovery_point, created_at FROM gone";

impl Dialect for Postgres {
    const STATEMENTS: Statements = Statements {
        confirm_read: Some(
            "SELECT 1 FROM idem_keys WHERE scope = $1 AND idem_key = $2 FOR KEY SHARE",
        ),
        migrations: migrations::MIGRATIONS,
        schema_version: migrations::SCHEMA_VERSION,
        migration_lock: migrations::MIGRATION_LOCK,
        bounded: Some(BoundedClaims {
            claim: CLAIM,
            claim_phased: CLAIM_PHASED,
            claim_complete: CLAIM_COMPLETE,
        }),
        lift_bound: Some(LIFT_BOUND),
        reap: REAP,
        reap_steps_first: None,
        reap_batch: 1_000,
        replication: Some(replication::REPLICATION),
        has_tables: inspect::HAS_TABLES,
        snapshot: Some(inspect::SNAPSHOT),
    };

    fn rows_affected(result: &sqlx::postgres::PgQueryResult) -> u64 {
        result.rows_affected()
    }
}
