//! Benchmark (not a test): reading a 100,000-cell .xlsx with capstan-xlsx (native) and
//! with openpyxl, the same file, which openpyxl itself generates.
//!
//! Run: `cargo bench -p capstan-xlsx --bench read` (needs
//! `python3 -m pip install python-docx openpyxl`). Prints a Markdown table.
//!
//! Both sides time the same work from a file on disk: open the workbook and get every
//! cell's value. Python times itself with `time.perf_counter` after importing openpyxl,
//! so interpreter start-up and imports are excluded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

const ITERATIONS: usize = 10;

/// 10,000 rows × 10 columns: numbers, floats and strings (half of them repeated).
const GENERATE: &str = r#"
import sys, openpyxl
wb = openpyxl.Workbook()
ws = wb.active
ws.title = "Data"
for r in range(10000):
    ws.append([
        r, r * 0.5, "name %d" % r, "category %d" % (r % 20), r % 7 == 0,
        r * 1.25, "row %d text value" % r, r % 100, "city %d" % (r % 50), -r,
    ])
wb.save(sys.argv[1])
"#;

const TIME_PYTHON: &str = r#"
import sys, json, time, statistics, openpyxl
path, n, read_only = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
times = []
for _ in range(n):
    t0 = time.perf_counter()
    wb = openpyxl.load_workbook(path, read_only=read_only)
    cells = 0
    for ws in wb.worksheets:
        for row in ws.iter_rows(values_only=True):
            for v in row:
                if v is not None:
                    cells += 1
    if read_only:
        wb.close()
    times.append((time.perf_counter() - t0) * 1000)
print(json.dumps({"median": statistics.median(times), "min": min(times), "cells": cells}))
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
        "python3 failed (is openpyxl installed? `python3 -m pip install python-docx openpyxl`):\n{}",
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

/// (median ms, min ms, cells with a value) over the iterations.
fn time_ours(path: &Path, csv: bool) -> (f64, f64, usize) {
    let mut times = Vec::new();
    let mut cells = 0;
    for _ in 0..ITERATIONS {
        let t0 = Instant::now();
        let bytes = std::fs::read(path).unwrap();
        let wb = capstan_xlsx::read(&bytes, None, None).unwrap();
        cells = wb
            .sheets
            .iter()
            .flat_map(|s| s.rows.iter().flatten())
            .filter(|c| !c.is_empty())
            .count();
        if csv {
            std::hint::black_box(wb.to_csv());
        }
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    (median(times), min, cells)
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("100k-cells.xlsx");
    let p = path.to_str().unwrap();
    python(GENERATE, &[p]);
    let size = std::fs::metadata(&path).unwrap().len();

    let (ours_med, ours_min, ours_cells) = time_ours(&path, false);
    let (csv_med, csv_min, _) = time_ours(&path, true);
    let ro = python(TIME_PYTHON, &[p, &ITERATIONS.to_string(), "1"]);
    let full = python(TIME_PYTHON, &[p, &ITERATIONS.to_string(), "0"]);
    let (ro_med, ro_min, ro_cells) = (
        field(&ro, "median"),
        field(&ro, "min"),
        field(&ro, "cells") as usize,
    );
    let (full_med, full_min) = (field(&full, "median"), field(&full, "min"));
    let version = python("import openpyxl; print(openpyxl.__version__)", &[])
        .trim()
        .to_owned();

    println!(
        "\n### Reading a 100,000-cell .xlsx ({} KiB, 10,000 rows × 10 columns; median of {ITERATIONS} runs)\n",
        size / 1024
    );
    println!("| reader | work | median ms | min ms | vs openpyxl read-only |");
    println!("| --- | --- | ---: | ---: | ---: |");
    println!(
        "| capstan-xlsx (Rust, native, release) | open + every cell's value | {ours_med:.1} | {ours_min:.1} | {:.1}× faster |",
        ro_med / ours_med
    );
    println!(
        "| capstan-xlsx (Rust, native, release) | open + every cell + `to_csv()` | {csv_med:.1} | {csv_min:.1} | {:.1}× faster |",
        ro_med / csv_med
    );
    println!(
        "| openpyxl {version} `read_only=True` | open + every cell's value | {ro_med:.1} | {ro_min:.1} | 1.0× |"
    );
    println!(
        "| openpyxl {version} (default mode) | open + every cell's value | {full_med:.1} | {full_min:.1} | {:.1}× slower |",
        full_med / ro_med
    );
    println!(
        "\nCells with a value, as a check that both did the same work: capstan {ours_cells}, openpyxl {ro_cells}."
    );
    println!(
        "\nReproduce: `cargo bench -p capstan-xlsx --bench read` (python3 with `python3 -m pip install python-docx openpyxl`)."
    );
}
