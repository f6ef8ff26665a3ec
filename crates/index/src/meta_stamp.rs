//! Whether `meta.json` (the last commit) changed since this process last read
//! it. tantivy re-reads and re-parses it on every `reload` and `load_metas`;
//! with a workspace's file list in its payload it is hundreds of KiB (410 KiB
//! for linux-doc's 3,183 files), read up to six times by one search. A commit
//! writes it to a temporary file and renames that over the old one, so a new
//! commit has a new inode and modification time: one `statx` tells.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Mutex;

/// What identifies one version of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

/// The stamps of `meta.json` at the last reader reload and the last file-list read.
#[derive(Debug)]
pub(crate) struct MetaStamps {
    path: PathBuf,
    reader: Mutex<Option<Stamp>>,
    files: Mutex<Option<Stamp>>,
}

impl MetaStamps {
    pub(crate) fn new(dir: &std::path::Path) -> Self {
        Self {
            path: dir.join("meta.json"),
            reader: Mutex::new(None),
            files: Mutex::new(None),
        }
    }

    /// The stamp now (`None` if the file cannot be stat'ed: then nothing is
    /// ever taken as unchanged). Take it before reading, so a commit landing
    /// in between shows as a change next time.
    pub(crate) fn now(&self) -> Option<Stamp> {
        let m = std::fs::metadata(&self.path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }

    /// The reader reloaded after `now` was taken.
    pub(crate) fn reader_read(&self, now: Option<Stamp>) {
        *lock(&self.reader) = now;
    }

    /// The file list read after `now` was taken.
    pub(crate) fn files_read(&self, now: Option<Stamp>) {
        *lock(&self.files) = now;
    }

    /// The reader has seen the commit stamped `now`.
    pub(crate) fn reader_current(&self, now: Option<Stamp>) -> bool {
        now.is_some() && *lock(&self.reader) == now
    }

    /// The file list is the one of the commit stamped `now`.
    pub(crate) fn files_current(&self, now: Option<Stamp>) -> bool {
        now.is_some() && *lock(&self.files) == now
    }
}

fn lock(m: &Mutex<Option<Stamp>>) -> std::sync::MutexGuard<'_, Option<Stamp>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
