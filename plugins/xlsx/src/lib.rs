//! `xlsx`: Excel workbooks in the workspace.
//!
//! Operations: `read` and `info` (read-only), `create` and `write` (write). The parsing
//! and writing live in `capstan-xlsx`; this crate checks paths, reads and writes files
//! (atomically: a hidden temporary file renamed over the target) and reports what it did.

use std::path::Path;

use capstan_plugin::{
    CapabilityInfo, Plugin, Risk, Task, TaskError, TaskOutput, activity, files, op, op_with_schema,
    schema_for,
};
use capstan_xlsx::Cell;
use schemars::{JsonSchema, Schema, json_schema};
use serde::Deserialize;
use serde_json::{Value, json};

struct Xlsx;

/// Characters of CSV/Markdown a `read` returns unless asked otherwise.
const DEFAULT_MAX_CHARS: usize = 1_000_000;

/// Input of `read`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadInput {
    /// The .xlsx file, relative to the workspace root
    path: String,
    /// Sheet name (default: every sheet)
    sheet: Option<String>,
    /// A1 range such as "A1:C10", "B:D", "2:5" or "Sheet2!A1:B4" (default: the used range)
    range: Option<String>,
    #[serde(default)]
    format: Format,
    /// Cut the returned text at this many characters
    #[schemars(range(min = 1), extend("default" = 1_000_000))]
    max_chars: Option<usize>,
}

#[derive(Deserialize, serde::Serialize, JsonSchema, Default, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Format {
    #[default]
    Csv,
    Markdown,
}

/// Input of `info`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PathInput {
    /// The .xlsx file, relative to the workspace root
    path: String,
}

/// Input of `create` and `write`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteInput {
    /// The .xlsx file to write, relative to the workspace root
    path: String,
    #[schemars(length(min = 1))]
    sheets: Vec<SheetInput>,
    overwrite: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SheetInput {
    #[schemars(length(min = 1, max = 31))]
    name: String,
    /// Rows from A1; each a list of cells: string, number, boolean or null (empty)
    #[serde(default)]
    #[schemars(schema_with = "rows_schema")]
    rows: Vec<Vec<Value>>,
}

fn rows_schema(_: &mut schemars::SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"type": "array", "items": {"type": ["string", "number", "boolean", "null"]}}
    })
}

/// The schema of `create` and `write`: the same input, another `overwrite` default.
fn write_schema(overwrite_default: bool) -> Schema {
    let mut schema = schema_for::<WriteInput>();
    if let Some(overwrite) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("overwrite"))
        .and_then(Value::as_object_mut)
    {
        overwrite.insert("default".into(), overwrite_default.into());
    }
    schema
}

impl Plugin for Xlsx {
    fn describe() -> CapabilityInfo {
        CapabilityInfo {
            kinds: vec!["xlsx".into()],
            operations: vec![
                op::<ReadInput>(
                    "read",
                    "Read cells of an .xlsx as CSV or a Markdown table: one sheet or all, the used range or an A1 range.",
                    Risk::ReadOnly,
                ),
                op::<PathInput>(
                    "info",
                    "The sheets of an .xlsx with their used ranges, row and column counts.",
                    Risk::ReadOnly,
                ),
                op_with_schema(
                    "create",
                    "Create an .xlsx from rows of values (refuses to replace an existing file unless overwrite is true).",
                    write_schema(false),
                    Risk::Write,
                ),
                op_with_schema(
                    "write",
                    "Write an .xlsx from rows of values, replacing the file if it exists (unless overwrite is false).",
                    write_schema(true),
                    Risk::Write,
                ),
            ],
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        match task.operation.as_str() {
            "read" => read(task.input()?),
            "info" => info(task.input()?),
            "create" => write(task.input()?, false, "created"),
            "write" => write(task.input()?, true, "wrote"),
            other => Err(TaskError::NotImplemented(format!(
                "operation `{other}`; xlsx offers read, info, create and write"
            ))),
        }
    }
}

fn file_error(path: &Path, e: capstan_xlsx::Error) -> TaskError {
    match e {
        capstan_xlsx::Error::InvalidInput(m) => TaskError::InvalidInput(m),
        other => TaskError::Failed(format!("{}: {other}", path.display())),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn read(input: ReadInput) -> Result<TaskOutput, TaskError> {
    let path = files::workspace_path(&input.path)?;
    let bytes = files::read(&path)?;
    let wb = capstan_xlsx::read(&bytes, input.sheet.as_deref(), input.range.as_deref())
        .map_err(|e| file_error(&path, e))?;
    let mut budget = input.max_chars.unwrap_or(DEFAULT_MAX_CHARS).max(1);
    let mut truncated = false;
    let key = match input.format {
        Format::Csv => "csv",
        Format::Markdown => "markdown",
    };
    let mut sheets = Vec::new();
    let mut cells = 0usize;
    for s in &wb.sheets {
        let text = match input.format {
            Format::Csv => s.to_csv(),
            Format::Markdown => s.to_markdown(),
        };
        let (text, cut) = files::truncate(text, budget);
        budget = budget.saturating_sub(text.chars().count());
        truncated |= cut;
        cells += s.row_count() * s.col_count();
        let mut entry = json!({
            "name": s.name,
            "range": s.range(),
            "rows": s.row_count(),
            "cols": s.col_count(),
        });
        entry[key] = Value::String(text);
        sheets.push(entry);
    }
    let what = match wb.sheets.as_slice() {
        [one] => format!(
            "sheet \"{}\" {}",
            one.name,
            if one.range().is_empty() {
                "(empty)".to_owned()
            } else {
                one.range()
            }
        ),
        many => plural(many.len(), "sheet", "sheets"),
    };
    let message = format!(
        "read {}: {what}, {}",
        path.display(),
        plural(cells, "cell", "cells")
    );
    activity("xlsx.read", &message);
    Ok(TaskOutput {
        summary: if truncated {
            format!("{message} (truncated)")
        } else {
            message
        },
        data: Some(
            json!({
                "path": path.display().to_string(),
                "format": key,
                "truncated": truncated,
                "sheets": sheets,
            })
            .to_string(),
        ),
    })
}

fn info(input: PathInput) -> Result<TaskOutput, TaskError> {
    let path = files::workspace_path(&input.path)?;
    let bytes = files::read(&path)?;
    let info = capstan_xlsx::info(&bytes).map_err(|e| file_error(&path, e))?;
    let sheets: Vec<Value> = info
        .sheets
        .iter()
        .map(|s| json!({"name": s.name, "rows": s.rows, "cols": s.cols, "range": s.range, "cells": s.cells, "hidden": s.hidden}))
        .collect();
    let list: Vec<String> = info
        .sheets
        .iter()
        .map(|s| format!("\"{}\" {}×{}", s.name, s.rows, s.cols))
        .collect();
    let message = format!(
        "{}: {} ({})",
        path.display(),
        plural(info.sheets.len(), "sheet", "sheets"),
        list.join(", ")
    );
    activity("xlsx.info", &message);
    Ok(TaskOutput {
        summary: message,
        data: Some(json!({"path": path.display().to_string(), "sheets": sheets}).to_string()),
    })
}

fn to_cell(v: &Value, sheet: usize, row: usize, col: usize) -> Result<Cell, TaskError> {
    Ok(match v {
        Value::Null => Cell::Empty,
        Value::Bool(b) => Cell::Bool(*b),
        Value::Number(n) => Cell::Number(n.as_f64().ok_or_else(|| {
            TaskError::InvalidInput(format!(
                "sheets[{sheet}].rows[{row}][{col}]: {n} is not a number Excel can store"
            ))
        })?),
        Value::String(s) => Cell::String(s.clone()),
        Value::Array(_) | Value::Object(_) => {
            return Err(TaskError::InvalidInput(format!(
                "sheets[{sheet}].rows[{row}][{col}]: a cell is a string, number, boolean or null, not an array or object"
            )));
        }
    })
}

fn write(input: WriteInput, overwrite_default: bool, verb: &str) -> Result<TaskOutput, TaskError> {
    let path = files::workspace_path(&input.path)?;
    files::require_extension(&path, "xlsx")?;
    let mut sheets: Vec<(String, Vec<Vec<Cell>>)> = Vec::with_capacity(input.sheets.len());
    let mut cells = 0usize;
    for (i, s) in input.sheets.iter().enumerate() {
        let mut rows = Vec::with_capacity(s.rows.len());
        for (r, row) in s.rows.iter().enumerate() {
            let cells_row = row
                .iter()
                .enumerate()
                .map(|(c, v)| to_cell(v, i, r, c))
                .collect::<Result<Vec<Cell>, TaskError>>()?;
            cells += cells_row.iter().filter(|c| !c.is_empty()).count();
            rows.push(cells_row);
        }
        sheets.push((s.name.clone(), rows));
    }
    let bytes = capstan_xlsx::create(&sheets).map_err(|e| file_error(&path, e))?;
    files::write_atomic(&path, &bytes, input.overwrite.unwrap_or(overwrite_default))?;
    let message = format!(
        "{verb} {}: {}, {}",
        path.display(),
        plural(sheets.len(), "sheet", "sheets"),
        plural(cells, "cell", "cells")
    );
    activity(
        if verb == "created" {
            "xlsx.created"
        } else {
            "xlsx.written"
        },
        &message,
    );
    Ok(TaskOutput {
        summary: message,
        data: Some(json!({
            "path": path.display().to_string(),
            "bytes": bytes.len(),
            "sheets": sheets.iter().map(|(n, rows)| json!({"name": n, "rows": rows.len()})).collect::<Vec<_>>(),
            "cells": cells,
        })
        .to_string()),
    })
}

capstan_plugin::export!(Xlsx);
