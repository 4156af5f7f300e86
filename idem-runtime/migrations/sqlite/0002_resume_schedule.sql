-- Resumes of a phased request are scheduled and bounded: `attempts` counts
-- the runs of the request (the first included), `next_attempt_at` is when
-- the next may start, and a request that reached its bound ends in the
-- terminal state `exhausted`. SQLite cannot alter a CHECK constraint, so the
-- table is rebuilt with the same rows.
CREATE TABLE idem_keys_v2 (
    scope            TEXT    NOT NULL,
    idem_key         TEXT    NOT NULL,
    fingerprint      TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('in_flight', 'complete', 'exhausted')),
    operation        TEXT,
    request_method   TEXT,
    request_path     TEXT,
    request_body     BLOB,
    recovery_point   TEXT    NOT NULL DEFAULT 'started',
    lock_generation  INTEGER NOT NULL DEFAULT 0,
    locked_at        INTEGER,
    response_status  INTEGER,
    response_headers TEXT,
    response_body    BLOB,
    created_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 1,
    next_attempt_at  INTEGER,
    PRIMARY KEY (scope, idem_key)
) WITHOUT ROWID;
INSERT INTO idem_keys_v2 (scope, idem_key, fingerprint, state, operation, request_method,
    request_path, request_body, recovery_point, lock_generation, locked_at, response_status,
    response_headers, response_body, created_at, completed_at)
SELECT scope, idem_key, fingerprint, state, operation, request_method, request_path,
    request_body, recovery_point, lock_generation, locked_at, response_status,
    response_headers, response_body, created_at, completed_at
FROM idem_keys;
DROP TABLE idem_keys;
ALTER TABLE idem_keys_v2 RENAME TO idem_keys;
CREATE INDEX IF NOT EXISTS idem_keys_created ON idem_keys (created_at);
CREATE INDEX IF NOT EXISTS idem_keys_phased ON idem_keys (created_at) WHERE operation IS NOT NULL;
