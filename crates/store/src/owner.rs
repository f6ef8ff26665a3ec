//! Which process owns a running run, and whether that process is still alive.
//!
//! Several Capstan processes may share one database (`capstan serve` in one
//! terminal, `capstan ask` in another). At start-up a process must turn the
//! runs that a *dead* process left `running` into `interrupted`, without
//! touching the live runs of its neighbours. A timestamp cannot tell the two
//! apart (a run may stream for an hour); an OS file lock can.
//!
//! Each open [`crate::Store`] creates `<db>-owners/<owner-id>.lock` and holds an
//! exclusive lock on it for as long as it is open; runs it starts record that
//! owner id. The kernel drops the lock when the process dies, however it dies
//! (`kill -9` included). So "can I take the owner's lock?" answers "is the
//! owner dead?" with no heartbeat and no clock.
//!
//! If the file system cannot lock (some network file systems), the store runs
//! without an owner: its runs record no owner, and such runs count as dead to
//! every later start-up, the conservative pre-lock behaviour.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The lock this process holds while its store is open.
#[derive(Debug)]
pub(crate) struct OwnerLock {
    pub(crate) id: String,
    path: PathBuf,
    // Held, never read: dropping it (or the process dying) releases the lock.
    _file: File,
}

/// The directory of owner lock files for a database file.
pub(crate) fn owners_dir(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push("-owners");
    db.with_file_name(name)
}

impl OwnerLock {
    /// Creates and locks a fresh owner file. Errors mean "this file system
    /// cannot do it"; the caller then runs without an owner.
    pub(crate) fn acquire(db: &Path) -> io::Result<OwnerLock> {
        let dir = owners_dir(db);
        fs::create_dir_all(&dir)?;
        sweep(&dir);
        loop {
            let id = crate::new_id("own");
            let path = dir.join(format!("{id}.lock"));
            let mut file = match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            };
            // Blocking: a neighbour's sweep may hold it for an instant.
            file.lock()?;
            // That sweep may have deleted the file before we locked it: then
            // our lock is on an orphan nobody can find, so start again.
            if !path.exists() {
                continue;
            }
            // For people reading the directory; nothing parses it.
            let _ = writeln!(file, "pid {}", std::process::id());
            return Ok(OwnerLock {
                id,
                path,
                _file: file,
            });
        }
    }
}

impl Drop for OwnerLock {
    fn drop(&mut self) {
        // Best effort: a file left behind is swept by the next start-up.
        let _ = fs::remove_file(&self.path);
    }
}

/// Whether the process that owns `owner` is alive. Errors other than "the
/// lock is held" count as alive: wrongly leaving a run `running` is visible
/// and harmless, wrongly interrupting a live run is not.
pub(crate) fn is_alive(db: &Path, owner: &str) -> bool {
    // An owner id comes from our own database, but never let it name a path
    // outside the owners directory.
    if owner.is_empty()
        || !owner
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return false;
    }
    let path = owners_dir(db).join(format!("{owner}.lock"));
    match File::options().write(true).open(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(_) => true,
        Ok(file) => match file.try_lock() {
            Ok(()) => {
                // Dead: remove while we hold the lock, so nobody can take it in between.
                let _ = fs::remove_file(&path);
                false
            }
            Err(TryLockError::WouldBlock) => true,
            Err(TryLockError::Error(_)) => true,
        },
    }
}

/// Removes the lock files of dead processes (crashes leave them behind).
fn sweep(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "lock")
            && let Ok(file) = File::options().write(true).open(&path)
            && file.try_lock().is_ok()
        {
            let _ = fs::remove_file(&path);
        }
    }
}
