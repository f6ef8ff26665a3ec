//! Interop with openpyxl (a library no one here wrote), both ways.
//!
//! Needs `python3 -m pip install python-docx openpyxl`; without it these tests fail with
//! that instruction (they do not skip).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use capstan_xlsx::Cell;
use common::python;

const MAKE: &str = r#"
import sys, datetime, openpyxl
wb = openpyxl.Workbook()
ws = wb.active
ws.title = "Sales"
ws.append(["Region", "Units", "Price", "Active", "Since"])
ws.append(["North", 10, 2.5, True, datetime.date(2024, 1, 31)])
ws.append(["South, east", -3, 0.1, False, None])
ws.append(["Ünïcödé 日本", None, 1e-9, None, "text"])
ws["G7"] = "far away"
other = wb.create_sheet("Hidden")
other.sheet_state = "hidden"
other["B2"] = "secret"
wb.create_sheet("Blank")
wb.save(sys.argv[1])
"#;

#[test]
fn we_read_what_openpyxl_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("py.xlsx");
    python(MAKE, &[&path]);
    let bytes = std::fs::read(&path).unwrap();
    let wb = capstan_xlsx::read(&bytes, None, None).unwrap();
    let names: Vec<&str> = wb.sheets.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Sales", "Hidden", "Blank"]);
    let sales = &wb.sheets[0];
    assert_eq!(sales.range(), "A1:G7");
    let s = |v: &str| Cell::String(v.to_owned());
    assert_eq!(
        sales.rows[0][..5],
        [s("Region"), s("Units"), s("Price"), s("Active"), s("Since")]
    );
    // Dates come back as Excel serial numbers: 2024-01-31 is 45322.
    assert_eq!(
        sales.rows[1][..5],
        [
            s("North"),
            Cell::Number(10.0),
            Cell::Number(2.5),
            Cell::Bool(true),
            Cell::Number(45322.0)
        ]
    );
    assert_eq!(
        sales.rows[2][..4],
        [
            s("South, east"),
            Cell::Number(-3.0),
            Cell::Number(0.1),
            Cell::Bool(false)
        ]
    );
    assert_eq!(
        sales.rows[3][..5],
        [
            s("Ünïcödé 日本"),
            Cell::Empty,
            Cell::Number(1e-9),
            Cell::Empty,
            s("text")
        ]
    );
    assert_eq!(sales.rows[6][6], s("far away"));
    let csv = capstan_xlsx::read(&bytes, Some("Sales"), Some("A1:C3"))
        .unwrap()
        .to_csv();
    assert_eq!(
        csv,
        "Region,Units,Price\nNorth,10,2.5\n\"South, east\",-3,0.1\n"
    );

    let info = capstan_xlsx::info(&bytes).unwrap();
    let got: Vec<(&str, u32, u32, bool)> = info
        .sheets
        .iter()
        .map(|s| (s.name.as_str(), s.rows, s.cols, s.hidden))
        .collect();
    assert_eq!(
        got,
        [
            ("Sales", 7, 7, false),
            ("Hidden", 2, 2, true),
            ("Blank", 0, 0, false)
        ]
    );
}

const DUMP: &str = r#"
import sys, json, openpyxl
wb = openpyxl.load_workbook(sys.argv[1])
out = {}
for ws in wb.worksheets:
    out[ws.title] = [[{"t": type(c.value).__name__, "v": c.value} for c in row] for row in ws.iter_rows(min_row=1, min_col=1)]
print(json.dumps(out, ensure_ascii=False))
"#;

#[test]
fn openpyxl_reads_what_we_create() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ours.xlsx");
    let s = |v: &str| Cell::String(v.to_owned());
    let bytes = capstan_xlsx::create(&[
        (
            "First",
            vec![
                vec![
                    s("a"),
                    Cell::Number(1.0),
                    Cell::Number(2.5),
                    Cell::Bool(true),
                ],
                vec![
                    Cell::Empty,
                    s(" spaced "),
                    Cell::Number(-1e20),
                    Cell::Bool(false),
                ],
                vec![s("x<&>\"y"), s("a"), Cell::Empty, s("日本")],
            ],
        ),
        ("Second sheet", vec![vec![s("only")]]),
    ])
    .unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let out = python(DUMP, &[&path]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cell = |sheet: &str, r: usize, c: usize| v[sheet][r][c].clone();
    assert_eq!(cell("First", 0, 0)["v"], "a");
    assert_eq!(cell("First", 0, 1)["t"], "int");
    assert_eq!(cell("First", 0, 1)["v"], 1);
    assert_eq!(cell("First", 0, 2)["v"], 2.5);
    assert_eq!(cell("First", 0, 3)["t"], "bool");
    assert_eq!(cell("First", 0, 3)["v"], true);
    assert_eq!(cell("First", 1, 0)["t"], "NoneType");
    assert_eq!(cell("First", 1, 1)["v"], " spaced ");
    assert_eq!(cell("First", 1, 2)["v"], -1e20);
    assert_eq!(cell("First", 1, 2)["t"], "float");
    assert!(cell("First", 2, 2)["v"].is_null());
    assert_eq!(cell("First", 2, 0)["v"], "x<&>\"y");
    assert_eq!(cell("First", 2, 3)["v"], "日本");
    assert_eq!(cell("Second sheet", 0, 0)["v"], "only");
}

#[test]
fn a_hundred_thousand_cell_workbook_from_openpyxl() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.xlsx");
    let sums = python(
        r#"
import sys, openpyxl
wb = openpyxl.Workbook(write_only=True)
ws = wb.create_sheet("Big")
total = 0
for r in range(10000):
    row = []
    for c in range(10):
        if c % 2 == 0:
            row.append(r * 10 + c); total += r * 10 + c
        else:
            row.append("r%dc%d" % (r, c))
    ws.append(row)
wb.save(sys.argv[1])
print(total)
"#,
        &[&path],
    );
    let bytes = std::fs::read(&path).unwrap();
    let wb = capstan_xlsx::read(&bytes, None, None).unwrap();
    let sheet = &wb.sheets[0];
    assert_eq!((sheet.row_count(), sheet.col_count()), (10_000, 10));
    let total: f64 = sheet
        .rows
        .iter()
        .flatten()
        .filter_map(|c| {
            if let Cell::Number(n) = c {
                Some(*n)
            } else {
                None
            }
        })
        .sum();
    assert_eq!(total, sums.trim().parse::<f64>().unwrap());
    assert_eq!(sheet.rows[1234][7], Cell::String("r1234c7".into()));
    assert_eq!(capstan_xlsx::info(&bytes).unwrap().sheets[0].cells, 100_000);
}
