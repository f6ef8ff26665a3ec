//! Workspace files: relative paths only, reads with a size cap, atomic writes.
//!
//! The workspace is preopened as `.` when the plugin's manifest grants workspace
//! access (read-only for operations that declare a read-only risk).
//!
//! WASI confines the plugin to the workspace anyway; these checks turn a bad path into
//! a clear `invalid-input` instead of a file-system error.

use std::path::{Component, Path, PathBuf};

use crate::{TaskError, is_cancelled};

/// Files bigger than this are not read (the plugin's memory is limited).
pub const MAX_FILE_BYTES: u64 = 100 * 1024 * 1024;

/// A path relative to the workspace root, without `..`.
pub fn workspace_path(path: &str) -> Result<PathBuf, TaskError> {
    if path.trim().is_empty() {
        return Err(TaskError::InvalidInput("`path` is empty".into()));
    }
    if path.contains('\0') {
        return Err(TaskError::InvalidInput(
            "`path` contains a NUL character".into(),
        ));
    }
    let windows_drive =
        path.len() >= 2 && path.as_bytes()[1] == b':' && path.as_bytes()[0].is_ascii_alphabetic();
    if path.starts_with('/') || path.starts_with('\\') || windows_drive {
        return Err(TaskError::InvalidInput(format!(
            "`path` must be relative to the workspace root, not absolute: {path}"
        )));
    }
    let p = Path::new(path);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(TaskError::InvalidInput(format!(
                    "`path` must stay inside the workspace (no `..`): {path}"
                )));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(TaskError::InvalidInput(format!(
                    "`path` must be relative to the workspace root, not absolute: {path}"
                )));
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(TaskError::InvalidInput(format!(
            "`path` names no file: {path}"
        )));
    }
    Ok(out)
}

/// Requires the extension a write produces (`docx`), case-insensitively.
pub fn require_extension(path: &Path, ext: &str) -> Result<(), TaskError> {
    let ok = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ext));
    if ok {
        Ok(())
    } else {
        Err(TaskError::InvalidInput(format!(
            "`path` must end in .{ext}: {}",
            path.display()
        )))
    }
}

/// The file's bytes; a missing file is invalid input, a huge one refused.
pub fn read(path: &Path) -> Result<Vec<u8>, TaskError> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            TaskError::InvalidInput(format!("{}: no such file in the workspace", path.display()))
        }
        _ => TaskError::Failed(format!("{}: {e}", path.display())),
    })?;
    if meta.is_dir() {
        return Err(TaskError::InvalidInput(format!(
            "{}: is a directory",
            path.display()
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(TaskError::Failed(format!(
            "{}: {} bytes is more than this plugin reads ({MAX_FILE_BYTES} bytes)",
            path.display(),
            meta.len()
        )));
    }
    std::fs::read(path).map_err(|e| TaskError::Failed(format!("{}: {e}", path.display())))
}

/// Writes `bytes` to `path` atomically: `<dir>/.<name>.capstan-tmp`, then a rename over
/// the target. With `overwrite` false an existing file is left alone.
pub fn write_atomic(path: &Path, bytes: &[u8], overwrite: bool) -> Result<(), TaskError> {
    if !overwrite && path.exists() {
        return Err(TaskError::InvalidInput(format!(
            "{} already exists; pass \"overwrite\": true to replace it",
            path.display()
        )));
    }
    if path.is_dir() {
        return Err(TaskError::InvalidInput(format!(
            "{}: is a directory",
            path.display()
        )));
    }
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        TaskError::InvalidInput(format!("`path` names no file: {}", path.display()))
    })?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| TaskError::Failed(format!("{}: {e}", dir.display())))?;
    }
    let tmp = dir.map_or_else(
        || PathBuf::from(format!(".{name}.capstan-tmp")),
        |d| d.join(format!(".{name}.capstan-tmp")),
    );
    std::fs::write(&tmp, bytes).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        TaskError::Failed(format!("{}: {e}", tmp.display()))
    })?;
    if is_cancelled() {
        let _ = std::fs::remove_file(&tmp);
        return Err(TaskError::Cancelled);
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        TaskError::Failed(format!("{}: {e}", path.display()))
    })
}

/// Cuts `text` to at most `max` characters (at a character boundary).
pub fn truncate(text: String, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        Some((at, _)) => (text[..at].to_owned(), true),
        None => (text, false),
    }
}
