-- Every record names its operation, and a phased record lets its request go
-- as it completes: a record with a request is one the completer, the gauge
-- and `idem keys` watch (phased, not yet complete). They find those records
-- through this index, never a scan of the table. Its columns are ones a
-- single-phase completion leaves as they were (the request is NULL before
-- and after), so that update stays HOT.
--
-- Records completed before this version let their request go here, so the
-- index starts with the open records only.
UPDATE idem_keys SET request_method = NULL, request_path = NULL, request_body = NULL
    WHERE request_method IS NOT NULL AND state = 'complete';
DROP INDEX IF EXISTS idem_keys_phased;
CREATE INDEX IF NOT EXISTS idem_keys_open ON idem_keys (created_at)
    WHERE request_method IS NOT NULL;

-- The reaper deletes in batches, the oldest first: a B-tree on the claim
-- time hands each batch its rows in order, where the block-range index it
-- replaces made every batch sort (and step over) all that had expired. The
-- completion does not change `created_at`, so it stays HOT.
DROP INDEX IF EXISTS idem_keys_created;
CREATE INDEX IF NOT EXISTS idem_keys_created ON idem_keys (created_at);
