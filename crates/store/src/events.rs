//! The event log: every envelope a run emits, kept for replay.
//!
//! This is the hot path (one event per streamed token), so appends commit at
//! `synchronous = NORMAL` (no fsync; see the crate docs for what that risks)
//! through cached prepared statements, and [`Store::append_events`] puts a
//! whole batch in one transaction. [`EventWriter`] does the batching for
//! callers that must not block.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

use rusqlite::{Connection, ffi, params};

use crate::error::{Result, StoreError};
use capstan_protocol::event::RUN_ENDING;

use crate::{
    Durability, EventRecord, RunAnswer, RunEnding, RunStatus, SqliteStore, Store, Usage,
    constraint_code,
};

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

/// Most events one transaction of the [`EventWriter`] commits. Bounds the
/// time the write lock is held (other processes wait for it) while keeping
/// the per-event commit cost negligible.
const MAX_BATCH: usize = 512;

enum Msg {
    Event(EventRecord),
    Flush(SyncSender<Result<()>>),
    /// Stores what was pushed before it, then hands back the run's held events
    /// (its terminal event and what followed) for the caller to store with the
    /// run's end.
    Finish(String, SyncSender<Vec<EventRecord>>),
}

/// Appends events on a background thread, in batches: [`EventWriter::push`]
/// never blocks, so it can be called from async code and from event sinks
/// that must not block.
///
/// Each batch is whatever was queued while the previous one committed (up to
/// 512 events), so under load commits are few and large, and an isolated
/// event is committed at once. A pushed event is *not* yet stored:
/// [`EventWriter::flush`] waits until everything pushed before it is
/// committed and reports errors. A process crash loses the events still
/// queued (at most one batch of latency, typically well under a millisecond);
/// dropping the writer commits them first.
///
/// A run's terminal event ([`capstan_protocol::event::RUN_ENDING`]) and
/// anything after it are held back until [`EventWriter::finish`] stores them
/// with the run's terminal status in one transaction, so a reader on any
/// replica never sees a run's last event while the run still reads
/// `running`, nor an ended run whose last event is missing. A `flush`, or
/// dropping the writer, stores what is held as it is.
///
/// A batch that fails is retried event by event, so one bad event (a
/// duplicate seq, a deleted run) costs only itself. The first error since the
/// last flush is kept for the next `flush`. The queue is unbounded: if the
/// database stalls (another process holding the lock), memory grows rather
/// than the caller blocking.
pub struct EventWriter {
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
    /// Runs end on the caller's thread, so that their durable commits group
    /// with other threads' flushes instead of queueing behind the writer.
    store: Arc<Store>,
}

impl EventWriter {
    /// Starts the writer thread for `store`.
    ///
    /// # Panics
    ///
    /// If the OS cannot start a thread (as `std::thread::spawn` does).
    #[allow(
        clippy::expect_used,
        reason = "a documented panic, as std::thread::spawn: the OS cannot start a thread"
    )]
    pub fn new(store: Arc<Store>) -> EventWriter {
        let (tx, rx) = mpsc::channel();
        let path = store.path().to_path_buf();
        let writer = store.clone();
        let thread = std::thread::Builder::new()
            .name("capstan-events".into())
            .spawn(move || writer_loop(&writer, &rx))
            .expect("spawning the event writer thread");
        EventWriter {
            tx: Some(tx),
            thread: Some(thread),
            path,
            store,
        }
    }

    /// Queues an event. Never blocks. Fails only if the writer thread is gone
    /// (it panicked), with [`StoreError::WriterStopped`].
    pub fn push(&self, event: EventRecord) -> Result<()> {
        self.send(Msg::Event(event))
    }

    /// Waits until every event pushed before this call is committed, and
    /// returns the first error since the previous flush, if any.
    pub fn flush(&self) -> Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Msg::Flush(tx))?;
        rx.recv().map_err(|_| self.stopped())?
    }

    /// Ends `run_id` ([`Store::finish_run`]): stores everything pushed
    /// before this call, then the run's held terminal event together with
    /// its terminal status, reason and usage, in one transaction. When the
    /// run cannot end (already ended, unknown), its held events are stored
    /// alone and the error is returned.
    pub fn finish(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
        usage: Option<Usage>,
    ) -> Result<()> {
        self.end(run_id, status, reason, usage, None).0
    }

    /// [`EventWriter::finish`] with the run's answer recorded in the same
    /// commit ([`Store::finish_run_with_answer`]): one durable commit per run
    /// fewer. Returns the end's result, then the answer's; the answer's failure
    /// does not keep the run from ending.
    pub fn finish_with_answer(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
        usage: Option<Usage>,
        answer: &RunAnswer<'_>,
    ) -> (Result<()>, Result<()>) {
        self.end(run_id, status, reason, usage, Some(*answer))
    }

    fn end(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
        usage: Option<Usage>,
        answer: Option<RunAnswer<'_>>,
    ) -> (Result<()>, Result<()>) {
        let (tx, rx) = mpsc::sync_channel(1);
        let last = match self.send(Msg::Finish(run_id.to_owned(), tx)) {
            Ok(()) => rx.recv().map_err(|_| self.stopped()),
            Err(e) => Err(e),
        };
        let last = match last {
            Ok(last) => last,
            // The writer is gone: the run cannot end through it, but its answer
            // is still the session's.
            Err(e) => {
                let saved = answer.map_or(Ok(()), |a| {
                    self.store
                        .record_answer(a.session_id, run_id, a.answer, a.summary)
                });
                return (Err(e), saved);
            }
        };
        let ending = RunEnding {
            id: run_id,
            status,
            reason,
            usage,
            last: &last,
            answer,
        };
        let (mut result, saved) = self.store.finish_run_with_answer(&ending);
        // The run did not end here (another replica interrupted it): its
        // events are still kept.
        if result.is_err()
            && let Err(e) = append(&self.store, &last)
        {
            result = result.and(Err(e));
        }
        (result, saved)
    }

    fn send(&self, msg: Msg) -> Result<()> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(msg).ok())
            .ok_or_else(|| self.stopped())
    }

    fn stopped(&self) -> StoreError {
        StoreError::WriterStopped {
            path: self.path.clone(),
        }
    }
}

impl Drop for EventWriter {
    /// Commits what is queued, then stops the thread.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn writer_loop(store: &Store, rx: &Receiver<Msg>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut flushes = Vec::new();
    let mut finishes = Vec::new();
    let mut held = Held::default();
    let mut first_error: Option<StoreError> = None;
    // Blocks for the first message of a batch, then takes whatever else is
    // already queued.
    while let Ok(msg) = rx.recv() {
        let mut next = Some(msg);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Event(e) => {
                    if let Some(e) = held.keep(e) {
                        batch.push(e);
                    }
                }
                Msg::Flush(reply) => flushes.push(reply),
                Msg::Finish(run_id, reply) => finishes.push((run_id, reply)),
            }
            if batch.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if let Err(e) = append(store, &batch) {
            first_error.get_or_insert(e);
        }
        batch.clear();
        for (run_id, reply) in finishes.drain(..) {
            let _ = reply.send(held.take(&run_id));
        }
        if !flushes.is_empty()
            && let Err(e) = append(store, &held.take_all())
        {
            first_error.get_or_insert(e);
        }
        for reply in flushes.drain(..) {
            let _ = reply.send(first_error.take().map_or(Ok(()), Err));
        }
    }
    let _ = append(store, &held.take_all());
}

/// Stores `batch`; when the batch fails, retries event by event so every
/// good event is kept, and returns the first error.
fn append(store: &Store, batch: &[EventRecord]) -> Result<()> {
    match store.append_events(batch) {
        Ok(()) => Ok(()),
        Err(e) if batch.len() <= 1 => Err(e),
        Err(_) => {
            let mut first = Ok(());
            for ev in batch {
                if let Err(e) = store.append_event(&ev.run_id, ev.seq, &ev.ts, &ev.kind, &ev.json) {
                    first = first.and(Err(e));
                }
            }
            first
        }
    }
}

/// The events held back per run: its terminal event and whatever follows.
#[derive(Default)]
struct Held(HashMap<String, Vec<EventRecord>>);

impl Held {
    /// Holds `e` if it ends its run or its run already has held events;
    /// otherwise gives it back to be stored now.
    fn keep(&mut self, e: EventRecord) -> Option<EventRecord> {
        if let Some(events) = self.0.get_mut(&e.run_id) {
            events.push(e);
            None
        } else if RUN_ENDING.contains(&e.kind.as_str()) {
            self.0.insert(e.run_id.clone(), vec![e]);
            None
        } else {
            Some(e)
        }
    }

    fn take(&mut self, run_id: &str) -> Vec<EventRecord> {
        self.0.remove(run_id).unwrap_or_default()
    }

    /// Everything held, each run's events in push order.
    fn take_all(&mut self) -> Vec<EventRecord> {
        self.0.drain().flat_map(|(_, events)| events).collect()
    }
}
