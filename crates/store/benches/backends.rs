//! SQLite vs PostgreSQL, side by side, on what replicas will lean on: event
//! appends (caller-chosen seqs, batches, store-assigned seqs with concurrent
//! writers), reading after a cursor, and the wake-up of a reader blocked in
//! `wait_events` on another handle (fan-out latency).
//!
//! Run: `cargo bench -p capstan-store --bench backends`
//! (`CAPSTAN_BENCH_EVENTS` scales the counts, default 5000). PostgreSQL is
//! a cluster the bench starts (as tests/common/pg.rs does, with the server's
//! default durability settings: fsync on), on 127.0.0.1, same machine; the
//! SQLite file is in the system temp dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_macros)]

#[path = "../tests/common/pg.rs"]
mod pg;

use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_store::{EventRecord, Role, Store};

struct Measure {
    what: String,
    /// Operations per second (events, reads or wake-ups).
    rate: f64,
    p50: Duration,
    p99: Duration,
}

fn main() {
    let n: usize = std::env::var("CAPSTAN_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite_url = dir.path().join("bench.db").display().to_string();
    let cluster = pg::Cluster::start(&[]);
    let pg_url = cluster.fresh_database();

    let sqlite = bench(&sqlite_url, n);
    let postgres = bench(&pg_url, n);

    println!();
    println!("Command: `cargo bench -p capstan-store --bench backends` (CAPSTAN_BENCH_EVENTS={n})");
    println!(
        "SQLite: WAL, events at synchronous=NORMAL; PostgreSQL 127.0.0.1, events at synchronous_commit=off, fsync on."
    );
    println!();
    println!(
        "| operation | SQLite ops/s | SQLite p50 | SQLite p99 | PostgreSQL ops/s | PostgreSQL p50 | PostgreSQL p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (s, p) in sqlite.iter().zip(&postgres) {
        println!(
            "| {} | {:.0} | {} | {} | {:.0} | {} | {} |",
            s.what,
            s.rate,
            us(s.p50),
            us(s.p99),
            p.rate,
            us(p.p50),
            us(p.p99)
        );
    }
}

fn bench(url: &str, n: usize) -> Vec<Measure> {
    let store = Arc::new(Store::open_url(url).expect("open"));
    let session = store.create_session("bench", None).unwrap();
    let mut out = Vec::new();

    // 1. One event per commit, caller-chosen seq.
    let run = store.start_run(&session.id, "bench").unwrap();
    let events = make_events(&run.id, n);
    out.push(timed("`append_event` (1 per commit)", n, |calls| {
        for e in &events {
            let t = Instant::now();
            store
                .append_event(&e.run_id, e.seq, &e.ts, &e.kind, &e.json)
                .unwrap();
            calls.push(t.elapsed());
        }
    }));

    // 2. Batches of 100.
    let run = store.start_run(&session.id, "bench").unwrap();
    let events = make_events(&run.id, n * 4);
    out.push(timed(
        "`append_events` (batches of 100), per batch",
        n * 4,
        |calls| {
            for chunk in events.chunks(100) {
                let t = Instant::now();
                store.append_events(chunk).unwrap();
                calls.push(t.elapsed());
            }
        },
    ));

    // 3. Store-assigned seqs, one writer.
    let run = store.start_run(&session.id, "bench").unwrap();
    out.push(timed("`append_next_event`, 1 writer", n, |calls| {
        for _ in 0..n {
            let t = Instant::now();
            store
                .append_next_event(&run.id, "t", "response.delta", |seq| envelope(&run.id, seq))
                .unwrap();
            calls.push(t.elapsed());
        }
    }));

    // 4. Store-assigned seqs, 4 writers on 2 handles ("replicas"), one run.
    let run = store.start_run(&session.id, "bench").unwrap();
    let other = Arc::new(Store::open_url(url).unwrap());
    out.push(timed(
        "`append_next_event`, 4 writers / 2 handles, one run",
        n,
        |calls| {
            let threads: Vec<_> = (0..4)
                .map(|i| {
                    let s = if i % 2 == 0 {
                        store.clone()
                    } else {
                        other.clone()
                    };
                    let run_id = run.id.clone();
                    std::thread::spawn(move || {
                        let mut mine = Vec::new();
                        for _ in 0..n / 4 {
                            let t = Instant::now();
                            s.append_next_event(&run_id, "t", "response.delta", |seq| {
                                envelope(&run_id, seq)
                            })
                            .unwrap();
                            mine.push(t.elapsed());
                        }
                        mine
                    })
                })
                .collect();
            for t in threads {
                calls.extend(t.join().unwrap());
            }
        },
    ));
    assert_eq!(store.events_since(&run.id, None).unwrap().len(), n / 4 * 4);

    // 5. Read after a cursor: the last 10 events of a run of 4n.
    let tail_run = &events[0].run_id;
    let last = (n * 4) as u64 - 1;
    let reads = 1_000;
    out.push(timed(
        "`events_since` (last 10 of a long run)",
        reads,
        |calls| {
            for _ in 0..reads {
                let t = Instant::now();
                let got = store.events_since(tail_run, Some(last - 10)).unwrap();
                calls.push(t.elapsed());
                assert_eq!(got.len(), 10);
            }
        },
    ));

    // 6. Fan-out: a reader on another handle blocked in `wait_events`; time
    // from the start of the append to the reader holding the event.
    let run = store.start_run(&session.id, "bench").unwrap();
    let samples = 200;
    let (go_tx, go_rx) = std::sync::mpsc::channel::<Instant>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Duration>();
    let reader = {
        let other = other.clone();
        let run_id = run.id.clone();
        std::thread::spawn(move || {
            let mut after = None;
            for _ in 0..samples {
                let got = other
                    .wait_events(&run_id, after, Duration::from_secs(30))
                    .unwrap();
                let started: Instant = go_rx.recv().unwrap();
                done_tx.send(started.elapsed()).unwrap();
                after = got.last().map(|e| e.seq);
            }
        })
    };
    out.push(timed(
        "wake-up of a `wait_events` reader on another handle",
        samples,
        |calls| {
            for _ in 0..samples {
                // Let the reader go back to waiting.
                std::thread::sleep(Duration::from_millis(5));
                let t = Instant::now();
                store
                    .append_next_event(&run.id, "t", "response.delta", |seq| envelope(&run.id, seq))
                    .unwrap();
                go_tx.send(t).unwrap();
                calls.push(done_rx.recv().unwrap());
            }
        },
    ));
    reader.join().unwrap();

    // 7. For scale: a durable write.
    let turns = 200;
    out.push(timed("`add_turn` (durable)", turns, |calls| {
        for i in 0..turns {
            let t = Instant::now();
            store
                .add_turn(&session.id, None, Role::User, &format!("turn {i}"))
                .unwrap();
            calls.push(t.elapsed());
        }
    }));
    out
}

/// Runs `f`, which records the latency of each call; the rate is `ops` over
/// the wall time (for the wake-up row, where calls are paced, it is
/// `1 / mean latency` instead).
fn timed(what: &str, ops: usize, f: impl FnOnce(&mut Vec<Duration>)) -> Measure {
    let mut calls = Vec::with_capacity(ops);
    let start = Instant::now();
    f(&mut calls);
    let total = start.elapsed();
    calls.sort_unstable();
    let rate = if what.starts_with("wake-up") {
        let mean = calls.iter().sum::<Duration>().as_secs_f64() / calls.len().max(1) as f64;
        1.0 / mean
    } else {
        ops as f64 / total.as_secs_f64()
    };
    Measure {
        what: what.to_owned(),
        rate,
        p50: pct(&calls, 50.0),
        p99: pct(&calls, 99.0),
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize]
}

fn us(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10.0 {
        format!("{us:.1} µs")
    } else if us < 10_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1e3)
    }
}

fn envelope(run: &str, seq: u64) -> String {
    format!(r#"{{"seq":{seq},"run_id":"{run}","type":"response.delta","text":" the signing key"}}"#)
}

fn make_events(run: &str, n: usize) -> Vec<EventRecord> {
    let ts = capstan_store::now_rfc3339();
    (0..n as u64)
        .map(|seq| EventRecord {
            run_id: run.to_owned(),
            seq,
            ts: ts.clone(),
            kind: "response.delta".to_owned(),
            json: envelope(run, seq),
        })
        .collect()
}
