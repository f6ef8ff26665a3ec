//! Every store operation on PostgreSQL: the same contract as the SQLite
//! modules (see their docs for the details each keeps), in PostgreSQL's SQL.
//! Writes are one transaction each; serialisation that SQLite gets from its
//! single write lock comes here from row locks (`FOR UPDATE`) on the parent
//! row (the session for turn seqs, the run for event seqs and finishing).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement, Transaction};

use super::{PgStore, wait};
use crate::error::{Result, StoreError};
use crate::lease::{
    Ending, LEASE_EXPIRED_REASON, LeaseClaim, StoredEvent, check_ttl, checked_ending, lease_held,
};
use crate::quota::{Usage as QuotaUsage, windows};
use crate::workspaces::canonical_root;
use crate::{
    Approval, EventRecord, INTERRUPTED_REASON, NewApproval, Profile, Quota, Role, Run, RunEnding,
    RunStatus, Session, SessionDeletion, Turn, Usage, Workspace, limit, new_id, now_rfc3339,
    to_i64, to_u64,
};
use capstan_protocol::event::RUN_ENDING;

const WS_COLUMNS: &str =
    "id, root_path, name, policy_profile, profile_set, policy_json::text, created_at";
const SESSION_COLUMNS: &str = "id, title, workspace_id, summary, input_tokens, output_tokens, \
                               cost_usd, created_at, updated_at";
const TURN_COLUMNS: &str = "id, session_id, run_id, seq, role, content, created_at";
const RUN_COLUMNS: &str = "id, session_id, status, reason, model, input_tokens, output_tokens, \
                           cost_usd, started_at, ended_at";
const APPROVAL_COLUMNS: &str = "id, run_id, task_id, action, command, cwd, risk, reasons::text, \
                                decision, decided_by, created_at, decided_at, grant_json";
const INSERT_EVENT: &str = "INSERT INTO events (run_id, seq, ts, type, json)
                            VALUES ($1, $2, $3, $4, $5::text::json)";
/// Coalescing (see [`crate::coalesce`]): the deltas a completed response replaces.
const COALESCE: &str =
    "DELETE FROM events WHERE run_id = $1 AND seq < $2 AND type = 'response.delta'";
const EVENTS_SINCE: &str =
    "SELECT seq, ts, json::text FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq";
const LOCK_RUN: &str = "SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE";
const NEXT_SEQ: &str = "SELECT COALESCE(MAX(seq) + 1, 0) FROM events WHERE run_id = $1";
/// A `timestamptz` as the store's RFC 3339 text.
const RFC3339: &str = r#"'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'"#;

fn not_found(what: &'static str, id: &str) -> StoreError {
    StoreError::NotFound {
        what,
        id: id.to_owned(),
    }
}

fn seq_i64(seq: u64) -> Result<i64> {
    i64::try_from(seq)
        .map_err(|_| StoreError::InvalidArgument(format!("event seq {seq} is above 2^63 - 1")))
}

fn code(e: &tokio_postgres::Error) -> Option<&SqlState> {
    e.code()
}

impl PgStore {
    fn parse<T: std::str::FromStr>(&self, text: String) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        text.parse().map_err(|e: T::Err| StoreError::Postgres {
            url: self.url.clone(),
            detail: format!("unreadable value in the database: {e}"),
        })
    }

    fn workspace(&self, r: &Row) -> Result<Workspace> {
        Ok(Workspace {
            id: r.get(0),
            root_path: PathBuf::from(r.get::<_, String>(1)),
            name: r.get(2),
            policy_profile: if r.get::<_, bool>(4) {
                Some(self.parse(r.get(3))?)
            } else {
                None
            },
            policy_json: r.get(5),
            created_at: r.get(6),
        })
    }

    fn session(&self, r: &Row) -> Session {
        Session {
            id: r.get(0),
            title: r.get(1),
            workspace_id: r.get(2),
            summary: r.get(3),
            usage: Usage {
                input_tokens: to_u64(r.get(4)),
                output_tokens: to_u64(r.get(5)),
                cost_usd: Some(r.get::<_, f64>(6)).filter(|c| *c != 0.0),
                estimated: false,
            },
            created_at: r.get(7),
            updated_at: r.get(8),
        }
    }

    fn turn(&self, r: &Row) -> Result<Turn> {
        Ok(Turn {
            id: r.get(0),
            session_id: r.get(1),
            run_id: r.get(2),
            seq: to_u64(r.get(3)),
            role: self.parse(r.get(4))?,
            content: r.get(5),
            created_at: r.get(6),
        })
    }

    fn run(&self, r: &Row) -> Result<Run> {
        Ok(Run {
            id: r.get(0),
            session_id: r.get(1),
            status: self.parse(r.get(2))?,
            reason: r.get(3),
            model: r.get(4),
            usage: Usage {
                input_tokens: to_u64(r.get(5)),
                output_tokens: to_u64(r.get(6)),
                cost_usd: Some(r.get::<_, f64>(7)).filter(|c| *c != 0.0),
                estimated: false,
            },
            started_at: r.get(8),
            ended_at: r.get(9),
        })
    }

    fn approval(&self, r: &Row) -> Result<Approval> {
        let reasons: String = r.get(7);
        Ok(Approval {
            id: r.get(0),
            run_id: r.get(1),
            task_id: r.get(2),
            action: r.get(3),
            command: r.get(4),
            cwd: r.get(5),
            risk: r.get(6),
            reasons: serde_json::from_str(&reasons).map_err(|e| StoreError::Postgres {
                url: self.url.clone(),
                detail: format!("unreadable approval reasons: {e}"),
            })?,
            decision: self.parse(r.get(8))?,
            decided_by: self.parse(r.get(9))?,
            created_at: r.get(10),
            decided_at: r.get(11),
            grant: r
                .get::<_, Option<String>>(12)
                .map(|g| serde_json::from_str(&g))
                .transpose()
                .map_err(|e| StoreError::Postgres {
                    url: self.url.clone(),
                    detail: format!("unreadable approval grant: {e}"),
                })?,
        })
    }

    /// `NotFound` unless `table` has a row with this id; with `lock`, the
    /// row stays locked until the transaction ends.
    async fn require(
        &self,
        tx: &Transaction<'_>,
        table: &'static str,
        what: &'static str,
        id: &str,
        lock: bool,
    ) -> Result<()> {
        let sql = format!(
            "SELECT 1 FROM {table} WHERE id = $1{}",
            if lock { " FOR NO KEY UPDATE" } else { "" }
        );
        let found = tx.query_opt(&sql, &[&id]).await.map_err(|e| self.err(e))?;
        found.map(|_| ()).ok_or_else(|| not_found(what, id))
    }

    /// Runs `sql` (an UPDATE of one session by `$1`); no row is `NotFound`.
    async fn touch_session(
        &self,
        tx: &Transaction<'_>,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        id: &str,
    ) -> Result<()> {
        let n = tx.execute(sql, params).await.map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(not_found("session", id));
        }
        Ok(())
    }

    async fn bump_session_usage(
        &self,
        tx: &Transaction<'_>,
        session_id: &str,
        input: i64,
        output: i64,
        cost: f64,
    ) -> Result<()> {
        self.touch_session(
            tx,
            "UPDATE sessions SET input_tokens = input_tokens + $2,
                 output_tokens = output_tokens + $3, cost_usd = cost_usd + $4, updated_at = $5
             WHERE id = $1",
            &[&session_id, &input, &output, &cost, &now_rfc3339()],
            session_id,
        )
        .await
    }

    // ---- Store basics

    pub(crate) fn schema_version(&self) -> Result<u32> {
        let c = self.conn()?;
        let v: i32 = wait(c.query_one("SELECT COALESCE(MAX(version), 0) FROM capstan_schema", &[]))
            .map_err(|e| self.err(e))?
            .get(0);
        Ok(u32::try_from(v).unwrap_or(0))
    }

    pub(crate) fn integrity_check(&self) -> Result<Vec<String>> {
        let c = self.conn()?;
        wait(c.query_one("SELECT 1", &[])).map_err(|e| self.err(e))?;
        Ok(Vec::new())
    }

    // ---- Workspaces

    pub(crate) fn add_workspace(
        &self,
        root: &Path,
        name: &str,
        profile: Option<Profile>,
    ) -> Result<Workspace> {
        let root_path = canonical_root(root)?;
        let ws = Workspace {
            id: new_id("ws"),
            root_path: PathBuf::from(&root_path),
            name: name.to_owned(),
            policy_profile: profile,
            policy_json: None,
            created_at: now_rfc3339(),
        };
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            let inserted = tx
                .execute(
                    "INSERT INTO workspaces (id, root_path, name, policy_profile, profile_set, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (root_path) DO NOTHING",
                    &[
                        &ws.id,
                        &root_path,
                        &ws.name,
                        &profile.unwrap_or_default().as_str(),
                        &profile.is_some(),
                        &ws.created_at,
                    ],
                )
                .await
                .map_err(|e| self.err(e))?;
            if inserted == 0 {
                let id: String = tx
                    .query_one(
                        "SELECT id FROM workspaces WHERE root_path = $1",
                        &[&root_path],
                    )
                    .await
                    .map_err(|e| self.err(e))?
                    .get(0);
                return Err(StoreError::WorkspaceExists {
                    root: PathBuf::from(&root_path),
                    id,
                });
            }
            tx.commit().await.map_err(|e| self.err(e))
        })?;
        Ok(ws)
    }

    pub(crate) fn list_workspaces(&self) -> Result<Vec<Workspace>> {
        let c = self.conn()?;
        let rows = wait(c.query(
            &format!("SELECT {WS_COLUMNS} FROM workspaces ORDER BY name, id"),
            &[],
        ))
        .map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.workspace(r)).collect()
    }

    pub(crate) fn get_workspace_by_id(&self, id: &str) -> Result<Option<Workspace>> {
        self.workspace_where("id", id)
    }

    pub(crate) fn get_workspace_by_root(&self, root: &Path) -> Result<Option<Workspace>> {
        let key = match canonical_root(root) {
            Ok(canonical) => canonical,
            Err(_) => root.to_string_lossy().into_owned(),
        };
        self.workspace_where("root_path", &key)
    }

    fn workspace_where(&self, column: &str, value: &str) -> Result<Option<Workspace>> {
        let c = self.conn()?;
        let row = wait(c.query_opt(
            &format!("SELECT {WS_COLUMNS} FROM workspaces WHERE {column} = $1"),
            &[&value],
        ))
        .map_err(|e| self.err(e))?;
        row.map(|r| self.workspace(&r)).transpose()
    }

    pub(crate) fn remove_workspace(&self, id: &str) -> Result<()> {
        self.update_workspace("DELETE FROM workspaces WHERE id = $1", &[&id], id)
    }

    pub(crate) fn set_profile(&self, id: &str, profile: Option<Profile>) -> Result<()> {
        self.update_workspace(
            "UPDATE workspaces SET policy_profile = $2, profile_set = $3 WHERE id = $1",
            &[
                &id,
                &profile.unwrap_or_default().as_str(),
                &profile.is_some(),
            ],
            id,
        )
    }

    pub(crate) fn set_policy_json(&self, id: &str, policy_json: Option<&str>) -> Result<()> {
        if let Some(json) = policy_json {
            serde_json::from_str::<serde::de::IgnoredAny>(json).map_err(|e| {
                StoreError::InvalidArgument(format!(
                    "policy_json of workspace {id} is not JSON: {e}"
                ))
            })?;
        }
        self.update_workspace(
            "UPDATE workspaces SET policy_json = $2::text::json WHERE id = $1",
            &[&id, &policy_json],
            id,
        )
    }

    fn update_workspace(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        id: &str,
    ) -> Result<()> {
        let c = self.conn()?;
        let n = wait(c.execute(sql, params)).map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(not_found("workspace", id));
        }
        Ok(())
    }

    // ---- Sessions and turns

    pub(crate) fn create_session(
        &self,
        title: &str,
        workspace_id: Option<&str>,
    ) -> Result<Session> {
        let session = Session::new(title, workspace_id);
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            if let Some(ws) = workspace_id {
                self.require(&tx, "workspaces", "workspace", ws, false)
                    .await?;
            }
            tx.execute(
                "INSERT INTO sessions (id, title, workspace_id, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $4)",
                &[
                    &session.id,
                    &session.title,
                    &workspace_id,
                    &session.created_at,
                ],
            )
            .await
            .map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))
        })?;
        Ok(session)
    }

    pub(crate) fn get_session(&self, id: &str) -> Result<Option<Session>> {
        let c = self.conn()?;
        let row = wait(c.query_opt(
            &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1 AND deleted_at IS NULL"),
            &[&id],
        ))
        .map_err(|e| self.err(e))?;
        Ok(row.map(|r| self.session(&r)))
    }

    pub(crate) fn list_sessions(&self, n: usize) -> Result<Vec<Session>> {
        let c = self.conn()?;
        let rows = wait(c.query(
            &format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE deleted_at IS NULL
                 ORDER BY updated_at DESC, id DESC LIMIT $1"
            ),
            &[&limit(n)],
        ))
        .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| self.session(r)).collect())
    }

    pub(crate) fn search_sessions(&self, query: &str, n: usize) -> Result<Vec<Session>> {
        let pattern = format!(
            "%{}%",
            query
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let c = self.conn()?;
        let rows = wait(c.query(
            &format!(
                "SELECT {SESSION_COLUMNS} FROM sessions s WHERE deleted_at IS NULL AND (
                     title ILIKE $1 ESCAPE '\\'
                     OR EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id
                                AND t.content ILIKE $1 ESCAPE '\\'))
                 ORDER BY updated_at DESC, id DESC LIMIT $2"
            ),
            &[&pattern, &limit(n)],
        ))
        .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| self.session(r)).collect())
    }

    pub(crate) fn delete_session(&self, id: &str) -> Result<SessionDeletion> {
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            let live = tx
                .query_opt(
                    "SELECT 1 FROM sessions WHERE id = $1 AND deleted_at IS NULL FOR UPDATE",
                    &[&id],
                )
                .await
                .map_err(|e| self.err(e))?;
            if live.is_none() {
                return Err(not_found("session", id));
            }
            let running = tx
                .query_opt(
                    "SELECT id FROM runs WHERE session_id = $1 AND status = 'running' LIMIT 1",
                    &[&id],
                )
                .await
                .map_err(|e| self.err(e))?;
            if let Some(r) = running {
                return Err(StoreError::SessionRunning {
                    id: id.to_owned(),
                    run_id: r.get(0),
                });
            }
            let exec = async |sql: &str| -> Result<u64> {
                tx.execute(sql, &[&id]).await.map_err(|e| self.err(e))
            };
            let turns = exec("DELETE FROM turns WHERE session_id = $1").await?;
            let events = exec(
                "DELETE FROM events WHERE run_id IN (SELECT id FROM runs WHERE session_id = $1)",
            )
            .await?;
            let runs = exec(
                "DELETE FROM runs WHERE session_id = $1
                 AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.id)",
            )
            .await?;
            let kept: i64 = tx
                .query_one("SELECT count(*) FROM runs WHERE session_id = $1", &[&id])
                .await
                .map_err(|e| self.err(e))?
                .get(0);
            if kept == 0 {
                exec("DELETE FROM sessions WHERE id = $1").await?;
            } else {
                tx.execute(
                    "UPDATE sessions SET title = '', summary = '', workspace_id = NULL,
                         deleted_at = $2 WHERE id = $1",
                    &[&id, &now_rfc3339()],
                )
                .await
                .map_err(|e| self.err(e))?;
            }
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok(SessionDeletion {
                turns,
                events,
                runs,
                audited_runs_kept: to_u64(kept),
            })
        })
    }

    fn session_update(
        &self,
        id: &str,
        workspace: Option<Option<&str>>,
        sql: &str,
        value: Option<&str>,
    ) -> Result<()> {
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            if let Some(Some(ws)) = workspace {
                self.require(&tx, "workspaces", "workspace", ws, false)
                    .await?;
            }
            self.touch_session(&tx, sql, &[&id, &value, &now_rfc3339()], id)
                .await?;
            tx.commit().await.map_err(|e| self.err(e))
        })
    }

    pub(crate) fn set_session_workspace(&self, id: &str, workspace_id: Option<&str>) -> Result<()> {
        self.session_update(
            id,
            Some(workspace_id),
            "UPDATE sessions SET workspace_id = $2, updated_at = $3 WHERE id = $1",
            workspace_id,
        )
    }

    pub(crate) fn set_session_title(&self, id: &str, title: &str) -> Result<()> {
        self.session_update(
            id,
            None,
            "UPDATE sessions SET title = $2, updated_at = $3 WHERE id = $1",
            Some(title),
        )
    }

    pub(crate) fn update_summary(&self, id: &str, summary: &str) -> Result<()> {
        self.session_update(
            id,
            None,
            "UPDATE sessions SET summary = $2, updated_at = $3 WHERE id = $1",
            Some(summary),
        )
    }

    pub(crate) fn record_answer(
        &self,
        session_id: &str,
        run_id: &str,
        answer: &str,
        summary: &str,
    ) -> Result<()> {
        if !answer.is_empty() {
            self.add_turn(session_id, Some(run_id), Role::Assistant, answer)?;
        }
        self.update_summary(session_id, summary)
    }

    pub(crate) fn add_turn(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        role: Role,
        content: &str,
    ) -> Result<Turn> {
        let now = now_rfc3339();
        let id = new_id("turn");
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            // The session row lock serialises turn seqs across processes.
            self.require(&tx, "sessions", "session", session_id, true)
                .await?;
            if let Some(run) = run_id {
                let owner = tx
                    .query_opt("SELECT session_id FROM runs WHERE id = $1", &[&run])
                    .await
                    .map_err(|e| self.err(e))?;
                crate::sessions::check_turn_run(
                    run,
                    owner.map(|r| r.get::<_, String>(0)),
                    session_id,
                )?;
            }
            let seq: i64 = tx
                .query_one(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM turns WHERE session_id = $1",
                    &[&session_id],
                )
                .await
                .map_err(|e| self.err(e))?
                .get(0);
            tx.execute(
                "INSERT INTO turns (id, session_id, run_id, seq, role, content, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &id,
                    &session_id,
                    &run_id,
                    &seq,
                    &role.as_str(),
                    &content,
                    &now,
                ],
            )
            .await
            .map_err(|e| self.err(e))?;
            tx.execute(
                "UPDATE sessions SET updated_at = $2 WHERE id = $1",
                &[&session_id, &now],
            )
            .await
            .map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok(Turn {
                id: id.clone(),
                session_id: session_id.to_owned(),
                run_id: run_id.map(str::to_owned),
                seq: to_u64(seq),
                role,
                content: content.to_owned(),
                created_at: now.clone(),
            })
        })
    }

    pub(crate) fn recent_turns(&self, session_id: &str, n: usize) -> Result<Vec<Turn>> {
        let c = self.conn()?;
        let rows = wait(c.query(
            &format!(
                "SELECT {TURN_COLUMNS} FROM (
                     SELECT {TURN_COLUMNS} FROM turns WHERE session_id = $1
                     ORDER BY seq DESC LIMIT $2
                 ) recent ORDER BY seq"
            ),
            &[&session_id, &limit(n)],
        ))
        .map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.turn(r)).collect()
    }

    pub(crate) fn session_usage(&self, session_id: &str) -> Result<Usage> {
        self.get_session(session_id)?
            .map(|s| s.usage)
            .ok_or_else(|| not_found("session", session_id))
    }

    pub(crate) fn add_usage(
        &self,
        session_id: &str,
        run_id: Option<&str>,
        usage: &Usage,
    ) -> Result<()> {
        let (input, output) = (to_i64(usage.input_tokens), to_i64(usage.output_tokens));
        let cost = usage.cost_usd.unwrap_or(0.0);
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            if let Some(run) = run_id {
                let n = tx
                    .execute(
                        "UPDATE runs SET input_tokens = input_tokens + $3,
                             output_tokens = output_tokens + $4, cost_usd = cost_usd + $5
                         WHERE id = $1 AND session_id = $2",
                        &[&run, &session_id, &input, &output, &cost],
                    )
                    .await
                    .map_err(|e| self.err(e))?;
                if n == 0 {
                    return Err(not_found("run in this session", run));
                }
            }
            self.bump_session_usage(&tx, session_id, input, output, cost)
                .await?;
            tx.commit().await.map_err(|e| self.err(e))
        })
    }

    // ---- Runs

    pub(crate) fn start_run(&self, session_id: &str, model: &str) -> Result<Run> {
        self.insert_run(session_id, model, false, None)
    }

    /// Two transactions on PostgreSQL, where a commit's flush is the
    /// server's and concurrent commits share it already.
    pub(crate) fn start_run_in_new_session(
        &self,
        title: &str,
        workspace_id: Option<&str>,
        model: &str,
    ) -> Result<(Session, Run)> {
        let session = self.create_session(title, workspace_id)?;
        let run = self.start_run(&session.id, model)?;
        Ok((session, run))
    }

    /// Two transactions here (as [`Self::start_run_in_new_session`]): the
    /// run, then the turn.
    pub(crate) fn start_run_with_turn(
        &self,
        session_id: &str,
        model: &str,
        quota: Option<&Quota>,
        message: &str,
    ) -> Result<(Run, Turn)> {
        let run = self.start_run_exclusive(session_id, model, quota)?;
        let turn = self.add_turn(session_id, Some(&run.id), Role::User, message)?;
        Ok((run, turn))
    }

    /// Separate transactions here (as [`Self::start_run_in_new_session`]):
    /// the session, then the run and its turn.
    pub(crate) fn start_run_with_turn_in_new_session(
        &self,
        title: &str,
        workspace_id: Option<&str>,
        model: &str,
        quota: Option<&Quota>,
        message: &str,
    ) -> Result<(Session, Run, Turn)> {
        let session = self.create_session(title, workspace_id)?;
        let (run, turn) = self.start_run_with_turn(&session.id, model, quota, message)?;
        Ok((session, run, turn))
    }

    pub(crate) fn start_run_exclusive(
        &self,
        session_id: &str,
        model: &str,
        quota: Option<&Quota>,
    ) -> Result<Run> {
        self.insert_run(session_id, model, true, quota)
    }

    fn insert_run(
        &self,
        session_id: &str,
        model: &str,
        exclusive: bool,
        quota: Option<&Quota>,
    ) -> Result<Run> {
        let run = Run::starting(session_id, model);
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            // Locking the session's row serialises exclusive starts of one
            // session across replicas: the second sees the first's run.
            self.require(&tx, "sessions", "session", session_id, exclusive)
                .await?;
            if exclusive
                && let Some(row) = tx
                    .query_opt(
                        "SELECT id FROM runs WHERE session_id = $1 AND status = 'running' LIMIT 1",
                        &[&session_id],
                    )
                    .await
                    .map_err(|e| self.err(e))?
            {
                return Err(StoreError::SessionBusy {
                    id: session_id.to_owned(),
                    run_id: row.get(0),
                });
            }
            if let Some(quota) = quota {
                // One user's starts are serialised across replicas (sessions
                // differ, so the session lock does not), until commit.
                tx.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended('capstan-user:' || $1, 0))",
                    &[&quota.user],
                )
                .await
                .map_err(|e| self.err(e))?;
                let (minute, day) = windows();
                let row = tx
                    .query_one(
                        "SELECT
                           (SELECT count(*) FROM runs WHERE user_name = $1 AND status = 'running'),
                           (SELECT count(*) FROM runs WHERE user_name = $1 AND started_at > $2),
                           (SELECT min(started_at) FROM runs WHERE user_name = $1 AND started_at > $2),
                           (SELECT coalesce(sum(input_tokens + output_tokens), 0)::bigint FROM runs
                              WHERE user_name = $1 AND started_at > $3),
                           (SELECT min(started_at) FROM runs WHERE user_name = $1 AND started_at > $3),
                           (SELECT coalesce(sum(cost_usd), 0)::double precision FROM runs
                              WHERE user_name = $1 AND started_at > $3)",
                        &[&quota.user, &minute, &day],
                    )
                    .await
                    .map_err(|e| self.err(e))?;
                quota.admit(&QuotaUsage {
                    running: row.get::<_, i64>(0) as u64,
                    last_minute: row.get::<_, i64>(1) as u64,
                    oldest_in_minute: row.get(2),
                    tokens_day: row.get::<_, i64>(3) as u64,
                    oldest_in_day: row.get(4),
                    cost_day: row.get(5),
                })?;
            }
            tx.execute(
                "INSERT INTO runs (id, session_id, status, model, owner, started_at, user_name)
                 VALUES ($1, $2, 'running', $3, $4, $5, $6)",
                &[
                    &run.id,
                    &session_id,
                    &model,
                    &self.owner_id,
                    &run.started_at,
                    &quota.map(|q| q.user.as_str()),
                ],
            )
            .await
            .map_err(|e| self.err(e))?;
            tx.execute(
                "UPDATE sessions SET updated_at = $2 WHERE id = $1",
                &[&session_id, &run.started_at],
            )
            .await
            .map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))
        })?;
        Ok(run)
    }

    pub(crate) fn finish_run(
        &self,
        id: &str,
        status: RunStatus,
        reason: Option<&str>,
        usage: Option<Usage>,
    ) -> Result<()> {
        self.finish_run_with_events(id, status, reason, usage, &[])
    }

    /// Two transactions, the answer's first (as `record_answer`, then
    /// `finish_run_with_events`).
    pub(crate) fn finish_run_with_answer(&self, e: &RunEnding<'_>) -> (Result<()>, Result<()>) {
        let saved = e.answer.map_or(Ok(()), |a| {
            self.record_answer(a.session_id, e.id, a.answer, a.summary)
        });
        (
            self.finish_run_with_events(e.id, e.status, e.reason, e.usage, e.last),
            saved,
        )
    }

    pub(crate) fn finish_run_with_events(
        &self,
        id: &str,
        status: RunStatus,
        reason: Option<&str>,
        usage: Option<Usage>,
        last: &[EventRecord],
    ) -> Result<()> {
        if status == RunStatus::Running {
            return Err(StoreError::InvalidArgument(format!(
                "finish_run({id}) needs a terminal status, not running"
            )));
        }
        let mut c = self.conn()?;
        wait(async {
            let insert = c.statement(INSERT_EVENT).await?;
            let coalesce = c.statement(COALESCE).await?;
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            let current = tx
                .query_opt(
                    "SELECT session_id, status, input_tokens, output_tokens, cost_usd
                     FROM runs WHERE id = $1 FOR UPDATE",
                    &[&id],
                )
                .await
                .map_err(|e| self.err(e))?
                .ok_or_else(|| not_found("run", id))?;
            let session_id: String = current.get(0);
            let old_status: RunStatus = self.parse(current.get(1))?;
            if old_status != RunStatus::Running {
                return Err(StoreError::RunNotRunning {
                    id: id.to_owned(),
                    status: old_status.to_string(),
                });
            }
            let (old_in, old_out, old_cost): (i64, i64, f64) =
                (current.get(2), current.get(3), current.get(4));
            let (new_in, new_out, new_cost) =
                crate::runs::final_usage(usage, (old_in, old_out, old_cost));
            self.insert_batch(&tx, &insert, &coalesce, last).await?;
            tx.execute(
                "UPDATE runs SET status = $2, reason = $3, ended_at = $4,
                     lease_owner = NULL, lease_expires_at = NULL,
                     input_tokens = $5, output_tokens = $6, cost_usd = $7
                 WHERE id = $1",
                &[
                    &id,
                    &status.as_str(),
                    &reason,
                    &now_rfc3339(),
                    &new_in,
                    &new_out,
                    &new_cost,
                ],
            )
            .await
            .map_err(|e| self.err(e))?;
            self.bump_session_usage(
                &tx,
                &session_id,
                new_in - old_in,
                new_out - old_out,
                new_cost - old_cost,
            )
            .await?;
            tx.commit().await.map_err(|e| self.err(e))
        })
    }

    pub(crate) fn get_run(&self, id: &str) -> Result<Option<Run>> {
        let c = self.conn()?;
        let row = wait(c.query_opt(
            &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"),
            &[&id],
        ))
        .map_err(|e| self.err(e))?;
        row.map(|r| self.run(&r)).transpose()
    }

    pub(crate) fn running_run_with_approval(&self, approval_id: &str) -> Result<Option<Run>> {
        let c = self.conn()?;
        let row = wait(c.query_opt(
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE status = 'running' AND id IN (
                     SELECT e.run_id FROM events e JOIN runs r ON r.id = e.run_id
                     WHERE r.status = 'running' AND e.type = 'approval.requested'
                         AND e.json->>'approval_id' = $1)
                 LIMIT 1"
            ),
            &[&approval_id],
        ))
        .map_err(|e| self.err(e))?;
        row.map(|r| self.run(&r)).transpose()
    }

    pub(crate) fn list_runs(&self, session_id: Option<&str>, n: usize) -> Result<Vec<Run>> {
        let c = self.conn()?;
        let rows = wait(c.query(
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE $1::text IS NULL OR session_id = $1
                 ORDER BY started_at DESC, start_order DESC LIMIT $2"
            ),
            &[&session_id, &limit(n)],
        ))
        .map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.run(r)).collect()
    }

    pub(crate) fn mark_interrupted_runs(&self, ending: Option<Ending<'_>>) -> Result<Vec<String>> {
        let owners: Vec<Option<String>> = {
            let c = self.conn()?;
            wait(c.query(
                "SELECT DISTINCT owner FROM runs WHERE status = 'running'",
                &[],
            ))
            .map_err(|e| self.err(e))?
            .iter()
            .map(|r| r.get(0))
            .collect()
        };
        let dead: Vec<Option<String>> = owners
            .into_iter()
            .filter(|o| match o.as_deref() {
                None => true,
                Some(mine) if mine == self.owner_id => false,
                Some(other) => !self.is_alive(other),
            })
            .collect();
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            let now = now_rfc3339();
            let mut ids = Vec::new();
            for o in &dead {
                let rows = tx
                    .query(
                        "UPDATE runs SET status = 'interrupted', reason = $2, ended_at = $3,
                             lease_owner = NULL, lease_expires_at = NULL
                         WHERE status = 'running' AND owner IS NOT DISTINCT FROM $1
                             AND (lease_expires_at IS NULL OR lease_expires_at < now())
                         RETURNING id, started_at",
                        &[o, &INTERRUPTED_REASON, &now],
                    )
                    .await
                    .map_err(|e| self.err(e))?;
                ids.extend(
                    rows.iter()
                        .map(|r| (r.get::<_, String>(1), r.get::<_, String>(0))),
                );
            }
            let ids = self.end_interrupted(&tx, ids, ending).await?;
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok(ids)
        })
    }

    /// The ids of runs just marked interrupted (`(started_at, id)` pairs),
    /// oldest first, each given its terminal event by `ending` in `tx`.
    async fn end_interrupted(
        &self,
        tx: &Transaction<'_>,
        mut marked: Vec<(String, String)>,
        ending: Option<Ending<'_>>,
    ) -> Result<Vec<String>> {
        marked.sort();
        let ids: Vec<String> = marked.into_iter().map(|(_, id)| id).collect();
        if let Some(ending) = ending {
            for id in &ids {
                self.append_ending(tx, id, ending).await?;
            }
        }
        Ok(ids)
    }

    /// Appends `ending`'s event at the run's next seq in `tx` (whose update
    /// holds the run's row), unless the run's stream already ends with a
    /// terminal event (one is all).
    async fn append_ending(
        &self,
        tx: &Transaction<'_>,
        run_id: &str,
        ending: Ending<'_>,
    ) -> Result<()> {
        let last = tx
            .query_opt(
                "SELECT seq, type FROM events WHERE run_id = $1 ORDER BY seq DESC LIMIT 1",
                &[&run_id],
            )
            .await
            .map_err(|e| self.err(e))?;
        let last: Option<(i64, String)> = last.map(|r| (r.get(0), r.get(1)));
        if last
            .as_ref()
            .is_some_and(|(_, kind)| RUN_ENDING.contains(&kind.as_str()))
        {
            return Ok(());
        }
        let next = last.map_or(0, |(seq, _)| seq + 1);
        let seq = crate::to_u64(next);
        let e = checked_ending(ending, run_id, seq)?;
        let json = crate::envelope::stored(&e.json, seq, &e.run_id, &e.ts);
        tx.execute(INSERT_EVENT, &[&e.run_id, &next, &e.ts, &e.kind, &&*json])
            .await
            .map_err(|err| self.event_error(err, run_id, seq, &e.kind))?;
        Ok(())
    }

    // ---- Events

    /// The error for a failed event insert, as the SQLite backend gives it.
    fn event_error(
        &self,
        err: tokio_postgres::Error,
        run_id: &str,
        seq: u64,
        kind: &str,
    ) -> StoreError {
        match code(&err) {
            Some(c) if *c == SqlState::UNIQUE_VIOLATION => StoreError::DuplicateEvent {
                run_id: run_id.to_owned(),
                seq,
            },
            Some(c) if *c == SqlState::FOREIGN_KEY_VIOLATION => not_found("run", run_id),
            Some(c) if *c == SqlState::INVALID_TEXT_REPRESENTATION => StoreError::InvalidArgument(
                format!("event {seq} of run {run_id} ({kind}) is not valid JSON"),
            ),
            _ => self.err(err),
        }
    }

    /// One event transaction: commits without waiting for the WAL flush
    /// (`synchronous_commit = off`, the analogue of SQLite's NORMAL: a
    /// server crash may lose the last events, never corrupt anything).
    async fn event_tx<'c>(&self, c: &'c mut tokio_postgres::Client) -> Result<Transaction<'c>> {
        let tx = c.transaction().await.map_err(|e| self.err(e))?;
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .await
            .map_err(|e| self.err(e))?;
        Ok(tx)
    }

    pub(crate) fn append_event(
        &self,
        run_id: &str,
        seq: u64,
        ts: &str,
        kind: &str,
        json: &str,
    ) -> Result<()> {
        if kind == crate::coalesce::COMPLETED {
            // The insert and the deletion of the deltas it replaces: one transaction.
            return self.append_events(&[EventRecord {
                run_id: run_id.to_owned(),
                seq,
                ts: ts.to_owned(),
                kind: kind.to_owned(),
                json: json.to_owned(),
            }]);
        }
        let seq_i = seq_i64(seq)?;
        let mut c = self.conn()?;
        wait(async {
            let insert = c.statement(INSERT_EVENT).await?;
            // One round trip: BEGIN, the insert and COMMIT are pipelined. A
            // failed insert aborts the transaction, and COMMIT of an aborted
            // transaction rolls it back.
            let json = crate::envelope::stored(json, seq, run_id, ts);
            let params: [&(dyn ToSql + Sync); 5] = [&run_id, &seq_i, &ts, &kind, &&*json];
            let (begin, inserted, commit) = futures_util::join!(
                c.batch_execute("BEGIN; SET LOCAL synchronous_commit = off"),
                c.execute(&insert, &params),
                c.batch_execute("COMMIT"),
            );
            begin.map_err(|e| self.err(e))?;
            inserted.map_err(|e| self.event_error(e, run_id, seq, kind))?;
            commit.map_err(|e| self.err(e))
        })
    }

    pub(crate) fn append_events(&self, batch: &[EventRecord]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut c = self.conn()?;
        wait(async {
            let insert = c.statement(INSERT_EVENT).await?;
            let coalesce = c.statement(COALESCE).await?;
            let tx = self.event_tx(&mut c).await?;
            self.insert_batch(&tx, &insert, &coalesce, batch).await?;
            tx.commit().await.map_err(|e| self.err(e))
        })
    }

    /// Inserts `batch` in the caller's transaction, leaving out the deltas a
    /// completed response later in the batch replaces, then deletes the
    /// deltas each stored completed response replaces (see
    /// [`crate::coalesce`]).
    async fn insert_batch(
        &self,
        tx: &Transaction<'_>,
        insert: &Statement,
        coalesce: &Statement,
        batch: &[EventRecord],
    ) -> Result<()> {
        let seqs = batch
            .iter()
            .map(|e| seq_i64(e.seq))
            .collect::<Result<Vec<_>>>()?;
        let superseded = crate::coalesce::superseded(batch);
        let kept: Vec<(&EventRecord, &i64)> = batch
            .iter()
            .zip(&seqs)
            .zip(superseded)
            .filter(|(_, skip)| !skip)
            .map(|(pair, _)| pair)
            .collect();
        let jsons: Vec<std::borrow::Cow<'_, str>> = kept
            .iter()
            .map(|(e, _)| crate::envelope::stored(&e.json, e.seq, &e.run_id, &e.ts))
            .collect();
        let params: Vec<[&(dyn ToSql + Sync); 5]> = kept
            .iter()
            .zip(&jsons)
            .map(|((e, s), json)| {
                [
                    &e.run_id as &(dyn ToSql + Sync),
                    *s,
                    &e.ts,
                    &e.kind,
                    json as &(dyn ToSql + Sync),
                ]
            })
            .collect();
        // Pipelined: the whole batch goes out without waiting for each
        // answer. After a failure the rest fail too (aborted transaction);
        // the first failure in batch order is the cause.
        let results =
            futures_util::future::join_all(params.iter().map(|p| tx.execute(insert, p))).await;
        for (r, (e, _)) in results.into_iter().zip(&kept) {
            r.map_err(|err| self.event_error(err, &e.run_id, e.seq, &e.kind))?;
        }
        for (e, s) in kept
            .iter()
            .filter(|(e, _)| e.kind == crate::coalesce::COMPLETED)
        {
            tx.execute(coalesce, &[&e.run_id as &(dyn ToSql + Sync), *s])
                .await
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    pub(crate) fn events(&self, run_id: &str) -> Result<Vec<String>> {
        Ok(self
            .events_since(run_id, None)?
            .into_iter()
            .map(|e| e.json)
            .collect())
    }

    pub(crate) fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<String>> {
        Ok(self
            .events_since(run_id, Some(after))?
            .into_iter()
            .map(|e| e.json)
            .collect())
    }

    pub(crate) fn events_since(
        &self,
        run_id: &str,
        after: Option<u64>,
    ) -> Result<Vec<StoredEvent>> {
        let after = after.map_or(-1, to_i64);
        let mut c = self.conn()?;
        let rows = wait(async {
            let select = c.statement(EVENTS_SINCE).await?;
            c.query(&select, &[&run_id, &after])
                .await
                .map_err(|e| self.err(e))
        })?;
        Ok(rows
            .iter()
            .map(|r| {
                let seq = to_u64(r.get(0));
                let ts: String = r.get(1);
                StoredEvent {
                    seq,
                    json: crate::envelope::envelope(r.get(2), seq, run_id, &ts),
                }
            })
            .collect())
    }

    pub(crate) fn append_next_event(
        &self,
        run_id: &str,
        ts: &str,
        kind: &str,
        json: impl FnOnce(u64) -> String + Send,
    ) -> Result<u64> {
        let mut c = self.conn()?;
        wait(async {
            let lock = c.statement(LOCK_RUN).await?;
            let next_seq = c.statement(NEXT_SEQ).await?;
            let insert = c.statement(INSERT_EVENT).await?;
            let tx = self.event_tx(&mut c).await?;
            // The run's row lock serialises appenders of this run in every
            // process; NO KEY keeps plain inserts (which take KEY SHARE for
            // the foreign key) unblocked. Read committed: the MAX below sees
            // what the previous holder committed.
            if tx
                .query_opt(&lock, &[&run_id])
                .await
                .map_err(|e| self.err(e))?
                .is_none()
            {
                return Err(not_found("run", run_id));
            }
            let next: i64 = tx
                .query_one(&next_seq, &[&run_id])
                .await
                .map_err(|e| self.err(e))?
                .get(0);
            let seq = to_u64(next);
            let json = json(seq);
            let json = crate::envelope::stored(&json, seq, run_id, ts);
            tx.execute(&insert, &[&run_id, &next, &ts, &kind, &&*json])
                .await
                .map_err(|e| self.event_error(e, run_id, seq, kind))?;
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok(seq)
        })
    }

    // ---- Leases

    pub(crate) fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<LeaseClaim> {
        check_ttl(ttl)?;
        let secs = ttl.as_secs_f64();
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            let row = tx
                .query_opt(
                    &format!(
                        "SELECT status, lease_owner, lease_expires_at > now(),
                             to_char(lease_expires_at AT TIME ZONE 'UTC', {RFC3339})
                         FROM runs WHERE id = $1 FOR UPDATE"
                    ),
                    &[&run_id],
                )
                .await
                .map_err(|e| self.err(e))?
                .ok_or_else(|| not_found("run", run_id))?;
            let status: RunStatus = self.parse(row.get(0))?;
            if status != RunStatus::Running {
                return Err(StoreError::RunNotRunning {
                    id: run_id.to_owned(),
                    status: status.to_string(),
                });
            }
            let holder: Option<String> = row.get(1);
            let live: Option<bool> = row.get(2);
            let took_over_from = match holder {
                Some(h) if h != owner && live == Some(true) => {
                    return Err(lease_held(run_id, h, row.get(3)));
                }
                Some(h) if h != owner => Some(h),
                _ => None,
            };
            let expires_at: String = tx
                .query_one(
                    &format!(
                        "UPDATE runs SET lease_owner = $2,
                             lease_expires_at = now() + make_interval(secs => $3)
                         WHERE id = $1
                         RETURNING to_char(lease_expires_at AT TIME ZONE 'UTC', {RFC3339})"
                    ),
                    &[&run_id, &owner, &secs],
                )
                .await
                .map_err(|e| self.err(e))?
                .get(0);
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok(LeaseClaim {
                run_id: run_id.to_owned(),
                owner: owner.to_owned(),
                expires_at,
                took_over_from,
            })
        })
    }

    pub(crate) fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<String> {
        check_ttl(ttl)?;
        let secs = ttl.as_secs_f64();
        let c = self.conn()?;
        let row = wait(c.query_opt(
            &format!(
                "UPDATE runs SET lease_expires_at = now() + make_interval(secs => $3)
                 WHERE id = $1 AND lease_owner = $2 AND status = 'running'
                 RETURNING to_char(lease_expires_at AT TIME ZONE 'UTC', {RFC3339})"
            ),
            &[&run_id, &owner, &secs],
        ))
        .map_err(|e| self.err(e))?;
        if let Some(r) = row {
            return Ok(r.get(0));
        }
        let exists = wait(c.query_opt("SELECT 1 FROM runs WHERE id = $1", &[&run_id]))
            .map_err(|e| self.err(e))?;
        if exists.is_none() {
            return Err(not_found("run", run_id));
        }
        Err(StoreError::LeaseLost {
            run_id: run_id.to_owned(),
            owner: owner.to_owned(),
        })
    }

    pub(crate) fn interrupt_expired_leases(
        &self,
        ending: Option<Ending<'_>>,
    ) -> Result<Vec<String>> {
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            let rows = tx
                .query(
                    "UPDATE runs SET status = 'interrupted', reason = $1, ended_at = $2,
                         lease_owner = NULL, lease_expires_at = NULL
                     WHERE status = 'running' AND lease_expires_at < now()
                     RETURNING id, started_at",
                    &[&LEASE_EXPIRED_REASON, &now_rfc3339()],
                )
                .await
                .map_err(|e| self.err(e))?;
            let ids: Vec<(String, String)> = rows
                .iter()
                .map(|r| (r.get::<_, String>(1), r.get::<_, String>(0)))
                .collect();
            let ids = self.end_interrupted(&tx, ids, ending).await?;
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok(ids)
        })
    }

    pub(crate) fn expired_leases(&self) -> Result<Vec<String>> {
        let c = self.conn()?;
        let rows = wait(c.query(
            "SELECT id FROM runs WHERE status = 'running' AND lease_expires_at < now()
             ORDER BY started_at, start_order",
            &[],
        ))
        .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub(crate) fn save_checkpoint(&self, run_id: &str, json: &str) -> Result<()> {
        let c = self.conn()?;
        let n = wait(c.execute(
            "UPDATE runs SET checkpoint = $2 WHERE id = $1 AND status = 'running'",
            &[&run_id, &json],
        ))
        .map_err(|e| self.err(e))?;
        if n == 1 {
            return Ok(());
        }
        let status = wait(c.query_opt("SELECT status FROM runs WHERE id = $1", &[&run_id]))
            .map_err(|e| self.err(e))?
            .ok_or_else(|| not_found("run", run_id))?;
        Err(StoreError::RunNotRunning {
            id: run_id.to_owned(),
            status: status.get(0),
        })
    }

    pub(crate) fn run_checkpoint(&self, run_id: &str) -> Result<Option<String>> {
        let c = self.conn()?;
        let row = wait(c.query_opt("SELECT checkpoint FROM runs WHERE id = $1", &[&run_id]))
            .map_err(|e| self.err(e))?
            .ok_or_else(|| not_found("run", run_id))?;
        Ok(row.get(0))
    }

    // ---- Approvals

    pub(crate) fn record_approval(&self, a: &NewApproval<'_>) -> Result<Approval> {
        let reasons = serde_json::to_string(a.reasons)
            .map_err(|e| StoreError::InvalidArgument(format!("approval reasons: {e}")))?;
        let decided_at = now_rfc3339();
        let grant = crate::approvals::grant_json(a)?;
        let mut c = self.conn()?;
        wait(async {
            let tx = c.transaction().await.map_err(|e| self.err(e))?;
            self.require(&tx, "runs", "run", a.run_id, false).await?;
            tx.execute(
                "INSERT INTO approvals (id, run_id, task_id, action, command, cwd, risk, reasons,
                     decision, decided_by, created_at, decided_at, grant_json)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::json, $9, $10, $11, $12, $13)",
                &[
                    &a.id,
                    &a.run_id,
                    &a.task_id,
                    &a.action,
                    &a.command,
                    &a.cwd,
                    &a.risk,
                    &reasons,
                    &a.decision.as_str(),
                    &a.decided_by.as_str(),
                    &a.requested_at,
                    &decided_at,
                    &grant,
                ],
            )
            .await
            .map_err(|e| match code(&e) {
                Some(c) if *c == SqlState::UNIQUE_VIOLATION => {
                    StoreError::InvalidArgument(format!(
                        "approval {} is already recorded (an approval is decided once)",
                        a.id
                    ))
                }
                _ => self.err(e),
            })?;
            tx.commit().await.map_err(|e| self.err(e))
        })?;
        Ok(Approval {
            id: a.id.to_owned(),
            run_id: a.run_id.to_owned(),
            task_id: a.task_id.to_owned(),
            action: a.action.to_owned(),
            command: a.command.to_owned(),
            cwd: a.cwd.to_owned(),
            risk: a.risk.to_owned(),
            reasons: a.reasons.to_vec(),
            decision: a.decision,
            decided_by: a.decided_by,
            grant: a.grant,
            created_at: a.requested_at.to_owned(),
            decided_at,
        })
    }

    pub(crate) fn list_approvals(&self, run_id: Option<&str>, n: usize) -> Result<Vec<Approval>> {
        let c = self.conn()?;
        let rows = wait(c.query(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM (
                     SELECT ord, {APPROVAL_COLUMNS} FROM approvals
                     WHERE $1::text IS NULL OR run_id = $1
                     ORDER BY created_at DESC, ord DESC LIMIT $2
                 ) recent ORDER BY created_at, ord"
            ),
            &[&run_id, &limit(n)],
        ))
        .map_err(|e| self.err(e))?;
        rows.iter().map(|r| self.approval(r)).collect()
    }
}
