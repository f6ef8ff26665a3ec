//! The approval audit trail: every decision on a risky action, whoever made it.

use rusqlite::{Row, ffi, params};

use crate::error::{Result, StoreError};
use crate::{Approval, Durability, NewApproval, SqliteStore, constraint_code, now_rfc3339};

const COLUMNS: &str = "id, run_id, task_id, action, command, cwd, risk, reasons, decision, \
                       decided_by, created_at, decided_at, grant_json";

fn from_row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    let reasons: String = r.get(7)?;
    let reasons = serde_json::from_str(&reasons).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(7, rusqlite::types::Type::Text, e.into())
    })?;
    Ok(Approval {
        id: r.get(0)?,
        run_id: r.get(1)?,
        task_id: r.get(2)?,
        action: r.get(3)?,
        command: r.get(4)?,
        cwd: r.get(5)?,
        risk: r.get(6)?,
        reasons,
        decision: r.get(8)?,
        decided_by: r.get(9)?,
        created_at: r.get(10)?,
        decided_at: r.get(11)?,
        grant: r
            .get::<_, Option<String>>(12)?
            .map(|g| serde_json::from_str(&g))
            .transpose()
            .map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(12, rusqlite::types::Type::Text, e.into())
            })?,
    })
}

/// The grant as stored: JSON text, or NULL.
pub(crate) fn grant_json(a: &NewApproval<'_>) -> Result<Option<String>> {
    a.grant
        .map(|g| serde_json::to_string(&g))
        .transpose()
        .map_err(|e| StoreError::InvalidArgument(format!("approval grant: {e}")))
}

impl SqliteStore {
    /// Records a decision, durably (it is an audit record). `decided_at` is
    /// now. The run must exist ([`StoreError::NotFound`]); an approval id is
    /// recorded once ([`StoreError::InvalidArgument`] on a second record).
    pub fn record_approval(&self, a: &NewApproval<'_>) -> Result<Approval> {
        let reasons = serde_json::to_string(a.reasons)
            .map_err(|e| StoreError::InvalidArgument(format!("approval reasons: {e}")))?;
        let decided_at = now_rfc3339();
        let grant = grant_json(a)?;
        self.write(Durability::Durable, |c| {
            self.require(c, "runs", "run", a.run_id)?;
            c.prepare_cached(
                "INSERT INTO approvals (id, run_id, task_id, action, command, cwd, risk, reasons,
                     decision, decided_by, created_at, decided_at, grant_json)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    a.id,
                    a.run_id,
                    a.task_id,
                    a.action,
                    a.command,
                    a.cwd,
                    a.risk,
                    reasons,
                    a.decision,
                    a.decided_by,
                    a.requested_at,
                    decided_at,
                    grant
                ])
            })
            .map_err(|e| match constraint_code(&e) {
                Some(ffi::SQLITE_CONSTRAINT_PRIMARYKEY) => StoreError::InvalidArgument(format!(
                    "approval {} is already recorded (an approval is decided once)",
                    a.id
                )),
                _ => self.sql(e),
            })?;
            Ok(())
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

    /// The `limit` most recent approvals (of one run when `run_id` is given,
    /// of every run otherwise), oldest first.
    pub fn list_approvals(&self, run_id: Option<&str>, limit: usize) -> Result<Vec<Approval>> {
        self.with_conn(|c| {
            let mut stmt = c
                .prepare_cached(&format!(
                    // rowid breaks ties in insertion order: two decisions in
                    // the same millisecond would otherwise sort by random id.
                    "SELECT {COLUMNS} FROM (
                         SELECT rowid AS seq_, {COLUMNS} FROM approvals WHERE ?1 IS NULL OR run_id = ?1
                         ORDER BY created_at DESC, rowid DESC LIMIT ?2
                     ) ORDER BY created_at, seq_"
                ))
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map(params![run_id, crate::limit(limit)], from_row)
                .map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })
    }
}
