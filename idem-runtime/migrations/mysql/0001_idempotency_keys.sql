-- One row per (scope, key): the claim, the lock that fences it, the recovery
-- point of a phased operation and, once complete, the stored response. Keys
-- and scopes are visible ASCII (the server refuses anything else), compared
-- byte for byte (ascii_bin), as PostgreSQL's COLLATE "C" and SQLite do. Their
-- widths, with the step name's, fill InnoDB's 3,072-byte index limit.
CREATE TABLE IF NOT EXISTS idem_keys (
    scope            VARCHAR(600) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    idem_key         VARCHAR(2372) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    fingerprint      VARCHAR(128) NOT NULL,
    state            VARCHAR(16)  NOT NULL,
    operation        VARCHAR(255),
    request_method   VARCHAR(16),
    request_path     TEXT,
    request_body     LONGBLOB,
    recovery_point   VARCHAR(255) NOT NULL DEFAULT 'started',
    lock_generation  BIGINT       NOT NULL DEFAULT 0,
    locked_at        BIGINT,
    response_status  BIGINT,
    response_headers MEDIUMTEXT,
    response_body    LONGBLOB,
    created_at       BIGINT       NOT NULL,
    completed_at     BIGINT,
    attempts         BIGINT       NOT NULL DEFAULT 1,
    next_attempt_at  BIGINT,
    resumed_at       BIGINT,
    PRIMARY KEY (scope, idem_key),
    KEY idem_keys_created (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

-- One row per step of a phased operation: an intent written before a foreign
-- call, turned into 'done' with the step's output once its result is recorded.
CREATE TABLE IF NOT EXISTS idem_steps (
    scope       VARCHAR(600) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    idem_key    VARCHAR(2372) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    step        VARCHAR(100) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status      VARCHAR(16)  NOT NULL,
    derived_key TEXT,
    output      MEDIUMTEXT,
    updated_at  BIGINT       NOT NULL,
    PRIMARY KEY (scope, idem_key, step)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4
