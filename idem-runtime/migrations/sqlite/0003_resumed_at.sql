-- When an operator last made an exhausted record due again (`idem keys
-- resume`): its resume schedule, attempts and age, counts from then.
ALTER TABLE idem_keys ADD COLUMN resumed_at INTEGER;
