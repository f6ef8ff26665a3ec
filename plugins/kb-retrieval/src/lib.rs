//! `local_kb_retrieval`: the workspace's knowledge base.
//!
//! Untrusted files are parsed here, inside the sandbox (workspace mounted
//! read-only); the host's tantivy index receives only normalised passages through
//! the `index` import. A search first refreshes the index incrementally, so a
//! question never needs a separate `capstan index`; the host passes
//! `refresh: false` when its own walk (the same [`capstan_kb_parse::walk`])
//! shows nothing changed since the index was written.

mod walk;

use std::collections::HashMap;

use capstan_plugin::host::events::{Activity, emit};
use capstan_plugin::host::index;
use capstan_plugin::{
    CapabilityInfo, JsonSchema, Plugin, Risk, Task, TaskError, TaskOutput, op, progress,
};
use serde::Deserialize;
use serde_json::json;

struct KbRetrieval;

/// Input of `search`.
#[derive(Deserialize, JsonSchema)]
struct SearchInput {
    /// What to look for
    query: String,
    /// Rephrasings, fused with the query by reciprocal-rank fusion
    #[serde(default)]
    variants: Vec<String>,
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 50))]
    limit: u32,
    /// Bring the index up to date first
    #[serde(default = "yes")]
    refresh: bool,
}

fn default_limit() -> u32 {
    6
}
fn yes() -> bool {
    true
}

/// Input of `index`.
#[derive(Deserialize, JsonSchema, Default)]
struct IndexInput {
    #[schemars(range(min = 200))]
    target_chars: Option<usize>,
    overlap_chars: Option<usize>,
    #[schemars(range(min = 1024))]
    max_file_bytes: Option<u64>,
}

impl Plugin for KbRetrieval {
    fn describe() -> CapabilityInfo {
        CapabilityInfo {
            kinds: vec!["local_kb_retrieval".into()],
            operations: vec![
                op::<SearchInput>(
                    "search",
                    "Search the workspace's documents; returns ranked, cited passages and whether they suffice.",
                    Risk::ReadOnly,
                ),
                op::<IndexInput>(
                    "index",
                    "Bring the workspace index up to date (only new, changed and deleted files).",
                    Risk::ReadOnly,
                ),
            ],
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        match task.operation.as_str() {
            "search" => {
                let input: SearchInput = serde_json::from_str(&task.input)
                    .map_err(|e| TaskError::InvalidInput(format!("search input: {e}")))?;
                search(input)
            }
            "index" => {
                let input: IndexInput = serde_json::from_str(&task.input)
                    .map_err(|e| TaskError::InvalidInput(format!("index input: {e}")))?;
                let opts = chunk_options(&input);
                let report = walk::refresh(&opts, walk::Mode::Required)?;
                Ok(TaskOutput {
                    summary: report.summary(),
                    data: Some(report.to_json().to_string()),
                })
            }
            other => Err(TaskError::NotImplemented(format!(
                "operation `{other}`; local_kb_retrieval offers search and index"
            ))),
        }
    }
}

fn chunk_options(input: &IndexInput) -> capstan_kb_parse::ChunkOptions {
    let mut opts = capstan_kb_parse::ChunkOptions::default();
    if let Some(v) = input.target_chars {
        opts.target_chars = v;
    }
    if let Some(v) = input.overlap_chars {
        opts.overlap_chars = v;
    }
    if let Some(v) = input.max_file_bytes {
        opts.max_file_bytes = v;
    }
    opts
}

/// Reciprocal-rank fusion constant: 60 is the value from Cormack et al. that
/// most systems use; it damps the head of each list without flattening it.
const RRF_K: f32 = 60.0;

fn search(input: SearchInput) -> Result<TaskOutput, TaskError> {
    if input.query.trim().is_empty() {
        return Err(TaskError::InvalidInput("`query` is empty".into()));
    }
    let refreshed = if input.refresh {
        Some(walk::refresh(&Default::default(), walk::Mode::BestEffort)?)
    } else {
        None
    };
    let limit = input.limit.clamp(1, 50);
    let mut queries = vec![input.query.clone()];
    for v in &input.variants {
        if !v.trim().is_empty() && !queries.contains(v) {
            queries.push(v.clone());
        }
    }
    // Fuse by (path, lines); keep the best-ranked copy of each passage.
    let mut fused: HashMap<(String, u32, u32), (f32, index::Hit)> = HashMap::new();
    for q in &queries {
        let hits = index::search(q, limit * 2)
            .map_err(|e| TaskError::Failed(format!("index search: {}", e.message())))?;
        for (rank, hit) in hits.into_iter().enumerate() {
            let key = (hit.path.clone(), hit.line_start, hit.line_end);
            let entry = fused.entry(key).or_insert((0.0, hit));
            entry.0 += 1.0 / (RRF_K + rank as f32 + 1.0);
        }
    }
    let mut ranked: Vec<(f32, index::Hit)> = fused.into_values().collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.path.cmp(&b.1.path)));
    // Drop passages that overlap a better one in the same file (chunk overlap).
    let mut kept: Vec<(f32, index::Hit)> = Vec::new();
    for (score, hit) in ranked {
        let overlaps = kept.iter().any(|(_, k)| {
            k.path == hit.path && k.line_start <= hit.line_end && hit.line_start <= k.line_end
        });
        if !overlaps {
            kept.push((score, hit));
        }
        if kept.len() as u32 >= limit {
            break;
        }
    }
    let keywords = keywords(&input.query);
    let coverage = kept.first().map(|(_, h)| {
        let words = keywords_of(&format!("{} {}", h.heading, h.text));
        let found = keywords.iter().filter(|k| words.contains(k)).count();
        if keywords.is_empty() {
            1.0
        } else {
            found as f32 / keywords.len() as f32
        }
    });
    // Sufficient when the best passage holds most of what was asked about.
    let sufficient = coverage.is_some_and(|c| c >= 0.6);
    let passages: Vec<serde_json::Value> = kept
        .iter()
        .map(|(score, h)| {
            json!({
                "path": h.path, "heading": h.heading, "line_start": h.line_start, "line_end": h.line_end,
                "score": score, "bm25": h.score, "snippet": h.snippet, "text": h.text,
            })
        })
        .collect();
    emit(&Activity {
        kind: "kb.searched".into(),
        message: format!(
            "searched the knowledge base for \"{}\": {} passages",
            input.query,
            passages.len()
        ),
        data: None,
    });
    let summary = format!(
        "{} passages for \"{}\"{}",
        passages.len(),
        input.query,
        if sufficient { "" } else { " (insufficient)" }
    );
    let data = json!({
        "passages": passages,
        "sufficient": sufficient,
        "coverage": coverage.unwrap_or(0.0),
        "queries": queries,
        "index": refreshed.map(|r| r.to_json()),
    });
    Ok(TaskOutput {
        summary,
        data: Some(data.to_string()),
    })
}

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "in", "is", "it", "me", "my", "of", "on", "or", "our", "should", "so", "that", "the",
    "this", "to", "we", "what", "when", "where", "which", "who", "why", "will", "with", "you",
    "your", "not",
];

fn stem(w: &str) -> String {
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(base) = w.strip_suffix(suffix)
            && base.len() >= 3
        {
            return base.to_string();
        }
    }
    w.to_string()
}

fn keywords_of(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .map(|w| w.to_lowercase())
        .filter(|w| w.len() > 1 && !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

fn keywords(text: &str) -> Vec<String> {
    let mut out = keywords_of(text);
    out.retain(|w| w != "or" && w != "and");
    out.dedup();
    let mut seen = Vec::new();
    out.retain(|w| {
        let new = !seen.contains(w);
        seen.push(w.clone());
        new
    });
    out
}

/// Report progress (files, and bytes for rate and ETA) without flooding the event stream.
fn report_progress(done: u64, total: u64, done_bytes: u64, total_bytes: u64) {
    if done == total || done.is_multiple_of(50) {
        progress(done, total, "files");
        progress(done_bytes, total_bytes, "bytes");
    }
}

capstan_plugin::export!(KbRetrieval);
