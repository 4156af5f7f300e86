-- InnoDB keeps a table's rows in its primary key's order. Keyed by
-- (scope, key), one day's records were spread over every page of the table,
-- so the reaper, deleting the oldest day, read a page for nearly every
-- record once the table outgrew the buffer pool. Keyed by claim time first,
-- a day's records are neighbours: the reaper deletes them page by page, and
-- a claim writes at the table's end, where the pages are in memory.
--
-- The unique key keeps one record per (scope, key), as the primary key did;
-- the claim-time index is the new primary key's first column.
--
-- The table is rebuilt in place while claims and completions go on
-- (LOCK = NONE); a server that cannot do that refuses the migration rather
-- than blocking writes for the rebuild.
ALTER TABLE idem_keys
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (created_at, scope, idem_key),
    ADD UNIQUE KEY idem_keys_key (scope, idem_key),
    DROP KEY idem_keys_created,
    ALGORITHM = INPLACE, LOCK = NONE;
