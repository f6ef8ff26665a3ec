//! The wake-up behind [`crate::Store::wait_events`]: a generation counter
//! bumped whenever new events may exist, and a condition variable to sleep on.
//!
//! It carries no data: a waiter that wakes re-reads the events after its
//! cursor, so a missed or spurious wake-up costs one query, never an event.
//! On PostgreSQL a `LISTEN` connection bumps it on every `NOTIFY` (any
//! process's appends); on SQLite only this store's own appends bump it and
//! waiters also poll, which is how other processes' appends are seen.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(crate) struct Notifier {
    generation: Mutex<u64>,
    changed: Condvar,
}

impl Notifier {
    /// The current generation, to pass to [`Notifier::wait`] after a read
    /// that found nothing.
    pub(crate) fn generation(&self) -> u64 {
        *self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// New events may exist: wake every waiter.
    pub(crate) fn bump(&self) {
        let mut g = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *g = g.wrapping_add(1);
        self.changed.notify_all();
    }

    /// Sleeps until the generation moves past `seen` or `until` (or `poll`
    /// from now, whichever is sooner) passes.
    pub(crate) fn wait(&self, seen: u64, until: Instant, poll: Duration) {
        let deadline = until.min(Instant::now() + poll);
        let mut g = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *g == seen {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return;
            };
            g = self
                .changed
                .wait_timeout(g, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}
