//! What replicas sharing one database need from the store, SQLite side:
//! store-assigned event seqs, reading after a cursor, and run leases. The
//! PostgreSQL side is in `pg/`; [`crate::Store`] documents the contract.

use std::time::{Duration, SystemTime};

use rusqlite::{OptionalExtension, params};

use capstan_protocol::event::RUN_ENDING;

use crate::error::{Result, StoreError};
use crate::{Durability, RunStatus, SqliteStore, format_rfc3339_millis, now_rfc3339};

/// The reason given to runs interrupted because their lease expired (the
/// replica running them stopped renewing it: it died or lost the database).
pub const LEASE_EXPIRED_REASON: &str = "lease-expired";

/// Builds the terminal event of a run the store marks `interrupted`, given
/// the run's id and the seq it will carry (the run's next). The store appends
/// it in the transaction that marks the run, so a run is never `interrupted`
/// without the event that ends its stream.
pub type Ending<'a> = &'a (dyn Fn(&str, u64) -> crate::EventRecord + Sync);

/// `ending`'s event for `run_id` at `seq`, refused if it names another run
/// or seq (it would be stored where its envelope does not say).
pub(crate) fn checked_ending(
    ending: Ending<'_>,
    run_id: &str,
    seq: u64,
) -> Result<crate::EventRecord> {
    let e = ending(run_id, seq);
    if e.run_id != run_id || e.seq != seq {
        return Err(StoreError::InvalidArgument(format!(
            "the ending event built for run {run_id} at seq {seq} names run {} at seq {}",
            e.run_id, e.seq
        )));
    }
    Ok(e)
}

/// One stored event with its seq (the cursor for [`crate::Store::events_since`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    /// The event's seq within its run (from 0; coalesced deltas are gaps).
    pub seq: u64,
    /// The envelope, verbatim as appended.
    pub json: String,
}

/// A lease on a run, as granted by [`crate::Store::claim_run`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseClaim {
    /// The run claimed.
    pub run_id: String,
    /// The owner that now holds the lease (the caller's own name).
    pub owner: String,
    /// RFC 3339 (milliseconds, UTC), by the database's clock on PostgreSQL.
    pub expires_at: String,
    /// The previous holder when this claim took over an expired lease.
    pub took_over_from: Option<String>,
}

pub(crate) fn lease_held(run_id: &str, owner: String, expires_at: String) -> StoreError {
    StoreError::LeaseHeld {
        run_id: run_id.to_owned(),
        owner,
        expires_at,
    }
}

pub(crate) fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() || ttl > Duration::from_secs(86_400) {
        return Err(StoreError::InvalidArgument(format!(
            "a lease lasts more than 0 s and at most a day, not {ttl:?}"
        )));
    }
    Ok(())
}

impl SqliteStore {
    pub fn append_next_event(
        &self,
        run_id: &str,
        ts: &str,
        kind: &str,
        json: impl FnOnce(u64) -> String,
    ) -> Result<u64> {
        let seq = self.write(Durability::Fast, |c| {
            // The write lock is held (IMMEDIATE): nobody else can take this
            // seq between the read and the insert.
            let next: i64 = c
                .prepare_cached("SELECT COALESCE(MAX(seq) + 1, 0) FROM events WHERE run_id = ?1")
                .and_then(|mut s| s.query_row([run_id], |r| r.get(0)))
                .map_err(|e| self.sql(e))?;
            let seq = crate::to_u64(next);
            self.insert_event(c, run_id, seq, next, ts, kind, &json(seq))?;
            Ok(seq)
        })?;
        self.notifier.bump();
        Ok(seq)
    }

    pub fn events_since(&self, run_id: &str, after: Option<u64>) -> Result<Vec<StoredEvent>> {
        let after = after.map_or(-1, crate::to_i64);
        self.with_conn(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT seq, ts, json FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq",
                )
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map(params![run_id, after], |r| {
                    let (seq, ts): (i64, String) = (r.get(0)?, r.get(1)?);
                    let seq = crate::to_u64(seq);
                    Ok(StoredEvent {
                        seq,
                        json: crate::envelope::envelope(r.get(2)?, seq, run_id, &ts),
                    })
                })
                .map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })
    }

    pub fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<LeaseClaim> {
        check_ttl(ttl)?;
        let now = SystemTime::now();
        let now_s = format_rfc3339_millis(now);
        let expires_at = format_rfc3339_millis(now + ttl);
        self.write(Durability::Durable, |c| {
            let (status, holder, until) = self.lease_row(c, run_id)?;
            if status != RunStatus::Running {
                return Err(StoreError::RunNotRunning {
                    id: run_id.to_owned(),
                    status: status.to_string(),
                });
            }
            let took_over_from = match (holder, until) {
                (Some(h), Some(u)) if h != owner && u > now_s => {
                    return Err(lease_held(run_id, h, u));
                }
                (Some(h), _) if h != owner => Some(h),
                _ => None,
            };
            c.prepare_cached(
                "UPDATE runs SET lease_owner = ?2, lease_expires_at = ?3 WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![run_id, owner, expires_at]))
            .map_err(|e| self.sql(e))?;
            Ok(LeaseClaim {
                run_id: run_id.to_owned(),
                owner: owner.to_owned(),
                expires_at: expires_at.clone(),
                took_over_from,
            })
        })
    }

    pub fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<String> {
        check_ttl(ttl)?;
        let expires_at = format_rfc3339_millis(SystemTime::now() + ttl);
        self.write(Durability::Fast, |c| {
            let n = c
                .prepare_cached(
                    "UPDATE runs SET lease_expires_at = ?3
                     WHERE id = ?1 AND lease_owner = ?2 AND status = 'running'",
                )
                .and_then(|mut s| s.execute(params![run_id, owner, expires_at]))
                .map_err(|e| self.sql(e))?;
            if n == 0 {
                // Tell "gone" from "lost".
                self.lease_row(c, run_id)?;
                return Err(StoreError::LeaseLost {
                    run_id: run_id.to_owned(),
                    owner: owner.to_owned(),
                });
            }
            Ok(expires_at.clone())
        })
    }

    pub fn interrupt_expired_leases(&self, ending: Option<Ending<'_>>) -> Result<Vec<String>> {
        let now = now_rfc3339();
        let ids = self.write(Durability::Durable, |c| {
            let mut stmt = c
                .prepare_cached(
                    "UPDATE runs SET status = 'interrupted', reason = ?2, ended_at = ?1,
                         lease_owner = NULL, lease_expires_at = NULL
                     WHERE status = 'running' AND lease_expires_at < ?1
                     RETURNING id, started_at",
                )
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map(params![now, LEASE_EXPIRED_REASON], |r| {
                    Ok((r.get::<_, String>(1)?, r.get::<_, String>(0)?))
                })
                .map_err(|e| self.sql(e))?;
            let mut ids = rows
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(|e| self.sql(e))?;
            ids.sort();
            let ids: Vec<String> = ids.into_iter().map(|(_, id)| id).collect();
            if let Some(ending) = ending {
                for id in &ids {
                    self.append_ending(c, id, ending)?;
                }
            }
            Ok(ids)
        })?;
        if ending.is_some() && !ids.is_empty() {
            self.notifier.bump();
        }
        Ok(ids)
    }

    pub fn expired_leases(&self) -> Result<Vec<String>> {
        let now = now_rfc3339();
        self.with_conn(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT id FROM runs WHERE status = 'running' AND lease_expires_at < ?1
                     ORDER BY started_at, rowid",
                )
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map([now], |r| r.get::<_, String>(0))
                .map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })
    }

    pub fn save_checkpoint(&self, run_id: &str, json: &str) -> Result<()> {
        self.write(Durability::Durable, |c| {
            let n = c
                .prepare_cached(
                    "UPDATE runs SET checkpoint = ?2 WHERE id = ?1 AND status = 'running'",
                )
                .and_then(|mut s| s.execute(params![run_id, json]))
                .map_err(|e| self.sql(e))?;
            if n == 0 {
                let (status, _, _) = self.lease_row(c, run_id)?;
                return Err(StoreError::RunNotRunning {
                    id: run_id.to_owned(),
                    status: status.to_string(),
                });
            }
            Ok(())
        })
    }

    pub fn run_checkpoint(&self, run_id: &str) -> Result<Option<String>> {
        self.with_conn(|c| {
            c.prepare_cached("SELECT checkpoint FROM runs WHERE id = ?1")
                .and_then(|mut s| s.query_row([run_id], |r| r.get(0)).optional())
                .map_err(|e| self.sql(e))?
                .ok_or_else(|| StoreError::NotFound {
                    what: "run",
                    id: run_id.to_owned(),
                })
        })
    }

    /// Appends `ending`'s event at the run's next seq, in the caller's
    /// transaction, unless the run's stream already ends with a terminal
    /// event (one is all).
    pub(crate) fn append_ending(
        &self,
        c: &rusqlite::Connection,
        run_id: &str,
        ending: Ending<'_>,
    ) -> Result<()> {
        let last: Option<(i64, String)> = c
            .prepare_cached(
                "SELECT seq, type FROM events WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(|e| self.sql(e))?;
        if last
            .as_ref()
            .is_some_and(|(_, kind)| RUN_ENDING.contains(&kind.as_str()))
        {
            return Ok(());
        }
        let next = last.map_or(0, |(seq, _)| seq + 1);
        let seq = crate::to_u64(next);
        let e = checked_ending(ending, run_id, seq)?;
        self.insert_event(c, run_id, seq, next, &e.ts, &e.kind, &e.json)
    }

    fn lease_row(
        &self,
        c: &rusqlite::Connection,
        run_id: &str,
    ) -> Result<(RunStatus, Option<String>, Option<String>)> {
        c.prepare_cached("SELECT status, lease_owner, lease_expires_at FROM runs WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
            })
            .map_err(|e| self.sql(e))?
            .ok_or_else(|| StoreError::NotFound {
                what: "run",
                id: run_id.to_owned(),
            })
    }
}
