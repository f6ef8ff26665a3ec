-- Capstan's schema on PostgreSQL, version 1: the same tables, columns,
-- closed sets and invariants as SQLite schema v4 (src/schema.rs), plus the
-- event notification trigger. Applied once, in one transaction, by
-- src/pg/mod.rs; never edit it after release: add 0002_*.sql instead.
--
-- Text columns that are sorted on use COLLATE "C" so order is by bytes,
-- as on SQLite, whatever the database's locale. Timestamps are the same
-- RFC 3339 strings as on SQLite (fixed width, they sort in time order),
-- except lease expiries, which are compared with the server's clock.

CREATE TABLE workspaces (
    id             TEXT COLLATE "C" PRIMARY KEY,
    root_path      TEXT NOT NULL UNIQUE,
    name           TEXT COLLATE "C" NOT NULL,
    policy_profile TEXT NOT NULL DEFAULT 'cautious'
                   CHECK (policy_profile IN ('cautious', 'trusted', 'locked')),
    profile_set    BOOLEAN NOT NULL DEFAULT false,
    -- json, not jsonb: stored verbatim, validated on the way in.
    policy_json    JSON,
    created_at     TEXT COLLATE "C" NOT NULL
);

CREATE TABLE sessions (
    id            TEXT COLLATE "C" PRIMARY KEY,
    title         TEXT NOT NULL DEFAULT '',
    workspace_id  TEXT REFERENCES workspaces(id) ON DELETE SET NULL,
    summary       TEXT NOT NULL DEFAULT '',
    input_tokens  BIGINT NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens BIGINT NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cost_usd      DOUBLE PRECISION NOT NULL DEFAULT 0,
    created_at    TEXT COLLATE "C" NOT NULL,
    updated_at    TEXT COLLATE "C" NOT NULL,
    deleted_at    TEXT
);
CREATE INDEX sessions_by_updated ON sessions(updated_at DESC, id);
CREATE INDEX sessions_by_workspace ON sessions(workspace_id);

CREATE TABLE runs (
    id            TEXT COLLATE "C" PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    status        TEXT NOT NULL DEFAULT 'running'
                  CHECK (status IN ('running', 'completed', 'failed', 'cancelled', 'interrupted')),
    reason        TEXT,
    model         TEXT NOT NULL,
    -- The store that started it (a session advisory lock, see src/pg/mod.rs).
    owner         TEXT,
    input_tokens  BIGINT NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens BIGINT NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cost_usd      DOUBLE PRECISION NOT NULL DEFAULT 0,
    started_at    TEXT COLLATE "C" NOT NULL,
    ended_at      TEXT,
    -- The replica holding the run, until when (server clock); both or neither.
    lease_owner      TEXT,
    lease_expires_at TIMESTAMPTZ,
    CHECK ((status = 'running') = (ended_at IS NULL)),
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);
CREATE INDEX runs_by_session ON runs(session_id, started_at);
CREATE INDEX runs_by_started ON runs(started_at);
CREATE INDEX runs_running ON runs(owner) WHERE status = 'running';
CREATE INDEX runs_lease ON runs(lease_expires_at) WHERE status = 'running';

CREATE TABLE turns (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL CHECK (seq > 0),
    run_id     TEXT REFERENCES runs(id) ON DELETE SET NULL,
    role       TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE INDEX turns_by_run ON turns(run_id);

-- The replay log; (run_id, seq) is the key, so a seq is never stored twice.
CREATE TABLE events (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq    BIGINT NOT NULL CHECK (seq >= 0),
    ts     TEXT NOT NULL,
    type   TEXT NOT NULL,
    json   JSON NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Wakes every LISTEN capstan_events connection (Store::wait_events) when a
-- transaction appended events. The payload is the run id; PostgreSQL folds
-- identical notifications of one transaction into one, so a batch costs one.
CREATE FUNCTION capstan_notify_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('capstan_events', NEW.run_id);
    RETURN NULL;
END $$;
CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION capstan_notify_event();

CREATE TABLE approvals (
    id         TEXT PRIMARY KEY,
    -- Insertion order, to break ties between decisions of one millisecond.
    ord        BIGINT GENERATED ALWAYS AS IDENTITY,
    run_id     TEXT NOT NULL REFERENCES runs(id),
    task_id    TEXT NOT NULL,
    action     TEXT NOT NULL,
    command    TEXT NOT NULL DEFAULT '',
    cwd        TEXT NOT NULL DEFAULT '',
    risk       TEXT NOT NULL,
    reasons    JSON NOT NULL DEFAULT '[]' CHECK (json_typeof(reasons) = 'array'),
    decision   TEXT NOT NULL CHECK (decision IN
                   ('approved', 'approved-for-session', 'denied', 'aborted', 'expired')),
    decided_by TEXT NOT NULL CHECK (decided_by IN ('user', 'policy', 'flag')),
    created_at TEXT COLLATE "C" NOT NULL,
    decided_at TEXT NOT NULL
);
CREATE INDEX approvals_by_run ON approvals(run_id, created_at);
