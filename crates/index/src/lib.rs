//! The host side of the WIT `index` interface: one BM25 passage index per workspace, on
//! disk, built with tantivy.
//!
//! The kb-retrieval plugin parses files inside the sandbox (see `capstan-kb-parse`) and
//! sends passages here; this crate stores them and answers queries. It is native-only
//! (mmap, a multi-threaded writer).
//!
//! # Consistency model
//! * Changes ([`WorkspaceIndex::upsert_files`], [`WorkspaceIndex::remove_file`]) are
//!   invisible to [`WorkspaceIndex::search`] until [`WorkspaceIndex::commit`], which makes
//!   all of them visible at once.
//! * A commit is atomic on disk: tantivy writes new segment files first and switches
//!   `meta.json` by an atomic rename. The list of indexed files (path, mtime, size, hash)
//!   is the commit's payload inside that same `meta.json`, so passages and file metas can
//!   never disagree. A crash (or dropping the index) before `commit` loses only the
//!   uncommitted changes; reopening yields the previous commit.
//! * [`WorkspaceIndex::known_files`] answers for the writer's view: committed state plus
//!   the changes made since, so an interrupted refresh in the same process resumes where it
//!   stopped. With no change pending it re-reads the last commit from disk, so it sees what
//!   another process committed.
//!
//! # Many processes on one index
//! Any number of Capstan processes may open one workspace's index (a `serve`, a `chat` and
//! a few `ask`s at once). Reading never needs tantivy's writer lock: searches and
//! [`WorkspaceIndex::known_files`] reload the last commit from disk. The writer (and its
//! directory lock) is taken only by the first change of a refresh and given back by
//! [`WorkspaceIndex::commit`], so a process holds it only while it is actually writing. A
//! change that finds another process writing waits up to [`IndexOptions::writer_wait`],
//! then fails with [`IndexError::WriterBusy`]; the caller searches the last commit instead.
//!
//! # Schema
//! One tantivy document per passage: `path` (raw string, the delete-by-file term, and a
//! fast field that tells the ranking which passages share a file),
//! `heading` (analyzed without positions, stored), `text` (stored), `body` (analyzed with
//! positions, not stored: the text, the passage's own heading, then its whole heading
//! path, scored as one BM25 document; see [`IndexOptions::heading_boost`] for why),
//! `line_start`/`line_end`, and the file's
//! `mtime_ms`/`size`/`hash` (stored, so the file list can be rebuilt from the passages if
//! a commit payload is ever missing).
//!
//! # Why the file list is a commit payload
//! Alternatives were a JSON sidecar (a second file that a crash between the two writes
//! leaves out of step with the index) or one tantivy "meta" document per file (reading
//! them all means fetching every one from the doc store, and they skew BM25's document
//! count). The payload is written by the same atomic rename, costs nothing at query time,
//! and is in memory after open. Its cost is about 100 bytes per file re-written on each
//! commit and parsed on open, fine for the ~10⁵ files a workspace index is meant for.
//!
//! # Thread safety
//! [`WorkspaceIndex`] is `Send + Sync`: the writer sits behind a mutex (one mutation at a
//! time), searches run concurrently on the reader, reloaded explicitly after each commit
//! and before each search (`ReloadPolicy::Manual`: no file watcher thread).

#![warn(missing_docs)]

mod analysis;
mod fusion;
mod meta_stamp;
mod rerank;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tantivy::collector::TopDocs;
use tantivy::directory::error::LockError;
use tantivy::indexer::UserOperation;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{
    FAST, Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::snippet::SnippetGenerator;
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, TantivyError, Term};

pub use fusion::{drop_overlapping, rrf};
pub use rerank::Rerank;

/// A file the index holds, as given to [`WorkspaceIndex::upsert_file`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMeta {
    /// Workspace-relative, `/`-separated path: the identity of the file in the index.
    pub path: String,
    /// Modification time, milliseconds since the Unix epoch (as the caller read it).
    pub mtime_ms: u64,
    /// Size in bytes.
    pub size: u64,
    /// Hex sha256 of the file's bytes.
    pub hash: String,
}

/// A passage to index (the WIT `passage` record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passage {
    /// Heading path, e.g. `"Guide > Keys > Rotation"`.
    pub heading: String,
    /// The passage's text, as indexed and returned in hits.
    pub text: String,
    /// First source line, 1-based.
    pub line_start: u32,
    /// Last source line, 1-based and inclusive.
    pub line_end: u32,
}

/// A search result (the WIT `hit` record).
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Workspace-relative, `/`-separated path of the file the passage is from.
    pub path: String,
    /// The passage's heading path.
    pub heading: String,
    /// The passage's full text.
    pub text: String,
    /// First source line, 1-based.
    pub line_start: u32,
    /// Last source line, 1-based and inclusive.
    pub line_end: u32,
    /// Score from [`WorkspaceIndex::search`] (BM25 with heading matches boosted, plus the
    /// second stage's re-scoring, times the same-file factor of [`Rerank::same_file`]), or
    /// the fused score from [`rrf`]. Only comparable within one result list.
    pub score: f32,
    /// An excerpt of `text` around the matched terms, HTML-escaped (`<`, `>`, `&`, quotes)
    /// with the matches wrapped in `<b></b>`. When only the heading matched, the start of
    /// the text, escaped.
    pub snippet: String,
}

/// Counts after a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexStats {
    /// Files in the committed index.
    pub files: u64,
    /// Passages in the committed index, over all files.
    pub passages: u64,
}

/// Text analysis of the `heading` and `text` fields. Fixed when an index is created: an
/// index opened with another analyzer is refused with [`IndexError::SchemaMismatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Analyzer {
    /// Split on non-alphanumerics, drop tokens over 40 bytes, lowercase, drop English stop
    /// words (the Snowball list, question words included), stem (English). Best for prose
    /// questions over documentation.
    #[default]
    English,
    /// Split, drop long tokens, lowercase: exact words only (no stemming, no stop words).
    Simple,
}

impl Analyzer {
    fn tokenizer_name(self) -> &'static str {
        match self {
            // Versioned: changing an analyzer changes its name, so an index built with the
            // old one is a schema mismatch (rebuilt) rather than silently inconsistent.
            Analyzer::English => "capstan_en_v2",
            Analyzer::Simple => "capstan_simple_v2",
        }
    }
}

/// Options of [`WorkspaceIndex::open`].
#[derive(Debug, Clone, PartialEq)]
pub struct IndexOptions {
    /// The analyzer a new index is created with; must match an existing one's.
    pub analyzer: Analyzer,
    /// Total indexing memory of the writer, split between its threads; raised to tantivy's
    /// minimum of 15 MB per thread if lower.
    pub writer_memory_bytes: usize,
    /// Indexing threads (at least 1).
    pub writer_threads: usize,
    /// Extra weight of a match in the separate `heading` field, on top of the passage
    /// score. The heading already counts twice within the passage's BM25 document (see the
    /// crate docs), so the default is 0 (off): a separate heading score over-rewards short
    /// headings sharing one common word with the query (measured: nDCG@10 drops from 0.33 to
    /// 0.25 at 0.5 and 0.10 at 2 on the Python FAQ benchmark). Must be finite and >= 0.
    pub heading_boost: f32,
    /// The second ranking stage over BM25's best candidates (proximity and lead of the
    /// query terms, length re-normalisation, fewer passages of one file).
    /// [`Rerank::off`] searches by BM25 alone.
    pub rerank: Rerank,
    /// Maximum length of [`Hit::snippet`] before escaping, in characters.
    pub snippet_chars: usize,
    /// How long a change waits for another process to finish writing before giving up with
    /// [`IndexError::WriterBusy`].
    pub writer_wait: Duration,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            analyzer: Analyzer::English,
            writer_memory_bytes: 64 * 1024 * 1024,
            // Workspace indexing is bursty and small; two threads already outrun the
            // plugin's parsing, and the host has other work.
            writer_threads: 2,
            heading_boost: 0.0,
            rerank: Rerank::default(),
            snippet_chars: 200,
            // Long enough for another process's small refresh to commit, short enough
            // that a question is not kept waiting on a big one.
            writer_wait: Duration::from_secs(2),
        }
    }
}

/// Failures of the index. Query syntax is never one: see [`WorkspaceIndex::search`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// From tantivy: I/O, a lock held by another writer (another process indexing the same
    /// workspace), corrupt files.
    #[error("index: {0}")]
    Tantivy(#[from] TantivyError),
    /// The index directory could not be created or removed.
    #[error("index directory {path}: {source}")]
    Io {
        /// The directory.
        path: String,
        /// The filesystem's error.
        source: std::io::Error,
    },
    /// The directory holds an index with another schema (another analyzer, or an older
    /// Capstan). The index is a cache: [`WorkspaceIndex::open_or_rebuild`] recreates it.
    #[error("index schema mismatch: the directory holds a different index ({0})")]
    SchemaMismatch(String),
    /// A caller's argument was refused (an empty path, a passage whose lines run
    /// backwards), or the commit payload could not be encoded.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// Another process is writing this index (it holds the writer lock) and did not finish
    /// within [`IndexOptions::writer_wait`]. Nothing changed; the last commit is readable.
    #[error(
        "another Capstan process is updating this workspace's index (waited {:.1} s)",
        waited.as_secs_f64()
    )]
    WriterBusy {
        /// How long this call waited for the lock.
        waited: Duration,
    },
}

/// Results of this crate, failing with [`IndexError`].
pub type Result<T, E = IndexError> = std::result::Result<T, E>;

#[derive(Debug, Clone, Copy)]
struct Fields {
    path: Field,
    heading: Field,
    /// Stored only: what hits return.
    text: Field,
    /// Indexed only: heading + text, the passage as one BM25 document.
    body: Field,
    line_start: Field,
    line_end: Field,
    mtime_ms: Field,
    size: Field,
    hash: Field,
}

const PATH_FIELD: &str = "path";

fn schema(analyzer: Analyzer) -> (Schema, Fields) {
    let mut b = Schema::builder();
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(analyzer.tokenizer_name())
        // Positions: phrase queries and snippets.
        .set_index_option(IndexRecordOption::WithFreqsAndPositions);
    // The heading field only serves `heading:word` queries and the optional heading boost
    // (phrases go to `body`, which holds the heading too): no positions, cheaper indexing.
    let heading_opts = TextOptions::default().set_stored().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(analyzer.tokenizer_name())
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let body_opts = TextOptions::default().set_indexing_options(indexing);
    let fields = Fields {
        // Raw, untokenized: the term for delete-by-path.
        // Fast: the second ranking stage tells passages of one file apart without fetching
        // them (see `WorkspaceIndex::diversify`).
        path: b.add_text_field(PATH_FIELD, STRING | STORED | FAST),
        heading: b.add_text_field("heading", heading_opts),
        text: b.add_text_field("text", STORED),
        body: b.add_text_field("body", body_opts),
        line_start: b.add_u64_field("line_start", STORED),
        line_end: b.add_u64_field("line_end", STORED),
        mtime_ms: b.add_u64_field("mtime_ms", STORED),
        size: b.add_u64_field("size", STORED),
        // Stored only: nothing searches by hash.
        hash: b.add_text_field("hash", STORED),
    };
    (b.build(), fields)
}

/// English stop words: the Snowball list (which, unlike Lucene's short list, has the
/// question words "how", "why", "what", "do", "i" that fill natural-language questions and
/// would otherwise match every "How do I ...?" heading), plus the fragments the tokenizer
/// makes of contractions ("don't" → "don" + "t").
const ENGLISH_STOP_WORDS: &[&str] = &[
    "i",
    "me",
    "my",
    "myself",
    "we",
    "our",
    "ours",
    "ourselves",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "he",
    "him",
    "his",
    "himself",
    "she",
    "her",
    "hers",
    "herself",
    "it",
    "its",
    "itself",
    "they",
    "them",
    "their",
    "theirs",
    "themselves",
    "what",
    "which",
    "who",
    "whom",
    "this",
    "that",
    "these",
    "those",
    "am",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "have",
    "has",
    "had",
    "having",
    "do",
    "does",
    "did",
    "doing",
    "would",
    "should",
    "could",
    "ought",
    "cannot",
    "a",
    "an",
    "the",
    "and",
    "but",
    "if",
    "or",
    "because",
    "as",
    "until",
    "while",
    "of",
    "at",
    "by",
    "for",
    "with",
    "about",
    "against",
    "between",
    "into",
    "through",
    "during",
    "before",
    "after",
    "above",
    "below",
    "to",
    "from",
    "up",
    "down",
    "in",
    "out",
    "on",
    "off",
    "over",
    "under",
    "again",
    "further",
    "then",
    "once",
    "here",
    "there",
    "when",
    "where",
    "why",
    "how",
    "all",
    "any",
    "both",
    "each",
    "few",
    "more",
    "most",
    "other",
    "some",
    "such",
    "no",
    "nor",
    "not",
    "only",
    "own",
    "same",
    "so",
    "than",
    "too",
    "very",
    "s",
    "t",
    "d",
    "ll",
    "m",
    "re",
    "ve",
    "don",
    "doesn",
    "didn",
    "isn",
    "aren",
    "wasn",
    "weren",
    "hasn",
    "haven",
    "hadn",
    "wouldn",
    "shouldn",
    "couldn",
    "mustn",
    "shan",
];

fn english_analyzer() -> TextAnalyzer {
    english_analyzer_with(analysis::StopAndStem::english(ENGLISH_STOP_WORDS))
}

fn english_analyzer_with(stop_and_stem: analysis::StopAndStem) -> TextAnalyzer {
    TextAnalyzer::builder(analysis::MarkupTokenizer::default())
        .filter(stop_and_stem)
        .build()
}

/// Writes the indexed text of a passage into `s` (cleared first: one buffer serves a
/// batch): its text, then its own (last) heading, then its whole heading path, separated
/// by [`analysis::FIELD_SEP`]. So the passage's own title counts twice and its ancestors
/// (document and chapter titles, shared by many passages) once.
///
/// Why not a separate, boosted heading field (tantivy's multi-field query sums one BM25 per
/// field): a heading is a handful of tokens, so its own BM25 saturates on a single match
/// and any heading sharing a common query word ("How do I ...?") outranks the passage that
/// answers. Scoring heading and text as one document, with the heading's term frequency
/// doubled (BM25F-style, as SQLite FTS5 does with column weights), keeps the heading signal
/// without letting it dominate. Measured on the Python FAQ benchmark (benches/kb.rs):
/// nDCG@10 0.33 this way, 0.10 to 0.25 with a separate heading field boosted 0.5x to 2x.
///
/// Why the text comes first, and the separators: the tokenizer starts each part at a
/// multiple of [`analysis::PART_POSITIONS`], so a match's position says where it is (how
/// early in the text, or in which heading) for the second ranking stage (see `rerank`), and
/// no phrase spans two parts.
fn body_text(s: &mut String, heading: &str, text: &str) {
    let leaf = heading.rsplit(" > ").next().unwrap_or(heading);
    s.clear();
    s.push_str(text);
    s.push(analysis::FIELD_SEP);
    s.push_str(leaf);
    s.push(analysis::FIELD_SEP);
    s.push_str(heading);
}

fn simple_analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(analysis::MarkupTokenizer::default()).build()
}

/// tantivy refuses less than 15 MB of indexing memory per writer thread (its
/// `MEMORY_BUDGET_NUM_BYTES_MIN`, not exported).
const WRITER_MEMORY_PER_THREAD_MIN: usize = 15_000_000;

/// How often a change waiting for another process's writer tries again.
const WRITER_POLL: Duration = Duration::from_millis(50);

/// Version of the commit payload format.
const PAYLOAD_VERSION: u32 = 1;

/// The commit payload: the indexed files. Compact rows keep `meta.json` small.
#[derive(Serialize, Deserialize)]
struct Payload {
    v: u32,
    /// `(path, mtime_ms, size, hash)`
    files: Vec<(String, u64, u64, String)>,
}

fn encode_payload(files: &BTreeMap<String, FileMeta>) -> Result<String> {
    let p = Payload {
        v: PAYLOAD_VERSION,
        files: files
            .values()
            .map(|m| (m.path.clone(), m.mtime_ms, m.size, m.hash.clone()))
            .collect(),
    };
    serde_json::to_string(&p)
        .map_err(|e| IndexError::Invalid(format!("cannot encode the commit payload: {e}")))
}

fn decode_payload(s: &str) -> Result<BTreeMap<String, FileMeta>, String> {
    let p: Payload = serde_json::from_str(s).map_err(|e| e.to_string())?;
    if p.v != PAYLOAD_VERSION {
        return Err(format!(
            "payload version {} (expected {PAYLOAD_VERSION})",
            p.v
        ));
    }
    Ok(p.files
        .into_iter()
        .map(|(path, mtime_ms, size, hash)| {
            (
                path.clone(),
                FileMeta {
                    path,
                    mtime_ms,
                    size,
                    hash,
                },
            )
        })
        .collect())
}

/// The file list from the file metas stored on every passage (a full scan: only used when
/// the commit payload is missing).
fn files_from_docs(searcher: &tantivy::Searcher, f: Fields) -> Result<BTreeMap<String, FileMeta>> {
    let mut files = BTreeMap::new();
    for addr in searcher.search(
        &tantivy::query::AllQuery,
        &tantivy::collector::DocSetCollector,
    )? {
        let doc: TantivyDocument = searcher.doc(addr)?;
        let text = |field| {
            doc.get_first(field)
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        let num = |field| doc.get_first(field).and_then(|v| v.as_u64()).unwrap_or(0);
        let path = text(f.path);
        files.entry(path.clone()).or_insert_with(|| FileMeta {
            path,
            mtime_ms: num(f.mtime_ms),
            size: num(f.size),
            hash: text(f.hash),
        });
    }
    Ok(files)
}

struct WriterState {
    /// Held from the first change of a refresh until its commit: the writer owns the
    /// directory's lock, which other processes need to write.
    writer: Option<IndexWriter>,
    /// Committed files plus the changes since the last commit.
    files: BTreeMap<String, FileMeta>,
    /// The file list of the last commit, restored on a failed commit.
    committed: BTreeMap<String, FileMeta>,
}

/// One workspace's passage index. See the crate docs for the consistency model.
pub struct WorkspaceIndex {
    index: Index,
    fields: Fields,
    reader: IndexReader,
    parser: QueryParser,
    opts: IndexOptions,
    writer: Mutex<WriterState>,
    /// Skips re-reading an unchanged last commit.
    meta: meta_stamp::MetaStamps,
    /// The body's analyzer for snippets, its clones sharing one stem cache (see
    /// [`analysis::StopAndStem::shared`]).
    snippet_analyzer: TextAnalyzer,
}

impl std::fmt::Debug for WorkspaceIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkspaceIndex")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl WorkspaceIndex {
    /// Opens the index in `dir`, creating the directory and an empty index if missing.
    ///
    /// # Errors
    /// [`IndexError::SchemaMismatch`] if `dir` holds an index made with another analyzer or
    /// schema; [`IndexError::Tantivy`] if another writer (process) holds the directory's
    /// lock, or on I/O errors.
    pub fn open(dir: &Path, opts: IndexOptions) -> Result<Self> {
        if !(opts.heading_boost.is_finite() && opts.heading_boost >= 0.0) {
            return Err(IndexError::Invalid(format!(
                "heading_boost must be finite and not negative, got {}",
                opts.heading_boost
            )));
        }
        opts.rerank.check().map_err(IndexError::Invalid)?;
        std::fs::create_dir_all(dir).map_err(|source| IndexError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let (schema, fields) = schema(opts.analyzer);
        let meta = meta_stamp::MetaStamps::new(dir);
        let stamp = meta.now();
        let mmap = tantivy::directory::MmapDirectory::open(dir).map_err(TantivyError::from)?;
        let index = if Index::exists(&mmap).map_err(TantivyError::from)? {
            let index = Index::open(mmap)?;
            if index.schema() != schema {
                return Err(IndexError::SchemaMismatch(format!(
                    "expected the {:?} analyzer's schema",
                    opts.analyzer
                )));
            }
            index
        } else {
            Index::create(mmap, schema, tantivy::IndexSettings::default())?
        };
        index
            .tokenizers()
            .register(Analyzer::English.tokenizer_name(), english_analyzer());
        index
            .tokenizers()
            .register(Analyzer::Simple.tokenizer_name(), simple_analyzer());

        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let payload = index.load_metas()?.payload;
        let committed = match payload.as_deref().map(decode_payload) {
            Some(Ok(files)) => files,
            // No (or an unreadable) file list, e.g. written by another version: rebuild it
            // from the stored passages. Files without passages are missing from it and get
            // re-parsed by the next refresh, which is harmless.
            _ => files_from_docs(&reader.searcher(), fields)?,
        };
        meta.reader_read(stamp);
        meta.files_read(stamp);
        // Without a heading boost the heading field is not searched by default (its words
        // are in `body` already); `heading:word` still targets it explicitly.
        let parser = if opts.heading_boost > 0.0 {
            let mut p = QueryParser::for_index(&index, vec![fields.heading, fields.body]);
            p.set_field_boost(fields.heading, opts.heading_boost);
            p
        } else {
            QueryParser::for_index(&index, vec![fields.body])
        };
        // `opts.analyzer` is the body's: another would have been a schema mismatch.
        let snippet_analyzer = match opts.analyzer {
            Analyzer::English => {
                english_analyzer_with(analysis::StopAndStem::english(ENGLISH_STOP_WORDS).shared())
            }
            Analyzer::Simple => simple_analyzer(),
        };
        Ok(Self {
            index,
            fields,
            reader,
            parser,
            opts,
            writer: Mutex::new(WriterState {
                writer: None,
                files: committed.clone(),
                committed,
            }),
            meta,
            snippet_analyzer,
        })
    }

    /// [`open`](Self::open), but an index with another schema is deleted and recreated
    /// (the index is derived data: the next refresh re-indexes the workspace).
    ///
    /// Only use on a directory dedicated to this index: on a schema mismatch, the whole
    /// directory is removed.
    pub fn open_or_rebuild(dir: &Path, opts: IndexOptions) -> Result<Self> {
        match Self::open(dir, opts.clone()) {
            Err(IndexError::SchemaMismatch(_)) => {
                std::fs::remove_dir_all(dir).map_err(|source| IndexError::Io {
                    path: dir.display().to_string(),
                    source,
                })?;
                Self::open(dir, opts)
            }
            other => other,
        }
    }

    fn lock(&self) -> MutexGuard<'_, WriterState> {
        // A panic while holding the lock leaves tantivy's writer usable (its own state is
        // behind its own locks); recover rather than poison every later call.
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The files the index holds, including uncommitted changes, sorted by path.
    ///
    /// # Errors
    /// I/O or corruption reading the last commit (re-read when nothing is pending, so a
    /// commit by another process is seen).
    pub fn known_files(&self) -> Result<Vec<FileMeta>> {
        let mut st = self.lock();
        if st.writer.is_none() {
            self.sync_committed(&mut st)?;
        }
        Ok(st.files.values().cloned().collect())
    }

    /// Re-reads the last commit's file list from disk (another process may have committed).
    fn sync_committed(&self, st: &mut WriterState) -> Result<()> {
        let stamp = self.meta.now();
        if self.meta.files_current(stamp) && self.meta.reader_current(stamp) {
            return Ok(());
        }
        self.reader.reload()?;
        self.meta.reader_read(stamp);
        let committed = match self
            .index
            .load_metas()?
            .payload
            .as_deref()
            .map(decode_payload)
        {
            Some(Ok(files)) => files,
            _ => files_from_docs(&self.reader.searcher(), self.fields)?,
        };
        st.files = committed.clone();
        st.committed = committed;
        self.meta.files_read(stamp);
        Ok(())
    }

    /// The writer, taken now if this process does not hold it yet (waiting up to
    /// [`IndexOptions::writer_wait`] for another process to let go of it).
    fn writer<'a>(&self, st: &'a mut WriterState) -> Result<&'a mut IndexWriter> {
        if st.writer.is_none() {
            let threads = self.opts.writer_threads.max(1);
            let memory = self
                .opts
                .writer_memory_bytes
                .max(threads * WRITER_MEMORY_PER_THREAD_MIN);
            let started = Instant::now();
            let writer = loop {
                match self.index.writer_with_num_threads(threads, memory) {
                    Ok(w) => break w,
                    Err(TantivyError::LockFailure(LockError::LockBusy, _)) => {
                        if started.elapsed() >= self.opts.writer_wait {
                            return Err(IndexError::WriterBusy {
                                waited: started.elapsed(),
                            });
                        }
                        std::thread::sleep(WRITER_POLL);
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            // The previous holder may have committed: start from its commit.
            self.sync_committed(st)?;
            st.writer = Some(writer);
        }
        match st.writer.as_mut() {
            Some(w) => Ok(w),
            None => unreachable!("the writer was just set"),
        }
    }

    /// Replaces everything indexed for `meta.path` with `passages` (none is fine: the file
    /// is then known, with no passages). Visible after [`commit`](Self::commit).
    ///
    /// # Errors
    /// As [`upsert_files`](Self::upsert_files).
    pub fn upsert_file(&self, meta: FileMeta, passages: &[Passage]) -> Result<()> {
        self.upsert_files(&[(meta, passages.to_vec())])
    }

    /// [`upsert_file`](Self::upsert_file) for many files at once: one batch to tantivy's
    /// indexing threads instead of one hand-off (and thread wake-up) per passage, which
    /// was a tenth of the CPU time indexing linux-doc's small files.
    ///
    /// # Errors
    /// [`IndexError::Invalid`] for an empty path or a passage with `line_start >
    /// line_end` (checked for every file before anything changes: a bad entry rejects the
    /// batch); [`IndexError::Tantivy`] if the writer failed (e.g. a worker died).
    pub fn upsert_files(&self, files: &[(FileMeta, Vec<Passage>)]) -> Result<()> {
        for (meta, passages) in files {
            if meta.path.is_empty() {
                return Err(IndexError::Invalid("empty path".into()));
            }
            if let Some(p) = passages.iter().find(|p| p.line_start > p.line_end) {
                return Err(IndexError::Invalid(format!(
                    "{}: passage lines {}-{} are reversed",
                    meta.path, p.line_start, p.line_end
                )));
            }
        }
        let f = self.fields;
        let mut ops = Vec::with_capacity(files.iter().map(|(_, p)| p.len() + 1).sum());
        let mut body = String::new();
        for (meta, passages) in files {
            ops.push(UserOperation::Delete(Term::from_field_text(
                f.path, &meta.path,
            )));
            for p in passages {
                body_text(&mut body, &p.heading, &p.text);
                // Room for every value (the text twice, the heading three times): no
                // re-allocation as the document grows.
                let mut doc = TantivyDocument::with_capacity(
                    body.len() + p.text.len() + p.heading.len() + meta.path.len() + 128,
                );
                doc.add_text(f.path, &meta.path);
                doc.add_text(f.heading, &p.heading);
                doc.add_text(f.text, &p.text);
                doc.add_text(f.body, &body);
                doc.add_u64(f.line_start, u64::from(p.line_start));
                doc.add_u64(f.line_end, u64::from(p.line_end));
                doc.add_u64(f.mtime_ms, meta.mtime_ms);
                doc.add_u64(f.size, meta.size);
                doc.add_text(f.hash, &meta.hash);
                ops.push(UserOperation::Add(doc));
            }
        }
        let mut st = self.lock();
        self.writer(&mut st)?.run(ops)?;
        for (meta, _) in files {
            st.files.insert(meta.path.clone(), meta.clone());
        }
        Ok(())
    }

    /// Removes `path` and its passages (a no-op for an unknown path). Visible after
    /// [`commit`](Self::commit). A rename is `remove_file(old)` + `upsert_file(new, ..)`.
    ///
    /// # Errors
    /// [`IndexError::WriterBusy`] if another process is writing the index.
    pub fn remove_file(&self, path: &str) -> Result<()> {
        let mut st = self.lock();
        self.writer(&mut st)?
            .delete_term(Term::from_field_text(self.fields.path, path));
        st.files.remove(path);
        Ok(())
    }

    /// Makes all changes since the last commit visible to searches, atomically, and
    /// durably (fsync'd by tantivy).
    ///
    /// # Errors
    /// On failure nothing of the pending changes is kept (the writer rolls back to the last
    /// commit) and the error is returned; the previous commit stays readable.
    ///
    /// The writer is given back afterwards (after its merges finish), so other processes
    /// can write. With no change pending this is a no-op that reports the current counts.
    pub fn commit(&self) -> Result<IndexStats> {
        let mut st = self.lock();
        let Some(mut writer) = st.writer.take() else {
            self.sync_committed(&mut st)?;
            return Ok(IndexStats {
                files: st.files.len() as u64,
                passages: self.reader.searcher().num_docs(),
            });
        };
        let payload = encode_payload(&st.files)?;
        let result = (|| -> Result<()> {
            let mut prepared = writer.prepare_commit()?;
            prepared.set_payload(&payload);
            prepared.commit()?;
            Ok(())
        })();
        if let Err(e) = result {
            // Drop the uncommitted operations (and the writer, so its lock) so the
            // in-memory file list and the index agree again.
            let _ = writer.rollback();
            drop(writer);
            st.files = st.committed.clone();
            return Err(e);
        }
        st.committed = st.files.clone();
        // Let the merges the commit started finish, then release the lock.
        writer.wait_merging_threads()?;
        let stamp = self.meta.now();
        self.reader.reload()?;
        self.meta.reader_read(stamp);
        Ok(IndexStats {
            files: st.files.len() as u64,
            passages: self.reader.searcher().num_docs(),
        })
    }

    /// Counts as of the last commit.
    pub fn stats(&self) -> IndexStats {
        IndexStats {
            files: self.lock().committed.len() as u64,
            passages: self.reader.searcher().num_docs(),
        }
    }

    /// The `limit` best passages for `query`, best first, with snippets. Sees the last
    /// commit only. Ranking: BM25 over text and headings as one document (the passage's own
    /// heading counting twice; see [`IndexOptions::heading_boost`]), then BM25's best
    /// [`Rerank::depth`] re-scored for query terms close together and early in the passage,
    /// with BM25's length normalisation set to [`Rerank::length_norm`], and each passage's
    /// score lowered by [`Rerank::same_file`] per better passage of its file (see
    /// [`IndexOptions::rerank`]).
    ///
    /// `query` uses tantivy's syntax (`"a phrase"`, `+must`, `-not`, `a AND b`, `heading:x`;
    /// default conjunction OR)
    /// but syntax errors are never errors: a query that does not parse cleanly is run as
    /// its plain terms (OR), so `"unterminated`, `AND OR` or `std::fs::read` all search.
    /// An empty (or all-stop-word) query gives no hits.
    ///
    /// # Errors
    /// Only I/O or corruption reading the index.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<Hit>> {
        if limit == 0 || query.trim().is_empty() {
            return Ok(Vec::new());
        }
        let q = self.build_query(query);
        // Another process may have committed since the last look.
        let stamp = self.meta.now();
        if !self.meta.reader_current(stamp) {
            self.reader.reload()?;
            self.meta.reader_read(stamp);
        }
        let searcher = self.reader.searcher();
        let rerank = &self.opts.rerank;
        let top = searcher.search(
            &*q,
            &TopDocs::with_limit(rerank.candidates(limit)).order_by_score(),
        )?;
        if top.is_empty() {
            return Ok(Vec::new());
        }
        let mut terms: Vec<Term> = Vec::new();
        q.query_terms(&mut |t, _| {
            if t.field() == self.fields.body {
                terms.push(t.clone());
            }
        });
        let top = rerank.apply(&searcher, self.fields.body, &terms, top)?;
        let top = self.diversify(&searcher, top, limit)?;
        // What `SnippetGenerator::create` does, with the analyzer whose clones share a
        // stem cache: each matched term, scored by its rarity.
        let mut terms_text = BTreeMap::new();
        for t in &terms {
            if let Some(word) = t.value().as_str() {
                let df = searcher.doc_freq(t)?;
                if df > 0 {
                    terms_text.insert(word.to_owned(), 1.0 / (1.0 + df as f32));
                }
            }
        }
        let snippets = SnippetGenerator::new(
            terms_text,
            self.snippet_analyzer.clone(),
            self.fields.body,
            self.opts.snippet_chars,
        );
        let f = self.fields;
        let mut hits = Vec::with_capacity(top.len());
        for (score, doc) in top {
            let text_of = |field| {
                doc.get_first(field)
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            };
            let u32_of = |field| {
                doc.get_first(field)
                    .and_then(|v| v.as_u64())
                    .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
            };
            let text = text_of(f.text);
            let snippet = snippets.snippet(&text);
            let snippet = if snippet.fragment().trim().is_empty() {
                escape_html(&prefix_chars(&text, self.opts.snippet_chars))
            } else {
                snippet.to_html()
            };
            hits.push(Hit {
                path: text_of(f.path),
                heading: text_of(f.heading),
                line_start: u32_of(f.line_start),
                line_end: u32_of(f.line_end),
                text,
                score,
                snippet,
            });
        }
        Ok(hits)
    }

    /// The `limit` best of `top` (best first) with their stored documents, each passage's
    /// score multiplied by [`Rerank::same_file`] once per better passage of its file already
    /// taken. Greedy: the best remaining candidate is taken if its factor is up to date,
    /// else re-scored and put back; a factor only lowers a score, so a candidate whose
    /// score is up to date and still the best is truly the best. A passage's file is the
    /// term ordinal of its `path` fast field within its segment (tantivy indexes each
    /// `upsert_files` batch into one segment, and merges keep a file's passages together),
    /// so only the returned documents are fetched.
    fn diversify(
        &self,
        searcher: &tantivy::Searcher,
        top: Vec<(f32, tantivy::DocAddress)>,
        limit: usize,
    ) -> Result<Vec<(f32, TantivyDocument)>> {
        let rerank = &self.opts.rerank;
        let mut chosen = top;
        if rerank.same_file_factor(1).is_some() && chosen.len() > 1 {
            // (segment, term ordinal of the path); None (no fast field) is a file of its own.
            let mut columns = BTreeMap::new();
            let mut file = Vec::with_capacity(chosen.len());
            for (_, addr) in &chosen {
                let column = match columns.entry(addr.segment_ord) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => e.insert(
                        searcher
                            .segment_reader(addr.segment_ord)
                            .fast_fields()
                            .str(PATH_FIELD)?,
                    ),
                };
                let ord = column
                    .as_ref()
                    .and_then(|c| c.term_ords(addr.doc_id).next());
                file.push(ord.map(|o| (addr.segment_ord, o)));
            }
            let base: Vec<f32> = chosen.iter().map(|(s, _)| *s).collect();
            let mut score = base.clone();
            // How many passages of its file each candidate's score accounts for.
            let mut counted = vec![0u32; chosen.len()];
            let mut taken = vec![false; chosen.len()];
            let mut per_file: BTreeMap<(u32, u64), u32> = BTreeMap::new();
            let mut order = Vec::with_capacity(limit.min(chosen.len()));
            while order.len() < limit {
                // Ties keep the earlier (better ranked) candidate.
                let Some(i) = (0..chosen.len())
                    .filter(|&i| !taken[i])
                    .reduce(|a, b| if score[b] > score[a] { b } else { a })
                else {
                    break;
                };
                let better = file[i].map_or(0, |f| per_file.get(&f).copied().unwrap_or(0));
                if better == counted[i] {
                    if let Some(f) = file[i] {
                        *per_file.entry(f).or_default() += 1;
                    }
                    taken[i] = true;
                    order.push(i);
                } else {
                    counted[i] = better;
                    score[i] = base[i] * rerank.same_file_factor(better).unwrap_or(1.0);
                }
            }
            chosen = order.into_iter().map(|i| (score[i], chosen[i].1)).collect();
        }
        chosen.truncate(limit);
        chosen
            .into_iter()
            .map(|(score, addr)| Ok((score, searcher.doc(addr)?)))
            .collect()
    }

    /// Like [`search`](Self::search), but hits whose lines overlap a better hit of the same
    /// file (neighbouring chunks sharing their overlap) are dropped, so up to `limit`
    /// distinct places come back. Searches a few more than `limit` to fill the gaps.
    pub fn search_distinct(&self, query: &str, limit: usize) -> Result<Vec<Hit>> {
        let mut hits = drop_overlapping(self.search(query, limit.saturating_mul(2) + 5)?);
        hits.truncate(limit);
        Ok(hits)
    }

    /// The parsed query, or its plain terms when the syntax has errors.
    fn build_query(&self, query: &str) -> Box<dyn Query> {
        let (parsed, errors) = self.parser.parse_query_lenient(query);
        if errors.is_empty() {
            return parsed;
        }
        self.plain_terms_query(query)
    }

    /// OR of the query's analyzed tokens over the body (and the heading, if boosted).
    fn plain_terms_query(&self, query: &str) -> Box<dyn Query> {
        let f = self.fields;
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        let mut analyzer = match self.index.tokenizer_for_field(f.body) {
            Ok(a) => a,
            Err(_) => simple_analyzer(),
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut stream = analyzer.token_stream(query);
        while let Some(token) = stream.next() {
            if !seen.insert(token.text.clone()) {
                continue;
            }
            if self.opts.heading_boost > 0.0 {
                let heading = TermQuery::new(
                    Term::from_field_text(f.heading, &token.text),
                    IndexRecordOption::WithFreqs,
                );
                clauses.push((
                    Occur::Should,
                    Box::new(BoostQuery::new(Box::new(heading), self.opts.heading_boost)),
                ));
            }
            clauses.push((
                Occur::Should,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.body, &token.text),
                    IndexRecordOption::WithFreqs,
                )),
            ));
        }
        Box::new(BooleanQuery::new(clauses))
    }
}

fn prefix_chars(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
