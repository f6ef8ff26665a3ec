//! End-to-end indexing through the sandboxed kb-retrieval component: `capstan index`
//! as a user runs it (walk + parse inside wasm, batches over WIT, the host's tantivy
//! writer, commit), on the corpora of `bench/kb/fetch-corpus.sh`.
//!
//! Run: bash bench/kb/fetch-corpus.sh && cargo bench -p capstan --bench kb_index
//! (`KB_INDEX_RUNS=N` changes the number of timed runs, default 5; the best is kept
//! because the machine is shared and the best run is the least disturbed.)
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A bench prints its own figures for the developer who runs it.
#![allow(clippy::disallowed_macros)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn capstan(home: &Path, workspace: &Path) -> Duration {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .env("CAPSTAN_HOME", home)
        .args(["index", "--workspace"])
        .arg(workspace)
        .output()
        .expect("run capstan");
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "capstan index failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// Files and bytes `capstan index` reads: what its summary reports.
fn corpus_size(root: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                files += 1;
                bytes += e.metadata().unwrap().len();
            }
        }
    }
    (files, bytes)
}

fn main() {
    let corpus = PathBuf::from(
        std::env::var("CAPSTAN_BENCH_CORPUS")
            .unwrap_or_else(|_| "/work/.cache/capstan-bench".into()),
    );
    let python = corpus.join("python3.11-doc/usr/share/doc/python3.11/html/_sources");
    let linux = std::fs::read_dir(corpus.join("linux-doc/usr/share/doc"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("html/_sources"))
        .find(|p| p.is_dir());
    let (Some(linux), true) = (linux, python.is_dir()) else {
        eprintln!(
            "corpus not found under {}: run `bash bench/kb/fetch-corpus.sh` first",
            corpus.display()
        );
        std::process::exit(2);
    };
    let runs: usize = std::env::var("KB_INDEX_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);

    println!("cargo bench -p capstan --bench kb_index  (best of {runs}, fresh index each run)\n");
    println!("| corpus | files | MB | full index | MB/s | refresh, nothing changed |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, root) in [("python3.11-doc", python), ("linux-doc", linux)] {
        let home = tempfile::tempdir().unwrap();
        // Warm-up: compiles the component into the cache, as any first use does.
        capstan(home.path(), &root);
        let indexes = home.path().join("data/indexes");
        let mut best = Duration::MAX;
        for _ in 0..runs {
            std::fs::remove_dir_all(&indexes).unwrap();
            best = best.min(capstan(home.path(), &root));
        }
        let refresh = (0..runs)
            .map(|_| capstan(home.path(), &root))
            .min()
            .unwrap();
        let (files, bytes) = corpus_size(&root);
        let mb = bytes as f64 / 1e6;
        println!(
            "| {name} | {files} | {mb:.2} | {:.2} s | {:.1} | {:.0} ms |",
            best.as_secs_f64(),
            mb / best.as_secs_f64(),
            refresh.as_secs_f64() * 1e3
        );
    }
}
