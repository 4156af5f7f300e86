//! SQLite's schema: its embedded migrations.

use super::super::sql::Migration;

pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "idempotency keys and steps",
        sql: include_str!("../../../../migrations/sqlite/0001_idempotency_keys.sql"),
    },
    Migration {
        version: 2,
        description: "resume schedule and the exhausted state",
        sql: include_str!("../../../../migrations/sqlite/0002_resume_schedule.sql"),
    },
    Migration {
        version: 3,
        description: "when an operator last resumed a record",
        sql: include_str!("../../../../migrations/sqlite/0003_resumed_at.sql"),
    },
    Migration {
        version: 4,
        description: "operation names on every record, and the open records' index",
        sql: include_str!("../../../../migrations/sqlite/0004_open_records.sql"),
    },
];

/// The newest schema version this build writes on SQLite.
pub(super) const SCHEMA_VERSION: i64 = 4;

// SQLite serialises migration runs through its single writer: the first
// statement that writes waits for any other, so the lock is any statement.
pub(super) const MIGRATION_LOCK: &str = "SELECT 1";
