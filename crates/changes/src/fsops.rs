//! Landing operations on the workspace: each one safe to run again after a
//! crash, none following a symlink out of the workspace.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{Error, Op, Result, Store, check_rel, io};

/// Runs one operation.
pub(crate) fn apply(store: &Store, ws: &Path, op: &Op) -> Result<()> {
    Lander::new(store, ws).apply(op)
}

/// Runs a set's operations in order, keeping the directory the last file
/// went into open: a file is moved into place by `renameat` relative to its
/// directory, which was opened one component at a time without following a
/// symlink. That is both safe against a directory swapped for a symlink
/// between the check and the move, and one system call per file instead of
/// a path walk for each check (landing 10,000 files is 10,000 moves).
pub(crate) struct Lander<'a> {
    store: &'a Store,
    ws: &'a Path,
    /// The parent (workspace-relative) and descriptor of the last file moved.
    parent: Option<(String, OwnedFd)>,
}

impl<'a> Lander<'a> {
    pub(crate) fn new(store: &'a Store, ws: &'a Path) -> Self {
        Lander {
            store,
            ws,
            parent: None,
        }
    }

    /// The directory `rel`'s file goes into, opened without following a
    /// symlink on the way, and the file's name.
    fn parent_of<'r>(&mut self, rel: &'r str) -> Result<(BorrowedFd<'_>, &'r str)> {
        check_rel(rel)?;
        let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        if self.parent.as_ref().is_none_or(|(d, _)| d != dir) {
            self.parent = None;
            let mut fd =
                open_dir(None, self.ws.as_os_str().as_bytes(), true).map_err(|e| io(self.ws)(e))?;
            let mut at = self.ws.to_path_buf();
            for part in dir.split('/').filter(|p| !p.is_empty()) {
                at.push(part);
                fd = open_dir(Some(fd.as_fd()), part.as_bytes(), false).map_err(|e| {
                    if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) {
                        in_the_way(&at)
                    } else {
                        io(&at)(e)
                    }
                })?;
            }
            self.parent = Some((dir.to_owned(), fd));
        }
        let fd = self.parent.as_ref().map(|(_, fd)| fd.as_fd());
        let fd = fd.ok_or_else(|| Error::Invalid(format!("{rel}: no directory opened")))?;
        Ok((fd, name))
    }

    /// Runs one operation.
    pub(crate) fn apply(&mut self, op: &Op) -> Result<()> {
        if !matches!(op, Op::PutStaged { .. }) {
            // It may create, remove or replace directories: the one kept
            // open may no longer be the one at its path.
            self.parent = None;
        }
        let (store, ws) = (self.store, self.ws);
        match op {
            Op::Remove { path } => {
                let abs = target(ws, path)?;
                remove(&abs)
            }
            Op::Mkdir {
                path,
                mode,
                replace,
            } => {
                let abs = target(ws, path)?;
                if let Ok(m) = std::fs::symlink_metadata(&abs)
                    && (*replace || !m.is_dir())
                {
                    remove(&abs)?;
                }
                match std::fs::create_dir(&abs) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io(&abs)(e)),
                }
                chmod(&abs, *mode)
            }
            Op::PutStaged {
                path,
                staged,
                mode,
                mtime,
            } => self.put_staged(path, staged, *mode, *mtime),
            Op::PutObject { path, hash, mode } => {
                let abs = target(ws, path)?;
                if let Some(parent) = abs.parent() {
                    std::fs::create_dir_all(parent).map_err(io(parent))?;
                }
                clear_dir(&abs)?;
                put_copy(&store.object_path(hash), &abs, *mode)
            }
            Op::Symlink { path, target: to } => {
                let abs = target(ws, path)?;
                clear_dir(&abs)?;
                let tmp = temp_beside(&abs);
                std::os::unix::fs::symlink(to, &tmp).map_err(io(&tmp))?;
                std::fs::rename(&tmp, &abs).map_err(|e| {
                    let _ = std::fs::remove_file(&tmp);
                    io(&abs)(e)
                })
            }
            Op::Chmod { path, mode } => {
                let abs = target(ws, path)?;
                match std::fs::symlink_metadata(&abs) {
                    Ok(m) if !m.file_type().is_symlink() => chmod(&abs, *mode),
                    _ => Ok(()),
                }
            }
            Op::RmdirIfEmpty { path } => {
                let abs = target(ws, path)?;
                let _ = std::fs::remove_dir(&abs);
                Ok(())
            }
        }
    }

    fn put_staged(
        &mut self,
        path: &str,
        staged: &Path,
        mode: u32,
        mtime: (i64, i64),
    ) -> Result<()> {
        // The sandbox stages a file with its final mode and time already
        // (see `capstan_sandbox::changes`) unless the mode denies its owner
        // reading it (the host reads it first): then landing is one rename.
        if mode & 0o400 == 0 {
            let Ok(m) = std::fs::symlink_metadata(staged) else {
                // Moved into place before a crash.
                return Ok(());
            };
            if m.permissions().mode() & 0o7777 != mode & 0o777 {
                chmod(staged, mode)?;
            }
            if (m.mtime(), m.mtime_nsec()) != mtime {
                set_mtime(staged, mtime);
            }
        }
        let (dir, name) = self.parent_of(path)?;
        // For the rare paths that work by name (a directory in the way, a
        // staging directory on another filesystem): the directory opened
        // above, through its descriptor, not the workspace path walked again.
        let abs = Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
        let name = CString::new(name).map_err(|e| Error::Invalid(e.to_string()))?;
        let from = CString::new(staged.as_os_str().as_bytes())
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let move_it = || {
            // SAFETY: two valid C strings and a directory descriptor we hold.
            let r = unsafe {
                libc::renameat(
                    libc::AT_FDCWD,
                    from.as_ptr(),
                    dir.as_raw_fd(),
                    name.as_ptr(),
                )
            };
            if r == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        let mut moved = move_it();
        if moved.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EISDIR) {
            // A directory where the file goes (rename cannot replace it).
            clear_dir(&abs)?;
            moved = move_it();
        }
        match moved {
            Ok(()) => Ok(()),
            // The directory is there (it is open): the staged file is what is
            // missing, moved into place before a crash.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                clear_dir(&abs)?;
                put_copy(staged, &abs, mode)?;
                let _ = std::fs::remove_file(staged);
                Ok(())
            }
            Err(e) => Err(io(&self.ws.join(path))(e)),
        }
    }
}

/// Opens a directory (`at` or the current one) without following a
/// symlink in its last component unless `follow`.
fn open_dir(at: Option<BorrowedFd>, name: &[u8], follow: bool) -> std::io::Result<OwnedFd> {
    let name = CString::new(name).map_err(std::io::Error::other)?;
    let mut flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let at = at.map_or(libc::AT_FDCWD, |fd| fd.as_raw_fd());
    // SAFETY: a valid C string; the descriptor returned is ours to own.
    let fd = unsafe { libc::openat(at, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The absolute path of `rel` in `ws`, refusing a path whose parent
/// directories are not real directories inside the workspace (a symlink
/// planted there could send a write outside).
fn target(ws: &Path, rel: &str) -> Result<PathBuf> {
    check_rel(rel)?;
    let mut at = ws.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts[..parts.len() - 1] {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(in_the_way(&at)),
            // Missing: the op (or an earlier one) creates it, or the write fails.
            Err(_) => {}
        }
    }
    at.push(parts[parts.len() - 1]);
    Ok(at)
}

/// A parent on the way to a target is not a real directory.
fn in_the_way(at: &Path) -> Error {
    Error::Invalid(format!(
        "{}: not a directory (a symlink or file is in the way); not writing through it",
        at.display()
    ))
}

fn remove(abs: &Path) -> Result<()> {
    match std::fs::symlink_metadata(abs) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(abs).map_err(io(abs)),
        Ok(_) => match std::fs::remove_file(abs) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(abs)(e)),
            _ => Ok(()),
        },
    }
}

/// A directory where a file goes is removed first (rename cannot replace it).
fn clear_dir(abs: &Path) -> Result<()> {
    if std::fs::symlink_metadata(abs).is_ok_and(|m| m.is_dir()) {
        remove(abs)?;
    }
    Ok(())
}

fn chmod(abs: &Path, mode: u32) -> Result<()> {
    std::fs::set_permissions(abs, std::fs::Permissions::from_mode(mode & 0o777)).map_err(io(abs))
}

/// Copies `src` to a temporary name beside `abs`, then renames it over
/// `abs`: the file is wholly old or wholly new at every moment.
fn put_copy(src: &Path, abs: &Path, mode: u32) -> Result<()> {
    let tmp = temp_beside(abs);
    let copied = std::fs::copy(src, &tmp)
        .map_err(io(src))
        .and_then(|_| chmod(&tmp, mode))
        .and_then(|()| std::fs::rename(&tmp, abs).map_err(io(abs)));
    if copied.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    copied
}

/// Removes temporary files (ours, by name) beside the target of `op`.
pub(crate) fn clean_temps(ws: &Path, op: &Op) {
    let path = match op {
        Op::PutStaged { path, .. } | Op::PutObject { path, .. } | Op::Symlink { path, .. } => path,
        _ => return,
    };
    let Ok(abs) = target(ws, path) else { return };
    let Some(dir) = abs.parent() else { return };
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_name().as_bytes().starts_with(b".capstan-land-") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn temp_beside(abs: &Path) -> PathBuf {
    let name = format!(
        ".capstan-land-{}-{:08x}",
        std::process::id(),
        fastrand::u32(..)
    );
    abs.with_file_name(name)
}

fn set_mtime(p: &Path, (sec, nsec): (i64, i64)) {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return;
    };
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
    ];
    // SAFETY: a valid C string and a two-element timespec array.
    unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        );
    }
}
