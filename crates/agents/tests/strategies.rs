//! Strategies, dependency graph, budget, results and context on the `cli` runtime
//! (Capstan's own model provider) against a scripted OpenAI-compatible server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use capstan_agents::event::EventKind;
use capstan_agents::runner::{Mode, RunnerFactory};
use capstan_agents::{
    AgentsConfig, ExecutionStatus, FixedGate, RuntimeKind, Strategy, TaskFile, TaskStatus, execute,
};
use capstan_models::scripted::{Reply, ScriptedServer};
use common::{Events, cli_model, cli_options, deps, options};

fn workspace() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[tokio::test]
async fn single_renders_the_role_template_and_reports_usage_cost_and_metadata() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["Added ", "the endpoint."]).with_usage(1000, 200));
    let ws = workspace();
    let file = TaskFile::parse(
        r#"
strategy: single
roles:
  reviewer:
    prompt: "You are the {{ role }} for task {{ task.id }}. Shout it: {{ task.description | upper }}"
tasks:
  - id: health
    role: reviewer
    description: add a health endpoint
"#,
    )
    .unwrap();
    let events = Events::default();
    let opts = cli_options(ws.path(), &server.openai_base_url(), &events);
    let r = execute(&file, opts).await.unwrap();

    let prompt = server.requests()[0].prompt_text();
    assert!(
        prompt.contains("You are the reviewer for task health. Shout it: ADD A HEALTH ENDPOINT"),
        "{prompt}"
    );
    assert!(
        prompt.contains("# Task health\n\nadd a health endpoint"),
        "{prompt}"
    );
    let t = r.task("health").unwrap();
    assert_eq!(t.status, TaskStatus::Completed);
    assert_eq!(t.output, "Added the endpoint.");
    assert_eq!(
        (
            t.token_usage.input,
            t.token_usage.output,
            t.token_usage.estimated
        ),
        (1000, 200, false)
    );
    // gpt-4o: $2.50 in, $10 out per 1M.
    let expected = 1000.0 * 2.5 / 1e6 + 200.0 * 10.0 / 1e6;
    assert!((t.cost.unwrap() - expected).abs() < 1e-12);
    let m = &r.metadata;
    assert!(m.execution_id.starts_with("exec_"));
    assert_eq!(m.strategy, Strategy::Single);
    assert_eq!(m.agents, ["reviewer"]);
    assert_eq!(m.runtimes, [RuntimeKind::Cli]);
    assert_eq!(m.total_tokens.total, 1200);
    assert!((m.total_cost - expected).abs() < 1e-12 && m.cost_complete);
    assert_eq!(m.status, ExecutionStatus::Completed);
    // Progress was streamed incrementally, one event per delta.
    let texts: Vec<String> = events
        .all()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Progress {
                progress: capstan_agents::event::Progress::Text { text },
                ..
            } => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["Added ", "the endpoint."]);
    assert_eq!(events.types().last().unwrap(), "execution.finished");
}

#[tokio::test]
async fn usage_the_provider_does_not_report_is_estimated_and_marked() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(Reply::text(["no usage here"]));
    let ws = workspace();
    let file = TaskFile::parse("tasks:\n  - {id: a, description: say something}\n").unwrap();
    let events = Events::default();
    let r = execute(
        &file,
        cli_options(ws.path(), &server.openai_base_url(), &events),
    )
    .await
    .unwrap();
    let u = r.task("a").unwrap().token_usage;
    assert!(u.estimated && u.input > 0 && u.output > 0, "{u:?}");
    assert!(r.metadata.total_tokens.estimated);
}

#[tokio::test]
async fn multi_runs_architect_then_dev_with_the_design_in_the_devs_context() {
    let server = ScriptedServer::with_responder(|req| {
        let p = req.prompt_text();
        if p.contains("You are the architect") {
            Reply::text(["DESIGN-42: put the cache in front of the parser"]).with_usage(50, 10)
        } else if p.contains("You are the developer") && p.contains("DESIGN-42") {
            Reply::text(["implemented DESIGN-42"]).with_usage(80, 5)
        } else {
            Reply::status(400).error_message("dev did not get the design")
        }
    })
    .await
    .unwrap();
    let ws = workspace();
    let file =
        TaskFile::parse("strategy: multi\ntasks:\n  - {id: cache, description: add a cache}\n")
            .unwrap();
    let events = Events::default();
    let r = execute(
        &file,
        cli_options(ws.path(), &server.openai_base_url(), &events),
    )
    .await
    .unwrap();
    let t = r.task("cache").unwrap();
    assert_eq!(t.status, TaskStatus::Completed, "{t:?}");
    let agents: Vec<&str> = t.steps.iter().map(|s| s.agent.as_str()).collect();
    assert_eq!(agents, ["architect", "dev"]);
    assert_eq!(
        t.steps[0].output,
        "DESIGN-42: put the cache in front of the parser"
    );
    assert_eq!(t.output, "implemented DESIGN-42");
    assert_eq!(r.metadata.agents, ["architect", "dev"]);
    assert_eq!(t.token_usage.total, 145);
    let dev_prompt = server.requests()[1].prompt_text();
    assert!(
        dev_prompt.contains("# Context: architect's output for this task\n\nDESIGN-42"),
        "{dev_prompt}"
    );
}

#[tokio::test]
async fn no_strategy_and_a_complex_task_selects_multi() {
    let server = ScriptedServer::with_responder(|_| Reply::text(["ok"]).with_usage(1, 1))
        .await
        .unwrap();
    let ws = workspace();
    let file =
        TaskFile::parse("tasks:\n  - {id: big, description: rework auth, complexity: complex}\n")
            .unwrap();
    let events = Events::default();
    let r = execute(
        &file,
        cli_options(ws.path(), &server.openai_base_url(), &events),
    )
    .await
    .unwrap();
    assert_eq!(r.metadata.strategy, Strategy::Multi);
    assert_eq!(r.task("big").unwrap().steps.len(), 2);
    let started = events.all().into_iter().find_map(|e| match e.kind {
        EventKind::ExecutionStarted {
            strategy,
            strategy_reason,
            ..
        } => Some((strategy, strategy_reason)),
        _ => None,
    });
    let (s, why) = started.unwrap();
    assert_eq!(s, Strategy::Multi);
    assert!(
        why.contains("complex") && why.contains("architect"),
        "{why}"
    );
}

#[tokio::test]
async fn parallel_overlaps_independent_tasks_and_feeds_outputs_to_dependents() {
    let server = ScriptedServer::with_responder(|req| {
        let p = req.prompt_text();
        let id = ["t1", "t2", "t3"]
            .into_iter()
            .find(|id| p.contains(&format!("# Task {id}")))
            .unwrap();
        Reply::text([format!("{id}-"), "result".to_string()])
            .with_usage(10, 2)
            .delay_per_chunk(Duration::from_millis(150))
    })
    .await
    .unwrap();
    let ws = workspace();
    let file = TaskFile::parse(
        "strategy: parallel\ntasks:\n  - {id: t3, description: combine, depends_on: [t1, t2]}\n  - {id: t1, description: left}\n  - {id: t2, description: right}\n",
    )
    .unwrap();
    let events = Events::default();
    let r = execute(
        &file,
        cli_options(ws.path(), &server.openai_base_url(), &events),
    )
    .await
    .unwrap();
    assert_eq!(r.metadata.status, ExecutionStatus::Completed);
    // Dependency order in the result, whatever the file order.
    let ids: Vec<&str> = r.tasks.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(ids, ["t1", "t2", "t3"]);
    let started = |id: &'static str| move |k: &EventKind| matches!(k, EventKind::TaskStarted { task } if task == id);
    let finished = |id: &'static str| move |k: &EventKind| matches!(k, EventKind::TaskFinished { task, .. } if task == id);
    // Overlap: each independent task started before the other finished.
    assert!(events.index(started("t2")) < events.index(finished("t1")));
    assert!(events.index(started("t1")) < events.index(finished("t2")));
    // The dependent waited for both, and got both outputs.
    assert!(events.index(started("t3")) > events.index(finished("t1")));
    assert!(events.index(started("t3")) > events.index(finished("t2")));
    let t3_prompt = server
        .requests()
        .iter()
        .map(|r| r.prompt_text())
        .find(|p| p.contains("# Task t3"))
        .unwrap();
    assert!(
        t3_prompt.contains("result of prerequisite task `t1`\n\nt1-result"),
        "{t3_prompt}"
    );
    assert!(
        t3_prompt.contains("result of prerequisite task `t2`\n\nt2-result"),
        "{t3_prompt}"
    );
    // Costs of the concurrent tasks accumulate: 3 x (10 in + 2 out) on gpt-4o.
    assert_eq!(r.metadata.total_tokens.total, 36);
    assert!((r.metadata.total_cost - 3.0 * (10.0 * 2.5 + 2.0 * 10.0) / 1e6).abs() < 1e-12);
}

#[tokio::test]
async fn max_parallel_one_runs_independent_tasks_one_after_the_other() {
    let server = ScriptedServer::with_responder(|_| Reply::text(["ok"]).with_usage(1, 1))
        .await
        .unwrap();
    let ws = workspace();
    let file = TaskFile::parse("strategy: parallel\nmax_parallel: 1\ntasks:\n  - {id: a, description: x}\n  - {id: b, description: y}\n").unwrap();
    let events = Events::default();
    execute(
        &file,
        cli_options(ws.path(), &server.openai_base_url(), &events),
    )
    .await
    .unwrap();
    let started_b = events.index(|k| matches!(k, EventKind::TaskStarted { task } if task == "b"));
    let finished_a =
        events.index(|k| matches!(k, EventKind::TaskFinished { task, .. } if task == "a"));
    assert!(started_b > finished_a);
}

#[tokio::test]
async fn dependents_of_a_failed_task_are_skipped_and_the_rest_completes() {
    let server = ScriptedServer::with_responder(|req| {
        if req.prompt_text().contains("# Task broken") {
            Reply::status(400).error_message("model rejected the request")
        } else {
            Reply::text(["fine"]).with_usage(1, 1)
        }
    })
    .await
    .unwrap();
    let ws = workspace();
    let file = TaskFile::parse(
        "strategy: parallel\ntasks:\n  - {id: broken, description: x}\n  - {id: next, description: y, depends_on: [broken]}\n  - {id: last, description: z, depends_on: [next]}\n  - {id: other, description: w}\n",
    )
    .unwrap();
    let events = Events::default();
    let r = execute(
        &file,
        cli_options(ws.path(), &server.openai_base_url(), &events),
    )
    .await
    .unwrap();
    let status = |id| r.task(id).unwrap().status;
    assert_eq!(status("broken"), TaskStatus::Failed);
    assert!(
        r.task("broken")
            .unwrap()
            .error
            .as_deref()
            .unwrap()
            .contains("model rejected the request")
    );
    assert_eq!(status("next"), TaskStatus::SkippedDependencyFailed);
    assert_eq!(status("last"), TaskStatus::SkippedDependencyFailed);
    assert_eq!(status("other"), TaskStatus::Completed);
    assert_eq!(r.metadata.status, ExecutionStatus::Partial);
    let skipped: Vec<(String, String)> = events
        .all()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::TaskSkipped {
                task,
                failed_dependency,
                ..
            } => Some((task, failed_dependency)),
            _ => None,
        })
        .collect();
    assert_eq!(
        skipped,
        [
            ("next".into(), "broken".into()),
            ("last".into(), "next".into())
        ]
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["tasks"][1]["status"], "skipped_dependency_failed");
    // Skipped tasks never reached the model.
    assert_eq!(server.request_count(), 2);
}

fn budget_file() -> TaskFile {
    TaskFile::parse("strategy: single\ntasks:\n  - {id: first, description: x}\n  - {id: second, description: y, depends_on: [first]}\n").unwrap()
}

#[tokio::test]
async fn budget_warns_before_it_would_be_exceeded_and_the_user_can_cancel() {
    let server =
        ScriptedServer::with_responder(|_| Reply::text(["done"]).with_usage(100_000, 1_000))
            .await
            .unwrap();
    let ws = workspace();
    let events = Events::default();
    let mut opts = cli_options(ws.path(), &server.openai_base_url(), &events);
    // The first step costs 100k * 2.5/1M + 1k * 10/1M = $0.26; the second, projected
    // at 2000 output tokens, would take the total past $0.27.
    opts.budget_usd = Some(0.27);
    opts.gate = Arc::new(FixedGate(false));
    let r = execute(&budget_file(), opts).await.unwrap();
    assert_eq!(server.request_count(), 1, "the second step must not run");
    assert_eq!(r.task("first").unwrap().status, TaskStatus::Completed);
    assert_eq!(r.task("second").unwrap().status, TaskStatus::Cancelled);
    assert_eq!(r.metadata.status, ExecutionStatus::Cancelled);
    assert!((r.metadata.total_cost - 0.26).abs() < 1e-9);
    let warning =
        events.index(|k| matches!(k, EventKind::BudgetWarning { task, .. } if task == "second"));
    let decision = events.index(|k| matches!(k, EventKind::BudgetDecision { proceed: false }));
    assert!(warning < decision);
    assert!(
        !events
            .all()
            .iter()
            .any(|e| matches!(&e.kind, EventKind::AgentStarted { task, .. } if task == "second"))
    );
    match &events.all()[warning].kind {
        EventKind::BudgetWarning {
            spent_usd,
            next_step_usd,
            budget_usd,
            ..
        } => {
            assert!((spent_usd - 0.26).abs() < 1e-9 && *next_step_usd > 0.0 && *budget_usd == 0.27);
        }
        _ => unreachable!(),
    }
    let finished = events.all().into_iter().find_map(|e| match e.kind {
        EventKind::ExecutionFinished {
            total_cost_usd,
            status,
            ..
        } => Some((total_cost_usd, status)),
        _ => None,
    });
    assert_eq!(finished.map(|(_, s)| s), Some(ExecutionStatus::Cancelled));
}

#[tokio::test]
async fn budget_warning_approved_continues_and_the_total_is_reported() {
    let server =
        ScriptedServer::with_responder(|_| Reply::text(["done"]).with_usage(100_000, 1_000))
            .await
            .unwrap();
    let ws = workspace();
    let events = Events::default();
    let mut opts = cli_options(ws.path(), &server.openai_base_url(), &events);
    opts.budget_usd = Some(0.27);
    opts.gate = Arc::new(FixedGate(true));
    let r = execute(&budget_file(), opts).await.unwrap();
    assert_eq!(r.metadata.status, ExecutionStatus::Completed);
    assert!(
        (r.metadata.total_cost - 0.52).abs() < 1e-9,
        "{}",
        r.metadata.total_cost
    );
    assert_eq!(
        events
            .types()
            .iter()
            .filter(|t| *t == "budget.warning")
            .count(),
        1
    );
    let total = events.all().into_iter().find_map(|e| match e.kind {
        EventKind::ExecutionFinished { total_cost_usd, .. } => Some(total_cost_usd),
        _ => None,
    });
    assert!((total.unwrap() - 0.52).abs() < 1e-9);
}

#[tokio::test]
async fn timeout_stops_the_execution_and_returns_partial_results() {
    let server = ScriptedServer::with_responder(|req| {
        if req.prompt_text().contains("# Task quick") {
            Reply::text(["quick done"]).with_usage(5, 2)
        } else {
            // Streams two pieces, then stalls forever.
            Reply::text(["partial one, ", "partial two", "never sent"])
                .with_usage(5, 2)
                .hang_after(2)
        }
    })
    .await
    .unwrap();
    let ws = workspace();
    let file = TaskFile::parse(
        "strategy: parallel\ntasks:\n  - {id: quick, description: x}\n  - {id: slow, description: y}\n  - {id: after, description: z, depends_on: [slow]}\n",
    )
    .unwrap();
    let events = Events::default();
    let mut opts = cli_options(ws.path(), &server.openai_base_url(), &events);
    // The timeout is the behaviour under test, so it is a bound: 15 s holds the quick
    // task and the slow one's first two pieces at load 8 on 2 cores; the slow stream then
    // hangs until it fires.
    opts.timeout = Some(Duration::from_secs(15));
    let r = execute(&file, opts).await.unwrap();
    assert_eq!(r.metadata.status, ExecutionStatus::Timeout);
    assert_eq!(r.task("quick").unwrap().status, TaskStatus::Completed);
    let slow = r.task("slow").unwrap();
    assert_eq!(slow.status, TaskStatus::Timeout);
    assert_eq!(slow.output, "partial one, partial two");
    assert_eq!(
        r.task("after").unwrap().status,
        TaskStatus::SkippedDependencyFailed
    );
    // The stalled stream was closed, not left hanging.
    assert!(server.wait_for_aborted(1, Duration::from_secs(30)).await);
}

#[tokio::test]
async fn skills_and_workspace_files_are_injected_with_marked_paths() {
    let server = ScriptedServer::with_responder(|_| Reply::text(["ok"]).with_usage(1, 1))
        .await
        .unwrap();
    let ws = workspace();
    std::fs::create_dir_all(ws.path().join(".capstan/skills")).unwrap();
    std::fs::write(
        ws.path().join(".capstan/skills/rust.md"),
        "Prefer thiserror for library errors.",
    )
    .unwrap();
    std::fs::write(
        ws.path().join(".capstan/skills/sql.md"),
        "SQL SKILL NOT WANTED",
    )
    .unwrap();
    std::fs::create_dir_all(ws.path().join("src")).unwrap();
    std::fs::write(
        ws.path().join("src/lib.rs"),
        "pub fn answer() -> u32 { 42 }",
    )
    .unwrap();
    let file = TaskFile::parse(
        "tasks:\n  - {id: a, description: fix the rust error type, files: [src/lib.rs]}\n",
    )
    .unwrap();
    let events = Events::default();
    execute(
        &file,
        cli_options(ws.path(), &server.openai_base_url(), &events),
    )
    .await
    .unwrap();
    let p = server.requests()[0].prompt_text();
    assert!(p.contains("# Skill: rust\n\nPrefer thiserror"), "{p}");
    assert!(!p.contains("SQL SKILL"), "{p}");
    assert!(p.contains("===== BEGIN FILE src/lib.rs =====\npub fn answer() -> u32 { 42 }\n===== END FILE src/lib.rs ====="), "{p}");
}

#[tokio::test]
async fn a_prompt_over_the_context_limit_is_cut_keeping_the_task() {
    let server = ScriptedServer::with_responder(|_| Reply::text(["ok"]).with_usage(1, 1))
        .await
        .unwrap();
    let ws = workspace();
    let big = format!(
        "HEAD-OF-FILE\n{}\nTAIL-OF-FILE",
        "filler line\n".repeat(20_000)
    );
    std::fs::write(ws.path().join("big.log"), big).unwrap();
    let file = TaskFile::parse(
        "tasks:\n  - {id: a, description: summarise the log errors, files: [big.log]}\n",
    )
    .unwrap();
    let events = Events::default();
    let config = AgentsConfig {
        context_tokens: 2_000,
        ..AgentsConfig::default()
    };
    execute(
        &file,
        options(
            deps(
                ws.path(),
                config,
                Some(cli_model(&server.openai_base_url(), "gpt-4o")),
            ),
            &events,
        ),
    )
    .await
    .unwrap();
    let p = server.requests()[0].prompt_text();
    assert!(capstan_models::estimate_tokens(&p) <= 2_000);
    assert!(
        p.contains("summarise the log errors")
            && p.contains("HEAD-OF-FILE")
            && p.contains("TAIL-OF-FILE")
    );
    assert!(p.contains("characters left out to fit the context limit"));
    let cut = events.all().into_iter().find_map(|e| match e.kind {
        EventKind::ContextTruncated {
            cut,
            original_tokens,
            limit_tokens,
            ..
        } => Some((cut, original_tokens, limit_tokens)),
        _ => None,
    });
    let (cut, original, limit) = cut.unwrap();
    assert_eq!(cut, ["file big.log"]);
    assert!(original > limit);
}

#[tokio::test]
async fn files_outside_the_workspace_stop_the_execution_before_any_step() {
    let server = ScriptedServer::with_responder(|_| Reply::text(["ok"]))
        .await
        .unwrap();
    let ws = workspace();
    let file = TaskFile::parse("tasks:\n  - {id: a, description: x, files: [../../etc/passwd]}\n")
        .unwrap();
    let events = Events::default();
    let err = execute(
        &file,
        cli_options(ws.path(), &server.openai_base_url(), &events),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("outside the workspace") && err.contains("../../etc/passwd"),
        "{err}"
    );
    assert_eq!(server.request_count(), 0);
}

#[tokio::test]
async fn the_factory_picks_runners_by_runtime() {
    let ws = workspace();
    let events = Events::default();
    let emitter = capstan_agents::event::Emitter::new("exec_test".into(), events.sink());
    // No runtime outside MCP mode: the standalone CLI runtime.
    let mut d = deps(
        ws.path(),
        AgentsConfig::default(),
        Some(cli_model("http://127.0.0.1:9/v1", "gpt-4o")),
    );
    let f = RunnerFactory::new(d.clone());
    assert_eq!(f.resolve(None).unwrap(), RuntimeKind::Cli);
    assert_eq!(
        f.get(RuntimeKind::Cli, &emitter).await.unwrap().runtime(),
        RuntimeKind::Cli
    );
    assert_eq!(
        f.resolve(Some(RuntimeKind::OpenCode)).unwrap(),
        RuntimeKind::OpenCode
    );
    // Claude Code: the real CLI from the pinned npm group.
    d.config.claude.command = common::npm_bin("claude", "claude").display().to_string();
    let f = RunnerFactory::new(d.clone());
    assert_eq!(
        f.get(RuntimeKind::Claude, &emitter)
            .await
            .unwrap()
            .runtime(),
        RuntimeKind::Claude
    );
    // In MCP mode the caller must choose.
    d.mode = Mode::Mcp;
    let err = RunnerFactory::new(d.clone())
        .resolve(None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("MCP mode"), "{err}");
    // Clear errors: unknown runtime, missing program, no model for `cli`.
    let err = "gpt".parse::<RuntimeKind>().unwrap_err().to_string();
    assert!(
        err.contains("unknown runtime `gpt`") && err.contains("claude") && err.contains("opencode"),
        "{err}"
    );
    d.config.claude.command = "/nonexistent/claude".into();
    d.cli_model = None;
    d.mode = Mode::Cli;
    let f = RunnerFactory::new(d);
    let err = f
        .get(RuntimeKind::Claude, &emitter)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("was not found") && err.contains("npm install"),
        "{err}"
    );
    let err = f
        .get(RuntimeKind::Cli, &emitter)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("[model]"), "{err}");
}

#[test]
fn the_documented_example_task_file_is_valid() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/agents/TASKS.yaml");
    let file = TaskFile::load(&path).unwrap();
    assert_eq!(file.strategy, Some(Strategy::Parallel));
    let ws = path.parent().unwrap();
    for t in &file.tasks {
        capstan_agents::context::load_files(ws, t).unwrap();
        capstan_agents::context::select_skills(&ws.join(".capstan/skills"), t).unwrap();
    }
    let order: Vec<&str> = file
        .topological_order()
        .unwrap()
        .into_iter()
        .map(|i| file.tasks[i].id.as_str())
        .collect();
    assert_eq!(order.last(), Some(&"review"));
}

#[tokio::test]
async fn a_runtime_that_cannot_start_stops_the_execution_before_any_task() {
    let ws = workspace();
    let file = TaskFile::parse(
        "tasks:\n  - {id: a, description: x}\n  - {id: b, description: y}\n  - {id: c, description: z, runtime: claude, retry_runtime: cli}\n",
    )
    .unwrap();
    let events = Events::default();
    let mut d = deps(ws.path(), AgentsConfig::default(), None);
    d.config.claude.command = "/nonexistent/claude".into();
    d.config_file = Some("/home/u/.config/capstan/capstan.toml".into());
    let err = execute(&file, options(d, &events))
        .await
        .unwrap_err()
        .to_string();
    // One line: which tasks, which runtime, what it needs and where to configure it.
    assert!(!err.contains('\n'), "{err}");
    assert!(
        err.starts_with("no task was started: tasks a, b: the `cli` runtime needs a model: add a [model] section to /home/u/.config/capstan/capstan.toml"),
        "{err}"
    );
    assert!(
        err.contains("task c: Claude Code (`/nonexistent/claude`) was not found"),
        "{err}"
    );
    assert!(
        events.all().is_empty(),
        "nothing started: {:?}",
        events.types()
    );
}

#[tokio::test]
async fn a_task_whose_runtime_is_missing_falls_back_to_its_retry_runtime() {
    let server = ScriptedServer::with_responder(|_| Reply::text(["done on cli"]).with_usage(10, 5))
        .await
        .unwrap();
    let ws = workspace();
    let file = TaskFile::parse(
        "tasks:\n  - {id: review, description: review it, runtime: claude, retry_runtime: cli}\n",
    )
    .unwrap();
    let events = Events::default();
    let mut d = deps(
        ws.path(),
        AgentsConfig::default(),
        Some(cli_model(&server.openai_base_url(), "gpt-4o")),
    );
    d.config.claude.command = "/nonexistent/claude".into();
    let r = execute(&file, options(d, &events)).await.unwrap();
    let t = r.task("review").unwrap();
    assert_eq!(
        (t.status, t.output.as_str()),
        (TaskStatus::Completed, "done on cli")
    );
    assert_eq!(r.metadata.runtimes, [RuntimeKind::Cli]);
    let types = events.types();
    assert_eq!(types[..2], ["execution.started", "runtime.fallback"]);
    let (task, from, to, reason) = events
        .all()
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::RuntimeFallback {
                task,
                from,
                to,
                reason,
            } => Some((task, from, to, reason)),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        (task.as_deref(), from, to),
        (Some("review"), RuntimeKind::Claude, RuntimeKind::Cli)
    );
    assert!(reason.contains("was not found"), "{reason}");
}

#[tokio::test]
async fn summarise_mode_has_the_model_summarise_what_does_not_fit_as_a_budgeted_step() {
    let server = ScriptedServer::with_responder(|req| {
        let p = req.prompt_text();
        if p.starts_with("Summarise the file big.log") {
            // The summariser gets the task it summarises for, and the file itself.
            if !(p.contains("task `a`: find the log errors") && p.contains("HEAD-OF-FILE")) {
                return Reply::status(400)
                    .error_message("the summariser lacks the task or the file");
            }
            Reply::text(["SUMMARY: 3 timeouts in the db pool"]).with_usage(1_500, 20)
        } else {
            Reply::text(["the db pool times out"]).with_usage(300, 10)
        }
    })
    .await
    .unwrap();
    let ws = workspace();
    let big = format!(
        "HEAD-OF-FILE\n{}\nTAIL-OF-FILE",
        "filler line\n".repeat(20_000)
    );
    std::fs::write(ws.path().join("big.log"), big).unwrap();
    let file = TaskFile::parse(
        "tasks:\n  - {id: a, description: find the log errors, files: [big.log]}\n",
    )
    .unwrap();
    let events = Events::default();
    let config = AgentsConfig {
        context_tokens: 2_000,
        context: capstan_agents::ContextMode::Summarise,
        ..AgentsConfig::default()
    };
    let r = execute(
        &file,
        options(
            deps(
                ws.path(),
                config,
                Some(cli_model(&server.openai_base_url(), "gpt-4o")),
            ),
            &events,
        ),
    )
    .await
    .unwrap();
    // The summariser's prompt fitted the limit too; the agent got the summary, not a cut.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(capstan_models::estimate_tokens(&requests[0].prompt_text()) <= 2_000);
    let p = requests[1].prompt_text();
    assert!(
        p.contains("[summary of file big.log]\nSUMMARY: 3 timeouts in the db pool")
            && p.contains("find the log errors"),
        "{p}"
    );
    assert!(!p.contains("filler line") && !p.contains("characters left out"));
    // Its own step, counted in the task's and the execution's usage and cost.
    let t = r.task("a").unwrap();
    let agents: Vec<(&str, TaskStatus)> = t
        .steps
        .iter()
        .map(|s| (s.agent.as_str(), s.status))
        .collect();
    assert_eq!(
        agents,
        [
            ("summariser", TaskStatus::Completed),
            ("dev", TaskStatus::Completed)
        ]
    );
    assert_eq!(t.output, "the db pool times out");
    assert_eq!(t.token_usage.total, 1_830);
    assert_eq!(r.metadata.total_tokens.total, 1_830);
    let expected = 1_800.0 * 2.5 / 1e6 + 30.0 * 10.0 / 1e6;
    assert!((r.metadata.total_cost - expected).abs() < 1e-12);
    assert_eq!(r.metadata.agents, ["summariser", "dev"]);
    let summarised = events.all().into_iter().find_map(|e| match e.kind {
        EventKind::ContextSummarised { summarised, .. } => Some(summarised),
        _ => None,
    });
    assert_eq!(summarised.unwrap(), ["file big.log"]);
    assert!(!events.types().contains(&"context.truncated".to_string()));
}

#[tokio::test]
async fn summarise_mode_without_a_model_stops_before_any_task() {
    let ws = workspace();
    let file = TaskFile::parse("tasks:\n  - {id: a, description: x}\n").unwrap();
    let mut d = deps(ws.path(), AgentsConfig::default(), None);
    d.config.context = capstan_agents::ContextMode::Summarise;
    let err = execute(&file, options(d, &Events::default()))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[agents] context = \"summarise\" needs a model")
            && err.contains("\"truncate\""),
        "{err}"
    );
}
