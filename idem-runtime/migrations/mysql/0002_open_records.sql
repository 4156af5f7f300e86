-- Every record names its operation, and a phased record lets its request go
-- as it completes: a record with a request is one the completer, the gauge
-- and `idem keys` watch (phased, not yet complete). They find those records
-- through this index, as the range of non-NULL methods: a single-phase
-- record's entry sits under NULL from its claim on, so its completion
-- leaves the index alone.
--
-- Records completed before this version let their request go here, so the
-- index's non-NULL range starts with the open records only.
UPDATE idem_keys SET request_method = NULL, request_path = NULL, request_body = NULL
    WHERE request_method IS NOT NULL AND state = 'complete';
CREATE INDEX idem_keys_open ON idem_keys (request_method, created_at);
