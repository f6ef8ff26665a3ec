//! `local_kb_retrieval`: the workspace's knowledge base.
//!
//! Untrusted files are parsed here, inside the sandbox (workspace mounted
//! read-only); the host's tantivy index receives only normalised passages through
//! the `index` import. A search first refreshes the index incrementally, so a
//! question never needs a separate `capstan index`; the host passes
//! `refresh: false` when its own walk (the same [`capstan_kb_parse::walk`])
//! shows nothing changed since the index was written.

mod walk;

use capstan_kb_parse::rank;
use capstan_plugin::host::events::{Activity, emit};
use capstan_plugin::host::index;
use capstan_plugin::{
    CapabilityInfo, JsonSchema, Plugin, Risk, Task, TaskError, TaskOutput, op, progress,
};
use serde::Deserialize;

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

fn search(input: SearchInput) -> Result<TaskOutput, TaskError> {
    if input.query.trim().is_empty() {
        return Err(TaskError::InvalidInput("`query` is empty".into()));
    }
    let refreshed = if input.refresh {
        Some(walk::refresh(&Default::default(), walk::Mode::BestEffort)?)
    } else {
        None
    };
    // Fusion, overlap and coverage: shared with the host's `capstan search`,
    // which answers the same way when there is nothing to refresh.
    let answer = rank::answer(
        &input.query,
        &input.variants,
        input.limit,
        refreshed.map(|r| r.to_json()),
        |q, n| {
            let hits = index::search(q, n)
                .map_err(|e| TaskError::Failed(format!("index search: {}", e.message())))?;
            Ok(hits
                .into_iter()
                .map(|h| rank::Hit {
                    path: h.path,
                    heading: h.heading,
                    text: h.text,
                    line_start: h.line_start,
                    line_end: h.line_end,
                    score: h.score,
                    snippet: h.snippet,
                })
                .collect())
        },
    )?;
    emit(&Activity {
        kind: "kb.searched".into(),
        message: rank::searched_message(&input.query, answer.passages),
        data: None,
    });
    Ok(TaskOutput {
        summary: answer.summary,
        data: Some(answer.data.to_string()),
    })
}

/// Report progress (files, and bytes for rate and ETA) without flooding the event stream.
fn report_progress(done: u64, total: u64, done_bytes: u64, total_bytes: u64) {
    if done == total || done.is_multiple_of(50) {
        progress(done, total, "files");
        progress(done_bytes, total_bytes, "bytes");
    }
}

capstan_plugin::export!(KbRetrieval);
