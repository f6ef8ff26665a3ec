//! [`EventWriter`]: a run's events stored in batches, off the caller's thread.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use capstan_protocol::event::RUN_ENDING;

use crate::error::{Result, StoreError};
use crate::{EventRecord, RunAnswer, RunEnding, RunStatus, Store, Usage};

/// Most events one transaction of the writer commits. Bounds the time the
/// write lock is held (other processes wait for it) while keeping the
/// per-event commit cost negligible.
const MAX_BATCH: usize = 512;

/// How long the writer collects events after the first of a batch before it
/// stores them. Long enough that a busy server commits a few times per run
/// rather than per event, short enough that a stream read from the store
/// (another replica's, a reconnecting client's) lags imperceptibly.
pub const LINGER: Duration = Duration::from_millis(5);

/// Stores events in batches on a background thread: [`EventWriter::push`]
/// never blocks on the database, so it can be called from async code and
/// from event sinks that must not block.
///
/// A batch is what arrives within [`LINGER`] of its first event (up to 512
/// events), so commits are few and large: every commit rewrites the pages it
/// touches, and committing as events trickled in wrote about 13 pages (54 KB)
/// of WAL per short served run for its 6 KB of events. Pushing wakes the
/// writer only for the first event of a batch. A pushed event is *not* yet
/// stored: [`EventWriter::flush`] stores everything pushed before it at once
/// and reports errors. A process crash loses the events still queued (at most
/// [`LINGER`] plus one commit); dropping the writer stores them first.
///
/// A run's terminal event ([`capstan_protocol::event::RUN_ENDING`]) and
/// anything after it are held back until [`EventWriter::finish`] stores them
/// with the run's terminal status in one transaction, so a reader on any
/// replica never sees a run's last event while the run still reads
/// `running`, nor an ended run whose last event is missing. The run's events
/// still waiting for a batch go in that transaction too, so a run shorter
/// than [`LINGER`] is stored in one commit. A `flush`, or dropping the
/// writer, stores what is held as it is.
///
/// Events reach the store in push order: whoever takes events from the queue
/// (the writer's batch, a flush, a run's end) does so after the batch before
/// it is stored (see [`Shared::storing`]), so a reader following a run's seqs
/// never finds a gap that fills in later.
///
/// A batch that fails is retried event by event, so one bad event (a
/// duplicate seq, a deleted run) costs only itself. The first error since the
/// last flush is kept for the next `flush`. The queue is unbounded: if the
/// database stalls (another process holding the lock), memory grows rather
/// than the caller blocking.
pub struct EventWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
    /// Runs end and flushes store on the caller's thread, so that their
    /// durable commits group with other threads' flushes instead of queueing
    /// behind the writer.
    store: Arc<Store>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the writer: the first event of a batch, a full batch, closing.
    wake: Condvar,
    /// Held while taken events are stored. Taken with the queue still locked,
    /// so whoever takes events after this batch waits for it to be stored.
    storing: Mutex<()>,
}

#[derive(Default)]
struct Queue {
    /// Events to store, in push order.
    events: Vec<EventRecord>,
    held: Held,
    first_error: Option<StoreError>,
    /// The writer is asked to store what is left and stop.
    closing: bool,
    /// The writer thread is gone (it stopped, or panicked).
    stopped: bool,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until no taken events are being stored; the guard keeps the
    /// next taker waiting until the caller has stored its own.
    fn storing(&self) -> MutexGuard<'_, ()> {
        self.storing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores `events`, just taken from the queue `q` guards, after the batch
    /// in flight, and keeps the next taker waiting until they are stored.
    fn store_taken(
        &self,
        q: MutexGuard<'_, Queue>,
        store: &Store,
        events: &[EventRecord],
    ) -> Result<()> {
        let storing = self.storing();
        drop(q);
        let stored = append(store, events);
        drop(storing);
        stored
    }
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
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            wake: Condvar::new(),
            storing: Mutex::new(()),
        });
        let path = store.path().to_path_buf();
        let (writer, on) = (store.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("capstan-events".into())
            .spawn(move || {
                let _stopped = MarkStopped(&on);
                writer_loop(&writer, &on);
            })
            .expect("spawning the event writer thread");
        EventWriter {
            shared,
            thread: Some(thread),
            path,
            store,
        }
    }

    /// Queues an event. Never waits for the database. Fails only if the
    /// writer thread is gone (it panicked), with [`StoreError::WriterStopped`].
    pub fn push(&self, event: EventRecord) -> Result<()> {
        let mut q = self.shared.queue();
        if q.stopped {
            return Err(self.stopped());
        }
        if let Some(event) = q.held.keep(event) {
            q.events.push(event);
            if q.events.len() == 1 || q.events.len() == MAX_BATCH {
                self.shared.wake.notify_one();
            }
        }
        Ok(())
    }

    /// Stores every event pushed before this call, those held for a run's
    /// end included, and returns the first error since the previous flush,
    /// if any.
    pub fn flush(&self) -> Result<()> {
        let mut q = self.shared.queue();
        let mut events = std::mem::take(&mut q.events);
        events.extend(q.held.take_all());
        let earlier = q.first_error.take();
        let stored = self.shared.store_taken(q, &self.store, &events);
        earlier.map_or(stored, Err)
    }

    /// Ends `run_id` ([`Store::finish_run`]): its events pushed before this
    /// call and not stored yet (its held terminal event among them) together
    /// with its terminal status, reason and usage, in one transaction. When
    /// the run cannot end (already ended, unknown), those events are stored
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
        let last = {
            let mut q = self.shared.queue();
            let mut last = take_run(&mut q.events, run_id);
            last.extend(q.held.take(run_id));
            // The run's earlier events, in a batch being stored, go first.
            let storing = self.shared.storing();
            drop(q);
            drop(storing);
            last
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

    fn stopped(&self) -> StoreError {
        StoreError::WriterStopped {
            path: self.path.clone(),
        }
    }
}

impl Drop for EventWriter {
    /// Stores what is queued and held, then stops the thread.
    fn drop(&mut self) {
        self.shared.queue().closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Marks the writer stopped when its thread ends, by return or by panic.
struct MarkStopped<'a>(&'a Shared);

impl Drop for MarkStopped<'_> {
    fn drop(&mut self) {
        self.0.queue().stopped = true;
    }
}

fn writer_loop(store: &Store, shared: &Shared) {
    let mut q = shared.queue();
    loop {
        while q.events.is_empty() && !q.closing {
            q = shared.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        if q.events.is_empty() {
            break;
        }
        let deadline = Instant::now() + LINGER;
        while q.events.len() < MAX_BATCH && !q.closing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            q = shared
                .wake
                .wait_timeout(q, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        // Taken by a run's end or a flush meanwhile: nothing left to store.
        if q.events.is_empty() {
            continue;
        }
        let n = q.events.len().min(MAX_BATCH);
        let batch: Vec<EventRecord> = q.events.drain(..n).collect();
        let stored = shared.store_taken(q, store, &batch);
        q = shared.queue();
        if let Err(e) = stored {
            q.first_error.get_or_insert(e);
        }
    }
    let held = q.held.take_all();
    let _ = shared.store_taken(q, store, &held);
}

/// Removes `run_id`'s events from `events`, keeping both in push order.
fn take_run(events: &mut Vec<EventRecord>, run_id: &str) -> Vec<EventRecord> {
    events.extract_if(.., |e| e.run_id == run_id).collect()
}

/// Stores `batch`; when the batch fails, retries event by event so every
/// good event is kept, and returns the first error.
fn append(store: &Store, batch: &[EventRecord]) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
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
