//! PostgreSQL's schema: its embedded migrations.

use super::super::sql::Migration;

pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "idempotency keys and steps",
        sql: include_str!("../../../../migrations/postgres/0001_idempotency_keys.sql"),
    },
    Migration {
        version: 2,
        description: "resume schedule and the exhausted state",
        sql: include_str!("../../../../migrations/postgres/0002_resume_schedule.sql"),
    },
    Migration {
        version: 3,
        description: "the state column without its CHECK constraint",
        sql: include_str!("../../../../migrations/postgres/0003_state_unchecked.sql"),
    },
    Migration {
        version: 4,
        description: "when an operator last resumed a record",
        sql: include_str!("../../../../migrations/postgres/0004_resumed_at.sql"),
    },
    Migration {
        version: 5,
        description: "operation names on every record, and the open records' index",
        sql: include_str!("../../../../migrations/postgres/0005_open_records.sql"),
    },
];

/// The newest schema version this build writes on PostgreSQL.
pub(super) const SCHEMA_VERSION: i64 = 5;

// Concurrent migration runs are serialised by a transaction-scoped
// advisory lock: nothing outlives the transaction, behind a pooler too.
pub(super) const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(7263541209)";
