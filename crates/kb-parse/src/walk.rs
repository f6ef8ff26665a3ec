//! What a refresh of the index looks at: every file under a workspace root that
//! `.gitignore`, `.capstanignore` and the built-in skips leave, whose name says it
//! may be text, within the size limit. The kb-retrieval plugin walks with it to
//! refresh; the host walks with it, natively, to tell whether a refresh would
//! find anything to do (so a search of an unchanged workspace skips it). One
//! walk for both, so they can never disagree about which files count.

use std::path::{Path, PathBuf};

use crate::{ChunkOptions, IgnoreRules};

/// Directories nested deeper than this are skipped with a warning.
pub const MAX_DEPTH: usize = 64;

/// Why a file was not indexed. Each is counted in a refresh's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    /// Binary content, or an extension that is never text (images, archives...).
    Binary,
    /// Over the size limit.
    TooLarge,
    /// Could not be read (permissions, vanished while walking).
    Unreadable,
    /// A known format that did not parse (a broken .docx).
    Malformed,
    /// A dot file or a key file with no known format: never judged by content, since it
    /// may hold secrets.
    Private,
}

impl Skip {
    /// The reason as a refresh's summary says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Binary => "binary",
            Skip::TooLarge => "too large",
            Skip::Unreadable => "unreadable",
            Skip::Malformed => "malformed",
            Skip::Private => "private",
        }
    }
}

/// A file a refresh considers, as the index records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Relative to the root, `/`-separated.
    pub path: String,
    /// In bytes.
    pub size: u64,
    /// Last modification, milliseconds since the Unix epoch (0 when unknown).
    pub mtime_ms: u64,
}

/// What one walk found, in path order within each directory.
#[derive(Debug, Default)]
pub struct Walk {
    /// The files a refresh parses when they are new or changed.
    pub candidates: Vec<Candidate>,
    /// Files left out, by reason (one entry per file).
    pub skipped: Vec<Skip>,
    /// What a person should know (unreadable directories, bad ignore patterns,
    /// files over the size limit), in the order found.
    pub warnings: Vec<String>,
}

/// Walks `root` (the plugin passes `.`, its preopened workspace; the host the
/// workspace's path). Symlinks are never followed; nothing fails the walk: what
/// cannot be read is a warning.
pub fn walk(root: &Path, opts: &ChunkOptions) -> Walk {
    let mut found = Walk::default();
    let mut rules = IgnoreRules::new();
    let read_text = |rel: &str| std::fs::read_to_string(fs_path(root, rel)).unwrap_or_default();
    // (dir path relative to the root, "" for the root; depth)
    let mut stack = vec![(String::new(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let join = |name: &str| {
            if dir.is_empty() {
                name.to_string()
            } else {
                format!("{dir}/{name}")
            }
        };
        let fs_dir = fs_path(root, &dir);
        let entries = match std::fs::read_dir(&fs_dir) {
            Ok(e) => e,
            Err(e) => {
                let shown = if dir.is_empty() { "." } else { dir.as_str() };
                found
                    .warnings
                    .push(format!("{shown}: cannot list directory: {e}"));
                continue;
            }
        };
        let mut names: Vec<(String, std::fs::DirEntry)> = entries
            .flatten()
            .map(|entry| (entry.file_name().to_string_lossy().into_owned(), entry))
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        // Ignore files are read only where the listing has them: most
        // directories have none, and a failed open costs a path lookup.
        let has = |file: &str| {
            names
                .binary_search_by(|(n, _)| n.as_str().cmp(file))
                .is_ok()
        };
        let ignore_text = |file: &str| {
            if has(file) {
                read_text(&join(file))
            } else {
                String::new()
            }
        };
        let warnings = rules.add_dir(
            &dir,
            &ignore_text(".gitignore"),
            &ignore_text(".capstanignore"),
        );
        found.warnings.extend(warnings);
        for (name, entry) in names {
            let Ok(ft) = entry.file_type() else { continue };
            let rel = join(&name);
            if ft.is_symlink() {
                continue;
            }
            if ft.is_dir() {
                if IgnoreRules::is_builtin_skip(&name) || rules.is_ignored(&rel, true) {
                    continue;
                }
                if depth + 1 > MAX_DEPTH {
                    found
                        .warnings
                        .push(format!("{rel}: deeper than {MAX_DEPTH} levels, skipped"));
                    continue;
                }
                stack.push((rel, depth + 1));
            } else if ft.is_file() {
                if rules.is_ignored(&rel, false) {
                    continue;
                }
                if crate::detect_format(&rel).is_none() && !crate::may_sniff(&rel) {
                    found.skipped.push(if crate::is_binary_extension(&rel) {
                        Skip::Binary
                    } else {
                        Skip::Private
                    });
                    continue;
                }
                // From the directory's own handle: no path lookup from the
                // root, and a symlink swapped in is not followed.
                let Ok(meta) = entry.metadata() else {
                    found.skipped.push(Skip::Unreadable);
                    found.warnings.push(format!("{rel}: cannot read metadata"));
                    continue;
                };
                if meta.len() > opts.max_file_bytes {
                    found.skipped.push(Skip::TooLarge);
                    found.warnings.push(format!(
                        "{rel}: {} bytes is over the {}-byte limit, skipped",
                        meta.len(),
                        opts.max_file_bytes
                    ));
                    continue;
                }
                let mtime_ms = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                found.candidates.push(Candidate {
                    path: rel,
                    size: meta.len(),
                    mtime_ms,
                });
            }
        }
    }
    found
}

/// `rel` under `root` as the file system wants it. Under `.` (the plugin's
/// preopened workspace) a relative path is used as is, as WASI resolves it.
fn fs_path(root: &Path, rel: &str) -> PathBuf {
    match (rel.is_empty(), root == Path::new(".")) {
        (true, _) => root.to_path_buf(),
        (false, true) => PathBuf::from(rel),
        (false, false) => root.join(rel),
    }
}
