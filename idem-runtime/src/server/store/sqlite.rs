//! SQLite, the embedded default: its migrations, and its [`Backend`]
//! implementation from the shared dialect.

use std::time::Duration;

use sqlx::{Pool, Sqlite};

use crate::server::error::StoreError;
use crate::server::response::StoredResponse;

use super::backend::Backend;
use super::records::*;
use super::sql::*;

const SQLITE_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "idempotency keys and steps",
        sql: include_str!("../../../migrations/sqlite/0001_idempotency_keys.sql"),
    },
    Migration {
        version: 2,
        description: "resume schedule and the exhausted state",
        sql: include_str!("../../../migrations/sqlite/0002_resume_schedule.sql"),
    },
    Migration {
        version: 3,
        description: "when an operator last resumed a record",
        sql: include_str!("../../../migrations/sqlite/0003_resumed_at.sql"),
    },
    Migration {
        version: 4,
        description: "operation names on every record, and the open records' index",
        sql: include_str!("../../../migrations/sqlite/0004_open_records.sql"),
    },
];

/// The newest schema version this build writes on SQLite.
pub(super) const SQLITE_SCHEMA_VERSION: i64 = 4;

// SQLite serialises migration runs through its single writer: the first
// statement that writes waits for any other, so the lock is any statement.
const SQLITE_MIGRATION_LOCK: &str = "SELECT 1";

impl_backend!(
    Sqlite,
    SQLITE_MIGRATIONS,
    SQLITE_MIGRATION_LOCK,
    ((CLAIM, CLAIM_PHASED), None::<(&'static str, &'static str)>),
    (CLAIM_COMPLETE, None::<&'static str>),
    None::<&'static str>,
    true,
    None::<&'static str>,
    (Some(REAP_STEPS_SQLITE), REAP_SQLITE),
    // A batch holds SQLite's one writer: small ones keep claims' waits short.
    200
);
