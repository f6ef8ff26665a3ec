//! `kill -9` in the middle of a stream of event writes loses no committed turn,
//! leaves a sound file, and start-up finds the orphaned run.
//!
//! The child is this test binary itself, re-run on the ignored `crash_child`
//! test with the store URL in an environment variable: no extra binary.
//! Runs on both backends: a SQLite file, and a database on the PostgreSQL
//! cluster this binary starts (the child connects to it like a replica).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capstan_store::{EventRecord, Role, RunStatus, Store};

mod common;

use common::{Db, Kind};

const CHILD_ENV: &str = "CAPSTAN_STORE_CRASH_CHILD";
const ROUNDS: usize = 3;

/// The child: commits a turn, starts a run, says so on stdout, then writes
/// events (single appends and batches of 100, alternating) until killed.
#[test]
#[ignore = "helper: run as a child process by kill_9_loses_no_committed_turn"]
fn crash_child() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Store::open_url(&db).unwrap();
    let session = store.create_session("crash", None).unwrap();
    let run = store.start_run(&session.id, "m").unwrap();
    let turn = store
        .add_turn(
            &session.id,
            Some(&run.id),
            Role::User,
            "committed before the crash",
        )
        .unwrap();
    println!("READY {} {} {}", session.id, run.id, turn.id);
    let ev = |seq: u64| EventRecord {
        run_id: run.id.clone(),
        seq,
        ts: capstan_store::now_rfc3339(),
        kind: "response.delta".into(),
        json: format!(
            r#"{{"seq":{seq},"run_id":"{}","type":"response.delta","text":"tok"}}"#,
            run.id
        ),
    };
    let mut seq = 0u64;
    loop {
        for _ in 0..100 {
            let e = ev(seq);
            store
                .append_event(&e.run_id, e.seq, &e.ts, &e.kind, &e.json)
                .unwrap();
            seq += 1;
        }
        let batch: Vec<_> = (seq..seq + 100).map(ev).collect();
        store.append_events(&batch).unwrap();
        seq += 100;
        if seq == 1_000 {
            println!("WRITING");
        }
    }
}

fn kill_9_loses_no_committed_turn(kind: Kind) {
    let fixture = Db::new(kind);
    let db = fixture.url();
    let mut committed = Vec::new();
    for round in 0..ROUNDS {
        let (session, run, turn) = run_child_and_kill(db, round);
        committed.push((session.clone(), turn));

        let store = Store::open_url(db).unwrap();
        assert_eq!(store.integrity_check().unwrap(), Vec::<String>::new());
        // Every turn committed by every killed child is there.
        for (session, turn) in &committed {
            let turns = store.recent_turns(session, 10).unwrap();
            assert_eq!(turns.len(), 1, "round {round}");
            assert_eq!(&turns[0].id, turn);
            assert_eq!(turns[0].content, "committed before the crash");
        }
        // The run was left running; start-up finds it (and only it).
        assert_eq!(
            store.get_run(&run).unwrap().unwrap().status,
            RunStatus::Running
        );
        // PostgreSQL releases the dead child's owner lock when it notices
        // the closed connection, a moment after the kill: wait for that.
        let deadline = Instant::now() + Duration::from_secs(30);
        let interrupted = loop {
            let ids = store.mark_interrupted_runs(None).unwrap();
            if !ids.is_empty() || Instant::now() > deadline {
                break ids;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(interrupted, vec![run.clone()]);
        assert_eq!(
            store.get_run(&run).unwrap().unwrap().status,
            RunStatus::Interrupted
        );
        // Events form a gapless prefix 0..n: batches are all-or-nothing, and
        // nothing past the last commit appears.
        let events = store.events(&run).unwrap();
        assert!(
            events.len() >= 1_000,
            "round {round}: only {} events",
            events.len()
        );
        for (i, json) in events.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(v["seq"].as_u64(), Some(i as u64), "round {round}");
        }
        eprintln!(
            "round {round}: killed after {} committed events",
            events.len()
        );
    }
}

/// Starts the child, waits until it is streaming events, kills it with
/// SIGKILL (`Child::kill`) and returns (session, run, turn) ids.
fn run_child_and_kill(db: &str, round: usize) -> (String, String, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ids = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    for line in stdout.lines() {
        let line = line.unwrap();
        // libtest may print "test crash_child ... " on the same line first.
        if let Some((_, rest)) = line.split_once("READY ") {
            let parts: Vec<_> = rest.split(' ').map(String::from).collect();
            ids = Some((parts[0].clone(), parts[1].clone(), parts[2].clone()));
        }
        if line.ends_with("WRITING") {
            break;
        }
        assert!(Instant::now() < deadline, "child never started writing");
    }
    // Land the kill at a different point of the write loop each round.
    std::thread::sleep(Duration::from_millis(7 + 23 * round as u64));
    child.kill().unwrap(); // SIGKILL on Unix: no destructor, no flush, no unlock
    let status = child.wait().unwrap();
    assert!(!status.success());
    ids.expect("child printed READY")
}

both!(kill_9_loses_no_committed_turn);
