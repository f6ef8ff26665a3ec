//! The seed scenarios end to end: the real plugins, the real sandbox, real
//! SQLite, and either the offline model or a scripted model server on 127.0.0.1
//! speaking the real OpenAI-compatible and Anthropic SSE wire formats.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan::plugins::services::approval::ApproveMode;
use capstan::run::app::{App, AskOutcome, AskRequest, Frontend};
use capstan::run::orchestrator::RunStatus;
use capstan_models::scripted::{Reply, ScriptedServer};
use capstan_protocol::{Envelope, Event, FailureReason};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use common::procs;

fn handbook() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("handbook");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/handbook"),
        &ws,
    );
    let ws = ws.canonicalize().unwrap();
    (dir, ws)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

struct Harness {
    _home: tempfile::TempDir,
    app: App,
}

impl Harness {
    async fn new(config: &str, approve: ApproveMode) -> Self {
        static SETUP: std::sync::Once = std::sync::Once::new();
        SETUP.call_once(|| {
            // The sandbox re-executes a launcher binary: the real capstan one.
            capstan_sandbox::set_launcher(env!("CARGO_BIN_EXE_capstan"));
            // SAFETY: set once, before any test reads it; the scripted server
            // accepts any key.
            unsafe { std::env::set_var("CAPSTAN_TEST_KEY", "sk-test-scripted") };
        });
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("config")).unwrap();
        std::fs::write(home.path().join("config/capstan.toml"), config).unwrap();
        let app = App::open(capstan::dirs::Dirs::under(home.path()), approve)
            .await
            .unwrap();
        Self { _home: home, app }
    }

    async fn ask(
        &self,
        message: &str,
        workspace: Option<&Path>,
        session: Option<String>,
    ) -> (AskOutcome, Vec<Envelope>) {
        self.ask_with(
            message,
            workspace,
            session,
            CancellationToken::new(),
            |_, _| {},
        )
        .await
    }

    /// Ask, with a hook that sees every envelope (and may cancel).
    async fn ask_with(
        &self,
        message: &str,
        workspace: Option<&Path>,
        session: Option<String>,
        cancel: CancellationToken,
        hook: impl Fn(&Envelope, &CancellationToken) + Send + Sync + 'static,
    ) -> (AskOutcome, Vec<Envelope>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let c = cancel.clone();
        let frontend: Frontend = Arc::new(move |e: &Arc<Envelope>| {
            sink.lock().unwrap().push(Envelope::clone(e));
            hook(e, &c);
        });
        let req = AskRequest {
            message: message.into(),
            session_id: session,
            workspace: workspace.map(Path::to_path_buf),
            quota: None,
        };
        let out = self.app.ask(req, frontend, cancel).await.unwrap();
        let events = seen.lock().unwrap().clone();
        (out, events)
    }
}

fn types(events: &[Envelope]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            serde_json::to_value(&e.event).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The event types with consecutive repeats (deltas) folded.
fn shape(events: &[Envelope]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in types(events) {
        if out.last() != Some(&t) {
            out.push(t);
        }
    }
    out
}

/// `expected` occurs in this order (other events may sit between).
fn assert_in_order(events: &[Envelope], expected: &[&str]) {
    let t = types(events);
    let mut at = 0;
    for want in expected {
        match t[at..].iter().position(|x| x == want) {
            Some(i) => at += i + 1,
            None => panic!("`{want}` missing or out of order in {t:?}"),
        }
    }
}

fn answer(events: &[Envelope]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ResponseDelta { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

fn scripted_config(server: &ScriptedServer, kind: &str) -> String {
    let url = if kind == "openai" {
        server.openai_base_url()
    } else {
        server.base_url()
    };
    format!(
        "[model]\nkind = \"{kind}\"\nbase_url = \"{url}\"\nmodel = \"scripted-model\"\napi_key_env = \"CAPSTAN_TEST_KEY\"\n"
    )
}

fn step(v: Value) -> Reply {
    Reply::text([v.to_string()]).with_usage(100, 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informational_request_streams_a_cited_answer_without_dispatching_execution() {
    let (_d, ws) = handbook();
    let h = Harness::new("", ApproveMode::None).await;
    let (out, events) = h
        .ask("How do I rotate the signing keys?", Some(&ws), None)
        .await;
    assert_eq!(
        out.outcome.status,
        RunStatus::Completed,
        "{:?}",
        out.outcome
    );
    assert_in_order(
        &events,
        &[
            "run.started",
            "host.analysis",
            "retrieval.started",
            "task.started",
            "task.completed",
            "retrieval.completed",
            "host.analysis",
            "response.delta",
            "response.completed",
            "run.completed",
        ],
    );
    assert_eq!(shape(&events).first().unwrap(), "run.started");
    assert_eq!(shape(&events).last().unwrap(), "run.completed");
    assert!(!types(&events).contains(&"plan.created".to_string()));
    let text = answer(&events);
    assert!(text.contains("minisign -G"), "{text}");
    // The answer is the step that answers, cited; the file is the citation's.
    assert!(text.contains("[1]") && !text.contains("From "), "{text}");
    let Some(Event::ResponseCompleted {
        citations,
        text: full,
    }) = events
        .iter()
        .map(|e| e.event.clone())
        .find(|e| matches!(e, Event::ResponseCompleted { .. }))
    else {
        panic!("no response.completed")
    };
    assert_eq!(
        full, text,
        "the deltas add up to the completed text, in order"
    );
    assert!(
        citations
            .iter()
            .any(|c| c.path == "ops/key-rotation.md" && c.line_start == 7 && c.line_end == 12),
        "{citations:?}"
    );
    // Seq numbers are gapless and in order; the store replays the same
    // stream, the answer's deltas coalesced into its response.completed.
    assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64));
    let kept: Vec<&Envelope> = events
        .iter()
        .filter(|e| !matches!(e.event, Event::ResponseDelta { .. }))
        .collect();
    assert!(kept.len() < events.len(), "the answer streamed no deltas");
    let replay: Vec<Envelope> = h
        .app
        .store
        .events(&out.run_id)
        .unwrap()
        .iter()
        .map(|r| serde_json::from_str(r).unwrap())
        .collect();
    assert_eq!(replay.iter().collect::<Vec<_>>(), kept);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn action_request_plans_and_dispatches_terminal_exec_in_the_sandbox() {
    let (_d, ws) = handbook();
    let h = Harness::new("", ApproveMode::All).await;
    let (out, events) = h
        .ask("run `make check` and `cat README.md`", Some(&ws), None)
        .await;
    assert_eq!(
        out.outcome.status,
        RunStatus::Completed,
        "{:?}",
        out.outcome
    );
    let t = types(&events);
    for needed in [
        "plan.created",
        "task.started",
        "approval.requested",
        "approval.decided",
        "terminal.step",
        "task.completed",
        "response.completed",
        "run.completed",
    ] {
        assert!(t.contains(&needed.to_string()), "missing {needed} in {t:?}");
    }
    assert!(
        !t.contains(&"retrieval.started".to_string()),
        "an explicit command needs no retrieval"
    );
    let steps: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TerminalStep {
                command,
                exit_code,
                risk,
                ..
            } => Some((command.clone(), *exit_code, risk.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("make check".into(), Some(0), "write".into()),
            ("cat README.md".into(), Some(0), "read_only".into())
        ]
    );
    assert!(answer(&events).contains("all checks passed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrieval_loop_reenters_analysis_then_fails_with_retry_limit() {
    let (_d, ws) = handbook();
    let h = Harness::new("", ApproveMode::None).await;
    let (out, events) = h
        .ask(
            "Where is the quantum flux capacitor warranty?",
            Some(&ws),
            None,
        )
        .await;
    assert_eq!(out.outcome.status, RunStatus::Failed);
    assert_eq!(out.outcome.reason, Some(FailureReason::RetryLimit));
    let t = types(&events);
    assert_eq!(t.iter().filter(|x| *x == "retrieval.started").count(), 3);
    assert_eq!(
        t.iter().filter(|x| *x == "host.analysis").count(),
        4,
        "analysis re-entered after each retrieval"
    );
    let failed = events.iter().find_map(|e| match &e.event {
        Event::TaskFailed { reason, .. } => Some(*reason),
        _ => None,
    });
    assert_eq!(failed, Some(FailureReason::RetryLimit));
    assert_in_order(
        &events,
        &[
            "retrieval.completed",
            "host.analysis",
            "task.failed",
            "response.delta",
            "response.completed",
            "run.failed",
        ],
    );
    assert_eq!(t.last().unwrap(), "run.failed");
    assert!(
        answer(&events).starts_with("The workspace does not say"),
        "the answer says plainly that nothing answers: {}",
        answer(&events)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_workspace_blocks_execution_with_workspace_required() {
    let h = Harness::new("", ApproveMode::All).await;
    let (out, events) = h
        .ask("run `touch /tmp/capstan-should-not-exist`", None, None)
        .await;
    assert_eq!(out.outcome.reason, Some(FailureReason::WorkspaceRequired));
    let t = types(&events);
    assert!(t.contains(&"workspace.required".to_string()), "{t:?}");
    assert!(
        !t.contains(&"task.started".to_string()),
        "nothing ran: {t:?}"
    );
    assert!(!Path::new("/tmp/capstan-should-not-exist").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_legacy_kinds_fail_and_valid_tasks_go_on() {
    let (_d, ws) = handbook();
    let server = ScriptedServer::start().await.unwrap();
    server.push(step(json!({"action": "plan", "reason": "mixed plan", "tasks": [
        {"id": "a", "kind": "spreadsheet_magic", "operation": "go", "input": {}},
        {"id": "b", "kind": "writer", "operation": "draft", "input": {"topic": "x"}},
        {"id": "c", "kind": "terminal_exec", "operation": "run", "input": {"draft": "legacy payload shape"}},
        {"id": "d", "kind": "terminal_exec", "operation": "run", "input": {"command": "echo still-runs"}}
    ]})));
    server.push(Reply::text(["Done: ", "some tasks failed."]).with_usage(50, 5));
    let h = Harness::new(&scripted_config(&server, "openai"), ApproveMode::All).await;
    let (_out, events) = h.ask("do the things", Some(&ws), None).await;
    let failures: Vec<(String, FailureReason)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TaskFailed {
                task_id, reason, ..
            } => Some((task_id.clone(), *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(
        failures,
        [
            ("a".into(), FailureReason::UnsupportedCapability),
            ("b".into(), FailureReason::UnsupportedLegacyCapability),
            ("c".into(), FailureReason::UnsupportedLegacyCapability),
        ]
    );
    let completed: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TaskCompleted { task_id, .. } => Some(task_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(completed, ["d"]);
    assert_eq!(answer(&events), "Done: some tasks failed.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_fails_fast_and_the_answer_carries_the_reason() {
    let (_d, ws) = handbook();
    let server = ScriptedServer::start().await.unwrap();
    server.push(step(json!({"action": "plan", "reason": "clean up", "tasks": [
        {"id": "t1", "kind": "terminal_exec", "operation": "run", "input": {"command": "rm -rf guides"}},
        {"id": "t2", "kind": "terminal_exec", "operation": "run", "input": {"command": "ls"}, "depends_on": ["t1"]}
    ]})));
    server.set_responder(|_| Reply::text(["The cleanup was denied."]).with_usage(10, 5));
    // Approvals answered "no": the delete is denied, so t1 fails and t2 never runs.
    let h = Harness::new(&scripted_config(&server, "anthropic"), ApproveMode::None).await;
    let (out, events) = h.ask("clean up the guides", Some(&ws), None).await;
    assert_eq!(
        out.outcome.reason,
        Some(FailureReason::Denied),
        "{:?}",
        out.outcome
    );
    let skipped: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TaskSkipped { task_id, reason } => Some((task_id.clone(), reason.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(skipped, [("t2".into(), "skipped_dependency_failed".into())]);
    assert!(ws.join("guides").exists(), "nothing was deleted");
    // The finalization prompt told the model why.
    let last = server.requests().last().unwrap().prompt_text();
    assert!(last.contains("denied"), "{last}");
    assert_eq!(types(&events).last().unwrap(), "run.failed");
}

/// `(task_id, reason, message)` of every `task.failed`.
fn failed_tasks(events: &[Envelope]) -> Vec<(String, FailureReason, String)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TaskFailed {
                task_id,
                reason,
                message,
            } => Some((task_id.clone(), *reason, message.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_exits_non_zero_fails_its_task_and_the_answer_says_why() {
    let (_d, ws) = handbook();
    let h = Harness::new("", ApproveMode::All).await;
    let (out, events) = h
        .ask(
            "run `capstan-no-such-command` and `cat README.md`",
            Some(&ws),
            None,
        )
        .await;
    assert_eq!(out.outcome.status, RunStatus::Failed, "{:?}", out.outcome);
    assert_eq!(out.outcome.reason, Some(FailureReason::Failed));
    let failed = failed_tasks(&events);
    assert_eq!(failed.len(), 1, "{failed:?}");
    let (task, reason, message) = &failed[0];
    assert_eq!((task.as_str(), *reason), ("t1", FailureReason::Failed));
    assert!(
        message.contains("`capstan-no-such-command` exited 127") && message.contains("not found"),
        "{message}"
    );
    // The loop stopped at the failing command: the second one never ran.
    let ran: Vec<Option<i32>> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TerminalStep { exit_code, .. } => Some(*exit_code),
            _ => None,
        })
        .collect();
    assert_eq!(ran, [Some(127)]);
    assert!(
        events.iter().any(|e| matches!(&e.event,
            Event::PlanUpdated { task_id, status: capstan_protocol::TaskStatus::Failed } if task_id == "t1")),
        "the plan panel shows the task failed"
    );
    assert!(!types(&events).contains(&"task.completed".to_string()));
    // The run still reaches its answer, which gives the reason and the output.
    let text = answer(&events);
    assert!(
        text.contains("exited 127") && text.contains("not found"),
        "{text}"
    );
    assert_in_order(
        &events,
        &["task.failed", "response.completed", "run.failed"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_on_error_completes_its_task_and_a_failing_task_skips_its_dependants() {
    let (_d, ws) = handbook();
    let server = ScriptedServer::start().await.unwrap();
    server.push(step(json!({"action": "plan", "reason": "check", "tasks": [
        {"id": "t1", "kind": "terminal_exec", "operation": "run",
         "input": {"commands": ["false", "echo went-on"], "continue_on_error": true}},
        {"id": "t2", "kind": "terminal_exec", "operation": "run",
         "input": {"command": "echo failing >&2; exit 3"}, "depends_on": ["t1"]},
        {"id": "t3", "kind": "terminal_exec", "operation": "run",
         "input": {"command": "ls"}, "depends_on": ["t2"]}
    ]})));
    server.set_responder(|_| Reply::text(["t2 failed."]).with_usage(10, 5));
    let h = Harness::new(&scripted_config(&server, "openai"), ApproveMode::All).await;
    let (out, events) = h.ask("check the handbook", Some(&ws), None).await;
    assert_eq!(
        out.outcome.reason,
        Some(FailureReason::Failed),
        "{:?}",
        out.outcome
    );
    let completed: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TaskCompleted { task_id, data, .. } => {
                assert_eq!(data["ran"], 2, "continue_on_error ran both commands");
                Some(task_id.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(completed, ["t1"]);
    let failed = failed_tasks(&events);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, "t2");
    assert!(failed[0].2.contains("exited 3: failing"), "{}", failed[0].2);
    let skipped: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TaskSkipped { task_id, reason } => Some((task_id.clone(), reason.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(skipped, [("t3".into(), "skipped_dependency_failed".into())]);
    // The finalization prompt carried the reason and the command's output.
    let last = server.requests().last().unwrap().prompt_text();
    assert!(
        last.contains("exited 3") && last.contains("failing"),
        "{last}"
    );
    assert_eq!(types(&events).last().unwrap(), "run.failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_summary_reach_the_prompt_of_the_next_turn() {
    let server = ScriptedServer::start().await.unwrap();
    server.set_responder(|r| {
        if r.body.to_string().contains("json_schema") || r.prompt_text().contains("ONE JSON object")
        {
            step(json!({"action": "answer", "reason": "chat"}))
        } else {
            Reply::text(["Noted."]).with_usage(10, 2)
        }
    });
    let h = Harness::new(&scripted_config(&server, "openai"), ApproveMode::None).await;
    let (first, _) = h.ask("My favourite colour is teal.", None, None).await;
    let (_second, _) = h
        .ask(
            "What is my favourite colour?",
            None,
            Some(first.session_id.clone()),
        )
        .await;
    let prompts: Vec<String> = server.requests().iter().map(|r| r.prompt_text()).collect();
    let last_step = prompts
        .iter()
        .rev()
        .find(|p| p.contains("What is my favourite colour?"))
        .unwrap();
    assert!(
        last_step.contains("My favourite colour is teal."),
        "history missing: {last_step}"
    );
    assert!(last_step.contains("Session summary"), "summary missing");
    assert_eq!(
        h.app
            .store
            .recent_turns(&first.session_id, 10)
            .unwrap()
            .len(),
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_model_output_is_retried_with_the_error_then_fails_the_run() {
    let server = ScriptedServer::start().await.unwrap();
    for _ in 0..3 {
        server.push(Reply::text(["I think we should {maybe} do stuff"]).with_usage(10, 10));
    }
    server.set_responder(|_| Reply::text(["Sorry."]).with_usage(1, 1));
    let h = Harness::new(&scripted_config(&server, "openai"), ApproveMode::None).await;
    let (out, _events) = h.ask("hello", None, None).await;
    assert_eq!(
        out.outcome.reason,
        Some(FailureReason::InvalidModelOutput),
        "{:?}",
        out.outcome
    );
    let reqs = server.requests();
    assert!(
        reqs[1]
            .prompt_text()
            .contains("could not be used: invalid JSON"),
        "{}",
        reqs[1].prompt_text()
    );
    assert!(
        out.outcome.usage.input_tokens >= 30,
        "usage of every attempt is counted"
    );
}

/// How long the lifecycle tests wait for a command to start or die. Their `sleep`s last
/// minutes, far beyond it, so one seen gone was killed, not finished.
const WAIT_BOUND: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_exec_kills_the_process_and_emits_run_cancelled() {
    let (_d, ws) = handbook();
    let h = Harness::new("", ApproveMode::All).await;
    let marker = "314.159";
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    // Cancel once both sleeps are really running (not at a fixed delay, which on a
    // loaded machine can land while the component is still compiling).
    let seen_running = Arc::new(AtomicBool::new(false));
    let seen = seen_running.clone();
    tokio::spawn(async move {
        while procs::with_argv(&["sleep", marker]).len() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        seen.store(true, Ordering::SeqCst);
        trigger.cancel();
    });
    let (out, events) = h
        .ask_with(
            &format!("run `sleep {marker} & sleep {marker}`"),
            Some(&ws),
            None,
            cancel,
            |_, _| {},
        )
        .await;
    assert_eq!(
        out.outcome.status,
        RunStatus::Cancelled,
        "{:?}",
        out.outcome
    );
    assert!(seen_running.load(Ordering::SeqCst), "the command never ran");
    assert_eq!(types(&events).last().unwrap(), "run.cancelled");
    // Both sleeps, the shell and any launcher that carried the command: all gone (a
    // survivor would run for another five minutes).
    procs::wait_until(
        "every process of the cancelled command to die",
        WAIT_BOUND,
        || procs::mentioning(marker).is_empty(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_retrieval_stops_before_any_answer() {
    let (_d, ws) = handbook();
    let h = Harness::new("", ApproveMode::None).await;
    let (out, events) = h
        .ask_with(
            "How do I rotate the signing keys?",
            Some(&ws),
            None,
            CancellationToken::new(),
            |e, cancel| {
                if matches!(e.event, Event::RetrievalStarted { .. }) {
                    cancel.cancel();
                }
            },
        )
        .await;
    assert_eq!(out.outcome.status, RunStatus::Cancelled);
    let t = types(&events);
    assert!(!t.contains(&"response.delta".to_string()), "{t:?}");
    assert_eq!(t.last().unwrap(), "run.cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_streaming_stops_the_stream() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(step(json!({"action": "answer", "reason": "chat"})));
    let words: Vec<String> = (0..200).map(|i| format!("w{i} ")).collect();
    server.push(
        Reply::text(words)
            .with_usage(10, 200)
            .delay_per_chunk(Duration::from_millis(20)),
    );
    let h = Harness::new(&scripted_config(&server, "openai"), ApproveMode::None).await;
    let (out, events) = h
        .ask_with(
            "tell me a long story",
            None,
            None,
            CancellationToken::new(),
            |e, cancel| {
                if let Event::ResponseDelta { text } = &e.event
                    && text.starts_with("w3 ")
                {
                    cancel.cancel();
                }
            },
        )
        .await;
    assert_eq!(out.outcome.status, RunStatus::Cancelled);
    let deltas = types(&events)
        .iter()
        .filter(|t| *t == "response.delta")
        .count();
    assert!(
        deltas < 50,
        "the stream went on after cancel: {deltas} deltas"
    );
    assert_eq!(types(&events).last().unwrap(), "run.cancelled");
}

#[test]
fn kill_9_mid_run_loses_no_committed_turn_and_the_run_is_marked_interrupted() {
    let (_d, ws) = handbook();
    let home = common::Home::new("");
    let mut child = home
        .capstan()
        .args(["ask", "--approve", "all", "--json", "--workspace"])
        .arg(&ws)
        .arg("run `sleep 271.828`")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the command is running (the sleep itself, not capstan's own argv),
    // then kill the host outright.
    procs::wait_until("the command to start", WAIT_BOUND, || {
        !procs::with_argv(&["sleep", "271.828"]).is_empty()
    });
    child.kill().unwrap();
    child.wait().unwrap();

    // The next start marks the run interrupted; the user's turn is there.
    let out = home.capstan().args(["ask", "hello"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = capstan_store::Store::open(home.path().join("data/capstan.db")).unwrap();
    let runs = store.list_runs(None, 10).unwrap();
    let killed = runs
        .iter()
        .find(|r| r.status == capstan_store::RunStatus::Interrupted)
        .expect("no interrupted run");
    let turns = store.recent_turns(&killed.session_id, 10).unwrap();
    assert_eq!(turns[0].content, "run `sleep 271.828`");
    assert!(store.integrity_check().unwrap().is_empty());
    // The host is gone; so must its command be (a survivor would run for minutes).
    procs::wait_until("the command to die with its host", WAIT_BOUND, || {
        procs::mentioning("271.828").is_empty()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_the_token_budget_stops_the_run_with_budget_exceeded() {
    let server = ScriptedServer::start().await.unwrap();
    server.set_responder(|_| step(json!({"action": "retrieve", "reason": "more", "query": "x"})));
    let config = scripted_config(&server, "openai") + "\n[run]\nbudget_tokens = 250\n";
    let (_d, ws) = handbook();
    let h = Harness::new(&config, ApproveMode::None).await;
    let (out, events) = h.ask("keep going", Some(&ws), None).await;
    assert_eq!(
        out.outcome.reason,
        Some(FailureReason::BudgetExceeded),
        "{:?}",
        out.outcome
    );
    // Each step costs 120 tokens: the third crosses 250.
    // The answer that explains it costs no further model call.
    assert_eq!(types(&events).iter().filter(|t| *t == "usage").count(), 3);
    assert_eq!(server.request_count(), 3);
    assert_eq!(types(&events).last().unwrap(), "run.failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_is_priced_from_the_table_and_a_warning_precedes_the_limit() {
    let server = ScriptedServer::start().await.unwrap();
    server.push(step(json!({"action": "answer", "reason": "chat"})));
    server.push(Reply::text(["ok"]).with_usage(100_000, 10_000));
    // claude-3-5-sonnet family: $3 in, $15 out per 1M tokens.
    let config = scripted_config(&server, "anthropic")
        .replace("scripted-model", "claude-3-5-sonnet-latest")
        + "\n[run]\nbudget_usd = 0.5\n";
    let h = Harness::new(&config, ApproveMode::None).await;
    let (out, events) = h.ask("hi", None, None).await;
    let cost = out.outcome.usage.cost_usd.unwrap();
    let expected = (100.0 * 3.0 + 20.0 * 15.0) / 1e6 + (100_000.0 * 3.0 + 10_000.0 * 15.0) / 1e6;
    assert!((cost - expected).abs() < 1e-9, "{cost} vs {expected}");
    assert!(
        types(&events).contains(&"budget.warning".to_string()),
        "0.45 of 0.50 spent: {:?}",
        types(&events)
    );
    assert_eq!(out.outcome.status, RunStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_the_usd_budget_stops_the_run_with_budget_exceeded() {
    let server = ScriptedServer::start().await.unwrap();
    server.set_responder(|_| step(json!({"action": "retrieve", "reason": "more", "query": "x"})));
    // claude-3-5-sonnet family: $3 in, $15 out per 1M tokens; each step (100 in, 20
    // out) costs $0.0006, so the second crosses $0.001.
    let config = scripted_config(&server, "anthropic")
        .replace("scripted-model", "claude-3-5-sonnet-latest")
        + "\n[run]\nbudget_usd = 0.001\n";
    let (_d, ws) = handbook();
    let h = Harness::new(&config, ApproveMode::None).await;
    let (out, events) = h.ask("keep going", Some(&ws), None).await;
    assert_eq!(
        out.outcome.reason,
        Some(FailureReason::BudgetExceeded),
        "{:?}",
        out.outcome
    );
    assert_eq!(server.request_count(), 2, "no model call after the budget");
    assert_eq!(types(&events).last().unwrap(), "run.failed");
    let failed = events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .find(|e| e["type"] == "run.failed")
        .unwrap();
    assert!(
        failed.to_string().contains("$0.0010 run budget"),
        "{failed}"
    );
}
