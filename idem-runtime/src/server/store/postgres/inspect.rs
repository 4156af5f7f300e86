//! What `idem keys` reads on PostgreSQL that the shared dialect does not say.

/// Counts the idem tables present in the schemas the connection searches.
pub(super) const HAS_TABLES: &str = "SELECT COUNT(*) FROM pg_catalog.pg_tables \
     WHERE schemaname = ANY (current_schemas(false)) \
       AND tablename IN ('idem_keys', 'idem_schema_migrations')";

/// A record and its steps read from one snapshot.
pub(super) const SNAPSHOT: &str = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ";
