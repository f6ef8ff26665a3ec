//! Create, read (sheets, ranges, formats) and info on workbooks; bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Cursor, Write};

use capstan_xlsx::{Cell, Error};
use zip::write::SimpleFileOptions;

fn s(v: &str) -> Cell {
    Cell::String(v.to_owned())
}
fn n(v: f64) -> Cell {
    Cell::Number(v)
}

fn sample() -> Vec<u8> {
    capstan_xlsx::create(&[
        (
            "Data",
            vec![
                vec![s("Name"), s("Qty"), s("Price"), s("OK")],
                vec![s("Widget"), n(4.0), n(2.5), Cell::Bool(true)],
                vec![s("Gadget, large"), n(-7.0), n(0.1), Cell::Bool(false)],
                vec![s("Quote \"q\""), Cell::Empty, n(1e20), s("line\nbreak")],
            ],
        ),
        ("Empty", vec![]),
        (
            "Notes",
            vec![vec![], vec![Cell::Empty, s("  padded  "), s("Widget")]],
        ),
    ])
    .unwrap()
}

#[test]
fn create_then_read_gives_the_cells_back() {
    let wb = capstan_xlsx::read(&sample(), None, None).unwrap();
    let names: Vec<&str> = wb.sheets.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Data", "Empty", "Notes"]);
    let data = &wb.sheets[0];
    assert_eq!(data.range(), "A1:D4");
    assert_eq!(
        data.rows[1],
        vec![s("Widget"), n(4.0), n(2.5), Cell::Bool(true)]
    );
    assert_eq!(data.rows[3][1], Cell::Empty);
    assert_eq!(data.rows[3][2], n(1e20));
    assert!(wb.sheets[1].rows.is_empty());
    // The used range of Notes starts at B2.
    let notes = &wb.sheets[2];
    assert_eq!(
        (notes.first_row, notes.first_col, notes.range()),
        (2, 2, "B2:C2".to_owned())
    );
    assert_eq!(notes.rows, vec![vec![s("  padded  "), s("Widget")]]);
}

#[test]
fn csv_and_markdown() {
    let wb = capstan_xlsx::read(&sample(), Some("Data"), None).unwrap();
    assert_eq!(
        wb.to_csv(),
        "Name,Qty,Price,OK\nWidget,4,2.5,TRUE\n\"Gadget, large\",-7,0.1,FALSE\n\"Quote \"\"q\"\"\",,1e20,\"line\nbreak\"\n"
    );
    assert_eq!(
        wb.sheets[0].to_markdown(),
        "| Name | Qty | Price | OK |\n| --- | --- | --- | --- |\n| Widget | 4 | 2.5 | TRUE |\n| Gadget, large | -7 | 0.1 | FALSE |\n| Quote \"q\" |  | 1e20 | line<br>break |\n"
    );
    let all = capstan_xlsx::read(&sample(), None, None).unwrap();
    assert!(all.to_csv().starts_with("# Sheet: Data\nName,Qty"));
    assert!(all.to_markdown().contains("## Empty\n\n(empty)\n"));
}

#[test]
fn ranges_and_sheet_selection() {
    let bytes = sample();
    let wb = capstan_xlsx::read(&bytes, Some("data"), Some("B2:C3")).unwrap();
    assert_eq!(wb.sheets.len(), 1);
    assert_eq!(wb.sheets[0].to_csv(), "4,2.5\n-7,0.1\n");
    assert_eq!(wb.sheets[0].range(), "B2:C3");
    // A range past the data is cut at the last row/column with a value.
    let wb = capstan_xlsx::read(&bytes, Some("Data"), Some("C3:Z100")).unwrap();
    assert_eq!(wb.sheets[0].range(), "C3:D4");
    // Whole columns, and a sheet named in the range.
    let wb = capstan_xlsx::read(&bytes, None, Some("Data!A:A")).unwrap();
    assert_eq!(
        wb.sheets[0].to_csv(),
        "Name\nWidget\n\"Gadget, large\"\n\"Quote \"\"q\"\"\"\n"
    );
    let wb = capstan_xlsx::read(&bytes, None, Some("Notes!2:2")).unwrap();
    assert_eq!(wb.sheets[0].to_csv(), ",  padded  ,Widget\n");
    let err = capstan_xlsx::read(&bytes, Some("Nope"), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no sheet named \"Nope\"") && err.contains("\"Data\", \"Empty\", \"Notes\""),
        "{err}"
    );
    let err = capstan_xlsx::read(&bytes, None, Some("A1:"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid range"), "{err}");
}

#[test]
fn info_counts() {
    let info = capstan_xlsx::info(&sample()).unwrap();
    let got: Vec<(&str, u32, u32, &str, u64)> = info
        .sheets
        .iter()
        .map(|s| (s.name.as_str(), s.rows, s.cols, s.range.as_str(), s.cells))
        .collect();
    assert_eq!(
        got,
        [
            ("Data", 4, 4, "A1:D4", 15),
            ("Empty", 0, 0, "", 0),
            ("Notes", 2, 3, "B2:C2", 2)
        ]
    );
    assert_eq!(
        capstan_xlsx::sheet_names(&sample()).unwrap(),
        ["Data", "Empty", "Notes"]
    );
}

#[test]
fn create_rejects_what_excel_would() {
    let err =
        |sheets: &[(&str, Vec<Vec<Cell>>)]| capstan_xlsx::create(sheets).unwrap_err().to_string();
    assert!(err(&[]).contains("at least one sheet"));
    assert!(err(&[("a/b", vec![])]).contains("invalid sheet name"));
    assert!(err(&[("A", vec![]), ("a", vec![])]).contains("same name"));
    assert!(err(&[("A", vec![vec![n(f64::NAN)]])]).contains("cell A1"));
    assert!(err(&[("A", vec![vec![Cell::Empty, n(f64::INFINITY)]])]).contains("cell B1"));
    assert!(err(&[("A", vec![vec![s(&"x".repeat(32_768))]])]).contains("32767"));
}

#[test]
fn strings_with_markup_and_control_characters_survive() {
    let tricky = [
        "<b>&amp;</b>",
        "tab\tand\nnewline",
        "bell\u{7}",
        "_x0041_ literal",
        "日本語 \u{1F600}",
        " lead",
    ];
    let row: Vec<Cell> = tricky.iter().map(|t| s(t)).collect();
    let bytes = capstan_xlsx::create(&[("S", vec![row])]).unwrap();
    let wb = capstan_xlsx::read(&bytes, None, None).unwrap();
    let got: Vec<String> = wb.sheets[0].rows[0].iter().map(Cell::text).collect();
    assert_eq!(got, tricky);
}

#[test]
fn a_hundred_thousand_cells() {
    let rows: Vec<Vec<Cell>> = (0..10_000)
        .map(|r| {
            (0..10)
                .map(|c| {
                    if c % 2 == 0 {
                        n((r * 10 + c) as f64)
                    } else {
                        s(&format!("r{r}c{c}"))
                    }
                })
                .collect()
        })
        .collect();
    let bytes = capstan_xlsx::create(&[("Big", rows)]).unwrap();
    let wb = capstan_xlsx::read(&bytes, None, None).unwrap();
    let sheet = &wb.sheets[0];
    assert_eq!((sheet.row_count(), sheet.col_count()), (10_000, 10));
    assert_eq!(sheet.rows[9_999][9], s("r9999c9"));
    assert_eq!(sheet.rows[5_000][4], n(50_004.0));
    assert_eq!(sheet.to_csv().lines().count(), 10_000);
    let info = capstan_xlsx::info(&bytes).unwrap();
    assert_eq!(info.sheets[0].cells, 100_000);
}

// ---- bad input ----

fn zip_of(files: &[(&str, &[u8])], stored: bool) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let mut opts = SimpleFileOptions::default().large_file(true);
    if stored {
        opts = opts.compression_method(zip::CompressionMethod::Stored);
    }
    for (name, bytes) in files {
        w.start_file(*name, opts).unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

const RELS: &[u8] = b"<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"><Relationship Id=\"rId1\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument\" Target=\"xl/workbook.xml\"/></Relationships>";
const WB: &[u8] = b"<workbook xmlns=\"http://schemas.openxmlformats.org/spreadsheetml/2006/main\" xmlns:r=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships\"><sheets><sheet name=\"S\" sheetId=\"1\" r:id=\"rId1\"/></sheets></workbook>";
const WB_RELS: &[u8] = b"<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\"><Relationship Id=\"rId1\" Type=\"http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet\" Target=\"worksheets/sheet1.xml\"/></Relationships>";

fn xlsx_with_sheet(sheet: &[u8]) -> Vec<u8> {
    zip_of(
        &[
            ("_rels/.rels", RELS),
            ("xl/workbook.xml", WB),
            ("xl/_rels/workbook.xml.rels", WB_RELS),
            ("xl/worksheets/sheet1.xml", sheet),
        ],
        false,
    )
}

fn fails(bytes: &[u8], expect: &str) {
    for e in [
        capstan_xlsx::read(bytes, None, None)
            .map(|_| ())
            .unwrap_err(),
        capstan_xlsx::info(bytes).map(|_| ()).unwrap_err(),
    ] {
        assert!(e.to_string().contains(expect), "expected {expect:?} in {e}");
    }
}

#[test]
fn encrypted_or_legacy_xls_is_refused_by_name() {
    let mut ole = vec![0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];
    ole.extend_from_slice(&[0; 504]);
    fails(&ole, "encrypted or legacy .xls files are not supported");
    assert!(matches!(
        capstan_xlsx::read(&ole, None, None),
        Err(Error::Encrypted { .. })
    ));
}

#[test]
fn corrupted_and_truncated_zips() {
    fails(b"", "the file is empty");
    fails(b"a,b,c\n1,2,3\n", "no zip signature");
    fails(b"PK\x03\x04garbage", "corrupted zip archive");
    let good = sample();
    fails(&good[..good.len() - 30], "corrupted zip archive");
}

#[test]
fn missing_parts() {
    fails(
        &zip_of(&[("word/document.xml", b"<x/>")], false),
        "missing part xl/workbook.xml",
    );
    // The workbook lists a sheet whose part is absent.
    let bytes = zip_of(
        &[
            ("_rels/.rels", RELS),
            ("xl/workbook.xml", WB),
            ("xl/_rels/workbook.xml.rels", WB_RELS),
        ],
        false,
    );
    fails(&bytes, "missing part xl/worksheets/sheet1.xml");
}

#[test]
fn a_word_document_is_not_a_workbook() {
    let docx = capstan_docx::create_from_markdown("# Not a workbook").unwrap();
    fails(
        &docx,
        "not a .xlsx file: its main part word/document.xml is a <document>, not a <workbook> (it looks like a Word document)",
    );
}

#[test]
fn xml_bombs_are_refused() {
    let bomb = b"<?xml version=\"1.0\"?><!DOCTYPE w [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]><worksheet><sheetData><row r=\"1\"><c r=\"A1\" t=\"inlineStr\"><is><t>&b;</t></is></c></row></sheetData></worksheet>";
    fails(
        &xlsx_with_sheet(bomb),
        "part xl/worksheets/sheet1.xml: DOCTYPE and ENTITY declarations are not allowed",
    );
}

#[test]
fn huge_parts_are_refused() {
    let big = vec![b' '; 65 * 1024 * 1024];
    let bytes = zip_of(
        &[
            ("_rels/.rels", RELS),
            ("xl/workbook.xml", WB),
            ("xl/_rels/workbook.xml.rels", WB_RELS),
            ("xl/worksheets/sheet1.xml", &big),
        ],
        true,
    );
    fails(&bytes, "part xl/worksheets/sheet1.xml is too large");
}

#[test]
fn a_sparse_sheet_needs_a_range() {
    let sheet = b"<worksheet><sheetData><row r=\"1\"><c r=\"A1\"><v>1</v></c></row><row r=\"1000000\"><c r=\"XFD1000000\"><v>2</v></c></row></sheetData></worksheet>";
    let bytes = xlsx_with_sheet(sheet);
    let err = capstan_xlsx::read(&bytes, None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("read a smaller range"), "{err}");
    let wb = capstan_xlsx::read(&bytes, None, Some("A1:B2")).unwrap();
    assert_eq!(wb.to_csv(), "1\n");
    assert_eq!(
        capstan_xlsx::info(&bytes).unwrap().sheets[0].range,
        "A1:XFD1000000"
    );
}

#[test]
fn bad_shared_string_index_names_the_cell() {
    let sheet = b"<worksheet><sheetData><row r=\"1\"><c r=\"B1\" t=\"s\"><v>7</v></c></row></sheetData></worksheet>";
    let err = capstan_xlsx::read(&xlsx_with_sheet(sheet), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cell B1") && err.contains("shared string 7"),
        "{err}"
    );
}

#[test]
fn inline_strings_formulas_errors_and_implicit_positions() {
    let sheet = br#"<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>
<row r="1"><c r="A1" t="inlineStr"><is><r><t>rich </t></r><r><t>text</t></r><rPh><t>phonetic</t></rPh></is></c><c t="str"><f>A1&amp;"!"</f><v>rich text!</v></c><c t="e"><v>#DIV/0!</v></c><c s="3"/><c><v>1.5E3</v></c></row>
<row><c t="b"><v>1</v></c><c r="C2" t="d"><v>2024-01-31T00:00:00</v></c></row>
</sheetData></worksheet>"#;
    let wb = capstan_xlsx::read(&xlsx_with_sheet(sheet), None, None).unwrap();
    assert_eq!(
        wb.sheets[0].rows,
        vec![
            vec![
                s("rich text"),
                s("rich text!"),
                s("#DIV/0!"),
                Cell::Empty,
                n(1500.0)
            ],
            vec![
                Cell::Bool(true),
                Cell::Empty,
                s("2024-01-31T00:00:00"),
                Cell::Empty,
                Cell::Empty
            ],
        ]
    );
}
