//! New workbooks.

use std::collections::HashMap;
use std::fmt::Write as _;

use capstan_docx::opc::{self, Error, Result, escape_attr, escape_text};

use crate::range::{MAX_COLS, MAX_ROWS, column_name};
use crate::{Cell, format_number};

const MAIN_NS: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
const R_NS: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
/// Excel's limit on the characters in one cell.
const MAX_CELL_CHARS: usize = 32_767;

/// Encodes what XML 1.0 cannot hold as Excel's `_xHHHH_`, and protects literal
/// `_xHHHH_` text by escaping its underscore (`_x005F_`).
fn encode_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    for (i, c) in s.char_indices() {
        let xml_ok = matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..);
        if !xml_ok {
            let _ = write!(out, "_x{:04X}_", c as u32);
        } else if c == '_'
            && i + 7 <= b.len()
            && b[i + 1] == b'x'
            && b[i + 6] == b'_'
            && b[i + 2..i + 6].iter().all(u8::is_ascii_hexdigit)
        {
            out.push_str("_x005F_");
        } else {
            out.push(c);
        }
    }
    out
}

/// Checks a sheet name the way Excel does.
fn check_name(name: &str, seen: &mut Vec<String>) -> Result<()> {
    let bad = |why: &str| Error::InvalidInput(format!("invalid sheet name \"{name}\": {why}"));
    if name.trim().is_empty() {
        return Err(bad("it is empty"));
    }
    if name.chars().count() > 31 {
        return Err(bad("more than 31 characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '[' | ']' | ':' | '*' | '?' | '/' | '\\'))
    {
        return Err(bad(&format!(
            "`{c}` is not allowed (none of [ ] : * ? / \\)"
        )));
    }
    if name.starts_with('\'') || name.ends_with('\'') {
        return Err(bad("it may not begin or end with an apostrophe"));
    }
    if name.chars().any(char::is_control) {
        return Err(bad("control characters are not allowed"));
    }
    if name.eq_ignore_ascii_case("history") {
        return Err(bad("\"History\" is reserved by Excel"));
    }
    let lower = name.to_lowercase();
    if seen.contains(&lower) {
        return Err(bad(
            "another sheet has the same name (names are case-insensitive)",
        ));
    }
    seen.push(lower);
    Ok(())
}

/// A new workbook with one worksheet per `(name, rows)`, in order; `rows[0][0]` is A1.
/// Strings are shared (as Excel writes them), numbers must be finite, empty cells are
/// left out.
pub fn create<N: AsRef<str>>(sheets: &[(N, Vec<Vec<Cell>>)]) -> Result<Vec<u8>> {
    if sheets.is_empty() {
        return Err(Error::InvalidInput(
            "a workbook needs at least one sheet".into(),
        ));
    }
    let mut names = Vec::new();
    let mut strings: Vec<&str> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut sheet_parts: Vec<String> = Vec::new();
    let mut references = 0usize;
    for (name, rows) in sheets {
        let name = name.as_ref();
        check_name(name, &mut names)?;
        if rows.len() > MAX_ROWS as usize {
            return Err(Error::InvalidInput(format!(
                "sheet \"{name}\" has {} rows; Excel allows {MAX_ROWS}",
                rows.len()
            )));
        }
        let width = rows.iter().map(Vec::len).max().unwrap_or(0);
        if width > MAX_COLS as usize {
            return Err(Error::InvalidInput(format!(
                "sheet \"{name}\" has {width} columns; Excel allows {MAX_COLS}"
            )));
        }
        let mut data = String::new();
        let (mut last_row, mut last_col) = (0usize, 0usize);
        for (r, row) in rows.iter().enumerate() {
            if row.iter().all(Cell::is_empty) {
                continue;
            }
            let _ = write!(data, "<row r=\"{}\">", r + 1);
            for (c, cell) in row.iter().enumerate() {
                let at = format!("{}{}", column_name(c as u32 + 1), r + 1);
                match cell {
                    Cell::Empty => continue,
                    Cell::String(s) if s.is_empty() => continue,
                    Cell::String(s) => {
                        if s.chars().count() > MAX_CELL_CHARS {
                            return Err(Error::InvalidInput(format!(
                                "sheet \"{name}\" cell {at}: more than {MAX_CELL_CHARS} characters (Excel's limit)"
                            )));
                        }
                        references += 1;
                        let i = *index.entry(s.as_str()).or_insert_with(|| {
                            strings.push(s.as_str());
                            strings.len() - 1
                        });
                        let _ = write!(data, "<c r=\"{at}\" t=\"s\"><v>{i}</v></c>");
                    }
                    Cell::Number(n) => {
                        if !n.is_finite() {
                            return Err(Error::InvalidInput(format!(
                                "sheet \"{name}\" cell {at}: {n} is not a number Excel can store"
                            )));
                        }
                        let _ = write!(data, "<c r=\"{at}\"><v>{}</v></c>", format_number(*n));
                    }
                    Cell::Bool(b) => {
                        let _ = write!(data, "<c r=\"{at}\" t=\"b\"><v>{}</v></c>", u8::from(*b));
                    }
                }
                last_row = last_row.max(r + 1);
                last_col = last_col.max(c + 1);
            }
            data.push_str("</row>");
        }
        let dimension = if last_row == 0 {
            "A1".to_owned()
        } else {
            format!("A1:{}{last_row}", column_name(last_col as u32))
        };
        let sheet_data = if data.is_empty() {
            "<sheetData/>".to_owned()
        } else {
            format!("<sheetData>{data}</sheetData>")
        };
        sheet_parts.push(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<worksheet xmlns=\"{MAIN_NS}\" xmlns:r=\"{R_NS}\"><dimension ref=\"{dimension}\"/><sheetViews><sheetView workbookViewId=\"0\"/></sheetViews><sheetFormatPr defaultRowHeight=\"15\"/>{sheet_data}<pageMargins left=\"0.7\" right=\"0.7\" top=\"0.75\" bottom=\"0.75\" header=\"0.3\" footer=\"0.3\"/></worksheet>"
        ));
    }

    let mut types = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\"><Default Extension=\"rels\" ContentType=\"application/vnd.openxmlformats-package.relationships+xml\"/><Default Extension=\"xml\" ContentType=\"application/xml\"/><Override PartName=\"/xl/workbook.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml\"/><Override PartName=\"/xl/styles.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml\"/><Override PartName=\"/xl/sharedStrings.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml\"/><Override PartName=\"/docProps/core.xml\" ContentType=\"application/vnd.openxmlformats-package.core-properties+xml\"/><Override PartName=\"/docProps/app.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.extended-properties+xml\"/>",
    );
    let mut workbook = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<workbook xmlns=\"{MAIN_NS}\" xmlns:r=\"{R_NS}\"><bookViews><workbookView activeTab=\"0\"/></bookViews><sheets>"
    );
    let mut rels = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\">",
    );
    for (i, (name, _)) in sheets.iter().enumerate() {
        let n = i + 1;
        let _ = write!(
            types,
            "<Override PartName=\"/xl/worksheets/sheet{n}.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml\"/>"
        );
        let _ = write!(
            workbook,
            "<sheet name=\"{}\" sheetId=\"{n}\" r:id=\"rId{n}\"/>",
            escape_attr(name.as_ref())
        );
        let _ = write!(
            rels,
            "<Relationship Id=\"rId{n}\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet\" Target=\"worksheets/sheet{n}.xml\"/>"
        );
    }
    types.push_str("</Types>");
    workbook.push_str("</sheets></workbook>");
    let k = sheets.len();
    let _ = write!(
        rels,
        "<Relationship Id=\"rId{}\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles\" Target=\"styles.xml\"/><Relationship Id=\"rId{}\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings\" Target=\"sharedStrings.xml\"/></Relationships>",
        k + 1,
        k + 2
    );

    let mut sst = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<sst xmlns=\"{MAIN_NS}\" count=\"{references}\" uniqueCount=\"{}\">",
        strings.len()
    );
    for s in &strings {
        let encoded = encode_escapes(s);
        let space =
            if encoded.starts_with(char::is_whitespace) || encoded.ends_with(char::is_whitespace) {
                " xml:space=\"preserve\""
            } else {
                ""
            };
        let _ = write!(sst, "<si><t{space}>{}</t></si>", escape_text(&encoded));
    }
    sst.push_str("</sst>");

    let mut parts: Vec<(String, Vec<u8>)> = vec![
        ("[Content_Types].xml".into(), types.into_bytes()),
        ("_rels/.rels".into(), ROOT_RELS.as_bytes().to_vec()),
        ("docProps/core.xml".into(), CORE.as_bytes().to_vec()),
        ("docProps/app.xml".into(), APP.as_bytes().to_vec()),
        ("xl/workbook.xml".into(), workbook.into_bytes()),
        ("xl/_rels/workbook.xml.rels".into(), rels.into_bytes()),
        ("xl/styles.xml".into(), STYLES.as_bytes().to_vec()),
        ("xl/sharedStrings.xml".into(), sst.into_bytes()),
    ];
    for (i, xml) in sheet_parts.into_iter().enumerate() {
        parts.push((
            format!("xl/worksheets/sheet{}.xml", i + 1),
            xml.into_bytes(),
        ));
    }
    let refs: Vec<(&str, &[u8])> = parts
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    opc::write_package(&refs)
}

const ROOT_RELS: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"><Relationship Id=\"rId1\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument\" Target=\"xl/workbook.xml\"/><Relationship Id=\"rId2\" Type=\"http://schemas.openxmlformats.org/package/2006/relationships/metadata/core-properties\" Target=\"docProps/core.xml\"/><Relationship Id=\"rId3\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/extended-properties\" Target=\"docProps/app.xml\"/></Relationships>";

const CORE: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<cp:coreProperties xmlns:cp=\"http://schemas.openxmlformats.org/package/2006/metadata/core-properties\" xmlns:dc=\"http://purl.org/dc/elements/1.1/\" xmlns:dcterms=\"http://purl.org/dc/terms/\" xmlns:dcmitype=\"http://purl.org/dc/dcmitype/\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"><dc:creator>Capstan</dc:creator></cp:coreProperties>";

const APP: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<Properties xmlns=\"http://schemas.openxmlformats.org/officeDocument/2006/extended-properties\"><Application>Capstan</Application></Properties>";

const STYLES: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n<styleSheet xmlns=\"http://schemas.openxmlformats.org/spreadsheetml/2006/main\"><fonts count=\"1\"><font><sz val=\"11\"/><name val=\"Calibri\"/><family val=\"2\"/></font></fonts><fills count=\"2\"><fill><patternFill patternType=\"none\"/></fill><fill><patternFill patternType=\"gray125\"/></fill></fills><borders count=\"1\"><border><left/><right/><top/><bottom/><diagonal/></border></borders><cellStyleXfs count=\"1\"><xf numFmtId=\"0\" fontId=\"0\" fillId=\"0\" borderId=\"0\"/></cellStyleXfs><cellXfs count=\"1\"><xf numFmtId=\"0\" fontId=\"0\" fillId=\"0\" borderId=\"0\" xfId=\"0\"/></cellXfs><cellStyles count=\"1\"><cellStyle name=\"Normal\" xfId=\"0\" builtinId=\"0\"/></cellStyles><dxfs count=\"0\"/><tableStyles count=\"0\" defaultTableStyle=\"TableStyleMedium2\" defaultPivotStyle=\"PivotStyleLight16\"/></styleSheet>";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sheet::decode_escapes;

    #[test]
    fn escapes_round_trip() {
        for s in [
            "plain",
            "a\u{1}b",
            "_x0041_",
            "tab\there",
            "\u{FFFF}",
            "_x00_",
            "x_x0000_",
        ] {
            let encoded = encode_escapes(s);
            assert!(!encoded.contains('\u{1}'));
            let back = decode_escapes(&encoded);
            let expected: String = s.chars().collect();
            assert_eq!(back, expected, "{s:?} → {encoded:?}");
        }
    }

    #[test]
    fn names() {
        let mut seen = Vec::new();
        assert!(check_name("Data", &mut seen).is_ok());
        assert!(check_name("data", &mut seen).is_err());
        for bad in [
            "",
            "a/b",
            "x".repeat(32).as_str(),
            "'q",
            "History",
            "a\u{1}",
        ] {
            assert!(check_name(bad, &mut Vec::new()).is_err(), "{bad}");
        }
    }
}
