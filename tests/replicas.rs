//! `capstan serve` replicas over one PostgreSQL database (issue #22,
//! docs/DEPLOY.md): real `capstan serve` processes on 127.0.0.1, each with its
//! own Capstan home, sharing a database (a throw-away cluster this test
//! starts, see crates/store/tests/common/pg.rs) and one workspace folder.
//! A run started on one replica is streamed, approved and cancelled through
//! the others; a replica killed with SIGKILL mid-run has its run continued
//! (or, with `resume = "off"`, marked interrupted) by another, whose replay
//! has every seq once, without a gap.
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

/// An AG-UI client behind a load balancer: its run ends in an interrupt on
/// A, and its `resume` lands on B, which forwards the decision to A and
/// streams the rest of the run from the store.
#[tokio::test(flavor = "multi_thread")]
async fn an_agui_interrupt_raised_on_a_is_answered_by_a_resume_sent_to_b() {
    let url = pg::Cluster::shared().fresh_database();
    let ws = handbook();
    let (_ha, a) = replica(&url, ws.path());
    let (_hb, b) = replica(&url, ws.path());
    let forwarded = json!({"workspace": ws.path()});
    let first = a
        .agui(
            json!({"threadId": "t-lb", "runId": "r1", "forwardedProps": forwarded,
               "messages": [{"id": "m1", "role": "user", "content": "run `make check`"}]}),
        )
        .await;
    let finished = first.last().unwrap();
    assert_eq!(finished["outcome"]["type"], "interrupt", "{first:?}");
    let id = finished["outcome"]["interrupts"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    // An interrupt no run asked for is refused on B as on A.
    let resp = b
        .client()
        .post(b.url("/agui"))
        .json(&json!({"threadId": "t-lb", "runId": "r2", "resume": [
            {"interruptId": "apr_nobody", "status": "resolved", "payload": {"decision": "approved"}}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    let second = b
        .agui(
            json!({"threadId": "t-lb", "runId": "r2", "forwardedProps": forwarded,
               "resume": [{"interruptId": id, "status": "resolved",
                           "payload": {"decision": "approved"}}]}),
        )
        .await;
    let kinds: Vec<&str> = second.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"RUN_STARTED"), "{kinds:?}");
    let finished = second.last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED", "{kinds:?}");
    assert_eq!(finished["outcome"]["type"], "success", "{second:?}");
    let raw: Vec<&Value> = second
        .iter()
        .filter(|e| e["type"] == "RAW")
        .map(|e| &e["event"])
        .collect();
    assert!(
        raw.iter()
            .any(|e| e["type"] == "approval.decided" && e["decision"] == "approved"),
        "{raw:?}"
    );
    assert!(raw.iter().any(|e| e["type"] == "terminal.step"), "{raw:?}");
    let run_id = raw
        .iter()
        .find_map(|e| e["run_id"].as_str())
        .unwrap()
        .to_string();
    let (_, run) = get(&a, &format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "completed", "{run}");
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

/// A POST to `path` with `token` as the bearer: status, `Retry-After` and
/// the body.
async fn post_as(
    server: &Server,
    token: &str,
    path: &str,
    body: Value,
) -> (u16, Option<u64>, Value) {
    let resp = reqwest::Client::new()
        .post(server.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    if status == 200 && path == "/v1/runs" {
        // Run it to its end, so it is in flight no longer.
        let mut seen = Vec::new();
        SseReader::with_seq_ids(resp).rest(&mut seen).await;
        let last = seen.last().cloned().unwrap_or(Value::Null);
        return (status, retry, last);
    }
    (status, retry, resp.json().await.unwrap_or(Value::Null))
}

/// `[[server.user]]` quotas hold across replicas, counted in the database:
/// alice (one run in flight, three starts a minute) runs a command on A; B
/// refuses her next message with 429, `Retry-After` and the key to raise,
/// while bob and the server's own token still start runs there; once her
/// run is cancelled (through C), B takes her next message; her fourth start
/// within the minute is refused by A; and her token does not open `/mcp`.
#[tokio::test(flavor = "multi_thread")]
async fn a_users_quota_holds_across_replicas() {
    let url = pg::Cluster::shared().fresh_database();
    let ws = handbook();
    let tokens = tempfile::tempdir().unwrap();
    let (alice, bob) = (
        "alice-token-5f0c2d9e8b7a6f41",
        "bob-token-0a1b2c3d4e5f6a7b8c",
    );
    std::fs::write(tokens.path().join("alice"), format!("{alice}\n")).unwrap();
    std::fs::write(tokens.path().join("bob"), bob).unwrap();
    let users = format!(
        "[[server.user]]\nname = \"alice\"\ntoken_file = {:?}\nmax_runs = 1\nruns_per_minute = 3\n\n\
         [[server.user]]\nname = \"bob\"\ntoken_file = {:?}\nmax_runs = 4\n",
        tokens.path().join("alice").display().to_string(),
        tokens.path().join("bob").display().to_string(),
    );
    let replica = |url: &str| {
        let home = Home::new(&format!(
            "[store]\nurl = {url:?}\nlease_secs = {LEASE_SECS}\n\n{users}"
        ));
        let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
        (home, server)
    };
    let (_ha, a) = replica(&url);
    let (_hb, b) = replica(&url);
    let (_hc, c) = replica(&url);
    let question = json!({"message": "How are releases signed?"});

    // Alice's long command, in flight on A.
    let resp = reqwest::Client::new()
        .post(a.url("/v1/runs"))
        .bearer_auth(alice)
        .json(&json!({"message": "run `sleep 60`", "workspace": ws.path()}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let run_id = resp.headers()["x-capstan-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut on_a = SseReader::with_seq_ids(resp);
    let mut seen_a = Vec::new();
    on_a.until("task.started", &mut seen_a).await;

    // B refuses her next one: the count is the database's, not A's.
    let (s, retry, err) = post_as(&b, alice, "/v1/runs", question.clone()).await;
    assert_eq!(s, 429, "{err}");
    assert!(retry.is_some_and(|r| r >= 1), "{retry:?}");
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("alice") && msg.contains("runs in flight (1)") && msg.contains("max_runs"),
        "{msg}"
    );
    assert_eq!(err["error"]["code"], "too_many_requests");
    // Others are not held up by her quota.
    let (s, _, last) = post_as(&b, bob, "/v1/runs", question.clone()).await;
    assert_eq!((s, &last["type"]), (200, &json!("run.completed")), "{last}");
    let (s, _, last) = post_as(
        &b,
        b.token.as_deref().unwrap(),
        "/v1/runs",
        question.clone(),
    )
    .await;
    assert_eq!((s, &last["type"]), (200, &json!("run.completed")), "{last}");

    // Her run cancelled through C: B takes her next message.
    let (s, body) = post(&c, &format!("/v1/runs/{run_id}/cancel"), json!({})).await;
    assert_eq!(s, 202, "{body}");
    on_a.rest(&mut seen_a).await;
    assert_eq!(seen_a.last().unwrap()["type"], "run.cancelled");
    let (s, _, last) = post_as(&b, alice, "/v1/runs", question.clone()).await;
    assert_eq!((s, &last["type"]), (200, &json!("run.completed")), "{last}");
    let (s, _, last) = post_as(&c, alice, "/v1/runs", question.clone()).await;
    assert_eq!((s, &last["type"]), (200, &json!("run.completed")), "{last}");

    // Three starts this minute: A refuses the fourth until the first ages out.
    let (s, retry, err) = post_as(&a, alice, "/v1/runs", question.clone()).await;
    assert_eq!(s, 429, "{err}");
    assert!(retry.is_some_and(|r| (1..=61).contains(&r)), "{retry:?}");
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(msg.contains("runs_per_minute"), "{msg}");

    // Her token opens the run API, not /mcp.
    let (s, _, err) = post_as(&a, alice, "/mcp", json!({})).await;
    assert_eq!(s, 403, "{err}");
    assert!(err.to_string().contains("/mcp"), "{err}");
}

/// With `[store] resume = "off"` a dead replica's run is not continued: it
/// ends `interrupted`, whatever was in flight.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_replica_s_run_is_interrupted_by_another_and_replays_without_gap() {
    let url = pg::Cluster::shared().fresh_database();
    let ws = handbook();
    let config = format!("[store]\nurl = {url:?}\nlease_secs = {LEASE_SECS}\nresume = \"off\"\n");
    let (ha, hb) = (Home::new(&config), Home::new(&config));
    let mut a = Server::start(&ha, &["-w", ws.path().to_str().unwrap()]);
    let b = Server::start(&hb, &["-w", ws.path().to_str().unwrap()]);

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

/// `[store] resume = "safe"` (the default): a replica killed mid-run has its
/// run continued by another from its last completed task. The task that
/// completed on A (a document written) does not run again; the read-only
/// command that was running starts again on B; the replay has every seq once
/// and one terminal event, `run.completed`.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_replica_s_run_is_resumed_by_another_from_its_last_completed_task() {
    let url = pg::Cluster::shared().fresh_database();
    let ws = handbook();
    let wsp = ws.path().to_str().unwrap();
    let (ha, hb) = (
        Home::new(&format!(
            "[store]\nurl = {url:?}\nlease_secs = {LEASE_SECS}\n"
        )),
        Home::new(&format!(
            "[store]\nurl = {url:?}\nlease_secs = {LEASE_SECS}\n"
        )),
    );
    let mut a = Server::start(&ha, &["-w", wsp, "--approve", "all"]);
    let b = Server::start(&hb, &["-w", wsp, "--approve", "all"]);

    let (run_id, session_id, mut on_a) = start_run(
        &a,
        json!({
            "message": "run `sleep 12` and create notes.docx: Resumed runs keep their work",
            "workspace": ws.path(),
        }),
    )
    .await;
    // The document task completes while the command still sleeps (12 s:
    // room for the docx component's first compile on a loaded machine).
    let mut seen_a = Vec::new();
    loop {
        let e = on_a.until("task.completed", &mut seen_a).await;
        if e["task_id"] == "t2" {
            break;
        }
    }
    assert!(ws.path().join("notes.docx").is_file());
    let written = std::fs::metadata(ws.path().join("notes.docx"))
        .unwrap()
        .modified()
        .unwrap();
    let mut on_b = events_from(&b, &run_id, None).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    let mut seen_b = Vec::new();
    on_b.rest(&mut seen_b).await;
    let kinds = types(&seen_b);
    assert_eq!(seen_b.last().unwrap()["type"], "run.completed", "{kinds:?}");
    assert_gap_free(&seen_b);
    assert_eq!(seen_b[..seen_a.len()], seen_a[..]);
    let resumed: Vec<&Value> = seen_b
        .iter()
        .filter(|e| e["type"] == "run.resumed")
        .collect();
    assert_eq!(resumed.len(), 1, "{kinds:?}");
    assert_eq!(resumed[0]["completed"], json!(["t2"]), "{}", resumed[0]);
    assert_eq!(resumed[0]["restarted"], json!(["t1"]), "{}", resumed[0]);
    let started = |task: &str| {
        seen_b
            .iter()
            .filter(|e| e["type"] == "task.started" && e["task_id"] == task)
            .count()
    };
    assert_eq!(started("t2"), 1, "the completed task ran once: {kinds:?}");
    assert_eq!(started("t1"), 2, "the running one started again: {kinds:?}");
    // The document was not written a second time.
    assert_eq!(
        std::fs::metadata(ws.path().join("notes.docx"))
            .unwrap()
            .modified()
            .unwrap(),
        written
    );
    let (_, run) = get(&b, &format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "completed", "{run}");
    // The answer is the session's, as for a run that never moved.
    let (_, session) = get(&b, &format!("/v1/sessions/{session_id}/turns")).await;
    let turns = session["turns"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        turns.last().map(|t| t["role"].clone()),
        Some(json!("assistant")),
        "{session}"
    );

    // A replay later: the same events, each once.
    let mut replay = events_from(&b, &run_id, None).await;
    let mut again = Vec::new();
    replay.rest(&mut again).await;
    assert_eq!(again, seen_b);
}

/// A command still waiting for its first approval when its replica died ran
/// nothing: another replica resumes the run, closes the dead question
/// (`approval.decided`, `aborted` by policy, in the audit too), asks again,
/// and the new answer runs it once.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_waiting_for_approval_on_a_dead_replica_is_asked_again_by_another() {
    let url = pg::Cluster::shared().fresh_database();
    let ws = handbook();
    let (_ha, mut a) = replica(&url, ws.path());
    let (_hb, b) = replica(&url, ws.path());

    let (run_id, _, mut on_a) = start_run(
        &a,
        json!({"message": "run `touch made-once.txt`", "workspace": ws.path()}),
    )
    .await;
    let mut seen_a = Vec::new();
    let first = on_a.until("approval.requested", &mut seen_a).await;
    let mut on_b = events_from(&b, &run_id, None).await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    // B's stream replays A's question first, then B asks anew.
    let mut seen_b = Vec::new();
    let second = loop {
        let asked = on_b.until("approval.requested", &mut seen_b).await;
        if asked["approval_id"] != first["approval_id"] {
            break asked;
        }
    };
    let closed: Vec<&Value> = seen_b
        .iter()
        .filter(|e| e["type"] == "approval.decided")
        .collect();
    assert_eq!(closed.len(), 1, "{:?}", types(&seen_b));
    assert_eq!(closed[0]["approval_id"], first["approval_id"]);
    assert_eq!(closed[0]["decision"], "aborted");
    assert_eq!(closed[0]["by"], "policy");
    assert!(!ws.path().join("made-once.txt").exists());
    // The dead question cannot be answered any more; the new one can.
    let dead = first["approval_id"].as_str().unwrap();
    let (s, _) = post(
        &b,
        &format!("/v1/approvals/{dead}"),
        json!({"decision": "approved"}),
    )
    .await;
    assert_ne!(s, 200);
    let live = second["approval_id"].as_str().unwrap();
    let (s, ok) = post(
        &b,
        &format!("/v1/approvals/{live}"),
        json!({"decision": "approved"}),
    )
    .await;
    assert_eq!(s, 200, "{ok}");
    on_b.rest(&mut seen_b).await;
    assert_eq!(
        seen_b.last().unwrap()["type"],
        "run.completed",
        "{:?}",
        types(&seen_b)
    );
    assert_gap_free(&seen_b);
    assert!(ws.path().join("made-once.txt").is_file());
    // The audit, read from the shared database.
    let store = capstan_store::Store::open_url(&url).unwrap();
    let decisions: Vec<(String, String)> = store
        .list_approvals(Some(&run_id), 10)
        .unwrap()
        .into_iter()
        .map(|a| (a.id, a.decision.as_str().to_string()))
        .collect();
    assert!(
        decisions.contains(&(dead.to_string(), "aborted".to_string())),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&(live.to_string(), "approved".to_string())),
        "{decisions:?}"
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
        // A resumed run says so once, and still ends once.
        let resumed = events.iter().filter(|e| e["type"] == "run.resumed").count();
        if resumed > 0 {
            *statuses
                .entry(format!("{status} after {resumed} resume(s)"))
                .or_default() += 1;
        }
        *statuses.entry(status).or_default() += 1;
    }
    // Which states the runs ended in, for the log.
    eprintln!("{RUNS} runs ended: {statuses:?}");
}

/// Issue #41: no process a command can see shows what the caller typed. A
/// replica started with its token and a password-bearing store URL on the
/// command line (which it warns about) runs a command that reads every
/// `/proc/*/cmdline` and `/proc/*/environ` it can see; neither secret is
/// there, while the task's own processes are (so the command did read them).
#[tokio::test(flavor = "multi_thread")]
async fn a_tasks_processes_show_nothing_of_the_callers_command_line() {
    let base = pg::Cluster::shared().fresh_database();
    // The throw-away cluster trusts loopback, so any password is accepted.
    let url = base.replacen("postgres@", "postgres:pw-marker-4711@", 1);
    assert_ne!(url, base);
    let ws = handbook();
    let home = Home::new("");
    let server = Server::start(
        &home,
        &[
            "-w",
            ws.path().to_str().unwrap(),
            "--token",
            "token-marker-0815",
            "--store",
            &url,
            "--approve",
            "all",
        ],
    );
    let command = "for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do \
                   printf '%s: ' \"$f\"; tr '\\0' ' ' < \"$f\"; echo; done";
    let (_, _, mut sse) = start_run(
        &server,
        json!({"message": format!("run `{command}`"), "workspace": ws.path()}),
    )
    .await;
    let mut events = Vec::new();
    let step = sse.until("terminal.step", &mut events).await;
    let out = step["output_tail"].as_str().unwrap();
    assert_eq!(step["exit_code"], 0, "{step}");
    assert!(
        out.contains("/proc/1/cmdline: capstan-launch"),
        "the task's init is the launcher, renamed: {out}"
    );
    for secret in ["token-marker-0815", "pw-marker-4711"] {
        assert!(
            !out.contains(secret),
            "{secret} is visible in the task: {out}"
        );
    }
}

/// Issue #42: replicas started at the same moment on a fresh database, all
/// with the same `-w`, all start (registering a workspace is idempotent under
/// concurrency; before, one in two such starts exited `workspace ... is
/// already registered`), and they agree on its id.
#[test]
fn replicas_started_together_on_a_fresh_database_all_start() {
    for _round in 0..3 {
        let url = pg::Cluster::shared().fresh_database();
        let ws = handbook();
        let started: Vec<(Home, Server)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| replica(&url, ws.path())))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let rt = tokio::runtime::Runtime::new().unwrap();
        let ids: Vec<Value> = started
            .iter()
            .map(|(_, server)| {
                rt.block_on(async {
                    let (status, list) = get(server, "/v1/workspaces").await;
                    assert_eq!(status, 200, "{list}");
                    list["workspaces"][0]["id"].clone()
                })
            })
            .collect();
        assert!(
            ids.iter().all(|id| id == &ids[0] && id.is_string()),
            "{ids:?}"
        );
    }
}
