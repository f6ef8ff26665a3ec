//! `capstan ask`: one message, a live feed in the terminal (or JSON lines), the
//! streamed answer, citations, usage; approvals asked at the prompt.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use capstan_store::Decision;
use tokio_util::sync::CancellationToken;

use super::{GlobalArgs, workspace_root};
use crate::app::{App, AskRequest};
use crate::orchestrator::RunStatus;
use crate::protocol::{Envelope, Event};
use crate::services::approval::{ApprovalBroker, ApproveMode};

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 completed, 1 failed (the reason is printed), 130 cancelled (Ctrl-C), 2 usage or setup errors.\n\n\
Examples:\n  capstan ask --workspace ./my-project \"How do I rotate the signing keys?\"\n  \
capstan ask --workspace . --approve all \"run `cargo test` and tell me what failed\"\n  \
capstan ask --json --workspace . \"what is in README.md?\" | jq .type"
)]
pub struct AskArgs {
    /// The message.
    pub message: String,
    /// The workspace folder: its documents are the knowledge base and commands run inside it.
    #[arg(long, short, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Continue a session (its history is in the prompt and its workspace is remembered).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Print the event stream as JSON lines on stdout instead of the feed.
    #[arg(long)]
    pub json: bool,
    /// How approvals are answered. Default: ask on a terminal, none otherwise.
    #[arg(long, value_enum)]
    pub approve: Option<ApproveMode>,
    /// Model provider for this run, overriding `[model]` in capstan.toml.
    #[arg(long, value_parser = ["offline", "openai", "anthropic"])]
    pub provider: Option<String>,
    /// Model name (with --provider; e.g. claude-sonnet-4-5, gpt-4o, llama3.1:8b).
    #[arg(long, requires = "provider")]
    pub model: Option<String>,
    /// Server URL for an OpenAI-compatible provider (Ollama, vLLM, llama.cpp...).
    #[arg(long, requires = "provider")]
    pub base_url: Option<String>,
    /// Environment variable that holds the API key.
    #[arg(long, requires = "provider")]
    pub api_key_env: Option<String>,
}

impl AskArgs {
    fn model_override(&self) -> Result<Option<capstan_models::ProviderConfig>> {
        let Some(provider) = &self.provider else {
            return Ok(None);
        };
        let mut fields = toml::map::Map::new();
        fields.insert("kind".into(), provider.clone().into());
        fields.insert(
            "model".into(),
            self.model.clone().unwrap_or_default().into(),
        );
        if let Some(url) = &self.base_url {
            fields.insert("base_url".into(), url.clone().into());
        }
        if let Some(env) = &self.api_key_env {
            fields.insert("api_key_env".into(), env.clone().into());
        }
        Ok(Some(toml::Value::Table(fields).try_into()?))
    }
}

/// Decide the default: a person at a terminal is asked; a script is not.
pub fn approve_mode(explicit: Option<ApproveMode>) -> ApproveMode {
    explicit.unwrap_or_else(|| {
        if std::io::stdin().is_terminal() {
            ApproveMode::Ask
        } else {
            ApproveMode::None
        }
    })
}

/// Ask a person at the terminal, off the async threads.
pub fn prompt_approval(
    broker: Arc<ApprovalBroker>,
    id: String,
    command: String,
    risk: String,
    reasons: Vec<String>,
) {
    std::thread::spawn(move || {
        let mut err = std::io::stderr();
        let _ = writeln!(err, "\n  ? approval needed ({risk}): {command}");
        for r in &reasons {
            let _ = writeln!(err, "      - {r}");
        }
        loop {
            let _ = write!(
                err,
                "    run it? [y]es / [n]o / [a]lways this session / a[b]ort: "
            );
            let _ = err.flush();
            let mut line = String::new();
            if std::io::stdin().read_line(&mut line).unwrap_or(0) == 0 {
                let _ = broker.decide(&id, Decision::Denied);
                return;
            }
            let decision = match line.trim().to_lowercase().as_str() {
                "y" | "yes" => Decision::Approved,
                "n" | "no" => Decision::Denied,
                "a" | "always" => Decision::ApprovedForSession,
                "b" | "abort" => Decision::Aborted,
                _ => continue,
            };
            let _ = broker.decide(&id, decision);
            return;
        }
    });
}

/// The human feed: what happened in plain words on stderr, the answer on stdout.
fn render(envelope: &Envelope, broker: &Arc<ApprovalBroker>) {
    let mut out = std::io::stdout();
    match &envelope.event {
        Event::HostAnalysis {
            decision, reason, ..
        } => eprintln!("· {decision}: {reason}"),
        Event::RetrievalStarted { query, .. } => {
            eprintln!("· searching the knowledge base for \"{query}\"")
        }
        Event::RetrievalCompleted {
            hits, sufficient, ..
        } => {
            eprintln!(
                "  {hits} passages{}",
                if *sufficient { "" } else { " (not enough)" }
            )
        }
        Event::PlanCreated { tasks } => {
            eprintln!("· plan:");
            for t in tasks {
                eprintln!(
                    "    [{}] {} {}",
                    t.id,
                    t.kind,
                    if t.title.is_empty() {
                        &t.operation
                    } else {
                        &t.title
                    }
                );
            }
        }
        Event::TaskFailed {
            task_id,
            reason,
            message,
        } => eprintln!("  ✗ {task_id} {reason}: {message}"),
        Event::TaskSkipped { task_id, reason } => eprintln!("  – {task_id} skipped: {reason}"),
        Event::TaskCompleted {
            task_id, summary, ..
        } => eprintln!("  ✓ {task_id}: {summary}"),
        Event::WorkspaceRequired { message, .. } => eprintln!("! workspace required: {message}"),
        Event::TerminalStep {
            command,
            exit_code,
            signal,
            duration_ms,
            timed_out,
            ..
        } => {
            let status = match (exit_code, signal, timed_out) {
                (_, _, true) => "timed out".to_string(),
                (Some(c), _, _) => format!("exit {c}"),
                (None, Some(s), _) => format!("signal {s}"),
                _ => "?".into(),
            };
            eprintln!("  $ {command}   ({status}, {duration_ms} ms)");
        }
        Event::ApprovalRequested {
            approval_id,
            command,
            risk,
            reasons,
            ..
        } if broker.mode() == ApproveMode::Ask => {
            prompt_approval(
                broker.clone(),
                approval_id.clone(),
                command.clone(),
                risk.clone(),
                reasons.clone(),
            );
        }
        Event::ApprovalDecided { decision, by, .. } => {
            eprintln!("  approval: {decision} (by {by})")
        }
        Event::Activity { message, .. } => eprintln!("  • {message}"),
        Event::CapabilityStatus {
            status, message, ..
        } => eprintln!("  ! {status}: {message}"),
        Event::BudgetWarning { message, .. } => eprintln!("! {message}"),
        Event::ResponseDelta { text } => {
            let _ = write!(out, "{text}");
            let _ = out.flush();
        }
        Event::ResponseCompleted { .. } => println!(),
        Event::RunCompleted { usage }
        | Event::RunCancelled { usage }
        | Event::RunFailed { usage, .. } => {
            let cost = usage
                .cost_usd
                .map(|c| format!(", ${c:.4}"))
                .unwrap_or_default();
            let est = if usage.estimated { " (estimated)" } else { "" };
            eprintln!(
                "· {} in, {} out tokens{est}{cost}",
                usage.input_tokens, usage.output_tokens
            );
        }
        _ => {}
    }
}

pub async fn run(global: &GlobalArgs, args: AskArgs) -> Result<ExitCode> {
    let workspace = args.workspace.as_deref().map(workspace_root).transpose()?;
    let mode = approve_mode(args.approve);
    let app = App::open_with_model(global.dirs()?, mode, args.model_override()?).await?;
    let broker = app.broker.clone();
    let json = args.json;
    let frontend: crate::app::Frontend = Arc::new(move |env: &Envelope| {
        if json {
            println!("{}", serde_json::to_string(env).unwrap_or_default());
            if let Event::ApprovalRequested {
                approval_id,
                command,
                risk,
                reasons,
                ..
            } = &env.event
                && broker.mode() == ApproveMode::Ask
            {
                prompt_approval(
                    broker.clone(),
                    approval_id.clone(),
                    command.clone(),
                    risk.clone(),
                    reasons.clone(),
                );
            }
        } else {
            render(env, &broker);
        }
    });
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\n· cancelling…");
            on_ctrl_c.cancel();
        }
    });
    let req = AskRequest {
        message: args.message,
        session_id: args.session,
        workspace,
    };
    let done = app.ask(req, frontend, cancel).await?;
    if !json {
        eprintln!("· run {} in session {}", done.run_id, done.session_id);
    }
    Ok(match done.outcome.status {
        RunStatus::Completed => ExitCode::SUCCESS,
        RunStatus::Failed => {
            if !json {
                eprintln!(
                    "run failed ({}): {}",
                    done.outcome
                        .reason
                        .map(|r| r.to_string())
                        .unwrap_or_default(),
                    done.outcome.message
                );
            }
            ExitCode::from(1)
        }
        RunStatus::Cancelled => ExitCode::from(130),
    })
}
