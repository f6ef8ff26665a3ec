//! Interop with python-docx (a library no one here wrote), both ways:
//! files it writes are read correctly by us, and files we write (create, replace,
//! append) open in it with the content we meant.
//!
//! Needs `python3 -m pip install python-docx openpyxl`; without it these tests fail with
//! that instruction (they do not skip).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use capstan_docx::ParagraphKind;
use common::python;

/// A document python-docx builds: title, headings, lists, a table, bold and italic runs,
/// and a paragraph whose text is split across differently formatted runs.
const MAKE_DOCX: &str = r#"
import sys, docx
d = docx.Document()
d.core_properties.title = "Interop title"
d.add_heading("Document title", 0)
d.add_heading("Introduction", 1)
p = d.add_paragraph("Plain then ")
p.add_run("bold").bold = True
p.add_run(" then ")
p.add_run("italic").italic = True
p.add_run(".")
d.add_heading("Lists", 2)
d.add_paragraph("apple", style="List Bullet")
d.add_paragraph("banana", style="List Bullet")
d.add_paragraph("banana split", style="List Bullet 2")
d.add_paragraph("first step", style="List Number")
d.add_paragraph("second step", style="List Number")
t = d.add_table(rows=3, cols=3)
data = [["Name", "Qty", "Note"], ["Widget", "4", "a|b"], ["Gadget", "7", ""]]
for r, row in enumerate(data):
    for c, v in enumerate(row):
        t.cell(r, c).text = v
# Split runs: "The quick brown fox" as "The qu" (bold) + "ick bro" (italic) + "wn fox".
p = d.add_paragraph()
r = p.add_run("The qu"); r.bold = True
r = p.add_run("ick bro"); r.italic = True
p.add_run("wn fox")
d.add_heading("Deep", 3)
d.add_paragraph("Last paragraph.")
d.save(sys.argv[1])
"#;

/// Prints a document as lines python-docx sees: `P|style|text|runs` and `T|cells`.
const DUMP_DOCX: &str = r#"
import sys, docx
d = docx.Document(sys.argv[1])
print("TITLE|" + (d.core_properties.title or ""))
for p in d.paragraphs:
    runs = ",".join(
        ("B" if r.bold else "") + ("I" if r.italic else "") + ":" + r.text
        for r in p.runs if r.text
    )
    print("P|" + p.style.name + "|" + p.text + "|" + runs)
for t in d.tables:
    for row in t.rows:
        print("T|" + "|".join(c.text for c in row.cells))
"#;

fn make_python_docx(dir: &std::path::Path) -> Vec<u8> {
    let path = dir.join("python.docx");
    python(MAKE_DOCX, &[&path]);
    std::fs::read(&path).unwrap()
}

fn dump(bytes: &[u8], dir: &std::path::Path) -> Vec<String> {
    let path = dir.join("ours.docx");
    std::fs::write(&path, bytes).unwrap();
    python(DUMP_DOCX, &[&path])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn we_read_what_python_docx_writes() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = make_python_docx(dir.path());
    let doc = capstan_docx::read(&bytes).unwrap();
    assert_eq!(doc.title.as_deref(), Some("Interop title"));
    let paras: Vec<_> = doc.paragraphs().filter(|p| !p.text().is_empty()).collect();
    let summary: Vec<(String, ParagraphKind)> =
        paras.iter().map(|p| (p.text(), p.kind.clone())).collect();
    let item = |level, ordered, number| ParagraphKind::ListItem {
        level,
        ordered,
        number,
    };
    assert_eq!(
        summary,
        vec![
            ("Document title".into(), ParagraphKind::Title),
            ("Introduction".into(), ParagraphKind::Heading(1)),
            ("Plain then bold then italic.".into(), ParagraphKind::Normal),
            ("Lists".into(), ParagraphKind::Heading(2)),
            ("apple".into(), item(0, false, None)),
            ("banana".into(), item(0, false, None)),
            ("banana split".into(), item(1, false, None)),
            ("first step".into(), item(0, true, Some(1))),
            ("second step".into(), item(0, true, Some(2))),
            ("The quick brown fox".into(), ParagraphKind::Normal),
            ("Deep".into(), ParagraphKind::Heading(3)),
            ("Last paragraph.".into(), ParagraphKind::Normal),
        ]
    );
    let bold: Vec<&str> = paras[2]
        .runs
        .iter()
        .filter(|r| r.bold)
        .map(|r| r.text.as_str())
        .collect();
    let italic: Vec<&str> = paras[2]
        .runs
        .iter()
        .filter(|r| r.italic)
        .map(|r| r.text.as_str())
        .collect();
    assert_eq!((bold, italic), (vec!["bold"], vec!["italic"]));

    let table = doc.tables().next().expect("the table");
    let cells: Vec<Vec<String>> = table
        .rows
        .iter()
        .map(|r| r.iter().map(|c| c.text()).collect())
        .collect();
    assert_eq!(
        cells,
        vec![
            vec!["Name", "Qty", "Note"],
            vec!["Widget", "4", "a|b"],
            vec!["Gadget", "7", ""]
        ]
    );

    let md = doc.to_markdown();
    for line in [
        "# Document title",
        "# Introduction",
        "Plain then **bold** then *italic*.",
        "## Lists",
        "- apple",
        "   - banana split",
        "1. first step",
        "2. second step",
        "| Name | Qty | Note |",
        "| Widget | 4 | a\\|b |",
        "**The qu***ick bro*wn fox",
        "### Deep",
    ] {
        assert!(md.lines().any(|l| l == line), "missing {line:?} in:\n{md}");
    }
    let info = capstan_docx::info(&bytes).unwrap();
    assert_eq!(info.tables, 1);
    assert_eq!(info.paragraphs, 12);
    assert_eq!(info.headings.len(), 4);
}

#[test]
fn replace_across_python_docx_split_runs() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = make_python_docx(dir.path());
    let (out, count) = capstan_docx::replace(&bytes, "quick brown", "slow red").unwrap();
    assert_eq!(count, 1);
    let lines = dump(&out, dir.path());
    // The match starts in the bold run "The qu": the replacement is bold, the rest of the
    // italic run is gone, "wn" removed from the plain run.
    assert!(
        lines.contains(&"P|Normal|The slow red fox|B:The slow red,: fox".to_owned()),
        "{lines:#?}"
    );
    // Text in table cells is replaced too; python-docx still reads the whole package.
    let (out, count) = capstan_docx::replace(&out, "Widget", "Sprocket").unwrap();
    assert_eq!(count, 1);
    let lines = dump(&out, dir.path());
    assert!(lines.contains(&"T|Sprocket|4|a|b".to_owned()), "{lines:#?}");
    assert!(lines.contains(&"TITLE|Interop title".to_owned()));
}

#[test]
fn python_docx_reads_what_we_create() {
    let dir = tempfile::tempdir().unwrap();
    let md = "# Plan\n\nIntro with **bold** and *italic* words.\n\n## Steps\n\n1. one\n2. two\n\n- dot\n  - deeper\n\n| K | V |\n|---|---|\n| a | 1 |\n| b | 2 |\n\n> note\n";
    let bytes = capstan_docx::create_from_markdown(md).unwrap();
    let lines = dump(&bytes, dir.path());
    let expected = [
        "TITLE|Plan",
        "P|Heading 1|Plan|:Plan",
        "P|Normal|Intro with bold and italic words.|:Intro with ,B:bold,: and ,I:italic,: words.",
        "P|Heading 2|Steps|:Steps",
        "P|List Number|one|:one",
        "P|List Number|two|:two",
        "P|List Bullet|dot|:dot",
        "P|List Bullet|deeper|:deeper",
        "P|Quote|note|:note",
        "T|K|V",
        "T|a|1",
        "T|b|2",
    ];
    assert_eq!(lines, expected);
}

#[test]
fn python_docx_reads_what_we_append() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = make_python_docx(dir.path());
    let out = capstan_docx::append(
        &bytes,
        "## Appendix\n\nAdded **here**.\n\n- extra item\n\n1. counted\n",
    )
    .unwrap();
    let lines = dump(&out, dir.path());
    let n = lines.len();
    let tail: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("P|"))
        .map(String::as_str)
        .collect();
    let tail = &tail[tail.len() - 4..];
    assert_eq!(
        tail,
        [
            "P|Heading 2|Appendix|:Appendix",
            "P|Normal|Added here.|:Added ,B:here,:.",
            "P|List Bullet|extra item|:extra item",
            "P|List Number|counted|:counted",
        ],
        "{lines:#?}"
    );
    assert!(n > 10);
    // and we read it back with the new list numbered from 1
    let doc = capstan_docx::read(&out).unwrap();
    let last = doc
        .paragraphs()
        .filter(|p| !p.text().is_empty())
        .last()
        .unwrap();
    assert_eq!(
        last.kind,
        ParagraphKind::ListItem {
            level: 0,
            ordered: true,
            number: Some(1)
        }
    );
}
