//! Benchmark (not a test): reading a 100-page .docx with capstan-docx (native) and with
//! python-docx, the same file, which python-docx itself generates.
//!
//! Run: `cargo bench -p capstan-docx --bench read` (needs
//! `python3 -m pip install python-docx openpyxl`). Prints a Markdown table.
//!
//! Both sides time the same work from a file on disk: open and parse the document, then
//! collect the text of every paragraph and table cell. Python times itself with
//! `time.perf_counter` after importing python-docx, so interpreter start-up and imports
//! are excluded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

const ITERATIONS: usize = 20;

/// 100 pages (as LibreOffice lays it out): each a heading, five 55-word paragraphs with
/// bold and italic runs, a three-item list and a page break; a 6×4 table every tenth page.
const GENERATE: &str = r#"
import sys, docx
from docx.enum.text import WD_BREAK
words = ("capstan agents sandbox workspace policy approval retrieval passage component "
         "plugin manifest capability host terminal document table heading paragraph").split()
d = docx.Document()
d.add_heading("Benchmark document", 0)
for page in range(100):
    d.add_heading("Section %d" % (page + 1), 1)
    for para in range(5):
        p = d.add_paragraph()
        for k in range(55):
            w = words[(page * 5 + para * 3 + k) % len(words)]
            r = p.add_run(w + " ")
            if k % 17 == 0:
                r.bold = True
            elif k % 23 == 0:
                r.italic = True
    for item in range(3):
        d.add_paragraph("list item %d of section %d with a few words" % (item + 1, page + 1), style="List Bullet")
    if page % 10 == 9:
        t = d.add_table(rows=6, cols=4)
        for r in range(6):
            for c in range(4):
                t.cell(r, c).text = "r%dc%d" % (r, c)
    d.paragraphs[-1].add_run().add_break(WD_BREAK.PAGE)
d.save(sys.argv[1])
"#;

const TIME_PYTHON: &str = r#"
import sys, json, time, statistics, docx
path, n = sys.argv[1], int(sys.argv[2])
times = []
for _ in range(n):
    t0 = time.perf_counter()
    d = docx.Document(path)
    texts = [p.text for p in d.paragraphs]
    for t in d.tables:
        for row in t.rows:
            for c in row.cells:
                texts.append(c.text)
    times.append((time.perf_counter() - t0) * 1000)
print(json.dumps({"median": statistics.median(times), "min": min(times), "chars": sum(len(t) for t in texts)}))
"#;

fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 must be installed for this benchmark");
    assert!(
        out.status.success(),
        "python3 failed (is python-docx installed? `python3 -m pip install python-docx openpyxl`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn field(json: &str, key: &str) -> f64 {
    let at = json.find(&format!("\"{key}\": ")).unwrap() + key.len() + 4;
    json[at..]
        .split([',', '}'])
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// (median ms, min ms, characters of text) over the iterations.
fn time_ours(path: &Path, render: impl Fn(&capstan_docx::Document) -> usize) -> (f64, f64, usize) {
    let mut times = Vec::new();
    let mut chars = 0;
    for _ in 0..ITERATIONS {
        let t0 = Instant::now();
        let bytes = std::fs::read(path).unwrap();
        let doc = capstan_docx::read(&bytes).unwrap();
        chars = render(&doc);
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    (median(times), min, chars)
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("100-pages.docx");
    let p = path.to_str().unwrap();
    python(GENERATE, &[p]);
    let size = std::fs::metadata(&path).unwrap().len();
    let info = capstan_docx::info(&std::fs::read(&path).unwrap()).unwrap();

    let (ours_med, ours_min, ours_chars) = time_ours(&path, |d| {
        let mut n = 0;
        for p in d.all_paragraphs() {
            n += p.text().chars().count();
        }
        n
    });
    let (md_med, md_min, _) = time_ours(&path, |d| d.to_markdown().len());
    let py = python(TIME_PYTHON, &[p, &ITERATIONS.to_string()]);
    let (py_med, py_min, py_chars) = (
        field(&py, "median"),
        field(&py, "min"),
        field(&py, "chars") as usize,
    );

    println!(
        "\n### Reading a 100-page .docx ({} KiB, {} paragraphs, {} tables, {} words; median of {ITERATIONS} runs)\n",
        size / 1024,
        info.paragraphs,
        info.tables,
        info.words
    );
    println!("| reader | work | median ms | min ms | vs python-docx |");
    println!("| --- | --- | ---: | ---: | ---: |");
    println!(
        "| capstan-docx (Rust, native, release) | open + parse + all paragraph/cell text | {ours_med:.1} | {ours_min:.1} | {:.1}× faster |",
        py_med / ours_med
    );
    println!(
        "| capstan-docx (Rust, native, release) | open + parse + `to_markdown()` | {md_med:.1} | {md_min:.1} | {:.1}× faster |",
        py_med / md_med
    );
    println!(
        "| python-docx {} | open + parse + all paragraph/cell text | {py_med:.1} | {py_min:.1} | 1.0× |",
        py_version()
    );
    println!(
        "\nText extracted, as a check that both did the same work: capstan {ours_chars} characters, python-docx {py_chars}."
    );
    println!(
        "\nReproduce: `cargo bench -p capstan-docx --bench read` (python3 with `python3 -m pip install python-docx openpyxl`)."
    );
}

fn py_version() -> String {
    python(
        "import importlib.metadata as m; print(m.version('python-docx'))",
        &[],
    )
    .trim()
    .to_owned()
}
