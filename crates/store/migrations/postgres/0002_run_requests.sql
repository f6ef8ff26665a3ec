-- Capstan schema v2 (PostgreSQL): requests for the replica that owns a run.
-- A cancel or an approval decision posted to another replica waits here until
-- the owner takes it (DELETE ... RETURNING). Mirrors SQLite schema v5.
CREATE TABLE run_requests (
    id         BIGSERIAL PRIMARY KEY,
    -- A run id (cancel) or an approval id (decide).
    target     TEXT COLLATE "C" NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('cancel', 'decide')),
    decision   TEXT,
    decided_by TEXT,
    created_at TEXT NOT NULL,
    CHECK ((kind = 'decide') = (decision IS NOT NULL))
);
CREATE INDEX run_requests_by_target ON run_requests(target, id);
