//! The doors around the sandbox, tried as an attacker would, through the real
//! binary over real HTTP on 127.0.0.1: DNS rebinding (a foreign `Host`) and
//! cross-site requests (a foreign `Origin`) are refused on every route of
//! `capstan serve` (API, SSE, approvals, AG-UI, `/mcp`) and of
//! `capstan mcp --listen`; no token, no entry; workspaces over HTTP are
//! registered folders only and never system, home or Capstan dirs (nothing
//! gets indexed for a refused one); every CLI entry point refuses Capstan's
//! own dirs; the event-stream caps hold; and the whole rebinding chain of
//! issue 13 fails at every step with nothing written and nothing started.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::Home;
use common::server::{Server, handbook};
use futures::StreamExt;
use serde_json::{Value, json};

const EVIL_ORIGIN: &str = "http://evil.example";

fn port(base: &str) -> &str {
    base.rsplit(':').next().unwrap()
}

/// What a request shows at the door.
#[derive(Clone, Copy, Debug)]
enum Visitor {
    /// The right token and this server's own Host.
    Owner,
    /// A rebound name: `Host: evil.example:PORT` (a page's scripts would also
    /// send its Origin; with the token, to show the Host check alone holds).
    RebindingHost,
    /// A cross-site page: right Host, `Origin: http://evil.example`, token.
    ForeignOrigin,
    /// No token at all.
    NoToken,
}

fn request(
    server_base: &str,
    token: &str,
    visitor: Visitor,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    let http = reqwest::Client::new();
    let mut req = http.request(method, format!("{server_base}{path}"));
    match visitor {
        Visitor::Owner => req = req.bearer_auth(token),
        Visitor::RebindingHost => {
            req = req
                .bearer_auth(token)
                .header("Host", format!("evil.example:{}", port(server_base)))
        }
        Visitor::ForeignOrigin => req = req.bearer_auth(token).header("Origin", EVIL_ORIGIN),
        Visitor::NoToken => {}
    }
    req
}

/// Status and JSON error message of a refused request.
async fn refused(resp: reqwest::Response) -> (u16, String) {
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    (
        status,
        body["error"]["message"].as_str().unwrap_or("").to_string(),
    )
}

fn expect_refusal(visitor: Visitor, what: &str, status: u16, message: &str) {
    match visitor {
        Visitor::RebindingHost => {
            assert_eq!(status, 421, "{what}: {message}");
            assert!(message.contains("--allow-host"), "{what}: {message}");
        }
        Visitor::ForeignOrigin => {
            assert_eq!(status, 403, "{what}: {message}");
            assert!(message.contains("--allow-origin"), "{what}: {message}");
        }
        Visitor::NoToken => {
            assert_eq!(status, 401, "{what}: {message}");
            assert!(message.contains("Bearer"), "{what}: {message}");
        }
        Visitor::Owner => unreachable!(),
    }
}

/// Reads SSE `data:` payloads until an event of type `t`.
async fn until(
    body: &mut futures::stream::BoxStream<'static, Vec<u8>>,
    buf: &mut String,
    t: &str,
) -> Value {
    loop {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            for line in block.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    let v: Value = serde_json::from_str(data.trim()).unwrap();
                    if v["type"] == t {
                        return v;
                    }
                }
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(120), body.next())
            .await
            .expect("no event for 120 s")
            .unwrap_or_else(|| panic!("stream ended before {t}"));
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

fn byte_stream(resp: reqwest::Response) -> futures::stream::BoxStream<'static, Vec<u8>> {
    resp.bytes_stream()
        .map(|r| r.map(|b| b.to_vec()).unwrap_or_default())
        .boxed()
}

/// A run of `make check` in the handbook, stopped at its approval.
struct Waiting {
    run_id: String,
    approval_id: String,
    body: futures::stream::BoxStream<'static, Vec<u8>>,
    buf: String,
}

async fn run_waiting_for_approval(server: &Server) -> Waiting {
    let resp = server
        .client()
        .post(server.url("/v1/runs"))
        .json(&json!({"message": "run `make check`"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let run_id = resp.headers()["x-capstan-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    let mut body = byte_stream(resp);
    let mut buf = String::new();
    let asked = until(&mut body, &mut buf, "approval.requested").await;
    Waiting {
        run_id,
        approval_id: asked["approval_id"].as_str().unwrap().to_string(),
        body,
        buf,
    }
}

const MCP_INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

fn mcp_post(req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    req.header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(MCP_INIT)
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_refuses_foreign_hosts_foreign_origins_and_missing_tokens_on_every_route() {
    let home = Home::new("");
    let ws = handbook();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    let token = server.token.clone().unwrap();
    let mut waiting = run_waiting_for_approval(&server).await;
    let run = waiting.run_id.clone();
    let approval = waiting.approval_id.clone();
    use reqwest::Method;
    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (
            Method::POST,
            "/v1/runs".into(),
            Some(json!({"message": "hi"})),
        ),
        (Method::GET, "/v1/sessions".into(), None),
        (Method::GET, "/v1/workspaces".into(), None),
        (Method::GET, format!("/v1/runs/{run}/events"), None),
        (
            Method::POST,
            format!("/v1/approvals/{approval}"),
            Some(json!({"decision": "approved"})),
        ),
        (
            Method::POST,
            "/agui".into(),
            Some(
                json!({"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "user", "content": "hi"}]}),
            ),
        ),
        (Method::GET, "/openapi.json".into(), None),
    ];
    for visitor in [
        Visitor::RebindingHost,
        Visitor::ForeignOrigin,
        Visitor::NoToken,
    ] {
        for (method, path, body) in &routes {
            let mut req = request(&server.base, &token, visitor, method.clone(), path);
            if let Some(b) = body {
                req = req.json(b);
            }
            let (status, message) = refused(req.send().await.unwrap()).await;
            expect_refusal(
                visitor,
                &format!("{visitor:?} {method} {path}"),
                status,
                &message,
            );
        }
        let resp = mcp_post(request(&server.base, &token, visitor, Method::POST, "/mcp"))
            .send()
            .await
            .unwrap();
        let (status, message) = refused(resp).await;
        expect_refusal(visitor, &format!("{visitor:?} POST /mcp"), status, &message);
    }
    // The static page holds no data and needs no token, but a rebound name
    // or a foreign origin gets nothing at all.
    for visitor in [Visitor::RebindingHost, Visitor::ForeignOrigin] {
        let (status, message) = refused(
            request(&server.base, &token, visitor, Method::GET, "/")
                .send()
                .await
                .unwrap(),
        )
        .await;
        expect_refusal(visitor, "GET /", status, &message);
    }
    // Nobody but the owner answered the approval: the run still waits.
    let info: Value = server
        .client()
        .get(server.url(&format!("/v1/runs/{run}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["open_approvals"], json!([approval]), "{info}");
    // Only one run exists: the refused POSTs started none.
    let runs = server.get_json("/v1/runs").await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");

    // The owner, with its token, same origin: every route answers.
    let own_origin = server.base.clone();
    let resp = request(
        &server.base,
        &token,
        Visitor::Owner,
        Method::GET,
        "/v1/sessions",
    )
    .header("Origin", &own_origin)
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = request(
        &server.base,
        &token,
        Visitor::Owner,
        Method::GET,
        "/v1/sessions",
    )
    .header("Host", format!("localhost:{}", port(&server.base)))
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200, "localhost:PORT is this server too");
    let resp = mcp_post(request(
        &server.base,
        &token,
        Visitor::Owner,
        Method::POST,
        "/mcp",
    ))
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = request(
        &server.base,
        &token,
        Visitor::Owner,
        Method::GET,
        &format!("/v1/runs/{run}/events"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    drop(resp);
    let resp = request(
        &server.base,
        &token,
        Visitor::Owner,
        Method::POST,
        &format!("/v1/approvals/{approval}"),
    )
    .header("Origin", &own_origin)
    .json(&json!({"decision": "denied"}))
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["via"], "http-token");
    let decided = until(&mut waiting.body, &mut waiting.buf, "approval.decided").await;
    assert_eq!(decided["decision"], "denied");
    assert_eq!(decided["via"], "http-token", "the audit names the door");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_answers_a_configured_name_and_origin_only() {
    let home = Home::new(
        "[server]\nallowed_hosts = [\"capstan.lan\"]\nallowed_origins = [\"https://app.example.com\"]\n",
    );
    let server = Server::start(&home, &["--allow-host", "other.lan:1234"]);
    let token = server.token.clone().unwrap();
    let get = |host: &str, origin: Option<&str>| {
        let mut req = request(
            &server.base,
            &token,
            Visitor::Owner,
            reqwest::Method::GET,
            "/v1/sessions",
        )
        .header("Host", host.to_string());
        if let Some(o) = origin {
            req = req.header("Origin", o.to_string());
        }
        req.send()
    };
    assert_eq!(get("capstan.lan:80", None).await.unwrap().status(), 200);
    assert_eq!(get("other.lan:1234", None).await.unwrap().status(), 200);
    assert_eq!(get("other.lan:80", None).await.unwrap().status(), 421);
    let own = format!("127.0.0.1:{}", port(&server.base));
    assert_eq!(
        get(&own, Some("https://app.example.com"))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(get(&own, Some("null")).await.unwrap().status(), 403);
    assert_eq!(
        get(&own, Some("http://localhost:1"))
            .await
            .unwrap()
            .status(),
        403
    );
}

/// `capstan mcp --listen 127.0.0.1:0` with its printed URL and token.
struct McpListen {
    child: std::process::Child,
    url: String,
    token: String,
}

impl McpListen {
    fn start(home: &Home, ws: &Path) -> Self {
        let mut child = home
            .capstan()
            .args([
                "mcp",
                "--listen",
                "127.0.0.1:0",
                "--approve",
                "all",
                "--workspace",
            ])
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
        let mut token = String::new();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        while token.is_empty() {
            let mut l = String::new();
            assert!(err.read_line(&mut l).unwrap() > 0, "no token printed");
            if let Some(t) = l.strip_prefix("capstan mcp: token ") {
                token = t.trim().to_string();
            }
        }
        std::thread::spawn(move || for _ in err.lines() {});
        Self { child, url, token }
    }
}

impl Drop for McpListen {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_listen_refuses_foreign_hosts_foreign_origins_and_missing_tokens() {
    let home = Home::new("");
    let ws = handbook();
    std::fs::write(ws.path().join("canary.txt"), "alive").unwrap();
    let mcp = McpListen::start(&home, ws.path());
    let base = mcp.url.trim_end_matches("/mcp").to_string();
    assert_eq!(mcp.token.len(), 64);
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"terminal_exec.run","arguments":{"command":"rm canary.txt"}}}"#;
    for visitor in [
        Visitor::RebindingHost,
        Visitor::ForeignOrigin,
        Visitor::NoToken,
    ] {
        for body in [MCP_INIT, call] {
            let resp = request(&base, &mcp.token, visitor, reqwest::Method::POST, "/mcp")
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream")
                .body(body)
                .send()
                .await
                .unwrap();
            let (status, message) = refused(resp).await;
            expect_refusal(
                visitor,
                &format!("mcp --listen {visitor:?}"),
                status,
                &message,
            );
        }
    }
    assert!(ws.path().join("canary.txt").exists(), "no refused call ran");
    let resp = mcp_post(request(
        &base,
        &mcp.token,
        Visitor::Owner,
        reqwest::Method::POST,
        "/mcp",
    ))
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn http_workspaces_are_registered_folders_only_and_never_system_home_or_capstan_dirs() {
    let home = Home::new("");
    // The server's $HOME is a folder of this test, so "$HOME" can be tried.
    let user_home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    std::fs::write(
        project.path().join("notes.md"),
        "# Secret plans\n\nrotate keys\n",
    )
    .unwrap();
    std::fs::create_dir_all(project.path().join("x")).unwrap();
    let outside = project.path().join("x/../outside");
    std::fs::create_dir_all(project.path().join("outside")).unwrap();
    let registered = handbook();
    std::os::unix::fs::symlink("/etc", registered.path().join("etc-link")).unwrap();
    let mut child = home
        .capstan()
        .args(["serve", "--port", "0", "--token", "t", "-w"])
        .arg(registered.path())
        .env("HOME", user_home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let http = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        http.post(format!("{base}{path}"))
            .bearer_auth("t")
            .json(&body)
            .send()
    };
    let cases: Vec<(String, &str)> = vec![
        (
            project.path().display().to_string(),
            "capstan workspace add",
        ),
        (outside.display().to_string(), "capstan workspace add"),
        ("/etc".into(), "system directory"),
        ("/".into(), "filesystem root"),
        (user_home.path().display().to_string(), "home directory"),
        (home.path().display().to_string(), "Capstan's own directory"),
        (
            home.path().join("cache").display().to_string(),
            "Capstan's own directory",
        ),
        (
            registered.path().join("etc-link").display().to_string(),
            "system directory",
        ),
    ];
    for (dir, advice) in &cases {
        for path in ["/v1/runs", "/v1/workspaces"] {
            let body = match path {
                "/v1/runs" => json!({"message": "what is in notes.md?", "workspace": dir}),
                _ => json!({"path": dir}),
            };
            let (status, message) = refused(post(path, body).await.unwrap()).await;
            assert_eq!(status, 403, "{path} {dir}: {message}");
            assert!(message.contains(advice), "{path} {dir}: {message}");
        }
    }
    // AG-UI goes through the same gate.
    let (status, message) = refused(
        post(
            "/agui",
            json!({"threadId": "t", "runId": "r", "forwardedProps": {"workspace": "/etc"},
                   "messages": [{"id": "m", "role": "user", "content": "list files"}]}),
        )
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 403, "{message}");
    // The registered folder is usable.
    let resp = post("/v1/workspaces", json!({"path": registered.path()}))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let _ = child.kill();
    let _ = child.wait();

    // Nothing was registered, run or indexed for a refused folder.
    let listed = home.capstan().args(["workspace", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.lines().count(), 1, "{listed}");
    let indexes = home.path().join("data/indexes");
    let built: Vec<_> = std::fs::read_dir(&indexes)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(built.is_empty(), "indexes built: {built:?}");
}

#[test]
fn every_cli_entry_point_refuses_capstan_home_and_its_subdirs() {
    let home = Home::new("");
    for sub in ["cache", "data", "config"] {
        std::fs::create_dir_all(home.path().join(sub)).unwrap();
    }
    std::fs::create_dir_all(home.path().join("cache/components")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let link = elsewhere.path().join("link");
    std::os::unix::fs::symlink(home.path().join("cache"), &link).unwrap();
    let config_before = std::fs::read(home.path().join("config/capstan.toml")).unwrap();
    let dirs = [
        home.path().to_path_buf(),
        home.path().join("cache"),
        home.path().join("cache/components"),
        home.path().join("data"),
        home.path().join("config"),
        home.path().join("data/../cache"),
        link.clone(),
    ];
    for dir in &dirs {
        let dir_s = dir.to_str().unwrap();
        let input = json!({"command": "touch planted.txt"}).to_string();
        let invocations: Vec<Vec<&str>> = vec![
            vec![
                "invoke",
                "terminal_exec",
                "--approve",
                "all",
                "--input",
                &input,
                "--workspace",
                dir_s,
            ],
            vec!["ask", "--workspace", dir_s, "what is here?"],
            vec!["index", "--workspace", dir_s],
            vec!["search", "--workspace", dir_s, "anything"],
            vec!["workspace", "add", dir_s],
            vec!["mcp", "--workspace", dir_s],
            vec!["serve", "--port", "0", "-w", dir_s],
        ];
        for args in invocations {
            let out = home
                .capstan()
                .args(&args)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("Capstan's own directory"), "{args:?}: {err}");
            assert!(err.contains("CAPSTAN_HOME"), "{args:?}: {err}");
        }
    }
    // Nothing was planted anywhere, and the user's config is untouched.
    for dir in dirs.iter().chain([&link]) {
        assert!(!dir.join("planted.txt").exists(), "{}", dir.display());
    }
    assert_eq!(
        std::fs::read(home.path().join("config/capstan.toml")).unwrap(),
        config_before
    );
    assert!(
        !home.path().join("data/indexes").exists()
            || std::fs::read_dir(home.path().join("data/indexes"))
                .unwrap()
                .next()
                .is_none()
    );
}

/// Issue 13's chain, replayed by a page that rebound its name to the server:
/// a run in `/` that writes an `[[mcp_server]]` into Capstan's own config,
/// its approval answered by the page, Capstan's home registered as a
/// workspace, MCP and AG-UI driven directly. Every step is refused; nothing is
/// written; the program the config entry would start never runs.
#[tokio::test(flavor = "multi_thread")]
async fn the_rebinding_chain_is_refused_at_every_step() {
    let home = Home::new("");
    let ws = handbook();
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("pwned");
    let config = home.path().join("config/capstan.toml");
    let config_before = std::fs::read(&config).unwrap();
    let server = Server::start(&home, &["-w", ws.path().to_str().unwrap()]);
    // A real approval to steal.
    let waiting = run_waiting_for_approval(&server).await;
    let entry = format!(
        "[[mcp_server]]\nname = \"x\"\ncommand = \"sh\"\nargs = [\"-c\", \"touch {}\"]\n",
        marker.display()
    );
    let payload = format!("run `printf '{entry}' >> {}`", config.display());
    let evil_host = format!("evil.example:{}", port(&server.base));
    let http = reqwest::Client::new();
    // The page knows no token; it sends its own name and origin, as a browser would.
    let page = |method: reqwest::Method, path: &str| {
        http.request(method, server.url(path))
            .header("Host", evil_host.clone())
            .header(
                "Origin",
                format!("http://evil.example:{}", port(&server.base)),
            )
    };
    use reqwest::Method;
    let steps: Vec<(&str, reqwest::RequestBuilder)> = vec![
        (
            "run in /",
            page(Method::POST, "/v1/runs").json(&json!({"message": payload, "workspace": "/"})),
        ),
        (
            "run in /root",
            page(Method::POST, "/v1/runs").json(&json!({"message": "run `ls`", "workspace": "/root"})),
        ),
        ("list sessions", page(Method::GET, "/v1/sessions")),
        (
            "read the waiting run's events",
            page(Method::GET, &format!("/v1/runs/{}/events", waiting.run_id)),
        ),
        (
            "register CAPSTAN_HOME",
            page(Method::POST, "/v1/workspaces").json(&json!({"path": home.path()})),
        ),
        (
            "answer the approval",
            page(Method::POST, &format!("/v1/approvals/{}", waiting.approval_id))
                .json(&json!({"decision": "approved"})),
        ),
        (
            "AG-UI resume",
            page(Method::POST, "/agui").json(&json!({"threadId": "t", "runId": "r", "messages": [],
                "resume": [{"interruptId": waiting.approval_id, "status": "resolved", "payload": {"decision": "approved"}}]})),
        ),
        (
            "MCP tools/call",
            page(Method::POST, "/mcp")
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream")
                .body(format!(
                    r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"terminal_exec.run","arguments":{{"command":"touch {}"}}}}}}"#,
                    marker.display()
                )),
        ),
    ];
    for (what, req) in steps {
        let (status, message) = refused(req.send().await.unwrap()).await;
        assert_eq!(status, 421, "{what}: {message}");
    }
    // The same page after rebinding cannot fix its Host without losing the
    // name the browser thinks it is on; as a plain cross-site page (right
    // Host, its own Origin) it is refused as well.
    let cross = http
        .post(server.url(&format!("/v1/approvals/{}", waiting.approval_id)))
        .header("Origin", EVIL_ORIGIN)
        .json(&json!({"decision": "approved"}))
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), 403);

    // The approval is still open, the config unchanged, nothing planted.
    let info: Value = server
        .client()
        .get(server.url(&format!("/v1/runs/{}", waiting.run_id)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        info["open_approvals"],
        json!([waiting.approval_id]),
        "{info}"
    );
    assert_eq!(std::fs::read(&config).unwrap(), config_before);
    // A run now would load the config; it starts no program.
    let mut next = server
        .client()
        .post(server.url("/v1/runs"))
        .json(&json!({"message": "hello"}))
        .send()
        .await
        .map(byte_stream)
        .unwrap();
    // Read the run to its end (whatever its outcome): its registry is loaded by then.
    let mut seen = String::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(120), next.next())
        .await
        .expect("no event for 120 s")
    {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("event: run."), "{seen}");
    assert!(!marker.exists(), "a planted program ran");
    let runs: Value = server
        .client()
        .get(server.url("/v1/runs"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        runs["runs"].as_array().unwrap().len(),
        2,
        "only the owner's runs: {runs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn event_streams_are_capped_per_run_and_per_server() {
    let home = Home::new("");
    let ws = handbook();
    let server = Server::start(
        &home,
        &[
            "-w",
            ws.path().to_str().unwrap(),
            "--max-streams-per-run",
            "2",
            "--max-streams",
            "3",
        ],
    );
    let c = server.client();
    // Run A: its own POST stream, plus one reader = 2 (the per-run cap).
    let a = run_waiting_for_approval(&server).await;
    let events = |id: &str| c.get(server.url(&format!("/v1/runs/{id}/events"))).send();
    let reader = events(&a.run_id).await.unwrap();
    assert_eq!(reader.status(), 200);
    let (status, message) = refused(events(&a.run_id).await.unwrap()).await;
    assert_eq!(status, 429, "{message}");
    assert!(message.contains("--max-streams-per-run"), "{message}");
    // Run B takes the third and last place on the server.
    let b = run_waiting_for_approval(&server).await;
    let (status, message) = refused(events(&b.run_id).await.unwrap()).await;
    assert_eq!(status, 503, "{message}");
    assert!(message.contains("--max-streams"), "{message}");
    // A reader that leaves frees its place (the server notices the closed
    // connection at its next write: a keep-alive at the latest).
    drop(reader);
    let mut freed = false;
    for _ in 0..600 {
        let resp = events(&b.run_id).await.unwrap();
        if resp.status() == 200 {
            freed = true;
            break;
        }
        assert_eq!(resp.status(), 503);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(freed, "a closed stream never gave its place back");
    drop(a);
    drop(b);
}

/// Issue #42: no route blocks on a workspace path. Before, the file viewer
/// opened the path before checking it was a regular file, blocking an async
/// worker: two requests for a FIFO with no writer froze every route. Now
/// several at once each answer 422 at once, and the server keeps answering
/// meanwhile (health, the page, a regular file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_or_device_in_a_workspace_blocks_no_route() {
    let home = Home::new("");
    let user = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(user.path().join(".ssh")).unwrap();
    std::fs::create_dir_all(user.path().join("other-project")).unwrap();
    let ws = user.path().join("projects/app");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.md"), "# Notes\n\nhello\n").unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(ws.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", ws.join("zero")).unwrap();
    let server = Server::start(&home, &["-w", ws.to_str().unwrap()]);
    let client = server.client();
    let list = server.get_json("/v1/workspaces").await;
    let id = list["workspaces"][0]["id"].as_str().unwrap().to_string();
    let file = |path: &str| server.url(&format!("/v1/workspaces/{id}/file?path={path}"));

    // More requests for the FIFO than the server has async workers.
    let mut pending = Vec::new();
    for _ in 0..6 {
        let req = client.get(file("pipe")).send();
        pending.push(tokio::spawn(async move {
            let resp = req.await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap())
        }));
    }
    // Everything else still answers while they are in flight, and they end.
    let deadline = Duration::from_secs(30);
    let health = tokio::time::timeout(deadline, client.get(server.url("/v1/health")).send())
        .await
        .expect("/v1/health answered while FIFO requests were in flight")
        .unwrap();
    assert_eq!(health.status(), 200);
    let notes: Value = tokio::time::timeout(deadline, client.get(file("notes.md")).send())
        .await
        .expect("a regular file is served meanwhile")
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(notes["lines"][2], "hello");
    for p in pending {
        let (status, body) = tokio::time::timeout(deadline, p)
            .await
            .expect("a request for a FIFO ended")
            .unwrap();
        assert_eq!(status, 422, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a regular file"),
            "{body}"
        );
    }
    // A symlink to a device leaves the workspace: refused before any open.
    let resp = tokio::time::timeout(deadline, client.get(file("zero")).send())
        .await
        .expect("a symlink to /dev/zero is answered")
        .unwrap();
    assert_eq!(resp.status(), 403);
}
