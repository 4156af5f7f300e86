//! The key store: embedded migrations and every statement the protocol
//! runs, on SQLite, PostgreSQL and the MySQL family.
//!
//! Each engine has the same files, in its own folder: `backend.rs` (its
//! [`Backend`]), `migrations.rs` and `inspect.rs` (what `idem keys` reads).
//! SQLite and PostgreSQL share one dialect (`$N` placeholders,
//! `INSERT … ON CONFLICT`, `RETURNING`): its statements are in `sql.rs`,
//! and `shared.rs` runs them on either engine, given the few statements
//! each writes its own way. Any Postgres-wire engine with those features
//! (CockroachDB, YugabyteDB) runs PostgreSQL's unchanged. The MySQL family
//! speaks another dialect and has its backend written out.
//!
//! What one store knows of its server (behind a pooler or not, whether it
//! takes `SET STATEMENT`, when a statement last met a read-only host) is
//! in its [`StoreSettings`], which the [`Store`] hands its backend with
//! every statement.

mod backend;
mod error;
mod handle;
mod inspect;
mod mysql;
mod postgres;
mod records;
mod settings;
mod shared;
mod sql;
mod sqlite;

pub use backend::Backend;
pub use error::StoreError;
pub use handle::Store;
pub use inspect::{Inspect, Inspected, KeyStats, ListFilter, Schema};
pub use postgres::replication::{Replication, Standby};
pub use records::*;
pub use settings::StoreSettings;
