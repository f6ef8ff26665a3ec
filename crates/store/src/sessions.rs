//! Sessions, their turns, rolling summary and usage totals.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::{Result, StoreError};
use crate::{
    Durability, Role, Session, SessionDeletion, SqliteStore, Turn, Usage, limit, new_id,
    now_rfc3339, to_i64, to_u64,
};

const SESSION_COLUMNS: &str = "id, title, workspace_id, summary, input_tokens, output_tokens, \
                               cost_usd, created_at, updated_at";
const TURN_COLUMNS: &str = "id, session_id, run_id, seq, role, content, created_at";

/// The seq a session's next turn takes (run under the write lock).
pub(crate) const NEXT_TURN_SEQ: &str =
    "SELECT COALESCE(MAX(seq), 0) + 1 FROM turns WHERE session_id = ?1";

/// A session's last `?2` turns, oldest first.
pub(crate) fn recent_turns_sql() -> String {
    format!(
        "SELECT {TURN_COLUMNS} FROM (
             SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ?1
             ORDER BY seq DESC LIMIT ?2
         ) ORDER BY seq"
    )
}

/// Checks that `run`, whose session is `owner` (`None`: no such run), belongs
/// to `session_id`: a turn may only name a run of its own session. Both
/// backends ask this before inserting a turn.
pub(crate) fn check_turn_run(run: &str, owner: Option<String>, session_id: &str) -> Result<()> {
    match owner {
        None => Err(not_found("run", run)),
        Some(s) if s != session_id => Err(StoreError::InvalidArgument(format!(
            "run {run} belongs to session {s}, not {session_id}"
        ))),
        Some(_) => Ok(()),
    }
}

fn session_from_row(r: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: r.get(0)?,
        title: r.get(1)?,
        workspace_id: r.get(2)?,
        summary: r.get(3)?,
        usage: Usage {
            input_tokens: to_u64(r.get(4)?),
            output_tokens: to_u64(r.get(5)?),
            cost_usd: Some(r.get::<_, f64>(6)?).filter(|c| *c != 0.0),
            estimated: false,
        },
        created_at: r.get(7)?,
        updated_at: r.get(8)?,
    })
}

fn turn_from_row(r: &Row<'_>) -> rusqlite::Result<Turn> {
    Ok(Turn {
        id: r.get(0)?,
        session_id: r.get(1)?,
        run_id: r.get(2)?,
        seq: to_u64(r.get(3)?),
        role: r.get(4)?,
        content: r.get(5)?,
        created_at: r.get(6)?,
    })
}

fn not_found(what: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        what,
        id: id.to_owned(),
    }
}

impl SqliteStore {
    /// Creates an empty session, optionally bound to a workspace (which must
    /// exist: [`StoreError::NotFound`] otherwise).
    pub fn create_session(&self, title: &str, workspace_id: Option<&str>) -> Result<Session> {
        let session = Session::new(title, workspace_id);
        self.write(Durability::Durable, |c| self.insert_session(c, &session))?;
        Ok(session)
    }

    /// Inserts `session` (its workspace, if any, must exist), within the
    /// caller's transaction.
    pub(crate) fn insert_session(&self, c: &Connection, session: &Session) -> Result<()> {
        if let Some(ws) = &session.workspace_id {
            self.require(c, "workspaces", "workspace", ws)?;
        }
        c.prepare_cached(
            "INSERT INTO sessions (id, title, workspace_id, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?4)",
        )
        .and_then(|mut s| {
            s.execute(params![
                session.id,
                session.title,
                session.workspace_id,
                session.created_at
            ])
        })
        .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn get_session(&self, id: &str) -> Result<Option<Session>> {
        self.with_conn(|c| {
            c.prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1 AND deleted_at IS NULL"
            ))
            .and_then(|mut s| s.query_row([id], session_from_row).optional())
            .map_err(|e| self.sql(e))
        })
    }

    /// The `limit` most recently updated sessions, newest first.
    pub fn list_sessions(&self, limit: usize) -> Result<Vec<Session>> {
        self.with_conn(|c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions WHERE deleted_at IS NULL
                     ORDER BY updated_at DESC, id DESC LIMIT ?1"
                ))
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map([crate::limit(limit)], session_from_row)
                .map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })
    }

    /// The `limit` most recently updated sessions whose title or any turn
    /// contains `query` (case-insensitive for ASCII), newest first. `%` and
    /// `_` in the query match themselves.
    pub fn search_sessions(&self, query: &str, limit: usize) -> Result<Vec<Session>> {
        let pattern = format!(
            "%{}%",
            query
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        self.with_conn(|c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions s WHERE deleted_at IS NULL AND (
                         title LIKE ?1 ESCAPE '\\'
                         OR EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id
                                    AND t.content LIKE ?1 ESCAPE '\\'))
                     ORDER BY updated_at DESC, id DESC LIMIT ?2"
                ))
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map(params![pattern, crate::limit(limit)], session_from_row)
                .map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })
    }

    /// Deletes a session, in one durable transaction. What goes and what stays:
    /// - gone: its turns (the conversation), its title and rolling summary,
    ///   and the event log of every one of its runs;
    /// - gone: its runs that hold no approval;
    /// - kept: runs that hold approvals, with those approvals (the audit trail
    ///   never loses a decision), under a tombstone of the session that keeps
    ///   only its id, times and usage totals (spent money stays counted).
    ///   Every read of sessions skips tombstones.
    ///
    /// Refused with [`StoreError::SessionRunning`] while one of its runs is
    /// still `running`. Returns what was removed.
    pub fn delete_session(&self, id: &str) -> Result<SessionDeletion> {
        self.write(Durability::Durable, |c| {
            let live = c
                .prepare_cached("SELECT 1 FROM sessions WHERE id = ?1 AND deleted_at IS NULL")
                .and_then(|mut s| s.exists([id]))
                .map_err(|e| self.sql(e))?;
            if !live {
                return Err(not_found("session", id));
            }
            let running: Option<String> = c
                .prepare_cached("SELECT id FROM runs WHERE session_id = ?1 AND status = 'running'")
                .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
                .map_err(|e| self.sql(e))?;
            if let Some(run_id) = running {
                return Err(StoreError::SessionRunning {
                    id: id.to_owned(),
                    run_id,
                });
            }
            let exec = |sql: &str| -> Result<usize> {
                c.prepare_cached(sql)
                    .and_then(|mut s| s.execute([id]))
                    .map_err(|e| self.sql(e))
            };
            let turns = exec("DELETE FROM turns WHERE session_id = ?1")?;
            let events = exec(
                "DELETE FROM events WHERE run_id IN (SELECT id FROM runs WHERE session_id = ?1)",
            )?;
            let runs = exec(
                "DELETE FROM runs WHERE session_id = ?1
                 AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.id)",
            )?;
            let kept_runs: i64 = c
                .prepare_cached("SELECT count(*) FROM runs WHERE session_id = ?1")
                .and_then(|mut s| s.query_row([id], |r| r.get(0)))
                .map_err(|e| self.sql(e))?;
            if kept_runs == 0 {
                exec("DELETE FROM sessions WHERE id = ?1")?;
            } else {
                c.prepare_cached(
                    "UPDATE sessions SET title = '', summary = '', workspace_id = NULL,
                         deleted_at = ?2 WHERE id = ?1",
                )
                .and_then(|mut s| s.execute(params![id, now_rfc3339()]))
                .map_err(|e| self.sql(e))?;
            }
            Ok(SessionDeletion {
                turns: to_u64(turns as i64),
                events: to_u64(events as i64),
                runs: to_u64(runs as i64),
                audited_runs_kept: to_u64(kept_runs),
            })
        })
    }

    /// Remembers the workspace a session last used (`None` forgets it).
    pub fn set_session_workspace(&self, id: &str, workspace_id: Option<&str>) -> Result<()> {
        self.write(Durability::Durable, |c| {
            if let Some(ws) = workspace_id {
                self.require(c, "workspaces", "workspace", ws)?;
            }
            self.touch_session(
                c,
                "UPDATE sessions SET workspace_id = ?2, updated_at = ?3 WHERE id = ?1",
                params![id, workspace_id, now_rfc3339()],
                id,
            )
        })
    }

    pub fn set_session_title(&self, id: &str, title: &str) -> Result<()> {
        self.write(Durability::Durable, |c| {
            self.touch_session(
                c,
                "UPDATE sessions SET title = ?2, updated_at = ?3 WHERE id = ?1",
                params![id, title, now_rfc3339()],
                id,
            )
        })
    }

    /// Replaces the session's rolling summary (of turns older than the
    /// recent window the orchestrator loads with [`Store::recent_turns`]).
    pub fn update_summary(&self, id: &str, summary: &str) -> Result<()> {
        self.write(Durability::Durable, |c| self.set_summary(c, id, summary))
    }

    fn set_summary(&self, c: &Connection, id: &str, summary: &str) -> Result<()> {
        self.touch_session(
            c,
            "UPDATE sessions SET summary = ?2, updated_at = ?3 WHERE id = ?1",
            params![id, summary, now_rfc3339()],
            id,
        )
    }

    /// Appends a turn; its `seq` is one more than the session's last. Durable
    /// once this returns (see crate docs), even across power loss.
    ///
    /// `run_id`, when given, must be a run of this session
    /// ([`StoreError::InvalidArgument`] otherwise).
    pub fn add_turn(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        role: Role,
        content: &str,
    ) -> Result<Turn> {
        self.write(Durability::Durable, |c| {
            self.insert_turn(c, session_id, run_id, role, content)
        })
    }

    /// Appends the assistant's `answer` (nothing when it is empty) and
    /// replaces the session's summary, in one durable commit.
    pub fn record_answer(
        &self,
        session_id: &str,
        run_id: &str,
        answer: &str,
        summary: &str,
    ) -> Result<()> {
        self.write(Durability::Durable, |c| {
            self.save_answer(c, session_id, run_id, answer, summary)
        })
    }

    /// [`SqliteStore::record_answer`] in the caller's transaction.
    pub(crate) fn save_answer(
        &self,
        c: &Connection,
        session_id: &str,
        run_id: &str,
        answer: &str,
        summary: &str,
    ) -> Result<()> {
        if !answer.is_empty() {
            self.insert_turn(c, session_id, Some(run_id), Role::Assistant, answer)?;
        }
        self.set_summary(c, session_id, summary)
    }

    /// Inserts a turn within the caller's transaction (see [`SqliteStore::add_turn`]).
    pub(crate) fn insert_turn(
        &self,
        c: &Connection,
        session_id: &str,
        run_id: Option<&str>,
        role: Role,
        content: &str,
    ) -> Result<Turn> {
        let now = now_rfc3339();
        let id = new_id("turn");
        self.require(c, "sessions", "session", session_id)?;
        if let Some(run) = run_id {
            let owner: Option<String> = c
                .prepare_cached("SELECT session_id FROM runs WHERE id = ?1")
                .and_then(|mut s| s.query_row([run], |r| r.get(0)).optional())
                .map_err(|e| self.sql(e))?;
            check_turn_run(run, owner, session_id)?;
        }
        // The write lock is held (IMMEDIATE), so no other writer can take
        // the same seq between this read and the insert.
        let seq: i64 = c
            .prepare_cached(NEXT_TURN_SEQ)
            .and_then(|mut s| s.query_row([session_id], |r| r.get(0)))
            .map_err(|e| self.sql(e))?;
        c.prepare_cached(
            "INSERT INTO turns (id, session_id, run_id, seq, role, content, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut s| s.execute(params![id, session_id, run_id, seq, role, content, now]))
        .map_err(|e| self.sql(e))?;
        c.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![session_id, now]))
            .map_err(|e| self.sql(e))?;
        Ok(Turn {
            id,
            session_id: session_id.to_owned(),
            run_id: run_id.map(str::to_owned),
            seq: to_u64(seq),
            role,
            content: content.to_owned(),
            created_at: now,
        })
    }

    /// The last `n` turns of a session, oldest first (ready to be replayed
    /// into a prompt). Fewer when the session has fewer; empty for `n == 0`
    /// or an unknown session. `usize::MAX` returns them all.
    pub fn recent_turns(&self, session_id: &str, n: usize) -> Result<Vec<Turn>> {
        self.with_conn(|c| {
            let mut stmt = c
                .prepare_cached(&recent_turns_sql())
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map(params![session_id, limit(n)], turn_from_row)
                .map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })
    }

    /// The session's usage totals.
    pub fn session_usage(&self, session_id: &str) -> Result<Usage> {
        self.get_session(session_id)?
            .map(|s| s.usage)
            .ok_or_else(|| not_found("session", session_id))
    }

    /// Adds one model call's usage to the session's totals and, when `run_id`
    /// is given, to that run's (which must belong to the session). Durable:
    /// spent money is not forgotten by a crash. Call it per model call so a
    /// run that never finishes still has its cost counted.
    pub fn add_usage(&self, session_id: &str, run_id: Option<&str>, usage: &Usage) -> Result<()> {
        let (input, output) = (to_i64(usage.input_tokens), to_i64(usage.output_tokens));
        self.write(Durability::Durable, |c| {
            if let Some(run) = run_id {
                let n = c
                    .prepare_cached(
                        "UPDATE runs SET input_tokens = input_tokens + ?3,
                             output_tokens = output_tokens + ?4, cost_usd = cost_usd + ?5
                         WHERE id = ?1 AND session_id = ?2",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            run,
                            session_id,
                            input,
                            output,
                            usage.cost_usd.unwrap_or(0.0)
                        ])
                    })
                    .map_err(|e| self.sql(e))?;
                if n == 0 {
                    return Err(StoreError::NotFound {
                        what: "run in this session",
                        id: run.to_owned(),
                    });
                }
            }
            self.bump_session_usage(c, session_id, input, output, usage.cost_usd.unwrap_or(0.0))
        })
    }

    /// Adds (possibly negative) deltas to a session's usage totals.
    pub(crate) fn bump_session_usage(
        &self,
        c: &Connection,
        session_id: &str,
        input: i64,
        output: i64,
        cost: f64,
    ) -> Result<()> {
        self.touch_session(
            c,
            "UPDATE sessions SET input_tokens = input_tokens + ?2,
                 output_tokens = output_tokens + ?3, cost_usd = cost_usd + ?4, updated_at = ?5
             WHERE id = ?1",
            params![session_id, input, output, cost, now_rfc3339()],
            session_id,
        )
    }

    /// Runs an `UPDATE sessions ... WHERE id = ?1`; no row is `NotFound`.
    fn touch_session(
        &self,
        c: &Connection,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
        id: &str,
    ) -> Result<()> {
        let n = c
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(params))
            .map_err(|e| self.sql(e))?;
        if n == 0 {
            return Err(not_found("session", id));
        }
        Ok(())
    }

    /// `NotFound` unless `table` has a row with this id. Checked explicitly
    /// (rather than left to the foreign key) so the error names what is missing.
    pub(crate) fn require(
        &self,
        c: &Connection,
        table: &'static str,
        what: &'static str,
        id: &str,
    ) -> Result<()> {
        let found = c
            .prepare_cached(&format!("SELECT 1 FROM {table} WHERE id = ?1"))
            .and_then(|mut s| s.exists([id]))
            .map_err(|e| self.sql(e))?;
        if found {
            Ok(())
        } else {
            Err(not_found(what, id))
        }
    }
}
