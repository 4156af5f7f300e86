//! SQLite's [`Backend`](super::super::Backend): the shared dialect, with
//! no bound on a claim's wait (its one writer connection is held by
//! whoever claimed) and a reaper that deletes a batch's steps first.

use sqlx::Sqlite;

use super::super::shared::{Dialect, Statements};
use super::{inspect, migrations};

// One reaper batch: the `$3` oldest records claimed at or after `$1` and
// before `$2`, found through the `created_at` index from where the last
// batch ended (`$1`), so a batch reads what it deletes and never the index
// entries earlier batches left dead. One writer: the two statements see
// the same rows, the steps first, then the records.
const REAP_STEPS: &str = "DELETE FROM idem_steps WHERE (scope, idem_key) IN \
     (SELECT scope, idem_key FROM idem_keys WHERE created_at >= $1 AND created_at < $2 \
      ORDER BY created_at LIMIT $3)";
const REAP: &str = "DELETE FROM idem_keys WHERE (scope, idem_key) IN \
     (SELECT scope, idem_key FROM idem_keys WHERE created_at >= $1 AND created_at < $2 \
      ORDER BY created_at LIMIT $3) \
     RETURNING scope, idem_key, state, operation, recovery_point, created_at";

impl Dialect for Sqlite {
    const STATEMENTS: Statements = Statements {
        confirm_read: None,
        migrations: migrations::MIGRATIONS,
        schema_version: migrations::SCHEMA_VERSION,
        migration_lock: migrations::MIGRATION_LOCK,
        bounded: None,
        lift_bound: None,
        reap: REAP,
        reap_steps_first: Some(REAP_STEPS),
        // A batch holds SQLite's one writer: small ones keep claims' waits
        // short.
        reap_batch: 200,
        replication: None,
        has_tables: inspect::HAS_TABLES,
        snapshot: None,
    };

    fn rows_affected(result: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        result.rows_affected()
    }
}
