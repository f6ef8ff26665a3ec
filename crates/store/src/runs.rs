//! Runs: one orchestrator execution each, from `running` to a terminal status.

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::{Result, StoreError};
use crate::lease::Ending;
use crate::quota::{Usage as QuotaUsage, windows};
use crate::{
    Durability, EventRecord, Quota, Role, Run, RunEnding, RunStatus, Session, SqliteStore, Turn,
    Usage, now_rfc3339, owner, to_i64, to_u64,
};

const COLUMNS: &str = "id, session_id, status, reason, model, input_tokens, output_tokens, \
                       cost_usd, started_at, ended_at";

/// The reason given to runs whose process died.
pub const INTERRUPTED_REASON: &str = "process-exited";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        id: r.get(0)?,
        session_id: r.get(1)?,
        status: r.get(2)?,
        reason: r.get(3)?,
        model: r.get(4)?,
        usage: Usage {
            input_tokens: to_u64(r.get(5)?),
            output_tokens: to_u64(r.get(6)?),
            cost_usd: Some(r.get::<_, f64>(7)?).filter(|c| *c != 0.0),
            estimated: false,
        },
        started_at: r.get(8)?,
        ended_at: r.get(9)?,
    })
}

impl SqliteStore {
    /// Starts a run of a session (which must exist) with status `running`.
    /// The run records this store's owner lock, so other processes know it
    /// is alive (see [`Store::mark_interrupted_runs`]).
    pub fn start_run(&self, session_id: &str, model: &str) -> Result<Run> {
        self.insert_run(session_id, model, false, None)
    }

    /// [`SqliteStore::start_run`], refused with [`StoreError::SessionBusy`]
    /// while another run of the session is `running` (in any process), and
    /// with [`StoreError::QuotaExceeded`] when `quota`'s user has no room
    /// for another run; the run records `quota`'s user.
    pub fn start_run_exclusive(
        &self,
        session_id: &str,
        model: &str,
        quota: Option<&Quota>,
    ) -> Result<Run> {
        self.insert_run(session_id, model, true, quota)
    }

    /// [`SqliteStore::start_run_exclusive`] and the user's turn `message`
    /// of the new run, in one durable commit: neither without the other.
    pub fn start_run_with_turn(
        &self,
        session_id: &str,
        model: &str,
        quota: Option<&Quota>,
        message: &str,
    ) -> Result<(Run, Turn)> {
        let run = Run::starting(session_id, model);
        let turn = self.write(Durability::Durable, |c| {
            self.insert_run_row(c, &run, true, quota)?;
            self.insert_turn(c, session_id, Some(&run.id), Role::User, message)
        })?;
        Ok((run, turn))
    }

    /// A new session (bound to an existing workspace, if given), its first
    /// run and the user's turn `message`, in one durable commit; nothing is
    /// stored when `quota` refuses the run. A message that starts a session
    /// pays one flush instead of two.
    pub fn start_run_with_turn_in_new_session(
        &self,
        title: &str,
        workspace_id: Option<&str>,
        model: &str,
        quota: Option<&Quota>,
        message: &str,
    ) -> Result<(Session, Run, Turn)> {
        let session = Session::new(title, workspace_id);
        let run = Run::starting(&session.id, model);
        let turn = self.write(Durability::Durable, |c| {
            self.insert_session(c, &session)?;
            self.insert_run_row(c, &run, true, quota)?;
            self.insert_turn(c, &session.id, Some(&run.id), Role::User, message)
        })?;
        Ok((session, run, turn))
    }

    fn insert_run(
        &self,
        session_id: &str,
        model: &str,
        exclusive: bool,
        quota: Option<&Quota>,
    ) -> Result<Run> {
        let run = Run::starting(session_id, model);
        self.write(Durability::Durable, |c| {
            self.insert_run_row(c, &run, exclusive, quota)
        })?;
        Ok(run)
    }

    /// A new session with its first run, `running`, in one commit that is not
    /// flushed: for a caller that makes a session only to run one thing in it
    /// (`capstan invoke`), whose next durable write (a command's audited
    /// verdict, the run's end) flushes the WAL, and this commit with it, since
    /// the WAL is written in order. A process crash keeps it; a power loss before
    /// that write loses a run that had done nothing yet.
    pub fn start_run_in_new_session(
        &self,
        title: &str,
        workspace_id: Option<&str>,
        model: &str,
    ) -> Result<(Session, Run)> {
        let session = Session::new(title, workspace_id);
        let run = Run::starting(&session.id, model);
        self.write(Durability::Fast, |c| {
            self.insert_session(c, &session)?;
            self.insert_run_row(c, &run, false, None)
        })?;
        Ok((session, run))
    }

    /// Checks and inserts `run` within the caller's transaction (see
    /// [`SqliteStore::start_run_exclusive`] for `exclusive` and `quota`).
    fn insert_run_row(
        &self,
        c: &Connection,
        run: &Run,
        exclusive: bool,
        quota: Option<&Quota>,
    ) -> Result<()> {
        let (session_id, model) = (run.session_id.as_str(), run.model.as_str());
        self.require(c, "sessions", "session", session_id)?;
        // The write lock is held (IMMEDIATE): no other process can start
        // a run of this session (or of this user) between the checks and
        // the insert.
        if exclusive {
            let running: Option<String> = c
                .prepare_cached(
                    "SELECT id FROM runs WHERE session_id = ?1 AND status = 'running' LIMIT 1",
                )
                .and_then(|mut s| s.query_row([session_id], |r| r.get(0)).optional())
                .map_err(|e| self.sql(e))?;
            if let Some(run_id) = running {
                return Err(StoreError::SessionBusy {
                    id: session_id.to_owned(),
                    run_id,
                });
            }
        }
        if let Some(quota) = quota {
            let (minute, day) = windows();
            let usage = c
                .prepare_cached(
                    "SELECT
                       (SELECT count(*) FROM runs WHERE user_name = ?1 AND status = 'running'),
                       (SELECT count(*) FROM runs WHERE user_name = ?1 AND started_at > ?2),
                       (SELECT min(started_at) FROM runs WHERE user_name = ?1 AND started_at > ?2),
                       (SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM runs
                          WHERE user_name = ?1 AND started_at > ?3),
                       (SELECT min(started_at) FROM runs WHERE user_name = ?1 AND started_at > ?3),
                       (SELECT coalesce(sum(cost_usd), 0.0) FROM runs
                          WHERE user_name = ?1 AND started_at > ?3)",
                )
                .and_then(|mut s| {
                    s.query_row(params![quota.user, minute, day], |r| {
                        Ok(QuotaUsage {
                            running: r.get::<_, i64>(0)? as u64,
                            last_minute: r.get::<_, i64>(1)? as u64,
                            oldest_in_minute: r.get(2)?,
                            tokens_day: r.get::<_, i64>(3)? as u64,
                            oldest_in_day: r.get(4)?,
                            cost_day: r.get(5)?,
                        })
                    })
                })
                .map_err(|e| self.sql(e))?;
            quota.admit(&usage)?;
        }
        c.prepare_cached(
            "INSERT INTO runs (id, session_id, status, model, owner, started_at, user_name)
             VALUES (?1, ?2, 'running', ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut s| {
            s.execute(params![
                run.id,
                session_id,
                model,
                self.owner_id(),
                run.started_at,
                quota.map(|q| q.user.as_str())
            ])
        })
        .map_err(|e| self.sql(e))?;
        c.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![session_id, run.started_at]))
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Ends a run: sets its terminal `status`, `reason` and `ended_at`.
    ///
    /// `usage`, when given, is the run's **final totals**: it replaces what
    /// [`Store::add_usage`] accumulated for the run, and the session's totals
    /// move by the difference, so nothing is counted twice whichever way the
    /// caller reports usage. `None` keeps the accumulated totals.
    ///
    /// Fails with [`StoreError::InvalidArgument`] for `status == Running`,
    /// [`StoreError::NotFound`] for an unknown run, and
    /// [`StoreError::RunNotRunning`] when the run has already ended (also
    /// when a start-up marked it `interrupted`): a run ends once.
    pub fn finish_run(
        &self,
        id: &str,
        status: RunStatus,
        reason: Option<&str>,
        usage: Option<Usage>,
    ) -> Result<()> {
        self.finish_run_with_events(id, status, reason, usage, &[])
    }

    /// [`SqliteStore::finish_run`] that also appends the run's last events
    /// in the same transaction: a reader sees them and the terminal status
    /// together, or neither. Nothing is stored when the run cannot end.
    pub fn finish_run_with_events(
        &self,
        id: &str,
        status: RunStatus,
        reason: Option<&str>,
        usage: Option<Usage>,
        last: &[EventRecord],
    ) -> Result<()> {
        let ending = RunEnding {
            id,
            status,
            reason,
            usage,
            last,
            answer: None,
        };
        self.finish_run_with_answer(&ending).0
    }

    /// [`SqliteStore::finish_run_with_events`] and, when the ending has one,
    /// [`SqliteStore::record_answer`] of its answer, in one durable commit. The
    /// answer is written under a savepoint, so that its failure does not keep
    /// the run from ending; a run that cannot end still gets its answer,
    /// recorded alone. Returns the end's result, then the answer's (`Ok`
    /// without one).
    pub fn finish_run_with_answer(&self, e: &RunEnding<'_>) -> (Result<()>, Result<()>) {
        let record_alone = || {
            e.answer.map_or(Ok(()), |a| {
                self.record_answer(a.session_id, e.id, a.answer, a.summary)
            })
        };
        if let Err(err) = check_terminal(e.id, e.status) {
            return (Err(err), record_alone());
        }
        let mut saved = Ok(());
        let ended = self.write(Durability::Durable, |c| {
            if let Some(a) = &e.answer {
                saved = self.in_savepoint(c, |c| {
                    self.save_answer(c, a.session_id, e.id, a.answer, a.summary)
                });
            }
            self.finish_in(c, e)
        });
        match ended {
            Ok(()) => {
                if !e.last.is_empty() {
                    self.notifier.bump();
                }
                (Ok(()), saved)
            }
            // Nothing was committed, the answer included.
            Err(err) => (Err(err), record_alone()),
        }
    }

    /// Ends a `running` run in the caller's transaction: its last events, its
    /// status and usage, the session's usage.
    fn finish_in(&self, c: &Connection, e: &RunEnding<'_>) -> Result<()> {
        let &RunEnding {
            id,
            status,
            reason,
            usage,
            last,
            ..
        } = e;
        let current = c
            .prepare_cached(
                "SELECT session_id, status, input_tokens, output_tokens, cost_usd
                 FROM runs WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.query_row([id], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, RunStatus>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, f64>(4)?,
                    ))
                })
                .optional()
            })
            .map_err(|e| self.sql(e))?;
        let Some((session_id, old_status, old_in, old_out, old_cost)) = current else {
            return Err(StoreError::NotFound {
                what: "run",
                id: id.to_owned(),
            });
        };
        if old_status != RunStatus::Running {
            return Err(StoreError::RunNotRunning {
                id: id.to_owned(),
                status: old_status.to_string(),
            });
        }
        let (new_in, new_out, new_cost) = final_usage(usage, (old_in, old_out, old_cost));
        self.insert_batch(c, last)?;
        c.prepare_cached(
            "UPDATE runs SET status = ?2, reason = ?3, ended_at = ?4,
                 lease_owner = NULL, lease_expires_at = NULL, input_tokens = ?5, output_tokens = ?6, cost_usd = ?7
             WHERE id = ?1",
        )
        .and_then(|mut s| {
            s.execute(params![
                id,
                status,
                reason,
                now_rfc3339(),
                new_in,
                new_out,
                new_cost
            ])
        })
        .map_err(|e| self.sql(e))?;
        self.bump_session_usage(
            c,
            &session_id,
            new_in - old_in,
            new_out - old_out,
            new_cost - old_cost,
        )
    }

    pub fn get_run(&self, id: &str) -> Result<Option<Run>> {
        self.with_conn(|c| {
            c.prepare_cached(&format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"))
                .and_then(|mut s| s.query_row([id], from_row).optional())
                .map_err(|e| self.sql(e))
        })
    }

    /// The `running` run whose stream has requested approval `approval_id`
    /// (an `approval.requested` event), if any: how a replica that does not
    /// run it finds the run an answer is for. Reads only running runs'
    /// events.
    pub fn running_run_with_approval(&self, approval_id: &str) -> Result<Option<Run>> {
        self.with_conn(|c| {
            c.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM runs WHERE status = 'running' AND id IN (
                     SELECT e.run_id FROM events e JOIN runs r ON r.id = e.run_id
                     WHERE r.status = 'running' AND e.type = 'approval.requested'
                         AND json_extract(e.json, '$.approval_id') = ?1)
                 LIMIT 1"
            ))
            .and_then(|mut s| s.query_row([approval_id], from_row).optional())
            .map_err(|e| self.sql(e))
        })
    }

    /// The `limit` most recent runs, newest first; of one session when
    /// `session_id` is given, of all sessions otherwise.
    pub fn list_runs(&self, session_id: Option<&str>, limit: usize) -> Result<Vec<Run>> {
        self.with_conn(|c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM runs WHERE ?1 IS NULL OR session_id = ?1
                     ORDER BY started_at DESC, rowid DESC LIMIT ?2"
                ))
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map(params![session_id, crate::limit(limit)], from_row)
                .map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })
    }

    /// Marks `interrupted` (reason `process-exited`) every run still
    /// `running` whose process is gone, and returns their ids, oldest first.
    /// Call it at start-up so the UI never shows a run spinning forever.
    ///
    /// Which runs count as gone: those whose owner lock (see `owner.rs`) is
    /// no longer held, and those that recorded no owner. Runs of this store
    /// and of other live processes sharing the file are left alone, so it is
    /// safe to call at any time. One exception: when this file system cannot
    /// lock, runs record no owner and this store's own runs look gone too;
    /// then call it only before starting any run.
    pub fn mark_interrupted_runs(&self, ending: Option<Ending<'_>>) -> Result<Vec<String>> {
        let owners: BTreeSet<Option<String>> = self.with_conn(|c| {
            let mut stmt = c
                .prepare_cached("SELECT DISTINCT owner FROM runs WHERE status = 'running'")
                .map_err(|e| self.sql(e))?;
            let rows = stmt.query_map([], |r| r.get(0)).map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })?;
        // Decide liveness outside the write transaction: it opens files.
        let dead: Vec<Option<String>> = owners
            .into_iter()
            .filter(|o| match o.as_deref() {
                None => true,
                Some(mine) if Some(mine) == self.owner_id() => false,
                Some(other) => !owner::is_alive(&self.path, other),
            })
            .collect();
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        self.write(Durability::Durable, |c| {
            let now = now_rfc3339();
            let mut ids = Vec::new();
            for o in &dead {
                let mut stmt = c
                    .prepare_cached(
                        "UPDATE runs SET status = 'interrupted', reason = ?2, ended_at = ?3,
                             lease_owner = NULL, lease_expires_at = NULL
                         WHERE status = 'running' AND owner IS ?1
                             AND (lease_expires_at IS NULL OR lease_expires_at < ?3)
                         RETURNING id, started_at",
                    )
                    .map_err(|e| self.sql(e))?;
                let rows = stmt
                    .query_map(params![o, INTERRUPTED_REASON, now], |r| {
                        Ok((r.get::<_, String>(1)?, r.get::<_, String>(0)?))
                    })
                    .map_err(|e| self.sql(e))?;
                for row in rows {
                    ids.push(row.map_err(|e| self.sql(e))?);
                }
            }
            ids.sort();
            let ids: Vec<String> = ids.into_iter().map(|(_, id)| id).collect();
            if let Some(ending) = ending {
                for id in &ids {
                    self.append_ending(c, id, ending)?;
                }
            }
            Ok(ids)
        })
        .inspect(|ids| {
            if ending.is_some() && !ids.is_empty() {
                self.notifier.bump();
            }
        })
    }
}

/// A run's usage columns `(input_tokens, output_tokens, cost_usd)` at its end:
/// the totals it ended with, or `stored` when it gave none.
pub(crate) fn final_usage(usage: Option<Usage>, stored: (i64, i64, f64)) -> (i64, i64, f64) {
    match usage {
        Some(u) => (
            to_i64(u.input_tokens),
            to_i64(u.output_tokens),
            u.cost_usd.unwrap_or(0.0),
        ),
        None => stored,
    }
}

/// The run's end must be a terminal status.
fn check_terminal(id: &str, status: RunStatus) -> Result<()> {
    if status == RunStatus::Running {
        return Err(StoreError::InvalidArgument(format!(
            "finish_run({id}) needs a terminal status, not running"
        )));
    }
    Ok(())
}
