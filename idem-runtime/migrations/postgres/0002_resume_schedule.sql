-- Resumes of a phased request are scheduled and bounded: `attempts` counts
-- the runs of the request (the first included), `next_attempt_at` is when
-- the next may start, and a request that reached its bound ends in the
-- terminal state `exhausted`. Neither new column is indexed, so completing a
-- request stays a HOT update.
ALTER TABLE idem_keys DROP CONSTRAINT IF EXISTS idem_keys_state_check;
ALTER TABLE idem_keys ADD CONSTRAINT idem_keys_state_check
    CHECK (state IN ('in_flight', 'complete', 'exhausted'));
ALTER TABLE idem_keys ADD COLUMN IF NOT EXISTS attempts BIGINT NOT NULL DEFAULT 1;
ALTER TABLE idem_keys ADD COLUMN IF NOT EXISTS next_attempt_at BIGINT;
