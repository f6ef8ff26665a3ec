//! Incremental refresh: walk the workspace, parse what is new or changed, remove
//! what is gone, commit once.
//!
//! Invariants: symlinks are never followed (a link can point out of the
//! workspace, and WASI would refuse it anyway); every unreadable, binary, huge or
//! malformed file is counted by its [`Skip`] reason, never an aborted index. A file
//! whose name says nothing about its format is judged by its first bytes.
//!
//! When the host cannot write the index (another Capstan process is updating it), a
//! search's refresh stops there and the search runs on the last committed index, saying
//! so in one activity line ([`Mode::BestEffort`]); an explicit index run fails instead.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use capstan_kb_parse::walk::{Candidate, Skip};
use capstan_kb_parse::{ChunkOptions, ParseError};
use serde_json::json;
use sha2::{Digest, Sha256};

use capstan_plugin::host::events::{Activity, emit};
use capstan_plugin::host::index::{self, FileMeta, FileUpdate, Passage};
use capstan_plugin::{TaskError, is_cancelled};

/// Parsed files are sent to the host's index in batches of about this much text: one
/// call per file made linux-doc's 3,000 small files pay a hand-off each.
const BATCH_BYTES: usize = 2 * 1024 * 1024;

/// The first batch is this small, and each next one twice the last (up to
/// [`BATCH_BYTES`]): the host's indexing threads, idle until the first batch arrives,
/// start after a few files instead of after 2 MiB of parsing.
const FIRST_BATCH_BYTES: usize = 128 * 1024;

/// Files waiting to go to the host index in one `upsert-files` call.
#[derive(Default)]
struct Batch {
    files: Vec<FileUpdate>,
    bytes: usize,
    /// Batches sent so far.
    sent: u32,
}

impl Batch {
    fn push(&mut self, update: FileUpdate) -> Result<(), String> {
        self.bytes += update.passages.iter().map(|p| p.text.len()).sum::<usize>();
        self.files.push(update);
        let limit = FIRST_BATCH_BYTES
            .checked_shl(self.sent)
            .map_or(BATCH_BYTES, |l| l.min(BATCH_BYTES));
        if self.bytes >= limit {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        if !self.files.is_empty() {
            index::upsert_files(&self.files).map_err(|e| e.message())?;
            self.sent = self.sent.saturating_add(1);
        }
        self.files.clear();
        self.bytes = 0;
        Ok(())
    }
}

/// Directories deeper than this are skipped with a warning (a guard against
/// pathological trees, not a limit anyone should meet).
/// How a refresh treats an index it cannot write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `index`: the failure is the task's.
    Required,
    /// Before a search: stop refreshing, search the last committed index, say so.
    BestEffort,
}

#[derive(Default)]
pub struct Report {
    pub scanned: u64,
    pub parsed: u64,
    pub unchanged: u64,
    pub removed: u64,
    pub skipped: BTreeMap<Skip, u64>,
    pub bytes_parsed: u64,
    pub passages: u64,
    pub files_indexed: u64,
    pub warnings: Vec<String>,
    /// Why the index could not be brought up to date (the search used the last commit).
    pub stale: Option<String>,
}

impl Report {
    fn skip(&mut self, why: Skip) {
        *self.skipped.entry(why).or_default() += 1;
    }

    fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }

    pub fn summary(&self) -> String {
        let reasons: Vec<String> = self
            .skipped
            .iter()
            .map(|(why, n)| format!("{n} {}", why.as_str()))
            .collect();
        format!(
            "{} files: {} parsed, {} unchanged, {} removed, {} skipped{}; {} warnings",
            self.scanned,
            self.parsed,
            self.unchanged,
            self.removed,
            self.skipped_total(),
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join(", "))
            },
            self.warnings.len()
        )
    }

    pub fn to_json(&self) -> serde_json::Value {
        let by_reason: serde_json::Map<String, serde_json::Value> = self
            .skipped
            .iter()
            .map(|(why, n)| (why.as_str().replace(' ', "_"), json!(n)))
            .collect();
        json!({
            "scanned": self.scanned, "parsed": self.parsed, "unchanged": self.unchanged,
            "removed": self.removed, "skipped": self.skipped_total(), "skipped_by_reason": by_reason,
            "bytes_parsed": self.bytes_parsed, "passages": self.passages,
            "files_indexed": self.files_indexed, "warnings": self.warnings, "stale": self.stale,
        })
    }
}

fn warn(report: &mut Report, message: String) {
    emit(&Activity {
        kind: "kb.warning".into(),
        message: message.clone(),
        data: None,
    });
    report.warnings.push(message);
}

/// Every indexable file, respecting .gitignore and .capstanignore (see
/// [`capstan_kb_parse::walk`]), its warnings and skips counted in `report`.
fn collect(opts: &ChunkOptions, report: &mut Report) -> Vec<Candidate> {
    let found = capstan_kb_parse::walk::walk(std::path::Path::new("."), opts);
    for why in found.skipped {
        report.skip(why);
    }
    for w in found.warnings {
        warn(report, w);
    }
    found.candidates
}

/// The first [`capstan_kb_parse::SNIFF_BYTES`] of a file.
fn read_head(path: &str) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(capstan_kb_parse::SNIFF_BYTES);
    std::fs::File::open(path)?
        .take(capstan_kb_parse::SNIFF_BYTES as u64)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// An index write that failed: fatal for [`Mode::Required`]; for [`Mode::BestEffort`],
/// the end of the refresh (the search uses the last commit).
fn write_failed(mode: Mode, report: &mut Report, e: String) -> Result<(), TaskError> {
    match mode {
        Mode::Required => Err(TaskError::Failed(format!("index: {e}"))),
        Mode::BestEffort => {
            emit(&Activity {
                kind: "kb.stale".into(),
                message: format!("{e}; searching the last committed index"),
                data: None,
            });
            report.stale = Some(e);
            Ok(())
        }
    }
}

pub fn refresh(opts: &ChunkOptions, mode: Mode) -> Result<Report, TaskError> {
    let mut report = Report::default();
    let known: HashMap<String, FileMeta> = index::known_files()
        .map_err(|e| TaskError::Failed(format!("index: {}", e.message())))?
        .into_iter()
        .map(|m| (m.path.clone(), m))
        .collect();
    let candidates = collect(opts, &mut report);
    let total = candidates.len() as u64;
    let total_bytes: u64 = candidates.iter().map(|c| c.size).sum();
    let mut done_bytes = 0u64;
    let mut seen = std::collections::HashSet::new();
    let mut changed = false;
    let mut batch = Batch::default();
    for (i, c) in candidates.into_iter().enumerate() {
        if is_cancelled() {
            return Err(TaskError::Cancelled);
        }
        done_bytes += c.size;
        crate::report_progress(i as u64 + 1, total, done_bytes, total_bytes);
        report.scanned += 1;
        seen.insert(c.path.clone());
        let previous = known.get(&c.path);
        if previous.is_some_and(|p| p.size == c.size && p.mtime_ms == c.mtime_ms) {
            report.unchanged += 1;
            continue;
        }
        // A name that says nothing: look at the first bytes before reading it all, so a
        // tree of unknown binaries costs a few KiB each.
        if capstan_kb_parse::detect_format(&c.path).is_none() {
            match read_head(&c.path) {
                Ok(head) if capstan_kb_parse::looks_like_text(&head) => {}
                Ok(_) => {
                    report.skip(Skip::Binary);
                    continue;
                }
                Err(e) => {
                    report.skip(Skip::Unreadable);
                    warn(&mut report, format!("{}: cannot read: {e}", c.path));
                    continue;
                }
            }
        }
        let bytes = match std::fs::read(&c.path) {
            Ok(b) => b,
            Err(e) => {
                report.skip(Skip::Unreadable);
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
        let (passages, skipped) = match capstan_kb_parse::parse(&c.path, &bytes, opts) {
            Ok(parsed) => {
                for w in parsed.warnings {
                    warn(&mut report, format!("{}: {w}", c.path));
                }
                (parsed.passages, None)
            }
            Err(ParseError::Binary | ParseError::Unsupported { .. }) => {
                (vec![], Some(Skip::Binary))
            }
            Err(e @ ParseError::TooLarge { .. }) => {
                warn(&mut report, format!("{}: {e}; skipped", c.path));
                (vec![], Some(Skip::TooLarge))
            }
            Err(e) => {
                warn(&mut report, format!("{}: {e}; skipped", c.path));
                (vec![], Some(Skip::Malformed))
            }
        };
        if let Some(why) = skipped {
            report.skip(why);
            // A file that used to parse and now does not must not keep stale passages.
            if previous.is_some() {
                if let Err(e) = index::remove_file(&c.path).map_err(|e| e.message()) {
                    write_failed(mode, &mut report, e)?;
                    return Ok(report);
                }
                changed = true;
            }
            continue;
        }
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
        if let Err(e) = batch.push(FileUpdate { meta, passages }) {
            write_failed(mode, &mut report, e)?;
            return Ok(report);
        }
        changed = true;
    }
    if let Err(e) = batch.flush() {
        write_failed(mode, &mut report, e)?;
        return Ok(report);
    }
    for path in known.keys() {
        if !seen.contains(path) {
            if let Err(e) = index::remove_file(path).map_err(|e| e.message()) {
                write_failed(mode, &mut report, e)?;
                return Ok(report);
            }
            report.removed += 1;
            changed = true;
        }
    }
    if changed || known.is_empty() {
        match index::commit().map_err(|e| e.message()) {
            Ok(stats) => report.files_indexed = stats.files,
            Err(e) => {
                write_failed(mode, &mut report, e)?;
                return Ok(report);
            }
        }
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
            data: Some(report.to_json().to_string()),
        });
    }
    Ok(report)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
