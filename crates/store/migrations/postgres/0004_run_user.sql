-- Capstan schema v4 (PostgreSQL): the user a run was started for
-- (`[[server.user]]`), whose quota counts it; NULL for runs of the server's
-- own token and of the CLI. Mirrors SQLite schema v7.
ALTER TABLE runs ADD COLUMN user_name TEXT;
CREATE INDEX runs_by_user ON runs(user_name, started_at) WHERE user_name IS NOT NULL;
