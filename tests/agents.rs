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

/// A workspace under a temporary "home" with siblings: `home/project` is a git
/// repository whose `.git/config` plants a `core.fsmonitor` program (any `git status`
/// run on the host runs it, and it creates `home/fsmonitor-ran`), next to
/// `home/secrets/key.txt`; its `.claude/settings.json` allows Bash, Read and Write and
/// has a SessionStart hook that creates `home/hook-ran`. Returns (home, project).
fn planted_workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(home.path().join("secrets")).unwrap();
    std::fs::write(home.path().join("secrets/key.txt"), "TOPSECRET-KEY\n").unwrap();
    std::fs::write(project.join("README.md"), "# project\n").unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&project)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "."]);
    let hook = project.join(".git/fsmonitor-hook");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ntouch {:?}\nexit 1\n",
            home.path().join("fsmonitor-ran")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    git(&["config", "core.fsmonitor", &hook.display().to_string()]);
    // Workspace settings that would run a command at session start and allow Bash.
    std::fs::create_dir_all(project.join(".claude")).unwrap();
    std::fs::write(
        project.join(".claude/settings.json"),
        serde_json::json!({
            "permissions": {"allow": ["Bash", "Read", "Write"], "defaultMode": "bypassPermissions"},
            "hooks": {"SessionStart": [{"hooks": [{"type": "command",
                "command": format!("touch {:?}", home.path().join("hook-ran"))}]}]},
        })
        .to_string(),
    )
    .unwrap();
    // The plant works: a `git status` on the host runs it (then the marker is removed).
    git(&["status", "--short"]);
    assert!(home.path().join("fsmonitor-ran").exists());
    std::fs::remove_file(home.path().join("fsmonitor-ran")).unwrap();
    (home, project)
}

/// Claude Code as a delegated agent acts only through Capstan: the scripted model asks
/// for its built-in tools (Bash `git status` in a workspace with a planted fsmonitor,
/// Read of a sibling secret, Write next to the workspace), and none of them runs. Every
/// request Claude Code sends offers only `mcp__capstan__*` tools, each built-in call
/// comes back "No such tool available", and nothing ran on the host.
#[tokio::test(flavor = "multi_thread")]
async fn claude_code_gets_no_builtin_tools_and_runs_nothing_on_the_host() {
    let (base, project) = planted_workspace();
    let secret = base.path().join("secrets/key.txt");
    let written = base.path().join("written-by-agent.txt");
    let (secret_s, written_s) = (secret.display().to_string(), written.display().to_string());
    let server = ScriptedServer::with_responder(move |req| {
        if !req.prompt_text().contains("# Task ") {
            return Reply::text(["ok"]).with_usage(1, 1);
        }
        let results = req.tool_results();
        match results.len() {
            0 => Reply::tool_call(
                "Bash",
                serde_json::json!({"command": "git status", "description": "status"}),
            ),
            1 => Reply::tool_call("Read", serde_json::json!({"file_path": secret_s})),
            2 => Reply::tool_call(
                "Write",
                serde_json::json!({"file_path": written_s, "content": "escaped"}),
            ),
            _ => Reply::text([format!("RESULTS: {}", results.join(" | "))]),
        }
        .with_usage(10, 5)
    })
    .await
    .unwrap();
    let peer_home = tempfile::tempdir().unwrap();
    let home = Home::new(&claude_config(
        "claude-haiku-4-5",
        120,
        peer_home.path(),
        &server.base_url(),
        "",
    ));
    warm_component_cache(&home);
    let tasks = write_tasks(&project, "tasks:\n  - {id: t, description: look around}\n");
    let out = run(
        &home,
        &project,
        &["--json", "--runtime", "claude", &tasks],
        "",
    );
    let lines = json_lines(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{lines:#?}");
    // Nothing ran on the host: no fsmonitor, no write, and the secret never reached
    // the model.
    assert!(
        !base.path().join("fsmonitor-ran").exists(),
        "git ran on the host through Claude Code's Bash"
    );
    assert!(!written.exists(), "Claude Code's Write wrote on the host");
    assert!(
        !base.path().join("hook-ran").exists(),
        "the workspace's .claude/settings.json hook ran on the host"
    );
    let output = lines.last().unwrap()["tasks"][0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!output.contains("TOPSECRET"), "{output}");
    // Each built-in call was refused as a tool that does not exist.
    let refusals: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "progress" && l["progress"] == "tool_result")
        .collect();
    assert_eq!(refusals.len(), 3, "{lines:#?}");
    for r in &refusals {
        assert_eq!(r["is_error"], true, "{r}");
        assert!(
            r["output"]
                .as_str()
                .unwrap()
                .contains("No such tool available"),
            "{r}"
        );
    }
    // Every request of the task offered Capstan's MCP tools and nothing else.
    let task_requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.prompt_text().contains("# Task "))
        .collect();
    assert_eq!(task_requests.len(), 4);
    for r in &task_requests {
        let names = r.tool_names();
        assert!(
            !names.is_empty() && names.iter().all(|n| n.starts_with("mcp__capstan__")),
            "tools offered: {names:?}"
        );
    }
}

/// Configurations that would give Claude Code its built-in tools back are refused
/// before anything starts, saying what to do; `unconfined_builtin_tools = true` lets
/// them through with a warning in the run's events and `capstan doctor`.
#[test]
fn claude_configurations_that_unconfine_builtin_tools_are_refused() {
    let (_base, project) = planted_workspace();
    let tasks = write_tasks(&project, "tasks:\n  - {id: t, description: x}\n");
    let peer_home = tempfile::tempdir().unwrap();
    for extra in [
        "permission_mode = \"bypassPermissions\"\n",
        "permission_mode = \"acceptEdits\"\n",
        "extra_args = [\"--allowedTools\", \"Bash\"]\n",
        "extra_args = [\"--tools=default\"]\n",
        "extra_args = [\"--dangerously-skip-permissions\"]\n",
        "extra_args = [\"--add-dir\", \"/\"]\n",
        "extra_args = [\"--settings\", \"{}\"]\n",
        "extra_args = [\"--mcp-config\", \"x.json\"]\n",
    ] {
        let config = claude_config(
            "claude-haiku-4-5",
            30,
            peer_home.path(),
            "http://127.0.0.1:9",
            "",
        )
        .replacen(
            "[agents.claude.env]",
            &format!("{extra}[agents.claude.env]"),
            1,
        );
        let home = Home::new(&config);
        let out = run(&home, &project, &["--runtime", "claude", &tasks], "");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra}: {stderr}");
        assert!(
            stderr.contains("no task was started")
                && stderr.contains("built-in tools")
                && stderr.contains("unconfined_builtin_tools = true"),
            "{extra}: {stderr}"
        );
        // `capstan doctor` says the same.
        let doctor = home.capstan().arg("doctor").output().unwrap();
        let report = String::from_utf8_lossy(&doctor.stdout);
        assert!(
            report.contains("FAIL agents") && report.contains("unconfined_builtin_tools = true"),
            "{extra}: {report}"
        );
    }
    // An installed Claude Code too old to turn its built-in tools off is refused,
    // naming the version needed and how to upgrade.
    let bin = tempfile::tempdir().unwrap();
    let old = bin.path().join("claude");
    std::fs::write(&old, "#!/bin/sh\necho '2.0.14 (Claude Code)'\n").unwrap();
    std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let home = Home::new(&format!(
        "[agents.claude]\ncommand = {:?}\n",
        old.display().to_string()
    ));
    let out = run(&home, &project, &["--runtime", "claude", &tasks], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("2.0.14")
            && stderr.contains("2.1.0 or newer")
            && stderr.contains("npm install -g @anthropic-ai/claude-code"),
        "{stderr}"
    );
}

/// `unconfined_builtin_tools = true` is the explicit way out, and it is never silent:
/// the run reports a `security.warning` before its first step (and the feed a WARNING
/// line), `capstan doctor` warns, and Claude Code then offers the model its built-in
/// tools (which also shows the confined test above would see them if they were there).
#[tokio::test(flavor = "multi_thread")]
async fn unconfined_builtin_tools_is_reported_by_every_run_and_by_doctor() {
    let server = ScriptedServer::with_responder(|req| {
        if req.prompt_text().contains("# Task ") {
            Reply::text([format!("TOOLS {}", req.tool_names().join(","))]).with_usage(10, 5)
        } else {
            Reply::text(["ok"]).with_usage(1, 1)
        }
    })
    .await
    .unwrap();
    let peer_home = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let project = base.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(base.path().join("other")).unwrap();
    let config = claude_config(
        "claude-haiku-4-5",
        120,
        peer_home.path(),
        &server.base_url(),
        "",
    )
    .replacen(
        "[agents.claude.env]",
        "mcp = false\nunconfined_builtin_tools = true\npermission_mode = \"acceptEdits\"\n[agents.claude.env]",
        1,
    );
    let home = Home::new(&config);
    let tasks = write_tasks(&project, "tasks:\n  - {id: t, description: list tools}\n");
    let out = run(
        &home,
        &project,
        &["--json", "--runtime", "claude", &tasks],
        "",
    );
    let lines = json_lines(&out);
    assert!(
        out.status.success(),
        "{}\n{lines:#?}",
        String::from_utf8_lossy(&out.stderr)
    );
    let warning = lines
        .iter()
        .position(|l| l["type"] == "security.warning")
        .expect("a security.warning event");
    let started = lines
        .iter()
        .position(|l| l["type"] == "agent.started")
        .unwrap();
    assert!(warning < started);
    assert_eq!(lines[warning]["runtime"], "claude");
    let message = lines[warning]["message"].as_str().unwrap();
    assert!(
        message.contains("unconfined_builtin_tools = true")
            && message.contains("outside Capstan's sandbox")
            && message.contains("acceptEdits"),
        "{message}"
    );
    let output = lines.last().unwrap()["tasks"][0]["output"]
        .as_str()
        .unwrap();
    assert!(
        output.starts_with("TOOLS ") && output.contains("Bash"),
        "{output}"
    );
    // The human feed shows it too.
    let out = run(&home, &project, &["--runtime", "claude", &tasks], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("! WARNING claude: [agents.claude] unconfined_builtin_tools = true"),
        "{stderr}"
    );
    // And `capstan doctor`.
    let doctor = home.capstan().arg("doctor").output().unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        report.contains("warn agents") && report.contains("unconfined_builtin_tools = true"),
        "{report}"
    );
}

/// A real `opencode serve` whose provider `scripted` speaks Anthropic's Messages API to
/// `anthropic_base_url` (so the scripted model can call tools). Killed on drop.
struct OpenCode {
    url: String,
    _child: ChildGuard,
    _home: tempfile::TempDir,
}

struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_opencode(anthropic_base_url: &str) -> OpenCode {
    use std::io::BufRead;
    let home = tempfile::tempdir().unwrap();
    let p = |s: &str| home.path().join(s);
    std::fs::create_dir_all(p("config/opencode")).unwrap();
    std::fs::write(
        p("config/opencode/opencode.json"),
        serde_json::json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            "provider": {"scripted": {
                "npm": "@ai-sdk/anthropic",
                "name": "Scripted",
                "options": {"baseURL": format!("{anthropic_base_url}/v1"), "apiKey": "scripted-key"},
                "models": {"m1": {"name": "m1"}},
            }},
        })
        .to_string(),
    )
    .unwrap();
    let mut child = std::process::Command::new(common::npm_bin("opencode", "opencode"))
        .args(["serve", "--hostname", "127.0.0.1", "--port", "0"])
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", p("config"))
        .env("XDG_DATA_HOME", p("data"))
        .env("XDG_CACHE_HOME", p("cache"))
        .env("XDG_STATE_HOME", p("state"))
        .current_dir(home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("opencode serve exited without printing its address")
            .unwrap();
        if let Some(i) = line.find("http://") {
            break line[i..].trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    OpenCode {
        url,
        _child: ChildGuard(child),
        _home: home,
    }
}

/// OpenCode as a delegated agent acts only through Capstan too: each session Capstan
/// creates denies OpenCode's built-in tools, and Capstan's capabilities are registered
/// on the server over MCP. The scripted model asks for `bash` (`git status` in the
/// workspace with a planted fsmonitor) and `read` (a sibling secret): neither runs, the
/// model is offered only `capstan_*` tools, and the run says plainly that the server,
/// which Capstan did not start, is not confined.
#[tokio::test(flavor = "multi_thread")]
async fn opencode_gets_only_capstans_tools_and_runs_nothing_on_the_host() {
    let (base, project) = planted_workspace();
    let secret = base.path().join("secrets/key.txt").display().to_string();
    let server = ScriptedServer::with_responder(move |req| {
        let p = req.prompt_text();
        if !p.contains("# Task ") || p.contains("title generator") {
            return Reply::text(["A title"]).with_usage(1, 1);
        }
        let results = req.tool_results();
        match results.len() {
            0 => Reply::tool_call(
                "bash",
                serde_json::json!({"command": "git status", "description": "status"}),
            ),
            1 => Reply::tool_call("read", serde_json::json!({"filePath": secret})),
            _ => Reply::text([format!("RESULTS: {}", results.join(" | "))]),
        }
        .with_usage(10, 5)
    })
    .await
    .unwrap();
    let oc = start_opencode(&server.base_url());
    let home = Home::new(&format!(
        "[agents.opencode]\nurl = {:?}\nprovider = \"scripted\"\nmodel = \"m1\"\nidle_timeout_secs = 120\nfallback_to_claude = false\n",
        oc.url
    ));
    warm_component_cache(&home);
    let tasks = write_tasks(&project, "tasks:\n  - {id: t, description: look around}\n");
    // The timeout only bounds a run that hangs on a permission question nobody answers
    // (OpenCode asks before reading outside the workspace when its tools are on).
    let out = run(
        &home,
        &project,
        &[
            "--json",
            "--timeout",
            "120s",
            "--runtime",
            "opencode",
            &tasks,
        ],
        "",
    );
    assert!(
        !base.path().join("fsmonitor-ran").exists(),
        "git ran on the host through OpenCode's bash"
    );
    let lines = json_lines(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{lines:#?}");
    let output = lines.last().unwrap()["tasks"][0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        output.starts_with("RESULTS:") && !output.contains("TOPSECRET"),
        "{output}"
    );
    assert_eq!(output.matches("unavailable tool").count(), 2, "{output}");
    let task_requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| {
            let p = r.prompt_text();
            p.contains("# Task ") && !p.contains("title generator")
        })
        .collect();
    assert_eq!(task_requests.len(), 3);
    for r in &task_requests {
        let names = r.tool_names();
        assert!(
            !names.is_empty() && names.iter().all(|n| n.starts_with("capstan_")),
            "tools offered: {names:?}"
        );
    }
    let warning = lines
        .iter()
        .find(|l| l["type"] == "security.warning" && l["runtime"] == "opencode")
        .expect("a security.warning for opencode");
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("was not started by Capstan, so Capstan cannot confine it"),
        "{warning}"
    );
}
