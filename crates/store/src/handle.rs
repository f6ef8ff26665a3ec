//! [`Store`]: the one handle the host holds, dispatching to a backend.
//!
//! # Why an enum, not a trait object
//!
//! The host holds `Arc<Store>` in many places and calls its inherent methods.
//! A `dyn StoreBackend` would change every one of those types and force every
//! method to be object-safe (no `impl FnOnce` arguments, no generic paths).
//! A closed enum of two backends keeps the host's code unchanged, costs one
//! `match` per call, and the exhaustive `match` in every method makes the
//! compiler refuse a backend that lacks one. Both backends are inherent
//! `impl`s with the same method names and signatures; the `delegate!` table
//! below is the whole public contract, and the store's test suite runs it
//! against both.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};
use crate::pg::PgStore;
use crate::{
    Approval, Ending, EventRecord, LeaseClaim, NewApproval, Profile, Quota, Role, Run, RunEnding,
    RunRequest, RunRequestKind, RunStatus, Session, SessionDeletion, SqliteStore, StoredEvent,
    Turn, Usage, Workspace,
};

/// Which database a [`Store`] is backed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// One SQLite file: the default, for one user or one machine.
    Sqlite,
    /// A PostgreSQL database, shareable by several replicas.
    Postgres,
}

/// The open store. See the crate documentation for durability, concurrency
/// and the invariants both backends keep.
#[derive(Debug)]
pub struct Store {
    inner: Inner,
}

// One `Store` per process, held in an `Arc`: the size difference between
// the variants costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Inner {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// How often [`Store::wait_events`] re-reads when no wake-up came: SQLite
/// sees other processes' appends only this way; on PostgreSQL it is the
/// safety net while the `LISTEN` connection is being re-established.
const SQLITE_POLL: Duration = Duration::from_millis(50);
const POSTGRES_POLL: Duration = Duration::from_secs(1);

macro_rules! delegate {
    ($( $(#[$m:meta])* fn $name:ident(&self $(, $arg:ident : $ty:ty)* $(,)?) -> $ret:ty; )*) => {
        impl Store {
            $(
                $(#[$m])*
                pub fn $name(&self $(, $arg: $ty)*) -> $ret {
                    match &self.inner {
                        Inner::Sqlite(s) => s.$name($($arg),*),
                        Inner::Postgres(p) => p.$name($($arg),*),
                    }
                }
            )*
        }
    };
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path`, a file path
    /// whose directory must exist; migrates it to [`crate::SCHEMA_VERSION`].
    /// SQLite creates `<path>-wal` and `<path>-shm` beside it, and the store
    /// a `<path>-owners/` directory. Fails with a [`StoreError`] naming the
    /// file when it cannot be opened, is not SQLite, is another program's
    /// database, or has a newer schema.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        Ok(Store {
            inner: Inner::Sqlite(SqliteStore::open(path)?),
        })
    }

    /// Opens the store a URL names (`[store] url` / `--store`):
    /// - `postgres://user:pass@host:port/db?...` or `postgresql://...`: a
    ///   PostgreSQL database (which must exist; its tables are created and
    ///   migrated on open, see `migrations/postgres/`);
    /// - `sqlite:PATH`, `sqlite://PATH`, or a plain path: a SQLite file.
    ///
    /// PostgreSQL connections are plain TCP or a Unix socket
    /// (`?host=/run/postgresql`): no TLS yet, so keep the database on a
    /// private network or the same host (`sslmode=require` fails to connect).
    pub fn open_url(url: &str) -> Result<Store> {
        let url = url.trim();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Store {
                inner: Inner::Postgres(PgStore::open(url)?),
            });
        }
        if url.is_empty() {
            return Err(StoreError::InvalidArgument(
                "the store URL is empty; give a file path, sqlite:PATH or postgres://...".into(),
            ));
        }
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url);
        if let Some((scheme, _)) = path.split_once("://") {
            return Err(StoreError::InvalidArgument(format!(
                "unknown store URL scheme {scheme:?}; use a file path, sqlite:PATH or \
                 postgres://user:password@host:port/database"
            )));
        }
        Store::open(PathBuf::from(path))
    }

    /// Which database this store uses.
    pub fn backend(&self) -> Backend {
        match &self.inner {
            Inner::Sqlite(_) => Backend::Sqlite,
            Inner::Postgres(_) => Backend::Postgres,
        }
    }

    /// The SQLite file, or for PostgreSQL the URL without its password (as
    /// a path, which is what error messages name).
    pub fn path(&self) -> &Path {
        match &self.inner {
            Inner::Sqlite(s) => s.path(),
            Inner::Postgres(p) => p.path(),
        }
    }

    /// The id runs started by this store record as their owner: alive as
    /// long as this store is open (a file lock on SQLite, a session advisory
    /// lock on PostgreSQL). `None` when the SQLite file system cannot lock.
    pub fn owner_id(&self) -> Option<&str> {
        match &self.inner {
            Inner::Sqlite(s) => s.owner_id(),
            Inner::Postgres(p) => Some(p.owner_id()),
        }
    }

    /// The workspace registered for `root`, registering it (named after its
    /// folder, no profile of its own) when there is none. Idempotent under
    /// concurrency: when another process or replica registers the same
    /// folder between the look-up and the insert, its row is returned, never
    /// [`StoreError::WorkspaceExists`].
    pub fn ensure_workspace(&self, root: &Path) -> Result<Workspace> {
        if let Some(ws) = self.get_workspace_by_root(root)? {
            return Ok(ws);
        }
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match self.add_workspace(root, &name, None) {
            Err(StoreError::WorkspaceExists { id, .. }) => {
                self.get_workspace_by_id(&id)?.ok_or(StoreError::NotFound {
                    what: "workspace",
                    id,
                })
            }
            other => other,
        }
    }

    /// A run's events with `seq > after` (all of them for `None`), waiting
    /// up to `timeout` for at least one if there is none yet: the read side
    /// of live streaming and `Last-Event-ID` replay. Returns an empty list
    /// at the timeout. Wakes on appends by any process: at once on
    /// PostgreSQL (`LISTEN`/`NOTIFY`) and for this store's own appends on
    /// SQLite, otherwise by polling every 50 ms. Blocks: call it from
    /// `spawn_blocking` or a thread.
    pub fn wait_events(
        &self,
        run_id: &str,
        after: Option<u64>,
        timeout: Duration,
    ) -> Result<Vec<StoredEvent>> {
        let deadline = Instant::now() + timeout;
        let (notifier, poll) = match &self.inner {
            Inner::Sqlite(s) => (&s.notifier, SQLITE_POLL),
            Inner::Postgres(p) => (p.notifier(), POSTGRES_POLL),
        };
        loop {
            let seen = notifier.generation();
            let events = self.events_since(run_id, after)?;
            if !events.is_empty() || Instant::now() >= deadline {
                return Ok(events);
            }
            notifier.wait(seen, deadline, poll);
        }
    }
}

delegate! {
    /// The schema version (equal to [`crate::SCHEMA_VERSION`] on SQLite, to
    /// [`crate::PG_SCHEMA_VERSION`] on PostgreSQL, once open).
    fn schema_version(&self) -> Result<u32>;
    /// `Ok(vec![])` when the database is sound, otherwise SQLite's list of
    /// problems (`PRAGMA integrity_check`, reads the whole file). PostgreSQL
    /// keeps its own consistency: there it checks only that the server
    /// answers. Diagnostics and tests.
    fn integrity_check(&self) -> Result<Vec<String>>;

    // Workspaces.
    /// Registers a workspace folder, stored canonical. See the crate docs.
    fn add_workspace(&self, root: &Path, name: &str, profile: Option<Profile>) -> Result<Workspace>;
    /// Every workspace, by name then id.
    fn list_workspaces(&self) -> Result<Vec<Workspace>>;
    /// The workspace with this id (`ws_...`); `None` when there is none.
    fn get_workspace_by_id(&self, id: &str) -> Result<Option<Workspace>>;
    /// Looks a workspace up by its folder (canonicalised when it exists).
    fn get_workspace_by_root(&self, root: &Path) -> Result<Option<Workspace>>;
    /// Forgets a workspace; sessions that used it lose the link.
    fn remove_workspace(&self, id: &str) -> Result<()>;
    /// Sets a workspace's own profile, or `None` to follow the configuration.
    fn set_profile(&self, id: &str, profile: Option<Profile>) -> Result<()>;
    /// Sets or clears a workspace's extra policy rules (valid JSON).
    fn set_policy_json(&self, id: &str, policy_json: Option<&str>) -> Result<()>;

    // Sessions and turns.
    /// Creates an empty session, optionally bound to an existing workspace.
    fn create_session(&self, title: &str, workspace_id: Option<&str>) -> Result<Session>;
    /// The session with this id; `None` when there is none or it was deleted.
    fn get_session(&self, id: &str) -> Result<Option<Session>>;
    /// The `limit` most recently updated sessions, newest first.
    fn list_sessions(&self, limit: usize) -> Result<Vec<Session>>;
    /// Sessions whose title or any turn contains `query` (case-insensitive).
    fn search_sessions(&self, query: &str, limit: usize) -> Result<Vec<Session>>;
    /// Deletes a session's conversation and events; runs holding approvals
    /// stay under a tombstone (the audit never loses a decision). Refused
    /// while one of its runs is `running`.
    fn delete_session(&self, id: &str) -> Result<SessionDeletion>;
    /// Binds the session to a registered workspace (`NotFound` otherwise), or
    /// unbinds it with `None`; bumps `updated_at`.
    fn set_session_workspace(&self, id: &str, workspace_id: Option<&str>) -> Result<()>;
    /// Renames the session; bumps `updated_at`.
    fn set_session_title(&self, id: &str, title: &str) -> Result<()>;
    /// Replaces the session's rolling summary.
    fn update_summary(&self, id: &str, summary: &str) -> Result<()>;
    /// Appends a turn (seq = the session's last + 1), durably.
    fn add_turn(&self, session_id: &str, run_id: Option<&str>, role: Role, content: &str) -> Result<Turn>;
    /// Appends run `run_id`'s assistant turn `answer` (none when it is empty)
    /// and replaces the session's summary: on SQLite one durable commit (one
    /// WAL flush instead of two).
    fn record_answer(&self, session_id: &str, run_id: &str, answer: &str, summary: &str) -> Result<()>;
    /// The last `n` turns of a session, oldest first.
    fn recent_turns(&self, session_id: &str, n: usize) -> Result<Vec<Turn>>;
    /// The session's token and cost totals; `NotFound` for an unknown session.
    fn session_usage(&self, session_id: &str) -> Result<Usage>;
    /// Adds one model call's usage to the session (and run) totals, durably.
    fn add_usage(&self, session_id: &str, run_id: Option<&str>, usage: &Usage) -> Result<()>;

    // Runs.
    /// Starts a `running` run of a session, owned by this store.
    fn start_run(&self, session_id: &str, model: &str) -> Result<Run>;
    /// Starts a run as [`Store::start_run`] does, refused with
    /// [`StoreError::SessionBusy`] while another run of the session is
    /// `running`, whichever process or replica started it: a session runs
    /// one message at a time. With a `quota`, the run is its user's, and is
    /// refused with [`StoreError::QuotaExceeded`] when the user's runs in
    /// flight, starts in the last minute or tokens in the last day are at
    /// the quota's limit, counted over every replica.
    fn start_run_exclusive(&self, session_id: &str, model: &str, quota: Option<&Quota>) -> Result<Run>;
    /// A new session (bound to an existing workspace, if given) and its first
    /// run, `running`: for a caller that makes a session to run one thing in
    /// it. On SQLite one commit, flushed by the next durable write (the
    /// command's audited verdict, the run's end), not by itself: no flush
    /// before a command starts that the audit does not need.
    fn start_run_in_new_session(&self, title: &str, workspace_id: Option<&str>, model: &str) -> Result<(Session, Run)>;
    /// [`Store::start_run_exclusive`] and the user's turn `message` of the new
    /// run: on SQLite one durable commit, so neither is stored without the
    /// other.
    fn start_run_with_turn(&self, session_id: &str, model: &str, quota: Option<&Quota>, message: &str) -> Result<(Run, Turn)>;
    /// A new session (bound to an existing workspace, if given) started by
    /// the user's `message`: the session, its first run (refused as
    /// [`Store::start_run_exclusive`] refuses, by `quota`) and the turn. On
    /// SQLite one durable commit, and nothing stored when the run is refused.
    fn start_run_with_turn_in_new_session(&self, title: &str, workspace_id: Option<&str>, model: &str, quota: Option<&Quota>, message: &str) -> Result<(Session, Run, Turn)>;
    /// Ends a run once (terminal status, reason, final usage totals) and
    /// drops its lease.
    fn finish_run(&self, id: &str, status: RunStatus, reason: Option<&str>, usage: Option<Usage>) -> Result<()>;
    /// [`Store::finish_run`] that also appends the run's last events (its
    /// terminal event) in the same transaction, so no reader sees the one
    /// without the other. On an error nothing is stored.
    fn finish_run_with_events(&self, id: &str, status: RunStatus, reason: Option<&str>, usage: Option<Usage>, last: &[EventRecord]) -> Result<()>;
    /// [`Store::finish_run_with_events`] and, when the ending has one,
    /// [`Store::record_answer`] of its answer: on SQLite one durable commit.
    /// The answer's failure does not keep the run from ending, and a run that
    /// cannot end still gets its answer. Returns the end's result, then the
    /// answer's (`Ok` without one).
    fn finish_run_with_answer(&self, ending: &RunEnding<'_>) -> (Result<()>, Result<()>);
    /// The run with this id; `None` when there is none.
    fn get_run(&self, id: &str) -> Result<Option<Run>>;
    /// The `running` run that requested approval `approval_id` (its
    /// `approval.requested` event), if any; reads only running runs' events.
    fn running_run_with_approval(&self, approval_id: &str) -> Result<Option<Run>>;
    /// The `limit` most recent runs, newest first.
    fn list_runs(&self, session_id: Option<&str>, limit: usize) -> Result<Vec<Run>>;
    /// Marks `interrupted` (reason `process-exited`) the `running` runs
    /// whose owning store is gone; never touches live owners' runs.
    /// With `ending`, each run's terminal event is appended in the same
    /// transaction (see [`crate::Ending`]).
    fn mark_interrupted_runs(&self, ending: Option<Ending<'_>>) -> Result<Vec<String>>;

    // Events.
    /// Appends one event with a caller-chosen seq, unique per run. Storing a
    /// `response.completed` deletes the run's `response.delta` events before
    /// it ([`crate::coalesce`]).
    fn append_event(&self, run_id: &str, seq: u64, ts: &str, kind: &str, json: &str) -> Result<()>;
    /// Appends a batch atomically (all or nothing).
    fn append_events(&self, batch: &[EventRecord]) -> Result<()>;
    /// A run's events, verbatim, in seq order.
    fn events(&self, run_id: &str) -> Result<Vec<String>>;
    /// A run's events with `seq > after`, in seq order.
    fn events_after(&self, run_id: &str, after: u64) -> Result<Vec<String>>;
    /// Appends an event at the run's next seq (0 for its first) and returns
    /// that seq. `json` builds the envelope from the seq it will carry.
    /// Concurrent appenders to one run, in any process, get distinct,
    /// gap-free seqs: the read of the last seq and the insert are one
    /// transaction serialised per run (SQLite's write lock; a row lock on
    /// the run on PostgreSQL), and `(run_id, seq)` is the primary key.
    fn append_next_event(&self, run_id: &str, ts: &str, kind: &str, json: impl FnOnce(u64) -> String + Send) -> Result<u64>;
    /// A run's events with `seq > after` (all for `None`) with their seqs:
    /// the cursor read for `Last-Event-ID` replay. See [`Store::wait_events`].
    fn events_since(&self, run_id: &str, after: Option<u64>) -> Result<Vec<StoredEvent>>;

    // Leases (see the crate docs).
    /// Claims a `running` run for `owner` until `ttl` from now: granted when
    /// nobody holds it, when `owner` already does (a renewal), or when the
    /// holder's lease has expired (a take-over, reported in
    /// [`LeaseClaim::took_over_from`]). Otherwise [`StoreError::LeaseHeld`];
    /// [`StoreError::RunNotRunning`] for an ended run.
    fn claim_run(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<LeaseClaim>;
    /// The heartbeat: extends `owner`'s lease to `ttl` from now and returns
    /// the new expiry. [`StoreError::LeaseLost`] when `owner` no longer holds
    /// it (taken over after expiring, or the run ended): stop working on it.
    /// An expired lease nobody took over is renewed.
    fn renew_lease(&self, run_id: &str, owner: &str, ttl: Duration) -> Result<String>;
    /// Marks `interrupted` (reason [`crate::LEASE_EXPIRED_REASON`]) every
    /// `running` run whose lease has expired, and returns their ids, oldest
    /// first. Runs never leased are left to [`Store::mark_interrupted_runs`].
    /// With `ending`, each run's terminal event is appended in the same
    /// transaction.
    fn interrupt_expired_leases(&self, ending: Option<Ending<'_>>) -> Result<Vec<String>>;
    /// The `running` runs whose lease has expired, oldest first: candidates
    /// for a take-over ([`Store::claim_run`]) before the sweep interrupts them.
    fn expired_leases(&self) -> Result<Vec<String>>;
    /// Stores what a replica needs to resume the run (the host's JSON,
    /// opaque here), replacing any earlier one. Only a `running` run takes
    /// one ([`StoreError::RunNotRunning`] otherwise).
    fn save_checkpoint(&self, run_id: &str, json: &str) -> Result<()>;
    /// The run's last checkpoint; `None` when it saved none.
    fn run_checkpoint(&self, run_id: &str) -> Result<Option<String>>;

    // Requests for a run's owner (see the `requests` module).
    /// Leaves a request for the replica that serves `target` (a run id for
    /// a cancel, an approval id for a decision); returns its id.
    fn add_run_request(&self, target: &str, kind: &RunRequestKind) -> Result<i64>;
    /// Takes (deletes and returns, oldest first) the requests for these
    /// targets: each request is taken by one caller only.
    fn take_run_requests(&self, targets: &[String]) -> Result<Vec<RunRequest>>;
    /// Withdraws a request nobody took; `false` when it was taken already.
    fn withdraw_run_request(&self, id: i64) -> Result<bool>;
    /// Whether a request still waits to be taken.
    fn run_request_pending(&self, id: i64) -> Result<bool>;

    // Approvals.
    /// Records an approval decision durably (once per id).
    fn record_approval(&self, a: &NewApproval<'_>) -> Result<Approval>;
    /// The `limit` most recent approvals, oldest first.
    fn list_approvals(&self, run_id: Option<&str>, limit: usize) -> Result<Vec<Approval>>;
}
