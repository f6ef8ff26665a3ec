//! Capstan's MCP prompts: templates a person picks in their client, filled
//! from the workspace, the exec policy and the run store.
//!
//! - `ask_the_workspace`: a question, with the index's best passages attached
//!   and the instruction to search, read and cite.
//! - `run_a_command_safely`: a command, with what Capstan's policy says about
//!   it before it runs (run, ask or refuse, and why).
//! - `summarise_run_changes`: a run's recorded events (commands, writes,
//!   approvals, failures), to be summarised as what changed.

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ContentBlock, GetPromptResult, JsonObject, Prompt, PromptArgument, PromptMessage,
    ResourceContents, Role,
};
use serde_json::Value;

use super::resources::{WorkspaceResources, encode};
use crate::run::app::App;
use capstan_protocol::{Envelope, Event};

/// The prompts, defined once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapstanPrompt {
    AskTheWorkspace,
    RunACommandSafely,
    SummariseRunChanges,
}

impl CapstanPrompt {
    pub const ALL: [Self; 3] = [
        Self::AskTheWorkspace,
        Self::RunACommandSafely,
        Self::SummariseRunChanges,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::AskTheWorkspace => "ask_the_workspace",
            Self::RunACommandSafely => "run_a_command_safely",
            Self::SummariseRunChanges => "summarise_run_changes",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Arguments: (name, description, required).
    fn arguments(self) -> &'static [(&'static str, &'static str, bool)] {
        match self {
            Self::AskTheWorkspace => &[(
                "question",
                "What you want to know about the workspace",
                true,
            )],
            Self::RunACommandSafely => &[
                ("command", "The shell command line to run", true),
                (
                    "cwd",
                    "Directory to run it in, relative to the workspace root",
                    false,
                ),
            ],
            Self::SummariseRunChanges => {
                &[("run_id", "The run (see `capstan runs` or completion)", true)]
            }
        }
    }

    pub fn describe(self) -> Prompt {
        let (title, description) = match self {
            Self::AskTheWorkspace => (
                "Ask the workspace",
                "Answer a question from the workspace's files, citing them (the search index's best passages are attached)",
            ),
            Self::RunACommandSafely => (
                "Run a command safely",
                "Run a command through Capstan's sandbox and policy, knowing first whether it runs, asks or is refused",
            ),
            Self::SummariseRunChanges => (
                "Summarise changes of a run",
                "Summarise what one Capstan run changed: commands, writes, approvals and failures from its record",
            ),
        };
        let args = self
            .arguments()
            .iter()
            .map(|(name, what, required)| {
                PromptArgument::new(*name)
                    .with_description(*what)
                    .with_required(*required)
            })
            .collect();
        Prompt::new(self.name(), Some(description), Some(args)).with_title(title)
    }

    /// Which argument completion fills with workspace paths.
    pub fn path_argument(self) -> Option<&'static str> {
        match self {
            Self::RunACommandSafely => Some("cwd"),
            _ => None,
        }
    }
}

fn required(args: &JsonObject, name: &str, prompt: CapstanPrompt) -> Result<String, McpError> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .ok_or_else(|| {
            McpError::invalid_params(
                format!("prompt `{}` needs the argument `{name}`", prompt.name()),
                None,
            )
        })
}

fn user_text(text: String) -> PromptMessage {
    PromptMessage::new(Role::User, ContentBlock::text(text))
}

/// Fill one prompt.
pub async fn get(
    prompt: CapstanPrompt,
    args: &JsonObject,
    app: &App,
    resources: Option<&WorkspaceResources>,
) -> Result<GetPromptResult, McpError> {
    let description = prompt.describe().description.unwrap_or_default();
    let messages = match prompt {
        CapstanPrompt::AskTheWorkspace => {
            let question = required(args, "question", prompt)?;
            let Some(res) = resources else {
                return Err(no_workspace(prompt));
            };
            let mut messages = vec![user_text(format!(
                "Answer this question from the files of the workspace {}:\n\n{question}\n\n\
                 Search first (the tool `local_kb_retrieval.search`, or the resource \
                 capstan://index/search?q=...), read the files the hits point to, and cite every \
                 claim with its file and lines. If the workspace does not answer it, say so.",
                res.root().display()
            ))];
            // The index's best passages, when it has any: a head start, not the answer.
            let search = format!("capstan://index/search?q={}", encode(&question));
            if let Ok(found) = res.read(&search, &app.indexes).await
                && let Some(ResourceContents::TextResourceContents { text, .. }) =
                    found.contents.first()
                && !text.contains("\"hits\": []")
            {
                messages.push(PromptMessage::new(
                    Role::User,
                    ContentBlock::resource(
                        ResourceContents::text(text.clone(), search)
                            .with_mime_type("application/json"),
                    ),
                ));
            }
            messages
        }
        CapstanPrompt::RunACommandSafely => {
            let command = required(args, "command", prompt)?;
            let Some(res) = resources else {
                return Err(no_workspace(prompt));
            };
            let cwd = args.get("cwd").and_then(Value::as_str).unwrap_or("").trim();
            if !cwd.is_empty() {
                crate::plugins::services::exec::resolve_cwd(res.root(), cwd)
                    .map_err(|e| McpError::invalid_params(e, None))?;
            }
            let policy = app.policy_for(res.root());
            let evaluation = policy.evaluate_shell(&command);
            let verdict = match &evaluation.verdict {
                capstan_policy::Verdict::Allow => "runs without asking".to_string(),
                capstan_policy::Verdict::Ask => "needs a person's approval first".to_string(),
                capstan_policy::Verdict::Deny { reason } => format!("is refused: {reason}"),
            };
            let why = if evaluation.explanation.is_empty() {
                String::new()
            } else {
                format!("\nWhy: {}", evaluation.explanation.join("; "))
            };
            vec![user_text(format!(
                "Run this command in the workspace {} (cwd: {}):\n\n    {command}\n\n\
                 Use the tool `terminal_exec.run`, which runs it in Capstan's sandbox. Under the \
                 workspace's policy it {verdict} (risk `{}`){why}.\n\
                 If it is refused or declined, tell the person why and what they could change; do \
                 not try another spelling of the same command. Report the exit code and the \
                 relevant output.",
                res.root().display(),
                if cwd.is_empty() { "." } else { cwd },
                evaluation.classification.risk,
            ))]
        }
        CapstanPrompt::SummariseRunChanges => {
            let run_id = required(args, "run_id", prompt)?;
            let store = &app.store;
            let run = store
                .get_run(&run_id)
                .map_err(|e| McpError::internal_error(e.to_string(), None))?
                .ok_or_else(|| {
                    McpError::invalid_params(
                        format!("no run `{run_id}`; `capstan runs` lists them (completion offers recent ones)"),
                        None,
                    )
                })?;
            let events = store
                .events(&run_id)
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            let lines: Vec<String> = events.iter().filter_map(|e| change_line(e)).collect();
            let record = if lines.is_empty() {
                "(the run recorded no commands, writes, approvals or failures)".to_string()
            } else {
                lines.join("\n")
            };
            vec![user_text(format!(
                "Summarise what Capstan run {run_id} (status {}) changed, for the person who \
                 started it: files written or deleted, commands run and their outcome, approvals \
                 given or refused, and anything that failed. Only state what the record shows.\n\n\
                 The run's record:\n{record}",
                run.status.as_str()
            ))]
        }
    };
    Ok(GetPromptResult::new(messages).with_description(description))
}

fn no_workspace(prompt: CapstanPrompt) -> McpError {
    McpError::invalid_params(
        format!(
            "prompt `{}` needs a workspace; start the server as `capstan mcp --workspace DIR`",
            prompt.name()
        ),
        None,
    )
}

/// One line of the record for an event that changed something or says why
/// not; progress and chatter are left out.
fn change_line(event_json: &str) -> Option<String> {
    let envelope: Envelope = serde_json::from_str(event_json).ok()?;
    let keep = matches!(
        envelope.event,
        Event::TerminalStep { .. }
            | Event::ApprovalRequested { .. }
            | Event::ApprovalDecided { .. }
            | Event::TaskStarted { .. }
            | Event::TaskCompleted { .. }
            | Event::TaskFailed { .. }
            | Event::RunFailed { .. }
    );
    if !keep {
        return None;
    }
    let Value::Object(mut fields) = serde_json::to_value(&envelope.event).ok()? else {
        return None;
    };
    let kind = fields.remove("type")?;
    Some(format!(
        "- {} {}: {}",
        envelope.ts,
        kind.as_str()?,
        Value::Object(fields)
    ))
}
