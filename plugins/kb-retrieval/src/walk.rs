//! Incremental refresh: walk the workspace, parse what is new or changed, remove
//! what is gone, commit once.
//!
//! Invariants: symlinks are never followed (a link can point out of the
//! workspace, and WASI would refuse it anyway); every unreadable, binary, huge or
//! malformed file is a warning, never an aborted index.

use std::collections::HashMap;

use capstan_kb_parse::{ChunkOptions, IgnoreRules, ParseError};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::capstan::plugin::cancel::is_cancelled;
use crate::capstan::plugin::events::{Activity, emit};
use crate::capstan::plugin::index::{self, FileMeta, FileUpdate, Passage};
use crate::capstan::plugin::types::TaskError;

/// Parsed files are sent to the host's index in batches of about this much text: one
/// call per file made linux-doc's 3,000 small files pay a hand-off each.
const BATCH_BYTES: usize = 2 * 1024 * 1024;

/// Files waiting to go to the host index in one `upsert-files` call.
#[derive(Default)]
struct Batch {
    files: Vec<FileUpdate>,
    bytes: usize,
}

impl Batch {
    fn push(&mut self, update: FileUpdate) -> Result<(), TaskError> {
        self.bytes += update.passages.iter().map(|p| p.text.len()).sum::<usize>();
        self.files.push(update);
        if self.bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TaskError> {
        if !self.files.is_empty() {
            index::upsert_files(&self.files)
                .map_err(|e| TaskError::Failed(format!("index: {e}")))?;
        }
        self.files.clear();
        self.bytes = 0;
        Ok(())
    }
}

/// Directories deeper than this are skipped with a warning (a guard against
/// pathological trees, not a limit anyone should meet).
const MAX_DEPTH: usize = 64;

#[derive(Default)]
pub struct Report {
    pub scanned: u64,
    pub parsed: u64,
    pub unchanged: u64,
    pub removed: u64,
    pub skipped: u64,
    pub bytes_parsed: u64,
    pub passages: u64,
    pub files_indexed: u64,
    pub warnings: Vec<String>,
}

impl Report {
    pub fn summary(&self) -> String {
        format!(
            "{} files: {} parsed, {} unchanged, {} removed, {} skipped; {} warnings",
            self.scanned,
            self.parsed,
            self.unchanged,
            self.removed,
            self.skipped,
            self.warnings.len()
        )
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "scanned": self.scanned, "parsed": self.parsed, "unchanged": self.unchanged,
            "removed": self.removed, "skipped": self.skipped, "bytes_parsed": self.bytes_parsed,
            "passages": self.passages, "files_indexed": self.files_indexed, "warnings": self.warnings,
        })
    }
}

struct Candidate {
    path: String,
    size: u64,
    mtime_ms: u64,
}

fn warn(report: &mut Report, message: String) {
    emit(&Activity {
        kind: "kb.warning".into(),
        message: message.clone(),
        data: String::new(),
    });
    report.warnings.push(message);
}

fn read_text(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Every indexable file, respecting .gitignore and .capstanignore.
fn collect(opts: &ChunkOptions, report: &mut Report) -> Vec<Candidate> {
    let mut rules = IgnoreRules::new();
    let mut out = Vec::new();
    // (dir path relative to the root, "" for the root; depth)
    let mut stack = vec![(String::new(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let fs_dir = if dir.is_empty() {
            ".".to_string()
        } else {
            dir.clone()
        };
        let join = |name: &str| {
            if dir.is_empty() {
                name.to_string()
            } else {
                format!("{dir}/{name}")
            }
        };
        for w in rules.add_dir(
            &dir,
            &read_text(&format!("{fs_dir}/.gitignore")),
            &read_text(&format!("{fs_dir}/.capstanignore")),
        ) {
            warn(report, w);
        }
        let entries = match std::fs::read_dir(&fs_dir) {
            Ok(e) => e,
            Err(e) => {
                warn(report, format!("{fs_dir}: cannot list directory: {e}"));
                continue;
            }
        };
        let mut names: Vec<(String, std::fs::FileType)> = Vec::new();
        for entry in entries.flatten() {
            let Ok(ft) = entry.file_type() else { continue };
            names.push((entry.file_name().to_string_lossy().into_owned(), ft));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, ft) in names {
            let rel = join(&name);
            if ft.is_symlink() {
                continue;
            }
            if ft.is_dir() {
                if IgnoreRules::is_builtin_skip(&name) || rules.is_ignored(&rel, true) {
                    continue;
                }
                if depth + 1 > MAX_DEPTH {
                    warn(
                        report,
                        format!("{rel}: deeper than {MAX_DEPTH} levels, skipped"),
                    );
                    continue;
                }
                stack.push((rel, depth + 1));
            } else if ft.is_file() {
                if rules.is_ignored(&rel, false) || capstan_kb_parse::detect_format(&rel).is_none()
                {
                    continue;
                }
                let Ok(meta) = std::fs::symlink_metadata(&rel) else {
                    warn(report, format!("{rel}: cannot read metadata"));
                    continue;
                };
                if meta.len() > opts.max_file_bytes {
                    report.skipped += 1;
                    warn(
                        report,
                        format!(
                            "{rel}: {} bytes is over the {}-byte limit, skipped",
                            meta.len(),
                            opts.max_file_bytes
                        ),
                    );
                    continue;
                }
                let mtime_ms = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                out.push(Candidate {
                    path: rel,
                    size: meta.len(),
                    mtime_ms,
                });
            }
        }
    }
    out
}

pub fn refresh(opts: &ChunkOptions) -> Result<Report, TaskError> {
    let mut report = Report::default();
    let known: HashMap<String, FileMeta> = index::known_files()
        .map_err(|e| TaskError::Failed(format!("index: {e}")))?
        .into_iter()
        .map(|m| (m.path.clone(), m))
        .collect();
    let candidates = collect(opts, &mut report);
    let total = candidates.len() as u64;
    let mut seen = std::collections::HashSet::new();
    let mut changed = false;
    let mut batch = Batch::default();
    for (i, c) in candidates.into_iter().enumerate() {
        if is_cancelled() {
            return Err(TaskError::Cancelled);
        }
        crate::report_progress(i as u64 + 1, total);
        report.scanned += 1;
        seen.insert(c.path.clone());
        let previous = known.get(&c.path);
        if previous.is_some_and(|p| p.size == c.size && p.mtime_ms == c.mtime_ms) {
            report.unchanged += 1;
            continue;
        }
        let bytes = match std::fs::read(&c.path) {
            Ok(b) => b,
            Err(e) => {
                report.skipped += 1;
                warn(&mut report, format!("{}: cannot read: {e}", c.path));
                continue;
            }
        };
        let hash = hex(&Sha256::digest(&bytes));
        let meta = FileMeta {
            path: c.path.clone(),
            mtime_ms: c.mtime_ms,
            size: c.size,
            hash,
        };
        let passages = match capstan_kb_parse::parse(&c.path, &bytes, opts) {
            Ok(parsed) => {
                for w in parsed.warnings {
                    warn(&mut report, format!("{}: {w}", c.path));
                }
                parsed.passages
            }
            Err(ParseError::Binary) => {
                report.skipped += 1;
                continue;
            }
            Err(e) => {
                report.skipped += 1;
                warn(&mut report, format!("{}: {e}; skipped", c.path));
                // A file that used to parse and now does not must not keep stale passages.
                if previous.is_some() {
                    index::remove_file(&c.path)
                        .map_err(|e| TaskError::Failed(format!("index: {e}")))?;
                    changed = true;
                }
                continue;
            }
        };
        let passages: Vec<Passage> = passages
            .into_iter()
            .map(|p| Passage {
                heading: p.heading,
                text: p.text,
                line_start: p.line_start,
                line_end: p.line_end,
            })
            .collect();
        report.parsed += 1;
        report.bytes_parsed += c.size;
        report.passages += passages.len() as u64;
        batch.push(FileUpdate { meta, passages })?;
        changed = true;
    }
    batch.flush()?;
    for path in known.keys() {
        if !seen.contains(path) {
            index::remove_file(path).map_err(|e| TaskError::Failed(format!("index: {e}")))?;
            report.removed += 1;
            changed = true;
        }
    }
    if changed || known.is_empty() {
        let stats = index::commit().map_err(|e| TaskError::Failed(format!("index commit: {e}")))?;
        report.files_indexed = stats.files;
    } else {
        report.files_indexed = known.len() as u64;
    }
    if report.parsed + report.removed > 0 {
        emit(&Activity {
            kind: "kb.indexed".into(),
            message: format!(
                "indexed the workspace: {} new or changed files, {} removed, {} unchanged",
                report.parsed, report.removed, report.unchanged
            ),
            data: report.to_json().to_string(),
        });
    }
    Ok(report)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
