//! The event log: every envelope a run emits, kept for replay.
//!
//! This is the hot path (one event per streamed token), so appends commit at
//! `synchronous = NORMAL` (no fsync; see the crate docs for what that risks)
//! through cached prepared statements, and [`Store::append_events`] puts a
//! whole batch in one transaction. [`crate::EventWriter`] does the batching
//! for callers that must not block.

use rusqlite::{Connection, ffi, params};

use crate::error::{Result, StoreError};

use crate::{Durability, EventRecord, SqliteStore, constraint_code};

const INSERT: &str = "INSERT INTO events (run_id, seq, ts, type, json) VALUES (?1, ?2, ?3, ?4, ?5)";
/// Coalescing (see [`crate::coalesce`]): the deltas a completed response replaces.
const COALESCE: &str =
    "DELETE FROM events WHERE run_id = ?1 AND seq < ?2 AND type = 'response.delta'";

impl SqliteStore {
    /// Appends one event. `(run_id, seq)` must be new
    /// ([`StoreError::DuplicateEvent`]), the run must exist
    /// ([`StoreError::NotFound`]) and `json` must be valid JSON
    /// ([`StoreError::InvalidArgument`]; checked by SQLite's `json_valid`).
    ///
    /// Survives a process crash once it returns; may be lost to a power loss
    /// (see crate docs). Blocks for the commit, a few microseconds when
    /// uncontended: prefer [`EventWriter`] from async code.
    pub fn append_event(
        &self,
        run_id: &str,
        seq: u64,
        ts: &str,
        kind: &str,
        json: &str,
    ) -> Result<()> {
        let seq_i = seq_to_i64(seq)?;
        if kind == crate::coalesce::COMPLETED {
            // The insert and the deletion of the deltas it replaces: one transaction.
            self.write(Durability::Fast, |c| {
                self.insert_event(c, run_id, seq, seq_i, ts, kind, json)
            })?;
        } else {
            // Autocommit: one statement is its own transaction, without the cost
            // of separate BEGIN and COMMIT statements.
            self.with_conn(|c| self.insert_event(c, run_id, seq, seq_i, ts, kind, json))?;
        }
        self.notifier.bump();
        Ok(())
    }

    /// Appends a batch in one transaction: all of it is stored or, on any
    /// error (the first is returned), none of it. Much cheaper per event than
    /// [`Store::append_event`] (one commit per batch).
    pub fn append_events(&self, batch: &[EventRecord]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.write(Durability::Fast, |c| self.insert_batch(c, batch))?;
        self.notifier.bump();
        Ok(())
    }

    /// Inserts `batch` in the caller's transaction, leaving out the deltas a
    /// completed response later in the batch replaces.
    pub(crate) fn insert_batch(&self, c: &Connection, batch: &[EventRecord]) -> Result<()> {
        let seqs = batch
            .iter()
            .map(|e| seq_to_i64(e.seq))
            .collect::<Result<Vec<_>>>()?;
        let superseded = crate::coalesce::superseded(batch);
        for ((e, seq_i), skip) in batch.iter().zip(seqs).zip(superseded) {
            if skip {
                continue;
            }
            self.insert_event(c, &e.run_id, e.seq, seq_i, &e.ts, &e.kind, &e.json)?;
        }
        Ok(())
    }

    /// A run's events (the stored envelopes, verbatim) in `seq` order.
    pub fn events(&self, run_id: &str) -> Result<Vec<String>> {
        self.events_after_i64(run_id, -1)
    }

    /// A run's events with `seq > after`, in `seq` order: what a frontend
    /// reconnecting with the last seq it saw (SSE `Last-Event-ID`) needs.
    pub fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<String>> {
        self.events_after_i64(run_id, crate::to_i64(after))
    }

    fn events_after_i64(&self, run_id: &str, after: i64) -> Result<Vec<String>> {
        self.with_conn(|c| {
            // Reads the primary key range (run_id, seq > after): already in order.
            let mut stmt = c
                .prepare_cached(
                    "SELECT seq, ts, json FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq",
                )
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map(params![run_id, after], |r| {
                    let (seq, ts): (i64, String) = (r.get(0)?, r.get(1)?);
                    Ok(crate::envelope::envelope(
                        r.get(2)?,
                        crate::to_u64(seq),
                        run_id,
                        &ts,
                    ))
                })
                .map_err(|e| self.sql(e))?;
            rows.collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn insert_event(
        &self,
        c: &Connection,
        run_id: &str,
        seq: u64,
        seq_i: i64,
        ts: &str,
        kind: &str,
        json: &str,
    ) -> Result<()> {
        let json = crate::envelope::stored(json, seq, run_id, ts);
        let result = c
            .prepare_cached(INSERT)
            .and_then(|mut s| s.execute(params![run_id, seq_i, ts, kind, &*json]));
        match result {
            Ok(_) if kind == crate::coalesce::COMPLETED => c
                .prepare_cached(COALESCE)
                .and_then(|mut s| s.execute(params![run_id, seq_i]))
                .map(drop)
                .map_err(|e| self.sql(e)),
            Ok(_) => Ok(()),
            Err(e) => Err(match constraint_code(&e) {
                Some(ffi::SQLITE_CONSTRAINT_PRIMARYKEY) => StoreError::DuplicateEvent {
                    run_id: run_id.to_owned(),
                    seq,
                },
                Some(ffi::SQLITE_CONSTRAINT_FOREIGNKEY) => StoreError::NotFound {
                    what: "run",
                    id: run_id.to_owned(),
                },
                Some(ffi::SQLITE_CONSTRAINT_CHECK) => StoreError::InvalidArgument(format!(
                    "event {seq} of run {run_id} ({kind}) is not valid JSON"
                )),
                _ => self.sql(e),
            }),
        }
    }
}

fn seq_to_i64(seq: u64) -> Result<i64> {
    i64::try_from(seq)
        .map_err(|_| StoreError::InvalidArgument(format!("event seq {seq} is above 2^63 - 1")))
}
