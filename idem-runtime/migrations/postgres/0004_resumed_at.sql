-- When an operator last made an exhausted record due again (`idem keys
-- resume`): its resume schedule, attempts and age, counts from then. A
-- nullable column without a default: adding it rewrites nothing.
ALTER TABLE idem_keys ADD COLUMN IF NOT EXISTS resumed_at BIGINT;
