//! The `opencode` runtime against the real OpenCode server (`opencode serve`, pinned in
//! tests/npm/opencode), offline: its provider `scripted` points at a scripted
//! OpenAI-compatible server on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use capstan_agents::config::OpenCodeConfig;
use capstan_agents::event::{EventKind, Progress};
use capstan_agents::runner::OpenCodeRunner;
use capstan_agents::{AgentsConfig, ExecutionStatus, RuntimeKind, TaskFile, TaskStatus, execute};
use capstan_models::scripted::{RecordedRequest, Reply, ScriptedServer};
use capstan_models::{Price, PriceTable};
use common::{Events, IsolatedHome, OpenCodeServer, claude_config, deps, options};

/// Capstan's task gets `task`; OpenCode's own side requests (session titles) get a
/// short title.
fn responder(task: Reply) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static {
    move |req| {
        if req.prompt_text().contains("# Task ") && !req.prompt_text().contains("title generator") {
            task.clone()
        } else {
            Reply::text(["A title"]).with_usage(1, 1)
        }
    }
}

fn opencode_config(url: &str) -> OpenCodeConfig {
    OpenCodeConfig {
        url: url.to_string(),
        provider: Some("scripted".into()),
        model: Some("glm-4.6".into()),
        idle_timeout_secs: 60,
        fallback_to_claude: false,
        ..OpenCodeConfig::default()
    }
}

#[tokio::test]
async fn opencode_runs_the_task_on_the_configured_provider_and_model() {
    let model_server = ScriptedServer::with_responder(responder(
        Reply::text(["GLM ", "finished ", "the task."]).with_usage(300, 20),
    ))
    .await
    .unwrap();
    let oc = OpenCodeServer::start(
        &model_server.openai_base_url(),
        &["glm-4.6", "kimi-k2"],
        None,
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let config = AgentsConfig {
        opencode: opencode_config(&oc.url),
        ..AgentsConfig::default()
    };
    let file =
        TaskFile::parse("runtime: opencode\ntasks:\n  - {id: t1, description: tidy the imports}\n")
            .unwrap();
    let events = Events::default();
    let mut opts = options(deps(ws.path(), config, None), &events);
    // A per-model price from config (GLM is not in the defaults).
    let mut prices = PriceTable::defaults();
    prices.insert("glm-4.6", Price::new(0.6, 2.2));
    opts.prices = prices;
    let r = execute(&file, opts).await.unwrap();

    let t = r.task("t1").unwrap();
    assert_eq!(t.status, TaskStatus::Completed, "{t:#?}");
    assert_eq!(t.output, "GLM finished the task.");
    // OpenCode sent our prompt to the provider and model we named.
    let req = model_server
        .requests()
        .into_iter()
        .find(|r| r.prompt_text().contains("# Task t1"))
        .expect("the task reached the model");
    assert_eq!(req.model(), "glm-4.6");
    assert!(req.prompt_text().contains("tidy the imports"));
    assert_eq!(
        (
            t.token_usage.input,
            t.token_usage.output,
            t.token_usage.estimated
        ),
        (300, 20, false)
    );
    assert!((t.cost.unwrap() - (300.0 * 0.6 + 20.0 * 2.2) / 1e6).abs() < 1e-12);
    assert_eq!(t.steps[0].model.as_deref(), Some("glm-4.6"));
    assert_eq!(r.metadata.runtimes, [RuntimeKind::OpenCode]);
    let texts: String = events
        .all()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Progress {
                progress: Progress::Text { text },
                ..
            } => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(texts, "GLM finished the task.");
}

#[tokio::test]
async fn opencode_password_is_sent_and_a_wrong_one_is_a_clear_error() {
    let model_server =
        ScriptedServer::with_responder(responder(Reply::text(["authorised"]).with_usage(5, 1)))
            .await
            .unwrap();
    let oc = OpenCodeServer::start(
        &model_server.openai_base_url(),
        &["glm-4.6"],
        Some("s3cret-pass"),
    )
    .await;
    // SAFETY: set before any thread of this test reads it; the names are unique to it.
    unsafe {
        std::env::set_var("CAPSTAN_TEST_OC_PASSWORD_RIGHT", "s3cret-pass");
        std::env::set_var("CAPSTAN_TEST_OC_PASSWORD_WRONG", "guess");
    }
    let mut c = opencode_config(&oc.url);
    c.password_env = Some("CAPSTAN_TEST_OC_PASSWORD_WRONG".into());
    let err = OpenCodeRunner::connect(c.clone(), None)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("refused the credentials") && err.contains("password_env"),
        "{err}"
    );
    c.password_env = None;
    assert!(OpenCodeRunner::connect(c.clone(), None).await.is_err());
    c.password_env = Some("CAPSTAN_TEST_OC_PASSWORD_UNSET".into());
    let err = OpenCodeRunner::connect(c.clone(), None)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("CAPSTAN_TEST_OC_PASSWORD_UNSET"), "{err}");

    c.password_env = Some("CAPSTAN_TEST_OC_PASSWORD_RIGHT".into());
    let runner = OpenCodeRunner::connect(c.clone(), None).await.unwrap();
    assert!(runner.version().starts_with("1."), "{}", runner.version());
    let ws = tempfile::tempdir().unwrap();
    let config = AgentsConfig {
        opencode: c,
        ..AgentsConfig::default()
    };
    let file =
        TaskFile::parse("runtime: opencode\ntasks:\n  - {id: t1, description: check auth}\n")
            .unwrap();
    let events = Events::default();
    let r = execute(&file, options(deps(ws.path(), config, None), &events))
        .await
        .unwrap();
    assert_eq!(r.task("t1").unwrap().output, "authorised");
}

#[tokio::test]
async fn an_unavailable_opencode_falls_back_to_claude_code_with_a_notice() {
    let anthropic = ScriptedServer::with_responder(|req| {
        if req.prompt_text().contains("# Task ") {
            Reply::text(["claude took over"]).with_usage(50, 5)
        } else {
            Reply::text(["ok"]).with_usage(1, 1)
        }
    })
    .await
    .unwrap();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let home = IsolatedHome::new();
    let ws = tempfile::tempdir().unwrap();
    let mut config = AgentsConfig {
        opencode: OpenCodeConfig {
            fallback_to_claude: true,
            ..opencode_config(&url)
        },
        ..AgentsConfig::default()
    };
    config.claude = claude_config(&home, &anthropic.base_url());
    config.claude.model = Some("claude-haiku-4-5".into());
    let file = TaskFile::parse("runtime: opencode\ntasks:\n  - {id: t1, description: anything}\n")
        .unwrap();
    let events = Events::default();
    let r = execute(
        &file,
        options(deps(ws.path(), config.clone(), None), &events),
    )
    .await
    .unwrap();
    let t = r.task("t1").unwrap();
    assert_eq!(
        (t.status, t.output.as_str()),
        (TaskStatus::Completed, "claude took over")
    );
    assert_eq!(r.metadata.runtimes, [RuntimeKind::Claude]);
    let notice = events.all().into_iter().find_map(|e| match e.kind {
        EventKind::RuntimeFallback {
            from, to, reason, ..
        } => Some((from, to, reason)),
        _ => None,
    });
    let (from, to, reason) = notice.expect("the user is told about the fallback");
    assert_eq!((from, to), (RuntimeKind::OpenCode, RuntimeKind::Claude));
    assert!(
        reason.contains(&url) && reason.contains("opencode serve"),
        "{reason}"
    );

    // Without the fallback: nothing starts, and the error names how to start the server.
    config.opencode.fallback_to_claude = false;
    let err = execute(
        &file,
        options(deps(ws.path(), config, None), &Events::default()),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("no task was started: task t1:") && err.contains("opencode serve"),
        "{err}"
    );
}

#[tokio::test]
async fn a_timeout_aborts_the_opencode_session_and_keeps_partial_output() {
    let model_server = ScriptedServer::with_responder(responder(
        Reply::text(["half of ", "the answer", "never sent"])
            .with_usage(10, 3)
            .hang_after(2),
    ))
    .await
    .unwrap();
    let oc = OpenCodeServer::start(&model_server.openai_base_url(), &["glm-4.6"], None).await;
    let ws = tempfile::tempdir().unwrap();
    let config = AgentsConfig {
        opencode: opencode_config(&oc.url),
        ..AgentsConfig::default()
    };
    let file = TaskFile::parse("runtime: opencode\ntasks:\n  - {id: t1, description: long job}\n")
        .unwrap();
    let events = Events::default();
    let mut opts = options(deps(ws.path(), config, None), &events);
    // Long enough for a loaded machine to get OpenCode's first turn going (its first
    // prompt loads plugins); the stream then hangs until the timeout fires.
    opts.timeout = Some(Duration::from_secs(25));
    let r = execute(&file, opts).await.unwrap();
    assert_eq!(r.metadata.status, ExecutionStatus::Timeout);
    let t = r.task("t1").unwrap();
    assert_eq!(t.status, TaskStatus::Timeout);
    assert_eq!(t.output, "half of the answer");
    // OpenCode dropped the model stream when the session was aborted.
    assert!(
        model_server
            .wait_for_aborted(1, Duration::from_secs(10))
            .await
    );
}
