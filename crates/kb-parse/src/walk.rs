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
    // Everything found, in the order found; `items[..resolved]` have their metadata.
    let mut items: Vec<Item> = Vec::new();
    // Pending files, and directories they keep open, since `resolved`.
    let (mut resolved, mut pending, mut open_dirs) = (0usize, 0usize, 0usize);
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
                items.push(Item::Warning(format!(
                    "{shown}: cannot list directory: {e}"
                )));
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
        items.extend(warnings.into_iter().map(Item::Warning));
        let pending_before = pending;
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
                    items.push(Item::Warning(format!(
                        "{rel}: deeper than {MAX_DEPTH} levels, skipped"
                    )));
                    continue;
                }
                stack.push((rel, depth + 1));
            } else if ft.is_file() {
                if rules.is_ignored(&rel, false) {
                    continue;
                }
                if crate::detect_format(&rel).is_none() && !crate::may_sniff(&rel) {
                    items.push(Item::Skipped(if crate::is_binary_extension(&rel) {
                        Skip::Binary
                    } else {
                        Skip::Private
                    }));
                    continue;
                }
                // Its metadata is read later, in order, in batches
                // ([`stat_pending`]): on several threads where there are some.
                items.push(Item::File {
                    rel,
                    entry: Some(entry),
                    meta: None,
                });
                pending += 1;
            }
        }
        if pending > pending_before {
            open_dirs += 1;
        }
        // Each pending entry keeps its directory open: resolve them before
        // too many directories are.
        if pending >= STAT_BATCH_FILES
            || open_dirs >= STAT_BATCH_DIRS
            || items.len() - resolved >= STAT_BATCH_ITEMS
        {
            stat_pending(&mut items[resolved..], pending);
            resolved = items.len();
            pending = 0;
            open_dirs = 0;
        }
    }
    stat_pending(&mut items[resolved..], pending);
    for item in items {
        match item {
            Item::Warning(w) => found.warnings.push(w),
            Item::Skipped(skip) => found.skipped.push(skip),
            Item::File { rel, meta, .. } => match meta {
                Some(Ok((size, _))) if size > opts.max_file_bytes => {
                    found.skipped.push(Skip::TooLarge);
                    found.warnings.push(format!(
                        "{rel}: {size} bytes is over the {}-byte limit, skipped",
                        opts.max_file_bytes
                    ));
                }
                Some(Ok((size, mtime_ms))) => found.candidates.push(Candidate {
                    path: rel,
                    size,
                    mtime_ms,
                }),
                _ => {
                    found.skipped.push(Skip::Unreadable);
                    found.warnings.push(format!("{rel}: cannot read metadata"));
                }
            },
        }
    }
    found
}

/// Files whose metadata is read at once, at most (each keeps its directory open
/// until then).
const STAT_BATCH_FILES: usize = 4096;
/// Directories kept open by pending files, at most (well under the usual limit
/// of 1,024 open files).
const STAT_BATCH_DIRS: usize = 128;
/// Items after which pending files are resolved anyway.
const STAT_BATCH_ITEMS: usize = 16384;
/// Pending files below which one thread reads them all.
const PARALLEL_MIN: usize = 256;

/// One thing the walk found, in order. A file's metadata comes later.
enum Item {
    Warning(String),
    Skipped(Skip),
    File {
        rel: String,
        entry: Option<std::fs::DirEntry>,
        /// (size, modification time in ms since the epoch, 0 when unknown)
        meta: Option<std::io::Result<(u64, u64)>>,
    },
}

/// Reads the metadata of the `pending` files among `items`, from each
/// directory's own handle (no path lookup from the root, and a symlink swapped
/// in is not followed), and lets their directories go. On several threads when
/// there are many and the platform has threads; the results are the same.
fn stat_pending(items: &mut [Item], pending: usize) {
    fn stat(item: &mut Item) {
        if let Item::File { entry, meta, .. } = item
            && let Some(entry) = entry.take()
        {
            *meta = Some(entry.metadata().map(|m| {
                let mtime_ms = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                (m.len(), mtime_ms)
            }));
        }
    }
    #[cfg(not(target_family = "wasm"))]
    if pending >= PARALLEL_MIN {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4);
        if threads > 1 {
            let chunk = items.len().div_ceil(threads);
            std::thread::scope(|scope| {
                for part in items.chunks_mut(chunk) {
                    scope.spawn(move || part.iter_mut().for_each(stat));
                }
            });
            return;
        }
    }
    let _ = (pending, PARALLEL_MIN);
    items.iter_mut().for_each(stat);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Enough files for the metadata to be read on several threads: the walk
    /// finds what one thread would, in the same order.
    #[test]
    fn many_files_come_out_in_walk_order_with_sizes_and_skips() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // .gitignore is text, so a candidate too; root files first, in name order.
        let mut expected = vec![".gitignore".to_string(), "top.md".to_string()];
        for sub in ["b", "a"] {
            std::fs::create_dir(root.join(sub)).unwrap();
            for i in 0..300 {
                let rel = format!("{sub}/{i:04}.md");
                std::fs::write(root.join(&rel), "x".repeat(i % 7)).unwrap();
            }
        }
        // Popped last in, so `b` before `a`, each in name order.
        for sub in ["b", "a"] {
            expected.extend((0..300).map(|i| format!("{sub}/{i:04}.md")));
        }
        std::fs::write(root.join("top.md"), "top").unwrap();
        std::fs::write(root.join("big.md"), "y".repeat(5000)).unwrap();
        std::fs::write(root.join("ignored.md"), "no").unwrap();
        std::fs::write(root.join("pic.png"), "png").unwrap();
        std::fs::write(root.join(".gitignore"), "ignored.md\n").unwrap();
        let opts = ChunkOptions {
            max_file_bytes: 4096,
            ..Default::default()
        };
        let found = walk(root, &opts);
        let paths: Vec<&str> = found.candidates.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, expected);
        for c in &found.candidates {
            let meta = std::fs::metadata(root.join(&c.path)).unwrap();
            assert_eq!(c.size, meta.len(), "{}", c.path);
            assert!(c.mtime_ms > 0);
        }
        // big.md, then pic.png, in name order (ignored.md is not counted).
        assert_eq!(found.skipped, [Skip::TooLarge, Skip::Binary]);
        assert_eq!(
            found.warnings,
            ["big.md: 5000 bytes is over the 4096-byte limit, skipped"]
        );
    }
}
