//! `capstan invoke`: one task straight to a capability.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::ask::approve_mode;
use super::feed;
use super::{GlobalArgs, workspace_root};
use crate::app::App;
use crate::dispatch::run_task;
use crate::protocol::{Event, EventSink, TaskRequest};
use crate::services::approval::ApproveMode;
use crate::services::{HostServices, RunContext};

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

/// Prints events as they happen: JSON lines, or plain words on stderr.
struct PrintSink {
    json: bool,
    broker: Arc<crate::services::approval::ApprovalBroker>,
    asks: tokio::sync::mpsc::UnboundedSender<feed::Ask>,
}

impl EventSink for PrintSink {
    fn emit(&self, event: Event) {
        if let Event::ApprovalRequested { approval_id, .. } = &event
            && self.broker.is_open(approval_id)
        {
            feed::print_approval(&event);
            let _ = self.asks.send(feed::Ask {
                approval_id: approval_id.clone(),
            });
        }
        if self.json {
            println!("{}", serde_json::to_string(&event).unwrap_or_default());
            return;
        }
        match event {
            Event::Activity { message, .. } => eprintln!("  • {message}"),
            Event::Progress {
                done, total, unit, ..
            } => eprintln!("  … {done}/{total} {unit}"),
            Event::CapabilityStatus {
                status, message, ..
            } => eprintln!("  ! {status}: {message}"),
            Event::ApprovalDecided { decision, by, .. } => {
                eprintln!("  approval: {decision} (by {by})")
            }
            Event::TerminalStep {
                command, exit_code, ..
            } => eprintln!("  $ {command} (exit {exit_code:?})"),
            Event::WorkspaceRequired { message, .. } => {
                eprintln!("  ! workspace required: {message}")
            }
            _ => {}
        }
    }
}

pub async fn run(global: &GlobalArgs, args: InvokeArgs) -> Result<ExitCode> {
    let input: serde_json::Value = serde_json::from_str(&args.input)
        .with_context(|| format!("--input is not valid JSON: {}", args.input))?;
    let workspace = args.workspace.as_deref().map(workspace_root).transpose()?;
    let app = App::open(global.dirs()?, approve_mode(args.approve)).await?;
    if let Some(ws) = &workspace {
        app.check_workspace(ws)?;
    }
    let registry = app.registry(workspace.as_deref()).await;
    for problem in registry.problems() {
        tracing::warn!("{}", problem.message);
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
    let policy = workspace
        .as_deref()
        .map(|w| app.policy_for(w))
        .unwrap_or_else(|| app.config.policy.clone());
    let services = HostServices {
        exec: Some(Arc::new(crate::services::exec::Exec::new(
            policy,
            app.broker.clone(),
        ))),
        index: Some(app.indexes.clone()),
        approval: Some(app.broker.clone()),
        model: None,
    };
    let (asks, asked) = tokio::sync::mpsc::unbounded_channel();
    if app.broker.mode() == ApproveMode::Ask {
        tokio::spawn(feed::answer_approvals(
            app.broker.clone(),
            asked,
            feed::stdin_lines(),
        ));
    }
    let sink = Arc::new(PrintSink {
        json: args.json,
        broker: app.broker.clone(),
        asks,
    });
    let mut run = RunContext::new(workspace, sink, services);
    run.run_id = capstan_store::new_id("inv");
    let cancel: CancellationToken = run.cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    });
    let outcome = run_task(&app.runtime, &registry, &task, &run).await;
    match outcome {
        Ok(success) => {
            if args.json {
                println!(
                    "{}",
                    json!({"type": "result", "ok": true, "summary": success.summary, "data": success.data})
                );
            } else {
                eprintln!("{}", success.summary);
                println!("{}", serde_json::to_string_pretty(&success.data)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            if args.json {
                println!(
                    "{}",
                    json!({"type": "result", "ok": false, "reason": failure.reason, "message": failure.message})
                );
            } else {
                eprintln!("task failed ({}): {}", failure.reason, failure.message);
            }
            Ok(ExitCode::from(1))
        }
    }
}
