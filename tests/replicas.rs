//! `capstan serve` replicas over one PostgreSQL database (issue #22,
//! docs/DEPLOY.md): real `capstan serve` processes on 127.0.0.1, each with its
//! own Capstan home, sharing a database (a throw-away cluster this test
//! starts, see crates/store/tests/common/pg.rs) and one workspace folder.
//! A run started on one replica is streamed, approved and cancelled through
//! the others; a replica killed with SIGKILL mid-run has its run marked
//! interrupted by another, whose replay has every seq once, without a gap.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::disallowed_macros)] // eprintln! of the test's tally

mod common;
#[path = "../crates/store/tests/common/pg.rs"]
mod pg;

use std::time::Duration;

use common::Home;
use common::server::{Server, handbook};
use common::sse::{SseReader, types};
use serde_json::{Value, json};

/// Lease time of the replicas under test: short, so a killed replica's run
/// is interrupted soon (the sweep runs every half of it).
const LEASE_SECS: u64 = 2;

/// Seqs 0, 1, 2... in order, each once.
fn assert_gap_free(events: &[Value]) {
    // Stored runs keep no `response.delta` once their response completed
    // (docs/EVENTS.md): those seqs are the only gaps allowed.
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let completed: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] == "response.completed")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let mut want = 0;
    for &seq in &seqs {
        assert!(seq >= want, "seqs not rising: {seqs:?} {:?}", types(events));
        for missing in want..seq {
            assert!(
                completed.iter().any(|&c| c > missing),
                "seq {missing} missing, and no later response.completed replaced it: {seqs:?} {:?}",
                types(events)
            );
        }
        want = seq + 1;
    }
}

/// What a replica following a run through the store saw, against what the
/// replica running it streamed: the same events with the same seqs, except
/// deltas that were coalesced before the follower read them.
fn assert_follows(follower: &[Value], origin: &[Value]) {
    assert_gap_free(follower);
    let by_seq: std::collections::BTreeMap<u64, &Value> = follower
        .iter()
        .map(|e| (e["seq"].as_u64().unwrap(), e))
        .collect();
    for e in origin {
        match by_seq.get(&e["seq"].as_u64().unwrap()) {
            Some(seen) => assert_eq!(*seen, e),
            None => assert_eq!(e["type"], "response.delta", "{:?}", types(follower)),
        }
    }
    assert!(follower.len() <= origin.len());
}

/// The events a replay returns once the run's response completed.
fn stored(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] != "response.delta")
        .cloned()
        .collect()
}

/// One replica: its own home whose capstan.toml names the shared database.
fn replica(url: &str, ws: &std::path::Path) -> (Home, Server) {
    let home = Home::new(&format!(
        "[store]\nurl = {url:?}\nlease_secs = {LEASE_SECS}\n"
    ));
    let server = Server::start(&home, &["-w", ws.to_str().unwrap()]);
    (home, server)
}

async fn start_run(server: &Server, body: Value) -> (String, String, SseReader) {
    let resp = server
        .client()
        .post(server.url("/v1/runs"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let header = |name: &str| resp.headers()[name].to_str().unwrap().to_string();
    let (run_id, session_id) = (header("x-capstan-run-id"), header("x-capstan-session-id"));
    (run_id, session_id, SseReader::with_seq_ids(resp))
}

async fn events_from(server: &Server, run_id: &str, last_event_id: Option<u64>) -> SseReader {
    let mut req = server
        .client()
        .get(server.url(&format!("/v1/runs/{run_id}/events")));
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id.to_string());
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    SseReader::with_seq_ids(resp)
}

async fn get(server: &Server, path: &str) -> (u16, Value) {
    let resp = server.client().get(server.url(path)).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let resp = server
        .client()
        .post(server.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_started_on_a_is_streamed_from_b_approved_through_c_and_cancelled_through_b() {
    let url = pg::Cluster::shared().fresh_database();
    let ws = handbook();
    let (_ha, a) = replica(&url, ws.path());
    let (_hb, b) = replica(&url, ws.path());
    let (_hc, c) = replica(&url, ws.path());

    // Started on A, waiting for an approval.
    let (run_id, session_id, mut on_a) = start_run(
        &a,
        json!({"message": "run `make check`", "workspace": ws.path()}),
    )
    .await;
    let mut seen_a = Vec::new();
    let asked = on_a.until("approval.requested", &mut seen_a).await;
    let approval = asked["approval_id"].as_str().unwrap().to_string();

    // B streams it from the store: the backlog so far, then live.
    let mut on_b = events_from(&b, &run_id, None).await;
    let mut seen_b = Vec::new();
    on_b.until("approval.requested", &mut seen_b).await;

    // Every replica lists it, from the shared store.
    for server in [&a, &b, &c] {
        let (s, run) = get(server, &format!("/v1/runs/{run_id}")).await;
        assert_eq!(s, 200, "{run}");
        assert_eq!(run["status"], "running");
        let (_, sessions) = get(server, "/v1/sessions").await;
        assert!(
            sessions["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["id"] == session_id.as_str()),
            "{sessions}"
        );
    }

    // The session runs one message at a time on every replica: B refuses a
    // second message for it, naming the run in progress.
    let (s, busy) = post(
        &b,
        "/v1/runs",
        json!({"message": "How are releases signed?", "session_id": session_id}),
    )
    .await;
    assert_eq!(s, 409, "{busy}");
    assert!(busy.to_string().contains(&run_id), "{busy}");

    // Approved through C, which does not run it: the decision reaches A.
    let (s, ok) = post(
        &c,
        &format!("/v1/approvals/{approval}"),
        json!({"decision": "approved"}),
    )
    .await;
    assert_eq!(s, 200, "{ok}");
    on_a.rest(&mut seen_a).await;
    on_b.rest(&mut seen_b).await;
    assert_eq!(
        seen_a.last().unwrap()["type"],
        "run.completed",
        "{:?}",
        types(&seen_a)
    );
    let decided = seen_b
        .iter()
        .find(|e| e["type"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["decision"], "approved");
    assert_eq!(decided["via"], "http-token");
    assert!(
        seen_b
            .iter()
            .any(|e| e["type"] == "terminal.step" && e["exit_code"] == 0),
        "{:?}",
        types(&seen_b)
    );
    // B saw what A sent, in the same order, with the same seqs (deltas it read
    // only after the response completed were coalesced).
    assert_gap_free(&seen_a);
    assert_follows(&seen_b, &seen_a);
    // An approval nobody waits for is still a 404 from any replica.
    let (s, err) = post(
        &b,
        &format!("/v1/approvals/{approval}"),
        json!({"decision": "approved"}),
    )
    .await;
    assert_eq!(s, 404, "{err}");

    // Replay after a Last-Event-ID, from C: the rest, nothing twice.
    let mut replay = events_from(&c, &run_id, Some(3)).await;
    let mut rest = Vec::new();
    replay.rest(&mut rest).await;
    assert_eq!(rest, stored(&seen_a[4..]));

    // A long command started on A, cancelled through B.
    let (run_id, _, mut on_a) = start_run(
        &a,
        json!({"message": "run `sleep 60`", "workspace": ws.path()}),
    )
    .await;
    let mut seen_a = Vec::new();
    on_a.until("task.started", &mut seen_a).await;
    let mut on_c = events_from(&c, &run_id, None).await;
    let (s, body) = post(&b, &format!("/v1/runs/{run_id}/cancel"), json!({})).await;
    assert_eq!(s, 202, "{body}");
    on_a.rest(&mut seen_a).await;
    assert_eq!(
        seen_a.last().unwrap()["type"],
        "run.cancelled",
        "{:?}",
        types(&seen_a)
    );
    let mut seen_c = Vec::new();
    on_c.rest(&mut seen_c).await;
    assert_follows(&seen_c, &seen_a);
    // The terminal event and the status are stored in one transaction: a
    // client that saw `run.cancelled` from any replica reads `cancelled`.
    let (_, run) = get(&c, &format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "cancelled", "{run}");
    let (s, _) = post(&b, &format!("/v1/runs/{run_id}/cancel"), json!({})).await;
    assert_eq!(s, 409, "an ended run cannot be cancelled from any replica");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_replica_s_run_is_interrupted_by_another_and_replays_without_gap() {
    let url = pg::Cluster::shared().fresh_database();
    let ws = handbook();
    let (_ha, mut a) = replica(&url, ws.path());
    let (_hb, b) = replica(&url, ws.path());

    let (run_id, _, mut on_a) = start_run(
        &a,
        json!({"message": "run `sleep 30`", "workspace": ws.path()}),
    )
    .await;
    let mut seen_a = Vec::new();
    on_a.until("task.started", &mut seen_a).await;
    let mut on_b = events_from(&b, &run_id, None).await;

    // SIGKILL: no shutdown, no last event, the lease just stops being renewed.
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let mut seen_b = Vec::new();
    on_b.rest(&mut seen_b).await;
    let last = seen_b.last().unwrap();
    assert_eq!(last["type"], "run.failed", "{:?}", types(&seen_b));
    assert_eq!(last["reason"], "lease-expired");
    assert!(
        last["message"].as_str().unwrap().contains("lease"),
        "{last}"
    );
    assert_gap_free(&seen_b);
    // What A streamed before it died is a prefix of what B has.
    assert_eq!(seen_b[..seen_a.len()], seen_a[..]);
    let (_, run) = get(&b, &format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "interrupted", "{run}");
    assert_eq!(run["reason"], "lease-expired", "{run}");

    // A full replay from B later: the same events, each once.
    let mut replay = events_from(&b, &run_id, None).await;
    let mut again = Vec::new();
    replay.rest(&mut again).await;
    assert_eq!(again, seen_b);
    assert_eq!(
        again.iter().filter(|e| e["type"] == "run.failed").count(),
        1
    );
}

#[test]
fn an_unreachable_store_is_a_clear_error_without_the_password() {
    let home = Home::new("");
    // Port 1 on loopback: nothing listens there.
    let out = home
        .capstan()
        .args([
            "serve",
            "--port",
            "0",
            "--store",
            "postgres://capstan:hunter2@127.0.0.1:1/capstan",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("postgres://capstan:***@127.0.0.1:1/capstan"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.contains("--store"), "names what to fix: {err}");

    let bad = Home::new("[store]\nlease_secs = 0\n");
    let out = bad
        .capstan()
        .args(["serve", "--port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lease_secs"), "{err}");
}

/// Runs spread over three replicas (commands approved by flag, so none
/// waits for a person) while replicas are killed with SIGKILL and started
/// again: every run ends, in exactly one terminal state, and its stored
/// events (replayed from a live replica) have gap-free seqs and exactly one
/// terminal event, the last, matching the run's status.
#[tokio::test(flavor = "multi_thread")]
async fn runs_spread_over_replicas_with_kills_each_end_in_one_terminal_state() {
    const RUNS: usize = 1000;
    // A kill every 125 runs: 7 kills, each with runs of every kind in flight.
    let kill_at = |i: usize| i > 0 && i.is_multiple_of(125);
    let url = pg::Cluster::shared().fresh_database();
    let ws = handbook();
    let wsp = ws.path().to_str().unwrap().to_string();
    let start = |home: &Home| Server::start(home, &["-w", &wsp, "--approve", "all"]);
    let homes: Vec<Home> = (0..3)
        .map(|_| {
            Home::new(&format!(
                "[store]\nurl = {url:?}\nlease_secs = {LEASE_SECS}\n"
            ))
        })
        .collect();
    let mut servers: Vec<Server> = homes.iter().map(start).collect();
    let messages = [
        "run `sleep 2`",
        "How are releases signed?",
        "run `make check`",
    ];
    let mut run_ids = Vec::new();
    let mut readers = Vec::new();
    for i in 0..RUNS {
        if kill_at(i) {
            let victim = fastrand::usize(..servers.len());
            servers[victim].child.kill().unwrap();
            servers[victim].child.wait().unwrap();
            servers[victim] = start(&homes[victim]);
        }
        let server = &servers[i % servers.len()];
        let (run_id, _, mut sse) = start_run(
            server,
            json!({"message": messages[i % messages.len()], "workspace": ws.path()}),
        )
        .await;
        run_ids.push(run_id);
        // Read each stream to its end (or to its server's death).
        readers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Ok(Some(e)) =
                tokio::time::timeout(Duration::from_secs(120), sse.next_lenient()).await
            {
                seen.push(e);
            }
            seen
        }));
    }
    for r in readers {
        r.await.unwrap();
    }

    // Every run ends: the replicas that ran them, or the sweep of another.
    let observer = &servers[0];
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let mut running = Vec::new();
        for id in &run_ids {
            let (_, run) = get(observer, &format!("/v1/runs/{id}")).await;
            if run["status"] == "running" {
                running.push(id.clone());
            }
        }
        if running.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "runs still running after 180 s: {running:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    for (i, id) in run_ids.iter().enumerate() {
        let server = &servers[i % servers.len()];
        let (_, run) = get(server, &format!("/v1/runs/{id}")).await;
        let status = run["status"].as_str().unwrap().to_string();
        let mut replay = events_from(server, id, None).await;
        let mut events = Vec::new();
        replay.rest(&mut events).await;
        assert_gap_free(&events);
        let terminal: Vec<&Value> = events
            .iter()
            .filter(|e| {
                matches!(
                    e["type"].as_str(),
                    Some("run.completed" | "run.failed" | "run.cancelled")
                )
            })
            .collect();
        assert_eq!(
            terminal.len(),
            1,
            "run {id} ({status}): {:?}",
            types(&events)
        );
        let last = events.last().unwrap();
        assert_eq!(terminal[0], last, "the terminal event is the last");
        match status.as_str() {
            "completed" => assert_eq!(last["type"], "run.completed"),
            "cancelled" => assert_eq!(last["type"], "run.cancelled"),
            "failed" => assert_eq!(last["type"], "run.failed"),
            // Its replica died: ended by the sweep of another. A run whose
            // own terminal event was saved was ended in the same
            // transaction, so it is never `interrupted`.
            "interrupted" => assert_eq!(last["reason"], "lease-expired", "{last}"),
            other => panic!("run {id} ended {other}"),
        }
        *statuses.entry(status).or_default() += 1;
    }
    // Which states the runs ended in, for the log.
    eprintln!("{RUNS} runs ended: {statuses:?}");
}
