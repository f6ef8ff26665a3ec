//! `capstan invoke`: one task straight to a capability.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::ask::approve_mode;
use super::feed;
use super::{GlobalArgs, workspace_root};
use crate::outln;
use crate::plugins::services::approval::ApproveMode;
use crate::run::app::App;
use crate::run::dispatch::run_task;
use capstan_protocol::{FailureReason, TaskRequest};

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 when the task succeeds, 1 when it fails (the reason is printed), 2 on usage errors.\n\n\
Examples:\n  capstan invoke local_kb_retrieval --workspace . --operation search --input '{\"query\":\"signing keys\"}'\n  \
capstan invoke terminal_exec --workspace . --approve all --input '{\"command\":\"cargo test\"}'"
)]
pub struct InvokeArgs {
    /// The capability kind, e.g. local_kb_retrieval, terminal_exec, docx.
    pub kind: String,
    /// The operation; defaults to the capability's first one.
    #[arg(long, short)]
    pub operation: Option<String>,
    /// The task input as JSON.
    #[arg(long, short, default_value = "{}")]
    pub input: String,
    /// The workspace the task may see.
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Print every event and the result as JSON lines on stdout.
    #[arg(long)]
    pub json: bool,
    /// How approvals are answered. Default: ask on a terminal, none otherwise.
    #[arg(long, value_enum)]
    pub approve: Option<ApproveMode>,
}

pub async fn run(global: &GlobalArgs, args: InvokeArgs) -> Result<ExitCode> {
    let input: serde_json::Value = serde_json::from_str(&args.input)
        .with_context(|| format!("--input is not valid JSON: {}", args.input))?;
    let workspace = args
        .workspace
        .as_deref()
        .map(|d| workspace_root(global, d))
        .transpose()?;
    let approve = approve_mode(args.approve);
    let app = App::open(global.dirs()?, approve.0).await?;
    if let Some(ws) = &workspace {
        app.check_workspace(ws)?;
    }
    let registry = app.registry(workspace.as_deref()).await;
    for problem in registry.problems() {
        crate::term::warn(&problem.message);
    }
    let operation = match args.operation {
        Some(op) => op,
        None => match registry.resolve(&app.runtime, &args.kind, None).await {
            Ok(plugin) => plugin
                .operations
                .first()
                .map(|o| o.name.clone())
                .unwrap_or_default(),
            Err(_) => String::new(),
        },
    };
    let task = TaskRequest {
        id: "t1".into(),
        kind: args.kind,
        operation,
        input,
    };
    let (approve, source) = approve;
    let (feed, asked) = feed::Feed::new(
        args.json,
        source,
        feed::Outcomes::EveryTask,
        app.broker.clone(),
    );
    if approve == ApproveMode::Ask {
        tokio::spawn(feed::answer_approvals(
            app.broker.clone(),
            asked,
            feed::stdin_lines(),
        ));
    }
    // A run of its own, like an MCP call: its events are kept for replay and
    // its approvals (and the policy's allow and deny verdicts) are audited
    // against it.
    let (session_id, run_id) = start_run(&app, &task.kind, workspace.as_deref())?;
    let events = app.run_events(&run_id, feed.frontend());
    let run = app
        .run_builder(workspace)
        .ids(run_id.clone(), Some(session_id))
        .build(events);
    let cancel: CancellationToken = run.cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    });
    let outcome = run_task(&app.runtime, &registry, &task, &run).await;
    drop(run);
    finish_run(&app, &run_id, &outcome);
    match outcome {
        Ok(success) => {
            if args.json {
                outln!(
                    "{}",
                    crate::term::json(
                        &json!({"type": "result", "ok": true, "summary": success.summary, "data": success.data})
                    )
                );
            } else {
                outln!("{}", crate::term::json_pretty(&success.data));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            // Without --json the feed has said why (`✗ [t1] …`).
            if args.json {
                outln!(
                    "{}",
                    crate::term::json(
                        &json!({"type": "result", "ok": false, "reason": failure.reason, "message": failure.message})
                    )
                );
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// A session and a run for one invocation, so its events and approvals have a
/// run to belong to (the audit trail refers to runs).
fn start_run(app: &App, kind: &str, workspace: Option<&Path>) -> Result<(String, String)> {
    let workspace_id = match workspace {
        Some(root) => app.store.get_workspace_by_root(root)?.map(|w| w.id),
        None => None,
    };
    let (session, run) = app.store.start_run_in_new_session(
        &format!("capstan invoke {kind}"),
        workspace_id.as_deref(),
        "invoke",
    )?;
    Ok((session.id, run.id))
}

fn finish_run(app: &App, run_id: &str, outcome: &capstan_protocol::TaskOutcome) {
    let (status, reason) = match outcome {
        Ok(_) => (capstan_store::RunStatus::Completed, None),
        Err(f) if f.reason == FailureReason::Cancelled => {
            (capstan_store::RunStatus::Cancelled, Some(f.reason))
        }
        Err(f) => (capstan_store::RunStatus::Failed, Some(f.reason)),
    };
    if let Err(e) = app.finish_run(run_id, status, reason.map(FailureReason::as_str), None) {
        crate::term::warn(format_args!("run {run_id} not recorded as finished: {e}"));
    }
}
