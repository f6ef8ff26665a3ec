//! The `claude` runtime against the real Claude Code CLI (pinned in tests/npm/claude),
//! offline: `ANTHROPIC_BASE_URL` points at a scripted Anthropic Messages server on
//! 127.0.0.1, so Claude Code streams its real `system` / `stream_event` / `assistant` /
//! `result` lines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use capstan_agents::event::{EventKind, Progress};
use capstan_agents::{AgentsConfig, ExecutionStatus, RuntimeKind, TaskFile, TaskStatus, execute};
use capstan_models::scripted::{RecordedRequest, Reply, ScriptedServer};
use common::{Events, IsolatedHome, claude_config, cli_model, deps, options, processes_in};

/// The request that carried Capstan's task (Claude Code may make side requests).
fn task_request(server: &ScriptedServer) -> RecordedRequest {
    server
        .requests()
        .into_iter()
        .find(|r| {
            r.path.starts_with("/v1/messages")
                && !r.path.contains("count_tokens")
                && r.prompt_text().contains("# Task ")
        })
        .expect("no request carried the task")
}

/// Answers Capstan's task with `task`; anything else Claude Code asks on the side
/// (titles, quota probes) with a short text.
fn responder(task: Reply) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static {
    move |req| {
        if req.prompt_text().contains("# Task ") {
            task.clone()
        } else {
            Reply::text(["ok"]).with_usage(1, 1)
        }
    }
}

fn config(home: &IsolatedHome, server: &ScriptedServer) -> AgentsConfig {
    let mut claude = claude_config(home, &server.base_url());
    claude.model = Some("claude-sonnet-4-5".into());
    AgentsConfig {
        claude,
        ..AgentsConfig::default()
    }
}

#[tokio::test]
async fn claude_code_runs_the_task_with_role_skills_and_description_and_streams_progress() {
    let server = ScriptedServer::with_responder(responder(
        Reply::text(["Claude ", "wrote ", "the endpoint."]).with_usage(1200, 30),
    ))
    .await
    .unwrap();
    let home = IsolatedHome::new();
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join(".capstan/skills")).unwrap();
    std::fs::write(
        ws.path().join(".capstan/skills/http.md"),
        "SKILL: answer 204 for empty bodies.",
    )
    .unwrap();
    let file = TaskFile::parse(
        "runtime: claude\ntasks:\n  - {id: health, description: add an http health endpoint}\n",
    )
    .unwrap();
    let events = Events::default();
    let r = execute(
        &file,
        options(deps(ws.path(), config(&home, &server), None), &events),
    )
    .await
    .unwrap();

    let t = r.task("health").unwrap();
    assert_eq!(t.status, TaskStatus::Completed, "{t:#?}");
    assert_eq!(t.output, "Claude wrote the endpoint.");
    let req = task_request(&server);
    assert_eq!(req.model(), "claude-sonnet-4-5");
    let prompt = req.prompt_text();
    for part in [
        "You are the developer",
        "# Task health",
        "add an http health endpoint",
        "# Skill: http",
        "SKILL: answer 204",
    ] {
        assert!(
            prompt.contains(part),
            "{part} missing from the prompt Claude Code sent"
        );
    }
    // Usage from Claude Code's result line, priced from the table (Sonnet $3/$15).
    assert_eq!(
        (
            t.token_usage.input,
            t.token_usage.output,
            t.token_usage.estimated
        ),
        (1200, 30, false)
    );
    let expected = 1200.0 * 3.0 / 1e6 + 30.0 * 15.0 / 1e6;
    assert!((t.cost.unwrap() - expected).abs() < 1e-12, "{:?}", t.cost);
    assert_eq!(t.steps[0].model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(r.metadata.runtimes, [RuntimeKind::Claude]);
    // Captured incrementally: the session line, then one event per streamed delta.
    let progress: Vec<Progress> = events
        .all()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Progress {
                progress,
                runtime: RuntimeKind::Claude,
                ..
            } => Some(progress),
            _ => None,
        })
        .collect();
    assert!(
        matches!(&progress[0], Progress::Status { message } if message.contains("Claude Code session")),
        "{progress:?}"
    );
    let texts: Vec<&str> = progress
        .iter()
        .filter_map(|p| match p {
            Progress::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["Claude ", "wrote ", "the endpoint."]);
}

#[tokio::test]
async fn an_api_error_fails_the_step_with_context_and_a_retry_runs_on_another_runtime() {
    let anthropic = ScriptedServer::with_responder(responder(
        Reply::status(400).error_message("scripted: this model refuses the task"),
    ))
    .await
    .unwrap();
    let openai = ScriptedServer::with_responder(|_| {
        Reply::text(["done by the cli runtime"]).with_usage(10, 4)
    })
    .await
    .unwrap();
    let home = IsolatedHome::new();
    let ws = tempfile::tempdir().unwrap();
    let file = TaskFile::parse(
        "tasks:\n  - {id: a, description: fix it, runtime: claude, retry_runtime: cli}\n",
    )
    .unwrap();
    let events = Events::default();
    let r = execute(
        &file,
        options(
            deps(
                ws.path(),
                config(&home, &anthropic),
                Some(cli_model(&openai.openai_base_url(), "gpt-4o")),
            ),
            &events,
        ),
    )
    .await
    .unwrap();
    let t = r.task("a").unwrap();
    assert_eq!(t.status, TaskStatus::Completed);
    assert_eq!(t.steps.len(), 2);
    let failed = &t.steps[0];
    assert_eq!(
        (failed.runtime, failed.status),
        (RuntimeKind::Claude, TaskStatus::Failed)
    );
    let err = failed.error.as_deref().unwrap();
    assert!(err.contains("API status 400"), "{err}");
    assert_eq!(
        (t.steps[1].runtime, t.output.as_str()),
        (RuntimeKind::Cli, "done by the cli runtime")
    );
    assert_eq!(r.metadata.runtimes, [RuntimeKind::Claude, RuntimeKind::Cli]);
    assert!(events.all().iter().any(|e| matches!(
        &e.kind,
        EventKind::RuntimeRetry {
            from: RuntimeKind::Claude,
            to: RuntimeKind::Cli,
            ..
        }
    )));
}

#[tokio::test]
async fn a_timeout_interrupts_claude_code_and_keeps_its_partial_output() {
    // The model streams two pieces and then stalls: Claude Code waits on it, and the
    // execution's timeout sends the interrupt control request.
    let server = ScriptedServer::with_responder(responder(
        Reply::text(["partial from claude, ", "still going", "never sent"])
            .with_usage(100, 5)
            .hang_after(2),
    ))
    .await
    .unwrap();
    let home = IsolatedHome::new();
    let ws = tempfile::tempdir().unwrap();
    let file = TaskFile::parse(
        "runtime: claude\ntasks:\n  - {id: slow, description: write a long essay}\n",
    )
    .unwrap();
    let events = Events::default();
    let mut opts = options(deps(ws.path(), config(&home, &server), None), &events);
    // Generous for a loaded machine; the stream hangs until the timeout fires anyway.
    opts.timeout = Some(Duration::from_secs(15));
    let r = execute(&file, opts).await.unwrap();
    assert_eq!(r.metadata.status, ExecutionStatus::Timeout);
    let t = r.task("slow").unwrap();
    assert_eq!(t.status, TaskStatus::Timeout);
    assert_eq!(t.output, "partial from claude, still going");
    // Claude Code closed its API stream when interrupted.
    assert!(server.wait_for_aborted(1, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn the_idle_watchdog_kills_a_hung_claude_code_and_keeps_partial_output() {
    // The real Claude Code, hung on a model stream that stops sending: its own stream
    // timeouts are minutes long, so Capstan's watchdog ends it. The watchdog counts from
    // Claude Code's last line, and its start-up (node loading the CLI) prints nothing
    // either: 20 s keeps that start-up, at load 8 on 2 cores, inside the bound, so the
    // only silence that trips it is the hang.
    let server = ScriptedServer::with_responder(responder(
        Reply::text(["before the hang"])
            .with_usage(100, 5)
            .hang_after(1),
    ))
    .await
    .unwrap();
    let home = IsolatedHome::new();
    let ws = tempfile::tempdir().unwrap();
    let mut c = config(&home, &server);
    c.claude.idle_timeout_secs = 20;
    let file = TaskFile::parse("runtime: claude\ntasks:\n  - {id: hang, description: anything}\n")
        .unwrap();
    let events = Events::default();
    let r = execute(&file, options(deps(ws.path(), c, None), &events))
        .await
        .unwrap();
    let t = r.task("hang").unwrap();
    assert_eq!(t.status, TaskStatus::Failed, "{t:#?}");
    assert_eq!(t.output, "before the hang");
    assert!(
        t.error
            .as_deref()
            .unwrap()
            .contains("sent nothing for 20 s (idle watchdog)"),
        "{:?}",
        t.error
    );
    assert_eq!(r.metadata.status, ExecutionStatus::Failed);
    // Killed, not left behind: no process of this run is still in its workspace, and
    // its stream to the model was closed.
    // (A process that would not die would hang here: it is stuck on a stream that never
    // resumes, so nothing but the kill ends it.)
    wait_until("Claude Code's processes to be gone", || {
        processes_in(ws.path()).is_empty()
    })
    .await;
    assert!(server.wait_for_aborted(1, Duration::from_secs(30)).await);
}

/// Polls `done` every 50 ms; the bound only keeps a broken build from hanging the suite.
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_crash_mid_stream_keeps_partial_output() {
    // The real Claude Code, killed with SIGKILL (as the OOM killer would) once it has
    // streamed part of its answer: the model stream hangs after one piece, so the
    // process is mid-turn when it dies.
    let server = ScriptedServer::with_responder(responder(
        Reply::text(["half an answer", "never sent"])
            .with_usage(100, 5)
            .hang_after(1),
    ))
    .await
    .unwrap();
    let home = IsolatedHome::new();
    let ws = tempfile::tempdir().unwrap();
    let file = TaskFile::parse("runtime: claude\ntasks:\n  - {id: crash, description: anything}\n")
        .unwrap();
    let events = Events::default();
    let watcher = {
        let (events, ws) = (events.clone(), ws.path().to_path_buf());
        tokio::spawn(async move {
            wait_until("Claude Code to stream its first piece", || {
                events.all().iter().any(|e| {
                    matches!(&e.kind, EventKind::Progress { progress: Progress::Text { text }, .. } if text == "half an answer")
                })
            })
            .await;
            let pids = processes_in(&ws);
            assert!(!pids.is_empty(), "no Claude Code process in the workspace");
            for pid in &pids {
                // SAFETY: kill(2) on a pid this test just read from /proc; no memory is involved.
                unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
            }
            pids
        })
    };
    let r = execute(
        &file,
        options(deps(ws.path(), config(&home, &server), None), &events),
    )
    .await
    .unwrap();
    let killed = watcher.await.unwrap();
    let t = r.task("crash").unwrap();
    assert_eq!(t.status, TaskStatus::Failed, "{t:#?}");
    assert_eq!(t.output, "half an answer");
    let err = t.error.as_deref().unwrap();
    assert!(
        err.contains("before its result line") && err.contains("SIGKILL"),
        "{err} (killed {killed:?})"
    );
    assert!(t.token_usage.estimated);
}

#[tokio::test]
async fn claude_code_failing_at_start_reports_its_stderr() {
    // The real CLI refuses an option missing its value, on stderr, before any line of
    // its stream: the step fails with that message, not just an exit code. (An option
    // it does not know is refused by Capstan before Claude Code starts, see
    // tests/agents.rs.)
    let server = ScriptedServer::with_responder(responder(Reply::text(["unused"])))
        .await
        .unwrap();
    let home = IsolatedHome::new();
    let ws = tempfile::tempdir().unwrap();
    let mut c = config(&home, &server);
    c.claude.extra_args = vec!["--fallback-model".into()];
    let file =
        TaskFile::parse("runtime: claude\ntasks:\n  - {id: bad, description: anything}\n").unwrap();
    let events = Events::default();
    let r = execute(&file, options(deps(ws.path(), c, None), &events))
        .await
        .unwrap();
    let t = r.task("bad").unwrap();
    assert_eq!(t.status, TaskStatus::Failed, "{t:#?}");
    let err = t.error.as_deref().unwrap();
    assert!(
        err.contains("before its result line")
            && err.contains("stderr ends with")
            && err.contains("--fallback-model"),
        "{err}"
    );
    assert_eq!(server.request_count(), 0, "nothing reached the model");
}
