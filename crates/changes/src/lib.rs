//! The change store: every change a task makes to a workspace, landed
//! atomically and undoable.
//!
//! A sandboxed command's writes arrive as a [`ChangeSet`] (staged by
//! `capstan-sandbox`, nothing landed yet). [`Store::prepare`] keeps the
//! previous version of every path the set touches (content-addressed and
//! deduplicated in `objects/`), hashes the new contents and writes a
//! [`Record`] (`sets/<id>.json`) with a unified diff per text file. Then:
//!
//! * [`Store::land`] makes the workspace what the command saw, all or
//!   nothing: the operations go to a journal (`journal/<id>.json`, synced)
//!   before the first one runs, each finished operation is appended to
//!   `journal/<id>.done`, and every file is written as a temporary name in
//!   its directory renamed over the old one, so a file is always wholly old
//!   or wholly new. After a crash (kill -9), [`Store::open`] finishes every
//!   journal it finds (roll forward: the new contents are still staged, the
//!   old ones are in the store). A set of one operation (one file, the
//!   common case) is one rename and skips the journal.
//! * [`Store::discard`] drops a set nobody approved: the workspace never saw it.
//! * [`Store::undo`] puts the previous versions back, through the same
//!   journal. It first checks that every file is still exactly what the set
//!   left (SHA-256); a file changed since (by a person or a later run) is
//!   refused and named, and nothing is undone unless the caller says
//!   [`Conflicts::Skip`] (undo the others) or [`Conflicts::Force`]
//!   (overwrite).
//!
//! Everything is plain files under the store's root: it works with or
//! without git and never touches a git index.
//!
//! Durability: records and kept versions are written by rename (never half
//! written) but without a disk sync, so a killed process loses nothing (the
//! page cache outlives it) and a small command does not wait for the disk
//! (a sync costs 7 ms at the median here, 30 ms at p90). Only the journal,
//! which recovery depends on, is synced. After a power loss the newest sets
//! may be missing from the store.
//!
//! Retention: sets older than
//! [`Retention::keep_days`] are forgotten and, past
//! [`Retention::max_bytes`] of kept versions, the oldest sets go first
//! ([`Store::gc`]).

#![warn(missing_docs)]

mod fsops;
mod inventory;

use std::collections::HashSet;
use std::io::{BufRead, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub use capstan_protocol::ChangeSetState;
pub use capstan_sandbox::changes::{ChangeKind, ChangeSet, EntryType, Side, Staged};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Name prefix of an empty capture directory kept for the next command.
const SPARE: &str = ".spare-";

/// Largest unified diff kept per file.
const DIFF_CAP: usize = 32 << 10;
/// Largest sum of diffs kept per set.
const SET_DIFF_CAP: usize = 256 << 10;
/// How many finished file moves a journal records with one write.
const DONE_BATCH: usize = 64;
/// What a diff cut short, or left out past the set's budget, ends with.
const CUT: &str = "\n[diff cut: too long]\n";
/// Largest file diffed as text.
const TEXT_CAP: u64 = 1 << 20;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file of the store or the workspace failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory at fault.
        path: PathBuf,
        /// The filesystem's error.
        source: std::io::Error,
    },
    /// No set with this id is kept (never made, or forgotten by retention).
    #[error("no change set {0:?} (see `capstan changes`)")]
    NotFound(String),
    /// The operation does not fit the set's state or contents (e.g. applying a
    /// set that is not pending); the message says which.
    #[error("{0}")]
    Invalid(String),
}

/// Results of the change store, failing with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How long previous versions are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Sets older than this are forgotten (0: keep forever).
    pub keep_days: u64,
    /// Past this many bytes of kept versions, the oldest sets are forgotten.
    pub max_bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_days: 30,
            max_bytes: 2 << 30,
        }
    }
}

/// One change of a record: the sandbox's [`capstan_sandbox::changes::Change`]
/// plus the hashes undo checks and restores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Workspace-relative, `/`-separated path (the new one, for a rename).
    pub path: String,
    /// What happened to it.
    pub kind: ChangeKind,
    /// Renamed: the old path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The entry before; absent when created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<Side>,
    /// The entry after; absent when deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<Side>,
    /// SHA-256 of the previous content (files), kept in the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_hash: Option<String>,
    /// SHA-256 of the new content (files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_hash: Option<String>,
    /// Unified diff (text) or a one-line summary (binary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Binary content (no text diff).
    #[serde(default)]
    pub binary: bool,
    /// Written by a plugin operation that did not name it in its input: seen
    /// by comparing the workspace before and after, but its previous version
    /// was not kept, so undo cannot put back its old content.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undeclared: bool,
}

impl FileChange {
    /// Why undo cannot restore this change whatever it is told, if it cannot.
    pub fn unrestorable(&self) -> Option<String> {
        let needs_old_content = self
            .old
            .as_ref()
            .is_some_and(|s| s.entry == EntryType::File)
            && self.kind != ChangeKind::ModeChanged;
        (needs_old_content && self.old_hash.is_none()).then(|| {
            "its previous version was not kept: the operation wrote it without naming it in its input"
                .to_owned()
        })
    }
}

/// What started a set: who, where.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The run whose task made the changes.
    pub run_id: String,
    /// The task within that run.
    pub task_id: String,
    /// The command line or plugin operation.
    pub source: String,
}

/// A change set as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The set's id, as `capstan changes` and `capstan undo` take it.
    pub id: String,
    /// Who made it (flattened: `run_id`, `task_id`, `source`).
    #[serde(flatten)]
    pub origin: Origin,
    /// The workspace root the paths are relative to.
    pub workspace: PathBuf,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// Where the set is in its life.
    pub state: ChangeSetState,
    /// One entry per changed path.
    pub changes: Vec<FileChange>,
    /// Operations that land the set (kept until it is applied or discarded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<Staged>,
    /// Staged new contents (until landed or discarded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging: Option<PathBuf>,
    /// Files undo refused or skipped, with why (last undo).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<Refusal>,
}

impl Record {
    /// Bytes before and after, summed over files.
    pub fn sizes(&self) -> (u64, u64) {
        self.changes.iter().fold((0, 0), |(a, b), c| {
            (
                a + c.old.as_ref().map_or(0, |s| s.size),
                b + c.new.as_ref().map_or(0, |s| s.size),
            )
        })
    }
}

/// A file undo did not restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// Workspace-relative path of the file.
    pub path: String,
    /// Why it was not restored (e.g. changed since the set landed).
    pub why: String,
}

/// What undo does with files changed since the set landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflicts {
    /// Undo nothing and name them.
    Refuse,
    /// Undo the other files, leave these as they are.
    Skip,
    /// Put the previous versions back over them.
    Force,
}

/// What an undo did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UndoReport {
    /// The set undone.
    pub id: String,
    /// Paths put back as they were.
    pub restored: Vec<String>,
    /// Files changed since, not restored.
    pub refused: Vec<Refusal>,
    /// Whether the undo ran (false: refused as a whole).
    pub done: bool,
}

/// Land and undo operations, replayable after a crash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Op {
    /// Remove a file, symlink or whole tree.
    Remove {
        path: String,
    },
    /// Make a directory (`replace`: remove what is there first).
    Mkdir {
        path: String,
        mode: u32,
        replace: bool,
    },
    /// Move a staged file into place. A file whose mode lets its owner
    /// read it was staged with its final mode and modification time (see
    /// `capstan_sandbox::changes`); others get them here.
    PutStaged {
        path: String,
        staged: PathBuf,
        mode: u32,
        mtime: (i64, i64),
    },
    /// Copy a stored version into place.
    PutObject {
        path: String,
        hash: String,
        mode: u32,
    },
    Symlink {
        path: String,
        target: String,
    },
    Chmod {
        path: String,
        mode: u32,
    },
    /// Remove a directory if nothing is left in it.
    RmdirIfEmpty {
        path: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    id: String,
    /// `land` or `undo`.
    action: String,
    workspace: PathBuf,
    ops: Vec<Op>,
    /// Undo: the files restored, and those refused (for the record).
    #[serde(default)]
    kept: Vec<Refusal>,
}

/// The store, rooted in Capstan's data dir.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    retention: Retention,
}

/// What [`Store::open`] found and finished.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Sets whose landing or undo a crash interrupted, now finished.
    pub finished: Vec<String>,
    /// Journals that could not be finished, with why.
    pub errors: Vec<String>,
}

impl Store {
    /// Opens (creating) the store at `root` and finishes any landing or undo
    /// a crash interrupted.
    pub fn open(root: impl Into<PathBuf>, retention: Retention) -> Result<(Store, Recovery)> {
        let root = root.into();
        for d in ["objects", "sets", "journal", "staging"] {
            let p = root.join(d);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
        }
        let store = Store { root, retention };
        let recovery = store.recover();
        Ok((store, recovery))
    }

    /// The store's directory (`sets/`, `objects/`, `staging/`, `journal/`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A fresh, empty capture directory for one command: a spare one (see
    /// [`Store::retire_staging`]) renamed, or a new one.
    pub fn new_staging(&self) -> Result<(String, PathBuf)> {
        let id = new_id();
        let staging = self.root.join("staging");
        let dir = staging.join(&id);
        let spare = std::fs::read_dir(&staging)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                // Another command may take the same spare first: then the rename
                // fails and the next one is tried.
                e.file_name().as_bytes().starts_with(SPARE.as_bytes())
                    && std::fs::rename(e.path(), &dir).is_ok()
            });
        if !spare {
            std::fs::create_dir(&dir).map_err(io(&dir))?;
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io(&dir))?;
        Ok((id, dir))
    }

    /// Done with a capture directory (its set landed or was discarded, or
    /// the command changed nothing): its files go and the empty directory is
    /// kept, renamed, for the next command. Creating and removing a
    /// directory on every command cost a disk block allocated and freed each
    /// time, and where the disk frees blocks with a synchronous discard (ext4
    /// mounted with `discard` and no journal, as on the bench VM) the
    /// `rmdir` alone was 0.6 to 3 ms of a one-file command's landing. There
    /// are never more spares than commands that ran at the same time.
    pub fn retire_staging(&self, dir: &Path) {
        let staging = self.root.join("staging");
        let emptied = dir.parent() == Some(staging.as_path())
            && std::fs::read_dir(dir)
                .is_ok_and(|rd| rd.flatten().all(|e| std::fs::remove_file(e.path()).is_ok()));
        let spare = staging.join(format!("{SPARE}{:08x}", fastrand::u32(..)));
        if !(emptied && std::fs::rename(dir, &spare).is_ok()) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    fn set_path(&self, id: &str) -> PathBuf {
        self.root.join("sets").join(format!("{id}.json"))
    }

    fn object_path(&self, hash: &str) -> PathBuf {
        self.root.join("objects").join(&hash[..2]).join(&hash[2..])
    }

    /// Keeps the previous version of every path in `set`, hashes the new
    /// contents, and records the set as [`ChangeSetState::Pending`]. `id` is the one
    /// [`Store::new_staging`] gave.
    pub fn prepare(&self, id: &str, set: &ChangeSet, origin: Origin) -> Result<Record> {
        check_id(id)?;
        let mut changes = Vec::with_capacity(set.changes.len());
        let mut diff_budget = SET_DIFF_CAP;
        for c in &set.changes {
            let mut fc = FileChange {
                path: c.path.clone(),
                kind: c.kind,
                from: c.from.clone(),
                old: c.old.clone(),
                new: c.new.clone(),
                old_hash: None,
                new_hash: None,
                diff: None,
                binary: false,
                undeclared: false,
            };
            let old_path = set.workspace.join(c.from.as_deref().unwrap_or(&c.path));
            if c.old.as_ref().is_some_and(|s| s.entry == EntryType::File) {
                fc.old_hash = Some(self.keep(&old_path)?);
            }
            let new_path = c.staged.as_ref().map(|s| set.staging.join(s));
            // One read of the new content gives both its hash and, for a
            // text-sized file, the text of its diff.
            let mut new_text = None;
            if let Some(p) = &new_path {
                let (hash, bytes) = hash_and_read(p, TEXT_CAP)?;
                fc.new_hash = Some(hash);
                new_text = bytes;
            }
            let old_file = fc.old_hash.as_ref().map(|_| old_path.as_path());
            let new_side = match (&new_path, &new_text) {
                (Some(_), Some(bytes)) => Body::Read(bytes),
                (Some(p), None) => Body::File(p),
                (None, _) => Body::Absent,
            };
            let (diff, binary) = describe(
                c.kind,
                old_file.map_or(Body::Absent, Body::File),
                new_side,
                &c.path,
                &c.from,
                diff_budget > 0,
            );
            fc.binary = binary;
            fc.diff = diff.map(|d| {
                let d = cap(d, DIFF_CAP.min(diff_budget));
                diff_budget = diff_budget.saturating_sub(d.len());
                d
            });
            changes.push(fc);
        }
        let record = Record {
            id: id.to_owned(),
            origin,
            workspace: set.workspace.clone(),
            created_ms: now_ms(),
            state: ChangeSetState::Pending,
            changes,
            ops: set.ops.clone(),
            staging: Some(set.staging.clone()),
            kept: Vec::new(),
        };
        self.save(&record)?;
        Ok(record)
    }

    /// Snapshots files a plugin operation is about to write (`paths`,
    /// workspace-relative): their previous versions are kept. The rest of
    /// the workspace is pictured by stamp only (see `inventory`), so a write
    /// the operation did not declare is still seen. Call
    /// [`Store::record_snapshot`] after the operation with the returned value.
    pub fn snapshot(&self, workspace: &Path, paths: &[String]) -> Result<Snapshot> {
        let mut before = Vec::new();
        for p in paths {
            check_rel(p)?;
            let abs = workspace.join(p);
            let side = capstan_sandbox::changes::lstat_in(workspace, p)
                .and_then(|m| capstan_sandbox::changes::side(&abs, &m));
            let hash = match &side {
                Some(s) if s.entry == EntryType::File => Some(self.keep(&abs)?),
                _ => None,
            };
            before.push((p.clone(), side, hash));
        }
        Ok(Snapshot {
            workspace: workspace.to_path_buf(),
            before,
            inventory: inventory::take(workspace),
        })
    }

    /// Records what a plugin operation changed (already in the workspace: the
    /// set is [`ChangeSetState::Applied`]): the snapshotted files with their
    /// previous versions, and any other entry whose stamp changed, flagged
    /// [`FileChange::undeclared`]. `None` when nothing changed.
    pub fn record_snapshot(&self, snap: Snapshot, origin: Origin) -> Result<Option<Record>> {
        let mut changes = Vec::new();
        let mut diff_budget = SET_DIFF_CAP;
        let declared: HashSet<String> = snap.before.iter().map(|(p, ..)| p.clone()).collect();
        let mut cap_diff = |d: String| {
            let d = cap(d, DIFF_CAP.min(diff_budget));
            diff_budget = diff_budget.saturating_sub(d.len());
            d
        };
        for (p, old, old_hash) in snap.before {
            let abs = snap.workspace.join(&p);
            let new = capstan_sandbox::changes::lstat_in(&snap.workspace, &p)
                .and_then(|m| capstan_sandbox::changes::side(&abs, &m));
            let new_hash = match &new {
                Some(s) if s.entry == EntryType::File => Some(hash_file(&abs)?),
                _ => None,
            };
            let kind = match (&old, &new) {
                (None, None) => continue,
                (None, Some(_)) => ChangeKind::Created,
                (Some(_), None) => ChangeKind::Deleted,
                (Some(o), Some(n)) => {
                    if old_hash == new_hash && o.target == n.target && o.entry == n.entry {
                        if o.mode == n.mode {
                            continue;
                        }
                        ChangeKind::ModeChanged
                    } else {
                        ChangeKind::Modified
                    }
                }
            };
            // The new content is kept too: the workspace file may change again.
            if new_hash.is_some() {
                self.keep(&abs)?;
            }
            let old_file = old_hash.as_ref().map(|h| self.object_path(h));
            let new_file = new_hash.as_ref().map(|_| abs.clone());
            let (diff, binary) = describe(
                kind,
                old_file.as_deref().map_or(Body::Absent, Body::File),
                new_file.as_deref().map_or(Body::Absent, Body::File),
                &p,
                &None,
                true,
            );
            changes.push(FileChange {
                path: p,
                kind,
                from: None,
                old,
                new,
                old_hash,
                new_hash,
                diff: diff.map(&mut cap_diff),
                binary,
                undeclared: false,
            });
        }
        if !snap.inventory.cut {
            let after = inventory::take(&snap.workspace);
            for c in self.undeclared(&snap.workspace, &snap.inventory, &after, &declared)? {
                changes.push(FileChange {
                    diff: c.diff.map(&mut cap_diff),
                    ..c
                });
            }
        }
        if changes.is_empty() {
            return Ok(None);
        }
        let record = Record {
            id: new_id(),
            origin,
            workspace: snap.workspace,
            created_ms: now_ms(),
            state: ChangeSetState::Applied,
            changes,
            ops: Vec::new(),
            staging: None,
            kept: Vec::new(),
        };
        self.save(&record)?;
        Ok(Some(record))
    }

    /// The entries that differ between two pictures of a workspace, outside
    /// `declared`. New file contents are kept (undo checks them before it
    /// removes a created file); old ones were never read.
    fn undeclared(
        &self,
        ws: &Path,
        before: &inventory::Inventory,
        after: &inventory::Inventory,
        declared: &HashSet<String>,
    ) -> Result<Vec<FileChange>> {
        let mut out = Vec::new();
        let paths: std::collections::BTreeSet<&String> =
            before.entries.keys().chain(after.entries.keys()).collect();
        for p in paths {
            if declared.contains(p.as_str()) {
                continue;
            }
            let (old, new) = (before.entries.get(p), after.entries.get(p));
            let kind = match (old, new) {
                (None, None) => continue,
                (None, Some(_)) => ChangeKind::Created,
                (Some(_), None) => ChangeKind::Deleted,
                (Some(o), Some(n)) if o.content_differs(n) => ChangeKind::Modified,
                (Some(o), Some(n)) if o.side.mode != n.side.mode => ChangeKind::ModeChanged,
                _ => continue,
            };
            let new = new.map(|s| s.side.clone());
            let abs = ws.join(p.as_str());
            let new_hash = match &new {
                Some(s) if s.entry == EntryType::File => Some(self.keep(&abs)?),
                _ => None,
            };
            let old = old.map(|s| s.side.clone());
            let (diff, binary) = if kind == ChangeKind::Created {
                let new_file = new_hash.as_ref().map(|_| abs.as_path());
                describe(
                    kind,
                    Body::Absent,
                    new_file.map_or(Body::Absent, Body::File),
                    p,
                    &None,
                    true,
                )
            } else {
                (None, false)
            };
            let change = FileChange {
                path: p.clone(),
                kind,
                from: None,
                old,
                new,
                old_hash: None,
                new_hash,
                diff,
                binary,
                undeclared: true,
            };
            let diff = change
                .unrestorable()
                .map(|why| format!("not undoable: {why}"));
            out.push(FileChange {
                diff: change.diff.clone().or(diff),
                binary: change.binary || change.unrestorable().is_some(),
                ..change
            });
        }
        Ok(out)
    }

    /// Lands a pending set: all or nothing, through the journal.
    pub fn land(&self, id: &str) -> Result<Record> {
        self.land_prepared(self.get(id)?)
    }

    /// [`Store::land`] for the record [`Store::prepare`] just returned,
    /// without reading it back (a set of 10,000 files is megabytes of JSON).
    /// A set held for review is landed by id: its record on disk is the one
    /// that counts.
    pub fn land_prepared(&self, mut record: Record) -> Result<Record> {
        let id = record.id.clone();
        check_id(&id)?;
        if record.state != ChangeSetState::Pending {
            return Err(Error::Invalid(format!(
                "change set {id} is {}, not pending: nothing to land",
                record.state
            )));
        }
        let staging = record
            .staging
            .clone()
            .ok_or_else(|| Error::Invalid(format!("change set {id} has nothing staged")))?;
        let ops = land_ops(&record.ops, &staging);
        if let [op] = ops.as_slice() {
            // One operation is one rename (or one removal): all or nothing by
            // itself, and safe to run again, so it needs no journal. Most
            // commands change one file; this spares them the journal's sync.
            fsops::apply(self, &record.workspace, op)?;
            record.state = ChangeSetState::Applied;
            record.ops.clear();
            if let Some(s) = record.staging.take() {
                self.retire_staging(&s);
            }
            self.save(&record)?;
            return Ok(record);
        }
        let journal = Journal {
            id: id.to_owned(),
            action: "land".into(),
            workspace: record.workspace.clone(),
            ops,
            kept: Vec::new(),
        };
        self.run_journal(&journal, 0, Some(record))
    }

    /// Drops a pending set: its staged contents go, the workspace never saw it.
    pub fn discard(&self, id: &str) -> Result<Record> {
        let mut record = self.get(id)?;
        if record.state != ChangeSetState::Pending {
            return Err(Error::Invalid(format!(
                "change set {id} is {}, not pending: nothing to discard",
                record.state
            )));
        }
        if let Some(s) = record.staging.take() {
            self.retire_staging(&s);
        }
        record.ops.clear();
        record.state = ChangeSetState::Discarded;
        self.save(&record)?;
        Ok(record)
    }

    /// Undoes an applied set (see the crate docs for `conflicts`).
    pub fn undo(&self, id: &str, conflicts: Conflicts) -> Result<UndoReport> {
        let record = self.get(id)?;
        if record.state != ChangeSetState::Applied {
            return Err(Error::Invalid(format!(
                "change set {id} is {}: only an applied set can be undone",
                record.state
            )));
        }
        let ws = &record.workspace;
        let mut refused = Vec::new();
        // Never restorable, whatever `conflicts` says: always left as they are.
        let mut unrestorable = Vec::new();
        // A path changed twice in one set (a file replaced by a directory):
        // its last change says what should be there now.
        let mut last = std::collections::HashMap::new();
        for (i, c) in record.changes.iter().enumerate() {
            last.insert(c.path.as_str(), i);
        }
        for (i, c) in record.changes.iter().enumerate() {
            if last.get(c.path.as_str()) != Some(&i) {
                continue;
            }
            if let Some(why) = c.unrestorable() {
                unrestorable.push(Refusal {
                    path: c.path.clone(),
                    why,
                });
            } else if let Some(why) = self.changed_since(ws, c) {
                refused.push(Refusal {
                    path: c.path.clone(),
                    why,
                });
            }
        }
        let mut report = UndoReport {
            id: id.to_owned(),
            ..Default::default()
        };
        if (!refused.is_empty() || !unrestorable.is_empty()) && conflicts == Conflicts::Refuse {
            report.refused = unrestorable;
            report.refused.extend(refused);
            return Ok(report);
        }
        if conflicts == Conflicts::Force {
            refused.clear();
        }
        refused.extend(unrestorable);
        let skip: HashSet<&str> = refused.iter().map(|r| r.path.as_str()).collect();
        let mut ops = Vec::new();
        for c in record.changes.iter().rev() {
            if skip.contains(c.path.as_str()) {
                continue;
            }
            report.restored.push(c.path.clone());
            undo_ops(c, &mut ops);
        }
        report.refused = refused;
        let journal = Journal {
            id: id.to_owned(),
            action: "undo".into(),
            workspace: ws.clone(),
            ops,
            kept: report.refused.clone(),
        };
        self.run_journal(&journal, 0, Some(record))?;
        report.done = true;
        Ok(report)
    }

    /// Why `c`'s path is no longer what the set left, if it is not.
    fn changed_since(&self, ws: &Path, c: &FileChange) -> Option<String> {
        let abs = ws.join(&c.path);
        let now = capstan_sandbox::changes::lstat_in(ws, &c.path);
        let now_side = now
            .as_ref()
            .and_then(|m| capstan_sandbox::changes::side(&abs, m));
        match (&c.new, &now_side) {
            (None, None) => None,
            (None, Some(_)) => {
                Some("it was deleted by this change, and something is there now".into())
            }
            (Some(_), None) => Some("it was deleted since".into()),
            (Some(n), Some(s)) => {
                if n.entry != s.entry {
                    return Some("it is a different kind of entry now".into());
                }
                match n.entry {
                    EntryType::Dir => None,
                    EntryType::Symlink => {
                        (n.target != s.target).then(|| "the symlink points elsewhere now".into())
                    }
                    EntryType::File => {
                        let same = s.size == n.size
                            && c.new_hash
                                .as_deref()
                                .is_some_and(|h| hash_file(&abs).is_ok_and(|now| now == h));
                        if !same {
                            Some("its content changed since".into())
                        } else if c.kind == ChangeKind::ModeChanged && s.mode != n.mode {
                            Some("its permissions changed since".into())
                        } else {
                            None
                        }
                    }
                }
            }
        }
        .or_else(|| {
            // A rename: the old name must still be free.
            let from = c.from.as_ref()?;
            std::fs::symlink_metadata(ws.join(from))
                .is_ok()
                .then(|| format!("{from} (where it was renamed from) exists again"))
        })
    }

    /// Runs a journal from operation `start`, then closes the set's state
    /// and returns the record as saved. `record`: the set's record, when the
    /// caller has it (a set of 10,000 files is megabytes of JSON to read
    /// again).
    fn run_journal(
        &self,
        journal: &Journal,
        start: usize,
        record: Option<Record>,
    ) -> Result<Record> {
        let jpath = self
            .root
            .join("journal")
            .join(format!("{}.json", journal.id));
        let dpath = self
            .root
            .join("journal")
            .join(format!("{}.done", journal.id));
        if start == 0 {
            let bytes = serde_json::to_vec(journal).map_err(|e| Error::Invalid(e.to_string()))?;
            write_synced(&jpath, &bytes)?;
            let _ = std::fs::remove_file(&dpath);
        }
        let mut done = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&dpath)
            .map_err(io(&dpath))?;
        let ws = &journal.workspace;
        if start > 0
            && let Some(op) = journal.ops.get(start)
        {
            // The op a crash cut short may have left its temporary file.
            fsops::clean_temps(ws, op);
        }
        let mut lander = fsops::Lander::new(self, ws);
        // One line per finished op, so that a crash leaves at most the op in
        // progress half done, and every op can run again. A file's move
        // run again after it finished finds nothing to move, so the lines of
        // consecutive moves are written together (one `write` per
        // DONE_BATCH moves instead of one each); any other op may undo what
        // later ones did if it ran twice (a replaced directory removes what
        // landed in it), so the lines before it are written before it runs.
        // The finished ops not written yet: always those just before the
        // next one to run.
        let mut unrecorded = start..start;
        let mut record_done = |ops: &mut std::ops::Range<usize>| -> Result<()> {
            if ops.start < ops.end {
                let lines: String = ops.clone().map(|i| format!("{i}\n")).collect();
                done.write_all(lines.as_bytes()).map_err(io(&dpath))?;
                ops.start = ops.end;
            }
            Ok(())
        };
        for (i, op) in journal.ops.iter().enumerate().skip(start) {
            let a_move = matches!(op, Op::PutStaged { .. });
            if !a_move {
                record_done(&mut unrecorded)?;
            }
            lander.apply(op)?;
            landing_pause();
            unrecorded.end = i + 1;
            if !a_move || unrecorded.len() >= DONE_BATCH {
                record_done(&mut unrecorded)?;
            }
        }
        record_done(&mut unrecorded)?;
        let mut record = match record {
            Some(r) => r,
            None => self.get(&journal.id)?,
        };
        match journal.action.as_str() {
            "land" => {
                record.state = ChangeSetState::Applied;
                record.ops.clear();
                if let Some(s) = record.staging.take() {
                    self.retire_staging(&s);
                }
            }
            _ => {
                record.state = ChangeSetState::Undone;
                record.kept = journal.kept.clone();
            }
        }
        self.save(&record)?;
        let _ = std::fs::remove_file(&jpath);
        let _ = std::fs::remove_file(&dpath);
        Ok(record)
    }

    /// Finishes every journal left by a crash.
    fn recover(&self) -> Recovery {
        let mut out = Recovery::default();
        let dir = self.root.join("journal");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return out;
        };
        let mut names: Vec<_> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        names.sort();
        for jpath in names {
            let result = (|| -> Result<String> {
                let bytes = std::fs::read(&jpath).map_err(io(&jpath))?;
                let journal: Journal = match serde_json::from_slice(&bytes) {
                    Ok(j) => j,
                    Err(_) => {
                        // Cut short while being written: no op ever ran.
                        let _ = std::fs::remove_file(&jpath);
                        return Ok(String::new());
                    }
                };
                let dpath = jpath.with_extension("done");
                let start = std::fs::File::open(&dpath)
                    .map(|f| {
                        std::io::BufReader::new(f)
                            .lines()
                            .map_while(|l| l.ok())
                            .count()
                    })
                    .unwrap_or(0);
                self.run_journal(&journal, start, None)?;
                Ok(journal.id)
            })();
            match result {
                Ok(id) if !id.is_empty() => out.finished.push(id),
                Ok(_) => {}
                Err(e) => out.errors.push(format!("{}: {e}", jpath.display())),
            }
        }
        out
    }

    /// One set.
    pub fn get(&self, id: &str) -> Result<Record> {
        check_id(id)?;
        let p = self.set_path(id);
        let bytes = std::fs::read(&p).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::NotFound(id.to_owned())
            } else {
                Error::Io {
                    path: p.clone(),
                    source: e,
                }
            }
        })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Invalid(format!("{}: unreadable record: {e}", p.display())))
    }

    /// Every set, oldest first.
    pub fn list(&self) -> Result<Vec<Record>> {
        let dir = self.root.join("sets");
        let mut out = Vec::new();
        for e in std::fs::read_dir(&dir).map_err(io(&dir))?.flatten() {
            let name = e.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if let Ok(r) = self.get(id) {
                out.push(r);
            }
        }
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(out)
    }

    /// Saves a record atomically (rename) without waiting for the disk (see
    /// the crate docs). After a power loss a landed record may still say
    /// `pending`, and landing it again is a no-op (every operation can run
    /// twice).
    fn save(&self, record: &Record) -> Result<()> {
        let bytes = serde_json::to_vec(record).map_err(|e| Error::Invalid(e.to_string()))?;
        let path = self.set_path(&record.id);
        let tmp = path.with_extension(format!("tmp-{}", fastrand::u32(..)));
        std::fs::write(&tmp, &bytes).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))
    }

    /// Copies a file into the object store (deduplicated); returns its hash.
    fn keep(&self, path: &Path) -> Result<String> {
        let tmp = self.root.join("objects").join(format!(".tmp-{}", new_id()));
        let mut src = std::fs::File::open(path).map_err(io(path))?;
        let mut dst = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = src.read(&mut buf).map_err(io(path))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            dst.write_all(&buf[..n]).map_err(io(&tmp))?;
        }
        drop(dst);
        let hash = hex::encode(h.finalize());
        let obj = self.object_path(&hash);
        if obj.exists() {
            let _ = std::fs::remove_file(&tmp);
        } else {
            let parent = obj.parent().unwrap_or(&self.root);
            std::fs::create_dir_all(parent).map_err(io(parent))?;
            std::fs::rename(&tmp, &obj).map_err(io(&obj))?;
        }
        Ok(hash)
    }

    /// [`Store::gc`] at most once per `interval` (a marker file's time).
    pub fn maybe_gc(&self, interval: std::time::Duration) -> Result<usize> {
        let marker = self.root.join("last-gc");
        let due = std::fs::metadata(&marker)
            .and_then(|m| m.modified())
            .map(|t| t.elapsed().map_or(true, |e| e >= interval))
            .unwrap_or(true);
        if !due {
            return Ok(0);
        }
        std::fs::write(&marker, b"").map_err(io(&marker))?;
        self.gc()
    }

    /// Forgets sets past the retention and the versions only they used.
    pub fn gc(&self) -> Result<usize> {
        let mut sets = self.list()?;
        let now = now_ms();
        let mut forget = Vec::new();
        if self.retention.keep_days > 0 {
            let cutoff = now.saturating_sub(self.retention.keep_days * 86_400_000);
            sets.retain(|r| {
                let old = r.created_ms < cutoff && r.state != ChangeSetState::Pending;
                if old {
                    forget.push(r.id.clone());
                }
                !old
            });
        }
        let size = |h: &String| {
            std::fs::metadata(self.object_path(h))
                .map(|m| m.len())
                .unwrap_or(0)
        };
        let mut referenced: Vec<(usize, HashSet<String>)> = sets
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut hs = HashSet::new();
                for c in &r.changes {
                    hs.extend(c.old_hash.iter().cloned());
                    hs.extend(c.new_hash.iter().cloned());
                }
                (i, hs)
            })
            .collect();
        let mut all: HashSet<String> = referenced.iter().flat_map(|(_, h)| h.clone()).collect();
        let mut total: u64 = all.iter().map(size).sum();
        let mut i = 0;
        while total > self.retention.max_bytes && i < sets.len() {
            if sets[i].state != ChangeSetState::Pending {
                forget.push(sets[i].id.clone());
                referenced.retain(|(j, _)| *j != i);
                let still: HashSet<String> =
                    referenced.iter().flat_map(|(_, h)| h.clone()).collect();
                total = still.iter().map(size).sum();
                all = still;
            }
            i += 1;
        }
        for id in &forget {
            let _ = std::fs::remove_file(self.set_path(id));
        }
        // Versions no set refers to any more.
        let objects = self.root.join("objects");
        for d in std::fs::read_dir(&objects).map_err(io(&objects))?.flatten() {
            let Some(prefix) = d.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if prefix.starts_with(".tmp-") {
                continue;
            }
            for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                let hash = format!("{prefix}{}", f.file_name().to_string_lossy());
                if !all.contains(&hash) {
                    let _ = std::fs::remove_file(f.path());
                }
            }
        }
        Ok(forget.len())
    }
}

/// Files a plugin operation may write, as they were before it.
#[derive(Debug)]
pub struct Snapshot {
    workspace: PathBuf,
    before: Vec<(String, Option<Side>, Option<String>)>,
    inventory: inventory::Inventory,
}

impl Snapshot {
    /// Whether every entry of the workspace is watched (false: past
    /// `inventory::CAP` entries, only the declared files are).
    pub fn watches_everything(&self) -> bool {
        !self.inventory.cut
    }
}

/// The operations that land a staged set: the upper layer replayed in order.
fn land_ops(staged: &[Staged], staging: &Path) -> Vec<Op> {
    staged
        .iter()
        .map(|s| match s {
            Staged::Whiteout { path } => Op::Remove { path: path.clone() },
            Staged::Dir { path, mode, opaque } => Op::Mkdir {
                path: path.clone(),
                mode: *mode,
                replace: *opaque,
            },
            Staged::File {
                path,
                mode,
                mtime,
                mtime_nsec,
                staged,
                ..
            } => Op::PutStaged {
                path: path.clone(),
                staged: staging.join(staged),
                mode: *mode,
                mtime: (*mtime, *mtime_nsec),
            },
            Staged::Symlink { path, target } => Op::Symlink {
                path: path.clone(),
                target: target.clone(),
            },
        })
        .collect()
}

/// The operations that take one change back (appended in reverse order of
/// the set).
fn undo_ops(c: &FileChange, ops: &mut Vec<Op>) {
    let path = c.path.clone();
    let restore = |at: String, ops: &mut Vec<Op>| match &c.old {
        Some(Side {
            entry: EntryType::File,
            mode,
            ..
        }) => {
            if let Some(hash) = &c.old_hash {
                ops.push(Op::PutObject {
                    path: at,
                    hash: hash.clone(),
                    mode: *mode,
                });
            }
        }
        Some(Side {
            entry: EntryType::Dir,
            mode,
            ..
        }) => ops.push(Op::Mkdir {
            path: at,
            mode: *mode,
            replace: false,
        }),
        Some(Side {
            entry: EntryType::Symlink,
            target: Some(t),
            ..
        }) => ops.push(Op::Symlink {
            path: at,
            target: t.clone(),
        }),
        _ => {}
    };
    match c.kind {
        ChangeKind::Created => match c.new.as_ref().map(|s| s.entry) {
            Some(EntryType::Dir) => ops.push(Op::RmdirIfEmpty { path }),
            _ => ops.push(Op::Remove { path }),
        },
        ChangeKind::Modified | ChangeKind::Deleted => {
            if c.kind == ChangeKind::Modified {
                ops.push(Op::Remove { path: path.clone() });
            }
            restore(path, ops);
        }
        ChangeKind::Renamed => {
            ops.push(Op::Remove { path });
            if let Some(from) = &c.from {
                restore(from.clone(), ops);
            }
        }
        ChangeKind::ModeChanged => {
            if let Some(o) = &c.old {
                ops.push(Op::Chmod { path, mode: o.mode });
            }
        }
    }
}

/// One side of a change as [`describe`] gets it.
enum Body<'a> {
    /// No file on this side (created or deleted).
    Absent,
    /// A file still to be read.
    File(&'a Path),
    /// A file's whole content, already read.
    Read(&'a [u8]),
}

/// A unified diff for text, a one-line summary for the rest. `full`: the
/// set still has room for diffs; without it a text change gets only the
/// cut marker (a set of 10,000 files would compute 10,000 diffs to throw
/// them away).
fn describe(
    kind: ChangeKind,
    old: Body,
    new: Body,
    path: &str,
    from: &Option<String>,
    full: bool,
) -> (Option<String>, bool) {
    let text = |side: &Body| -> Option<Option<String>> {
        let bytes = match side {
            Body::Absent => return Some(None),
            Body::File(p) => {
                if std::fs::metadata(p).ok()?.len() > TEXT_CAP {
                    return None;
                }
                std::borrow::Cow::Owned(std::fs::read(p).ok()?)
            }
            Body::Read(b) => std::borrow::Cow::Borrowed(*b),
        };
        if bytes.contains(&0) {
            return None;
        }
        String::from_utf8(bytes.into_owned()).ok().map(Some)
    };
    if kind == ChangeKind::ModeChanged
        || (matches!(old, Body::Absent) && matches!(new, Body::Absent))
    {
        return (None, false);
    }
    match (text(&old), text(&new)) {
        (Some(a), Some(b)) => {
            let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
            if a == b {
                return (None, false);
            }
            if !full {
                return (Some(CUT.to_owned()), false);
            }
            let old_name = format!("a/{}", from.as_deref().unwrap_or(path));
            let diff = similar::TextDiff::from_lines(&a, &b)
                .unified_diff()
                .context_radius(3)
                .header(&old_name, &format!("b/{path}"))
                .to_string();
            (Some(diff), false)
        }
        _ => {
            let size = |side: &Body| match side {
                Body::Absent => 0,
                Body::File(p) => std::fs::metadata(p).map_or(0, |m| m.len()),
                Body::Read(b) => b.len() as u64,
            };
            let what = if path.ends_with(".docx") || path.ends_with(".xlsx") {
                "office document"
            } else {
                "binary file"
            };
            (
                Some(format!("{what}: {} -> {} bytes", size(&old), size(&new))),
                true,
            )
        }
    }
}

fn cap(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut cut = max.min(s.len());
    while cut > 0 && !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str(CUT);
    s
}

/// SHA-256 of a file's content, in hex, and the content itself when the
/// file is at most `keep` bytes long.
fn hash_and_read(path: &Path, keep: u64) -> Result<(String, Option<Vec<u8>>)> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let len = f.metadata().map_err(io(path))?.len();
    if len > keep {
        return Ok((hash_file(path)?, None));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    f.read_to_end(&mut bytes).map_err(io(path))?;
    if bytes.len() as u64 > keep {
        // It grew between the two calls: hash what was read, keep nothing.
        return Ok((hex::encode(Sha256::digest(&bytes)), None));
    }
    Ok((hex::encode(Sha256::digest(&bytes)), Some(bytes)))
}

/// SHA-256 of a file's content, in hex.
pub fn hash_file(path: &Path) -> Result<String> {
    // One buffer per thread: a fresh 256 KiB per file (zeroed, mapped and
    // unmapped: it is past malloc's mmap threshold) was most of the time
    // `prepare` spent per small file.
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    BUF.with_borrow_mut(|buf| {
        if buf.is_empty() {
            // Zeroed by the allocator (fresh pages), not by writing them.
            *buf = vec![0u8; 256 << 10];
        }
        loop {
            let n = f.read(buf).map_err(io(path))?;
            if n == 0 {
                return Ok(());
            }
            h.update(&buf[..n]);
        }
    })?;
    Ok(hex::encode(h.finalize()))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", fastrand::u32(..)));
    {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn new_id() -> String {
    format!("cs-{}-{:08x}", now_ms(), fastrand::u32(..))
}

/// Refuses a string that cannot be a change set id (before any path is
/// built from it).
pub fn check_id(id: &str) -> Result<()> {
    if id.is_empty()
        || id.len() > 64
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Error::Invalid(format!(
            "{id:?} is not a change set id (ids look like cs-1764000000000-1a2b3c4d)"
        )));
    }
    Ok(())
}

pub(crate) fn check_rel(p: &str) -> Result<()> {
    if p.is_empty()
        || p.starts_with('/')
        || p.split('/')
            .any(|c| c.is_empty() || c == "." || c == ".." || c.contains('\0'))
    {
        return Err(Error::Invalid(format!("{p:?} is not a workspace path")));
    }
    Ok(())
}

/// Test hook: `CAPSTAN_LANDING_PAUSE_US` microseconds after each landing
/// operation, so a test can kill the process in the middle of a landing.
fn landing_pause() {
    use std::sync::OnceLock;
    static PAUSE: OnceLock<u64> = OnceLock::new();
    let us = *PAUSE.get_or_init(|| {
        std::env::var("CAPSTAN_LANDING_PAUSE_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    if us > 0 {
        std::thread::sleep(std::time::Duration::from_micros(us));
    }
}

#[cfg(test)]
mod tests;
