-- Capstan schema v7 (PostgreSQL): the grant an approved command ran under
-- (what the sandbox let it do, and who said so), as JSON text; NULL when
-- nothing ran and in older rows. Mirrors SQLite schema v9.
ALTER TABLE approvals ADD COLUMN grant_json TEXT;
