//! PostgreSQL (and Postgres-wire engines): its migrations, the claim's
//! bound on the wait behind a concurrent duplicate, and its [`Backend`]
//! implementation from the shared dialect.

use std::time::Duration;

use sqlx::Pool;
use sqlx::postgres::Postgres;

use crate::server::error::StoreError;
use crate::server::response::StoredResponse;

use super::backend::Backend;
use super::records::*;
use super::sql::*;

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

const CLAIM_POSTGRES: &str = concat!(claim_single!(bounded_state!("$6")), ", ", lift_bound!());
const CLAIM_PHASED_POSTGRES: &str =
    concat!(claim_phased!(bounded_state!("$9")), ", ", lift_bound!());
const LIFT_BOUND_POSTGRES: &str = concat!("SELECT ", lift_bound!());

// PostgreSQL's sets its bound first: a MATERIALIZED CTE is computed before
// the insert reads its row from it. Nothing after it in the transaction
// waits on a lock, so the bound is left to end with the transaction.
const CLAIM_COMPLETE_POSTGRES: &str = concat!(
    "WITH bound AS MATERIALIZED (SELECT set_config('lock_timeout', $9, true)) ",
    claim_complete!(
        "SELECT $1, $2, $3, 'complete', 'finished', 1, $4, $4, $5, $6, $7, $8 FROM bound"
    )
);

const POSTGRES_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "idempotency keys and steps",
        sql: include_str!("../../../migrations/postgres/0001_idempotency_keys.sql"),
    },
    Migration {
        version: 2,
        description: "resume schedule and the exhausted state",
        sql: include_str!("../../../migrations/postgres/0002_resume_schedule.sql"),
    },
    Migration {
        version: 3,
        description: "the state column without its CHECK constraint",
        sql: include_str!("../../../migrations/postgres/0003_state_unchecked.sql"),
    },
    Migration {
        version: 4,
        description: "when an operator last resumed a record",
        sql: include_str!("../../../migrations/postgres/0004_resumed_at.sql"),
    },
    Migration {
        version: 5,
        description: "operation names on every record, and the open records' index",
        sql: include_str!("../../../migrations/postgres/0005_open_records.sql"),
    },
];

/// The newest schema version this build writes on PostgreSQL.
pub(super) const POSTGRES_SCHEMA_VERSION: i64 = 5;

// Concurrent migration runs are serialised by a transaction-scoped
// advisory lock: nothing outlives the transaction, behind a pooler too.
const POSTGRES_MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(7263541209)";

impl_backend!(
    Postgres,
    POSTGRES_MIGRATIONS,
    POSTGRES_MIGRATION_LOCK,
    (
        (CLAIM, CLAIM_PHASED),
        Some((CLAIM_POSTGRES, CLAIM_PHASED_POSTGRES))
    ),
    (CLAIM_COMPLETE, Some(CLAIM_COMPLETE_POSTGRES)),
    Some(LIFT_BOUND_POSTGRES),
    super::named_statements(),
    Some(super::replication::POSTGRES_REPLICATION),
    (None, REAP_POSTGRES),
    1_000
);
