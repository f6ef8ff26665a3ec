//! docx (bundled) and xlsx (dropped in by a user manifest alone: no host code
//! names it) through the real binary, the approval gate for writes, and files
//! that python-docx and openpyxl (libraries no one here wrote) read back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{Home, plugin_entry};
use serde_json::{Value, json};

fn invoke(home: &Home, ws: &Path, kind: &str, op: &str, approve: &str, input: Value) -> Value {
    let out = home
        .capstan()
        .args([
            "invoke",
            kind,
            "--json",
            "--approve",
            approve,
            "--operation",
            op,
            "--workspace",
        ])
        .arg(ws)
        .args(["--input", &input.to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap()
}

fn python(script: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("python3 is needed");
    assert!(
        out.status.success(),
        "python failed (run `python3 -m pip install python-docx openpyxl`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn docx_round_trip_and_python_docx_reads_what_capstan_wrote() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    let md = "# Quarterly report\n\nRevenue grew **12%**.\n\n- north\n- south\n";
    let created = invoke(
        &home,
        ws.path(),
        "docx",
        "create",
        "all",
        json!({"path": "report.docx", "markdown": md}),
    );
    assert_eq!(created["ok"], true, "{created}");
    let read = invoke(
        &home,
        ws.path(),
        "docx",
        "read",
        "none",
        json!({"path": "report.docx"}),
    );
    let text = read["data"]["markdown"].as_str().unwrap();
    assert!(
        text.contains("# Quarterly report") && text.contains("**12%**") && text.contains("- south"),
        "{text}"
    );

    let replaced = invoke(
        &home,
        ws.path(),
        "docx",
        "replace",
        "all",
        json!({"path": "report.docx", "find": "grew", "replace": "rose"}),
    );
    assert_eq!(replaced["ok"], true, "{replaced}");
    let out = python(&format!(
        "import docx; d = docx.Document({:?}); print('|'.join(p.text for p in d.paragraphs)); print(d.paragraphs[0].style.name)",
        ws.path().join("report.docx").display().to_string()
    ));
    assert!(
        out.contains("Quarterly report|Revenue rose 12%.|north|south"),
        "{out}"
    );
    assert!(out.contains("Heading 1"), "{out}");
}

#[test]
fn document_writes_pass_the_approval_gate_and_nothing_is_written_when_denied() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    let denied = invoke(
        &home,
        ws.path(),
        "docx",
        "create",
        "none",
        json!({"path": "x.docx", "markdown": "hi"}),
    );
    assert_eq!(denied["reason"], "denied", "{denied}");
    assert!(!ws.path().join("x.docx").exists());
    let outside = invoke(
        &home,
        ws.path(),
        "docx",
        "create",
        "all",
        json!({"path": "../x.docx", "markdown": "hi"}),
    );
    assert_eq!(outside["reason"], "invalid-input", "{outside}");
    std::fs::write(ws.path().join("broken.docx"), b"PK\x03\x04garbage").unwrap();
    let broken = invoke(
        &home,
        ws.path(),
        "docx",
        "read",
        "none",
        json!({"path": "broken.docx"}),
    );
    assert_eq!(broken["ok"], false);
    assert!(
        broken["message"].as_str().unwrap().contains("broken.docx"),
        "{broken}"
    );
}

#[test]
fn docx_reads_a_document_python_docx_wrote() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    let path = ws.path().join("theirs.docx");
    python(&format!(
        "import docx\nd = docx.Document()\nd.add_heading('Plan', 1)\np = d.add_paragraph('Ship ')\np.add_run('on Friday').bold = True\nt = d.add_table(rows=1, cols=2)\nt.cell(0,0).text='a'\nt.cell(0,1).text='b'\nd.save({:?})",
        path.display().to_string()
    ));
    let read = invoke(
        &home,
        ws.path(),
        "docx",
        "read",
        "none",
        json!({"path": "theirs.docx"}),
    );
    let md = read["data"]["markdown"].as_str().unwrap_or_default();
    assert!(
        md.contains("# Plan") && md.contains("Ship **on Friday**") && md.contains("| a | b |"),
        "{read}"
    );
}

#[test]
fn xlsx_drops_in_through_a_user_manifest_and_openpyxl_reads_it() {
    let extra = "[plugin.permissions]\nworkspace = \"read-write\"";
    let home = Home::new(&plugin_entry("xlsx", "xlsx", &["xlsx"], extra));
    let ws = tempfile::tempdir().unwrap();
    let rows = json!([["name", "qty"], ["bolts", 12], ["nuts", 30.5]]);
    let made = invoke(
        &home,
        ws.path(),
        "xlsx",
        "create",
        "all",
        json!({"path": "stock.xlsx", "sheets": [{"name": "Stock", "rows": rows}]}),
    );
    assert_eq!(made["ok"], true, "{made}");
    let read = invoke(
        &home,
        ws.path(),
        "xlsx",
        "read",
        "none",
        json!({"path": "stock.xlsx"}),
    );
    let csv = read["data"]["sheets"][0]["csv"]
        .as_str()
        .unwrap_or_default();
    assert!(
        csv.contains("bolts,12") && csv.contains("nuts,30.5"),
        "{read}"
    );
    let out = python(&format!(
        "import openpyxl; ws = openpyxl.load_workbook({:?})['Stock']; print([[c.value for c in r] for r in ws.iter_rows()])",
        ws.path().join("stock.xlsx").display().to_string()
    ));
    assert!(
        out.contains("['bolts', 12]") && out.contains("['nuts', 30.5]"),
        "{out}"
    );
    // The host has no built-in xlsx: without the manifest entry the kind is unknown.
    let bare = Home::new("");
    let none = invoke(
        &bare,
        ws.path(),
        "xlsx",
        "read",
        "none",
        json!({"path": "stock.xlsx"}),
    );
    assert_eq!(none["reason"], "unsupported-capability");
}
