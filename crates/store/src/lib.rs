//! Capstan's persistent state: workspaces, sessions and their turns and
//! rolling summaries, runs (with leases), the event log (for replay) and the
//! approval audit trail.
//!
//! # Backends
//!
//! One handle, [`Store`], two databases, chosen by [`Store::open_url`]:
//! - **SQLite** (a path or `sqlite:PATH`; [`Store::open`]): the default, one
//!   file, for one user or one machine. Everything below about WAL, fsyncs
//!   and file locks is this backend.
//! - **PostgreSQL** (`postgres://...`): for several `capstan serve` replicas
//!   sharing state. Schema in `migrations/postgres/`, applied at open; see
//!   `src/pg/mod.rs` for its execution model (tokio-postgres on a runtime
//!   the store owns, callable from any thread, inside tokio or not).
//!
//! [`Store`] is an enum over the two, not a trait object (see `handle.rs` for
//! why); every method has the same contract on both, and the store's test
//! suite runs against both.
//!
//! # Invariants (both backends)
//!
//! - A run's status goes `running` → exactly one terminal status
//!   (`completed`, `failed`, `cancelled`, `interrupted`), once; `ended_at` is
//!   set exactly when it is terminal (a schema `CHECK`).
//! - `(run_id, seq)` is unique (the events key): an event is stored at most
//!   once. [`Store::append_next_event`] assigns seqs 0, 1, 2... with no gap
//!   and no duplicate, however many writers in however many processes.
//! - Storing a `response.completed` deletes the run's `response.delta`
//!   events before it, in the same transaction ([`coalesce`]): the completed
//!   event carries the whole text. Their seqs stay unused.
//! - A run's terminal event (`run.completed`, `run.failed`, `run.cancelled`)
//!   and its terminal status are committed together when the run ends
//!   through [`EventWriter::finish`] ([`Store::finish_run_with_events`]),
//!   with the run's answer and the session's summary when it ends through
//!   [`EventWriter::finish_with_answer`] ([`Store::finish_run_with_answer`]):
//!   a reader never sees the one without the other.
//! - Turns of a session have seqs 1, 2, 3... in commit order, no gap.
//! - Every write is one transaction: all of it or none of it.
//! - A run's lease (`claim_run`, `renew_lease`) is held by at most one owner;
//!   once it has expired another owner may take it over, and the old holder's
//!   next renewal fails ([`StoreError::LeaseLost`]), so it learns to stop.
//!   Expired leases turn their runs `interrupted` (reason
//!   [`LEASE_EXPIRED_REASON`]) through [`Store::interrupt_expired_leases`].
//!   Lease times are the database's clock on PostgreSQL (replicas' clocks
//!   may disagree), the process's on SQLite.
//! - Start-up recovery ([`Store::mark_interrupted_runs`]) interrupts only
//!   runs whose starting store is gone *and* that no live lease holds.
//! - Closed sets of words are `CHECK`ed by the database, whoever writes.
//!
//! # Waking readers
//!
//! [`Store::wait_events`] reads after a cursor and, when there is nothing
//! yet, sleeps until new events may exist: PostgreSQL `LISTEN`/`NOTIFY` (a
//! trigger on `events` notifies channel `capstan_events` with the run id),
//! or on SQLite this handle's own appends plus a 50 ms poll. A wake-up
//! carries no data, so a missed one costs latency, never an event.
//!
//! # Durability
//!
//! The database runs in WAL mode with `synchronous = NORMAL`, and every write
//! except event appends returns only once the WAL has been flushed to disk
//! after its commit, which is what `synchronous = FULL` does, but shared: one
//! `fdatasync`, run with the connection released, covers every durable write
//! committed before it began (`group_sync.rs`). What that buys:
//!
//! - **Process crash** (panic, `kill -9`, OOM kill): nothing committed is lost.
//!   A commit has been written to the WAL file before it returns, and the WAL
//!   is in the OS page cache whether or not the process lives on; the next
//!   open replays it. An uncommitted transaction vanishes whole.
//! - **OS crash or power loss**: turns, summaries, sessions, workspaces, run
//!   starts and ends, usage and approvals survive once their call returned
//!   (the WAL is flushed after their commit before it returns). Events appended after the last
//!   such durable commit (or checkpoint) may be lost; they are a replay log,
//!   and a durable commit also makes every earlier event durable, because the
//!   WAL is one sequential file. The database is never left corrupt.
//!
//! Why not a flush for everything: an event is appended for every streamed
//! token, and an `fsync` per token costs milliseconds on real disks; NORMAL
//! costs none. Why not NORMAL for everything: the design promises that a crash
//! loses no committed turn, and an OS crash is a crash too. Why not `FULL`:
//! it flushes inside the commit, holding the one connection, so every writer
//! of a busy server queued behind each flush.
//!
//! # Concurrency
//!
//! [`Store`] is `Send + Sync`, shared as `Arc<Store>`: on SQLite one
//! connection behind a [`std::sync::Mutex`], on PostgreSQL a small pool of
//! connections (calls run in parallel; row locks serialise what must be).
//! Its methods are synchronous and **block**: on the mutex or a network round
//! trip, on disk I/O, and for up to the busy timeout (5 s) when another
//! process holds SQLite's write lock. From async code call them through
//! `tokio::task::spawn_blocking`, or, for the per-token event path, push into
//! an [`EventWriter`], which never blocks and commits in batches on its own
//! thread. Several processes may share the file (SQLite's locking); each write
//! is one `BEGIN IMMEDIATE` transaction, so writers queue instead of failing
//! on a lock upgrade.
//!
//! # Crash recovery
//!
//! Call [`Store::mark_interrupted_runs`] at start-up: runs left `running` by a
//! process that has since died become `interrupted`. Liveness comes from an OS
//! file lock each open store holds (see `owner.rs`; on PostgreSQL a session
//! advisory lock on a connection the store keeps open), so runs of other live
//! processes sharing the database, and of this one, are never touched.
//!
//! # Schema
//!
//! SQLite: versioned by `PRAGMA user_version`, migrated forward on open, one
//! transaction per migration. A file from a newer Capstan is refused with
//! [`StoreError::SchemaTooNew`] before anything is written to it; a SQLite
//! file that is not Capstan's is refused with [`StoreError::ForeignDatabase`].
//! PostgreSQL: versioned by the `capstan_schema` table, with the same
//! refusals ([`PG_SCHEMA_VERSION`]).

#![warn(missing_docs)]

mod approvals;
pub mod coalesce;
mod envelope;
mod error;
mod event_writer;
mod events;
mod group_sync;
mod handle;
mod id;
mod lease;
mod model;
mod notify;
mod owner;
mod pg;
mod quota;
mod requests;
mod runs;
mod schema;
mod sessions;
mod time;
mod workspaces;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

pub use error::{Result, StoreError};
pub use event_writer::{EventWriter, LINGER};
pub use handle::{Backend, Store};
pub use id::new_id;
pub use lease::{Ending, LEASE_EXPIRED_REASON, LeaseClaim, StoredEvent};
pub use model::{
    Approval, DecidedBy, Decision, EventRecord, NewApproval, Profile, Role, Run, RunAnswer,
    RunEnding, RunStatus, Session, SessionDeletion, Turn, Usage, Workspace,
};
pub use pg::{PG_SCHEMA_VERSION, redact as redact_url};
pub use quota::{Quota, QuotaKind};
pub use requests::{RunRequest, RunRequestKind};
pub use runs::INTERRUPTED_REASON;
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use time::{format_rfc3339_millis, now_rfc3339};

use error::{BUSY_TIMEOUT_MS, classify};
use notify::Notifier;
use owner::OwnerLock;

/// Pages in the WAL before SQLite checkpoints it into the database (default
/// 1000). At `synchronous = NORMAL` a checkpoint is where the fsyncs happen,
/// and one-event commits write a whole page each, so checkpoints dominate the
/// append cost: 10000 (about 40 MB of WAL) measured 40% faster appends than
/// the default (benches/events.rs), at the price of a larger `-wal` file and
/// rarer, longer checkpoint pauses.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 10_000;

/// Caps the WAL file left on disk after a checkpoint (SQLite truncates it
/// back to this size); above the checkpoint size so it is rarely needed.
const JOURNAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// The WAL size above which closing the store checkpoints it (and truncates
/// it to nothing); below it the WAL is left for the next process.
///
/// SQLite's own checkpoint when the last connection closes cost a one-shot
/// process (`capstan invoke`, `capstan ask`) about 2.7 ms after its work:
/// writing the pages back, syncing the database, deleting the WAL, which the
/// next process re-created with two more syncs (its header and the directory,
/// about 0.8 ms). Left in place, the WAL costs the next opener a read of it
/// (SQLite rebuilds its index from the file), which grows with its size, so
/// it is kept only while small; a long-running process's WAL is checkpointed
/// as it grows anyway ([`WAL_AUTOCHECKPOINT_PAGES`]).
const CLOSE_CHECKPOINT_BYTES: u64 = 1024 * 1024;

/// The SQLite backend: one file. See the crate documentation for durability
/// and concurrency.
#[derive(Debug)]
pub(crate) struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// `None` when the file system cannot lock (see `owner.rs`).
    owner: Option<OwnerLock>,
    /// Woken by this store's own appends; other processes' appends are
    /// found by polling (see [`Store::wait_events`]).
    pub(crate) notifier: Notifier,
    /// The WAL file durable writes flush, as SQLite names it.
    wal: PathBuf,
    /// Shares WAL flushes among durable writes.
    wal_sync: group_sync::GroupSync,
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        let large = std::fs::metadata(&self.wal).is_ok_and(|m| m.len() > CLOSE_CHECKPOINT_BYTES);
        if !large {
            return;
        }
        let conn = self.conn.get_mut().unwrap_or_else(PoisonError::into_inner);
        // Never wait on another process's reader at exit: a busy checkpoint
        // is simply left to the next process that closes.
        let _ = conn.busy_timeout(Duration::ZERO);
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
}

/// The WAL file SQLite keeps beside the database file `conn` has open: its
/// full name with symbolic links resolved (SQLite puts the WAL beside the
/// real file, not beside a link to it) and `-wal` appended.
fn wal_path(conn: &Connection, opened: &Path) -> PathBuf {
    let mut name = match conn.path() {
        Some(p) if !p.is_empty() => std::ffi::OsString::from(p),
        _ => opened.as_os_str().to_owned(),
    };
    name.push("-wal");
    PathBuf::from(name)
}

/// How hard a write transaction must hold on to its data (see crate docs).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Committed with `synchronous = FULL`: survives power loss.
    Durable,
    /// Committed with `synchronous = NORMAL`: survives a process crash.
    Fast,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, a file path; its
    /// directory must exist. Switches the file to WAL mode and migrates it to
    /// [`SCHEMA_VERSION`].
    ///
    /// Fails with a [`StoreError`] naming the file when it cannot be opened
    /// (missing directory, permissions), is not SQLite, is another program's
    /// database, or has a newer schema. SQLite creates `<path>-wal` and
    /// `<path>-shm` beside it, and the store a `<path>-owners/` directory.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        use std::os::unix::fs::PermissionsExt as _;
        let path = path.as_ref().to_path_buf();
        let err = |e| classify(&path, e);
        // No URI parsing: the path is a path. NO_MUTEX: our own Mutex serialises use.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&path, flags).map_err(err)?;
        // The store holds every session's text and the audit: the owner's
        // only. Before the WAL exists, which SQLite then creates with the
        // database file's mode; an older store's files are tightened too.
        // Best effort: a file someone else owns keeps its mode.
        for file in [path.clone(), sidecar(&path, "-wal"), sidecar(&path, "-shm")] {
            if file.exists() {
                let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
            }
        }
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
            .map_err(err)?;
        // Plans never depend on bound values. Without this SQLite (built with
        // STAT4) re-compiles statements such as a session's recent turns on
        // every execution, because a bound value might change the plan: 3.5%
        // of a server's CPU, for plans that never change (the store has no
        // statistics, and no LIKE whose pattern could use an index).
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(err)?;
        // Closing checkpoints only a large WAL (see `CLOSE_CHECKPOINT_BYTES`).
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(err)?;
        // Refuse newer or foreign files before writing anything to them.
        schema::check(&conn, &path)?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Open {
                path,
                reason: format!(
                    "cannot switch it to WAL mode (SQLite kept {mode:?}); put the data \
                     directory on a local file system"
                ),
            });
        }
        // Commits do not flush; durable writes flush the WAL after their
        // commit, in groups (see crate docs and `group_sync.rs`).
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(err)?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
            .map_err(err)?;
        conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)
            .map_err(err)?;
        schema::migrate(&mut conn, &path)?;
        // Room for every statement the store prepares, so none is re-parsed.
        conn.set_prepared_statement_cache_capacity(64);
        let owner = OwnerLock::acquire(&path).ok();
        let wal = wal_path(&conn, &path);
        Ok(SqliteStore {
            wal,
            path,
            conn: Mutex::new(conn),
            owner,
            notifier: Notifier::default(),
            wal_sync: group_sync::GroupSync::default(),
        })
    }

    /// The path the store was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's schema version (equal to [`SCHEMA_VERSION`] once open).
    pub fn schema_version(&self) -> Result<u32> {
        self.with_conn(|c| {
            c.pragma_query_value(None, "user_version", |r| r.get(0))
                .map_err(|e| self.sql(e))
        })
    }

    /// Runs `PRAGMA integrity_check`: `Ok(vec![])` when the file is sound,
    /// otherwise SQLite's list of problems. Reads the whole file: for
    /// diagnostics and tests, not for every start-up.
    pub fn integrity_check(&self) -> Result<Vec<String>> {
        self.with_conn(|c| {
            let mut stmt = c
                .prepare("PRAGMA integrity_check")
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(|e| self.sql(e))?;
            let problems: Vec<String> = rows
                .collect::<rusqlite::Result<_>>()
                .map_err(|e| self.sql(e))?;
            Ok(problems.into_iter().filter(|p| p != "ok").collect())
        })
    }

    /// The connection. A panic while it was held cannot have left a
    /// transaction open (a dropped `Transaction` rolls back), so a poisoned
    /// lock is safe to take over.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Maps a SQLite error to a [`StoreError`] naming this file.
    pub(crate) fn sql(&self, e: rusqlite::Error) -> StoreError {
        classify(&self.path, e)
    }

    /// The owner id runs started by this store record.
    pub(crate) fn owner_id(&self) -> Option<&str> {
        self.owner.as_ref().map(|o| o.id.as_str())
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction: all of it commits or
    /// none of it. IMMEDIATE takes the write lock up front, so a concurrent
    /// writer makes us wait (busy timeout) instead of failing mid-way.
    ///
    /// A [`Durability::Durable`] write then waits, with the connection
    /// released, for a flush of the WAL that covers its commit, shared with
    /// the durable writes of other threads (`group_sync.rs`).
    pub(crate) fn write<T>(
        &self,
        durability: Durability,
        f: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<T> {
        let value = {
            let mut conn = self.conn();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.sql(e))?;
            let value = f(&tx)?;
            tx.commit().map_err(|e| self.sql(e))?;
            value
        };
        if durability == Durability::Durable {
            self.wal_sync
                .sync(|| group_sync::flush_file(&self.wal))
                .map_err(|source| StoreError::Flush {
                    path: self.path.clone(),
                    source,
                })?;
        }
        Ok(value)
    }

    /// Runs `f` under a savepoint of the caller's transaction: on its error, what
    /// it wrote is rolled back and the transaction goes on without it.
    pub(crate) fn in_savepoint<T>(
        &self,
        c: &Connection,
        f: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<T> {
        c.execute_batch("SAVEPOINT part").map_err(|e| self.sql(e))?;
        let value = f(c);
        let end = if value.is_ok() {
            "RELEASE part"
        } else {
            "ROLLBACK TO part; RELEASE part"
        };
        c.execute_batch(end).map_err(|e| self.sql(e))?;
        value
    }

    /// Runs `f` with the connection outside any explicit transaction (each
    /// statement is its own read snapshot, or its own write in autocommit).
    pub(crate) fn with_conn<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        f(&self.conn())
    }
}

/// Converts a count or seq for SQLite (which stores `i64`). Token counts and
/// seqs never reach 2^63; saturate rather than fail if one ever did.
pub(crate) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Reads back a count the schema keeps non-negative.
pub(crate) fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The extended result code of a constraint violation, if `e` is one.
pub(crate) fn constraint_code(e: &rusqlite::Error) -> Option<i32> {
    match e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            Some(f.extended_code)
        }
        _ => None,
    }
}

/// A `LIMIT` argument from a `usize` (`usize::MAX` means "all").
pub(crate) fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `<path><suffix>` (SQLite's `-wal` and `-shm` beside a database).
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pragma(store: &SqliteStore, name: &str) -> i64 {
        store
            .conn()
            .pragma_query_value(None, name, |r| r.get(0))
            .unwrap()
    }

    /// Opened through a symbolic link, the store flushes the WAL SQLite
    /// writes: beside the real file, not beside the link.
    #[test]
    fn durable_writes_flush_the_wal_beside_the_real_file() {
        let real = tempfile::tempdir().unwrap();
        let links = tempfile::tempdir().unwrap();
        let file = real.path().join("c.db");
        SqliteStore::open(&file).unwrap();
        let link = links.path().join("link.db");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let store = SqliteStore::open(&link).unwrap();
        store.create_session("s", None).unwrap();
        let wal = std::fs::canonicalize(real.path()).unwrap().join("c.db-wal");
        assert_eq!(store.wal, wal);
        assert!(wal.exists(), "SQLite's WAL is not where the store flushes");
        assert!(!links.path().join("link.db-wal").exists());
    }

    /// `capstan invoke`'s session and run are not flushed on their own: the
    /// next durable write's flush (here the run's end) covers them, and both
    /// are there after a reopen.
    #[test]
    fn a_new_session_s_run_is_flushed_with_the_next_durable_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
        let before = store.wal_sync.flushes();
        let (session, run) = store
            .start_run_in_new_session("capstan invoke docx", None, "invoke")
            .unwrap();
        assert_eq!(
            store.wal_sync.flushes(),
            before,
            "flushed before any command ran"
        );
        store
            .finish_run(&run.id, RunStatus::Completed, None, None)
            .unwrap();
        assert_eq!(store.wal_sync.flushes(), before + 1);
        drop(store);
        let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
        assert!(store.get_session(&session.id).unwrap().is_some());
        assert_eq!(
            store.get_run(&run.id).unwrap().map(|r| r.status),
            Some(RunStatus::Completed)
        );
    }

    /// Durable writes flush after their commit, outside SQLite: the
    /// connection stays at NORMAL, or every token's append would fsync.
    #[test]
    fn durable_writes_leave_the_connection_at_normal_sync() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
        assert_eq!(pragma(&store, "synchronous"), 1); // NORMAL
        assert_eq!(pragma(&store, "foreign_keys"), 1);
        assert_eq!(pragma(&store, "busy_timeout"), BUSY_TIMEOUT_MS as i64);
        let s = store.create_session("s", None).unwrap();
        store.add_turn(&s.id, None, Role::User, "hi").unwrap();
        assert_eq!(pragma(&store, "synchronous"), 1);
        // Also after a durable write that failed.
        assert!(store.add_turn("ses_nope", None, Role::User, "x").is_err());
        assert_eq!(pragma(&store, "synchronous"), 1);
        // A failed write left no transaction open.
        assert!(store.conn().is_autocommit());
    }

    /// The statements of a turn's write and of the recent turns' read are
    /// compiled once, not again at every execution.
    #[test]
    fn hot_statements_are_not_recompiled_per_execution() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
        let s = store.create_session("s", None).unwrap();
        for _ in 0..5 {
            store.add_turn(&s.id, None, Role::User, "hi").unwrap();
            store.recent_turns(&s.id, 8).unwrap();
        }
        let c = store.conn();
        let recent = sessions::recent_turns_sql();
        for sql in [sessions::NEXT_TURN_SEQ, recent.as_str()] {
            let stmt = c.prepare_cached(sql).unwrap();
            assert_eq!(
                stmt.get_status(rusqlite::StatementStatus::RePrepare),
                0,
                "{sql}"
            );
        }
    }

    /// Closing leaves a small WAL for the next process (no checkpoint, no
    /// re-creation), checkpoints and empties a large one, and loses nothing
    /// either way.
    #[test]
    fn closing_checkpoints_only_a_large_wal_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.db");
        let wal = dir.path().join("c.db-wal");
        let store = SqliteStore::open(&file).unwrap();
        let s = store.create_session("small", None).unwrap();
        store.add_turn(&s.id, None, Role::User, "kept").unwrap();
        drop(store);
        let left = std::fs::metadata(&wal).expect("a small WAL is kept").len();
        assert!(left > 0 && left <= CLOSE_CHECKPOINT_BYTES, "{left}");

        let store = SqliteStore::open(&file).unwrap();
        assert_eq!(store.recent_turns(&s.id, 10).unwrap().len(), 1);
        let big = "x".repeat(64 * 1024);
        for _ in 0..24 {
            store.add_turn(&s.id, None, Role::User, &big).unwrap();
        }
        assert!(std::fs::metadata(&wal).unwrap().len() > CLOSE_CHECKPOINT_BYTES);
        drop(store);
        assert_eq!(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0), 0);

        let store = SqliteStore::open(&file).unwrap();
        assert_eq!(store.recent_turns(&s.id, 100).unwrap().len(), 25);
    }
}
