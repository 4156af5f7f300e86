-- One row per (scope, key): the claim, the lock that fences it, the recovery
-- point of a phased operation and, once complete, the stored response.
CREATE TABLE IF NOT EXISTS idem_keys (
    scope            TEXT    NOT NULL,
    idem_key         TEXT    NOT NULL,
    fingerprint      TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('in_flight', 'complete')),
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
    PRIMARY KEY (scope, idem_key)
) WITHOUT ROWID;
-- No index names a column the completion UPDATE changes (state, locked_at,
-- the response): PostgreSQL can then update the row in place (HOT) and
-- SQLite touches no index, which keeps a keyed request close to the cost of
-- the write it guards. The reaper scans by age; the completer scans phased
-- requests only, the one kind that can be abandoned in flight.
CREATE INDEX IF NOT EXISTS idem_keys_created ON idem_keys (created_at);
CREATE INDEX IF NOT EXISTS idem_keys_phased ON idem_keys (created_at) WHERE operation IS NOT NULL;

-- One row per step of a phased operation: an intent written before a foreign
-- call, turned into 'done' with the step's output once its result is recorded.
CREATE TABLE IF NOT EXISTS idem_steps (
    scope       TEXT    NOT NULL,
    idem_key    TEXT    NOT NULL,
    step        TEXT    NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('intent', 'done')),
    derived_key TEXT,
    output      TEXT,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, idem_key, step)
);
