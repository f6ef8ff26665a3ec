//! MCP both ways, end to end. rmcp's own client drives the real `capstan mcp`
//! over stdio and over streamable HTTP (`--listen` on 127.0.0.1): tools listed
//! from the plugins' `describe`, each bundled capability called, a denied call,
//! an approval through elicitation, a cancelled call whose sandboxed process
//! dies (and whose run is recorded as cancelled), and bad input answered with
//! clear errors while the server keeps serving. Then the other way: external
//! servers configured in capstan.toml, their tools planned and dispatched as
//! `mcp:<server>/<tool>` kinds: a real `capstan mcp` killed mid-call, and the
//! reference filesystem and "everything" servers from the npm registry (pinned
//! in tests/npm/mcp-servers), whose read-only annotations never lower the risk
//! the configuration gives. Last, a client nobody here wrote: the MCP Inspector CLI.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Test harness output: the children's stderr passed through for debugging.
#![allow(clippy::disallowed_macros)]
// MCP logging is deprecated by the 2026-07-28 revision; Capstan serves 2025-11-25.
#![allow(deprecated)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan::plugins::context::{HostServices, RunContext};
use capstan::plugins::services::approval::ApproveMode;
use capstan::run::dispatch::run_task;
use capstan_protocol::{FailureReason, TaskRequest};
use common::{Home, Recorder};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, GetPromptRequestParams, Implementation, LoggingLevel,
    LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
    ReadResourceRequestParams, ResourceContents, ResourceUpdatedNotificationParam,
    SetLevelRequestParams, SubscribeRequestParams,
};
use rmcp::service::{
    NotificationContext, PeerRequestOptions, RequestContext, RoleClient, RunningService,
    ServiceError, ServiceExt,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData};
use serde_json::{Value, json};

/// A test MCP client: declares elicitation when it has an answer to give,
/// and records the prompts, progress and log messages and resource
/// notifications it receives.
#[derive(Clone, Default)]
struct Client {
    /// `approve`, `approve_for_session` or `deny`; `None`: no elicitation capability.
    answer: Option<&'static str>,
    prompts: Arc<Mutex<Vec<String>>>,
    progress: Arc<Mutex<Vec<String>>>,
    logs: Arc<Mutex<Vec<(String, Value)>>>,
    updated: Arc<Mutex<Vec<String>>>,
    list_changed: Arc<Mutex<u32>>,
}

impl Client {
    fn answering(answer: &'static str) -> Self {
        Self {
            answer: Some(answer),
            ..Default::default()
        }
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let caps = match self.answer {
            Some(_) => ClientCapabilities::builder().enable_elicitation().build(),
            None => ClientCapabilities::default(),
        };
        ClientConfig::new(caps, Implementation::new("capstan-mcp-test", "0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.prompts.lock().unwrap().push(message);
        }
        let answer = self.answer.unwrap_or("deny");
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"decision": answer})))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(m) = params.message {
            self.progress.lock().unwrap().push(m);
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let level = serde_json::to_value(params.level).unwrap();
        let level = level.as_str().unwrap().to_string();
        self.logs.lock().unwrap().push((level, params.data));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        *self.list_changed.lock().unwrap() += 1;
    }
}

type Session = RunningService<RoleClient, Client>;

fn capstan_bin() -> &'static str {
    env!("CARGO_BIN_EXE_capstan")
}

/// A workspace with a document to search and a file to read.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::write(
        ws.join("docs/deploy.md"),
        "# Deploying\n\n## Blue-green switch\n\nThe load balancer flips traffic to the green pool\nafter health checks pass.\n",
    )
    .unwrap();
    std::fs::write(ws.join("keep.txt"), "keep me").unwrap();
    dir
}

fn mcp_command(home: &Home, ws: &Path, approve: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(capstan_bin());
    cmd.env("CAPSTAN_HOME", home.path())
        .args(["mcp", "--approve", approve, "--workspace"])
        .arg(ws);
    cmd
}

async fn stdio(home: &Home, ws: &Path, approve: &str, client: Client) -> Session {
    let transport = TokioChildProcess::builder(mcp_command(home, ws, approve))
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
        .0;
    client
        .serve(transport)
        .await
        .expect("MCP handshake over stdio")
}

/// `capstan mcp --listen 127.0.0.1:0`, the URL it prints and the token it
/// made (printed on stderr) or was given.
struct HttpServer {
    child: std::process::Child,
    url: String,
    token: String,
}

impl HttpServer {
    fn start(home: &Home, ws: &Path, approve: &str, extra: &[&str]) -> Self {
        let mut child = home
            .capstan()
            .args(["mcp", "--listen", "127.0.0.1:0", "--approve", approve])
            .args(extra)
            .arg("--workspace")
            .arg(ws)
            .env_remove("CAPSTAN_MCP_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("capstan mcp: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("{line}");
                if let Some(t) = line.strip_prefix("capstan mcp: token ") {
                    let _ = tx.send(t.trim().to_string());
                }
            }
        });
        let token = match extra.iter().position(|a| *a == "--token") {
            Some(i) => extra[i + 1].to_string(),
            None => rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("capstan mcp --listen printed no token on stderr"),
        };
        Self { child, url, token }
    }

    async fn connect(&self, client: Client) -> Session {
        let mut config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                self.url.as_str(),
            );
        config.auth_header = Some(self.token.clone());
        client
            .serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("MCP handshake over streamable HTTP")
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn call(session: &Session, tool: &str, args: Value) -> CallToolResult {
    let params = CallToolRequestParams::new(tool.to_string())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    session.call_tool(params).await.expect("tools/call")
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn data(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "{}", text(result));
    result
        .structured_content
        .clone()
        .expect("structured content")["data"]
        .clone()
}

/// Tools from `describe`, and every bundled capability called through them.
async fn lists_and_calls_every_bundled_capability(session: &Session, client: &Client, ws: &Path) {
    let tools = session.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for want in [
        "local_kb_retrieval.search",
        "local_kb_retrieval.index",
        "terminal_exec.run",
        "docx.read",
        "docx.create",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let create = tools.iter().find(|t| t.name == "docx.create").unwrap();
    assert_eq!(
        create.input_schema.get("required"),
        Some(&json!(["path", "markdown"])),
        "the input schema is the plugin's own"
    );

    let found = data(
        &call(
            session,
            "local_kb_retrieval.search",
            json!({"query": "when does traffic flip to the green pool"}),
        )
        .await,
    );
    assert_eq!(found["passages"][0]["path"], "docs/deploy.md", "{found}");

    let ran = data(
        &call(
            session,
            "terminal_exec.run",
            json!({"command": "cat keep.txt"}),
        )
        .await,
    );
    assert_eq!(ran["steps"][0]["stdout"], "keep me", "{ran}");

    let created = call(
        session,
        "docx.create",
        json!({"path": "notes.docx", "markdown": "# Notes\n\nMCP wrote this."}),
    )
    .await;
    data(&created);
    assert!(ws.join("notes.docx").exists());
    let read = data(&call(session, "docx.read", json!({"path": "notes.docx"})).await);
    assert!(read.to_string().contains("MCP wrote this."), "{read}");

    let progress = client.progress.lock().unwrap().clone();
    assert!(
        progress.iter().any(|m| m.contains("cat keep.txt")),
        "progress notifications carry the task's activity: {progress:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_lists_and_calls_every_bundled_capability() {
    let home = Home::new("");
    let ws = workspace();
    let client = Client::default();
    let session = stdio(&home, ws.path(), "all", client.clone()).await;
    lists_and_calls_every_bundled_capability(&session, &client, ws.path()).await;
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capstan_serve_mounts_the_same_tools_at_mcp() {
    let home = Home::new("");
    let ws = workspace();
    let ws_arg = ws.path().to_str().unwrap();
    let server = common::server::Server::start(&home, &["--approve", "all", "--workspace", ws_arg]);
    let client = Client::default();
    let mut config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            server.url("/mcp"),
        );
    config.auth_header = server.token.clone();
    let session = client
        .clone()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("MCP handshake with capstan serve's /mcp");
    lists_and_calls_every_bundled_capability(&session, &client, ws.path()).await;
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_lists_and_calls_every_bundled_capability() {
    let home = Home::new("");
    let ws = workspace();
    let server = HttpServer::start(&home, ws.path(), "all", &[]);
    let client = Client::default();
    let session = server.connect(client.clone()).await;
    lists_and_calls_every_bundled_capability(&session, &client, ws.path()).await;
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_nobody_can_approve_is_denied_with_the_way_to_allow_it() {
    let home = Home::new("");
    let ws = workspace();
    // The default mode asks the client; this one cannot be asked.
    let session = stdio(&home, ws.path(), "ask", Client::default()).await;
    let denied = call(
        &session,
        "docx.create",
        json!({"path": "x.docx", "markdown": "# X"}),
    )
    .await;
    assert_eq!(denied.is_error, Some(true));
    let said = text(&denied);
    assert!(said.contains("denied"), "{said}");
    assert!(
        said.contains("elicitation"),
        "names what is missing: {said}"
    );
    assert!(
        said.contains("--approve all"),
        "says how to allow it: {said}"
    );
    assert!(
        said.contains("cautious"),
        "names the policy profile: {said}"
    );
    assert!(!ws.path().join("x.docx").exists());
    session.cancel().await.unwrap();

    // --approve none: a deleting command is denied and names the flag.
    let session = stdio(&home, ws.path(), "none", Client::default()).await;
    let denied = call(
        &session,
        "terminal_exec.run",
        json!({"command": "rm keep.txt"}),
    )
    .await;
    assert_eq!(denied.is_error, Some(true));
    let said = text(&denied);
    assert!(said.contains("--approve none"), "{said}");
    assert!(ws.path().join("keep.txt").exists(), "nothing ran");
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_goes_to_the_client_as_elicitation() {
    let home = Home::new("");
    let ws = workspace();

    // Over streamable HTTP, a person approves the write.
    let server = HttpServer::start(&home, ws.path(), "ask", &[]);
    let client = Client::answering("approve");
    let session = server.connect(client.clone()).await;
    let created = call(
        &session,
        "docx.create",
        json!({"path": "ok.docx", "markdown": "# Approved"}),
    )
    .await;
    data(&created);
    assert!(ws.path().join("ok.docx").exists());
    let prompts = client.prompts.lock().unwrap().clone();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert!(prompts[0].contains("docx.create"), "{prompts:?}");
    session.cancel().await.unwrap();

    // Over stdio, a person declines a deleting command.
    let client = Client::answering("deny");
    let session = stdio(&home, ws.path(), "ask", client.clone()).await;
    let denied = call(
        &session,
        "terminal_exec.run",
        json!({"command": "rm keep.txt"}),
    )
    .await;
    assert_eq!(denied.is_error, Some(true));
    assert!(text(&denied).contains("declined"), "{}", text(&denied));
    assert!(ws.path().join("keep.txt").exists());
    assert!(client.prompts.lock().unwrap()[0].contains("rm keep.txt"));
    session.cancel().await.unwrap();
}

/// Process ids whose command line has all of `words`.
fn processes_with(words: &[&str]) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if words.iter().all(|w| cmdline.contains(w)) {
            found.push(pid);
        }
    }
    found
}

/// Waits (bounded) until `done` holds; the bound only keeps a broken build
/// from hanging the suite.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Cancels a running `sleep` through `notifications/cancelled`: its process dies, the
/// call is recorded in the server's store as a cancelled run (with the cancel in its
/// events), and the server goes on serving.
async fn cancel_a_long_command(session: &Session, home: &Home, marker: &str) {
    let params = CallToolRequestParams::new("terminal_exec.run").with_arguments(
        json!({"command": format!("sleep {marker}")})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let handle = session
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    let sleep_args = ["sleep", marker];
    wait_until("the sandboxed sleep to start", || {
        !processes_with(&sleep_args).is_empty()
    });
    session
        .notify_cancelled(CancelledNotificationParam::new(
            Some(handle.id.clone()),
            Some("the test cancels".into()),
        ))
        .await
        .unwrap();
    wait_until("the cancelled command's process to die", || {
        processes_with(&sleep_args).is_empty()
    });
    // The task's outcome: the run that carried this call ends as cancelled, and its
    // events say the task failed because it was cancelled (not that it completed, or
    // failed for another reason, once the process was gone).
    let store = capstan_store::Store::open(home.path().join("data/capstan.db")).unwrap();
    let ran_sleep = |run: &capstan_store::Run| {
        store
            .events(&run.id)
            .unwrap()
            .iter()
            .any(|e| e.contains(&format!("sleep {marker}")))
    };
    let mut run = None;
    wait_until(
        "the cancelled call's run to be recorded as finished",
        || {
            run = store
                .list_runs(None, 20)
                .unwrap()
                .into_iter()
                .find(|r| ran_sleep(r) && r.ended_at.is_some());
            run.is_some()
        },
    );
    let run = run.unwrap();
    assert_eq!(run.status, capstan_store::RunStatus::Cancelled, "{run:?}");
    assert_eq!(run.reason.as_deref(), Some("cancelled"), "{run:?}");
    let events: Vec<Value> = store
        .events(&run.id)
        .unwrap()
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let failed = events
        .iter()
        .find(|e| e["type"] == "task.failed")
        .unwrap_or_else(|| panic!("no task.failed in {events:#?}"));
    assert_eq!(failed["reason"], "cancelled", "{failed}");
    assert!(
        !events.iter().any(|e| e["type"] == "task.completed"),
        "{events:#?}"
    );
    // The server is still serving.
    let tools = session.list_all_tools().await.unwrap();
    assert!(!tools.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_cancels_the_task_and_kills_its_process() {
    let home = Home::new("");
    let ws = workspace();
    let session = stdio(&home, ws.path(), "all", Client::default()).await;
    cancel_a_long_command(&session, &home, "417.25").await;
    session.cancel().await.unwrap();

    let server = HttpServer::start(&home, ws.path(), "all", &[]);
    let session = server.connect(Client::default()).await;
    cancel_a_long_command(&session, &home, "418.25").await;
    session.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_the_server_keeps_serving() {
    let home = Home::new("");
    let ws = workspace();
    let session = stdio(&home, ws.path(), "all", Client::default()).await;

    // An unknown tool is a protocol error naming the tools there are.
    let params = CallToolRequestParams::new("no_such.tool");
    match session.call_tool(params).await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code.0, -32602);
            assert!(
                e.message.contains("unknown tool `no_such.tool`"),
                "{}",
                e.message
            );
            assert!(e.message.contains("terminal_exec.run"), "{}", e.message);
        }
        other => panic!("expected an MCP error, got {other:?}"),
    }

    // Arguments that fail the schema: a tool error the model can act on.
    let bad = call(&session, "docx.create", json!({"path": 5})).await;
    assert_eq!(bad.is_error, Some(true));
    let said = text(&bad);
    assert!(said.contains("invalid-input"), "{said}");
    assert!(said.contains("input schema of `docx.create`"), "{said}");
    assert!(said.contains("markdown"), "names the missing field: {said}");
    assert!(said.contains("/path"), "names the wrong field: {said}");

    // And the same session still works.
    let ran = data(
        &call(
            &session,
            "terminal_exec.run",
            json!({"command": "cat keep.txt"}),
        )
        .await,
    );
    assert_eq!(ran["steps"][0]["stdout"], "keep me");
    session.cancel().await.unwrap();
}

#[test]
fn malformed_json_rpc_on_stdio_is_answered_and_the_server_keeps_serving() {
    let home = Home::new("");
    let ws = workspace();
    let mut child = home
        .capstan()
        .args(["mcp", "--workspace"])
        .arg(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: &str| {
        stdin.write_all(v.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let mut reply_to = |id: i64| -> Value {
        loop {
            let line = lines.next().expect("the server closed stdout").unwrap();
            let v: Value = serde_json::from_str(&line).expect("only JSON-RPC on stdout");
            if v["id"] == id || (id < 0 && v["id"].is_null()) {
                return v;
            }
        }
    };
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    assert_eq!(reply_to(1)["result"]["serverInfo"]["name"], "capstan");
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // Not JSON at all: there is no id to answer, so it is skipped.
    send("this is {not json");
    // JSON, but not a valid request: an Invalid Request error.
    send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"oops"}"#);
    let err = reply_to(-1);
    assert_eq!(err["error"]["code"], -32600, "{err}");
    // Still serving.
    send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#);
    let list = reply_to(3);
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"terminal_exec.run"), "{list}");
    send(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"local_kb_retrieval.search","arguments":{"query":"green pool"}}}"#,
    );
    let found = reply_to(4);
    assert_eq!(
        found["result"]["structuredContent"]["data"]["passages"][0]["path"], "docs/deploy.md",
        "{found}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_refuses_garbage_and_wrong_tokens_and_keeps_serving() {
    let home = Home::new("");
    let ws = workspace();
    let server = HttpServer::start(&home, ws.path(), "all", &["--token", "s3cret"]);
    let http = reqwest::Client::new();
    let post = |body: &'static str, token: Option<&str>| {
        let mut req = http
            .post(&server.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let denied = post(init, Some("wrong")).await.unwrap();
    assert_eq!(denied.status(), 401);
    assert!(
        denied
            .text()
            .await
            .unwrap()
            .contains("bearer token is wrong")
    );
    let denied = post(init, None).await.unwrap();
    assert_eq!(denied.status(), 401);

    let garbage = post("{not json", Some("s3cret")).await.unwrap();
    assert!(garbage.status().is_client_error(), "{}", garbage.status());

    // A real client with the token still gets served.
    let mut config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            server.url.as_str(),
        );
    config.auth_header = Some("s3cret".into());
    let session = Client::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap();
    let ran = data(
        &call(
            &session,
            "terminal_exec.run",
            json!({"command": "cat keep.txt"}),
        )
        .await,
    );
    assert_eq!(ran["steps"][0]["stdout"], "keep me");
    session.cancel().await.unwrap();
}

#[test]
fn listening_beyond_loopback_needs_a_token() {
    let home = Home::new("");
    let out = home
        .capstan()
        .args(["mcp", "--listen", "0.0.0.0:0", "--no-token"])
        .env_remove("CAPSTAN_MCP_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without a token"), "{err}");
    assert!(err.contains("--no-token"), "{err}");
}

// ---- External MCP servers as capabilities ----

/// A user capstan.toml with a real `capstan mcp` (its own home and workspace)
/// as the external server `inner`, and one that cannot start.
fn external_config(inner_home: &Path, inner_ws: &Path, extra: &str) -> String {
    format!(
        r#"{extra}
[[mcp_server]]
name = "inner"
command = {bin:?}
args = ["mcp", "--approve", "all", "--workspace", {ws:?}]
env = {{ CAPSTAN_HOME = {home:?} }}
risk = "read_only"
tool_risk = {{ "docx.create" = "write" }}
# Unconfined on purpose: `capstan mcp` runs its own commands in the OS
# sandbox, which cannot nest inside another (its seccomp filter refuses
# new namespaces), and it needs its own home and workspace.
sandbox = false

[[mcp_server]]
name = "ghost"
command = "/nonexistent/mcp-server"
"#,
        bin = capstan_bin(),
        ws = inner_ws.display().to_string(),
        home = inner_home.display().to_string(),
    )
}

fn setup_sandbox_launcher() {
    static SETUP: std::sync::Once = std::sync::Once::new();
    // The sandbox re-executes a launcher binary: the real capstan one.
    SETUP.call_once(|| capstan_sandbox::set_launcher(capstan_bin()));
}

fn task(kind: &str, input: Value) -> TaskRequest {
    TaskRequest {
        id: "t1".into(),
        kind: kind.into(),
        operation: "call".into(),
        input,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_server_tools_are_capability_kinds_behind_the_approval_gate() {
    setup_sandbox_launcher();
    let inner_home = tempfile::tempdir().unwrap();
    let inner_ws = workspace();
    let home = Home::new(&external_config(inner_home.path(), inner_ws.path(), ""));
    let ws = workspace();
    // A checked-out workspace must not start programs: its entries are refused.
    std::fs::write(
        ws.path().join("capstan.toml"),
        "[[mcp_server]]\nname = \"planted\"\ncommand = \"/bin/touch\"\nargs = [\"planted\"]\n",
    )
    .unwrap();
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
        .await
        .unwrap();
    let registry = app.registry(Some(ws.path())).await;
    assert!(!ws.path().join("planted").exists());
    assert!(
        registry
            .problems()
            .iter()
            .any(|p| p.message.contains("[[mcp_server]] planted ignored")),
        "{:?}",
        registry.problems()
    );
    let kinds: Vec<&str> = registry.kinds().collect();
    assert!(kinds.contains(&"mcp:inner/terminal_exec.run"), "{kinds:?}");
    assert!(
        kinds.contains(&"local_kb_retrieval"),
        "plugins still load: {kinds:?}"
    );
    let problems = registry.problems();
    let ghost = problems
        .iter()
        .find(|p| p.message.contains("ghost"))
        .expect("the server that cannot start is reported");
    assert!(
        ghost.message.contains("/nonexistent/mcp-server"),
        "{}",
        ghost.message
    );

    let recorder = Recorder::default();
    let services = HostServices {
        approval: Some(app.broker.clone()),
        ..Default::default()
    };
    let run = RunContext::new(
        Some(ws.path().to_path_buf()),
        Arc::new(recorder.clone()),
        services,
    );

    // A read-only tool runs (in the inner server's workspace).
    let out = run_task(
        &app.runtime,
        &registry,
        &task(
            "mcp:inner/terminal_exec.run",
            json!({"command": "cat keep.txt"}),
        ),
        &run,
    )
    .await
    .expect("the inner server's tool runs");
    assert!(out.data.to_string().contains("keep me"), "{:?}", out.data);

    // A tool configured as `write` passes the approval gate first: denied here.
    let denied = run_task(
        &app.runtime,
        &registry,
        &task(
            "mcp:inner/docx.create",
            json!({"path": "no.docx", "markdown": "# no"}),
        ),
        &run,
    )
    .await
    .unwrap_err();
    assert_eq!(denied.reason, FailureReason::Denied, "{denied:?}");
    assert!(!inner_ws.path().join("no.docx").exists());
    assert!(
        recorder.types().contains(&"approval.requested".to_string()),
        "{:?}",
        recorder.types()
    );

    // The server dies mid-call: the task fails with the reason, the host goes on.
    let marker = "419.25";
    let registry = Arc::new(registry);
    let call = {
        let (registry, run) = (registry.clone(), run.clone());
        let runtime = app.runtime.clone();
        tokio::spawn(async move {
            run_task(
                &runtime,
                &registry,
                &task(
                    "mcp:inner/terminal_exec.run",
                    json!({"command": format!("sleep {marker}")}),
                ),
                &run,
            )
            .await
        })
    };
    let inner_ws_arg = inner_ws.path().display().to_string();
    tokio::task::spawn_blocking(move || {
        wait_until("the inner server's sleep to start", || {
            !processes_with(&["sleep", marker]).is_empty()
        });
        for pid in processes_with(&["mcp", "--workspace", &inner_ws_arg]) {
            std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .unwrap();
        }
    })
    .await
    .unwrap();
    let failed = call.await.unwrap().unwrap_err();
    assert_eq!(failed.reason, FailureReason::Failed, "{failed:?}");
    assert!(
        failed
            .message
            .contains("MCP server `inner` closed the connection"),
        "{}",
        failed.message
    );
    let still = run_task(
        &app.runtime,
        &registry,
        &TaskRequest {
            id: "t2".into(),
            kind: "local_kb_retrieval".into(),
            operation: "search".into(),
            input: json!({"query": "green pool"}),
        },
        &RunContext::new(
            Some(ws.path().to_path_buf()),
            Arc::new(Recorder::default()),
            HostServices {
                index: Some(app.indexes.clone()),
                ..Default::default()
            },
        ),
    )
    .await
    .expect("the host keeps serving after an MCP server died");
    assert_eq!(still.data["passages"][0]["path"], "docs/deploy.md");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_loop_plans_and_dispatches_an_external_mcp_tool() {
    use capstan_models::scripted::{Reply, ScriptedServer};
    setup_sandbox_launcher();
    // SAFETY: tests in this file only read this variable, and all set the same value.
    unsafe { std::env::set_var("CAPSTAN_TEST_KEY", "sk-test-scripted") };
    let server = ScriptedServer::start().await.unwrap();
    // The external server is the reference filesystem server from the npm registry.
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("keep.txt"), "keep me").unwrap();
    let plan = json!({"action": "plan", "reason": "use the external tool", "tasks": [
        {"id": "t1", "kind": "mcp:fs/read_text_file", "operation": "call",
         "input": {"path": root.path().join("keep.txt")}, "title": "read the file over MCP"}
    ]});
    server.push(Reply::text([plan.to_string()]).with_usage(100, 20));
    server.push(Reply::text(["The file says keep me."]).with_usage(50, 5));
    let model = format!(
        "[model]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"scripted-model\"\napi_key_env = \"CAPSTAN_TEST_KEY\"\n",
        server.openai_base_url()
    );
    let home = Home::new(&third_party_config(root.path(), &model));
    // The filesystem server serves the workspace, which its entry lets it write.
    let ws = &root;
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
        .await
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let frontend: capstan::run::app::Frontend =
        Arc::new(move |e: &Arc<capstan_protocol::Envelope>| {
            sink.lock()
                .unwrap()
                .push(serde_json::to_value(&**e).unwrap());
        });
    let req = capstan::run::app::AskRequest {
        message: "read keep.txt through the filesystem MCP server".into(),
        session_id: None,
        workspace: Some(ws.path().to_path_buf()),
        quota: None,
    };
    let out = app
        .ask(req, frontend, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    let events = seen.lock().unwrap().clone();
    assert_eq!(
        out.outcome.status,
        capstan::run::orchestrator::RunStatus::Completed,
        "{events:#?}"
    );
    let completed = events
        .iter()
        .find(|e| e["type"] == "task.completed")
        .unwrap_or_else(|| panic!("no task.completed in {events:#?}"));
    assert!(
        completed["data"].to_string().contains("keep me"),
        "{completed}"
    );
    let asked = server.requests();
    assert!(
        asked[0].prompt_text().contains("mcp:fs/read_text_file"),
        "the model is offered the external tool as a capability kind"
    );
}

// ---- Third-party MCP servers: the reference servers from the npm registry ----

/// The `read` line that lets a sandboxed server started from
/// tests/npm/mcp-servers (node_modules, hand-written scripts) read its files.
fn npm_read() -> String {
    let dir = common::npm_modules("mcp-servers")
        .parent()
        .unwrap()
        .canonicalize()
        .unwrap();
    format!("read = [{:?}]", dir.display().to_string())
}

fn third_party_bin(bin: &str) -> String {
    common::npm_bin("mcp-servers", bin).display().to_string()
}

/// The reference filesystem server on `root`, trusted as read-only except for
/// `write_file`; the reference "everything" server with no risk configured (so
/// `unknown`: every call is approved first, whatever its annotations say), and its
/// slow tool given a 1 s call timeout.
fn third_party_config(root: &Path, extra: &str) -> String {
    format!(
        r#"{extra}
[[mcp_server]]
name = "fs"
command = {fs:?}
args = [{root:?}]
# It serves the folder its args name, not the workspace.
roots = false
risk = "read_only"
tool_risk = {{ write_file = "write" }}
# Sandboxed: the folder is the workspace, which it may write.
workspace = "write"
{read}

[[mcp_server]]
name = "everything"
command = {everything:?}
timeout_secs = 1
{read}
"#,
        fs = third_party_bin("mcp-server-filesystem"),
        everything = third_party_bin("mcp-server-everything"),
        root = root.display().to_string(),
        read = npm_read(),
    )
}

/// What a server says about its own tools: `readOnlyHint` per tool name.
async fn read_only_hints(bin: &str, args: &[&str]) -> Vec<(String, Option<bool>)> {
    let mut cmd = tokio::process::Command::new(third_party_bin(bin));
    cmd.args(args);
    let transport = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
        .0;
    let session = ().serve(transport).await.expect("MCP handshake");
    let tools = session.list_all_tools().await.unwrap();
    session.cancel().await.unwrap();
    tools
        .into_iter()
        .map(|t| {
            let hint = t.annotations.as_ref().and_then(|a| a.read_only_hint);
            (t.name.to_string(), hint)
        })
        .collect()
}

/// A run context for direct dispatch, with the app's approval broker and a recorder.
fn direct_run(app: &capstan::run::app::App, ws: &Path) -> (RunContext, Recorder) {
    let recorder = Recorder::default();
    let services = HostServices {
        approval: Some(app.broker.clone()),
        ..Default::default()
    };
    let run = RunContext::new(Some(ws.to_path_buf()), Arc::new(recorder.clone()), services);
    (run, recorder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn third_party_servers_are_called_and_their_annotations_never_lower_the_risk() {
    setup_sandbox_launcher();
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("notes.txt"), "third-party says hello").unwrap();
    let root_arg = root.path().display().to_string();

    // The premise, from the servers themselves: they call `echo` and `read_text_file`
    // read-only, `write_file` not.
    let fs_hints = read_only_hints("mcp-server-filesystem", &[&root_arg]).await;
    let everything_hints = read_only_hints("mcp-server-everything", &[]).await;
    let hint = |hints: &[(String, Option<bool>)], tool: &str| {
        hints
            .iter()
            .find(|(n, _)| n == tool)
            .unwrap_or_else(|| panic!("{tool} not listed: {hints:?}"))
            .1
    };
    assert_eq!(hint(&everything_hints, "echo"), Some(true));
    assert_eq!(hint(&fs_hints, "read_text_file"), Some(true));
    assert_eq!(hint(&fs_hints, "write_file"), Some(false));

    let home = Home::new(&third_party_config(root.path(), ""));
    // The filesystem server serves the workspace, which its entry lets it write.
    let ws = &root;
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
        .await
        .unwrap();
    let registry = app.registry(Some(ws.path())).await;
    assert!(registry.problems().is_empty(), "{:?}", registry.problems());
    let kinds: Vec<&str> = registry.kinds().collect();
    for want in [
        "mcp:fs/read_text_file",
        "mcp:fs/write_file",
        "mcp:everything/echo",
    ] {
        assert!(kinds.contains(&want), "{want} missing from {kinds:?}");
    }
    let (run, recorder) = direct_run(&app, ws.path());
    let notes = root.path().join("notes.txt").display().to_string();

    // Configured read-only: runs without asking, and the server's answer comes back.
    let read = run_task(
        &app.runtime,
        &registry,
        &task("mcp:fs/read_text_file", json!({"path": notes})),
        &run,
    )
    .await
    .expect("a read-only tool of the filesystem server runs");
    assert!(
        read.data.to_string().contains("third-party says hello"),
        "{:?}",
        read.data
    );
    assert!(!recorder.types().contains(&"approval.requested".to_string()));

    // `echo` is annotated read-only, but nobody configured its server's risk: it is
    // `unknown`, so it needs approval, and nobody can approve here.
    let denied = run_task(
        &app.runtime,
        &registry,
        &task("mcp:everything/echo", json!({"message": "hi"})),
        &run,
    )
    .await
    .unwrap_err();
    assert_eq!(denied.reason, FailureReason::Denied, "{denied:?}");
    let asked: Vec<Value> = recorder
        .events()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .filter(|e| e["type"] == "approval.requested")
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0]
            .to_string()
            .contains("configured with `Unknown` risk"),
        "the approval names the configured risk, not the server's hint: {}",
        asked[0]
    );

    // Configured `write` for `write_file`: denied, nothing written.
    let out = root.path().join("out.txt").display().to_string();
    let denied = run_task(
        &app.runtime,
        &registry,
        &task(
            "mcp:fs/write_file",
            json!({"path": out, "content": "not approved"}),
        ),
        &run,
    )
    .await
    .unwrap_err();
    assert_eq!(denied.reason, FailureReason::Denied, "{denied:?}");
    assert!(!root.path().join("out.txt").exists());

    // The server's own refusal (a path outside its root) is a task failure naming it.
    let refused = run_task(
        &app.runtime,
        &registry,
        &task("mcp:fs/read_text_file", json!({"path": "/etc/hostname"})),
        &run,
    )
    .await
    .unwrap_err();
    assert_eq!(refused.reason, FailureReason::Failed, "{refused:?}");
    assert!(
        refused
            .message
            .contains("MCP tool `read_text_file` of `fs` reported an error"),
        "{}",
        refused.message
    );
    drop(registry);
    drop(app);

    // The same calls approved: they reach the servers and do what they say.
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::All)
        .await
        .unwrap();
    let registry = app.registry(Some(ws.path())).await;
    let (run, recorder) = direct_run(&app, ws.path());
    let echoed = run_task(
        &app.runtime,
        &registry,
        &task("mcp:everything/echo", json!({"message": "hi there"})),
        &run,
    )
    .await
    .expect("an approved call runs");
    assert!(
        echoed.data.to_string().contains("Echo: hi there"),
        "{:?}",
        echoed.data
    );
    run_task(
        &app.runtime,
        &registry,
        &task(
            "mcp:fs/write_file",
            json!({"path": out, "content": "approved write"}),
        ),
        &run,
    )
    .await
    .expect("an approved write runs");
    assert_eq!(
        std::fs::read_to_string(root.path().join("out.txt")).unwrap(),
        "approved write"
    );
    assert_eq!(
        recorder
            .types()
            .iter()
            .filter(|t| *t == "approval.requested")
            .count(),
        2,
        "{:?}",
        recorder.types()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_third_party_tool_times_out_per_its_entry() {
    setup_sandbox_launcher();
    let root = tempfile::tempdir().unwrap();
    let home = Home::new(&third_party_config(root.path(), ""));
    // The filesystem server serves the workspace, which its entry lets it write.
    let ws = &root;
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::All)
        .await
        .unwrap();
    let registry = app.registry(Some(ws.path())).await;
    let (run, _) = direct_run(&app, ws.path());
    // The operation would take ten minutes; the entry allows 1 s. (The bound is the
    // behaviour here, and no load makes a ten-minute call finish early.)
    let failed = run_task(
        &app.runtime,
        &registry,
        &task(
            "mcp:everything/trigger-long-running-operation",
            json!({"duration": 600, "steps": 10}),
        ),
        &run,
    )
    .await
    .unwrap_err();
    assert_eq!(failed.reason, FailureReason::Timeout, "{failed:?}");
    assert!(
        failed.message.contains("within 1 s (timeout_secs"),
        "{}",
        failed.message
    );
    // The server is still there for the next call.
    let echoed = run_task(
        &app.runtime,
        &registry,
        &task("mcp:everything/echo", json!({"message": "still here"})),
        &run,
    )
    .await
    .expect("the server answers after a timed-out call");
    assert!(echoed.data.to_string().contains("still here"));
}

// ---- A client nobody here wrote: the MCP Inspector CLI ----

/// Compiles the bundled components into the home's cache, so the servers the
/// Inspector spawns answer its handshake without compiling first (the
/// Inspector gives a server a fixed time to start).
fn warm_component_cache(home: &Home) {
    let out = home.capstan().args(["plugins", "check"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn inspector(args: &[&str], home: &Home) -> (Value, String) {
    let bin: PathBuf = common::npm_bin("mcp-inspector", "mcp-inspector");
    let out = std::process::Command::new(bin)
        .arg("--cli")
        .args(args)
        .env("CAPSTAN_HOME", home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "inspector failed: {stdout}\n{stderr}");
    let json: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("inspector printed no JSON ({e}): {stdout}\n{stderr}"));
    (json, stderr)
}

fn tool_names(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {list}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect()
}

#[test]
fn the_mcp_inspector_lists_and_calls_capstans_tools_over_stdio() {
    let home = Home::new("");
    warm_component_cache(&home);
    let ws = workspace();
    let ws_arg = ws.path().display().to_string();
    let home_env = format!("CAPSTAN_HOME={}", home.path().display());
    let server = [
        "-e",
        home_env.as_str(),
        "--",
        capstan_bin(),
        "mcp",
        "--approve",
        "all",
        "--workspace",
        ws_arg.as_str(),
    ];
    let mut list_args = vec!["--method", "tools/list"];
    list_args.extend(server);
    let (list, _) = inspector(&list_args, &home);
    let names = tool_names(&list);
    assert!(
        names.contains(&"terminal_exec.run".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"docx.create".to_string()), "{names:?}");

    let mut call_args = vec![
        "--method",
        "tools/call",
        "--tool-name",
        "local_kb_retrieval.search",
        "--tool-arg",
        "query=green pool",
    ];
    call_args.extend(server);
    let (called, _) = inspector(&call_args, &home);
    assert_ne!(called["isError"], true, "{called}");
    assert_eq!(
        called["structuredContent"]["data"]["passages"][0]["path"], "docs/deploy.md",
        "{called}"
    );
}

#[test]
fn the_mcp_inspector_lists_and_calls_capstans_tools_over_http() {
    let home = Home::new("");
    warm_component_cache(&home);
    let ws = workspace();
    let server = HttpServer::start(&home, ws.path(), "all", &[]);
    let auth = format!("Authorization: Bearer {}", server.token);
    let (list, _) = inspector(
        &[&server.url, "--header", &auth, "--method", "tools/list"],
        &home,
    );
    assert!(
        tool_names(&list).contains(&"docx.read".to_string()),
        "{list}"
    );
    let (called, _) = inspector(
        &[
            &server.url,
            "--header",
            &auth,
            "--method",
            "tools/call",
            "--tool-name",
            "terminal_exec.run",
            "--tool-arg",
            "command=cat keep.txt",
        ],
        &home,
    );
    assert_eq!(
        called["structuredContent"]["data"]["steps"][0]["stdout"], "keep me",
        "{called}"
    );
}

// ---------------------------------------------------------------------------
// The server beyond tools: the official conformance suite, JSON-RPC errors over
// HTTP, resources, prompts, completion, logging, output schemas, annotations.

/// Polls `done` (the client's notifications arrive on other tasks) for up to
/// a minute.
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `capstan mcp --listen 127.0.0.1:0 --no-token` plus `extra`: the child and
/// its URL.
fn listen_without_token(home: &Home, ws: &Path, extra: &[&str]) -> (std::process::Child, String) {
    let mut child = home
        .capstan()
        .args([
            "mcp",
            "--listen",
            "127.0.0.1:0",
            "--no-token",
            "--approve",
            "all",
        ])
        .args(extra)
        .arg("--workspace")
        .arg(ws)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("capstan mcp: listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    (child, url)
}

/// The official conformance suite (`@modelcontextprotocol/conformance`,
/// pinned in tests/npm/mcp-conformance with the Node 22 it needs) runs every
/// server scenario it has (`--suite all`, pending ones included) against
/// `capstan mcp --listen`, which serves the suite's fixtures behind
/// `--conformance-fixtures`. Every check must pass; the count is printed.
#[test]
fn the_official_conformance_suite_passes_every_server_scenario() {
    let conformance = common::npm_bin("mcp-conformance", "conformance");
    let bin_dir = conformance.parent().unwrap().to_path_buf();
    // The suite's `#!/usr/bin/env node` must find the pinned Node 22, not the system's.
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let node = std::process::Command::new(bin_dir.join("node"))
        .arg("--version")
        .output()
        .expect("the pinned node runs");
    let node_version = String::from_utf8_lossy(&node.stdout).trim().to_string();
    assert!(node_version.starts_with("v22."), "{node_version}");

    let listed = std::process::Command::new(&conformance)
        .args(["list", "--server"])
        .env("PATH", &path)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    let scenarios: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert!(
        scenarios.len() >= 30,
        "the suite lists its scenarios: {listed}"
    );

    let home = Home::new("");
    let ws = workspace();
    let (mut child, url) = listen_without_token(&home, ws.path(), &["--conformance-fixtures"]);
    let results = tempfile::tempdir().unwrap();
    let run = std::process::Command::new(&conformance)
        .args(["server", "--suite", "all", "--url", &url, "-o"])
        .arg(results.path())
        .env("PATH", &path)
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let out = String::from_utf8_lossy(&run.stdout).to_string();
    let summary = out.split("=== SUMMARY ===").nth(1).unwrap_or_else(|| {
        panic!(
            "no summary from the suite:\n{out}\n{}",
            String::from_utf8_lossy(&run.stderr)
        )
    });
    let ran: Vec<&str> = summary
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter_map(|l| l.trim().strip_prefix("✓ ").or(l.trim().strip_prefix("✗ ")))
        .collect();
    for scenario in &scenarios {
        assert!(
            ran.contains(scenario),
            "scenario {scenario} did not run:\n{summary}"
        );
    }
    let total = summary
        .lines()
        .find(|l| l.starts_with("Total:"))
        .unwrap_or_else(|| panic!("no total:\n{summary}"));
    println!(
        "MCP conformance ({node_version}): {} scenarios, {total}",
        ran.len()
    );
    assert!(total.contains(" 0 failed"), "{summary}");
    assert!(run.status.success(), "{summary}");
}

/// What the streamable HTTP transport cannot parse is answered as MCP says:
/// JSON-RPC errors a client can read, with the right HTTP status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_answers_bad_bodies_batches_unknown_sessions_and_versions_per_spec() {
    let home = Home::new("");
    let ws = workspace();
    let (mut child, url) = listen_without_token(&home, ws.path(), &[]);
    let http = reqwest::Client::new();
    let post = |body: &'static str, content_type: &'static str| {
        http.post(&url)
            .header("Content-Type", content_type)
            .header("Accept", "application/json, text/event-stream")
            .body(body)
            .send()
    };
    let error = |v: &Value| {
        (
            v["jsonrpc"].clone(),
            v["id"].clone(),
            v["error"]["code"].clone(),
        )
    };

    let garbage = post("{not json", "application/json").await.unwrap();
    assert_eq!(garbage.status(), 400);
    let body: Value = garbage.json().await.unwrap();
    assert_eq!(
        error(&body),
        (json!("2.0"), Value::Null, json!(-32700)),
        "{body}"
    );

    let batch = post(
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        "application/json",
    )
    .await
    .unwrap();
    assert_eq!(batch.status(), 400);
    let body: Value = batch.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("batch"),
        "{body}"
    );

    let not_rpc = post(r#"{"id":1,"method":"ping"}"#, "application/json")
        .await
        .unwrap();
    assert_eq!(not_rpc.status(), 400);
    assert_eq!(
        not_rpc.json::<Value>().await.unwrap()["error"]["code"],
        -32600
    );

    let wrong_type = post("hello", "text/plain").await.unwrap();
    assert_eq!(wrong_type.status(), 415);
    assert_eq!(
        wrong_type.json::<Value>().await.unwrap()["error"]["code"],
        -32600
    );

    let gone = http
        .delete(&url)
        .header("mcp-session-id", "no-such-session")
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    assert_eq!(gone.json::<Value>().await.unwrap()["error"]["code"], -32001);

    // An unknown version is answered with one the server speaks, not echoed.
    for asked in ["1999-01-01", "2026-07-28"] {
        let init = http
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": asked, "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"}}})
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(init.status(), 200);
        let text = init.text().await.unwrap();
        assert!(
            text.contains(r#""protocolVersion":"2025-11-25""#),
            "asked {asked}: {text}"
        );
    }

    // The server still serves, and a cursor it never handed out is an error.
    let mut config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.as_str(),
        );
    config.auth_header = None;
    let session = Client::default()
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap();
    let bogus = || Some(PaginatedRequestParams::default().with_cursor(Some("bogus".into())));
    for refused in [
        session.list_tools(bogus()).await.map(|_| ()),
        session.list_resources(bogus()).await.map(|_| ()),
        session.list_prompts(bogus()).await.map(|_| ()),
    ] {
        match refused {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(e.code.0, -32602, "{e:?}");
                assert!(e.message.contains("cursor"), "{e:?}");
            }
            other => panic!("an invalid cursor was accepted: {other:?}"),
        }
    }
    assert!(!session.list_all_tools().await.unwrap().is_empty());
    session.cancel().await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
}

fn contents_text(contents: &ResourceContents) -> &str {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => text,
        other => panic!("not text: {other:?}"),
    }
}

/// The workspace's files are `file://` resources, listed, read, completed and
/// watched; no spelling of a path reaches beyond the workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_files_are_resources_that_never_reach_outside() {
    let home = Home::new("");
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("escape")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        ws.path().join("secret-link.txt"),
    )
    .unwrap();
    let client = Client::default();
    let session = stdio(&home, ws.path(), "all", client.clone()).await;
    let root = ws.path().canonicalize().unwrap();

    let listed = session.list_all_resources().await.unwrap();
    let uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
    let deploy = format!("file://{}/docs/deploy.md", root.display());
    assert!(uris.contains(&deploy.as_str()), "{uris:?}");
    assert!(
        uris.iter().all(|u| !u.contains("secret")),
        "a symlink out is not listed: {uris:?}"
    );
    let md = listed.iter().find(|r| r.uri == deploy).unwrap();
    assert_eq!(md.mime_type.as_deref(), Some("text/markdown"));

    let read = session
        .read_resource(ReadResourceRequestParams::new(deploy.clone()))
        .await
        .unwrap();
    assert!(contents_text(&read.contents[0]).contains("Blue-green switch"));

    let templates = session.list_all_resource_templates().await.unwrap();
    let template_uris: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert!(
        template_uris.contains(&"capstan://index/search{?q}"),
        "{template_uris:?}"
    );
    let file_template = format!("file://{}/{{+path}}", root.display());
    assert!(
        template_uris.contains(&file_template.as_str()),
        "{template_uris:?}"
    );

    let r = root.display().to_string();
    let made = std::process::Command::new("mkfifo")
        .arg(root.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    for uri in [
        format!("file://{r}/../{}/secret.txt", outside.path().display()),
        format!("file://{r}/docs/%2e%2e/%2e%2e/etc/passwd"),
        format!("file://{r}/escape/secret.txt"),
        format!("file://{r}/secret-link.txt"),
        format!("file://{}/secret.txt", outside.path().display()),
        "file:///etc/passwd".to_string(),
        format!("file://other-host{r}/keep.txt"),
        format!("file://{r}/keep.txt%00.md"),
        // A FIFO with no writer is refused at once, never waited on (issue #42).
        format!("file://{r}/pipe"),
    ] {
        match session
            .read_resource(ReadResourceRequestParams::new(uri.clone()))
            .await
        {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32002, "{uri}: {e:?}"),
            Ok(found) => panic!("{uri} was served: {found:?}"),
            Err(other) => panic!("{uri}: {other:?}"),
        }
    }

    // Completion offers workspace paths only.
    let docs = session
        .complete_prompt_simple("run_a_command_safely", "cwd", "do")
        .await
        .unwrap();
    assert_eq!(docs, vec!["docs/".to_string()]);
    let inside = session
        .complete_resource_simple(file_template.clone(), "path", "docs/de")
        .await
        .unwrap();
    assert_eq!(inside, vec!["docs/deploy.md".to_string()]);
    for prefix in ["../", "/etc/", "escape/", "docs/../../"] {
        let offered = session
            .complete_resource_simple(file_template.clone(), "path", prefix)
            .await
            .unwrap();
        assert!(offered.is_empty(), "{prefix}: {offered:?}");
    }

    // A subscribed file that changes is announced; so is a new file.
    session
        .subscribe(SubscribeRequestParams::new(format!("file://{r}/keep.txt")))
        .await
        .unwrap();
    std::fs::write(
        ws.path().join("keep.txt"),
        "changed, and longer than before",
    )
    .unwrap();
    wait_for("notifications/resources/updated", || {
        client
            .updated
            .lock()
            .unwrap()
            .iter()
            .any(|u| u.ends_with("/keep.txt"))
    })
    .await;
    std::fs::write(ws.path().join("new.txt"), "new").unwrap();
    wait_for("notifications/resources/list_changed", || {
        *client.list_changed.lock().unwrap() > 0
    })
    .await;
    session.cancel().await.unwrap();
}

fn prompt_args(args: Value) -> GetPromptRequestParams {
    let mut p = GetPromptRequestParams::new("x");
    p.arguments = args.as_object().cloned();
    p
}

async fn prompt_text(session: &Session, name: &str, args: Value) -> String {
    let mut params = prompt_args(args);
    params.name = name.into();
    let got = session.get_prompt(params).await.unwrap();
    serde_json::to_string(&got.messages).unwrap()
}

/// Logging carries the task activity at the level the client chose; the
/// prompts fill from the workspace, the policy and the run record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logging_and_prompts_follow_what_capstan_did() {
    let home = Home::new("");
    let ws = workspace();
    let client = Client::default();
    let session = stdio(&home, ws.path(), "all", client.clone()).await;

    session
        .set_level(SetLevelRequestParams::new(LoggingLevel::Debug))
        .await
        .unwrap();
    data(
        &call(
            &session,
            "terminal_exec.run",
            json!({"command": "cat keep.txt"}),
        )
        .await,
    );
    let logs = client.logs.lock().unwrap().clone();
    let step = logs
        .iter()
        .find(|(_, d)| {
            d["message"]
                .as_str()
                .is_some_and(|m| m.contains("$ cat keep.txt (exit 0)"))
        })
        .unwrap_or_else(|| panic!("no log of the command: {logs:?}"));
    assert_eq!(step.0, "info");
    assert_eq!(step.1["tool"], "terminal_exec.run");
    let run_id = step.1["run"].as_str().unwrap().to_string();

    // At `error`, a call that works logs nothing; one that fails logs its failure.
    session
        .set_level(SetLevelRequestParams::new(LoggingLevel::Error))
        .await
        .unwrap();
    let before = client.logs.lock().unwrap().len();
    data(
        &call(
            &session,
            "terminal_exec.run",
            json!({"command": "cat keep.txt"}),
        )
        .await,
    );
    assert_eq!(
        client.logs.lock().unwrap().len(),
        before,
        "{:?}",
        client.logs.lock().unwrap()
    );
    let failed = call(
        &session,
        "terminal_exec.run",
        json!({"command": "ls", "cwd": "nope"}),
    )
    .await;
    assert_eq!(failed.is_error, Some(true));
    let logs = client.logs.lock().unwrap().clone();
    assert!(
        logs[before..].iter().all(|(level, _)| level == "error") && logs.len() > before,
        "{logs:?}"
    );

    let listed = session.list_all_prompts().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "ask_the_workspace",
            "run_a_command_safely",
            "summarise_run_changes"
        ]
    );
    let asked = prompt_text(
        &session,
        "ask_the_workspace",
        json!({"question": "How do we deploy?"}),
    )
    .await;
    assert!(
        asked.contains("How do we deploy?") && asked.contains("cite"),
        "{asked}"
    );

    let rm = prompt_text(
        &session,
        "run_a_command_safely",
        json!({"command": "rm keep.txt"}),
    )
    .await;
    assert!(
        rm.contains("rm keep.txt") && rm.contains("approval"),
        "{rm}"
    );
    let cat = prompt_text(
        &session,
        "run_a_command_safely",
        json!({"command": "cat keep.txt", "cwd": "docs"}),
    )
    .await;
    assert!(cat.contains("runs without asking"), "{cat}");
    let mut outside = prompt_args(json!({"command": "ls", "cwd": "../"}));
    outside.name = "run_a_command_safely".into();
    assert!(
        session.get_prompt(outside).await.is_err(),
        "a cwd outside is refused"
    );

    let summary = prompt_text(&session, "summarise_run_changes", json!({"run_id": run_id})).await;
    assert!(
        summary.contains("cat keep.txt") && summary.contains("completed"),
        "{summary}"
    );
    let offered = session
        .complete_prompt_simple("summarise_run_changes", "run_id", &run_id[..4])
        .await
        .unwrap();
    assert!(offered.contains(&run_id), "{offered:?}");
    session.cancel().await.unwrap();
}

/// Every tool has an output schema its structured results fit, and hints
/// computed from the real risk: a command runner and every writer are
/// destructive, a search is read-only and idempotent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_declare_output_schemas_and_honest_annotations() {
    let home = Home::new("");
    let ws = workspace();
    let session = stdio(&home, ws.path(), "all", Client::default()).await;
    let tools = session.list_all_tools().await.unwrap();
    let by_name = |n: &str| {
        tools
            .iter()
            .find(|t| t.name == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    for tool in &tools {
        assert!(
            tool.output_schema.is_some(),
            "{} has no outputSchema",
            tool.name
        );
        let a = tool.annotations.as_ref().unwrap();
        assert!(
            a.destructive_hint.is_some()
                && a.idempotent_hint.is_some()
                && a.open_world_hint.is_some(),
            "{a:?}"
        );
    }
    for destructive in ["terminal_exec.run", "docx.replace", "docx.create"] {
        let a = by_name(destructive).annotations.clone().unwrap();
        assert_eq!(
            (a.read_only_hint, a.destructive_hint),
            (Some(false), Some(true)),
            "{destructive}"
        );
    }
    let search = by_name("local_kb_retrieval.search")
        .annotations
        .clone()
        .unwrap();
    assert_eq!(
        (
            search.read_only_hint,
            search.idempotent_hint,
            search.open_world_hint
        ),
        (Some(true), Some(true), Some(false))
    );

    let schema =
        Value::Object((*by_name("terminal_exec.run").output_schema.clone().unwrap()).clone());
    let validator = jsonschema::validator_for(&schema).unwrap();
    let ok = call(
        &session,
        "terminal_exec.run",
        json!({"command": "cat keep.txt"}),
    )
    .await;
    let structured = ok.structured_content.clone().unwrap();
    assert!(validator.is_valid(&structured), "{structured}");
    let failed = call(&session, "terminal_exec.run", json!({"command": 7})).await;
    let structured = failed.structured_content.clone().unwrap();
    assert!(validator.is_valid(&structured), "{structured}");
    session.cancel().await.unwrap();
}

// ---------------------------------------------------------------------------
// What Capstan offers the servers it uses: roots, progress, content kept, its
// log for their stderr, and a dead HTTP server noticed at once.

/// The reference servers with nothing but Capstan's roots to go on: the
/// filesystem server started with no directory (it then serves the client's
/// roots, or nothing) and the "everything" server.
fn roots_config() -> String {
    format!(
        r#"
[[mcp_server]]
name = "fsroots"
command = {fs:?}
risk = "read_only"
# Sandboxed: it sees the workspace it is offered as its root, read-only.
workspace = "read"
{read}

[[mcp_server]]
name = "every"
command = {everything:?}
risk = "read_only"
timeout_secs = 120
# Roots are offered only to a server the workspace is granted to.
workspace = "read"
{read}
"#,
        fs = third_party_bin("mcp-server-filesystem"),
        everything = third_party_bin("mcp-server-everything"),
        read = npm_read(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_servers_get_the_workspace_as_root_progress_and_keep_images() {
    setup_sandbox_launcher();
    let home = Home::new(&roots_config());
    let ws = workspace();
    let root = ws.path().canonicalize().unwrap();
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
        .await
        .unwrap();
    let registry = app.registry(Some(&root)).await;
    assert!(registry.problems().is_empty(), "{:?}", registry.problems());
    let (run, recorder) = direct_run(&app, &root);

    // The filesystem server got no directory: what it serves is Capstan's root.
    // It asks for the roots after the handshake, on its own time: poll.
    let keep = root.join("keep.txt").display().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let read = loop {
        let read = run_task(
            &app.runtime,
            &registry,
            &task("mcp:fsroots/read_text_file", json!({"path": keep})),
            &run,
        )
        .await;
        match read {
            Ok(read) => break read,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet: {}", e.message);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the filesystem server never served the workspace root: {e:?}"),
        }
    };
    assert!(read.data.to_string().contains("keep me"), "{:?}", read.data);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("x.txt"), "outside").unwrap();
    let refused = run_task(
        &app.runtime,
        &registry,
        &task(
            "mcp:fsroots/read_text_file",
            json!({"path": outside.path().join("x.txt")}),
        ),
        &run,
    )
    .await
    .unwrap_err();
    assert_eq!(refused.reason, FailureReason::Failed, "{refused:?}");
    let roots = run_task(
        &app.runtime,
        &registry,
        &task("mcp:every/get-roots-list", json!({})),
        &run,
    )
    .await
    .unwrap();
    assert!(
        roots
            .data
            .to_string()
            .contains(&format!("file://{}", root.display())),
        "{:?}",
        roots.data
    );

    // Progress notifications become the run's progress events; the task event
    // names the operation even when the plan left it out.
    let mut long = task(
        "mcp:every/trigger-long-running-operation",
        json!({"duration": 1, "steps": 4}),
    );
    long.operation = String::new();
    run_task(&app.runtime, &registry, &long, &run)
        .await
        .unwrap();
    let events: Vec<Value> = recorder
        .events()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    let progress: Vec<&Value> = events.iter().filter(|e| e["type"] == "progress").collect();
    // The server's last notification may race its answer; the ones before it
    // cannot.
    assert!(progress.len() >= 3, "{events:?}");
    assert!(progress.iter().all(|p| p["total"] == 4), "{progress:?}");
    let done: Vec<u64> = progress
        .iter()
        .map(|p| p["done"].as_u64().unwrap())
        .collect();
    assert!(done.windows(2).all(|w| w[0] < w[1]), "{done:?}");
    assert!(
        events.iter().any(|e| e["type"] == "task.started"
            && e["kind"] == "mcp:every/trigger-long-running-operation"
            && e["operation"] == "call"),
        "{events:?}"
    );

    // An image answer is kept with the task's data, not dropped.
    let image = run_task(
        &app.runtime,
        &registry,
        &task("mcp:every/get-tiny-image", json!({})),
        &run,
    )
    .await
    .unwrap();
    let content = image.data["content"].as_array().expect("content kept");
    let png = content
        .iter()
        .find(|c| c["type"] == "image")
        .unwrap_or_else(|| panic!("{content:?}"));
    assert_eq!(png["mimeType"], "image/png");
    assert!(png["data"].as_str().unwrap().len() > 100);
}

/// A server that adds a tool and says so (`notifications/tools/list_changed`,
/// tests/npm/mcp-servers/media.mjs): the next registry has the new tool,
/// although the list was cached, and the cache for the next process has it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_list_changed_brings_its_new_tools_into_the_next_registry() {
    setup_sandbox_launcher();
    let media = common::npm_modules("mcp-servers")
        .parent()
        .unwrap()
        .join("media.mjs");
    let home = Home::new(&format!(
        "[[mcp_server]]\nname = \"media\"\ncommand = \"node\"\nargs = [{media:?}]\nrisk = \"read_only\"\n{}\n",
        npm_read()
    ));
    let ws = workspace();
    let root = ws.path().canonicalize().unwrap();
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
        .await
        .unwrap();
    let registry = app.registry(Some(&root)).await;
    assert!(registry.problems().is_empty(), "{:?}", registry.problems());
    assert!(registry.external_tool("mcp:media/extra").is_none());
    // Listed and cached: without the notification this list would stay.
    let again = app.registry(Some(&root)).await;
    assert!(again.external_tool("mcp:media/extra").is_none());

    let (run, _recorder) = direct_run(&app, &root);
    run_task(
        &app.runtime,
        &registry,
        &task("mcp:media/grow", json!({})),
        &run,
    )
    .await
    .unwrap();
    // The notification is handled on the client's own task: poll briefly.
    let deadline = Instant::now() + Duration::from_secs(10);
    let grown = loop {
        let registry = app.registry(Some(&root)).await;
        if registry.external_tool("mcp:media/extra").is_some() {
            break registry;
        }
        assert!(Instant::now() < deadline, "mcp:media/extra never appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let extra = run_task(
        &app.runtime,
        &grown,
        &task("mcp:media/extra", json!({})),
        &run,
    )
    .await
    .unwrap();
    assert_eq!(extra.summary, "extra ran");
    drop(app);

    // A new process plans from the refreshed cache.
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
        .await
        .unwrap();
    let registry = app.registry(Some(&root)).await;
    assert!(registry.external_tool("mcp:media/extra").is_some());
    assert!(app.mcp.running().is_empty(), "{:?}", app.mcp.running());
}

/// An external server on streamable HTTP (a real `capstan mcp --listen`,
/// on 127.0.0.1) killed with SIGKILL in the middle of a two-minute call: the
/// call fails as a lost connection, long before its 300 s timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_killed_mid_call_fails_the_call_at_once() {
    setup_sandbox_launcher();
    let inner_home = Home::new("");
    let inner_ws = workspace();
    let (mut inner, url) = listen_without_token(&inner_home, inner_ws.path(), &[]);
    let home = Home::new(&format!(
        "[[mcp_server]]\nname = \"remote\"\nurl = {url:?}\nrisk = \"read_only\"\n"
    ));
    let ws = workspace();
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
        .await
        .unwrap();
    let registry = Arc::new(app.registry(Some(ws.path())).await);
    assert!(registry.problems().is_empty(), "{:?}", registry.problems());
    let app = Arc::new(app);
    let marker = "119.5";
    let calling = {
        let (app, registry, ws) = (app.clone(), registry.clone(), ws.path().to_path_buf());
        tokio::spawn(async move {
            let (run, _) = direct_run(&app, &ws);
            run_task(
                &app.runtime,
                &registry,
                &task(
                    "mcp:remote/terminal_exec.run",
                    json!({"command": format!("sleep {marker}")}),
                ),
                &run,
            )
            .await
        })
    };
    wait_for("the remote sleep to start", || {
        !processes_with(&["sleep", marker]).is_empty()
    })
    .await;
    let killed_at = Instant::now();
    inner.kill().unwrap();
    inner.wait().unwrap();
    let failed = calling.await.unwrap().unwrap_err();
    let noticed = killed_at.elapsed();
    println!("a killed HTTP server failed the call after {noticed:?}");
    assert_eq!(failed.reason, FailureReason::Failed, "{failed:?}");
    assert!(failed.message.contains("`remote`"), "{}", failed.message);
    assert!(
        !failed.message.contains("within 300 s"),
        "{}",
        failed.message
    );
    // The orphaned sandboxed sleep is not the test's to leave behind.
    for pid in processes_with(&["sleep", marker]) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
}

// ---- What external servers ask of Capstan: elicitation and sampling ----

/// The "everything" server on stdio, with elicitation and sampling tools (it
/// lists them only to a client that declares those capabilities), and, when
/// given its URL, a real `capstan mcp --listen --conformance-fixtures` on
/// streamable HTTP (a form elicitation every field of which has a default).
fn asking_config(fixtures_url: Option<&str>, extra: &str) -> String {
    let mut config = format!(
        r#"{extra}
[[mcp_server]]
name = "every"
command = {everything:?}
risk = "read_only"
timeout_secs = 120
{read}
"#,
        everything = third_party_bin("mcp-server-everything"),
        read = npm_read(),
    );
    if let Some(url) = fixtures_url {
        config.push_str(&format!(
            "\n[[mcp_server]]\nname = \"fixtures\"\nurl = {url:?}\nrisk = \"read_only\"\n"
        ));
    }
    config
}

/// Answers every approval the run asks for with `decision`, as a person at
/// a frontend would (through the broker, `via` the terminal).
fn answer_approvals(
    app: Arc<capstan::run::app::App>,
    recorder: Recorder,
    decision: capstan_store::Decision,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut answered = std::collections::HashSet::new();
        loop {
            for event in recorder.events() {
                if let capstan_protocol::Event::ApprovalRequested { approval_id, .. } = event
                    && app.broker.is_open(&approval_id)
                    && answered.insert(approval_id.clone())
                {
                    app.broker
                        .decide(
                            &approval_id,
                            decision,
                            capstan::plugins::services::approval::Via::Terminal,
                        )
                        .unwrap();
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// A run context as `capstan ask` makes one (with the run's model as the
/// sampler), recording its events.
fn full_run(app: &capstan::run::app::App, ws: &Path) -> (RunContext, Recorder) {
    let recorder = Recorder::default();
    let run = app
        .run_builder(Some(ws.to_path_buf()))
        .build(Arc::new(recorder.clone()));
    (run, recorder)
}

fn approvals_asked(recorder: &Recorder, action: &str) -> Vec<Value> {
    recorder
        .events()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .filter(|e| e["type"] == "approval.requested" && e["action"] == action)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_servers_elicitation_is_the_persons_approval() {
    setup_sandbox_launcher();
    let inner_home = Home::new("");
    let inner_ws = workspace();
    let (mut fixtures, url) =
        listen_without_token(&inner_home, inner_ws.path(), &["--conformance-fixtures"]);
    let home = Home::new(&asking_config(Some(&url), ""));
    let ws = workspace();
    let root = ws.path().canonicalize().unwrap();
    let app = Arc::new(
        capstan::run::app::App::open(home.dirs(), ApproveMode::Ask)
            .await
            .unwrap(),
    );
    let registry = app.registry(Some(&root)).await;
    assert!(registry.problems().is_empty(), "{:?}", registry.problems());
    let url_input = json!({
        "url": "https://example.com/consent",
        // A terminal escape (OSC 52 writes the clipboard) in the server's words.
        "message": "Open \u{1b}]52;c;ZXZpbA==\u{7} the consent page"
    });

    // Approved: the URL elicitation is accepted.
    let (run, recorder) = full_run(&app, &root);
    let person = answer_approvals(
        app.clone(),
        recorder.clone(),
        capstan_store::Decision::Approved,
    );
    let accepted = run_task(
        &app.runtime,
        &registry,
        &task("mcp:every/trigger-url-elicitation", url_input.clone()),
        &run,
    )
    .await
    .unwrap();
    let text = accepted.data.to_string();
    assert!(
        text.contains("User completed the URL elicitation"),
        "{text}"
    );
    let asked = approvals_asked(&recorder, "mcp.elicitation");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let shown = asked[0]["command"].as_str().unwrap();
    assert!(
        shown.contains("`every`") && shown.contains("https://example.com/consent"),
        "{shown}"
    );
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
    assert!(shown.contains('␛'), "the escape shows as text: {shown}");

    // A form every field of which has a default (from a server on streamable
    // HTTP): approving sends the defaults.
    let form = run_task(
        &app.runtime,
        &registry,
        &task("mcp:fixtures/test_elicitation_sep1034_defaults", json!({})),
        &run,
    )
    .await
    .unwrap();
    let text = form.data.to_string();
    assert!(
        text.contains("action=accept") && text.contains("John Doe"),
        "{text}"
    );
    person.abort();

    // Denied: declined.
    let (run, recorder) = full_run(&app, &root);
    let person = answer_approvals(
        app.clone(),
        recorder.clone(),
        capstan_store::Decision::Denied,
    );
    let declined = run_task(
        &app.runtime,
        &registry,
        &task("mcp:every/trigger-url-elicitation", url_input.clone()),
        &run,
    )
    .await
    .unwrap();
    let text = declined.data.to_string();
    assert!(text.contains("User declined to open the URL"), "{text}");
    assert_eq!(approvals_asked(&recorder, "mcp.elicitation").len(), 1);
    let decided: Vec<Value> = recorder
        .events()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .filter(|e| e["type"] == "approval.decided")
        .collect();
    assert!(
        decided.iter().any(|d| d["decision"] == "denied"),
        "{decided:?}"
    );

    // A form that requires a typed-in name: declined without asking, and the
    // feed says why.
    let named = run_task(
        &app.runtime,
        &registry,
        &task("mcp:every/trigger-elicitation-request", json!({})),
        &run,
    )
    .await
    .unwrap();
    assert!(
        named.data.to_string().contains("User declined"),
        "{:?}",
        named.data
    );
    assert_eq!(approvals_asked(&recorder, "mcp.elicitation").len(), 1);
    let why: Vec<Value> = recorder
        .events()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .filter(|e| e["type"] == "activity" && e["kind"] == "mcp.elicitation")
        .collect();
    assert!(
        why.iter().any(|w| w["message"]
            .as_str()
            .unwrap()
            .contains("typed values (name)")),
        "{why:?}"
    );
    person.abort();

    // With `--approve none`, nobody is asked: declined.
    let app_none = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
        .await
        .unwrap();
    let registry = app_none.registry(Some(&root)).await;
    let (run, _) = full_run(&app_none, &root);
    let flagged = run_task(
        &app_none.runtime,
        &registry,
        &task("mcp:every/trigger-url-elicitation", url_input),
        &run,
    )
    .await
    .unwrap();
    assert!(
        flagged.data.to_string().contains("User declined"),
        "{:?}",
        flagged.data
    );
    fixtures.kill().unwrap();
    fixtures.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_is_answered_by_the_offline_model_after_approval_under_the_budget() {
    setup_sandbox_launcher();
    let home = Home::new(&asking_config(None, "[run]\nbudget_tokens = 300\n"));
    let ws = workspace();
    let root = ws.path().canonicalize().unwrap();
    let app = Arc::new(
        capstan::run::app::App::open(home.dirs(), ApproveMode::Ask)
            .await
            .unwrap(),
    );
    let registry = app.registry(Some(&root)).await;
    assert!(registry.problems().is_empty(), "{:?}", registry.problems());
    let prompt = "Name three colours of the rainbow";

    // Approved: the offline model answers, its usage counted for the run.
    let (run, recorder) = full_run(&app, &root);
    let person = answer_approvals(
        app.clone(),
        recorder.clone(),
        capstan_store::Decision::Approved,
    );
    let answered = run_task(
        &app.runtime,
        &registry,
        &task(
            "mcp:every/trigger-sampling-request",
            json!({"prompt": prompt, "maxTokens": 60}),
        ),
        &run,
    )
    .await
    .unwrap();
    let text = answered.data.to_string();
    assert!(text.contains("capstan-offline"), "{text}");
    assert!(text.contains("offline model read a prompt"), "{text}");
    let asked = approvals_asked(&recorder, "mcp.sampling");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let shown = asked[0]["command"].as_str().unwrap();
    assert!(
        shown.contains("`every`")
            && shown.contains("characters")
            && shown.contains("up to 60 tokens"),
        "{shown}"
    );
    let spent = run.services.sampler.as_ref().unwrap().spent();
    assert!(
        spent.input_tokens > 0 && spent.output_tokens > 0,
        "{spent:?}"
    );
    assert!(
        recorder.types().iter().any(|t| t == "usage"),
        "{:?}",
        recorder.types()
    );
    person.abort();

    // Denied: the server gets an error, the call fails, the model is not asked.
    let (run, recorder) = full_run(&app, &root);
    let person = answer_approvals(
        app.clone(),
        recorder.clone(),
        capstan_store::Decision::Denied,
    );
    let denied = run_task(
        &app.runtime,
        &registry,
        &task(
            "mcp:every/trigger-sampling-request",
            json!({"prompt": prompt, "maxTokens": 60}),
        ),
        &run,
    )
    .await
    .unwrap_err();
    assert!(denied.message.contains("did not approve"), "{denied:?}");
    assert_eq!(
        run.services.sampler.as_ref().unwrap().spent().output_tokens,
        0
    );
    person.abort();

    // Over budget: 1000 tokens back cannot fit 300; refused before anyone is asked.
    let (run, recorder) = full_run(&app, &root);
    let over = run_task(
        &app.runtime,
        &registry,
        &task(
            "mcp:every/trigger-sampling-request",
            json!({"prompt": prompt, "maxTokens": 1000}),
        ),
        &run,
    )
    .await
    .unwrap_err();
    assert!(over.message.contains("budget of 300 tokens"), "{over:?}");
    assert!(approvals_asked(&recorder, "mcp.sampling").is_empty());
}

/// Pids of processes whose environment holds `marker` (a variable the
/// entry's `env` gives the server).
fn processes_with_env(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if raw.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// A home whose one `[[mcp_server]]`, `name`, is the "everything" server
/// with its processes marked by an environment variable (found with
/// [`processes_with_env`]); `extra` is added to the entry.
fn marked_everything_home(name: &str, extra: &str) -> (String, Home) {
    let marker = format!("CAPSTAN_TEST_MARKER={name}-{}", std::process::id());
    let (key, value) = marker.split_once('=').unwrap();
    let home = Home::new(&format!(
        "[[mcp_server]]\nname = {name:?}\ncommand = {:?}\nenv = {{ {key} = {value:?} }}\nrisk = \"read_only\"\n{}\n{extra}",
        third_party_bin("mcp-server-everything"),
        npm_read(),
    ));
    (marker, home)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_start_on_first_call_and_stay_warm_across_runs_of_one_serve() {
    setup_sandbox_launcher();
    let (marker, home) = marked_everything_home("lazy", "");
    let ws = workspace();
    let root = ws.path().canonicalize().unwrap();

    // The first registry ever lists the tools (starting the server once) and
    // caches them; the server stops with its app.
    {
        let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
            .await
            .unwrap();
        let registry = app.registry(Some(&root)).await;
        assert!(registry.external_tool("mcp:lazy/echo").is_some());
    }
    wait_until("the listing server to stop", || {
        processes_with_env(&marker).is_empty()
    });
    // From then on a registry comes from the cache: nothing starts.
    {
        let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
            .await
            .unwrap();
        let registry = app.registry(Some(&root)).await;
        assert!(registry.external_tool("mcp:lazy/echo").is_some());
        assert!(app.mcp.running().is_empty(), "{:?}", app.mcp.running());
        assert!(processes_with_env(&marker).is_empty());
    }

    let server = common::server::Server::start(
        &home,
        &["--approve", "none", "--workspace", root.to_str().unwrap()],
    );
    let run = |message: String| {
        let server = &server;
        async move {
            let body = server
                .client()
                .post(server.url("/v1/runs"))
                .json(&json!({"message": message}))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            assert!(
                body.contains("event: run.completed") || body.contains("event: run.failed"),
                "{body}"
            );
            body
        }
    };
    // A run that uses no MCP tool starts no server (however it ends).
    run("what is in docs/deploy.md?".into()).await;
    assert!(processes_with_env(&marker).is_empty());
    // The first run that calls one starts it...
    let body = run("use mcp:lazy/echo with {\"message\": \"first call\"}".into()).await;
    assert!(body.contains("event: run.completed"), "{body}");
    assert!(body.contains("Echo: first call"), "{body}");
    let started = processes_with_env(&marker);
    assert_eq!(started.len(), 1, "{started:?}");
    // ...and the next run reuses it.
    let body = run("use mcp:lazy/echo with {\"message\": \"second call\"}".into()).await;
    assert!(body.contains("Echo: second call"), "{body}");
    assert_eq!(processes_with_env(&marker), started);
    drop(server);
    // `serve` was killed (SIGKILL): its server is not the test's to leave behind.
    for pid in processes_with_env(&marker) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
}

/// A started server left without a call for `idle_secs` is stopped (its
/// process exits), and the next call starts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_idle_past_idle_secs_is_stopped_and_the_next_call_starts_it() {
    setup_sandbox_launcher();
    let (marker, home) = marked_everything_home("idle", "idle_secs = 1\n");
    let ws = workspace();
    let root = ws.path().canonicalize().unwrap();
    let app = capstan::run::app::App::open(home.dirs(), ApproveMode::None)
        .await
        .unwrap();
    let registry = app.registry(Some(&root)).await;
    let (run, _recorder) = direct_run(&app, &root);
    let echo = |message: &str| task("mcp:idle/echo", json!({"message": message}));

    let first = run_task(&app.runtime, &registry, &echo("one"), &run)
        .await
        .unwrap();
    assert!(first.data.to_string().contains("one"), "{:?}", first.data);
    let started = processes_with_env(&marker);
    assert_eq!(started.len(), 1, "{started:?}");
    // Idle: stopped by the pool, while the app lives on.
    let stopped = tokio::task::spawn_blocking({
        let marker = marker.clone();
        move || {
            wait_until("the idle server to stop", || {
                processes_with_env(&marker).is_empty()
            })
        }
    });
    stopped.await.unwrap();
    assert!(app.mcp.running().is_empty(), "{:?}", app.mcp.running());

    let again = run_task(&app.runtime, &registry, &echo("two"), &run)
        .await
        .unwrap();
    assert!(again.data.to_string().contains("two"), "{:?}", again.data);
    let restarted = processes_with_env(&marker);
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    assert_ne!(restarted, started, "a new process");
    drop(app);
    wait_until("the server to stop with its app", || {
        processes_with_env(&marker).is_empty()
    });
}
