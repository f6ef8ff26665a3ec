//! One error type for the store. Every message names the database file and,
//! where there is one, the thing a person can do about it.

use std::path::PathBuf;

use rusqlite::ErrorCode;

/// What went wrong, with enough context to act on without reading code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// SQLite could not open or create the file (missing directory, mode bits,
    /// a directory where the file should be...).
    #[error("cannot open database {path}: {reason}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        reason: String,
    },

    /// The file exists but is not SQLite (or its header is damaged).
    #[error(
        "{path} is not a SQLite database (or its header is damaged); \
         move it aside and Capstan will create a new one"
    )]
    NotADatabase {
        /// The file.
        path: PathBuf,
    },

    /// A SQLite file (or PostgreSQL database) that some other program owns:
    /// Capstan will not write to it.
    #[error(
        "{path} is a database but not Capstan's ({detail}); \
         point Capstan's data directory (or store URL) somewhere else"
    )]
    ForeignDatabase {
        /// The database file (for PostgreSQL, its URL without the password).
        path: PathBuf,
        /// What gave it away (e.g. tables but no `capstan_schema`).
        detail: String,
    },

    /// The file was written by a newer Capstan. Migrations only go forward, so
    /// this Capstan cannot know what the newer schema means.
    #[error(
        "database at {path} is newer (schema v{found}) than this Capstan (v{supported}); \
         upgrade Capstan, or point it at another data directory"
    )]
    SchemaTooNew {
        /// The database file (for PostgreSQL, its URL without the password).
        path: PathBuf,
        /// The schema version the database is at.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },

    /// A migration failed. Each migration is one transaction, so the file is
    /// left at the previous version.
    #[error(
        "cannot migrate database {path} to schema v{version}: {source}; \
         the database was left at v{previous}"
    )]
    Migration {
        /// The database file (for PostgreSQL, its URL without the password).
        path: PathBuf,
        /// The version the failed migration would have reached.
        version: u32,
        /// The version the database was left at.
        previous: u32,
        /// SQLite's error.
        source: rusqlite::Error,
    },

    /// Another connection held the write lock for longer than the busy timeout.
    #[error(
        "database {path} is locked by another process (waited {waited_ms} ms); \
         retry, or stop the other Capstan using this data directory"
    )]
    Busy {
        /// The database file.
        path: PathBuf,
        /// How long this call waited, in milliseconds.
        waited_ms: u64,
    },

    /// SQLite detected a damaged page.
    #[error(
        "database {path} is corrupt ({detail}); move it aside (or try `sqlite3 {path} .recover`) \
         and Capstan will create a new one"
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// SQLite's description of the damage.
        detail: String,
    },

    /// The disk (or the quota) is full; nothing of the failed write was kept.
    #[error("database {path}: the disk is full; free some space and retry")]
    DiskFull {
        /// The database file.
        path: PathBuf,
    },

    /// The file or its directory is read-only to this process (SQLite also
    /// needs to create `-wal` and `-shm` files beside the database).
    #[error(
        "database {path} is read-only to this process; Capstan needs write access to the \
         file and to its directory (for the -wal and -shm files)"
    )]
    ReadOnly {
        /// The database file.
        path: PathBuf,
    },

    /// A durable write was committed but flushing the WAL to disk failed: it
    /// survives a crash of Capstan, maybe not a power loss.
    #[error(
        "database {path}: a write was committed but could not be flushed to disk ({source}); \
         it survives a crash of Capstan but maybe not a power loss; check the disk"
    )]
    Flush {
        /// The database file.
        path: PathBuf,
        /// Why `fdatasync` of its WAL failed.
        source: std::io::Error,
    },

    /// No row with this id.
    #[error("no {what} with id {id}")]
    NotFound {
        /// What was looked up, in words (`run`, `session`...).
        what: &'static str,
        /// The id asked for.
        id: String,
    },

    /// `add_workspace` for a root that is already registered.
    #[error("workspace {root} is already registered as {id}")]
    WorkspaceExists {
        /// The canonical root asked for.
        root: PathBuf,
        /// The id it is registered under.
        id: String,
    },

    /// A workspace root that cannot be resolved to a canonical directory.
    #[error("cannot use {root} as a workspace root: {source}")]
    WorkspaceRoot {
        /// The root as given.
        root: PathBuf,
        /// Why canonicalising it failed.
        source: std::io::Error,
    },

    /// An event with this `(run_id, seq)` is already stored. Within one
    /// `append_events` call nothing of the batch was kept.
    #[error("event {seq} of run {run_id} is already stored (event seqs are unique per run)")]
    DuplicateEvent {
        /// The run.
        run_id: String,
        /// The seq already present.
        seq: u64,
    },

    /// `finish_run` on a run that is no longer `running`.
    #[error("run {id} has already finished ({status})")]
    RunNotRunning {
        /// The run.
        id: String,
        /// The status it ended with.
        status: String,
    },

    /// `delete_session` while one of the session's runs is still running.
    #[error(
        "session {id} has a run in flight ({run_id}); cancel it or wait for it to end, then delete"
    )]
    SessionRunning {
        /// The session.
        id: String,
        /// Its run still in flight.
        run_id: String,
    },

    /// `start_run_exclusive` while another run of the session is running,
    /// in this process or any other sharing the database.
    #[error(
        "session {id} already has a run in progress ({run_id}), maybe started from another \
         window, process or replica; wait for it to end or cancel it, then ask again"
    )]
    SessionBusy {
        /// The session.
        id: String,
        /// Its run in flight.
        run_id: String,
    },

    /// A user's [`crate::Quota`] leaves no room for another run now.
    #[error(
        "{user} is at their limit of {what} ({shown}); {advice}",
        what = kind.describe(),
        shown = match kind {
            crate::QuotaKind::CostPerDay => format!("${:.2}", *limit as f64 / 100.0),
            _ => limit.to_string(),
        },
        advice = match kind {
            crate::QuotaKind::Running => format!(
                "wait for a run to end (or cancel one), then ask again; the server's \
                 operator sets `{}` under [[server.user]]", kind.key()),
            _ => format!(
                "try again in {retry_after_secs} s; the server's operator sets `{}` under \
                 [[server.user]]", kind.key()),
        }
    )]
    QuotaExceeded {
        /// The user.
        user: String,
        /// Which limit.
        kind: crate::QuotaKind,
        /// Its value (a USD limit in cents).
        limit: u64,
        /// When a retry may succeed, in seconds (a guess for runs in flight).
        retry_after_secs: u64,
    },

    /// A caller passed a value the store refuses (e.g. `finish_run` with status
    /// `running`, or JSON that does not parse).
    #[error("{0}")]
    InvalidArgument(String),

    /// The background event writer has stopped (its thread panicked).
    #[error("the event writer for database {path} has stopped")]
    WriterStopped {
        /// The database file.
        path: PathBuf,
    },

    /// `claim_run` on a run whose lease another owner holds and has not let
    /// expire.
    #[error("run {run_id} is leased to {owner} until {expires_at}; another replica is running it")]
    LeaseHeld {
        /// The run asked for.
        run_id: String,
        /// The owner holding the lease.
        owner: String,
        /// When the lease expires unless renewed (RFC 3339, UTC).
        expires_at: String,
    },

    /// `renew_lease` by an owner that no longer holds the run's lease (it
    /// expired and was taken over, or the run ended): stop working on the run.
    #[error("{owner} no longer holds the lease on run {run_id}; stop working on it")]
    LeaseLost {
        /// The run.
        run_id: String,
        /// The owner that asked to renew.
        owner: String,
    },

    /// A PostgreSQL failure (`url` has its password removed).
    #[error("database {url}: {detail}")]
    Postgres {
        /// The server's URL, password removed.
        url: String,
        /// The driver's or server's message.
        detail: String,
    },

    /// Any other SQLite failure.
    #[error("database {path}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
}

/// Results of the store, failing with [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The store's busy timeout; also reported in [`StoreError::Busy`].
pub(crate) const BUSY_TIMEOUT_MS: u64 = 5_000;

/// Turns a SQLite error into the variant a person can act on. Constraint
/// violations are not handled here: call sites know which constraint they hit.
pub(crate) fn classify(path: &std::path::Path, err: rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    let Some(code) = err.sqlite_error_code() else {
        return StoreError::Sqlite { path, source: err };
    };
    match code {
        ErrorCode::CannotOpen => {
            let reason = cannot_open_reason(&path);
            StoreError::Open { path, reason }
        }
        ErrorCode::PermissionDenied => StoreError::Open {
            path,
            reason: "permission denied; check that this user may read and write the file \
                     and its directory"
                .into(),
        },
        ErrorCode::NotADatabase => StoreError::NotADatabase { path },
        ErrorCode::DatabaseCorrupt => StoreError::Corrupt {
            path,
            detail: err.to_string(),
        },
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => StoreError::Busy {
            path,
            waited_ms: BUSY_TIMEOUT_MS,
        },
        ErrorCode::DiskFull => StoreError::DiskFull { path },
        ErrorCode::ReadOnly => StoreError::ReadOnly { path },
        _ => StoreError::Sqlite { path, source: err },
    }
}

/// SQLite says only "unable to open database file": look at the file system
/// for the likely reason.
fn cannot_open_reason(path: &std::path::Path) -> String {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    match std::fs::metadata(parent) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!(
            "directory {} does not exist; create it (Capstan's data directory) first",
            parent.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => format!(
            "permission denied on directory {}; check its owner and mode",
            parent.display()
        ),
        Ok(m) if !m.is_dir() => format!("{} is not a directory", parent.display()),
        _ => match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => "it is a directory; pass the path of a file".into(),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                "permission denied; check the file's owner and mode".into()
            }
            _ => "permission denied or unusable path; check that this user may create and \
                  write files there"
                .into(),
        },
    }
}
