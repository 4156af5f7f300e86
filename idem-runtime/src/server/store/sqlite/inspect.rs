//! What `idem keys` reads on SQLite that the shared dialect does not say.

/// Counts the idem tables present.
pub(super) const HAS_TABLES: &str = "SELECT COUNT(*) FROM sqlite_master \
     WHERE type = 'table' AND name IN ('idem_keys', 'idem_schema_migrations')";
