//! A cheap picture of a workspace (one `lstat` per entry, no content read),
//! taken before and after a plugin operation, so a write the operation did
//! not declare is seen even though its previous version could not be kept.
//!
//! Why this and not a copy-on-write layer: a plugin runs inside the host
//! process, which cannot give one thread its own mount namespace, and WASI's
//! preopen is a plain directory. What an operation names in its input is
//! snapshotted in full (previous versions kept, undoable); everything else is
//! compared by stamp (type, size, mode, inode, modification and change time),
//! so any write shows up in the change set, flagged as not restorable.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::{EntryType, Side};

/// Entries past this many are not watched (the walk stops and the picture is
/// marked cut): a plugin write in such a workspace is only seen when declared.
pub(crate) const CAP: usize = 200_000;

/// What an entry looked like, enough to tell that it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) side: Side,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// Whether the content (or what the entry is) changed, not only its mode.
    /// The change time catches a write whose modification time was set back
    /// (a plugin can set times; nobody can set ctime); a chmod moves ctime
    /// too, so with the mode changed and nothing else, it is a mode change.
    pub(crate) fn content_differs(&self, other: &Stamp) -> bool {
        let file = self.side.entry == EntryType::File;
        self.side.entry != other.side.entry
            || self.side.target != other.side.target
            || (file
                && (self.side.size != other.side.size
                    || self.ino != other.ino
                    || self.mtime != other.mtime
                    || (self.ctime != other.ctime && self.side.mode == other.side.mode)))
    }
}

/// Every entry of a workspace, by `/`-separated relative path.
#[derive(Debug, Default)]
pub(crate) struct Inventory {
    pub(crate) entries: BTreeMap<String, Stamp>,
    /// The walk stopped at [`CAP`] entries.
    pub(crate) cut: bool,
}

/// Walks `root` without following symlinks. Unreadable directories are
/// skipped (a plugin cannot write there either: it runs as the same user).
pub(crate) fn take(root: &Path) -> Inventory {
    let mut inv = Inventory::default();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if inv.entries.len() >= CAP {
                inv.cut = true;
                return inv;
            }
            let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                // A name that is not UTF-8 cannot be a change path; its
                // parent directory's stamp still changes.
                continue;
            };
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let abs = e.path();
            let Ok(m) = std::fs::symlink_metadata(&abs) else {
                continue;
            };
            let Some(side) = capstan_sandbox::changes::side(&abs, &m) else {
                continue;
            };
            if side.entry == EntryType::Dir {
                stack.push((abs, path.clone()));
            }
            inv.entries.insert(
                path,
                Stamp {
                    side,
                    ino: m.ino(),
                    mtime: (m.mtime(), m.mtime_nsec()),
                    ctime: (m.ctime(), m.ctime_nsec()),
                },
            );
        }
    }
    inv
}
