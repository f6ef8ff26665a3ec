//! `GET /v1/workspaces/{id}/file?path=REL`: one text file of a registered
//! workspace, read-only, for the web chat's citation viewer.
//!
//! The path is the model's and the workspace's word, so it is checked the way
//! plugins are confined: the workspace root passes the workspace gate again
//! (registered, and not `/`, home, a system or Capstan directory, re-made
//! canonical in case a symlink was swapped in), and the file is opened through
//! a capability handle on the root (cap-std, the same mechanism that backs a
//! plugin's preopened directory), which resolves every component, symlinks
//! included, without ever leaving the root. `..`, absolute paths, NUL bytes and
//! symlinks that point out are refused with a message naming the path. The
//! file is opened without blocking (a FIFO with no writer, a device) and
//! checked on the open handle to be a regular file, and the route reads it off
//! the async workers. The route sits behind the same doors as the rest of the
//! API (Host, Origin, token).

use std::io::Read;
use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use super::error::{ApiError, ErrorKind};
use crate::workspace_gate::{self, RelativePathRefusal};

/// Files bigger than this are not shown (a citation points at a document,
/// not at a log or a database).
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

/// How far a NUL byte is looked for to call a file binary (as the knowledge
/// base's parser does).
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileQuery {
    pub path: String,
}

/// The file as lines (1-based in the page, as citations count them).
#[derive(Debug, Serialize)]
pub struct FileText {
    pub workspace_id: String,
    pub path: String,
    pub lines: Vec<String>,
    /// True when invalid UTF-8 was replaced by U+FFFD.
    pub lossy: bool,
}

/// Checks a workspace-relative path before anything is opened, so the error
/// says exactly what was wrong. The capability handle enforces the same again.
pub fn check_relative(path: &str) -> Result<&Path, ApiError> {
    let bad = |why: &str| {
        ApiError::bad_request(format!(
            "path {path:?} {why}; pass a path relative to the workspace root, as citations give it \
             (e.g. `docs/guide.md`)"
        ))
    };
    if path.trim().is_empty() {
        return Err(bad("is empty"));
    }
    workspace_gate::check_relative(path).map_err(|refusal| {
        bad(match refusal {
            RelativePathRefusal::Nul => "contains a NUL byte",
            RelativePathRefusal::Absolute => "is absolute",
            RelativePathRefusal::ParentDir => "contains `..`",
        })
    })
}

/// Reads `rel` under the (already gated) canonical `root`.
pub fn read(root: &Path, workspace_id: &str, rel_str: &str) -> Result<FileText, ApiError> {
    let rel = check_relative(rel_str)?;
    let dir = Dir::open_ambient_dir(root, ambient_authority()).map_err(|e| {
        ApiError::internal(format!("cannot open workspace {}: {e}", root.display()))
    })?;
    let file = dir
        .open_with(rel, &workspace_gate::nonblocking_read())
        .map_err(|e| open_error(rel_str, e))?;
    let meta = file
        .metadata()
        .map_err(|e| ApiError::internal(format!("{rel_str}: {e}")))?;
    if !meta.is_file() {
        return Err(ApiError::unprocessable(format!(
            "{rel_str:?} is not a regular file; the viewer shows files only"
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(ApiError::new(
            ErrorKind::TooLarge,
            format!(
                "{rel_str:?} is {} bytes; the viewer shows files up to {MAX_FILE_BYTES} bytes. Open it in an editor",
                meta.len()
            ),
        ));
    }
    let mut bytes = Vec::new();
    file.into_std()
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ApiError::internal(format!("{rel_str}: {e}")))?;
    if bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
        return Err(ApiError::unprocessable(format!(
            "{rel_str:?} is not text (binary content); open it in its own program"
        )));
    }
    let text = String::from_utf8_lossy(&bytes);
    let lossy = matches!(text, std::borrow::Cow::Owned(_));
    Ok(FileText {
        workspace_id: workspace_id.to_owned(),
        path: rel_str.to_owned(),
        lines: split_lines(&text),
        lossy,
    })
}

fn open_error(rel: &str, e: std::io::Error) -> ApiError {
    match e.kind() {
        std::io::ErrorKind::NotFound => ApiError::not_found(format!(
            "no file {rel:?} in this workspace; citations name files relative to its root"
        )),
        std::io::ErrorKind::PermissionDenied => ApiError::forbidden(format!(
            "{rel:?} cannot be read (permission denied, or it resolves outside the workspace \
             through a symlink); the viewer shows files inside the workspace only"
        )),
        // cap-std reports an escape (a symlink pointing out) as its own error.
        _ => ApiError::forbidden(format!(
            "{rel:?} cannot be opened inside the workspace ({e}); a path that leaves the \
             workspace (a symlink pointing out) is refused"
        )),
    }
}

/// Lines as the knowledge base counts them: `\n`, `\r\n` and a lone `\r` each
/// end a line; a final line ending does not start another line.
fn split_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                lines.push(std::mem::take(&mut current));
            }
            '\n' => lines.push(std::mem::take(&mut current)),
            other => current.push(other),
        }
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_like_the_knowledge_base() {
        assert_eq!(split_lines("a\nb\r\nc\rd\n"), ["a", "b", "c", "d"]);
        assert_eq!(split_lines("a\n\nb"), ["a", "", "b"]);
        assert!(split_lines("").is_empty());
    }

    #[test]
    fn paths_that_leave_the_root_are_refused_under_any_spelling() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("docs")).unwrap();
        std::fs::write(root.join("docs/guide.md"), "one\ntwo\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("link.txt"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("docs/out")).unwrap();
        std::os::unix::fs::symlink("../../", root.join("docs/up")).unwrap();
        std::os::unix::fs::symlink("guide.md", root.join("docs/inside.md")).unwrap();

        let ok = read(&root, "ws", "docs/guide.md").unwrap();
        assert_eq!(ok.lines, ["one", "two"]);
        // A symlink that stays inside is followed.
        assert_eq!(
            read(&root, "ws", "docs/inside.md").unwrap().lines,
            ["one", "two"]
        );
        assert_eq!(
            read(&root, "ws", "./docs//guide.md").unwrap().lines.len(),
            2
        );
        let secret = outside.path().join("secret.txt");
        for (path, status) in [
            ("../secret.txt", 400),
            ("docs/../../secret.txt", 400),
            (secret.to_str().unwrap(), 400),
            ("/etc/passwd", 400),
            ("link.txt", 403),
            ("docs/out/secret.txt", 403),
            ("docs/up/etc/passwd", 403),
            ("docs%2F..%2F..%2Fsecret.txt", 404),
            ("docs\0/guide.md", 400),
            ("", 400),
            ("docs", 422),
            ("missing.md", 404),
        ] {
            let err = read(&root, "ws", path).unwrap_err();
            assert_eq!(err.status().as_u16(), status, "{path:?}: {err}");
            assert!(!err.message.contains("secret\""), "{err}");
        }
    }

    #[test]
    fn binary_and_huge_files_are_refused_with_advice() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        std::fs::write(root.join("a.bin"), [0u8, 1, 2]).unwrap();
        let big = vec![b'x'; MAX_FILE_BYTES as usize + 1];
        std::fs::write(root.join("big.txt"), big).unwrap();
        let err = read(&root, "ws", "a.bin").unwrap_err();
        assert!(err.message.contains("not text"), "{err}");
        let err = read(&root, "ws", "big.txt").unwrap_err();
        assert!(err.message.contains("Open it in an editor"), "{err}");
        std::fs::write(root.join("latin1.txt"), [b'a', 0xe9, b'\n']).unwrap();
        assert!(read(&root, "ws", "latin1.txt").unwrap().lossy);
    }
}
