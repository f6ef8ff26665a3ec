-- Capstan schema v5 (PostgreSQL): the order runs were inserted in. Two runs
-- started in the same millisecond have equal `started_at`; "newest first"
-- breaks the tie with this (SQLite uses its rowid).
ALTER TABLE runs ADD COLUMN start_order BIGINT GENERATED ALWAYS AS IDENTITY;
