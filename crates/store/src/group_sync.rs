//! Group commit for durable writes: one `fdatasync` of the WAL covers every
//! transaction committed before it started.
//!
//! A durable write used to commit at `synchronous = FULL`, which syncs the WAL
//! inside the commit, while the store's one connection is held: every other
//! writer, event appends included, waited for that flush, so a server's runs
//! per second were bounded by the disk's flush latency times the durable
//! writes of a run. Now a durable write commits at `NORMAL` (its frames are in
//! the WAL, in the page cache), releases the connection, and then waits for a
//! flush of the WAL file that *started after* its commit. While one flush is
//! running, writers that committed meanwhile queue for the next, and that one
//! flush covers them all.
//!
//! Why this is the same guarantee as `FULL`: in WAL mode a transaction is
//! durable once its frames, commit frame included, are on stable storage,
//! which is all `FULL` adds to the commit (on Linux SQLite assumes
//! power-safe overwrite, so it pads nothing). The WAL is one sequential file,
//! so a flush started after our commit covers our frames and every earlier
//! one. If a checkpoint copied them into the database meanwhile, the
//! checkpoint synced the WAL before copying and the database after, at
//! `NORMAL` too. The file flushed is the one SQLite names (the path SQLite
//! resolved, symbolic links included, plus `-wal`); the store never lets
//! SQLite delete it (closing leaves it, or checkpoints and truncates it: see
//! `CLOSE_CHECKPOINT_BYTES`), so it exists after a commit. Should it be
//! missing anyway (the data directory renamed under a running process),
//! nothing can be flushed by name and such a write is only as durable as
//! `NORMAL` makes it (it survives a crash of Capstan).

use std::io;
use std::path::Path;
use std::sync::{Condvar, Mutex, PoisonError};

/// Coordinates the flushes of one file among threads.
#[derive(Debug, Default)]
pub(crate) struct GroupSync {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Tickets handed out: one per durable commit, after the commit.
    issued: u64,
    /// Every ticket up to this one is covered by a completed flush.
    covered: u64,
    /// A flush is running (its thread does not hold the lock meanwhile).
    running: bool,
    /// Flushes completed, for tests.
    flushes: u64,
}

impl GroupSync {
    /// Returns once a flush that started after this call has completed:
    /// either one this thread ran (`flush`), or another thread's. A failed
    /// flush is returned to the thread that ran it, and the threads waiting
    /// for it try their own: no caller is told its data is on disk unless a
    /// flush that covers it succeeded.
    ///
    /// On a worker of a multi-threaded tokio runtime the wait is announced
    /// first (`block_in_place`): a flush takes the disk's 0.3 to 1 ms, and a
    /// worker parked in `fdatasync` stalls every task queued on it. With two
    /// workers (two cores) `capstan serve` plateaued at 366 runs/s using 1.2
    /// of its 2 cores, its workers mostly waiting here.
    pub(crate) fn sync(&self, flush: impl Fn() -> io::Result<()>) -> io::Result<()> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        match Handle::try_current() {
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| self.wait_for_flush(&flush))
            }
            _ => self.wait_for_flush(&flush),
        }
    }

    fn wait_for_flush(&self, flush: &impl Fn() -> io::Result<()>) -> io::Result<()> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.issued += 1;
        let ticket = st.issued;
        loop {
            if st.covered >= ticket {
                return Ok(());
            }
            if !st.running {
                st.running = true;
                // Everything issued so far was committed before this flush starts.
                let upto = st.issued;
                drop(st);
                let result = flush();
                st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                st.running = false;
                if result.is_ok() {
                    st.covered = st.covered.max(upto);
                    st.flushes += 1;
                }
                self.done.notify_all();
                result?;
                continue;
            }
            st = self.done.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Flushes completed so far.
    #[cfg(test)]
    pub(crate) fn flushes(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .flushes
    }
}

/// Flushes the data of the file at `path` (`fdatasync`). A file that does not
/// exist has nothing to flush (see the module docs for when the WAL is gone).
pub(crate) fn flush_file(path: &Path) -> io::Result<()> {
    match std::fs::File::open(path) {
        Ok(f) => f.sync_data(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    use super::*;

    /// Writers that commit while a flush runs share the next one.
    #[test]
    fn concurrent_callers_share_flushes() {
        let sync = Arc::new(GroupSync::default());
        let started = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (sync, started) = (sync.clone(), started.clone());
                std::thread::spawn(move || {
                    started.wait();
                    sync.sync(|| {
                        std::thread::sleep(Duration::from_millis(30));
                        Ok(())
                    })
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        let flushes = sync.flushes();
        assert!((1..8).contains(&flushes), "{flushes} flushes for 8 callers");
    }

    /// A caller that arrives while a flush runs is not covered by that flush
    /// (it may have committed after the flush began): it waits for the next.
    #[test]
    fn a_flush_that_began_earlier_does_not_cover_a_later_caller() {
        let sync = Arc::new(GroupSync::default());
        let in_flush = Arc::new(Barrier::new(2));
        let order = Arc::new(AtomicU64::new(0));
        let first = {
            let (sync, in_flush, order) = (sync.clone(), in_flush.clone(), order.clone());
            std::thread::spawn(move || {
                sync.sync(|| {
                    in_flush.wait();
                    std::thread::sleep(Duration::from_millis(50));
                    order.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
            })
        };
        in_flush.wait();
        // The first flush is running now; this caller must get a second one.
        sync.sync(|| {
            order.fetch_add(10, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        first.join().unwrap().unwrap();
        assert_eq!(sync.flushes(), 2);
        assert_eq!(order.load(Ordering::SeqCst), 11);
    }

    /// A failed flush reaches the caller that ran it; a waiter runs its own
    /// rather than being told its data is on disk.
    #[test]
    fn a_failed_flush_is_never_reported_as_success() {
        let sync = GroupSync::default();
        let err = sync
            .sync(|| Err(io::Error::other("disk gone")))
            .unwrap_err();
        assert_eq!(err.to_string(), "disk gone");
        assert_eq!(sync.flushes(), 0);
        sync.sync(|| Ok(())).unwrap();
        assert_eq!(sync.flushes(), 1);
    }

    #[test]
    fn a_missing_file_has_nothing_to_flush() {
        let dir = tempfile::tempdir().unwrap();
        flush_file(&dir.path().join("gone-wal")).unwrap();
        std::fs::write(dir.path().join("here-wal"), b"x").unwrap();
        flush_file(&dir.path().join("here-wal")).unwrap();
    }
}
