//! Landing operations on the workspace: each one safe to run again after a
//! crash, none following a symlink out of the workspace.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::{Error, Op, Result, Store, check_rel, io};

/// Runs one operation.
pub(crate) fn apply(store: &Store, ws: &Path, op: &Op) -> Result<()> {
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
        } => {
            let abs = target(ws, path)?;
            let Ok(m) = std::fs::symlink_metadata(staged) else {
                // Moved into place before a crash.
                return Ok(());
            };
            // The sandbox stages a file with its final mode and time already
            // (see `capstan_sandbox::changes`): then landing is one rename.
            if m.permissions().mode() & 0o7777 != mode & 0o777 {
                chmod(staged, *mode)?;
            }
            if (m.mtime(), m.mtime_nsec()) != *mtime {
                set_mtime(staged, *mtime);
            }
            clear_dir(&abs)?;
            match std::fs::rename(staged, &abs) {
                Ok(()) => Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                    put_copy(staged, &abs, *mode)?;
                    let _ = std::fs::remove_file(staged);
                    Ok(())
                }
                Err(e) => Err(io(&abs)(e)),
            }
        }
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
            Ok(_) => {
                return Err(Error::Invalid(format!(
                    "{}: not a directory (a symlink or file is in the way); not writing through it",
                    at.display()
                )));
            }
            // Missing: the op (or an earlier one) creates it, or the write fails.
            Err(_) => {}
        }
    }
    at.push(parts[parts.len() - 1]);
    Ok(at)
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
