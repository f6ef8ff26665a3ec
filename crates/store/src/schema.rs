//! The schema and its forward-only migrations.
//!
//! `PRAGMA user_version` holds the schema version; `PRAGMA application_id`
//! marks the file as Capstan's. Migration `n` (1-based) takes a database from
//! version `n - 1` to `n`, in one `IMMEDIATE` transaction together with the
//! `user_version` bump, so a failed or interrupted migration leaves the file
//! at the previous version. Never edit a released migration: append a new one.
//!
//! A file with a higher version than [`SCHEMA_VERSION`] was written by a newer
//! Capstan; it is refused before anything is written to it.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Result, StoreError, classify};

/// `"Cpst"`: tells a Capstan database from any other SQLite file.
pub const APPLICATION_ID: i32 = 0x4370_7374;

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// All tables are `STRICT` (a column holds only its declared type) and every
/// closed set of words has a `CHECK`, so the invariants hold whoever writes.
const MIGRATIONS: &[&str] = &[
    // v1
    r#"
CREATE TABLE workspaces (
    id             TEXT PRIMARY KEY,
    root_path      TEXT NOT NULL UNIQUE,
    name           TEXT NOT NULL,
    policy_profile TEXT NOT NULL DEFAULT 'cautious'
                   CHECK (policy_profile IN ('cautious', 'trusted', 'locked')),
    policy_json    TEXT CHECK (policy_json IS NULL OR json_valid(policy_json)),
    created_at     TEXT NOT NULL
) STRICT;

CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    title         TEXT NOT NULL DEFAULT '',
    -- The last workspace used; removing the workspace forgets it.
    workspace_id  TEXT REFERENCES workspaces(id) ON DELETE SET NULL,
    summary       TEXT NOT NULL DEFAULT '',
    input_tokens  INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cost_usd      REAL NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
) STRICT;
CREATE INDEX sessions_by_updated ON sessions(updated_at DESC, id);
-- Without it, deleting a workspace scans every session (foreign key action).
CREATE INDEX sessions_by_workspace ON sessions(workspace_id);

CREATE TABLE runs (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    status        TEXT NOT NULL DEFAULT 'running'
                  CHECK (status IN ('running', 'completed', 'failed', 'cancelled', 'interrupted')),
    reason        TEXT,
    model         TEXT NOT NULL,
    -- The owner lock of the process running it (see owner.rs); NULL if none.
    owner         TEXT,
    input_tokens  INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cost_usd      REAL NOT NULL DEFAULT 0,
    started_at    TEXT NOT NULL,
    ended_at      TEXT,
    CHECK ((status = 'running') = (ended_at IS NULL))
) STRICT;
CREATE INDEX runs_by_session ON runs(session_id, started_at);
CREATE INDEX runs_by_started ON runs(started_at);
-- Start-up looks for runs left running: keep that lookup off a full scan.
CREATE INDEX runs_running ON runs(owner) WHERE status = 'running';

CREATE TABLE turns (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL CHECK (seq > 0),
    run_id     TEXT REFERENCES runs(id) ON DELETE SET NULL,
    role       TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (session_id, seq)
) STRICT;
CREATE INDEX turns_by_run ON turns(run_id);

-- The replay log. Keyed by (run_id, seq): one b-tree, rows of a run are
-- adjacent, and a duplicate seq is refused by the key itself.
CREATE TABLE events (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq    INTEGER NOT NULL CHECK (seq >= 0),
    ts     TEXT NOT NULL,
    type   TEXT NOT NULL,
    json   TEXT NOT NULL CHECK (json_valid(json)),
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;

-- The audit trail. No ON DELETE action: a run with approvals cannot be
-- deleted by accident (the delete fails instead of erasing the audit).
CREATE TABLE approvals (
    id         TEXT PRIMARY KEY,
    run_id     TEXT NOT NULL REFERENCES runs(id),
    task_id    TEXT NOT NULL,
    action     TEXT NOT NULL,
    command    TEXT NOT NULL DEFAULT '',
    cwd        TEXT NOT NULL DEFAULT '',
    risk       TEXT NOT NULL,
    reasons    TEXT NOT NULL DEFAULT '[]'
               CHECK (json_valid(reasons) AND json_type(reasons) = 'array'),
    decision   TEXT NOT NULL CHECK (decision IN
                   ('approved', 'approved-for-session', 'denied', 'aborted', 'expired')),
    decided_by TEXT NOT NULL CHECK (decided_by IN ('user', 'policy', 'flag')),
    created_at TEXT NOT NULL,
    decided_at TEXT NOT NULL
) STRICT;
CREATE INDEX approvals_by_run ON approvals(run_id, created_at);
"#,
    // v2: a workspace follows the configuration's `[policy] profile` unless its
    // own profile was chosen (`capstan workspace add --profile`). Version 1
    // registered every folder as 'cautious' whether chosen or not; any other
    // value was chosen.
    r#"
ALTER TABLE workspaces ADD COLUMN profile_set INTEGER NOT NULL DEFAULT 0
    CHECK (profile_set IN (0, 1));
UPDATE workspaces SET profile_set = 1 WHERE policy_profile <> 'cautious';
"#,
    // v3: deleting a session (see `Store::delete_session`). A deleted session
    // whose runs hold approvals stays as a tombstone (no title, summary or
    // turns) so the audit trail keeps its runs; reads skip tombstones.
    r#"
ALTER TABLE sessions ADD COLUMN deleted_at TEXT;
"#,
    // v4: run leases (see lease.rs). A run claimed by a replica records who
    // holds it and until when; both NULL when nobody does.
    r#"
ALTER TABLE runs ADD COLUMN lease_owner TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_at TEXT
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL));
CREATE INDEX runs_lease ON runs(lease_expires_at) WHERE status = 'running';
"#,
    // v5: requests for the replica that owns a run (see requests.rs): a
    // cancel or an approval decision posted to another replica waits here
    // until the owner takes it.
    r#"
CREATE TABLE run_requests (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    -- A run id (cancel) or an approval id (decide).
    target     TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('cancel', 'decide')),
    decision   TEXT,
    decided_by TEXT,
    created_at TEXT NOT NULL,
    CHECK ((kind = 'decide') = (decision IS NOT NULL))
) STRICT;
CREATE INDEX run_requests_by_target ON run_requests(target, id);
"#,
    // v6: the decision `approved-always` (a person allowed a host for the
    // workspace from now on, which wrote a `[network]` rule). SQLite cannot
    // change a CHECK in place: the table is rebuilt with its rows and index.
    // Nothing references `approvals`, so dropping the old table touches no
    // other row.
    r#"
CREATE TABLE approvals_v6 (
    id         TEXT PRIMARY KEY,
    run_id     TEXT NOT NULL REFERENCES runs(id),
    task_id    TEXT NOT NULL,
    action     TEXT NOT NULL,
    command    TEXT NOT NULL DEFAULT '',
    cwd        TEXT NOT NULL DEFAULT '',
    risk       TEXT NOT NULL,
    reasons    TEXT NOT NULL DEFAULT '[]'
               CHECK (json_valid(reasons) AND json_type(reasons) = 'array'),
    decision   TEXT NOT NULL CHECK (decision IN
                   ('approved', 'approved-for-session', 'approved-always', 'denied',
                    'aborted', 'expired')),
    decided_by TEXT NOT NULL CHECK (decided_by IN ('user', 'policy', 'flag')),
    created_at TEXT NOT NULL,
    decided_at TEXT NOT NULL
) STRICT;
INSERT INTO approvals_v6
    (id, run_id, task_id, action, command, cwd, risk, reasons, decision, decided_by,
     created_at, decided_at)
SELECT id, run_id, task_id, action, command, cwd, risk, reasons, decision, decided_by,
       created_at, decided_at
FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_v6 RENAME TO approvals;
CREATE INDEX approvals_by_run ON approvals(run_id, created_at);
"#,
    // v7: the user a run was started for (`[[server.user]]`), whose quota
    // counts it; NULL for runs of the server's own token and of the CLI.
    r#"
ALTER TABLE runs ADD COLUMN user_name TEXT;
CREATE INDEX runs_by_user ON runs(user_name, started_at) WHERE user_name IS NOT NULL;
"#,
    // v8: what a replica needs to resume a run another replica was running
    // when it died (`[store] resume`): the run's context once its plan is
    // made, as JSON the host writes and reads back; NULL before the plan.
    r#"
ALTER TABLE runs ADD COLUMN checkpoint TEXT;
"#,
    // v9: the grant an approved command ran under (what the sandbox let it
    // do, and who said so), as JSON; NULL when nothing ran and in older rows.
    r#"
ALTER TABLE approvals ADD COLUMN grant_json TEXT
    CHECK (grant_json IS NULL OR json_valid(grant_json));
"#,
];

/// Reads the header and refuses files this build must not touch. Writes
/// nothing, so it runs before the journal mode is switched.
pub(crate) fn check(conn: &Connection, path: &Path) -> Result<u32> {
    let err = |e| classify(path, e);
    let app_id: i32 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(err)?;
    let version: u32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(err)?;
    if app_id != APPLICATION_ID {
        if app_id != 0 {
            return Err(StoreError::ForeignDatabase {
                path: path.into(),
                detail: format!("application_id {app_id:#x}"),
            });
        }
        // No mark: fresh, or someone else's file that never set one.
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'",
                [],
                |r| r.get(0),
            )
            .map_err(err)?;
        if tables > 0 {
            return Err(StoreError::ForeignDatabase {
                path: path.into(),
                detail: format!("it has {tables} tables and no Capstan mark"),
            });
        }
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            path: path.into(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(version)
}

/// Applies every migration above the file's version. Safe against another
/// process migrating at the same time: the version is re-read under the
/// write lock.
pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<()> {
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| classify(path, e))?;
        let current: u32 = tx
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| classify(path, e))?;
        if current > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                path: path.into(),
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
        if current == SCHEMA_VERSION {
            return Ok(());
        }
        let next = current + 1;
        let failed = |source| StoreError::Migration {
            path: path.into(),
            version: next,
            previous: current,
            source,
        };
        tx.execute_batch(MIGRATIONS[current as usize])
            .map_err(failed)?;
        tx.pragma_update(None, "user_version", next)
            .map_err(failed)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(failed)?;
        tx.commit().map_err(failed)?;
    }
}
