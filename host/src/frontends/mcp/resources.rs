//! The workspace as MCP resources: every file as a `file://` resource (with
//! the template `file://<root>/{+path}` for the ones a list does not reach),
//! and the search index as the template `capstan://index/search{?q}`.
//!
//! A URI is the client's word, so it is checked like a plugin's path: it must
//! name the workspace root, then the rest goes through
//! [`crate::workspace_gate::confine`] (relative, no `..`, still inside the
//! root once symlinks are followed). Percent-escapes are decoded first, so
//! `%2e%2e` is a `..` like any other.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use base64::Engine;
use rmcp::ErrorData as McpError;
use rmcp::model::{ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use serde_json::json;

use crate::plugins::services::index::Indexes;
pub use crate::uri::{decode, encode};

/// Files listed per `resources/list` page.
pub const PAGE: usize = 100;
/// The most entries one walk looks at, so a huge tree cannot stall a request.
const WALK_LIMIT: usize = 20_000;
/// Files larger than this are not read through MCP.
pub const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;
/// Hits one index search returns.
const SEARCH_HITS: usize = 10;
/// Directories never listed: version-control internals and build output.
const SKIPPED_DIRS: &[&str] = &[".git", "node_modules", "target"];

pub const SEARCH_TEMPLATE: &str = "capstan://index/search{?q}";
const SEARCH_PREFIX: &str = "capstan://index/search";

/// What a URI names, once checked.
pub enum Target {
    /// A file inside the workspace (canonical path).
    File(PathBuf),
    /// An index search.
    Search(String),
}

/// The resources of one workspace (its canonical root).
pub struct WorkspaceResources {
    root: PathBuf,
}

impl WorkspaceResources {
    /// `root` is made canonical, so a URI is compared with the real path.
    pub fn new(root: PathBuf) -> Self {
        let root = root.canonicalize().unwrap_or(root);
        Self { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn uri_for(&self, path: &Path) -> String {
        format!("file://{}", encode(&path.to_string_lossy()))
    }

    fn root_uri(&self) -> String {
        self.uri_for(&self.root)
    }

    pub fn templates(&self) -> Vec<ResourceTemplate> {
        vec![
            ResourceTemplate::new(format!("{}/{{+path}}", self.root_uri()), "Workspace file")
                .with_description(format!(
                    "Any file of the workspace {}, by its path relative to the root",
                    self.root.display()
                )),
            ResourceTemplate::new(SEARCH_TEMPLATE, "Search the workspace index")
                .with_description(
                    "The passages of the workspace's search index that match `q` (full text, \
                     ranked), as JSON with each hit's file URI and lines",
                )
                .with_mime_type("application/json"),
        ]
    }

    /// Which file or search `uri` names; an error says why it names neither.
    pub fn target(&self, uri: &str) -> Result<Target, String> {
        if let Some(rest) = uri.strip_prefix(SEARCH_PREFIX) {
            let query = rest
                .strip_prefix("?q=")
                .ok_or_else(|| format!("`{uri}`: give the search as {SEARCH_PREFIX}?q=WORDS"))?;
            let query = decode(query, true)?;
            if query.trim().is_empty() {
                return Err(format!("`{uri}`: the search `q` is empty"));
            }
            return Ok(Target::Search(query));
        }
        let rest = uri
            .strip_prefix("file://")
            .ok_or_else(|| format!("`{uri}` is neither a file:// URI nor {SEARCH_TEMPLATE}"))?;
        // RFC 8089: an empty authority or `localhost` is this machine.
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        if !rest.starts_with('/') {
            return Err(format!(
                "`{uri}` names another host; only files of this machine's workspace are served"
            ));
        }
        if rest.contains(['?', '#']) {
            return Err(format!("`{uri}`: a file URI has no query or fragment"));
        }
        let path = decode(rest, false)?;
        let rel = Path::new(&path).strip_prefix(&self.root).map_err(|_| {
            format!(
                "`{uri}` is outside the workspace {}; only its files are served",
                self.root.display()
            )
        })?;
        let rel = rel
            .to_str()
            .ok_or_else(|| format!("`{uri}` is not UTF-8"))?;
        crate::workspace_gate::confine(&self.root, rel)
            .map(Target::File)
            .map_err(|e| e.to_string())
    }

    /// The workspace's files in path order, skipping [`SKIPPED_DIRS`] and
    /// symlinks that lead out.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut seen = 0usize;
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > WALK_LIMIT {
                    out.sort();
                    return out;
                }
                let path = entry.path();
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    let skipped = entry
                        .file_name()
                        .to_str()
                        .is_some_and(|n| SKIPPED_DIRS.contains(&n));
                    if !skipped {
                        stack.push(path);
                    }
                } else if kind.is_file() {
                    out.push(path);
                } else if kind.is_symlink()
                    && let Ok(real) = path.canonicalize()
                    && real.starts_with(&self.root)
                    && real.is_file()
                {
                    out.push(path);
                }
            }
        }
        out.sort();
        out
    }

    /// One page of the file list. The cursor is the offset this server handed
    /// out; anything else is refused (MCP: an invalid cursor is -32602).
    pub fn list(&self, cursor: Option<&str>) -> Result<(Vec<Resource>, Option<String>), McpError> {
        let files = self.files();
        let start = match cursor {
            None => 0,
            Some(c) => parse_cursor(c)
                .filter(|&n| n <= files.len())
                .ok_or_else(|| invalid_cursor(c))?,
        };
        let end = (start + PAGE).min(files.len());
        let page = files[start..end]
            .iter()
            .map(|path| {
                let rel = path.strip_prefix(&self.root).unwrap_or(path);
                let mut r = Resource::new(self.uri_for(path), rel.to_string_lossy())
                    .with_description(format!("workspace file {}", rel.display()));
                if let Some(mime) = mime_for(path) {
                    r = r.with_mime_type(mime);
                }
                if let Ok(meta) = std::fs::metadata(path) {
                    r = r.with_size(meta.len());
                }
                r
            })
            .collect();
        let next = (end < files.len()).then(|| make_cursor(end));
        Ok((page, next))
    }

    /// Read what `uri` names.
    pub async fn read(&self, uri: &str, indexes: &Indexes) -> Result<ReadResourceResult, McpError> {
        match self.target(uri).map_err(not_found)? {
            Target::File(path) => {
                let owned = uri.to_owned();
                tokio::task::spawn_blocking(move || read_file(&owned, &path))
                    .await
                    .map_err(|e| McpError::internal_error(format!("reading `{uri}`: {e}"), None))?
                    .map(|c| ReadResourceResult::new(vec![c]))
            }
            Target::Search(query) => {
                let index = indexes
                    .for_workspace(&self.root)
                    .map_err(|e| McpError::internal_error(e, None))?;
                let found = tokio::task::spawn_blocking(move || index.search(&query, SEARCH_HITS))
                    .await
                    .map_err(|e| {
                        McpError::internal_error(format!("index search failed: {e}"), None)
                    })?
                    .map_err(|e| {
                        McpError::internal_error(format!("index search failed: {e}"), None)
                    })?;
                let hits: Vec<_> = found
                    .into_iter()
                    .map(|h| {
                        json!({
                            "path": h.path,
                            "uri": self.uri_for(&self.root.join(&h.path)),
                            "lines": [h.line_start, h.line_end],
                            "heading": h.heading,
                            "snippet": h.snippet,
                        })
                    })
                    .collect();
                let text =
                    serde_json::to_string_pretty(&json!({ "hits": hits })).unwrap_or_default();
                Ok(ReadResourceResult::new(vec![
                    ResourceContents::text(text, uri).with_mime_type("application/json"),
                ]))
            }
        }
    }

    /// Paths relative to the root that start with `prefix`, for completion:
    /// the entries of the prefix's directory (confined like any path), with
    /// a `/` after directories.
    pub fn complete_path(&self, prefix: &str) -> Vec<String> {
        let (dir, stem) = match prefix.rfind('/') {
            Some(i) => (&prefix[..i], &prefix[i + 1..]),
            None => ("", prefix),
        };
        let Ok(real_dir) = crate::workspace_gate::confine(&self.root, dir) else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(&real_dir) else {
            return Vec::new();
        };
        let mut out: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                if !name.starts_with(stem) || SKIPPED_DIRS.contains(&name.as_str()) {
                    return None;
                }
                let joined = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                // A symlink that leads out is not offered.
                let real = crate::workspace_gate::confine(&self.root, &joined).ok()?;
                Some(if real.is_dir() {
                    format!("{joined}/")
                } else {
                    joined
                })
            })
            .collect();
        out.sort();
        out
    }
}

/// Reads a confined workspace file: opened without blocking (a FIFO or a
/// device is refused, never waited on), checked on the open handle, read from
/// it. Blocking I/O: call it off the async workers.
fn read_file(uri: &str, path: &Path) -> Result<ResourceContents, McpError> {
    use std::io::Read as _;
    let file = crate::workspace_gate::nonblocking_read_std()
        .open(path)
        .map_err(|e| not_found(format!("`{uri}`: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| not_found(format!("`{uri}`: {e}")))?;
    if !meta.is_file() {
        return Err(not_found(if meta.is_dir() {
            format!(
                "`{uri}` is a directory; read a file in it (resources/list or completion/complete give the paths)"
            )
        } else {
            format!(
                "`{uri}` is not a regular file (a FIFO, socket or device); only files are served"
            )
        }));
    }
    if meta.len() > MAX_READ_BYTES {
        return Err(McpError::invalid_params(
            format!(
                "`{uri}` is {} bytes; files over {} MiB are not served through MCP",
                meta.len(),
                MAX_READ_BYTES / (1024 * 1024)
            ),
            None,
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| McpError::internal_error(format!("`{uri}`: {e}"), None))?;
    let mime = mime_for(path);
    Ok(match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri).with_mime_type(mime.unwrap_or("text/plain")),
        Err(e) => {
            let blob = base64::engine::general_purpose::STANDARD.encode(e.into_bytes());
            ResourceContents::blob(blob, uri)
                .with_mime_type(mime.unwrap_or("application/octet-stream"))
        }
    })
}

/// MCP's "resource not found" (-32002).
fn not_found(message: String) -> McpError {
    McpError::resource_not_found(message, None)
}

const CURSOR_PREFIX: &str = "files:";

fn make_cursor(offset: usize) -> String {
    format!("{CURSOR_PREFIX}{offset}")
}

fn parse_cursor(cursor: &str) -> Option<usize> {
    cursor.strip_prefix(CURSOR_PREFIX)?.parse().ok()
}

/// The error for a cursor this server did not hand out.
pub fn invalid_cursor(cursor: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "invalid cursor `{cursor}`: pass back the `nextCursor` of the previous page, or none for the first page"
        ),
        None,
    )
}

/// The MIME type of well-known extensions.
fn mime_for(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "txt" | "log" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "csv" => "text/csv",
        "js" | "mjs" => "text/javascript",
        "json" => "application/json",
        "toml" => "application/toml",
        "yaml" | "yml" => "application/yaml",
        "xml" => "application/xml",
        "rs" => "text/x-rust",
        "py" => "text/x-python",
        "sh" => "text/x-shellscript",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        _ => return None,
    })
}

/// What a poll of the workspace found: the file list, and each watched
/// file's modification stamp.
pub type Stamp = Option<(SystemTime, u64)>;

pub fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The set of files, to tell when the list changed.
pub fn listing(resources: &WorkspaceResources) -> BTreeSet<PathBuf> {
    resources.files().into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_round_trip_and_broken_ones_are_refused() {
        assert_eq!(encode("/a b/ü?.md"), "/a%20b/%C3%BC%3F.md");
        assert_eq!(decode("/a%20b/%C3%BC%3F.md", false).unwrap(), "/a b/ü?.md");
        assert_eq!(decode("a+b", true).unwrap(), "a b");
        assert!(decode("%zz", false).is_err());
        assert!(decode("%C3", false).is_err());
    }

    #[test]
    fn every_spelling_of_a_way_out_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        let res = WorkspaceResources::new(root.clone());
        let r = encode(&root.to_string_lossy());
        let inside =
            |uri: String| matches!(res.target(&uri), Ok(Target::File(p)) if p.starts_with(&root));
        assert!(inside(format!("file://{r}/src/main.rs")));
        assert!(inside(format!("file://localhost{r}/src/%6Dain.rs")));
        for uri in [
            format!("file://{r}/../etc/passwd"),
            format!("file://{r}/src/%2e%2e/%2e%2e/etc/passwd"),
            format!("file://{r}/link/secret"),
            format!("file://{r}%2F..%2Fetc%2Fpasswd"),
            "file:///etc/passwd".to_string(),
            format!("file://evil.example{r}/src/main.rs"),
            format!("file://{r}/src/main.rs%00"),
            format!("file://{r}/src/main.rs?x=1"),
            format!("{r}/src/main.rs"),
        ] {
            assert!(res.target(&uri).is_err(), "{uri} was let through");
        }
        assert_eq!(res.complete_path("sr"), vec!["src/".to_string()]);
        assert_eq!(res.complete_path("src/m"), vec!["src/main.rs".to_string()]);
        assert!(res.complete_path("../").is_empty());
        assert!(res.complete_path("link/").is_empty());
        assert!(!res.complete_path("").contains(&"link/".to_string()));
    }
}
