//! End-to-end indexing through the sandboxed kb-retrieval component: `capstan index`
//! as a user runs it (walk + parse inside wasm, batches over WIT, the host's tantivy
//! writer, commit), on the corpora of `bench/kb/fetch-corpus.sh`, interleaved with plain
//! tantivy indexing the same passages (parsed natively beforehand, not timed; default
//! tokenizer, 2 writer threads and 64 MB, as `cargo bench -p capstan-index --bench kb`):
//! issue 23's yardstick for end-to-end indexing.
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

/// The passages `capstan index` would store for `root`, parsed natively.
fn passages(root: &Path) -> Vec<(String, capstan_kb_parse::Passage)> {
    let opts = capstan_kb_parse::ChunkOptions::default();
    let mut out = Vec::new();
    for c in capstan_kb_parse::walk::walk(root, &opts).candidates {
        let bytes = std::fs::read(root.join(&c.path)).unwrap();
        if let Ok(parsed) = capstan_kb_parse::parse(&c.path, &bytes, &opts) {
            out.extend(parsed.passages.into_iter().map(|p| (c.path.clone(), p)));
        }
    }
    out
}

/// Plain tantivy indexing `passages` into a fresh directory, committed.
fn plain_tantivy(passages: &[(String, capstan_kb_parse::Passage)]) -> Duration {
    use tantivy::schema::{STORED, STRING, Schema, TEXT};
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let mut b = Schema::builder();
    let path = b.add_text_field("path", STRING | STORED);
    let heading = b.add_text_field("heading", TEXT | STORED);
    let text = b.add_text_field("text", TEXT | STORED);
    let ls = b.add_u64_field("line_start", STORED);
    let le = b.add_u64_field("line_end", STORED);
    let index = tantivy::Index::create_in_dir(dir.path(), b.build()).unwrap();
    let mut w: tantivy::IndexWriter = index.writer_with_num_threads(2, 64 << 20).unwrap();
    for (p, d) in passages {
        let mut doc = tantivy::TantivyDocument::default();
        doc.add_text(path, p);
        doc.add_text(heading, &d.heading);
        doc.add_text(text, &d.text);
        doc.add_u64(ls, u64::from(d.line_start));
        doc.add_u64(le, u64::from(d.line_end));
        w.add_document(doc).unwrap();
    }
    w.commit().unwrap();
    t.elapsed()
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

    println!(
        "cargo bench -p capstan --bench kb_index  (best of {runs}, fresh index each run, \
         interleaved with plain tantivy)\n"
    );
    println!(
        "| corpus | files | MB | full index | MB/s | plain tantivy MB/s | capstan vs plain | \
         refresh, nothing changed |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, root) in [("python3.11-doc", python), ("linux-doc", linux)] {
        let home = tempfile::tempdir().unwrap();
        // Warm-up: compiles the component into the cache, as any first use does.
        capstan(home.path(), &root);
        let parsed = passages(&root);
        let indexes = home.path().join("data/indexes");
        let (mut best, mut plain) = (Duration::MAX, Duration::MAX);
        for _ in 0..runs {
            std::fs::remove_dir_all(&indexes).unwrap();
            best = best.min(capstan(home.path(), &root));
            plain = plain.min(plain_tantivy(&parsed));
        }
        let refresh = (0..runs)
            .map(|_| capstan(home.path(), &root))
            .min()
            .unwrap();
        let (files, bytes) = corpus_size(&root);
        let mb = bytes as f64 / 1e6;
        println!(
            "| {name} | {files} | {mb:.2} | {:.2} s | {:.1} | {:.1} | {:.0}% | {:.0} ms |",
            best.as_secs_f64(),
            mb / best.as_secs_f64(),
            mb / plain.as_secs_f64(),
            100.0 * plain.as_secs_f64() / best.as_secs_f64(),
            refresh.as_secs_f64() * 1e3
        );
    }
}
