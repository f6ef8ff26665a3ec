//! Event-append throughput and latency: the store's hot path (one event per
//! streamed token).
//!
//! Run: `cargo bench -p capstan-store --bench events`
//! (set `CAPSTAN_BENCH_DIR` to put the database on a particular disk; the
//! default is the system temp dir; `CAPSTAN_BENCH_EVENTS` changes the count).
//!
//! Prints a Markdown table: events/s, and p50/p99 latency of one call
//! (`append_event`, one `append_events` batch, one `EventWriter::push`), plus a
//! durable write (`add_turn`, committed with an fsync) for scale.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_store::{EventRecord, EventWriter, Role, Store};

const BATCH: usize = 100;

struct Row {
    mode: String,
    events: usize,
    total: Duration,
    /// Latency of each call, sorted.
    calls: Vec<Duration>,
    per: &'static str,
}

fn main() {
    let n: usize = std::env::var("CAPSTAN_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let base = std::env::var_os("CAPSTAN_BENCH_DIR")
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&base).expect("temp dir for the bench database");
    let store = Arc::new(Store::open(dir.path().join("capstan.db")).expect("open"));
    let session = store.create_session("bench", None).unwrap();
    let mut rows = Vec::new();

    // 1. One by one: one autocommit transaction per event.
    let run = store.start_run(&session.id, "bench").unwrap();
    let events = make_events(&run.id, n);
    let mut calls = Vec::with_capacity(n);
    let start = Instant::now();
    for e in &events {
        let t = Instant::now();
        store
            .append_event(&e.run_id, e.seq, &e.ts, &e.kind, &e.json)
            .unwrap();
        calls.push(t.elapsed());
    }
    rows.push(row(
        "`append_event` (1 per commit)",
        n,
        start.elapsed(),
        calls,
        "call",
    ));

    // 2. Batches of 100: one transaction per batch.
    let run = store.start_run(&session.id, "bench").unwrap();
    let events = make_events(&run.id, n);
    let mut calls = Vec::with_capacity(n / BATCH + 1);
    let start = Instant::now();
    for chunk in events.chunks(BATCH) {
        let t = Instant::now();
        store.append_events(chunk).unwrap();
        calls.push(t.elapsed());
    }
    rows.push(row(
        &format!("`append_events` (batches of {BATCH})"),
        n,
        start.elapsed(),
        calls,
        "batch",
    ));

    // 3. EventWriter: push never blocks; total includes the final flush.
    let run = store.start_run(&session.id, "bench").unwrap();
    let events = make_events(&run.id, n);
    let writer = EventWriter::new(store.clone());
    let mut calls = Vec::with_capacity(n);
    let start = Instant::now();
    for e in events {
        let t = Instant::now();
        writer.push(e).unwrap();
        calls.push(t.elapsed());
    }
    writer.flush().unwrap();
    rows.push(row(
        "`EventWriter::push` (background batches)",
        n,
        start.elapsed(),
        calls,
        "push",
    ));
    drop(writer);
    assert_eq!(store.events(&run.id).unwrap().len(), n);

    // 4. For scale: a durable write (synchronous = FULL, one fsync).
    let turns = 200;
    let mut calls = Vec::with_capacity(turns);
    let start = Instant::now();
    for i in 0..turns {
        let t = Instant::now();
        store
            .add_turn(&session.id, None, Role::User, &format!("turn {i}"))
            .unwrap();
        calls.push(t.elapsed());
    }
    rows.push(row(
        "`add_turn` (durable, fsync)",
        turns,
        start.elapsed(),
        calls,
        "call",
    ));

    // Replay of one run, for scale.
    let t = Instant::now();
    let replayed = store.events(&run.id).unwrap().len();
    let replay = t.elapsed();

    println!();
    println!("Command: `cargo bench -p capstan-store --bench events`");
    println!(
        "Database: {} ({} events per mode, {}-byte envelopes, WAL, synchronous=NORMAL)",
        dir.path().display(),
        n,
        make_events("run_0123456789ab", 1)[0].json.len()
    );
    println!();
    println!("| mode | rows | total | rows/s | p50 per call | p99 per call | max per call |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let rate = r.events as f64 / r.total.as_secs_f64();
        println!(
            "| {} | {} | {:.3} s | {:.0} | {} µs / {} | {} µs / {} | {} µs |",
            r.mode,
            r.events,
            r.total.as_secs_f64(),
            rate,
            fmt_us(pct(&r.calls, 50.0)),
            r.per,
            fmt_us(pct(&r.calls, 99.0)),
            r.per,
            fmt_us(pct(&r.calls, 100.0)),
        );
    }
    println!();
    println!(
        "Replay of {replayed} events (`Store::events`): {:.1} ms",
        replay.as_secs_f64() * 1e3
    );
}

fn row(
    mode: &str,
    events: usize,
    total: Duration,
    mut calls: Vec<Duration>,
    per: &'static str,
) -> Row {
    calls.sort_unstable();
    Row {
        mode: mode.to_owned(),
        events,
        total,
        calls,
        per,
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i]
}

fn fmt_us(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// Realistic `response.delta` envelopes, built before timing starts.
fn make_events(run: &str, n: usize) -> Vec<EventRecord> {
    let ts = capstan_store::now_rfc3339();
    (0..n as u64)
        .map(|seq| EventRecord {
            run_id: run.to_owned(),
            seq,
            ts: ts.clone(),
            kind: "response.delta".to_owned(),
            json: format!(
                r#"{{"seq":{seq},"run_id":"{run}","ts":"{ts}","type":"response.delta","text":" the signing key"}}"#
            ),
        })
        .collect()
}
