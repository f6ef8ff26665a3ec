//! `docx`: Word documents in the workspace.
//!
//! Operations: `read` and `info` (read-only), `create`, `replace` and `append` (write).
//! The parsing and editing live in `capstan-docx`; this crate checks paths, reads and
//! writes files (atomically: a hidden temporary file renamed over the target) and
//! reports what it did.

#[path = "../../shared/files.rs"]
mod files;

use files::{activity, parse};

wit_bindgen::generate!({ world: "plugin", path: "../../wit" });

use std::path::Path;

use capstan::plugin::types::{CapabilityInfo, OperationInfo, Risk, Task, TaskError, TaskOutput};
use exports::capstan::plugin::capability::Guest;
use serde::Deserialize;
use serde_json::{Value, json};

struct Docx;

/// Characters of text a `read` returns unless asked otherwise.
const DEFAULT_MAX_CHARS: usize = 1_000_000;

const READ_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["path"],
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "description": "The .docx file, relative to the workspace root"},
    "format": {"type": "string", "enum": ["markdown", "text"], "default": "markdown"},
    "max_chars": {"type": "integer", "minimum": 1, "default": 1000000, "description": "Cut the returned text at this many characters"}
  }
}"#;

const INFO_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["path"],
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "description": "The .docx file, relative to the workspace root"}
  }
}"#;

const CREATE_SCHEMA: &str = r##"{
  "type": "object",
  "required": ["path", "markdown"],
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "description": "The .docx file to write, relative to the workspace root"},
    "markdown": {"type": "string", "description": "Content: # headings, paragraphs, **bold**, *italic*, - and 1. lists, pipe tables, > quotes, code blocks"},
    "title": {"type": "string", "description": "Document title (default: the first heading)"},
    "overwrite": {"type": "boolean", "default": false}
  }
}"##;

const REPLACE_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["path", "find", "replace"],
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "description": "The .docx file, relative to the workspace root"},
    "find": {"type": "string", "minLength": 1, "description": "Exact text to find (case-sensitive), also where Word split it across formatting runs"},
    "replace": {"type": "string", "description": "Replacement text; it takes the formatting of the run where each match starts"}
  }
}"#;

const APPEND_SCHEMA: &str = r##"{
  "type": "object",
  "required": ["path", "markdown"],
  "additionalProperties": false,
  "properties": {
    "path": {"type": "string", "description": "The .docx file, relative to the workspace root"},
    "markdown": {"type": "string", "description": "Content to add at the end: # headings, paragraphs, **bold**, *italic*, lists, pipe tables"}
  }
}"##;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadInput {
    path: String,
    #[serde(default)]
    format: Format,
    max_chars: Option<usize>,
}

#[derive(Deserialize, Default, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Format {
    #[default]
    Markdown,
    Text,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathInput {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateInput {
    path: String,
    markdown: String,
    title: Option<String>,
    #[serde(default)]
    overwrite: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplaceInput {
    path: String,
    find: String,
    replace: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppendInput {
    path: String,
    markdown: String,
}

fn op(name: &str, description: &str, schema: &str, risk: Risk) -> OperationInfo {
    OperationInfo {
        name: name.into(),
        description: description.into(),
        input_schema: schema.into(),
        risk,
    }
}

impl Guest for Docx {
    fn describe() -> CapabilityInfo {
        CapabilityInfo {
            kinds: vec!["docx".into()],
            operations: vec![
                op(
                    "read",
                    "Read a .docx as Markdown (headings, lists, tables, bold, italic) or plain text.",
                    READ_SCHEMA,
                    Risk::ReadOnly,
                ),
                op(
                    "info",
                    "Title, headings and counts (paragraphs, tables, words) of a .docx.",
                    INFO_SCHEMA,
                    Risk::ReadOnly,
                ),
                op(
                    "create",
                    "Create a .docx from Markdown (refuses to replace an existing file unless overwrite is true).",
                    CREATE_SCHEMA,
                    Risk::Write,
                ),
                op(
                    "replace",
                    "Find and replace text in a .docx, keeping its formatting and everything else in the file.",
                    REPLACE_SCHEMA,
                    Risk::Write,
                ),
                op(
                    "append",
                    "Append Markdown content (paragraphs, headings, lists, tables) to the end of a .docx.",
                    APPEND_SCHEMA,
                    Risk::Write,
                ),
            ],
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        match task.operation.as_str() {
            "read" => read(parse(&task)?),
            "info" => info(parse(&task)?),
            "create" => create(parse(&task)?),
            "replace" => replace(parse(&task)?),
            "append" => append(parse(&task)?),
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
        data: data.to_string(),
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
        data: data.to_string(),
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
        data: json!({"path": path.display().to_string(), "bytes": bytes.len(), "info": info_json(&info)}).to_string(),
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
            json!({"path": path.display().to_string(), "replacements": count, "changed": count > 0})
                .to_string(),
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
        data: json!({
            "path": path.display().to_string(),
            "bytes": out.len(),
            "paragraphs_added": added,
            "tables_added": after.tables.saturating_sub(before.tables),
            "info": info_json(&after),
        })
        .to_string(),
    })
}

export!(Docx);
