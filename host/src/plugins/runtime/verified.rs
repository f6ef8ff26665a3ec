//! Components verified once per process.
//!
//! Loading a plugin means hashing its component (SHA-256 of up to 2 MB),
//! reading its compiled code back from the [`super::ComponentCache`], linking
//! it and calling its `describe`. None of that depends on the run, so the
//! [`super::Runtime`] (one per process) keeps the result per component source
//! and every later run, registry or chat turn reuses it.
//!
//! The sha256 pin stays enforced: a component file is keyed by its
//! [`Fingerprint`] (size, modification and change times, inode, device). A file
//! replaced or rewritten on disk has another fingerprint, so it is read and
//! hashed again and refused if it no longer matches its manifest's pin. The
//! change time cannot be set back by a user process, so an in-place rewrite
//! that restores the size and the modification time is noticed too. A
//! builtin's bytes are part of the binary and never change.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wasmtime::component::Component;

use super::{OperationInfo, Pre, imports::WitVersion};
use crate::plugins::manifest::ComponentSource;

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fingerprint {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
    dev: u64,
}

impl Fingerprint {
    fn of(path: &Path) -> std::io::Result<Self> {
        let m = std::fs::metadata(path)?;
        Ok(Self {
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            ino: m.ino(),
            dev: m.dev(),
        })
    }
}

/// The fingerprint of a component source now: `None` for a builtin (its
/// bytes never change), the file's otherwise.
pub(super) fn fingerprint(source: &ComponentSource) -> std::io::Result<Option<Fingerprint>> {
    match source {
        ComponentSource::Builtin(_) => Ok(None),
        ComponentSource::File(path) => Fingerprint::of(path).map(Some),
    }
}

/// A component whose bytes were hashed, compiled (or loaded from the compiled
/// cache), linked and described. What a manifest entry adds (its pin, its
/// grants, its claimed kinds, its limits) is checked per entry on top.
pub(super) struct Verified {
    /// The file's fingerprint when it was read (`None`: a builtin).
    pub fingerprint: Option<Fingerprint>,
    pub sha256: String,
    pub component: Component,
    pub pre: Pre,
    pub version: WitVersion,
    pub kinds: Vec<String>,
    pub operations: Vec<OperationInfo>,
    /// Whether the compiled code came from the on-disk cache.
    pub cache_hit: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Builtin(String),
    File(PathBuf),
}

impl Key {
    fn of(source: &ComponentSource) -> Self {
        match source {
            ComponentSource::Builtin(name) => Self::Builtin(name.clone()),
            ComponentSource::File(path) => Self::File(path.clone()),
        }
    }
}

/// One source's verified component, if any. Held (asynchronously) while the
/// component loads, so concurrent runs needing it wait for one load instead of
/// each compiling it.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<Arc<Verified>>>>;

/// Verified components by source, for the life of the runtime.
#[derive(Default)]
pub(super) struct VerifiedComponents {
    slots: Mutex<HashMap<Key, Slot>>,
}

impl VerifiedComponents {
    /// The slot of `source` (created empty on first use).
    pub fn slot(&self, source: &ComponentSource) -> Slot {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(Key::of(source))
            .or_default()
            .clone()
    }

    /// Whether `source` has a verified component whose file has not changed
    /// since. `false` while another task is loading it.
    pub fn is_fresh(&self, source: &ComponentSource) -> bool {
        let slot = self.slot(source);
        let Ok(held) = slot.try_lock() else {
            return false;
        };
        match (held.as_ref(), fingerprint(source)) {
            (Some(v), Ok(now)) => v.fingerprint == now,
            _ => false,
        }
    }
}
