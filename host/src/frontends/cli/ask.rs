//! `capstan ask`: one message, a live feed in the terminal (or JSON lines), the
//! streamed answer, citations, usage; approvals asked at the prompt (see
//! `feed.rs`, which `capstan chat` shares).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use super::feed::{ApproveSource, Feed, Outcomes, answer_approvals, stdin_lines};
use super::{GlobalArgs, workspace_root};
use crate::errln;
use crate::plugins::services::approval::ApproveMode;
use crate::run::app::{App, AskRequest};
use crate::run::orchestrator::RunStatus;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 completed, 1 failed (the reason is printed), 130 cancelled (Ctrl-C, or `b` at an approval prompt), 2 usage or setup errors.\n\nApprovals: with --approve ask (the default on a terminal) each risky command is shown with its risk and reasons; answer y (run it), n (deny), a (approve it for the rest of the session) or b (abort the run).\n\n\
Examples (single quotes keep your shell from running the `...` parts itself):\n  capstan ask --workspace ./my-project \"How do I rotate the signing keys?\"\n  \
capstan ask --workspace . --approve all 'run `cargo test` and tell me what failed'\n  \
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

/// Decide the default: a person at a terminal is asked; a script is not (and
/// the feed says why nobody was asked).
pub fn approve_mode(explicit: Option<ApproveMode>) -> (ApproveMode, ApproveSource) {
    match explicit {
        Some(mode) => (mode, ApproveSource::Flag(mode)),
        None if std::io::stdin().is_terminal() => {
            (ApproveMode::Ask, ApproveSource::Flag(ApproveMode::Ask))
        }
        None => (ApproveMode::None, ApproveSource::NoTerminal),
    }
}

pub async fn run(global: &GlobalArgs, args: AskArgs) -> Result<ExitCode> {
    let workspace = args
        .workspace
        .as_deref()
        .map(|d| workspace_root(global, d))
        .transpose()?;
    let (mode, source) = approve_mode(args.approve);
    let app = App::open_with_model(global.dirs()?, mode, args.model_override()?).await?;
    let (feed, asks) = Feed::new(args.json, source, Outcomes::PlanTasks, app.broker.clone());
    if app.broker.mode() == ApproveMode::Ask {
        tokio::spawn(answer_approvals(app.broker.clone(), asks, stdin_lines()));
    }
    let frontend = feed.frontend();
    let json = args.json;
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            errln!("\n· cancelling…");
            on_ctrl_c.cancel();
        }
    });
    let req = AskRequest {
        message: args.message,
        session_id: args.session,
        workspace,
        quota: None,
    };
    let done = app.ask(req, frontend, cancel).await?;
    if !json {
        errln!("· run {} in session {}", done.run_id, done.session_id);
    }
    Ok(exit_code(done.outcome.status))
}

/// Exit status for a run: 0 completed, 1 failed, 130 cancelled (as a shell
/// reports a Ctrl-C).
pub fn exit_code(status: RunStatus) -> ExitCode {
    match status {
        RunStatus::Completed => ExitCode::SUCCESS,
        RunStatus::Failed => ExitCode::from(1),
        RunStatus::Cancelled => ExitCode::from(130),
    }
}
