//! Round trips through real databases: every test that is not about the
//! SQLite file format runs twice, against a SQLite file in a temporary
//! directory and against a fresh database on a PostgreSQL cluster the test
//! binary starts (see common/pg.rs): `both!` below lists them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use capstan_store::{
    DecidedBy, Decision, EventRecord, EventWriter, NewApproval, Profile, Quota, QuotaKind, Role,
    RunAnswer, RunEnding, RunStatus, SCHEMA_VERSION, Store, StoreError, Usage,
};
use tempfile::TempDir;

mod common;

use common::{Db, Kind, fresh, reopen};

/// SQLite-only tests (file format, raw rows) open a file directly.
fn fresh_file() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("capstan.db")).unwrap();
    (dir, store)
}

fn reopen_file(dir: &TempDir) -> Store {
    Store::open(dir.path().join("capstan.db")).unwrap()
}

fn event_json(run: &str, seq: u64, text: &str) -> String {
    serde_json::json!({
        "seq": seq, "run_id": run, "ts": "2026-01-01T00:00:00.000Z",
        "type": "response.delta", "text": text,
    })
    .to_string()
}

fn event(run: &str, seq: u64) -> EventRecord {
    EventRecord {
        run_id: run.into(),
        seq,
        ts: "2026-01-01T00:00:00.000Z".into(),
        kind: "response.delta".into(),
        json: event_json(run, seq, "x"),
    }
}

// ---- workspaces ----

fn workspace_round_trip_and_canonical_root(kind: Kind) {
    let (dir, store) = fresh(kind);
    let proj = dir.path().join("proj");
    std::fs::create_dir_all(proj.join("sub")).unwrap();
    // A non-canonical spelling is stored canonical.
    let spelled = proj.join("sub").join("..");
    let ws = store.add_workspace(&spelled, "proj", None).unwrap();
    assert!(ws.id.starts_with("ws_"));
    assert_eq!(ws.root_path, std::fs::canonicalize(&proj).unwrap());
    // No profile chosen: the workspace follows the configuration's.
    assert_eq!(ws.policy_profile, None);
    assert_eq!(ws.policy_json, None);

    assert_eq!(
        store.get_workspace_by_id(&ws.id).unwrap().as_ref(),
        Some(&ws)
    );
    assert_eq!(
        store.get_workspace_by_root(&proj).unwrap().as_ref(),
        Some(&ws)
    );
    #[cfg(unix)]
    {
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&proj, &link).unwrap();
        assert_eq!(
            store.get_workspace_by_root(&link).unwrap().as_ref(),
            Some(&ws)
        );
        match store.add_workspace(&link, "again", Some(Profile::Trusted)) {
            Err(StoreError::WorkspaceExists { id, .. }) => assert_eq!(id, ws.id),
            other => panic!("expected WorkspaceExists, got {other:?}"),
        }
    }

    let other_dir = dir.path().join("a-other");
    std::fs::create_dir(&other_dir).unwrap();
    let other = store
        .add_workspace(&other_dir, "another", Some(Profile::Locked))
        .unwrap();
    let names: Vec<_> = store
        .list_workspaces()
        .unwrap()
        .into_iter()
        .map(|w| w.name)
        .collect();
    assert_eq!(names, ["another", "proj"]);

    store.set_profile(&ws.id, Some(Profile::Trusted)).unwrap();
    store
        .set_policy_json(&ws.id, Some(r#"{"allow":["make"]}"#))
        .unwrap();
    let err = store
        .set_policy_json(&ws.id, Some("{not json"))
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
    drop(store);

    let store = reopen(&dir);
    let ws2 = store.get_workspace_by_id(&ws.id).unwrap().unwrap();
    assert_eq!(ws2.policy_profile, Some(Profile::Trusted));
    assert_eq!(other.policy_profile, Some(Profile::Locked));
    assert_eq!(ws2.policy_json.as_deref(), Some(r#"{"allow":["make"]}"#));
    store.set_policy_json(&ws.id, None).unwrap();
    assert_eq!(
        store
            .get_workspace_by_id(&ws.id)
            .unwrap()
            .unwrap()
            .policy_json,
        None
    );

    // Removing a workspace forgets it in sessions, keeps the sessions.
    let session = store.create_session("s", Some(&ws.id)).unwrap();
    store.remove_workspace(&ws.id).unwrap();
    assert_eq!(store.get_workspace_by_id(&ws.id).unwrap(), None);
    assert_eq!(
        store
            .get_session(&session.id)
            .unwrap()
            .unwrap()
            .workspace_id,
        None
    );
    assert_eq!(store.list_workspaces().unwrap(), vec![other]);
    assert!(matches!(
        store.remove_workspace(&ws.id),
        Err(StoreError::NotFound {
            what: "workspace",
            ..
        })
    ));
    assert!(matches!(
        store.set_profile("ws_nope", Some(Profile::Locked)),
        Err(StoreError::NotFound { .. })
    ));
}

fn workspace_root_must_be_an_existing_directory(kind: Kind) {
    let (dir, store) = fresh(kind);
    let missing = dir.path().join("missing");
    let err = store.add_workspace(&missing, "m", None).unwrap_err();
    assert!(matches!(err, StoreError::WorkspaceRoot { .. }), "{err}");
    assert!(err.to_string().contains("missing"), "{err}");
    let file = dir.path().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let err = store.add_workspace(&file, "f", None).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
    assert_eq!(store.get_workspace_by_root(&missing).unwrap(), None);
}

// ---- sessions and turns ----

fn session_round_trip_summary_and_workspace(kind: Kind) {
    let (dir, store) = fresh(kind);
    let ws = store
        .add_workspace(dir.path(), "root", Some(Profile::Cautious))
        .unwrap();
    let s = store.create_session("first", None).unwrap();
    assert!(s.id.starts_with("ses_"));
    assert_eq!(store.get_session(&s.id).unwrap().as_ref(), Some(&s));
    assert_eq!(store.get_session("ses_nope").unwrap(), None);

    store.set_session_workspace(&s.id, Some(&ws.id)).unwrap();
    store.update_summary(&s.id, "we talked about keys").unwrap();
    store
        .update_summary(&s.id, "we talked about keys, then rotation")
        .unwrap();
    store.set_session_title(&s.id, "Key rotation").unwrap();
    assert!(matches!(
        store.set_session_workspace(&s.id, Some("ws_nope")),
        Err(StoreError::NotFound {
            what: "workspace",
            ..
        })
    ));
    assert!(matches!(
        store.update_summary("ses_nope", "x"),
        Err(StoreError::NotFound {
            what: "session",
            ..
        })
    ));
    assert!(matches!(
        store.create_session("x", Some("ws_nope")),
        Err(StoreError::NotFound {
            what: "workspace",
            ..
        })
    ));
    drop(store);

    let store = reopen(&dir);
    let got = store.get_session(&s.id).unwrap().unwrap();
    assert_eq!(got.summary, "we talked about keys, then rotation");
    assert_eq!(got.title, "Key rotation");
    assert_eq!(got.workspace_id.as_deref(), Some(ws.id.as_str()));
    assert!(got.updated_at >= s.updated_at);
    store.set_session_workspace(&s.id, None).unwrap();
    assert_eq!(
        store.get_session(&s.id).unwrap().unwrap().workspace_id,
        None
    );
}

fn list_sessions_newest_first_and_bounded(kind: Kind) {
    let (_dir, store) = fresh(kind);
    let ids: Vec<String> = (0..5)
        .map(|i| {
            let s = store.create_session(&format!("s{i}"), None).unwrap();
            // Timestamps have millisecond resolution.
            std::thread::sleep(std::time::Duration::from_millis(3));
            s.id
        })
        .collect();
    // Touching the oldest makes it the most recent.
    store.add_turn(&ids[0], None, Role::User, "hello").unwrap();
    let listed: Vec<String> = store
        .list_sessions(3)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, [ids[0].clone(), ids[4].clone(), ids[3].clone()]);
    assert_eq!(store.list_sessions(0).unwrap().len(), 0);
    assert_eq!(store.list_sessions(usize::MAX).unwrap().len(), 5);
}

fn turns_keep_order_and_recent_turns_is_bounded(kind: Kind) {
    let (dir, store) = fresh(kind);
    let s = store.create_session("chat", None).unwrap();
    let other = store.create_session("other", None).unwrap();
    let run = store.start_run(&s.id, "offline").unwrap();
    for i in 1..=7 {
        let role = if i % 2 == 1 {
            Role::User
        } else {
            Role::Assistant
        };
        let t = store
            .add_turn(&s.id, Some(&run.id), role, &format!("turn {i}"))
            .unwrap();
        assert_eq!(t.seq, i);
        assert!(t.id.starts_with("turn_"));
        // Interleave another session: seqs are per session.
        store
            .add_turn(&other.id, None, Role::User, "noise")
            .unwrap();
    }
    drop(store);
    let store = reopen(&dir);

    let last3 = store.recent_turns(&s.id, 3).unwrap();
    let contents: Vec<_> = last3.iter().map(|t| t.content.as_str()).collect();
    assert_eq!(contents, ["turn 5", "turn 6", "turn 7"]);
    assert_eq!(last3[0].role, Role::User);
    assert_eq!(last3[1].role, Role::Assistant);
    assert_eq!(last3[2].run_id.as_deref(), Some(run.id.as_str()));
    assert!(last3.iter().all(|t| t.session_id == s.id));

    let all = store.recent_turns(&s.id, 100).unwrap();
    assert_eq!(all.len(), 7);
    assert!(all.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
    assert_eq!(store.recent_turns(&s.id, usize::MAX).unwrap(), all);
    assert!(store.recent_turns(&s.id, 0).unwrap().is_empty());
    assert!(store.recent_turns("ses_nope", 5).unwrap().is_empty());
    assert_eq!(store.recent_turns(&other.id, 100).unwrap().len(), 7);

    // A turn names a run of its own session, and an existing session.
    let err = store
        .add_turn(&other.id, Some(&run.id), Role::User, "x")
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidArgument(_)), "{err}");
    assert!(matches!(
        store.add_turn("ses_nope", None, Role::User, "x"),
        Err(StoreError::NotFound {
            what: "session",
            ..
        })
    ));
    assert!(matches!(
        store.add_turn(&s.id, Some("run_nope"), Role::User, "x"),
        Err(StoreError::NotFound { what: "run", .. })
    ));
}

/// Two stores on one file (as two processes would be) add turns at the same
/// time: the write lock serialises them, every seq is taken once.
fn concurrent_writers_share_one_file(kind: Kind) {
    let db = Db::new(kind);
    let a = Arc::new(db.open());
    let b = Arc::new(db.open());
    let s = a.create_session("shared", None).unwrap();
    let threads: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .map(|store| {
            let sid = s.id.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    store
                        .add_turn(&sid, None, Role::User, &format!("{i}"))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let turns = b.recent_turns(&s.id, usize::MAX).unwrap();
    let seqs: Vec<u64> = turns.iter().map(|t| t.seq).collect();
    assert_eq!(seqs, (1..=100).collect::<Vec<_>>());
}

// ---- runs and usage ----

/// A session made to run one thing in: both rows or neither.
fn a_run_in_a_new_session_starts_both_or_neither(kind: Kind) {
    let (dir, store) = fresh(kind);
    let root = tempfile::tempdir().unwrap();
    let ws = store.add_workspace(root.path(), "w", None).unwrap();
    let (session, run) = store
        .start_run_in_new_session("capstan invoke docx", Some(&ws.id), "invoke")
        .unwrap();
    assert_eq!(run.session_id, session.id);
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.model, "invoke");
    let stored = store.get_session(&session.id).unwrap().unwrap();
    assert_eq!(stored.title, "capstan invoke docx");
    assert_eq!(stored.workspace_id.as_deref(), Some(ws.id.as_str()));
    assert_eq!(store.get_run(&run.id).unwrap().as_ref(), Some(&run));
    drop(store);
    let store = reopen(&dir);
    assert_eq!(store.get_run(&run.id).unwrap().as_ref(), Some(&run));

    // An unknown workspace: refused, and no session is left behind.
    let before = store.list_sessions(100).unwrap().len();
    let err = store
        .start_run_in_new_session("t", Some("ws_nope"), "invoke")
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    assert_eq!(store.list_sessions(100).unwrap().len(), before);
}

fn run_round_trip_and_usage_accounting(kind: Kind) {
    let (dir, store) = fresh(kind);
    let s = store.create_session("s", None).unwrap();
    let r1 = store.start_run(&s.id, "gpt-x").unwrap();
    assert_eq!(r1.status, RunStatus::Running);
    assert_eq!(r1.ended_at, None);
    assert_eq!(store.get_run(&r1.id).unwrap().as_ref(), Some(&r1));

    // Per-call usage, then finish without totals: the accumulated ones stay.
    let call = Usage {
        input_tokens: 100,
        output_tokens: 20,
        cost_usd: Some(0.5),
        estimated: false,
    };
    store.add_usage(&s.id, Some(&r1.id), &call).unwrap();
    store.add_usage(&s.id, Some(&r1.id), &call).unwrap();
    store
        .finish_run(&r1.id, RunStatus::Completed, None, None)
        .unwrap();
    let done = store.get_run(&r1.id).unwrap().unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert!(done.ended_at.is_some());
    assert_eq!(
        done.usage,
        Usage {
            input_tokens: 200,
            output_tokens: 40,
            cost_usd: Some(1.0),
            estimated: false,
        }
    );

    // Final totals at finish replace the run's and move the session's by the
    // difference: nothing is counted twice.
    let r2 = store.start_run(&s.id, "claude-y").unwrap();
    store.add_usage(&s.id, Some(&r2.id), &call).unwrap();
    let total = Usage {
        input_tokens: 150,
        output_tokens: 30,
        cost_usd: Some(0.75),
        estimated: false,
    };
    store
        .finish_run(
            &r2.id,
            RunStatus::Failed,
            Some("unsupported-capability"),
            Some(total),
        )
        .unwrap();
    let failed = store.get_run(&r2.id).unwrap().unwrap();
    assert_eq!(failed.reason.as_deref(), Some("unsupported-capability"));
    assert_eq!(failed.usage, total);

    // Session-level usage with no run (e.g. a summary call).
    store
        .add_usage(
            &s.id,
            None,
            &Usage {
                input_tokens: 1,
                output_tokens: 1,
                cost_usd: Some(0.0),
                estimated: false,
            },
        )
        .unwrap();
    drop(store);
    let store = reopen(&dir);
    let u = store.session_usage(&s.id).unwrap();
    assert_eq!((u.input_tokens, u.output_tokens), (351, 71));
    assert!((u.cost_usd.unwrap_or(0.0) - 1.75).abs() < 1e-9, "{u:?}");
    assert_eq!(store.get_session(&s.id).unwrap().unwrap().usage, u);

    // A run ends once; running is not an end.
    assert!(matches!(
        store.finish_run(&r1.id, RunStatus::Cancelled, None, None),
        Err(StoreError::RunNotRunning { .. })
    ));
    let r3 = store.start_run(&s.id, "m").unwrap();
    assert!(matches!(
        store.finish_run(&r3.id, RunStatus::Running, None, None),
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        store.finish_run("run_nope", RunStatus::Completed, None, None),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.start_run("ses_nope", "m"),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.session_usage("ses_nope"),
        Err(StoreError::NotFound { .. })
    ));

    // Usage for a run of another session is refused.
    let s2 = store.create_session("s2", None).unwrap();
    assert!(matches!(
        store.add_usage(&s2.id, Some(&r3.id), &call),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(store.session_usage(&s2.id).unwrap(), Usage::default());

    // Listing: newest first, per session or global.
    let r4 = store.start_run(&s2.id, "m").unwrap();
    let of_s: Vec<_> = store
        .list_runs(Some(&s.id), 10)
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    // Runs started in the same millisecond (common here) keep their order.
    assert_eq!(of_s, [r3.id.clone(), r2.id.clone(), r1.id.clone()]);
    let all = store.list_runs(None, 10).unwrap();
    assert_eq!(all.len(), 4);
    assert!(all.iter().any(|r| r.id == r4.id));
    assert_eq!(store.list_runs(None, 2).unwrap().len(), 2);
}

fn mark_interrupted_runs_spares_live_owners(kind: Kind) {
    let db = Db::new(kind);
    let mine = db.open();
    let s = mine.create_session("s", None).unwrap();
    let own_run = mine.start_run(&s.id, "m").unwrap();

    // Another live store (another process, as far as the locks know).
    let neighbour = db.open();
    let their_run = neighbour.start_run(&s.id, "m").unwrap();
    let finished = neighbour.start_run(&s.id, "m").unwrap();
    neighbour
        .finish_run(&finished.id, RunStatus::Completed, None, None)
        .unwrap();

    assert!(mine.mark_interrupted_runs(None).unwrap().is_empty());
    assert!(neighbour.mark_interrupted_runs(None).unwrap().is_empty());

    // The neighbour goes away without finishing its run.
    drop(neighbour);
    assert_eq!(
        mine.mark_interrupted_runs(None).unwrap(),
        vec![their_run.id.clone()]
    );
    let r = mine.get_run(&their_run.id).unwrap().unwrap();
    assert_eq!(r.status, RunStatus::Interrupted);
    assert_eq!(r.reason.as_deref(), Some(capstan_store::INTERRUPTED_REASON));
    assert!(r.ended_at.is_some());
    // Idempotent, and our own run is still running and can finish.
    assert!(mine.mark_interrupted_runs(None).unwrap().is_empty());
    assert_eq!(
        mine.get_run(&own_run.id).unwrap().unwrap().status,
        RunStatus::Running
    );
    assert_eq!(
        mine.get_run(&finished.id).unwrap().unwrap().status,
        RunStatus::Completed
    );
    mine.finish_run(&own_run.id, RunStatus::Completed, None, None)
        .unwrap();
    // An interrupted run cannot be finished later.
    assert!(matches!(
        mine.finish_run(&their_run.id, RunStatus::Completed, None, None),
        Err(StoreError::RunNotRunning { .. })
    ));
}

#[test]
fn runs_without_owner_count_as_interrupted() {
    let (dir, store) = fresh_file();
    let s = store.create_session("s", None).unwrap();
    drop(store);
    // A row written by something with no owner lock (e.g. a file system
    // that cannot lock): its liveness is unknowable, so it counts as dead.
    let raw = rusqlite_open(&dir.path().join("capstan.db"));
    raw.execute(
        "INSERT INTO runs (id, session_id, model, started_at) VALUES ('run_old', ?1, 'm', '2020-01-01T00:00:00.000Z')",
        [&s.id],
    )
    .unwrap();
    drop(raw);
    let store = reopen_file(&dir);
    assert_eq!(store.mark_interrupted_runs(None).unwrap(), ["run_old"]);
}

// ---- events ----

fn events_replay_in_seq_order(kind: Kind) {
    let (dir, store) = fresh(kind);
    let s = store.create_session("s", None).unwrap();
    let run = store.start_run(&s.id, "m").unwrap();
    let other = store.start_run(&s.id, "m").unwrap();
    // Out of order on purpose: replay sorts by seq, not by arrival.
    for seq in [3u64, 0, 2, 1, 10] {
        let json = event_json(&run.id, seq, &format!("t{seq}"));
        store
            .append_event(
                &run.id,
                seq,
                "2026-01-01T00:00:00.000Z",
                "response.delta",
                &json,
            )
            .unwrap();
    }
    store
        .append_events(&(0..5).map(|i| event(&other.id, i)).collect::<Vec<_>>())
        .unwrap();
    drop(store);
    let store = reopen(&dir);

    let replay = store.events(&run.id).unwrap();
    let seqs: Vec<u64> = replay
        .iter()
        .map(|j| {
            serde_json::from_str::<serde_json::Value>(j).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3, 10]);
    // Stored verbatim.
    assert_eq!(replay[0], event_json(&run.id, 0, "t0"));
    assert_eq!(store.events_after(&run.id, 2).unwrap().len(), 2);
    assert_eq!(store.events_after(&run.id, 10).unwrap().len(), 0);
    assert_eq!(store.events(&other.id).unwrap().len(), 5);
    assert!(store.events("run_nope").unwrap().is_empty());
}

fn record(run: &str, seq: u64, kind: &str, extra: serde_json::Value) -> EventRecord {
    let mut json = serde_json::json!({
        "seq": seq, "run_id": run, "ts": "2026-01-01T00:00:00.000Z", "type": kind,
    });
    json.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    EventRecord {
        run_id: run.into(),
        seq,
        ts: "2026-01-01T00:00:00.000Z".into(),
        kind: kind.into(),
        json: json.to_string(),
    }
}

fn stored_seqs(store: &Store, run: &str, after: Option<u64>) -> Vec<u64> {
    store
        .events_since(run, after)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect()
}

/// Storing `response.completed` deletes the run's deltas before it (whether
/// they were stored one by one, in earlier batches or in the same batch),
/// and nothing else: not its other events, not a later response's deltas,
/// not another run's. Replay and `Last-Event-ID` reads stay exact for what
/// is stored.
fn completed_responses_coalesce_their_deltas(kind: Kind) {
    let (_dir, store) = fresh(kind);
    let s = store.create_session("s", None).unwrap();
    let run = store.start_run(&s.id, "m").unwrap();
    let other = store.start_run(&s.id, "m").unwrap();
    let r = run.id.as_str();
    let delta =
        |seq: u64, text: &str| record(r, seq, "response.delta", serde_json::json!({"text": text}));
    store
        .append_events(&[
            record(r, 0, "run.started", serde_json::json!({"message": "q"})),
            record(r, 1, "activity", serde_json::json!({"message": "searched"})),
        ])
        .unwrap();
    // Deltas one at a time (a live stream) and in a batch.
    let d = delta(2, "The ");
    store.append_event(r, 2, &d.ts, &d.kind, &d.json).unwrap();
    store
        .append_events(&[delta(3, "answer "), delta(4, "is")])
        .unwrap();
    store
        .append_events(&(0..3).map(|i| event(&other.id, i)).collect::<Vec<_>>())
        .unwrap();
    assert_eq!(stored_seqs(&store, r, None), [0, 1, 2, 3, 4]);
    // The last delta and the completed text in one batch, then the end.
    store
        .append_events(&[
            delta(5, " 42."),
            record(
                r,
                6,
                "response.completed",
                serde_json::json!({"text": "The answer is 42.", "citations": []}),
            ),
            record(r, 7, "run.completed", serde_json::json!({"usage": {}})),
        ])
        .unwrap();
    assert_eq!(stored_seqs(&store, r, None), [0, 1, 6, 7]);
    let replay = store.events(r).unwrap();
    assert!(replay[2].contains("The answer is 42."), "{replay:?}");
    // Resuming inside the coalesced deltas: the completed text comes next.
    assert_eq!(stored_seqs(&store, r, Some(3)), [6, 7]);
    assert_eq!(store.events_after(r, 1).unwrap(), replay[2..].to_vec());
    assert_eq!(store.events_after(r, 6).unwrap(), replay[3..].to_vec());
    // Another run's deltas are untouched.
    assert_eq!(stored_seqs(&store, &other.id, None), [0, 1, 2]);

    // A second response in the same run: only its own deltas go, and a
    // completed event stored alone (not batched) coalesces too.
    store
        .append_events(&[delta(8, "More"), delta(9, ".")])
        .unwrap();
    let done = record(
        r,
        10,
        "response.completed",
        serde_json::json!({"text": "More.", "citations": []}),
    );
    store
        .append_event(r, 10, &done.ts, &done.kind, &done.json)
        .unwrap();
    assert_eq!(stored_seqs(&store, r, None), [0, 1, 6, 7, 10]);
    // The next seq after coalescing still follows the highest stored one.
    let next = store
        .append_next_event(r, "2026-01-01T00:00:00.000Z", "activity", |seq| {
            record(r, seq, "activity", serde_json::json!({"message": "late"})).json
        })
        .unwrap();
    assert_eq!(next, 11);
}

fn event_seq_is_unique_and_batches_are_atomic(kind: Kind) {
    let (_dir, store) = fresh(kind);
    let s = store.create_session("s", None).unwrap();
    let run = store.start_run(&s.id, "m").unwrap();
    let e0 = event(&run.id, 0);
    store
        .append_event(&run.id, 0, &e0.ts, &e0.kind, &e0.json)
        .unwrap();
    match store.append_event(&run.id, 0, &e0.ts, &e0.kind, &e0.json) {
        Err(StoreError::DuplicateEvent { run_id, seq }) => {
            assert_eq!((run_id, seq), (run.id.clone(), 0))
        }
        other => panic!("expected DuplicateEvent, got {other:?}"),
    }
    // A batch whose last event collides stores nothing.
    let batch: Vec<_> = [1, 2, 3, 0]
        .into_iter()
        .map(|i| event(&run.id, i))
        .collect();
    assert!(matches!(
        store.append_events(&batch),
        Err(StoreError::DuplicateEvent { seq: 0, .. })
    ));
    assert_eq!(store.events(&run.id).unwrap().len(), 1);
    // A batch that repeats a seq within itself is refused too.
    let batch: Vec<_> = [1, 2, 1].into_iter().map(|i| event(&run.id, i)).collect();
    assert!(matches!(
        store.append_events(&batch),
        Err(StoreError::DuplicateEvent { seq: 1, .. })
    ));
    assert_eq!(store.events(&run.id).unwrap().len(), 1);

    assert!(matches!(
        store.append_event("run_nope", 0, &e0.ts, &e0.kind, &e0.json),
        Err(StoreError::NotFound { what: "run", .. })
    ));
    assert!(matches!(
        store.append_event(&run.id, 5, &e0.ts, &e0.kind, "{truncated"),
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        store.append_event(&run.id, u64::MAX, &e0.ts, &e0.kind, "{}"),
        Err(StoreError::InvalidArgument(_))
    ));
    store.append_events(&[]).unwrap();
}

fn event_writer_batches_and_reports_errors_at_flush(kind: Kind) {
    let (_dir, store) = fresh(kind);
    let store = Arc::new(store);
    let s = store.create_session("s", None).unwrap();
    let run = store.start_run(&s.id, "m").unwrap();
    let writer = EventWriter::new(store.clone());
    for seq in 0..5_000 {
        writer.push(event(&run.id, seq)).unwrap();
    }
    writer.flush().unwrap();
    assert_eq!(store.events(&run.id).unwrap().len(), 5_000);

    // One bad event among good ones costs only itself.
    writer.push(event(&run.id, 5_000)).unwrap();
    writer.push(event(&run.id, 17)).unwrap(); // duplicate
    writer.push(event(&run.id, 5_001)).unwrap();
    let err = writer.flush().unwrap_err();
    assert!(
        matches!(err, StoreError::DuplicateEvent { seq: 17, .. }),
        "{err}"
    );
    assert_eq!(store.events(&run.id).unwrap().len(), 5_002);
    writer.flush().unwrap(); // the error was reported once

    // Dropping the writer commits what is still queued.
    for seq in 5_002..5_100 {
        writer.push(event(&run.id, seq)).unwrap();
    }
    drop(writer);
    assert_eq!(store.events(&run.id).unwrap().len(), 5_100);
}

fn ended(run: &str, seq: u64) -> EventRecord {
    EventRecord {
        run_id: run.into(),
        seq,
        ts: "2026-01-01T00:00:00.000Z".into(),
        kind: "run.completed".into(),
        json: serde_json::json!({
            "seq": seq, "run_id": run, "ts": "2026-01-01T00:00:00.000Z",
            "type": "run.completed", "usage": {"input_tokens": 1, "output_tokens": 2},
        })
        .to_string(),
    }
}

fn kinds(store: &Store, run: &str) -> Vec<String> {
    store
        .events(run)
        .unwrap()
        .iter()
        .map(|j| serde_json::from_str::<serde_json::Value>(j).unwrap()["type"].to_string())
        .collect()
}

/// A reader on another handle (another replica) never sees a run's terminal
/// event while the run still reads `running`: the writer holds the event back
/// until `finish` stores it with the status, in one transaction.
fn a_run_ends_with_its_terminal_event_in_one_transaction(kind: Kind) {
    let (db, store) = fresh(kind);
    let store = Arc::new(store);
    let other = reopen(&db);
    let s = store.create_session("s", None).unwrap();
    let run = store.start_run(&s.id, "m").unwrap();
    let writer = EventWriter::new(store.clone());
    for seq in 0..3 {
        writer.push(event(&run.id, seq)).unwrap();
    }
    writer.push(ended(&run.id, 3)).unwrap();
    let seen = other
        .wait_events(&run.id, Some(2), std::time::Duration::from_millis(500))
        .unwrap();
    assert!(
        seen.is_empty(),
        "the terminal event was stored early: {seen:?}"
    );
    assert_eq!(other.events(&run.id).unwrap().len(), 3);
    assert_eq!(
        other.get_run(&run.id).unwrap().unwrap().status,
        RunStatus::Running
    );

    let usage = Usage {
        input_tokens: 1,
        output_tokens: 2,
        ..Usage::default()
    };
    writer
        .finish(&run.id, RunStatus::Completed, None, Some(usage))
        .unwrap();
    assert_eq!(kinds(&other, &run.id).last().unwrap(), "\"run.completed\"");
    let got = other.get_run(&run.id).unwrap().unwrap();
    assert_eq!(got.status, RunStatus::Completed);
    assert_eq!(got.usage.output_tokens, 2);

    // Ended elsewhere first (another replica interrupted it): the finish is
    // refused and the held event is still kept.
    let run2 = store.start_run(&s.id, "m").unwrap();
    writer.push(ended(&run2.id, 0)).unwrap();
    other
        .finish_run(
            &run2.id,
            RunStatus::Interrupted,
            Some("lease-expired"),
            None,
        )
        .unwrap();
    let err = writer
        .finish(&run2.id, RunStatus::Completed, None, None)
        .unwrap_err();
    assert!(matches!(err, StoreError::RunNotRunning { .. }), "{err}");
    assert_eq!(store.events(&run2.id).unwrap().len(), 1);
    assert_eq!(
        store.get_run(&run2.id).unwrap().unwrap().status,
        RunStatus::Interrupted
    );

    // A flush stores what is held, as it is (callers that end runs another way).
    let run3 = store.start_run(&s.id, "m").unwrap();
    writer.push(ended(&run3.id, 0)).unwrap();
    writer.flush().unwrap();
    assert_eq!(store.events(&run3.id).unwrap().len(), 1);
    assert_eq!(
        store.get_run(&run3.id).unwrap().unwrap().status,
        RunStatus::Running
    );

    // All or nothing: a bad last event leaves the run running and stores nothing.
    let run4 = store.start_run(&s.id, "m").unwrap();
    let mut bad = ended(&run4.id, 0);
    bad.json = "{truncated".into();
    assert!(
        store
            .finish_run_with_events(&run4.id, RunStatus::Completed, None, None, &[bad])
            .is_err()
    );
    assert!(store.events(&run4.id).unwrap().is_empty());
    assert_eq!(
        store.get_run(&run4.id).unwrap().unwrap().status,
        RunStatus::Running
    );
}

fn seqs(store: &Store, run: &str) -> Vec<u64> {
    store
        .events(run)
        .unwrap()
        .iter()
        .map(|j| {
            serde_json::from_str::<serde_json::Value>(j).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// The writer lingers to batch events, and a run's events still waiting for
/// its batch are stored by the run's end, in the end's transaction: each once,
/// in order, while another run's events stay in the batch and are stored by
/// it. A run whose early events the batch already stored ends as well.
fn a_run_s_unstored_events_are_stored_by_its_end(kind: Kind) {
    let (db, store) = fresh(kind);
    let store = Arc::new(store);
    let other = reopen(&db);
    let sa = store.create_session("a", None).unwrap();
    let sb = store.create_session("b", None).unwrap();
    let a = store.start_run(&sa.id, "m").unwrap();
    let b = store.start_run(&sb.id, "m").unwrap();
    let writer = EventWriter::new(store.clone());
    for seq in 0..20 {
        writer.push(event(&a.id, seq)).unwrap();
        writer.push(event(&b.id, seq)).unwrap();
    }
    writer.push(ended(&a.id, 20)).unwrap();
    writer
        .finish(&a.id, RunStatus::Completed, None, None)
        .unwrap();
    assert_eq!(seqs(&other, &a.id), (0..=20).collect::<Vec<_>>());
    assert_eq!(kinds(&other, &a.id).last().unwrap(), "\"run.completed\"");
    assert_eq!(
        other.get_run(&a.id).unwrap().unwrap().status,
        RunStatus::Completed
    );

    // The other run's events come from the batch, without a flush.
    let seen = other
        .wait_events(&b.id, None, std::time::Duration::from_secs(10))
        .unwrap();
    assert!(!seen.is_empty(), "the batch was never stored");
    // Part of b stored by a batch, the rest by its end: nothing twice.
    std::thread::sleep(capstan_store::LINGER * 4);
    writer.push(event(&b.id, 20)).unwrap();
    writer.push(ended(&b.id, 21)).unwrap();
    writer
        .finish(&b.id, RunStatus::Completed, None, None)
        .unwrap();
    assert_eq!(seqs(&other, &b.id), (0..=21).collect::<Vec<_>>());
    writer.flush().unwrap();
}

/// A run's end stores its answer, summary, last events and status together; an
/// answer that cannot be stored does not keep the run from ending, and a run
/// that cannot end still gets its answer.
fn a_run_ends_with_its_answer_in_one_write(kind: Kind) {
    let (_db, store) = fresh(kind);
    let s = store.create_session("s", None).unwrap();
    let (run, _) = store.start_run_with_turn(&s.id, "m", None, "Q?").unwrap();
    let last = [ended(&run.id, 0)];
    let ending = RunEnding {
        id: &run.id,
        status: RunStatus::Completed,
        reason: None,
        usage: Some(Usage {
            input_tokens: 3,
            output_tokens: 4,
            ..Usage::default()
        }),
        last: &last,
        answer: Some(RunAnswer {
            session_id: &s.id,
            answer: "A.",
            summary: "q: a",
        }),
    };
    let (finished, saved) = store.finish_run_with_answer(&ending);
    finished.unwrap();
    saved.unwrap();
    let turns = store.recent_turns(&s.id, 10).unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(
        (turns[1].role, turns[1].content.as_str()),
        (Role::Assistant, "A.")
    );
    assert_eq!(turns[1].run_id.as_deref(), Some(run.id.as_str()));
    let session = store.get_session(&s.id).unwrap().unwrap();
    assert_eq!(
        (session.summary.as_str(), session.usage.output_tokens),
        ("q: a", 4)
    );
    let stored = store.get_run(&run.id).unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.usage.input_tokens),
        (RunStatus::Completed, 3)
    );
    assert_eq!(store.events(&run.id).unwrap().len(), 1);

    // One whose answer names another session (refused, the run ends all the
    // same), the run above again (it cannot end twice: its answer is stored
    // alone), and one without an answer.
    let other = store.create_session("other", None).unwrap();
    let (run2, _) = store.start_run_with_turn(&s.id, "m", None, "Q2?").unwrap();
    let third = store.create_session("third", None).unwrap();
    let (run3, _) = store
        .start_run_with_turn(&third.id, "m", None, "Q3?")
        .unwrap();
    let (last2, last3) = ([ended(&run2.id, 0)], [ended(&run3.id, 0)]);
    let (end2, saved2) = store.finish_run_with_answer(&RunEnding {
        id: &run2.id,
        status: RunStatus::Failed,
        reason: Some("tool-error"),
        usage: None,
        last: &last2,
        answer: Some(RunAnswer {
            session_id: &other.id,
            answer: "misplaced",
            summary: "misplaced",
        }),
    });
    let (end1, saved1) = store.finish_run_with_answer(&RunEnding {
        id: &run.id,
        status: RunStatus::Completed,
        reason: None,
        usage: None,
        last: &[],
        answer: Some(RunAnswer {
            session_id: &s.id,
            answer: "late",
            summary: "late",
        }),
    });
    let (end3, saved3) = store.finish_run_with_answer(&RunEnding {
        id: &run3.id,
        status: RunStatus::Completed,
        reason: None,
        usage: None,
        last: &last3,
        answer: None,
    });
    end2.unwrap();
    assert!(
        matches!(saved2, Err(StoreError::InvalidArgument(_))),
        "{saved2:?}"
    );
    assert!(store.recent_turns(&other.id, 10).unwrap().is_empty());
    assert_eq!(store.get_session(&other.id).unwrap().unwrap().summary, "");
    let stored = store.get_run(&run2.id).unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.reason.as_deref()),
        (RunStatus::Failed, Some("tool-error"))
    );
    assert_eq!(store.events(&run2.id).unwrap().len(), 1);

    assert!(
        matches!(end1, Err(StoreError::RunNotRunning { .. })),
        "{end1:?}"
    );
    saved1.unwrap();
    assert_eq!(
        store
            .recent_turns(&s.id, 10)
            .unwrap()
            .last()
            .unwrap()
            .content,
        "late"
    );
    assert_eq!(
        store.get_run(&run.id).unwrap().unwrap().status,
        RunStatus::Completed
    );

    end3.unwrap();
    saved3.unwrap();
    assert_eq!(
        store.get_run(&run3.id).unwrap().unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(store.recent_turns(&third.id, 10).unwrap().len(), 1);
    assert_eq!(store.events(&run3.id).unwrap().len(), 1);
}

/// A run's start carries the user's turn and its end the answer and the
/// summary; a busy session stores neither run nor turn; an empty answer adds
/// no turn.
fn a_run_starts_with_its_turn_and_ends_with_its_answer(kind: Kind) {
    let (_db, store) = fresh(kind);
    let s = store.create_session("s", None).unwrap();
    let (run, turn) = store
        .start_run_with_turn(&s.id, "m", None, "How do I rotate keys?")
        .unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(turn.run_id.as_deref(), Some(run.id.as_str()));
    assert_eq!((turn.seq, turn.role), (1, Role::User));

    let busy = store.start_run_with_turn(&s.id, "m", None, "again?");
    assert!(
        matches!(busy, Err(StoreError::SessionBusy { .. })),
        "{busy:?}"
    );
    assert_eq!(store.recent_turns(&s.id, 10).unwrap().len(), 1);

    store
        .record_answer(&s.id, &run.id, "Run `capstan keys rotate`.", "keys: rotate")
        .unwrap();
    let turns = store.recent_turns(&s.id, 10).unwrap();
    let last = turns.last().unwrap();
    assert_eq!((turns.len(), last.role), (2, Role::Assistant));
    assert_eq!(last.content, "Run `capstan keys rotate`.");
    assert_eq!(
        store.get_session(&s.id).unwrap().unwrap().summary,
        "keys: rotate"
    );

    store
        .record_answer(&s.id, &run.id, "", "still keys")
        .unwrap();
    assert_eq!(store.recent_turns(&s.id, 10).unwrap().len(), 2);
    assert_eq!(
        store.get_session(&s.id).unwrap().unwrap().summary,
        "still keys"
    );
    assert!(matches!(
        store.record_answer("ses_nope", &run.id, "x", "y"),
        Err(StoreError::NotFound { .. })
    ));

    // A message that starts a session: the session (with its workspace), the
    // run and the turn together, and the session is busy like any other.
    let root = tempfile::tempdir().unwrap();
    let ws = store.add_workspace(root.path(), "w", None).unwrap();
    let bob = Quota {
        user: "bob".into(),
        max_running: Some(1),
        ..Quota::default()
    };
    let (s2, run2, turn2) = store
        .start_run_with_turn_in_new_session("First?", Some(&ws.id), "m", Some(&bob), "First?")
        .unwrap();
    assert_eq!(run2.session_id, s2.id);
    assert_eq!(turn2.run_id.as_deref(), Some(run2.id.as_str()));
    assert_eq!((turn2.seq, turn2.role), (1, Role::User));
    let stored = store.get_session(&s2.id).unwrap().unwrap();
    assert_eq!(
        (stored.title.as_str(), stored.workspace_id.as_deref()),
        ("First?", Some(ws.id.as_str()))
    );
    assert_eq!(
        store.get_run(&run2.id).unwrap().map(|r| r.status),
        Some(RunStatus::Running)
    );
    let turns = store.recent_turns(&s2.id, 10).unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].content, "First?");
    assert!(matches!(
        store.start_run_with_turn(&s2.id, "m", None, "again?"),
        Err(StoreError::SessionBusy { .. })
    ));
    // Refused by the quota (bob's one run is in flight); on SQLite nothing is
    // stored, not even the session. An unknown workspace is refused too.
    let sessions = store.list_sessions(100).unwrap().len();
    let refused =
        store.start_run_with_turn_in_new_session("Second?", None, "m", Some(&bob), "Second?");
    assert!(
        matches!(refused, Err(StoreError::QuotaExceeded { .. })),
        "{refused:?}"
    );
    if kind == Kind::Sqlite {
        assert_eq!(store.list_sessions(100).unwrap().len(), sessions);
    }
    let unknown = store.start_run_with_turn_in_new_session("t", Some("ws_nope"), "m", None, "t");
    assert!(
        matches!(unknown, Err(StoreError::NotFound { .. })),
        "{unknown:?}"
    );
}

/// One message at a time per session, across handles (processes, replicas):
/// of eight exclusive starts racing on four handles, exactly one wins.
fn a_session_runs_one_exclusive_run_at_a_time(kind: Kind) {
    let (db, store) = fresh(kind);
    let s = store.create_session("s", None).unwrap();
    let first = store.start_run_exclusive(&s.id, "m", None).unwrap();
    let err = store.start_run_exclusive(&s.id, "m", None).unwrap_err();
    assert!(err.to_string().contains("cancel"), "{err}");
    match err {
        StoreError::SessionBusy { run_id, .. } => assert_eq!(run_id, first.id),
        other => panic!("expected SessionBusy, got {other:?}"),
    }
    // Another session is not held up.
    let t = store.create_session("t", None).unwrap();
    store.start_run_exclusive(&t.id, "m", None).unwrap();
    store
        .finish_run(&first.id, RunStatus::Completed, None, None)
        .unwrap();
    let second = store.start_run_exclusive(&s.id, "m", None).unwrap();
    store
        .finish_run(&second.id, RunStatus::Cancelled, None, None)
        .unwrap();

    let handles: Vec<Arc<Store>> = (0..4).map(|_| Arc::new(reopen(&db))).collect();
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let h = handles[i % 4].clone();
            let (barrier, sid) = (barrier.clone(), s.id.clone());
            std::thread::spawn(move || {
                barrier.wait();
                h.start_run_exclusive(&sid, "m", None)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{results:?}");
    for r in results.iter().filter(|r| r.is_err()) {
        assert!(matches!(r, Err(StoreError::SessionBusy { .. })), "{r:?}");
    }
}

/// A user's quota holds across handles (processes, replicas): runs in
/// flight, starts per minute and tokens per day, each refused with the
/// limit, the key and when to retry; other users and quota-less starts are
/// not held up.
fn a_users_quota_holds_across_handles(kind: Kind) {
    let (db, store) = fresh(kind);
    let quota = |user: &str| Quota {
        user: user.into(),
        ..Quota::default()
    };

    // Runs in flight: of eight starts racing on four handles (each for a
    // session of its own), exactly two win.
    let alice = Quota {
        max_running: Some(2),
        ..quota("alice")
    };
    let sessions: Vec<String> = (0..8)
        .map(|i| store.create_session(&format!("s{i}"), None).unwrap().id)
        .collect();
    let handles: Vec<Arc<Store>> = (0..4).map(|_| Arc::new(reopen(&db))).collect();
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let h = handles[i % 4].clone();
            let (barrier, sid, q) = (barrier.clone(), sessions[i].clone(), alice.clone());
            std::thread::spawn(move || {
                barrier.wait();
                h.start_run_exclusive(&sid, "m", Some(&q))
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let won: Vec<&capstan_store::Run> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(won.len(), 2, "{results:?}");
    for r in results.iter().filter(|r| r.is_err()) {
        match r {
            Err(
                e @ StoreError::QuotaExceeded {
                    user,
                    kind,
                    limit,
                    retry_after_secs,
                },
            ) => {
                assert_eq!(
                    (user.as_str(), *kind, *limit),
                    ("alice", QuotaKind::Running, 2)
                );
                assert!(*retry_after_secs >= 1, "{e}");
                let msg = e.to_string();
                assert!(
                    msg.contains("runs in flight (2)") && msg.contains("max_runs"),
                    "{msg}"
                );
            }
            other => panic!("expected QuotaExceeded, got {other:?}"),
        }
    }
    // Another user, and a start with no quota, are not held up.
    let other = store.create_session("other", None).unwrap();
    let bob_run = store
        .start_run_exclusive(&other.id, "m", Some(&quota("bob")))
        .unwrap();
    store
        .finish_run(&bob_run.id, RunStatus::Completed, None, None)
        .unwrap();
    let free = store.start_run_exclusive(&other.id, "m", None).unwrap();
    store
        .finish_run(&free.id, RunStatus::Completed, None, None)
        .unwrap();
    // A run that ends frees its slot at once, whichever handle ends it.
    reopen(&db)
        .finish_run(&won[0].id, RunStatus::Cancelled, None, None)
        .unwrap();
    let again = store
        .start_run_exclusive(&sessions[7], "m", Some(&alice))
        .or_else(|_| store.start_run_exclusive(&sessions[6], "m", Some(&alice)))
        .unwrap();
    store
        .finish_run(&again.id, RunStatus::Completed, None, None)
        .unwrap();

    // Starts per minute: three go, the fourth waits for the first to age out.
    let carol = Quota {
        max_per_minute: Some(3),
        ..quota("carol")
    };
    let s = store.create_session("carol", None).unwrap();
    for _ in 0..3 {
        let run = store.start_run_exclusive(&s.id, "m", Some(&carol)).unwrap();
        store
            .finish_run(&run.id, RunStatus::Completed, None, None)
            .unwrap();
    }
    match reopen(&db).start_run_exclusive(&s.id, "m", Some(&carol)) {
        Err(StoreError::QuotaExceeded {
            kind,
            retry_after_secs,
            ..
        }) => {
            assert_eq!(kind, QuotaKind::PerMinute);
            assert!((1..=61).contains(&retry_after_secs), "{retry_after_secs}");
        }
        other => panic!("expected QuotaExceeded, got {other:?}"),
    }

    // Tokens per day: what the user's runs used (in flight or ended) counts.
    let dave = Quota {
        max_tokens_per_day: Some(100),
        ..quota("dave")
    };
    let s = store.create_session("dave", None).unwrap();
    let run = store.start_run_exclusive(&s.id, "m", Some(&dave)).unwrap();
    let used = Usage {
        input_tokens: 60,
        output_tokens: 50,
        ..Usage::default()
    };
    store.add_usage(&s.id, Some(&run.id), &used).unwrap();
    store
        .finish_run(&run.id, RunStatus::Completed, None, None)
        .unwrap();
    let err = reopen(&db)
        .start_run_exclusive(&s.id, "m", Some(&dave))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::QuotaExceeded {
                kind: QuotaKind::TokensPerDay,
                limit: 100,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("tokens_per_day"), "{err}");
    // USD per day likewise, from the runs' costs.
    let erin = Quota {
        max_cost_per_day: Some(0.5),
        ..quota("erin")
    };
    let e = store.create_session("erin", None).unwrap();
    let run = store.start_run_exclusive(&e.id, "m", Some(&erin)).unwrap();
    let cost = Usage {
        cost_usd: Some(0.3),
        ..Usage::default()
    };
    store.add_usage(&e.id, Some(&run.id), &cost).unwrap();
    store
        .finish_run(&run.id, RunStatus::Completed, None, None)
        .unwrap();
    let run2 = store.start_run_exclusive(&e.id, "m", Some(&erin)).unwrap();
    store.add_usage(&e.id, Some(&run2.id), &cost).unwrap();
    store
        .finish_run(&run2.id, RunStatus::Completed, None, None)
        .unwrap();
    let err = reopen(&db)
        .start_run_exclusive(&e.id, "m", Some(&erin))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::QuotaExceeded {
                kind: QuotaKind::CostPerDay,
                limit: 50,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("($0.50)") && err.to_string().contains("usd_per_day"),
        "{err}"
    );
    // Nothing was inserted by the refused starts.
    assert_eq!(store.list_runs(Some(&s.id), 10).unwrap().len(), 1);
}

/// A replica that does not run a run finds it by an approval it asked for,
/// only while it runs.
fn a_running_run_is_found_by_the_approval_it_asked_for(kind: Kind) {
    let (_db, store) = fresh(kind);
    let s = store.create_session("s", None).unwrap();
    let run = store.start_run(&s.id, "m").unwrap();
    let other = store.start_run(&s.id, "m").unwrap();
    let asked = |run_id: &str, seq: u64, approval: &str| {
        let json = serde_json::json!({
            "seq": seq, "run_id": run_id, "ts": "2026-01-01T00:00:00.000Z",
            "type": "approval.requested", "approval_id": approval,
        })
        .to_string();
        store
            .append_event(
                run_id,
                seq,
                "2026-01-01T00:00:00.000Z",
                "approval.requested",
                &json,
            )
            .unwrap();
    };
    asked(&run.id, 0, "apr_one");
    asked(&other.id, 0, "apr_two");
    let found = |a: &str| store.running_run_with_approval(a).unwrap().map(|r| r.id);
    assert_eq!(found("apr_one"), Some(run.id.clone()));
    assert_eq!(found("apr_two"), Some(other.id.clone()));
    assert_eq!(found("apr_none"), None);
    assert_eq!(found("apr_%"), None);
    store
        .finish_run(&run.id, RunStatus::Completed, None, None)
        .unwrap();
    assert_eq!(found("apr_one"), None);
}

// ---- approvals ----

fn approvals_round_trip(kind: Kind) {
    let (dir, store) = fresh(kind);
    let s = store.create_session("s", None).unwrap();
    let run = store.start_run(&s.id, "m").unwrap();
    let other = store.start_run(&s.id, "m").unwrap();
    let reasons = vec!["rm deletes files".to_string(), "-rf: recursive".to_string()];
    let requested = capstan_store::now_rfc3339();
    let id = capstan_store::new_id("apr");
    let a = store
        .record_approval(&NewApproval {
            id: &id,
            run_id: &run.id,
            task_id: "t1",
            action: "exec",
            command: "rm -rf build",
            cwd: "/work/proj",
            risk: "delete",
            reasons: &reasons,
            decision: Decision::ApprovedForSession,
            decided_by: DecidedBy::User,
            grant: Some(capstan_protocol::Grant::for_risk(
                capstan_protocol::GrantSource::Approval,
                capstan_protocol::Risk::Delete,
            )),
            requested_at: &requested,
        })
        .unwrap();
    assert_eq!(a.created_at, requested);
    assert_eq!(a.grant.map(|g| (g.write, g.network)), Some((true, false)));
    for (i, (decision, by)) in [
        (Decision::Denied, DecidedBy::Policy),
        (Decision::Expired, DecidedBy::Flag),
        (Decision::ApprovedAlways, DecidedBy::User),
    ]
    .into_iter()
    .enumerate()
    {
        store
            .record_approval(&NewApproval {
                id: &format!("apr_other{i}"),
                run_id: &other.id,
                task_id: "t9",
                action: "exec",
                command: "curl example.com",
                cwd: "",
                risk: "network",
                reasons: &[],
                decision,
                decided_by: by,
                grant: None,
                requested_at: &capstan_store::now_rfc3339(),
            })
            .unwrap();
    }
    drop(store);
    let store = reopen(&dir);

    assert_eq!(
        store.list_approvals(Some(&run.id), 10).unwrap(),
        vec![a.clone()]
    );
    let all = store.list_approvals(None, 10).unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all[3].decision, Decision::ApprovedAlways);
    assert_eq!(all[0], a);
    assert_eq!(all[1].decision, Decision::Denied);
    assert_eq!(all[2].decided_by, DecidedBy::Flag);
    assert!(all[1].reasons.is_empty());
    assert_eq!(all[1].grant, None, "a denial ran nothing");
    // Bounded to the most recent, still oldest first.
    let last = store.list_approvals(None, 1).unwrap();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].id, "apr_other2");

    let again = NewApproval {
        id: &id,
        run_id: &run.id,
        task_id: "t1",
        action: "exec",
        command: "",
        cwd: "",
        risk: "delete",
        reasons: &[],
        decision: Decision::Denied,
        decided_by: DecidedBy::User,
        grant: None,
        requested_at: &requested,
    };
    assert!(matches!(
        store.record_approval(&again),
        Err(StoreError::InvalidArgument(_))
    ));
    let orphan = NewApproval {
        id: "apr_x",
        run_id: "run_nope",
        ..again
    };
    assert!(matches!(
        store.record_approval(&orphan),
        Err(StoreError::NotFound { what: "run", .. })
    ));
}

#[test]
fn enums_round_trip_through_text() {
    for d in Decision::ALL {
        assert_eq!(d.as_str().parse::<Decision>().unwrap(), *d);
        assert_eq!(serde_json::to_string(d).unwrap(), format!("\"{d}\""));
    }
    for s in RunStatus::ALL {
        assert_eq!(s.as_str().parse::<RunStatus>().unwrap(), *s);
    }
    for p in Profile::ALL {
        assert_eq!(p.as_str().parse::<Profile>().unwrap(), p);
    }
    assert_eq!(
        Decision::ApprovedForSession.as_str(),
        "approved-for-session"
    );
    let err = "sometimes".parse::<Profile>().unwrap_err();
    assert!(
        err.to_string().contains("cautious, trusted, locked"),
        "{err}"
    );
}

// ---- schema, files and errors ----

/// The test's own handle on the file, to tamper with it as another program would.
fn rusqlite_open(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

#[test]
fn fresh_file_is_wal_versioned_and_marked() {
    let (dir, store) = fresh_file();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert!(store.integrity_check().unwrap().is_empty());
    drop(store);
    let raw = rusqlite_open(&dir.path().join("capstan.db"));
    let mode: String = raw
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let app: i32 = raw
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .unwrap();
    assert_eq!(app, capstan_store::APPLICATION_ID);
    // Reopening an up-to-date file migrates nothing and keeps the version.
    drop(raw);
    assert_eq!(reopen_file(&dir).schema_version().unwrap(), SCHEMA_VERSION);
}

#[test]
fn a_version_1_file_keeps_chosen_profiles_and_lets_the_rest_follow_the_config() {
    let (dir, store) = fresh_file();
    drop(store);
    let path = dir.path().join("capstan.db");
    // Turn the fresh file back into what version 1 wrote: no `profile_set`
    // (nor v3's `sessions.deleted_at`, v4's leases or v5's run requests), and 'cautious' for
    // every folder registered without a choice.
    let raw = rusqlite_open(&path);
    raw.execute_batch(
        "ALTER TABLE runs DROP COLUMN checkpoint;
         DROP INDEX runs_by_user;
         ALTER TABLE runs DROP COLUMN user_name;
         ALTER TABLE workspaces DROP COLUMN profile_set;
         ALTER TABLE sessions DROP COLUMN deleted_at;
         DROP INDEX runs_lease;
         ALTER TABLE runs DROP COLUMN lease_expires_at;
         ALTER TABLE runs DROP COLUMN lease_owner;
         DROP TABLE run_requests;
         INSERT INTO workspaces (id, root_path, name, policy_profile, created_at) VALUES
           ('ws_auto', '/a', 'a', 'cautious', '2026-01-01T00:00:00Z'),
           ('ws_chosen', '/b', 'b', 'trusted', '2026-01-01T00:00:00Z');
         PRAGMA user_version = 1;",
    )
    .unwrap();
    drop(raw);
    let store = reopen_file(&dir);
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let profile = |id: &str| {
        store
            .get_workspace_by_id(id)
            .unwrap()
            .unwrap()
            .policy_profile
    };
    assert_eq!(profile("ws_auto"), None);
    assert_eq!(profile("ws_chosen"), Some(Profile::Trusted));
    store.set_profile("ws_chosen", None).unwrap();
    assert_eq!(profile("ws_chosen"), None);
}

#[test]
fn a_version_5_file_keeps_its_approvals_and_accepts_approved_always() {
    let (dir, store) = fresh_file();
    let s = store.create_session("s", None).unwrap();
    let run = store.start_run(&s.id, "m").unwrap();
    let approval = |id: &'static str, decision| NewApproval {
        id,
        run_id: &run.id,
        task_id: "t1",
        action: "network.connect",
        command: "connect example.com:443",
        cwd: "",
        risk: "network",
        reasons: &[],
        decision,
        decided_by: DecidedBy::User,
        grant: None,
        requested_at: "2026-01-01T00:00:00Z",
    };
    store
        .record_approval(&approval("apr_old", Decision::Denied))
        .unwrap();
    drop(store);
    // Put back version 5's table: the same columns, without `approved-always`.
    let raw = rusqlite_open(&dir.path().join("capstan.db"));
    raw.execute_batch(
        "CREATE TABLE approvals_v5 (
             id TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id),
             task_id TEXT NOT NULL, action TEXT NOT NULL,
             command TEXT NOT NULL DEFAULT '', cwd TEXT NOT NULL DEFAULT '',
             risk TEXT NOT NULL,
             reasons TEXT NOT NULL DEFAULT '[]'
                 CHECK (json_valid(reasons) AND json_type(reasons) = 'array'),
             decision TEXT NOT NULL CHECK (decision IN
                 ('approved', 'approved-for-session', 'denied', 'aborted', 'expired')),
             decided_by TEXT NOT NULL CHECK (decided_by IN ('user', 'policy', 'flag')),
             created_at TEXT NOT NULL, decided_at TEXT NOT NULL) STRICT;
         INSERT INTO approvals_v5 SELECT id, run_id, task_id, action, command, cwd, risk,
             reasons, decision, decided_by, created_at, decided_at FROM approvals;
         DROP TABLE approvals;
         ALTER TABLE approvals_v5 RENAME TO approvals;
         CREATE INDEX approvals_by_run ON approvals(run_id, created_at);
         ALTER TABLE runs DROP COLUMN checkpoint;
         DROP INDEX runs_by_user;
         ALTER TABLE runs DROP COLUMN user_name;
         PRAGMA user_version = 5;",
    )
    .unwrap();
    assert!(
        raw.execute("UPDATE approvals SET decision = 'approved-always'", [])
            .is_err(),
        "version 5 refuses the new decision"
    );
    drop(raw);
    let store = reopen_file(&dir);
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    store
        .record_approval(&approval("apr_new", Decision::ApprovedAlways))
        .unwrap();
    let all = store.list_approvals(Some(&run.id), 10).unwrap();
    let decisions: Vec<_> = all.iter().map(|a| (a.id.as_str(), a.decision)).collect();
    assert_eq!(
        decisions,
        [
            ("apr_old", Decision::Denied),
            ("apr_new", Decision::ApprovedAlways)
        ]
    );
}

#[test]
fn newer_schema_is_refused_with_a_clear_error() {
    let (dir, store) = fresh_file();
    let s = store.create_session("keep me", None).unwrap();
    drop(store);
    let path = dir.path().join("capstan.db");
    let raw = rusqlite_open(&path);
    raw.pragma_update(None, "user_version", SCHEMA_VERSION + 2)
        .unwrap();
    drop(raw);

    let err = Store::open(&path).unwrap_err();
    match &err {
        StoreError::SchemaTooNew {
            found, supported, ..
        } => {
            assert_eq!((*found, *supported), (SCHEMA_VERSION + 2, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(
        msg.contains(&format!("schema v{}", SCHEMA_VERSION + 2)),
        "{msg}"
    );
    assert!(msg.contains("upgrade Capstan"), "{msg}");

    // Nothing was written: put the version back and the data is intact.
    let raw = rusqlite_open(&path);
    raw.pragma_update(None, "user_version", SCHEMA_VERSION)
        .unwrap();
    drop(raw);
    assert!(
        Store::open(&path)
            .unwrap()
            .get_session(&s.id)
            .unwrap()
            .is_some()
    );
}

#[test]
fn foreign_and_broken_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();

    let foreign = dir.path().join("other.db");
    rusqlite_open(&foreign)
        .execute_batch("CREATE TABLE notes (body TEXT);")
        .unwrap();
    let err = Store::open(&foreign).unwrap_err();
    assert!(matches!(err, StoreError::ForeignDatabase { .. }), "{err}");
    assert!(err.to_string().contains("not Capstan's"), "{err}");

    let marked = dir.path().join("marked.db");
    rusqlite_open(&marked)
        .pragma_update(None, "application_id", 42)
        .unwrap();
    assert!(matches!(
        Store::open(&marked),
        Err(StoreError::ForeignDatabase { .. })
    ));

    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "this is not a database, just some words, long enough to fill a header.....",
    )
    .unwrap();
    let err = Store::open(&text).unwrap_err();
    assert!(matches!(err, StoreError::NotADatabase { .. }), "{err}");
    assert!(err.to_string().contains("notes.txt"), "{err}");

    let nowhere = dir.path().join("no/such/dir/capstan.db");
    let err = Store::open(&nowhere).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err}");
    assert!(err.to_string().contains("does not exist"), "{err}");

    let err = Store::open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
}

// ---- deleting sessions ----

fn approve(store: &Store, run_id: &str) {
    store
        .record_approval(&NewApproval {
            id: &capstan_store::new_id("apr"),
            run_id,
            task_id: "t1",
            action: "exec",
            command: "make check",
            cwd: "",
            risk: "build",
            reasons: &[],
            decision: Decision::Approved,
            decided_by: DecidedBy::User,
            grant: None,
            requested_at: &capstan_store::now_rfc3339(),
        })
        .unwrap();
}

fn deleting_a_session_erases_the_conversation_and_keeps_the_audit(kind: Kind) {
    let (dir, store) = fresh(kind);
    // A session without approvals disappears whole.
    let plain = store.create_session("plain chat", None).unwrap();
    let run = store.start_run(&plain.id, "m").unwrap();
    store
        .add_turn(&plain.id, Some(&run.id), Role::User, "hi")
        .unwrap();
    store
        .append_event(&run.id, 0, "t", "run.started", "{}")
        .unwrap();
    // A run in flight blocks the delete.
    let err = store.delete_session(&plain.id).unwrap_err();
    assert!(matches!(err, StoreError::SessionRunning { .. }), "{err}");
    assert!(err.to_string().contains("cancel it"), "{err}");
    store
        .finish_run(&run.id, RunStatus::Completed, None, None)
        .unwrap();
    let gone = store.delete_session(&plain.id).unwrap();
    assert_eq!(
        (gone.turns, gone.events, gone.runs, gone.audited_runs_kept),
        (1, 1, 1, 0)
    );
    assert!(store.get_session(&plain.id).unwrap().is_none());
    assert!(store.get_run(&run.id).unwrap().is_none());

    // A session whose run holds an approval: the conversation goes, the
    // approval and its run stay, the session is a hidden tombstone.
    let audited = store.create_session("make check please", None).unwrap();
    let kept = store.start_run(&audited.id, "m").unwrap();
    let plain_run = store.start_run(&audited.id, "m").unwrap();
    for r in [&kept, &plain_run] {
        store
            .finish_run(&r.id, RunStatus::Completed, None, None)
            .unwrap();
    }
    approve(&store, &kept.id);
    store
        .add_turn(&audited.id, Some(&kept.id), Role::User, "run make check")
        .unwrap();
    store
        .add_usage(
            &audited.id,
            Some(&kept.id),
            &Usage {
                input_tokens: 5,
                output_tokens: 1,
                cost_usd: Some(0.0),
                estimated: false,
            },
        )
        .unwrap();
    let gone = store.delete_session(&audited.id).unwrap();
    assert_eq!((gone.turns, gone.runs, gone.audited_runs_kept), (1, 1, 1));
    assert!(store.get_session(&audited.id).unwrap().is_none());
    assert!(
        store
            .list_sessions(10)
            .unwrap()
            .iter()
            .all(|s| s.id != audited.id)
    );
    assert!(store.search_sessions("make", 10).unwrap().is_empty());
    assert!(
        store
            .recent_turns(&audited.id, usize::MAX)
            .unwrap()
            .is_empty()
    );
    let run = store
        .get_run(&kept.id)
        .unwrap()
        .expect("the audited run stays");
    assert_eq!(run.usage.input_tokens, 5);
    assert_eq!(store.list_approvals(Some(&kept.id), 10).unwrap().len(), 1);
    assert!(store.events(&kept.id).unwrap().is_empty());
    // Deleting twice says it is gone; nothing is left half-done after a reopen.
    assert!(matches!(
        store.delete_session(&audited.id),
        Err(StoreError::NotFound { .. })
    ));
    drop(store);
    let store = reopen(&dir);
    assert!(store.integrity_check().unwrap().is_empty());
    assert!(store.get_run(&kept.id).unwrap().is_some());
}

fn sessions_are_found_by_title_or_by_what_was_said(kind: Kind) {
    let (_dir, store) = fresh(kind);
    let a = store
        .create_session("Rotate the signing keys", None)
        .unwrap();
    let b = store.create_session("Other", None).unwrap();
    store
        .add_turn(&b.id, None, Role::Assistant, "use 100% of the quota_x")
        .unwrap();
    let ids = |q: &str| -> Vec<String> {
        store
            .search_sessions(q, 10)
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    assert_eq!(ids("signing"), [a.id.as_str()]);
    assert_eq!(ids("SIGNING"), [a.id.as_str()]);
    assert_eq!(ids("quota_x"), [b.id.as_str()]);
    assert_eq!(ids("100%"), [b.id.as_str()]);
    // `%` and `_` are literal, not wildcards.
    assert!(ids("quota%x").is_empty() && ids("o_her").is_empty());
}

both!(
    a_run_starts_with_its_turn_and_ends_with_its_answer,
    a_run_ends_with_its_answer_in_one_write,
    workspace_round_trip_and_canonical_root,
    workspace_root_must_be_an_existing_directory,
    session_round_trip_summary_and_workspace,
    list_sessions_newest_first_and_bounded,
    turns_keep_order_and_recent_turns_is_bounded,
    concurrent_writers_share_one_file,
    a_run_in_a_new_session_starts_both_or_neither,
    run_round_trip_and_usage_accounting,
    mark_interrupted_runs_spares_live_owners,
    events_replay_in_seq_order,
    event_seq_is_unique_and_batches_are_atomic,
    completed_responses_coalesce_their_deltas,
    event_writer_batches_and_reports_errors_at_flush,
    a_run_ends_with_its_terminal_event_in_one_transaction,
    a_run_s_unstored_events_are_stored_by_its_end,
    a_session_runs_one_exclusive_run_at_a_time,
    a_users_quota_holds_across_handles,
    a_running_run_is_found_by_the_approval_it_asked_for,
    approvals_round_trip,
    deleting_a_session_erases_the_conversation_and_keeps_the_audit,
    sessions_are_found_by_title_or_by_what_was_said,
);
