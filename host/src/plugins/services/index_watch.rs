//! Change watching for a long-running process (`capstan serve`, `capstan mcp`,
//! `capstan chat`): each workspace whose index is asked about gets an inotify
//! instance watching its directories, so a question on a workspace where
//! nothing changed skips the staleness walk altogether.
//!
//! The events are read when a question asks, not by a background thread: the
//! kernel queues an event before the write, create, rename or delete that
//! caused it returns, so draining the queue at that moment sees every change
//! that happened before the question (a thread would leave a window where a
//! file just written is not yet counted). Any change under the workspace
//! (created, written, moved, deleted, its metadata changed) marks the index
//! unknown and the next question walks, as a one-shot process always does; a
//! walk that finds the index current marks it current until the next change.
//! A directory created (or moved in) is watched as the queue is drained,
//! before the walk that follows, so nothing in it is missed. A queue overflow,
//! a watched directory moved (its watch would keep the old path) or the root
//! deleted re-creates the watch from scratch. What the walk never enters
//! (symlinks, `.git`, `node_modules`... [`capstan_kb_parse::BUILTIN_SKIPS`]) is not
//! watched. A workspace that cannot be watched (inotify limits, more than
//! [`MAX_WATCHED`] workspaces) is walked before every question.
//!
//! (The `notify` crate was the first choice; it delivers events on its own
//! thread, which is the window described above.)

use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use parking_lot::Mutex;

/// Workspaces watched at most per process; others are walked every time.
pub const MAX_WATCHED: usize = 64;

/// The watchers of one process. Off until [`Watches::enable`].
#[derive(Default)]
pub struct Watches {
    enabled: AtomicBool,
    by_root: Mutex<HashMap<PathBuf, Option<Arc<Watch>>>>,
}

impl Watches {
    /// Watch the workspaces asked about from now on (a long-running process).
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::SeqCst);
    }

    /// The watch of `root`, started on first use; `None` when watching is off
    /// or the workspace cannot be watched.
    pub fn for_root(&self, root: &Path) -> Option<Arc<Watch>> {
        if !self.enabled.load(Ordering::SeqCst) {
            return None;
        }
        let mut by_root = self.by_root.lock();
        if let Some(w) = by_root.get(root) {
            return w.clone();
        }
        if by_root.len() >= MAX_WATCHED {
            return None;
        }
        let watch = match Dirs::watch(root) {
            Ok(dirs) => Some(Arc::new(Watch {
                root: root.to_path_buf(),
                state: Mutex::new(State {
                    dirs,
                    current: false,
                }),
            })),
            Err(e) => {
                tracing::warn!(
                    "cannot watch {} for changes ({e}); each question walks it instead",
                    root.display()
                );
                None
            }
        };
        by_root.insert(root.to_path_buf(), watch.clone());
        watch
    }
}

/// One workspace's watch.
pub struct Watch {
    root: PathBuf,
    state: Mutex<State>,
}

struct State {
    dirs: Dirs,
    /// A walk found the index current and no change has come since.
    current: bool,
}

impl Watch {
    /// Whether the index is current: `true` at once when no change came since
    /// a walk said so, else what `walk` says now. Questions on one workspace
    /// wait for each other's walk rather than walking side by side.
    pub fn is_current<E>(&self, walk: impl FnOnce() -> Result<bool, E>) -> Result<bool, E> {
        let mut state = self.state.lock();
        match state.dirs.drain(&self.root) {
            Ok(false) => {}
            Ok(true) => state.current = false,
            Err(e) => {
                // Lost track (queue overflow, a read error): watch afresh.
                tracing::debug!("re-watching {}: {e}", self.root.display());
                state.current = false;
                match Dirs::watch(&self.root) {
                    Ok(dirs) => state.dirs = dirs,
                    Err(e) => {
                        tracing::warn!(
                            "cannot watch {} for changes any more ({e}); walking instead",
                            self.root.display()
                        );
                        return walk();
                    }
                }
            }
        }
        if state.current {
            return Ok(true);
        }
        // Changes made during the walk stay queued: the next question sees them.
        let current = walk()?;
        state.current = current;
        Ok(current)
    }
}

/// An inotify instance and the directory each of its watches is on.
struct Dirs {
    inotify: Inotify,
    by_wd: HashMap<WatchDescriptor, PathBuf>,
}

const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MODIFY)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::DONT_FOLLOW)
    .union(WatchMask::ONLYDIR)
    .union(WatchMask::EXCL_UNLINK);

impl Dirs {
    /// Watches `root` and every directory under it the walk may enter.
    fn watch(root: &Path) -> std::io::Result<Self> {
        let mut dirs = Self {
            inotify: Inotify::init()?,
            by_wd: HashMap::new(),
        };
        dirs.add_tree(root)?;
        Ok(dirs)
    }

    fn add_tree(&mut self, top: &Path) -> std::io::Result<()> {
        let mut stack = vec![(top.to_path_buf(), 0usize)];
        while let Some((dir, depth)) = stack.pop() {
            match self.inotify.watches().add(&dir, MASK) {
                Ok(wd) => {
                    self.by_wd.insert(wd, dir.clone());
                }
                // Gone or not a directory any more (raced with a delete or a
                // swap for a symlink): the event for that is queued already.
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                    continue;
                }
                Err(e) => return Err(e),
            }
            if depth >= capstan_kb_parse::walk::MAX_DEPTH {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if is_dir && !skipped(&entry.file_name()) {
                    stack.push((entry.path(), depth + 1));
                }
            }
        }
        Ok(())
    }

    /// Reads every queued event: whether any was a change, after watching the
    /// directories that came. An error means events may have been lost.
    fn drain(&mut self, root: &Path) -> std::io::Result<bool> {
        let mut changed = false;
        let mut buffer = [0u8; 8192];
        loop {
            let events = match self.inotify.read_events(&mut buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(changed),
                Err(e) => return Err(e),
            };
            let mut new_dirs = Vec::new();
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    return Err(std::io::Error::other("the inotify queue overflowed"));
                }
                // A directory moved keeps its watch under its old path here,
                // and a root that went leaves nothing watched: start afresh.
                if event.mask.contains(EventMask::MOVE_SELF)
                    || (event.mask.contains(EventMask::DELETE_SELF)
                        && self.by_wd.get(&event.wd).is_some_and(|d| d == root))
                {
                    return Err(std::io::Error::other("a watched directory moved or went"));
                }
                if event.mask.contains(EventMask::IGNORED) {
                    // The directory went (its delete was an event of its parent).
                    self.by_wd.remove(&event.wd);
                    continue;
                }
                let is_dir = event.mask.contains(EventMask::ISDIR);
                if is_dir && event.name.is_some_and(skipped) {
                    continue;
                }
                changed = true;
                if is_dir
                    && event
                        .mask
                        .intersects(EventMask::CREATE | EventMask::MOVED_TO)
                    && let (Some(parent), Some(name)) = (self.by_wd.get(&event.wd), event.name)
                {
                    new_dirs.push(parent.join(name));
                }
            }
            for dir in new_dirs {
                // Below MAX_DEPTH of the root is enough: the walk stops there too.
                if dir.starts_with(root) {
                    self.add_tree(&dir)?;
                }
            }
        }
    }
}

/// A directory name the walk never enters.
fn skipped(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .is_some_and(capstan_kb_parse::IgnoreRules::is_builtin_skip)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every change is seen by the next drain, with no wait: the kernel queued
    /// it before the call that made it returned.
    #[test]
    fn changes_are_seen_at_once_and_new_directories_are_watched() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        std::fs::create_dir_all(root.join("a/.git")).unwrap();
        let mut dirs = Dirs::watch(root).unwrap();
        assert!(!dirs.drain(root).unwrap(), "nothing changed yet");
        std::fs::write(root.join("a/x.md"), "x").unwrap();
        assert!(dirs.drain(root).unwrap());
        assert!(!dirs.drain(root).unwrap());
        // Inside a skipped directory: not watched, not a change.
        std::fs::write(root.join("a/.git/index"), "x").unwrap();
        std::fs::create_dir(root.join("node_modules")).unwrap();
        assert!(!dirs.drain(root).unwrap());
        // A new directory is a change, and is watched from the drain on.
        std::fs::create_dir_all(root.join("b/c")).unwrap();
        assert!(dirs.drain(root).unwrap());
        std::fs::write(root.join("b/c/y.md"), "y").unwrap();
        assert!(dirs.drain(root).unwrap());
        std::fs::remove_file(root.join("b/c/y.md")).unwrap();
        assert!(dirs.drain(root).unwrap());
        // Reading is not a change.
        let _ = std::fs::read(root.join("a/x.md")).unwrap();
        assert!(!dirs.drain(root).unwrap());
        std::fs::remove_dir_all(root.join("b")).unwrap();
        assert!(dirs.drain(root).unwrap());
    }

    #[test]
    fn a_walk_marks_current_until_the_next_change() {
        let root = tempfile::tempdir().unwrap();
        let watches = Watches::default();
        assert!(watches.for_root(root.path()).is_none(), "off by default");
        watches.enable();
        let watch = watches.for_root(root.path()).unwrap();
        let walks = std::cell::Cell::new(0);
        let walk = || {
            walks.set(walks.get() + 1);
            Ok::<_, ()>(true)
        };
        assert_eq!(watch.is_current(walk), Ok(true));
        assert_eq!(watch.is_current(walk), Ok(true));
        assert_eq!(walks.get(), 1, "the second question did not walk");
        std::fs::write(root.path().join("new.md"), "new").unwrap();
        assert_eq!(watch.is_current(|| Ok::<_, ()>(false)), Ok(false));
        assert_eq!(watch.is_current(walk), Ok(true));
        assert_eq!(walks.get(), 2, "not current: walked again");
    }
}
