//! What replicas sharing one database rely on, on both backends: store-
//! assigned event seqs that concurrent writers cannot duplicate, reading
//! after a cursor, waking on new events, and run leases with take-over.
//! Several `Store` handles on one database stand for several replicas (each
//! open store is its own owner, with its own connections or file handle).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use capstan_store::{
    Backend, EventRecord, LEASE_EXPIRED_REASON, RunRequestKind, RunStatus, Store, StoreError,
};

mod common;

use common::{Db, Kind, fresh};

fn envelope(run: &str, seq: u64, who: &str) -> String {
    serde_json::json!({ "seq": seq, "run_id": run, "type": "response.delta", "text": who })
        .to_string()
}

/// Two replicas, three threads each, appending to one run at once: every
/// seq from 0 is taken exactly once, and each stored envelope carries the
/// seq it was stored under.
fn concurrent_appenders_get_distinct_gap_free_seqs(kind: Kind) {
    const THREADS_PER_STORE: usize = 3;
    const PER_THREAD: usize = 40;
    let db = Db::new(kind);
    let a = Arc::new(db.open());
    let b = Arc::new(db.open());
    let s = a.create_session("s", None).unwrap();
    let run = a.start_run(&s.id, "m").unwrap();
    let mut threads = Vec::new();
    for (name, store) in [("a", &a), ("b", &b)] {
        for t in 0..THREADS_PER_STORE {
            let store = Arc::clone(store);
            let run_id = run.id.clone();
            let who = format!("{name}{t}");
            threads.push(std::thread::spawn(move || {
                let mut mine = Vec::new();
                for _ in 0..PER_THREAD {
                    let seq = store
                        .append_next_event(
                            &run_id,
                            "2026-01-01T00:00:00.000Z",
                            "response.delta",
                            |seq| envelope(&run_id, seq, &who),
                        )
                        .unwrap();
                    mine.push(seq);
                }
                // One thread's own appends come back in increasing order.
                assert!(mine.windows(2).all(|w| w[0] < w[1]), "{mine:?}");
                mine
            }));
        }
    }
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort();
    let total = (2 * THREADS_PER_STORE * PER_THREAD) as u64;
    assert_eq!(all, (0..total).collect::<Vec<_>>());
    let stored = b.events_since(&run.id, None).unwrap();
    assert_eq!(stored.len() as u64, total);
    for (i, e) in stored.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
        let v: serde_json::Value = serde_json::from_str(&e.json).unwrap();
        assert_eq!(v["seq"], e.seq, "{}", e.json);
    }
    // A caller-chosen seq that a store-assigned one already took is refused.
    assert!(matches!(
        a.append_event(&run.id, 0, "t", "x", "{}"),
        Err(StoreError::DuplicateEvent { seq: 0, .. })
    ));
    // The next store-assigned seq follows caller-chosen ones too.
    a.append_event(&run.id, total + 5, "t", "x", "{}").unwrap();
    let next = a
        .append_next_event(&run.id, "t", "x", |_| "{}".into())
        .unwrap();
    assert_eq!(next, total + 6);
    // Unknown run, invalid JSON.
    assert!(matches!(
        a.append_next_event("run_nope", "t", "x", |_| "{}".into()),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        a.append_next_event(&run.id, "t", "x", |_| "{not json".into()),
        Err(StoreError::InvalidArgument(_))
    ));
}

/// Cursor reads return exactly what follows the cursor; `wait_events`
/// returns at once when there is something, wakes for another replica's
/// append, and returns empty at its timeout.
fn cursor_reads_and_wake_ups(kind: Kind) {
    let db = Db::new(kind);
    let writer = Arc::new(db.open());
    let reader = db.open();
    let s = writer.create_session("s", None).unwrap();
    let run = writer.start_run(&s.id, "m").unwrap();
    for i in 0..5u64 {
        writer
            .append_next_event(&run.id, "t", "x", |seq| {
                envelope(&run.id, seq, &i.to_string())
            })
            .unwrap();
    }
    let all = reader.events_since(&run.id, None).unwrap();
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    let after = reader.events_since(&run.id, Some(2)).unwrap();
    assert_eq!(after.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(after[0].json, all[3].json);
    assert!(reader.events_since(&run.id, Some(4)).unwrap().is_empty());
    assert_eq!(
        reader.events_after(&run.id, 2).unwrap(),
        after.iter().map(|e| e.json.clone()).collect::<Vec<_>>()
    );

    // Already there: no waiting.
    let got = reader
        .wait_events(&run.id, Some(3), Duration::from_secs(60))
        .unwrap();
    assert_eq!(got.iter().map(|e| e.seq).collect::<Vec<_>>(), [4]);
    // Nothing new: empty at the timeout.
    assert!(
        reader
            .wait_events(&run.id, Some(4), Duration::from_millis(100))
            .unwrap()
            .is_empty()
    );
    // Another replica appends while we wait (generous timeout: the assertion
    // is that the event arrives, not how fast).
    let w = Arc::clone(&writer);
    let run_id = run.id.clone();
    let appender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        w.append_next_event(&run_id, "t", "x", |seq| envelope(&run_id, seq, "late"))
            .unwrap()
    });
    let got = reader
        .wait_events(&run.id, Some(4), Duration::from_secs(60))
        .unwrap();
    assert_eq!(appender.join().unwrap(), 5);
    assert_eq!(got.iter().map(|e| e.seq).collect::<Vec<_>>(), [5]);
    assert!(got[0].json.contains("late"));
}

/// A lease is exclusive while fresh, renewable by its holder, taken over
/// once expired (the old holder then learns it lost it), and an expired
/// lease makes its run `interrupted` with reason `lease-expired`.
fn leases_are_exclusive_and_taken_over_when_expired(kind: Kind) {
    let db = Db::new(kind);
    let a = db.open();
    let b = db.open();
    let s = a.create_session("s", None).unwrap();
    let run = a.start_run(&s.id, "m").unwrap();
    let long = Duration::from_secs(600);
    let tiny = Duration::from_millis(1);

    let claim = a.claim_run(&run.id, "replica-a", long).unwrap();
    assert_eq!(claim.owner, "replica-a");
    assert_eq!(claim.took_over_from, None);
    assert_eq!(claim.expires_at.len(), 24, "{}", claim.expires_at);
    // Fresh: nobody else gets it.
    match b.claim_run(&run.id, "replica-b", long) {
        Err(StoreError::LeaseHeld { owner, .. }) => assert_eq!(owner, "replica-a"),
        other => panic!("expected LeaseHeld, got {other:?}"),
    }
    assert!(matches!(
        b.renew_lease(&run.id, "replica-b", long),
        Err(StoreError::LeaseLost { .. })
    ));
    // The holder renews (heartbeat) and re-claims freely.
    a.renew_lease(&run.id, "replica-a", long).unwrap();
    a.claim_run(&run.id, "replica-a", long).unwrap();
    // A fresh lease is not interrupted.
    assert!(b.interrupt_expired_leases(None).unwrap().is_empty());

    // The holder stops renewing: its lease runs out.
    a.renew_lease(&run.id, "replica-a", tiny).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let taken = b.claim_run(&run.id, "replica-b", long).unwrap();
    assert_eq!(taken.took_over_from.as_deref(), Some("replica-a"));
    // The old holder's next heartbeat tells it to stop.
    assert!(matches!(
        a.renew_lease(&run.id, "replica-a", long),
        Err(StoreError::LeaseLost { .. })
    ));
    // The starting store is alive, and the run is leased: start-up
    // recovery leaves it alone.
    assert!(a.mark_interrupted_runs(None).unwrap().is_empty());

    // Now the new holder dies too (stops renewing); the expired lease
    // interrupts the run, once.
    b.renew_lease(&run.id, "replica-b", tiny).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let other = a.start_run(&s.id, "m").unwrap();
    a.claim_run(&other.id, "replica-a", long).unwrap();
    let never_leased = a.start_run(&s.id, "m").unwrap();
    // Its terminal event is appended in the transaction that marks it, at
    // the next seq after what the dead holder saved.
    a.append_event(&run.id, 0, "2026-01-01T00:00:00.000Z", "task.started", "{}")
        .unwrap();
    let ending = |run_id: &str, seq: u64| EventRecord {
        run_id: run_id.to_owned(),
        seq,
        ts: "2026-01-01T00:00:01.000Z".into(),
        kind: "run.failed".into(),
        json: format!(
            r#"{{"seq":{seq},"run_id":"{run_id}","type":"run.failed","reason":"lease-expired"}}"#
        ),
    };
    assert_eq!(
        a.interrupt_expired_leases(Some(&ending)).unwrap(),
        vec![run.id.clone()]
    );
    assert!(
        a.interrupt_expired_leases(Some(&ending))
            .unwrap()
            .is_empty()
    );
    let stored = b.events_since(&run.id, None).unwrap();
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(stored[1].seq, 1);
    assert!(stored[1].json.contains("lease-expired"));
    // An ending that names another seq is refused, and nothing is marked.
    let wrong = |run_id: &str, seq: u64| EventRecord {
        seq: seq + 7,
        ..ending(run_id, seq)
    };
    let c = a.start_run(&s.id, "m").unwrap();
    a.claim_run(&c.id, "replica-a", tiny).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert!(matches!(
        a.interrupt_expired_leases(Some(&wrong)),
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(
        a.get_run(&c.id).unwrap().unwrap().status,
        RunStatus::Running
    );
    assert!(a.events(&c.id).unwrap().is_empty());
    assert_eq!(
        a.interrupt_expired_leases(None).unwrap(),
        vec![c.id.clone()]
    );
    let r = a.get_run(&run.id).unwrap().unwrap();
    assert_eq!(r.status, RunStatus::Interrupted);
    assert_eq!(r.reason.as_deref(), Some(LEASE_EXPIRED_REASON));
    assert!(r.ended_at.is_some());
    for id in [&other.id, &never_leased.id] {
        assert_eq!(a.get_run(id).unwrap().unwrap().status, RunStatus::Running);
    }
    // An ended run cannot be claimed; finishing drops the lease.
    assert!(matches!(
        b.claim_run(&run.id, "replica-b", long),
        Err(StoreError::RunNotRunning { .. })
    ));
    a.finish_run(&other.id, RunStatus::Completed, None, None)
        .unwrap();
    assert!(matches!(
        a.renew_lease(&other.id, "replica-a", long),
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(matches!(
        a.claim_run("run_nope", "x", long),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        a.claim_run(&never_leased.id, "x", Duration::ZERO),
        Err(StoreError::InvalidArgument(_))
    ));
}

/// The owner that started a run died, but a live replica took the run
/// over: start-up recovery must not interrupt it.
fn leased_runs_survive_their_starters_death(kind: Kind) {
    let db = Db::new(kind);
    let survivor = db.open();
    let starter = db.open();
    let s = starter.create_session("s", None).unwrap();
    let run = starter.start_run(&s.id, "m").unwrap();
    survivor
        .claim_run(&run.id, "survivor", Duration::from_secs(600))
        .unwrap();
    drop(starter);
    assert!(survivor.mark_interrupted_runs(None).unwrap().is_empty());
    assert_eq!(
        survivor.get_run(&run.id).unwrap().unwrap().status,
        RunStatus::Running
    );
}

/// What a replica resuming a dead one's run reads: the expired leases, then
/// the run's checkpoint; only one replica's take-over wins.
fn checkpoints_and_expired_leases_let_one_replica_resume_a_run(kind: Kind) {
    let db = Db::new(kind);
    let (a, b, c) = (db.open(), db.open(), db.open());
    let s = a.create_session("s", None).unwrap();
    let run = a.start_run(&s.id, "m").unwrap();
    assert_eq!(a.run_checkpoint(&run.id).unwrap(), None);
    a.save_checkpoint(&run.id, r#"{"plan":1}"#).unwrap();
    a.save_checkpoint(&run.id, r#"{"plan":2}"#).unwrap();
    assert_eq!(
        b.run_checkpoint(&run.id).unwrap().as_deref(),
        Some(r#"{"plan":2}"#)
    );
    let (tiny, long) = (Duration::from_millis(1), Duration::from_secs(600));
    a.claim_run(&run.id, "replica-a", long).unwrap();
    let fresh = a.start_run(&s.id, "m").unwrap();
    a.claim_run(&fresh.id, "replica-a", long).unwrap();
    assert!(b.expired_leases().unwrap().is_empty());

    // A dies: its lease runs out. Both survivors see the run; one takes it.
    a.renew_lease(&run.id, "replica-a", tiny).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(b.expired_leases().unwrap(), vec![run.id.clone()]);
    assert_eq!(c.expired_leases().unwrap(), vec![run.id.clone()]);
    let took = b.claim_run(&run.id, "replica-b", long).unwrap();
    assert_eq!(took.took_over_from.as_deref(), Some("replica-a"));
    assert!(matches!(
        c.claim_run(&run.id, "replica-c", long),
        Err(StoreError::LeaseHeld { .. })
    ));
    assert!(c.expired_leases().unwrap().is_empty());
    assert!(c.interrupt_expired_leases(None).unwrap().is_empty());

    // An ended run takes no checkpoint; an unknown one is not found.
    b.finish_run(&run.id, RunStatus::Completed, None, None)
        .unwrap();
    assert!(matches!(
        b.save_checkpoint(&run.id, "{}"),
        Err(StoreError::RunNotRunning { .. })
    ));
    assert!(matches!(
        b.run_checkpoint("run_nope"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        b.save_checkpoint("run_nope", "{}"),
        Err(StoreError::NotFound { .. })
    ));
}

fn open_url_names_the_backend(kind: Kind) {
    let (db, store) = fresh(kind);
    let expected = match kind {
        Kind::Sqlite => Backend::Sqlite,
        Kind::Postgres => Backend::Postgres,
    };
    assert_eq!(store.backend(), expected);
    assert!(store.owner_id().is_some());
    assert_ne!(store.owner_id(), db.open().owner_id());
}

/// A request left by one replica is taken by the one that serves its target,
/// once, oldest first; one nobody takes can be withdrawn.
fn run_requests_are_taken_once_by_their_target(kind: Kind) {
    let db = Db::new(kind);
    let sender = db.open();
    let owner = db.open();
    let cancel = sender
        .add_run_request("run_1", &RunRequestKind::Cancel)
        .unwrap();
    let decide = RunRequestKind::Decide {
        decision: capstan_store::Decision::Approved,
        decided_by: Some("http-token".into()),
    };
    let decision = sender.add_run_request("apr_1", &decide).unwrap();
    let stray = sender.add_run_request("apr_other", &decide).unwrap();
    assert!(sender.run_request_pending(cancel).unwrap());
    // Targets nobody asked about are left alone.
    assert!(
        owner
            .take_run_requests(&["run_2".into()])
            .unwrap()
            .is_empty()
    );
    let taken = owner
        .take_run_requests(&["run_1".into(), "apr_1".into()])
        .unwrap();
    assert_eq!(
        taken.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![cancel, decision]
    );
    assert_eq!(taken[0].kind, RunRequestKind::Cancel);
    assert_eq!(taken[1].target, "apr_1");
    assert_eq!(taken[1].kind, decide);
    assert!(!sender.run_request_pending(cancel).unwrap());
    // Taken once: a second owner finds nothing.
    assert!(
        db.open()
            .take_run_requests(&["run_1".into(), "apr_1".into()])
            .unwrap()
            .is_empty()
    );
    assert!(!sender.withdraw_run_request(decision).unwrap());
    assert!(sender.withdraw_run_request(stray).unwrap());
    assert!(!sender.run_request_pending(stray).unwrap());
    assert!(matches!(
        sender.add_run_request("", &RunRequestKind::Cancel),
        Err(StoreError::InvalidArgument(_))
    ));
}

both!(
    run_requests_are_taken_once_by_their_target,
    concurrent_appenders_get_distinct_gap_free_seqs,
    cursor_reads_and_wake_ups,
    leases_are_exclusive_and_taken_over_when_expired,
    leased_runs_survive_their_starters_death,
    checkpoints_and_expired_leases_let_one_replica_resume_a_run,
    open_url_names_the_backend,
);

/// The host calls the store from async handlers: a PostgreSQL store must
/// work there (the sync `postgres` crate would panic, starting a runtime
/// inside a runtime), on a current-thread runtime too (no deadlock: the
/// connections run on the store's own runtime), and dropping the last handle
/// inside a task must not panic either.
#[test]
fn postgres_store_works_inside_tokio_runtimes() {
    let url = common::pg::Cluster::shared().fresh_database();
    for multi in [false, true] {
        let rt = if multi {
            tokio::runtime::Builder::new_multi_thread().build().unwrap()
        } else {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
        };
        let url = url.clone();
        rt.block_on(async move {
            let store = Store::open_url(&url).unwrap();
            let s = store.create_session("async", None).unwrap();
            let run = store.start_run(&s.id, "m").unwrap();
            let seq = store
                .append_next_event(&run.id, "t", "x", |seq| envelope(&run.id, seq, "a"))
                .unwrap();
            assert_eq!(store.events_since(&run.id, None).unwrap()[0].seq, seq);
            let store = Arc::new(store);
            let handle = Arc::clone(&store);
            let id = run.id.clone();
            tokio::task::spawn_blocking(move || {
                handle
                    .wait_events(&id, None, Duration::from_secs(30))
                    .unwrap()
            })
            .await
            .unwrap();
            store
                .finish_run(&run.id, RunStatus::Completed, None, None)
                .unwrap();
            drop(store);
        });
    }
}

#[test]
fn store_urls_are_parsed_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    for url in [
        format!("sqlite:{}", path.display()),
        format!("sqlite://{}", path.display()),
        path.display().to_string(),
    ] {
        let store = Store::open_url(&url).unwrap();
        assert_eq!(store.backend(), Backend::Sqlite);
        assert_eq!(store.path(), path);
    }
    let err = Store::open_url("mysql://u@h/db").unwrap_err();
    assert!(
        err.to_string().contains("unknown store URL scheme"),
        "{err}"
    );
    assert!(Store::open_url("  ").is_err());
    // Nothing listens on port 1; the error names the URL but not its password.
    let err = Store::open_url("postgres://me:s3cret@127.0.0.1:1/capstan").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{msg}");
    assert!(
        msg.contains("postgres://me:***@127.0.0.1:1/capstan"),
        "{msg}"
    );
    assert!(msg.contains("cannot connect"), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");
    let err = Store::open_url("postgres://me@127.0.0.1:notaport/x").unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
}

/// PostgreSQL: migrations are recorded, re-opening is a no-op, a newer
/// schema and someone else's database are refused before anything is written.
#[test]
fn postgres_schema_is_versioned_and_foreign_databases_are_refused() {
    let cluster = common::pg::Cluster::shared();
    let url = cluster.fresh_database();
    let store = Store::open_url(&url).unwrap();
    assert_eq!(
        store.schema_version().unwrap(),
        capstan_store::PG_SCHEMA_VERSION
    );
    drop(store);
    let again = Store::open_url(&url).unwrap();
    assert_eq!(
        again.schema_version().unwrap(),
        capstan_store::PG_SCHEMA_VERSION
    );
    drop(again);

    let name = url.rsplit('/').next().unwrap();
    cluster.psql(name, "INSERT INTO capstan_schema (version) VALUES (99)");
    let err = Store::open_url(&url).unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found: 99, .. }),
        "{err}"
    );

    let foreign = format!("foreign_{}", std::process::id());
    cluster.create_database(&foreign);
    cluster.psql(&foreign, "CREATE TABLE orders (id int)");
    let err = Store::open_url(&cluster.url(&foreign)).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDatabase { .. }), "{err}");
    assert!(err.to_string().contains("not Capstan's"), "{err}");
}
