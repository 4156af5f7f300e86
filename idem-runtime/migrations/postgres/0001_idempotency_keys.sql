-- One row per (scope, key): the claim, the lock that fences it, the recovery
-- point of a phased operation and, once complete, the stored response.
CREATE TABLE IF NOT EXISTS idem_keys (
    scope            TEXT    COLLATE "C" NOT NULL,
    idem_key         TEXT    COLLATE "C" NOT NULL,
    fingerprint      TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('in_flight', 'complete')),
    operation        TEXT,
    request_method   TEXT,
    request_path     TEXT,
    request_body     BYTEA,
    recovery_point   TEXT    NOT NULL DEFAULT 'started',
    lock_generation  BIGINT  NOT NULL DEFAULT 0,
    locked_at        BIGINT,
    response_status  BIGINT,
    response_headers TEXT,
    response_body    BYTEA,
    created_at       BIGINT  NOT NULL,
    completed_at     BIGINT,
    PRIMARY KEY (scope, idem_key)
) WITH (fillfactor = 80);
-- No index names a column the completion UPDATE changes (state, locked_at,
-- the response): PostgreSQL can then update the row in place (HOT) and
-- SQLite touches no index, which keeps a keyed request close to the cost of
-- the write it guards. The reaper scans by age; the completer scans phased
-- requests only, the one kind that can be abandoned in flight.
CREATE INDEX IF NOT EXISTS idem_keys_created ON idem_keys USING brin (created_at);
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
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (scope, idem_key, step)
);
