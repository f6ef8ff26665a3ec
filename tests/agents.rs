//! `capstan agent run` end to end: the real binary, a task file, the `cli` runtime on a
//! scripted OpenAI-compatible server and the real Claude Code on a scripted Anthropic
//! server; JSON events, the human output, the budget prompt, exit codes, bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::process::{Output, Stdio};

use capstan_models::scripted::{Reply, ScriptedServer};
use common::Home;
use serde_json::Value;

fn home_with_model(server: &ScriptedServer, extra: &str) -> Home {
    Home::new(&format!(
        "[model]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"gpt-4o\"\nmax_retries = 0\n{extra}",
        server.openai_base_url()
    ))
}

fn run(home: &Home, ws: &std::path::Path, args: &[&str], stdin: &str) -> Output {
    let mut child = home
        .capstan()
        .args(["agent", "run", "--workspace"])
        .arg(ws)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn write_tasks(ws: &std::path::Path, yaml: &str) -> String {
    let p = ws.join("TASKS.yaml");
    std::fs::write(&p, yaml).unwrap();
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_run_prints_json_events_and_a_result_in_dependency_order() {
    let server = ScriptedServer::with_responder(|req| {
        let p = req.prompt_text();
        let id = ["api", "ui", "docs"]
            .into_iter()
            .find(|id| p.contains(&format!("# Task {id}")))
            .unwrap();
        Reply::text([format!("{id} done")]).with_usage(1000, 100)
    })
    .await
    .unwrap();
    let home = home_with_model(&server, "");
    let ws = tempfile::tempdir().unwrap();
    let tasks = write_tasks(
        ws.path(),
        "tasks:\n  - {id: docs, description: document both, depends_on: [api, ui]}\n  - {id: api, description: build the api}\n  - {id: ui, description: build the ui}\n",
    );
    let out = run(&home, ws.path(), &["--json", &tasks], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(types[0], "execution.started");
    assert_eq!(lines[0]["strategy"], "parallel");
    let result = lines.last().unwrap();
    assert_eq!(result["type"], "result");
    let ids: Vec<&str> = result["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["api", "ui", "docs"]);
    assert_eq!(result["tasks"][2]["output"], "docs done");
    let m = &result["metadata"];
    assert_eq!(m["status"], "completed");
    assert_eq!(m["runtimes"], serde_json::json!(["cli"]));
    assert_eq!(m["total_tokens"]["total"], 3300);
    // 3 x (1000 x $2.50 + 100 x $10) / 1M
    assert!((m["total_cost"].as_f64().unwrap() - 0.0105).abs() < 1e-9);
    assert!(m["execution_id"].as_str().unwrap().starts_with("exec_"));
    assert!(m["duration_ms"].is_u64());
    // Every event carries the execution id and timestamps.
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l["execution_id"] == m["execution_id"] && l["elapsed_ms"].is_u64())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn human_output_has_each_tasks_output_on_stdout_and_the_total_on_stderr() {
    let server = ScriptedServer::with_responder(|req| {
        if req.prompt_text().contains("You are the architect") {
            Reply::text(["DESIGN: two modules"]).with_usage(10, 10)
        } else {
            Reply::text(["IMPLEMENTED"]).with_usage(10, 10)
        }
    })
    .await
    .unwrap();
    let home = home_with_model(&server, "");
    let ws = tempfile::tempdir().unwrap();
    let tasks = write_tasks(
        ws.path(),
        "tasks:\n  - {id: build, description: build it}\n",
    );
    let out = run(
        &home,
        ws.path(),
        &[
            "--runtime",
            "cli",
            "--strategy",
            "multi",
            "--budget",
            "1",
            &tasks,
        ],
        "",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("== build [completed] ==\n-- architect (cli) --\nDESIGN: two modules\n-- dev (cli) --\nIMPLEMENTED"), "{stdout}");
    assert!(stderr.contains("strategy multi (given)"), "{stderr}");
    assert!(
        stderr.contains("completed in")
            && stderr.contains("tokens 40 (in 20, out 20)")
            && stderr.contains("total cost $0.0003 of $1.00 budget"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_budget_prompt_lets_the_user_cancel_or_continue() {
    let server =
        ScriptedServer::with_responder(|_| Reply::text(["step done"]).with_usage(100_000, 1_000))
            .await
            .unwrap();
    let home = home_with_model(&server, "");
    let ws = tempfile::tempdir().unwrap();
    let tasks = write_tasks(
        ws.path(),
        "strategy: single\nbudget_usd: 0.27\ntasks:\n  - {id: one, description: x}\n  - {id: two, description: y}\n",
    );
    // The user answers "n": cancelled, the second step never reaches the model.
    let out = run(&home, ws.path(), &["--on-budget", "ask", &tasks], "n\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("! budget: $0.2600 spent; two · dev would add about"),
        "{stderr}"
    );
    assert!(
        stderr.contains("continue over the budget") && stderr.contains("budget: cancelled"),
        "{stderr}"
    );
    assert!(stderr.contains("total cost $0.2600"), "{stderr}");
    assert_eq!(server.request_count(), 1);
    // "y": both run and the total covers both.
    let out = run(&home, ws.path(), &["--on-budget", "ask", &tasks], "y\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("continuing over budget") && stderr.contains("total cost $0.5200"),
        "{stderr}"
    );
    // Not a terminal and no flag: the safe default is to stop.
    let out = run(&home, ws.path(), &["--json", &tasks], "");
    assert_eq!(out.status.code(), Some(130));
    let lines = json_lines(&out);
    assert!(lines.iter().any(|l| l["type"] == "budget.warning"));
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "budget.decision" && l["proceed"] == false)
    );
    assert_eq!(lines.last().unwrap()["metadata"]["status"], "cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_exits_124_with_partial_results() {
    let server = ScriptedServer::with_responder(|_| {
        Reply::text(["so far", "never"])
            .with_usage(5, 5)
            .hang_after(1)
    })
    .await
    .unwrap();
    let home = home_with_model(&server, "");
    let ws = tempfile::tempdir().unwrap();
    let tasks = write_tasks(ws.path(), "tasks:\n  - {id: long, description: x}\n");
    // The timeout is the behaviour under test, so it is a bound: 20 s leaves the binary's
    // start and the first streamed piece inside it at load 8 on 2 cores; the stream then
    // hangs until the timeout fires.
    let out = run(
        &home,
        ws.path(),
        &["--json", "--timeout", "20s", &tasks],
        "",
    );
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = json_lines(&out).pop().unwrap();
    assert_eq!(result["metadata"]["status"], "timeout");
    assert_eq!(result["tasks"][0]["status"], "timeout");
    assert_eq!(result["tasks"][0]["output"], "so far");
    // The hung stream was closed, not left open behind the exit.
    assert!(
        server
            .wait_for_aborted(1, std::time::Duration::from_secs(30))
            .await
    );
}

#[test]
fn bad_task_files_are_clear_errors() {
    let home = Home::new("");
    let ws = tempfile::tempdir().unwrap();
    let check = |yaml: &str, expect: &[&str]| {
        let tasks = write_tasks(ws.path(), yaml);
        let out = run(&home, ws.path(), &[&tasks], "");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        for e in expect {
            assert!(stderr.contains(e), "{e} missing: {stderr}");
        }
    };
    check(
        "tasks:\n  - id: a\n    description: [oops\n",
        &["TASKS.yaml", "line"],
    );
    check(
        "tasks:\n  - {id: a, description: x, runtime: gpt}\n",
        &["line 2", "unknown variant `gpt`"],
    );
    check(
        "tasks:\n  - {id: a, description: x, depends_on: [b]}\n  - {id: b, description: y, depends_on: [a]}\n",
        &["cycle", "a -> b -> a"],
    );
    let out = home
        .capstan()
        .args(["agent", "run", "--runtime", "gpt", "x.yaml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("claude") && stderr.contains("opencode"),
        "{stderr}"
    );
}

/// `[agents.claude]` for the real Claude Code CLI on a scripted Anthropic server, with
/// its home (and so its settings and credentials) in `peer_home`.
fn claude_config(
    model: &str,
    idle_secs: u64,
    peer_home: &std::path::Path,
    base_url: &str,
    extra_env: &str,
) -> String {
    // MCP_TIMEOUT: Claude Code gives an MCP server 30 s to start by default; `capstan
    // mcp` loads its components first, which at load 8 on 2 cores can take longer.
    format!(
        "[agents.claude]\ncommand = {:?}\nmodel = {model:?}\nidle_timeout_secs = {idle_secs}\n\
         [agents.claude.env]\nHOME = {:?}\nXDG_CONFIG_HOME = {:?}\nANTHROPIC_BASE_URL = {base_url:?}\nANTHROPIC_API_KEY = \"sk-ant-test\"\nCLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\"\nMCP_TIMEOUT = \"180000\"\n{extra_env}",
        common::npm_bin("claude", "claude").display().to_string(),
        peer_home.display().to_string(),
        peer_home.join("config").display().to_string(),
    )
}

/// Compiles the bundled components into the home's cache, so the `capstan mcp`
/// Claude Code starts answers its handshake without compiling first.
fn warm_component_cache(home: &Home) {
    let out = home.capstan().args(["plugins", "check"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_runtime_gets_capstan_as_an_mcp_server() {
    let server = ScriptedServer::with_responder(|req| {
        if req.prompt_text().contains("# Task ") {
            Reply::text(["claude via capstan"]).with_usage(100, 10)
        } else {
            Reply::text(["ok"]).with_usage(1, 1)
        }
    })
    .await
    .unwrap();
    let peer_home = tempfile::tempdir().unwrap();
    let home = Home::new(&claude_config(
        "claude-haiku-4-5",
        60,
        peer_home.path(),
        &server.base_url(),
        "",
    ));
    warm_component_cache(&home);
    let ws = tempfile::tempdir().unwrap();
    let tasks = write_tasks(ws.path(), "tasks:\n  - {id: c, description: say hello}\n");
    let out = run(
        &home,
        ws.path(),
        &["--json", "--runtime", "claude", &tasks],
        "",
    );
    let lines = json_lines(&out);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = lines.last().unwrap();
    assert_eq!(result["tasks"][0]["output"], "claude via capstan");
    assert_eq!(
        result["metadata"]["runtimes"],
        serde_json::json!(["claude"])
    );
    // Haiku 4.5: $1 in, $5 out per 1M.
    assert!(
        (result["metadata"]["total_cost"].as_f64().unwrap() - (100.0 + 50.0) / 1e6).abs() < 1e-12
    );
    // Claude Code was handed Capstan (this binary) as its MCP server `capstan`, and
    // connected to it: a server that failed to start reads "capstan failed" here.
    let status = lines
        .iter()
        .find(|l| l["type"] == "progress" && l["progress"] == "status")
        .map(|l| l["message"].as_str().unwrap().to_string())
        .unwrap();
    assert!(status.contains("(MCP: capstan connected)"), "{status}");
}

/// Claude Code calls one of Capstan's capabilities through `capstan mcp` and the result
/// comes back into Capstan's execution: the scripted model asks for the knowledge-base
/// search tool Claude Code lists, Claude Code runs it on the real `capstan mcp` child,
/// and the model's next request carries the passage, which becomes the task's output.
#[tokio::test(flavor = "multi_thread")]
async fn claude_code_calls_a_capstan_capability_over_mcp() {
    let server = ScriptedServer::with_responder(|req| {
        if let Some(result) = req.tool_results().first() {
            return Reply::text([format!("From Capstan's search: {result}")]).with_usage(200, 40);
        }
        if !req.prompt_text().contains("# Task ") {
            return Reply::text(["ok"]).with_usage(1, 1);
        }
        let names = req.tool_names();
        match names.iter().find(|n| {
            n.starts_with("mcp__capstan__")
                && n.contains("local_kb_retrieval")
                && n.contains("search")
        }) {
            Some(tool) => Reply::tool_call(
                tool.clone(),
                serde_json::json!({"query": "signing keys rotation"}),
            )
            .with_usage(150, 20),
            None => Reply::text([format!("NO CAPSTAN TOOL among {names:?}")]).with_usage(1, 1),
        }
    })
    .await
    .unwrap();
    let peer_home = tempfile::tempdir().unwrap();
    // ENABLE_TOOL_SEARCH=false: Claude Code otherwise defers MCP tools behind its
    // ToolSearch tool, and the scripted model would have to search for them first.
    let home = Home::new(&claude_config(
        "claude-sonnet-4-5",
        120,
        peer_home.path(),
        &server.base_url(),
        "ENABLE_TOOL_SEARCH = \"false\"\n",
    ));
    warm_component_cache(&home);
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("security.md"),
        "# Key management\n\nThe signing keys rotate every 90 days with `make rotate-keys`; the old key stays valid for a week.\n",
    )
    .unwrap();
    let tasks = write_tasks(
        ws.path(),
        "tasks:\n  - {id: keys, description: how often do the signing keys rotate?}\n",
    );
    let out = run(
        &home,
        ws.path(),
        &["--json", "--runtime", "claude", &tasks],
        "",
    );
    let lines = json_lines(&out);
    assert!(
        out.status.success(),
        "{}\n{lines:#?}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = lines.last().unwrap();
    let output = result["tasks"][0]["output"].as_str().unwrap();
    assert!(
        output.starts_with("From Capstan's search:") && output.contains("90 days"),
        "{output}"
    );
    // Claude Code reported the tool call and its result as it went.
    let tool_use = lines
        .iter()
        .find(|l| l["type"] == "progress" && l["progress"] == "tool_use")
        .expect("a tool_use progress event");
    assert!(
        tool_use["tool"]
            .as_str()
            .unwrap()
            .starts_with("mcp__capstan__local_kb_retrieval"),
        "{tool_use}"
    );
    let tool_result = lines
        .iter()
        .find(|l| l["type"] == "progress" && l["progress"] == "tool_result")
        .expect("a tool_result progress event");
    assert_eq!(tool_result["is_error"], false, "{tool_result}");
    assert!(
        tool_result["output"].as_str().unwrap().contains("90 days"),
        "{tool_result}"
    );
    // Usage of both model turns, priced at Sonnet's $3/$15.
    let m = &result["metadata"];
    assert_eq!(m["total_tokens"]["input"], 350);
    assert_eq!(m["total_tokens"]["output"], 60);
}

#[test]
fn a_fresh_install_stops_before_any_task_with_one_line_saying_what_to_configure() {
    // The README tour's command, on a home with no capstan.toml at all.
    let home = Home::new("");
    std::fs::remove_file(home.path().join("config/capstan.toml")).unwrap();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/agents");
    let out = home
        .capstan()
        .args(["agent", "run", "--workspace"])
        .arg(&example)
        .args(["--budget", "0.50"])
        .arg(example.join("TASKS.yaml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let config = home.path().join("config/capstan.toml");
    assert!(
        stderr.starts_with(&format!(
            "error: no task was started: tasks design-cache, tests: the `cli` runtime needs a model: add a [model] section to {}",
            config.display()
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_whose_claude_runtime_is_missing_falls_back_to_its_retry_runtime() {
    let server =
        ScriptedServer::with_responder(|_| Reply::text(["reviewed on cli"]).with_usage(10, 5))
            .await
            .unwrap();
    let home = home_with_model(
        &server,
        "[agents.claude]\ncommand = \"/nonexistent/claude\"\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let tasks = write_tasks(
        ws.path(),
        "tasks:\n  - {id: review, description: review it, runtime: claude, retry_runtime: cli}\n",
    );
    let out = run(&home, ws.path(), &[&tasks], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("! review: claude is unavailable, using its retry runtime cli: Claude Code (`/nonexistent/claude`) was not found"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("== review [completed] ==\nreviewed on cli"),
        "{stdout}"
    );
    let out = run(&home, ws.path(), &["--json", &tasks], "");
    let lines = json_lines(&out);
    let fallback = lines
        .iter()
        .find(|l| l["type"] == "runtime.fallback")
        .expect("a runtime.fallback event");
    assert_eq!(
        (&fallback["task"], &fallback["from"], &fallback["to"]),
        (
            &Value::from("review"),
            &Value::from("claude"),
            &Value::from("cli")
        )
    );
    assert_eq!(
        lines.last().unwrap()["metadata"]["runtimes"],
        serde_json::json!(["cli"])
    );
}
