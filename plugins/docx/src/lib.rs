//! `docx`: Word documents in the workspace.
//!
//! Operations: `read` and `info` (read-only), `create`, `replace` and `append` (write).
//! The parsing and editing live in `capstan-docx`; this crate checks paths, reads and
//! writes files (atomically: a hidden temporary file renamed over the target) and
//! reports what it did.

use std::path::Path;

use capstan_plugin::{
    CapabilityInfo, JsonSchema, Plugin, Risk, Task, TaskError, TaskOutput, activity, files, op,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

struct Docx;

/// Characters of text a `read` returns unless asked otherwise.
const DEFAULT_MAX_CHARS: usize = 1_000_000;

/// Input of `read`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadInput {
    /// The .docx file, relative to the workspace root
    path: String,
    #[serde(default)]
    format: Format,
    /// Cut the returned text at this many characters
    #[schemars(range(min = 1), extend("default" = 1_000_000))]
    max_chars: Option<usize>,
}

#[derive(Deserialize, Serialize, JsonSchema, Default, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Format {
    #[default]
    Markdown,
    Text,
}

/// Input of `info`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PathInput {
    /// The .docx file, relative to the workspace root
    path: String,
}

/// Input of `create`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateInput {
    /// The .docx file to write, relative to the workspace root
    path: String,
    /// Content: # headings, paragraphs, **bold**, *italic*, - and 1. lists, pipe tables, > quotes, code blocks
    markdown: String,
    /// Document title (default: the first heading)
    title: Option<String>,
    #[serde(default)]
    overwrite: bool,
}

/// Input of `replace`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReplaceInput {
    /// The .docx file, relative to the workspace root
    path: String,
    /// Exact text to find (case-sensitive), also where Word split it across formatting runs
    #[schemars(length(min = 1))]
    find: String,
    /// Replacement text; it takes the formatting of the run where each match starts
    replace: String,
}

/// Input of `append`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AppendInput {
    /// The .docx file, relative to the workspace root
    path: String,
    /// Content to add at the end: # headings, paragraphs, **bold**, *italic*, lists, pipe tables
    markdown: String,
}

impl Plugin for Docx {
    fn describe() -> CapabilityInfo {
        CapabilityInfo {
            kinds: vec!["docx".into()],
            operations: vec![
                op::<ReadInput>(
                    "read",
                    "Read a .docx as Markdown (headings, lists, tables, bold, italic) or plain text.",
                    Risk::ReadOnly,
                ),
                op::<PathInput>(
                    "info",
                    "Title, headings and counts (paragraphs, tables, words) of a .docx.",
                    Risk::ReadOnly,
                ),
                op::<CreateInput>(
                    "create",
                    "Create a .docx from Markdown (refuses to replace an existing file unless overwrite is true).",
                    Risk::Write,
                ),
                op::<ReplaceInput>(
                    "replace",
                    "Find and replace text in a .docx, keeping its formatting and everything else in the file.",
                    Risk::Write,
                ),
                op::<AppendInput>(
                    "append",
                    "Append Markdown content (paragraphs, headings, lists, tables) to the end of a .docx.",
                    Risk::Write,
                ),
            ],
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        match task.operation.as_str() {
            "read" => read(task.input()?),
            "info" => info(task.input()?),
            "create" => create(task.input()?),
            "replace" => replace(task.input()?),
            "append" => append(task.input()?),
            other => Err(TaskError::NotImplemented(format!(
                "operation `{other}`; docx offers read, info, create, replace and append"
            ))),
        }
    }
}

/// A library error about the file's content, with the file named.
fn file_error(path: &Path, e: capstan_docx::Error) -> TaskError {
    match e {
        capstan_docx::Error::InvalidInput(m) => TaskError::InvalidInput(m),
        other => TaskError::Failed(format!("{}: {other}", path.display())),
    }
}

fn info_json(info: &capstan_docx::Info) -> Value {
    json!({
        "title": info.title,
        "paragraphs": info.paragraphs,
        "tables": info.tables,
        "words": info.words,
        "headings": info.headings.iter().map(|h| json!({"level": h.level, "text": h.text})).collect::<Vec<_>>(),
    })
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn counts(info: &capstan_docx::Info) -> String {
    let mut s = plural(info.paragraphs, "paragraph", "paragraphs");
    if info.tables > 0 {
        s.push_str(&format!(", {}", plural(info.tables, "table", "tables")));
    }
    s
}

fn read(input: ReadInput) -> Result<TaskOutput, TaskError> {
    let path = files::workspace_path(&input.path)?;
    let bytes = files::read(&path)?;
    let doc = capstan_docx::read(&bytes).map_err(|e| file_error(&path, e))?;
    let info = capstan_docx::document_info(&doc);
    let text = match input.format {
        Format::Markdown => doc.to_markdown(),
        Format::Text => doc.to_text(),
    };
    let (text, truncated) =
        files::truncate(text, input.max_chars.unwrap_or(DEFAULT_MAX_CHARS).max(1));
    let message = format!("read {}: {}", path.display(), counts(&info));
    activity("docx.read", &message);
    let key = match input.format {
        Format::Markdown => "markdown",
        Format::Text => "text",
    };
    let mut data = json!({
        "path": path.display().to_string(),
        "format": key,
        "truncated": truncated,
        "info": info_json(&info),
    });
    data[key] = Value::String(text);
    Ok(TaskOutput {
        summary: if truncated {
            format!("{message} (truncated)")
        } else {
            message
        },
        data: Some(data.to_string()),
    })
}

fn info(input: PathInput) -> Result<TaskOutput, TaskError> {
    let path = files::workspace_path(&input.path)?;
    let bytes = files::read(&path)?;
    let info = capstan_docx::info(&bytes).map_err(|e| file_error(&path, e))?;
    let message = format!(
        "{}: {}, {}, {}",
        path.display(),
        counts(&info),
        plural(info.headings.len(), "heading", "headings"),
        plural(info.words, "word", "words")
    );
    activity("docx.info", &message);
    let mut data = info_json(&info);
    data["path"] = Value::String(path.display().to_string());
    Ok(TaskOutput {
        summary: message,
        data: Some(data.to_string()),
    })
}

fn create(input: CreateInput) -> Result<TaskOutput, TaskError> {
    let path = files::workspace_path(&input.path)?;
    files::require_extension(&path, "docx")?;
    let bytes =
        capstan_docx::create_from_markdown_with_title(&input.markdown, input.title.as_deref())
            .map_err(|e| file_error(&path, e))?;
    let info = capstan_docx::info(&bytes).map_err(|e| file_error(&path, e))?;
    files::write_atomic(&path, &bytes, input.overwrite)?;
    let message = format!("created {}: {}", path.display(), counts(&info));
    activity("docx.created", &message);
    Ok(TaskOutput {
        summary: message,
        data: Some(json!({"path": path.display().to_string(), "bytes": bytes.len(), "info": info_json(&info)}).to_string()),
    })
}

fn replace(input: ReplaceInput) -> Result<TaskOutput, TaskError> {
    let path = files::workspace_path(&input.path)?;
    if input.find.is_empty() {
        return Err(TaskError::InvalidInput("`find` is empty".into()));
    }
    let bytes = files::read(&path)?;
    let (out, count) = capstan_docx::replace(&bytes, &input.find, &input.replace)
        .map_err(|e| file_error(&path, e))?;
    if count > 0 {
        files::write_atomic(&path, &out, true)?;
    }
    let message = format!(
        "replaced {} of \"{}\" in {}",
        plural(count, "occurrence", "occurrences"),
        input.find,
        path.display()
    );
    activity("docx.replaced", &message);
    Ok(TaskOutput {
        summary: message,
        data:
            Some(json!({"path": path.display().to_string(), "replacements": count, "changed": count > 0})
                .to_string()),
    })
}

fn append(input: AppendInput) -> Result<TaskOutput, TaskError> {
    let path = files::workspace_path(&input.path)?;
    let bytes = files::read(&path)?;
    let before = capstan_docx::info(&bytes).map_err(|e| file_error(&path, e))?;
    let out = capstan_docx::append(&bytes, &input.markdown).map_err(|e| file_error(&path, e))?;
    let after = capstan_docx::info(&out).map_err(|e| file_error(&path, e))?;
    files::write_atomic(&path, &out, true)?;
    let added = after.paragraphs.saturating_sub(before.paragraphs);
    let message = format!(
        "appended {} to {}",
        plural(added, "paragraph", "paragraphs"),
        path.display()
    );
    activity("docx.appended", &message);
    Ok(TaskOutput {
        summary: message,
        data: Some(
            json!({
                "path": path.display().to_string(),
                "bytes": out.len(),
                "paragraphs_added": added,
                "tables_added": after.tables.saturating_sub(before.tables),
                "info": info_json(&after),
            })
            .to_string(),
        ),
    })
}

capstan_plugin::export!(Docx);
