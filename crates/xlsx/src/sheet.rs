//! Worksheet and shared-string parts.

use capstan_docx::opc::{self, Error, Result};
use quick_xml::Reader;
use quick_xml::events::Event;

use crate::range::{CellRange, column_name, parse_cell_ref};
use crate::{Cell, MAX_CELLS};

/// The shared strings, in order (rich text flattened; phonetic runs left out).
pub(crate) fn shared_strings(xml: &str, part: &str) -> Result<Vec<String>> {
    let mut reader = Reader::from_str(xml);
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    let mut in_t = false;
    let mut phonetic = 0usize;
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(part, &reader, e))?;
        match ev {
            Event::Start(e) => match e.local_name().as_ref() {
                "si" => cur = Some(String::new()),
                "rPh" => phonetic += 1,
                "t" => in_t = phonetic == 0,
                _ => {}
            },
            Event::Empty(e) if e.local_name().as_ref() == "si" => out.push(String::new()),
            Event::End(e) => match e.local_name().as_ref() {
                "si" => out.push(decode_escapes(&cur.take().unwrap_or_default())),
                "rPh" => phonetic = phonetic.saturating_sub(1),
                "t" => in_t = false,
                _ => {}
            },
            Event::Text(t) if in_t => {
                if let Some(s) = cur.as_mut() {
                    s.push_str(&t.xml10_content());
                }
            }
            Event::CData(t) if in_t => {
                if let Some(s) = cur.as_mut() {
                    s.push_str(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) if in_t => {
                if let (Some(s), Some(v)) = (cur.as_mut(), opc::resolve_ref(&r)) {
                    s.push_str(&v);
                }
            }
            Event::DocType(_) => {
                return Err(Error::Doctype {
                    part: part.to_owned(),
                });
            }
            Event::Eof => return Ok(out),
            _ => {}
        }
    }
}

/// Undoes Excel's `_xHHHH_` escapes of characters XML cannot hold (`_x000D_` for a
/// carriage return; `_x005F_` for a literal underscore before such a pattern).
pub(crate) fn decode_escapes(s: &str) -> String {
    if !s.contains("_x") {
        return s.to_owned();
    }
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if b[i] == b'_'
            && i + 7 <= b.len()
            && b[i + 1] == b'x'
            && b[i + 6] == b'_'
            && b[i + 2..i + 6].iter().all(u8::is_ascii_hexdigit)
            && let Ok(code) = u32::from_str_radix(&s[i + 2..i + 6], 16)
            && let Some(c) = char::from_u32(code)
        {
            out.push(c);
            i += 7;
            continue;
        }
        let c = s[i..].chars().next().unwrap_or('\u{FFFD}');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Shared,
    /// `str` (formula result), `inlineStr`, `e` (error), `d` (ISO date).
    Text,
    Bool,
    Number,
}

/// An attribute's raw value (no unescaping: cell references, types and row numbers
/// never hold entities), without allocating.
fn raw_attr<'a>(
    e: &'a quick_xml::events::BytesStart<'_>,
    local: &str,
) -> Option<std::borrow::Cow<'a, str>> {
    let mut attributes = e.attributes();
    attributes.with_checks(false);
    attributes
        .flatten()
        .find(|a| a.key.local_name().as_ref() == local)
        .map(|a| a.value)
}

/// Calls `f(row, col, kind, value)` for each cell with a value, in document order.
fn scan(
    xml: &str,
    part: &str,
    mut f: impl FnMut(u32, u32, Kind, &str) -> Result<()>,
) -> Result<()> {
    let mut reader = Reader::from_str(xml);
    let mut row = 0u32;
    let mut col = 0u32;
    // The cell being read: (row, col, kind, inline?)
    let mut cell: Option<(u32, u32, Kind, bool)> = None;
    let mut value = String::new();
    let mut in_v = false;
    let mut in_is_t = false;
    let mut in_is = false;
    let mut phonetic = 0usize;
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| Error::xml(part, &reader, e))?;
        match ev {
            Event::Start(e) | Event::Empty(e) if e.local_name().as_ref() == "row" => {
                row = match raw_attr(&e, "r").and_then(|r| r.trim().parse::<u32>().ok()) {
                    Some(r) if r >= 1 => r,
                    _ => row + 1,
                };
                col = 0;
            }
            Event::Start(e) if e.local_name().as_ref() == "c" => {
                let (r, c) = match raw_attr(&e, "r").as_deref().and_then(parse_cell_ref) {
                    Some(rc) => rc,
                    None => (row.max(1), col + 1),
                };
                row = r;
                col = c;
                let t = raw_attr(&e, "t");
                let kind = match t.as_deref() {
                    Some("s") => Kind::Shared,
                    Some("b") => Kind::Bool,
                    Some("str" | "inlineStr" | "e" | "d") => Kind::Text,
                    _ => Kind::Number,
                };
                cell = Some((r, c, kind, t.as_deref() == Some("inlineStr")));
                value.clear();
            }
            Event::Empty(e) if e.local_name().as_ref() == "c" => {
                // A styled cell without a value: it still takes its position.
                if let Some((r, c)) = raw_attr(&e, "r").as_deref().and_then(parse_cell_ref) {
                    row = r;
                    col = c;
                } else {
                    col += 1;
                }
            }
            Event::Start(e) => match e.local_name().as_ref() {
                "v" if cell.is_some() => in_v = true,
                "is" if cell.is_some() => in_is = true,
                "rPh" => phonetic += 1,
                "t" if in_is && phonetic == 0 => in_is_t = true,
                _ => {}
            },
            Event::End(e) => match e.local_name().as_ref() {
                "v" => in_v = false,
                "is" => in_is = false,
                "t" => in_is_t = false,
                "rPh" => phonetic = phonetic.saturating_sub(1),
                "c" => {
                    if let Some((r, c, kind, _)) = cell.take()
                        && !value.is_empty()
                    {
                        f(r, c, kind, &value)?;
                    }
                }
                _ => {}
            },
            Event::Text(t) if in_v || in_is_t => value.push_str(&t.xml10_content()),
            Event::CData(t) if in_v || in_is_t => value.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if in_v || in_is_t => {
                if let Some(v) = opc::resolve_ref(&r) {
                    value.push_str(&v);
                }
            }
            Event::DocType(_) => {
                return Err(Error::Doctype {
                    part: part.to_owned(),
                });
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
    }
}

fn to_cell(
    kind: Kind,
    value: &str,
    strings: &[String],
    part: &str,
    row: u32,
    col: u32,
) -> Result<Cell> {
    Ok(match kind {
        Kind::Shared => {
            let index: usize = value.trim().parse().map_err(|_| Error::Corrupt {
                part: part.to_owned(),
                detail: format!(
                    "cell {}{row}: bad shared string index \"{value}\"",
                    column_name(col)
                ),
            })?;
            let s = strings.get(index).ok_or_else(|| Error::Corrupt {
                part: part.to_owned(),
                detail: format!(
                    "cell {}{row}: shared string {index} does not exist ({} shared strings)",
                    column_name(col),
                    strings.len()
                ),
            })?;
            if s.is_empty() {
                Cell::Empty
            } else {
                Cell::String(s.clone())
            }
        }
        Kind::Text => Cell::String(decode_escapes(value)),
        Kind::Bool => Cell::Bool(matches!(value.trim(), "1" | "true" | "TRUE")),
        Kind::Number => match value.trim().parse::<f64>() {
            Ok(n) if n.is_finite() => Cell::Number(n),
            _ => Cell::String(value.to_owned()),
        },
    })
}

fn is_empty(kind: Kind, value: &str, strings: &[String]) -> bool {
    match kind {
        // A bad index is not empty: reading the cell reports it.
        Kind::Shared => value
            .trim()
            .parse::<usize>()
            .ok()
            .and_then(|i| strings.get(i))
            .is_some_and(|s| s.is_empty()),
        _ => value.is_empty(),
    }
}

pub(crate) struct Grid {
    pub first_row: u32,
    pub first_col: u32,
    pub rows: Vec<Vec<Cell>>,
}

/// The sheet as a dense grid: over the used range, or over `range` cut at the last row
/// and column that hold a value.
pub(crate) fn grid(
    xml: &str,
    part: &str,
    strings: &[String],
    range: Option<&CellRange>,
) -> Result<Grid> {
    let mut cells: Vec<(u32, u32, Cell)> = Vec::new();
    let (mut r0, mut c0, mut r1, mut c1) = (u32::MAX, u32::MAX, 0u32, 0u32);
    scan(xml, part, |r, c, kind, value| {
        if range.is_some_and(|rg| !rg.contains(r, c)) || is_empty(kind, value, strings) {
            return Ok(());
        }
        if cells.len() as u64 >= MAX_CELLS {
            return Err(Error::TooLarge {
                part: part.to_owned(),
                detail: "more cells with values than one read may return; pass a smaller range"
                    .into(),
                limit: MAX_CELLS,
            });
        }
        cells.push((r, c, to_cell(kind, value, strings, part, r, c)?));
        r0 = r0.min(r);
        c0 = c0.min(c);
        r1 = r1.max(r);
        c1 = c1.max(c);
        Ok(())
    })?;
    if cells.is_empty() {
        let (first_row, first_col) = range.map_or((1, 1), |rg| (rg.first_row, rg.first_col));
        return Ok(Grid {
            first_row,
            first_col,
            rows: Vec::new(),
        });
    }
    if let Some(rg) = range {
        r0 = rg.first_row;
        c0 = rg.first_col;
    }
    let height = u64::from(r1 - r0 + 1);
    let width = u64::from(c1 - c0 + 1);
    if height * width > MAX_CELLS {
        return Err(Error::TooLarge {
            part: part.to_owned(),
            detail: format!(
                "the range {}{r0}:{}{r1} spans {} cells; read a smaller range",
                column_name(c0),
                column_name(c1),
                height * width
            ),
            limit: MAX_CELLS,
        });
    }
    let mut rows = vec![vec![Cell::Empty; width as usize]; height as usize];
    for (r, c, cell) in cells {
        rows[(r - r0) as usize][(c - c0) as usize] = cell;
    }
    Ok(Grid {
        first_row: r0,
        first_col: c0,
        rows,
    })
}

pub(crate) struct Extent {
    /// (first row, first col, last row, last col) of the cells with values.
    pub bounds: Option<(u32, u32, u32, u32)>,
    pub cells: u64,
}

pub(crate) fn extent(xml: &str, part: &str, strings: &[String]) -> Result<Extent> {
    let mut bounds: Option<(u32, u32, u32, u32)> = None;
    let mut cells = 0u64;
    scan(xml, part, |r, c, kind, value| {
        if is_empty(kind, value, strings) {
            return Ok(());
        }
        cells += 1;
        bounds = Some(match bounds {
            None => (r, c, r, c),
            Some((r0, c0, r1, c1)) => (r0.min(r), c0.min(c), r1.max(r), c1.max(c)),
        });
        Ok(())
    })?;
    Ok(Extent { bounds, cells })
}
