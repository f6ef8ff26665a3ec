//! Reading and creating Excel `.xlsx` workbooks (Office Open XML SpreadsheetML), for the
//! `xlsx` capability.
//!
//! Pure Rust so it builds for `wasm32-wasip2`: the plugin that embeds it runs inside
//! the sandbox. It never touches the file system; callers pass and receive bytes.
//!
//! * [`read`] → [`Workbook`]: the worksheets (listed from `xl/workbook.xml` and its
//!   relationships), each a dense grid of [`Cell`]s over its used range or the range
//!   asked for; shared strings, inline strings, numbers, booleans, errors (as their
//!   text, `#DIV/0!`), formula results (the cached value). Dates are the serial numbers
//!   Excel stores. Rendered by [`Workbook::to_csv`] / [`Sheet::to_csv`] and
//!   [`Workbook::to_markdown`] / [`Sheet::to_markdown`].
//! * [`create`] → a new workbook valid for Excel, LibreOffice and openpyxl.
//! * [`info`] → the worksheets with their extents.
//!
//! Untrusted input is bounded like `.docx` (see [`capstan_docx::opc`]): OLE files
//! (encrypted, legacy `.xls`) refused by name, decompressed parts capped, any DTD refused.
//! A grid is materialised only up to [`MAX_CELLS`] cells: a sparse sheet whose used
//! range is larger must be read with a range.

#![warn(missing_docs)]

mod range;
mod sheet;
mod write;

use std::collections::HashMap;

use capstan_docx::opc::{Kind, Package, attr};
use quick_xml::Reader;
use quick_xml::events::Event;

pub use capstan_docx::opc::{Error, Result};
pub use range::{CellRange, column_name, parse_range};
pub use write::create;

/// The most cells one sheet's grid may hold (empty ones included).
pub const MAX_CELLS: u64 = 2_000_000;

/// One cell's value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Cell {
    /// No value (also a cell the grid pads out).
    #[default]
    Empty,
    /// Text: a shared, inline or formula string.
    String(String),
    /// A number (dates stay serial numbers).
    Number(f64),
    /// A boolean.
    Bool(bool),
}

impl Cell {
    /// Whether the cell shows nothing: empty, or an empty string.
    pub fn is_empty(&self) -> bool {
        match self {
            Cell::Empty => true,
            Cell::String(s) => s.is_empty(),
            _ => false,
        }
    }

    /// The value as text: numbers in their shortest exact form (`3`, `0.1`, `1e300`),
    /// booleans as `TRUE`/`FALSE`, empty as "".
    pub fn text(&self) -> String {
        match self {
            Cell::Empty => String::new(),
            Cell::String(s) => s.clone(),
            Cell::Number(n) => format_number(*n),
            Cell::Bool(b) => if *b { "TRUE" } else { "FALSE" }.to_owned(),
        }
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Self {
        Cell::String(s.to_owned())
    }
}
impl From<String> for Cell {
    fn from(s: String) -> Self {
        Cell::String(s)
    }
}
impl From<f64> for Cell {
    fn from(n: f64) -> Self {
        Cell::Number(n)
    }
}
impl From<i64> for Cell {
    fn from(n: i64) -> Self {
        Cell::Number(n as f64)
    }
}
impl From<bool> for Cell {
    fn from(b: bool) -> Self {
        Cell::Bool(b)
    }
}

/// Numbers as Excel and Python would show them: integers without `.0`, others in the
/// shortest form that reads back to the same double; exponents for the very large and
/// very small.
pub fn format_number(n: f64) -> String {
    if n == 0.0 {
        return "0".to_owned();
    }
    let a = n.abs();
    if !(1e-6..1e16).contains(&a) {
        return format!("{n:e}");
    }
    if n.fract() == 0.0 && a < 1e15 {
        return format!("{}", n as i64);
    }
    format!("{n}")
}

/// A worksheet's cells: `rows[0][0]` is the cell at (`first_row`, `first_col`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sheet {
    /// The sheet's tab name, as in the workbook.
    pub name: String,
    /// 1-based row of `rows[0]`.
    pub first_row: u32,
    /// 1-based column of `rows[_][0]`.
    pub first_col: u32,
    /// Every row has the same length.
    pub rows: Vec<Vec<Cell>>,
}

impl Sheet {
    /// Rows in the grid (not the last used row number).
    pub fn row_count(&self) -> usize {
        self.rows.len()
    }

    /// Columns in the grid (0 when it has no rows).
    pub fn col_count(&self) -> usize {
        self.rows.first().map_or(0, Vec::len)
    }

    /// The grid's range in A1 notation ("" for an empty grid).
    pub fn range(&self) -> String {
        if self.rows.is_empty() || self.col_count() == 0 {
            return String::new();
        }
        let last_row = self.first_row + self.rows.len() as u32 - 1;
        let last_col = self.first_col + self.col_count() as u32 - 1;
        format!(
            "{}{}:{}{}",
            column_name(self.first_col),
            self.first_row,
            column_name(last_col),
            last_row
        )
    }

    /// RFC 4180 CSV (fields quoted when they hold `,` `"` or a line break; lines end
    /// with `\n`).
    pub fn to_csv(&self) -> String {
        let mut out = String::new();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let text = cell.text();
                if text.contains([',', '"', '\n', '\r']) {
                    out.push('"');
                    out.push_str(&text.replace('"', "\"\""));
                    out.push('"');
                } else {
                    out.push_str(&text);
                }
            }
            out.push('\n');
        }
        out
    }

    /// A Markdown pipe table, the first row as its header.
    pub fn to_markdown(&self) -> String {
        if self.rows.is_empty() || self.col_count() == 0 {
            return "(empty)\n".to_owned();
        }
        let cols = self.col_count();
        let mut out = String::new();
        for (i, row) in self.rows.iter().enumerate() {
            out.push('|');
            for cell in row {
                let text = cell
                    .text()
                    .replace('\\', "\\\\")
                    .replace('|', "\\|")
                    .replace("\r\n", "<br>")
                    .replace(['\n', '\r'], "<br>");
                out.push(' ');
                out.push_str(&text);
                out.push_str(" |");
            }
            out.push('\n');
            if i == 0 {
                out.push('|');
                for _ in 0..cols {
                    out.push_str(" --- |");
                }
                out.push('\n');
            }
        }
        out
    }
}

/// The sheets read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Workbook {
    /// The sheets asked for, in workbook order.
    pub sheets: Vec<Sheet>,
}

impl Workbook {
    /// CSV of the only sheet; with several, each is preceded by a `# Sheet: name` line
    /// and separated by a blank line.
    pub fn to_csv(&self) -> String {
        if self.sheets.len() == 1 {
            return self.sheets[0].to_csv();
        }
        let parts: Vec<String> = self
            .sheets
            .iter()
            .map(|s| format!("# Sheet: {}\n{}", s.name, s.to_csv()))
            .collect();
        parts.join("\n")
    }

    /// One `## name` section per sheet with its table.
    pub fn to_markdown(&self) -> String {
        let parts: Vec<String> = self
            .sheets
            .iter()
            .map(|s| format!("## {}\n\n{}", s.name, s.to_markdown()))
            .collect();
        parts.join("\n")
    }
}

/// One worksheet's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SheetInfo {
    /// The sheet's tab name.
    pub name: String,
    /// The last row holding a value (1-based; 0 for an empty sheet), like openpyxl's
    /// `max_row`.
    pub rows: u32,
    /// The last column holding a value (1 = A; 0 for an empty sheet).
    pub cols: u32,
    /// The used range ("B2:D10"; "" when empty).
    pub range: String,
    /// Cells holding a value.
    pub cells: u64,
    /// Whether the workbook marks it `hidden` or `veryHidden`.
    pub hidden: bool,
}

/// What [`info`] reports about a workbook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// Every sheet, hidden ones included, in workbook order.
    pub sheets: Vec<SheetInfo>,
}

/// A worksheet as listed by the workbook.
#[derive(Debug, Clone)]
struct SheetRef {
    name: String,
    part: String,
    hidden: bool,
}

struct Opened<'a> {
    pkg: Package<'a>,
    sheets: Vec<SheetRef>,
    shared_strings: Option<String>,
}

fn open(bytes: &[u8]) -> Result<Opened<'_>> {
    let mut pkg = Package::open(bytes, Kind::Xlsx)?;
    let (main, xml) = pkg.main_xml()?;
    let rels = pkg.rels(&main)?;
    let by_id: HashMap<&str, &capstan_docx::opc::Rel> =
        rels.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut reader = Reader::from_str(&xml);
    let mut sheets = Vec::new();
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(&main, &reader, e))?;
        match ev {
            Event::Start(e) | Event::Empty(e) if e.local_name().as_ref() == "sheet" => {
                let name = attr(&e, "name").unwrap_or_default();
                let Some(rel) = attr(&e, "id").and_then(|id| by_id.get(id.as_str()).copied())
                else {
                    continue;
                };
                if rel.external || !rel.rel_type.ends_with("/worksheet") {
                    continue; // chart sheets, dialog sheets, macro sheets
                }
                let hidden = matches!(attr(&e, "state").as_deref(), Some("hidden" | "veryHidden"));
                sheets.push(SheetRef {
                    name,
                    part: rel.target.clone(),
                    hidden,
                });
            }
            Event::DocType(_) => return Err(Error::Doctype { part: main }),
            Event::Eof => break,
            _ => {}
        }
    }
    let shared_strings = rels
        .iter()
        .find(|r| !r.external && r.rel_type.ends_with("/sharedStrings"))
        .map(|r| r.target.clone());
    Ok(Opened {
        pkg,
        sheets,
        shared_strings,
    })
}

fn find_sheet<'s>(sheets: &'s [SheetRef], name: &str) -> Result<&'s SheetRef> {
    sheets
        .iter()
        .find(|s| s.name == name)
        .or_else(|| sheets.iter().find(|s| s.name.eq_ignore_ascii_case(name)))
        .ok_or_else(|| {
            let names: Vec<String> = sheets.iter().map(|s| format!("\"{}\"", s.name)).collect();
            Error::InvalidInput(format!(
                "no sheet named \"{name}\"; the workbook has {}",
                names.join(", ")
            ))
        })
}

/// Reads the workbook: one sheet by name (`None`: every worksheet), within a range in
/// A1 notation (`"A1:C10"`, `"B:D"`, `"2:5"`, `"C3"`, `"Sheet2!A1:B4"`; `None`: the
/// used range).
pub fn read(bytes: &[u8], sheet: Option<&str>, range: Option<&str>) -> Result<Workbook> {
    let mut opened = open(bytes)?;
    let (range_sheet, range) = match range.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) => {
            let (s, r) = range::split_sheet(r);
            (s, Some(parse_range(r)?))
        }
        None => (None, None),
    };
    let wanted = sheet.map(str::to_owned).or(range_sheet);
    let selected: Vec<SheetRef> = match &wanted {
        Some(name) => vec![find_sheet(&opened.sheets, name)?.clone()],
        None => opened.sheets.clone(),
    };
    let strings = match &opened.shared_strings {
        Some(p) => match opened.pkg.read_xml(p)? {
            Some(xml) => sheet::shared_strings(&xml, p)?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let mut out = Workbook::default();
    for s in selected {
        let xml = opened.pkg.require_xml(&s.part)?;
        let grid = sheet::grid(&xml, &s.part, &strings, range.as_ref())?;
        out.sheets.push(Sheet {
            name: s.name.clone(),
            first_row: grid.first_row,
            first_col: grid.first_col,
            rows: grid.rows,
        });
    }
    Ok(out)
}

/// The worksheets' names, in workbook order.
pub fn sheet_names(bytes: &[u8]) -> Result<Vec<String>> {
    Ok(open(bytes)?.sheets.into_iter().map(|s| s.name).collect())
}

/// The worksheets with their extents (each sheet is scanned; no grid is built).
pub fn info(bytes: &[u8]) -> Result<Info> {
    let mut opened = open(bytes)?;
    let strings = match &opened.shared_strings {
        Some(p) => match opened.pkg.read_xml(p)? {
            Some(xml) => sheet::shared_strings(&xml, p)?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let mut sheets = Vec::new();
    for s in opened.sheets.clone() {
        let xml = opened.pkg.require_xml(&s.part)?;
        let e = sheet::extent(&xml, &s.part, &strings)?;
        let range = match e.bounds {
            Some((r0, c0, r1, c1)) => format!("{}{r0}:{}{r1}", column_name(c0), column_name(c1)),
            None => String::new(),
        };
        sheets.push(SheetInfo {
            name: s.name,
            rows: e.bounds.map_or(0, |b| b.2),
            cols: e.bounds.map_or(0, |b| b.3),
            range,
            cells: e.cells,
            hidden: s.hidden,
        });
    }
    Ok(Info { sheets })
}
