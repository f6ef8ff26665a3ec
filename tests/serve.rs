//! `capstan serve` end to end, through real HTTP on 127.0.0.1 (reqwest) and a
//! real `capstan serve --stdio` child speaking JSON-RPC: runs streamed as SSE,
//! approvals, cancellation, lists and replay, the OpenAPI document, size
//! limits, clear 4xx errors, and the token rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use common::Home;
use common::server::{Server, handbook};
use common::sse::{SseReader, types};
use serde_json::{Value, json};

fn client(server: &Server) -> reqwest::Client {
    server.client()
}

async fn start_run(server: &Server, body: Value) -> (String, String, SseReader) {
    let resp = client(server)
        .post(server.url("/v1/runs"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let run_id = resp.headers()["x-capstan-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    let session_id = resp.headers()["x-capstan-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    (run_id, session_id, SseReader::new(resp))
}

async fn get(server: &Server, path: &str) -> (u16, Value) {
    let resp = client(server).get(server.url(path)).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let resp = client(server)
        .post(server.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_streams_over_sse_then_lists_and_replays() {
    let home = Home::new("");
    let ws = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let (run_id, session_id, mut sse) = start_run(
        &server,
        json!({"message": "How do I rotate the signing keys?", "workspace": ws.path()}),
    )
    .await;
    let mut events = Vec::new();
    sse.rest(&mut events).await;
    let t = types(&events);
    assert_eq!(t.first().map(String::as_str), Some("run.started"), "{t:?}");
    assert_eq!(t.last().map(String::as_str), Some("run.completed"), "{t:?}");
    for want in [
        "retrieval.started",
        "retrieval.completed",
        "activity",
        "response.delta",
        "response.completed",
    ] {
        assert!(t.iter().any(|x| x == want), "no {want} in {t:?}");
    }
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64, "seq gap at {i}");
        assert_eq!(e["run_id"], run_id.as_str());
    }
    let done = events
        .iter()
        .find(|e| e["type"] == "response.completed")
        .unwrap();
    let citations = done["citations"].as_array().unwrap();
    assert!(!citations.is_empty(), "{done}");
    assert!(
        citations.iter().any(|c| c["path"] == "ops/key-rotation.md"),
        "{citations:?}"
    );
    let streamed: String = events
        .iter()
        .filter(|e| e["type"] == "response.delta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, done["text"].as_str().unwrap());

    // Replay: the same envelopes from the store, except the deltas, which the
    // stored `response.completed` replaced (docs/EVENTS.md).
    let stored: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] != "response.delta")
        .cloned()
        .collect();
    assert!(stored.len() < events.len());
    let replay_after = |after: Option<u64>| {
        let mut req = client(&server).get(server.url(&format!("/v1/runs/{run_id}/events")));
        if let Some(id) = after {
            req = req.header("Last-Event-ID", id.to_string());
        }
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200);
            let mut out = Vec::new();
            SseReader::new(resp).rest(&mut out).await;
            out
        }
    };
    assert_eq!(replay_after(None).await, stored);
    // Resuming after an event id sends only what is stored after it.
    let after = |seq: u64| -> Vec<Value> {
        stored
            .iter()
            .filter(|e| e["seq"].as_u64().unwrap() > seq)
            .cloned()
            .collect()
    };
    assert_eq!(
        replay_after(Some(3)).await,
        events[4..]
            .iter()
            .filter(|e| e["type"] != "response.delta")
            .cloned()
            .collect::<Vec<_>>()
    );
    // Resuming inside the answer's deltas: no delta, the whole text instead.
    let first_delta = events
        .iter()
        .find(|e| e["type"] == "response.delta")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let tail = replay_after(Some(first_delta)).await;
    assert_eq!(tail, after(first_delta));
    assert!(
        tail.iter().all(|e| e["type"] != "response.delta")
            && tail.iter().any(|e| e["type"] == "response.completed"),
        "{tail:?}"
    );

    // Lists.
    let (s, sessions) = get(&server, "/v1/sessions").await;
    assert_eq!(s, 200);
    assert!(
        sessions["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["id"] == session_id.as_str())
    );
    let (_, turns) = get(&server, &format!("/v1/sessions/{session_id}/turns")).await;
    let turns = turns["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["role"], "user");
    assert_eq!(turns[0]["content"], "How do I rotate the signing keys?");
    assert_eq!(turns[1]["role"], "assistant");
    let (_, runs) = get(&server, &format!("/v1/runs?session_id={session_id}")).await;
    assert_eq!(runs["runs"][0]["id"], run_id.as_str());
    assert_eq!(runs["runs"][0]["status"], "completed");
    assert_eq!(runs["runs"][0]["active"], false);
    let (_, same) = get(&server, &format!("/v1/sessions/{session_id}/runs")).await;
    assert_eq!(same["runs"], runs["runs"]);
    let (s, run) = get(&server, &format!("/v1/runs/{run_id}")).await;
    assert_eq!(s, 200);
    assert_eq!(run["status"], "completed");

    // The session remembers its workspace: the next run finds the handbook again.
    let (_, _, mut sse) = start_run(
        &server,
        json!({"message": "Who is on call for incidents?", "session_id": session_id}),
    )
    .await;
    let mut second = Vec::new();
    sse.rest(&mut second).await;
    let started = &second[0];
    assert_eq!(started["session_id"], session_id.as_str());
    assert!(
        started["workspace"]
            .as_str()
            .unwrap()
            .ends_with(ws.path().file_name().unwrap().to_str().unwrap()),
        "{started}"
    );
    let (_, ws_list) = get(&server, "/v1/workspaces").await;
    assert_eq!(ws_list["workspaces"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_answered_over_http() {
    let home = Home::new("");
    let ws = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let (run_id, _, mut sse) = start_run(
        &server,
        json!({"message": "run `make check`", "workspace": ws.path()}),
    )
    .await;
    let mut events = Vec::new();
    let asked = sse.until("approval.requested", &mut events).await;
    assert_eq!(asked["risk"], "write");
    assert_eq!(asked["command"], "make check");
    let id = asked["approval_id"].as_str().unwrap().to_string();
    let (_, run) = get(&server, &format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["active"], true);
    assert_eq!(run["open_approvals"], json!([id]));

    let (s, err) = post(
        &server,
        &format!("/v1/approvals/{id}"),
        json!({"decision": "maybe"}),
    )
    .await;
    assert_eq!(s, 422, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("approved-for-session")
    );
    // "Always for this workspace" is offered only where a rule can be
    // written (a host no [network] rule names): refused here, and the
    // approval still waits for an answer.
    assert!(asked.get("always").is_none(), "{asked}");
    let (s, err) = post(
        &server,
        &format!("/v1/approvals/{id}"),
        json!({"decision": "approved-always"}),
    )
    .await;
    assert_eq!(s, 400, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("does not offer `approved-always`")
            && message.contains("send approved, approved-for-session, denied or aborted"),
        "{message}"
    );
    let (s, ok) = post(
        &server,
        &format!("/v1/approvals/{id}"),
        json!({"decision": "approved"}),
    )
    .await;
    assert_eq!(s, 200, "{ok}");
    sse.rest(&mut events).await;
    let decided = events
        .iter()
        .find(|e| e["type"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["decision"], "approved");
    assert_eq!(decided["by"], "user");
    // Who answered: a request that showed the server's bearer token.
    assert_eq!(decided["via"], "http-token");
    let step = events
        .iter()
        .find(|e| e["type"] == "terminal.step")
        .unwrap();
    assert_eq!(step["exit_code"], 0);
    assert!(
        step["output_tail"]
            .as_str()
            .unwrap()
            .contains("all checks passed")
    );
    assert_eq!(events.last().unwrap()["type"], "run.completed");
    // The `activity` events alone tell the whole story.
    let feed: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "activity")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    for want in [
        "planned 1 task(s): run `make check`",
        "waiting for approval of `make check` (write)",
        "approval for `make check` (write): approved by user via http-token",
        "ran `make check`: exited 0",
    ] {
        assert!(feed.contains(&want), "no {want:?} in {feed:?}");
    }

    let (s, err) = post(
        &server,
        &format!("/v1/approvals/{id}"),
        json!({"decision": "approved"}),
    )
    .await;
    assert_eq!(s, 404);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no open approval")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_cancelled_over_http_and_its_session_is_busy_meanwhile() {
    let home = Home::new("");
    let ws = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let (run_id, session_id, mut sse) = start_run(
        &server,
        json!({"message": "run `sleep 60`", "workspace": ws.path()}),
    )
    .await;
    let mut events = Vec::new();
    sse.until("task.started", &mut events).await;

    let (s, err) = post(
        &server,
        "/v1/runs",
        json!({"message": "hello", "session_id": session_id}),
    )
    .await;
    assert_eq!(s, 409, "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains(&run_id));

    let (s, body) = post(&server, &format!("/v1/runs/{run_id}/cancel"), json!({})).await;
    assert_eq!(s, 202, "{body}");
    sse.rest(&mut events).await;
    assert_eq!(
        events.last().unwrap()["type"],
        "run.cancelled",
        "{:?}",
        types(&events)
    );
    let (_, run) = get(&server, &format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "cancelled");
    let (s, err) = post(&server, &format!("/v1/runs/{run_id}/cancel"), json!({})).await;
    assert_eq!(s, 409);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already ended")
    );
    let (s, _) = post(&server, "/v1/runs/run_nope/cancel", json!({})).await;
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_clear_4xx_errors_and_the_server_keeps_serving() {
    let home = Home::new("");
    let server = Server::start(&home, &["--max-body-bytes", "4096"]);
    let c = client(&server);
    let send = |body: &'static str, ct: Option<&'static str>| {
        let mut req = c.post(server.url("/v1/runs")).body(body);
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        req.send()
    };
    let check = |resp: reqwest::Response, status: u16, needle: &'static str| async move {
        assert_eq!(resp.status().as_u16(), status);
        let body: Value = resp.json().await.unwrap();
        let msg = body["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(needle), "{status}: {msg}");
    };
    check(
        send("{not json", Some("application/json")).await.unwrap(),
        400,
        "not valid JSON",
    )
    .await;
    check(
        send("{\"message\": 3}", Some("application/json"))
            .await
            .unwrap(),
        422,
        "expected shape",
    )
    .await;
    check(
        send("{\"msg\": \"hi\"}", Some("application/json"))
            .await
            .unwrap(),
        422,
        "msg",
    )
    .await;
    check(
        send("{\"message\": \"  \"}", Some("application/json"))
            .await
            .unwrap(),
        400,
        "empty",
    )
    .await;
    check(
        send("{\"message\": \"hi\"}", None).await.unwrap(),
        415,
        "Content-Type",
    )
    .await;
    let big = json!({"message": "x".repeat(10_000)}).to_string();
    let resp = c
        .post(server.url("/v1/runs"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    check(resp, 413, "4096 bytes").await;
    let (s, e) = post(
        &server,
        "/v1/runs",
        json!({"message": "hi", "session_id": "ses_nope"}),
    )
    .await;
    assert_eq!(s, 404);
    assert!(e["error"]["message"].as_str().unwrap().contains("ses_nope"));
    let (s, e) = post(
        &server,
        "/v1/runs",
        json!({"message": "hi", "workspace": "/no/such/dir"}),
    )
    .await;
    assert_eq!(s, 422);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/no/such/dir")
    );
    let (s, e) = get(&server, "/v1/nothing-here").await;
    assert_eq!(s, 404);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("openapi.json")
    );
    let resp = c.delete(server.url("/v1/sessions")).send().await.unwrap();
    assert_eq!(resp.status(), 405);
    let (s, _) = get(&server, "/v1/sessions?limit=lots").await;
    assert_eq!(s, 400);
    let (s, _) = get(&server, "/v1/runs/run_nope").await;
    assert_eq!(s, 404);
    let (s, _) = get(&server, "/v1/runs/run_nope/events").await;
    assert_eq!(s, 404);
    let (s, _) = get(&server, "/v1/sessions/ses_nope/turns").await;
    assert_eq!(s, 404);
    // Still serving.
    let (s, health) = get(&server, "/v1/health").await;
    assert_eq!(s, 200);
    assert_eq!(health["protocol"], "0.1");
}

/// Every path the host's code routes: the literal first argument of each `.route(`,
/// `.nest_service(` and `.route_service(` under host/src. Read from the source so the
/// list cannot drift from the router; a route written without a literal path fails
/// here rather than going unchecked.
fn routed_paths() -> Vec<String> {
    fn walk(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, files);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut paths = Vec::new();
    for file in files {
        let src = std::fs::read_to_string(&file).unwrap();
        for call in [".route(", ".nest_service(", ".route_service("] {
            for (at, _) in src.match_indices(call) {
                let rest = src[at + call.len()..].trim_start();
                let path = rest
                    .strip_prefix('"')
                    .and_then(|r| r.split_once('"'))
                    .map(|(p, _)| p.to_string())
                    .unwrap_or_else(|| {
                        panic!(
                            "{}: `{call}` without a literal path; this test reads the route table from the source",
                            file.display()
                        )
                    });
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openapi_document_describes_every_route_the_server_has() {
    let routed = routed_paths();
    assert!(routed.contains(&"/v1/runs".to_string()), "{routed:?}");
    assert!(routed.contains(&"/mcp".to_string()), "{routed:?}");
    let home = Home::new("");
    let server = Server::start(&home, &[]);
    let (s, doc) = get(&server, "/openapi.json").await;
    assert_eq!(s, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let documented: Vec<String> = paths.keys().cloned().collect();
    // The same set of paths, both ways.
    for path in &routed {
        assert!(
            documented.contains(path),
            "{path} is routed but not in openapi.json"
        );
    }
    for path in &documented {
        assert!(
            routed.contains(path),
            "{path} is in openapi.json but the code routes no such path"
        );
    }
    // And per path, the same methods: each one the running server answers (anything
    // but 405, or its "no route" 404) is documented, and each documented one is
    // answered.
    for path in &routed {
        let url = server.url(&path.replace("{id}", "x").replace("{file}", "x"));
        for method in ["get", "post", "put", "patch", "delete"] {
            let req = match method {
                "get" => client(&server).get(&url),
                "delete" => client(&server).delete(&url),
                "post" => client(&server).post(&url).json(&json!({})),
                "put" => client(&server).put(&url).json(&json!({})),
                _ => client(&server).patch(&url).json(&json!({})),
            };
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let answered = match status {
                405 => false,
                404 => !resp.text().await.unwrap().contains("no route"),
                _ => true,
            };
            let in_doc = paths[path.as_str()].get(method).is_some();
            assert_eq!(
                answered,
                in_doc,
                "{method} {path}: the server answers {status}, openapi.json {} it",
                if in_doc { "documents" } else { "omits" }
            );
        }
    }
    // Every documented response of the run endpoint names an error shape.
    assert_eq!(
        doc["paths"]["/v1/runs"]["post"]["responses"]["413"]["content"]["application/json"]["schema"]
            ["$ref"],
        "#/components/schemas/Error"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_guards_the_api_and_non_loopback_binds_need_one() {
    let home = Home::new("");
    // Beyond loopback, opting out of the token is refused before binding.
    let out = home
        .capstan()
        .args(["serve", "--host", "0.0.0.0", "--port", "0", "--no-token"])
        .env_remove("CAPSTAN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without a token"), "{err}");
    assert!(err.contains("--no-token"), "{err}");

    let server = Server::start(&home, &["--token", "s3cret-token"]);
    let bare = reqwest::Client::new();
    let resp = bare.get(server.url("/v1/sessions")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let e: Value = resp.json().await.unwrap();
    assert!(e["error"]["message"].as_str().unwrap().contains("Bearer"));
    let resp = bare
        .get(server.url("/v1/sessions"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = bare
        .get(server.url("/v1/sessions"))
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = bare
        .post(server.url("/agui"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    for path in ["/v1/health", "/openapi.json", "/v1/workspaces"] {
        let resp = bare.get(server.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 401, "{path}");
    }
    // The page itself holds no data and loads without the token.
    let resp = bare.get(server.url("/")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("set-cookie").is_none());
    assert!(resp.text().await.unwrap().contains("Capstan"));
    // A token chosen by the user is not printed.
    assert!(
        server.chat_url.ends_with("?token=<your token>"),
        "{}",
        server.chat_url
    );

    // --no-token on loopback: served, with a warning; Host and Origin still hold.
    let open = Server::start(&home, &["--no-token"]);
    let resp = bare.get(open.url("/v1/sessions")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let resp = bare
        .get(open.url("/v1/sessions"))
        .header("Origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);

    // A token read from a file (its first line) guards the API alike, and
    // is never on the command line.
    let file = home.path().join("token");
    std::fs::write(&file, "file-token-0123456789\nignored\n").unwrap();
    let from_file = Server::start(&home, &["--token-file", file.to_str().unwrap()]);
    let resp = bare
        .get(from_file.url("/v1/sessions"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let resp = bare
        .get(from_file.url("/v1/sessions"))
        .bearer_auth("file-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_start_up_url_trades_its_token_for_an_http_only_cookie() {
    let home = Home::new("");
    let server = Server::start(&home, &[]);
    let token = server.token.clone().unwrap();
    assert_eq!(token.len(), 64, "a made token is 256 random bits in hex");
    assert_eq!(server.chat_url, server.url(&format!("/?token={token}")));
    let bare = reqwest::Client::new();
    let resp = bare.get(&server.chat_url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    let port = server.base.rsplit(':').next().unwrap();
    assert!(
        cookie.starts_with(&format!("capstan_token_{port}={token};")),
        "{cookie}"
    );
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    assert_eq!(resp.headers()["cache-control"], "no-store");
    // The cookie alone opens the API (this is what the web chat sends).
    let pair = cookie.split(';').next().unwrap().to_string();
    let resp = bare
        .get(server.url("/v1/sessions"))
        .header("Cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A wrong token in the URL gets the page but no cookie.
    let resp = bare.get(server.url("/?token=guess")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("set-cookie").is_none());
    // A second server's cookie name differs (cookies ignore ports).
    let other = Server::start(&home, &[]);
    let resp = bare
        .get(other.url("/v1/sessions"))
        .header("Cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

/// `capstan serve --stdio` as a frontend spawns it.
struct Stdio_ {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<Value>,
    next_id: u64,
    /// Notifications read while waiting for a response.
    notes: Vec<Value>,
}

impl Stdio_ {
    fn start(home: &Home) -> Self {
        let mut child = home
            .capstan()
            .args(["serve", "--stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap();
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout is not JSON-RPC ({e}): {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines: rx,
            next_id: 1,
            notes: Vec::new(),
        }
    }

    fn send_raw(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn recv(&mut self) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .expect("no message from capstan serve --stdio for 120 s")
    }

    /// A response with this id (notifications are kept in `notes`).
    fn response(&mut self, id: &Value) -> Value {
        loop {
            let m = self.recv();
            if m.get("method").is_some() {
                self.notes.push(m);
            } else if &m["id"] == id {
                return m;
            } else {
                panic!("unexpected message {m}");
            }
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&req.to_string());
        self.response(&id)
    }

    /// Run events (`run.event` params) until one of type `t`.
    fn event(&mut self, t: &str) -> Value {
        loop {
            if let Some(i) = self
                .notes
                .iter()
                .position(|n| n["method"] == "run.event" && n["params"]["type"] == t)
            {
                let e = self.notes[i]["params"].clone();
                self.notes.drain(..=i);
                return e;
            }
            let m = self.recv();
            assert!(m.get("method").is_some(), "unexpected response {m}");
            self.notes.push(m);
        }
    }
}

#[test]
fn stdio_json_rpc_runs_approves_cancels_lists_and_survives_garbage() {
    let home = Home::new("");
    let ws = handbook();
    let mut rpc = Stdio_::start(&home);

    let info = rpc.call("server.info", json!({}));
    assert_eq!(info["result"]["protocol"], "0.1");

    // Malformed input gets JSON-RPC errors, and the server keeps serving.
    rpc.send_raw("{this is not json");
    let err = rpc.recv();
    assert_eq!(err["error"]["code"], -32700);
    assert_eq!(err["id"], Value::Null);
    rpc.send_raw(r#"{"id": 7, "method": "server.info"}"#);
    assert_eq!(rpc.response(&json!(7))["error"]["code"], -32600);
    let e = rpc.call("no.such.method", json!({}));
    assert_eq!(e["error"]["code"], -32601);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("run.start")
    );
    let e = rpc.call("run.start", json!({"text": "hi"}));
    assert_eq!(e["error"]["code"], -32602);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("run.start")
    );

    // A run with an approval.
    let started = rpc.call(
        "run.start",
        json!({"message": "run `make check`", "workspace": ws.path()}),
    );
    let run_id = started["result"]["run_id"].as_str().unwrap().to_string();
    let session_id = started["result"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let first = rpc.event("run.started");
    assert_eq!(first["run_id"], run_id.as_str());
    let asked = rpc.event("approval.requested");
    let decided = rpc.call(
        "approval.decide",
        json!({"approval_id": asked["approval_id"], "decision": "approved"}),
    );
    assert_eq!(decided["result"]["decision"], "approved");
    let step = rpc.event("terminal.step");
    assert_eq!(step["exit_code"], 0);
    rpc.event("run.completed");

    let sessions = rpc.call("sessions.list", json!({}));
    assert_eq!(sessions["result"]["sessions"][0]["id"], session_id.as_str());
    let turns = rpc.call("session.turns", json!({"session_id": session_id}));
    assert_eq!(turns["result"]["turns"].as_array().unwrap().len(), 2);
    let runs = rpc.call("runs.list", json!({"session_id": session_id}));
    assert_eq!(runs["result"]["runs"][0]["status"], "completed");
    let replay = rpc.call("run.events", json!({"run_id": run_id}));
    let replay = replay["result"]["events"].as_array().unwrap();
    assert_eq!(replay[0]["type"], "run.started");
    assert_eq!(replay.last().unwrap()["type"], "run.completed");
    let e = rpc.call("session.turns", json!({"session_id": "ses_nope"}));
    assert_eq!(e["error"]["code"], -32004);

    // Cancel a long command.
    let started = rpc.call(
        "run.start",
        json!({"message": "run `sleep 60`", "workspace": ws.path()}),
    );
    let run_id = started["result"]["run_id"].as_str().unwrap().to_string();
    rpc.event("task.started");
    let c = rpc.call("run.cancel", json!({"run_id": run_id}));
    assert_eq!(c["result"]["status"], "cancelling");
    rpc.event("run.cancelled");
    let e = rpc.call("run.cancel", json!({"run_id": run_id}));
    assert_eq!(e["error"]["code"], -32009);

    // End of input: the process finishes cleanly.
    drop(rpc.stdin);
    let status = rpc.child.wait().unwrap();
    assert!(status.success());
}
