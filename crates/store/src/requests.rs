//! Requests for the replica that owns a run: a cancel or an approval decision
//! posted to a replica that is not running the run waits in `run_requests`
//! until the owner takes it. The owner polls with the targets it serves (its
//! runs' ids and its open approvals' ids) and takes each request once
//! (a delete that returns the rows), so a request is applied by exactly one
//! replica. A request nobody takes can be withdrawn by its sender.

use rusqlite::params;

use crate::error::{Result, StoreError};
use crate::pg::{PgStore, wait};
use crate::{Decision, Durability, SqliteStore, now_rfc3339};

/// What a replica asks of a run's owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunRequestKind {
    /// Cancel the run whose id is the target.
    Cancel,
    /// Answer the approval whose id is the target.
    Decide {
        /// The person's answer.
        decision: Decision,
        /// Who answered (the frontend and credential, as the audit records it).
        decided_by: Option<String>,
    },
}

/// One request taken by [`crate::Store::take_run_requests`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRequest {
    /// Row id, increasing in the order the requests were added.
    pub id: i64,
    /// A run id ([`RunRequestKind::Cancel`]) or an approval id ([`RunRequestKind::Decide`]).
    pub target: String,
    /// What the owner of the run is asked to do.
    pub kind: RunRequestKind,
    /// When a replica added it (RFC 3339, UTC), as the store wrote it.
    pub created_at: String,
}

fn columns(kind: &RunRequestKind) -> (&'static str, Option<&str>, Option<&str>) {
    match kind {
        RunRequestKind::Cancel => ("cancel", None, None),
        RunRequestKind::Decide {
            decision,
            decided_by,
        } => ("decide", Some(decision.as_str()), decided_by.as_deref()),
    }
}

fn request(
    id: i64,
    target: String,
    kind: String,
    decision: Option<String>,
    decided_by: Option<String>,
    created_at: String,
) -> Result<RunRequest> {
    let kind = match (kind.as_str(), decision) {
        ("cancel", _) => RunRequestKind::Cancel,
        ("decide", Some(decision)) => RunRequestKind::Decide {
            decision: decision
                .parse()
                .map_err(|e| StoreError::InvalidArgument(format!("run request {id}: {e}")))?,
            decided_by,
        },
        (other, _) => {
            return Err(StoreError::InvalidArgument(format!(
                "run request {id} has an unknown kind `{other}`"
            )));
        }
    };
    Ok(RunRequest {
        id,
        target,
        kind,
        created_at,
    })
}

fn check_target(target: &str) -> Result<()> {
    if target.is_empty() {
        return Err(StoreError::InvalidArgument(
            "a run request needs a target (a run or approval id)".into(),
        ));
    }
    Ok(())
}

impl SqliteStore {
    pub fn add_run_request(&self, target: &str, kind: &RunRequestKind) -> Result<i64> {
        check_target(target)?;
        let (kind, decision, decided_by) = columns(kind);
        let now = now_rfc3339();
        let id = self.write(Durability::Durable, |c| {
            c.prepare_cached(
                "INSERT INTO run_requests (target, kind, decision, decided_by, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut s| s.execute(params![target, kind, decision, decided_by, now]))
            .map_err(|e| self.sql(e))?;
            Ok(c.last_insert_rowid())
        })?;
        Ok(id)
    }

    pub fn take_run_requests(&self, targets: &[String]) -> Result<Vec<RunRequest>> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        self.write(Durability::Durable, |c| {
            let mut out = Vec::new();
            let mut stmt = c
                .prepare_cached(
                    "DELETE FROM run_requests WHERE target = ?1
                     RETURNING id, target, kind, decision, decided_by, created_at",
                )
                .map_err(|e| self.sql(e))?;
            for target in targets {
                let rows = stmt
                    .query_map([target], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, Option<String>>(3)?,
                            r.get::<_, Option<String>>(4)?,
                            r.get::<_, String>(5)?,
                        ))
                    })
                    .map_err(|e| self.sql(e))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(|e| self.sql(e))?;
                for (id, target, kind, decision, by, at) in rows {
                    out.push(request(id, target, kind, decision, by, at)?);
                }
            }
            out.sort_by_key(|r| r.id);
            Ok(out)
        })
    }

    pub fn withdraw_run_request(&self, id: i64) -> Result<bool> {
        self.write(Durability::Durable, |c| {
            let n = c
                .prepare_cached("DELETE FROM run_requests WHERE id = ?1")
                .and_then(|mut s| s.execute([id]))
                .map_err(|e| self.sql(e))?;
            Ok(n > 0)
        })
    }

    pub fn run_request_pending(&self, id: i64) -> Result<bool> {
        self.with_conn(|c| {
            let n: i64 = c
                .prepare_cached("SELECT COUNT(*) FROM run_requests WHERE id = ?1")
                .and_then(|mut s| s.query_row([id], |r| r.get(0)))
                .map_err(|e| self.sql(e))?;
            Ok(n > 0)
        })
    }
}

impl PgStore {
    pub(crate) fn add_run_request(&self, target: &str, kind: &RunRequestKind) -> Result<i64> {
        check_target(target)?;
        let (kind, decision, decided_by) = columns(kind);
        let now = now_rfc3339();
        let c = self.conn()?;
        let row = wait(c.query_one(
            "INSERT INTO run_requests (target, kind, decision, decided_by, created_at)
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
            &[&target, &kind, &decision, &decided_by, &now],
        ))
        .map_err(|e| self.err(e))?;
        Ok(row.get(0))
    }

    pub(crate) fn take_run_requests(&self, targets: &[String]) -> Result<Vec<RunRequest>> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.conn()?;
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        let rows = wait(c.query(
            "DELETE FROM run_requests WHERE target = ANY($1)
             RETURNING id, target, kind, decision, decided_by, created_at",
            &[&targets],
        ))
        .map_err(|e| self.err(e))?;
        let mut out = rows
            .into_iter()
            .map(|r| request(r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
            .collect::<Result<Vec<_>>>()?;
        out.sort_by_key(|r| r.id);
        Ok(out)
    }

    pub(crate) fn withdraw_run_request(&self, id: i64) -> Result<bool> {
        let c = self.conn()?;
        let n = wait(c.execute("DELETE FROM run_requests WHERE id = $1", &[&id]))
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    pub(crate) fn run_request_pending(&self, id: i64) -> Result<bool> {
        let c = self.conn()?;
        let row = wait(c.query_opt("SELECT 1 FROM run_requests WHERE id = $1", &[&id]))
            .map_err(|e| self.err(e))?;
        Ok(row.is_some())
    }
}
