//! One agent step on one runtime, and the factory that picks the runtime.

mod claude;
mod cli;
mod opencode;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use capstan_models::{ModelProvider, Usage};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

pub use claude::{ClaudeRunner, confinement_problems, unconfined_warning};
pub use cli::CliRunner;
pub use opencode::OpenCodeRunner;

use crate::event::{Emitter, EventKind, Progress};
use crate::{AgentError, AgentsConfig, RuntimeKind, TaskStatus};

/// One agent step: a rendered prompt for one role of one task.
#[derive(Debug, Clone)]
pub struct AgentJob {
    /// The task's id in the task file.
    pub task_id: String,
    /// The agent's name (its role).
    pub agent: String,
    /// The rendered prompt, already fitted to the context limit.
    pub prompt: String,
    /// Model asked of the runtime; `None`: the runtime's configured default.
    pub model: Option<String>,
    /// The directory the runtime works in.
    pub workspace: PathBuf,
}

impl AgentJob {
    /// Usage estimated from the prompt and `output`, marked as estimated: for runtimes
    /// that report none (or failed before reporting).
    pub fn estimated_usage(&self, output: &str) -> Usage {
        Usage {
            input_tokens: capstan_models::estimate_tokens(&self.prompt),
            output_tokens: capstan_models::estimate_tokens(output),
            estimated: true,
            cost_usd: None,
        }
    }
}

/// What a runtime produced. Failures keep what was produced before them.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// `Completed`, `Failed` or `Cancelled` (the executor turns a cancellation caused by
    /// its timeout into `Timeout`).
    pub status: TaskStatus,
    /// Everything the agent produced (partial on failure).
    pub output: String,
    /// Tokens used, as reported or estimated ([`AgentJob::estimated_usage`]).
    pub usage: Usage,
    /// The model that actually answered, as the runtime reports it.
    pub model: Option<String>,
    /// What went wrong, with the runtime's context; `None` when completed.
    pub error: Option<String>,
}

impl RunOutput {
    /// A `Failed` output keeping what was produced before `error`.
    pub fn failed(output: String, usage: Usage, model: Option<String>, error: String) -> Self {
        Self {
            status: TaskStatus::Failed,
            output,
            usage,
            model,
            error: Some(error),
        }
    }
}

/// Where a runner reports progress.
pub type ProgressFn<'a> = &'a (dyn Fn(Progress) + Send + Sync);

/// One agent runtime: runs a step and reports its progress.
#[async_trait]
pub trait Runner: Send + Sync {
    /// Which runtime this is.
    fn runtime(&self) -> RuntimeKind;
    /// The model used when a job names none (for budget projections), if known.
    fn default_model(&self) -> Option<String>;
    /// Run one step to its end, or until `cancel` fires (then stop the runtime's work
    /// and return what was produced with status `Cancelled`). Never panics on runtime
    /// trouble: that is a `Failed` output with the error's context.
    async fn run(
        &self,
        job: &AgentJob,
        progress: ProgressFn<'_>,
        cancel: CancellationToken,
    ) -> RunOutput;
}

/// Whether Capstan itself is running as an MCP server for another agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Run from the command line: a task without a runtime uses `cli`.
    Cli,
    /// Serving an MCP client: the calling agent must name each task's runtime.
    Mcp,
}

/// What the runners need from the host.
#[derive(Clone)]
pub struct RunnerDeps {
    /// The `[agents]` configuration.
    pub config: AgentsConfig,
    /// The model provider and model for the `cli` runtime (`None`: no model configured).
    pub cli_model: Option<(Arc<dyn ModelProvider>, String)>,
    /// The `capstan` executable, given to Claude Code as an MCP server (`None`: no MCP).
    pub capstan_exe: Option<PathBuf>,
    /// The workspace the agents work in.
    pub workspace: PathBuf,
    /// How Capstan was started, which decides the default runtime.
    pub mode: Mode,
    /// The config file where `[model]` and `[agents]` live, named in messages.
    pub config_file: Option<PathBuf>,
}

/// Builds each runtime's runner once per execution, on first use.
pub struct RunnerFactory {
    deps: RunnerDeps,
    built: Mutex<HashMap<RuntimeKind, Arc<dyn Runner>>>,
}

impl RunnerFactory {
    /// A factory that has built nothing yet.
    pub fn new(deps: RunnerDeps) -> Self {
        Self {
            deps,
            built: Mutex::new(HashMap::new()),
        }
    }

    /// Which runtime a step uses: the given one; none given outside MCP mode: `cli`.
    pub fn resolve(&self, requested: Option<RuntimeKind>) -> Result<RuntimeKind, AgentError> {
        match (requested, self.deps.mode) {
            (Some(k), _) => Ok(k),
            (None, Mode::Cli) => Ok(RuntimeKind::Cli),
            (None, Mode::Mcp) => Err(AgentError::Runtime(
                "no runtime given: in MCP mode the calling agent must choose one (`claude`, `opencode` or `cli`)".into(),
            )),
        }
    }

    /// The runner for `kind`, initialised (OpenCode: the connection is checked). An
    /// OpenCode server that cannot be reached falls back to Claude Code when the config
    /// allows, with a `runtime.fallback` event.
    pub async fn get(
        &self,
        kind: RuntimeKind,
        events: &Emitter,
    ) -> Result<Arc<dyn Runner>, AgentError> {
        let (runner, notices) = self.build(kind).await?;
        for n in notices {
            events.emit(n);
        }
        Ok(runner)
    }

    /// [`RunnerFactory::get`] without emitting: the runner, and the events to emit when
    /// this call built it (`runtime.fallback` when built on another runtime,
    /// `security.warning` when its configuration turns a protection off). For checks
    /// before the execution starts, whose events must come after `execution.started`.
    pub async fn build(
        &self,
        kind: RuntimeKind,
    ) -> Result<(Arc<dyn Runner>, Vec<EventKind>), AgentError> {
        let mut built = self.built.lock().await;
        if let Some(r) = built.get(&kind) {
            return Ok((r.clone(), Vec::new()));
        }
        let mut notices = Vec::new();
        let runner: Arc<dyn Runner> = match kind {
            RuntimeKind::Cli => Arc::new(self.cli()?),
            RuntimeKind::Claude => Arc::new(self.claude(&mut notices)?),
            RuntimeKind::OpenCode => {
                match OpenCodeRunner::connect(
                    self.deps.config.opencode.clone(),
                    self.deps.capstan_exe.clone(),
                )
                .await
                {
                    Ok(r) => {
                        notices.push(EventKind::SecurityWarning {
                            runtime: RuntimeKind::OpenCode,
                            message: r.warning(),
                        });
                        Arc::new(r)
                    }
                    Err(e) if self.deps.config.opencode.fallback_to_claude => {
                        let claude = self.claude(&mut notices).map_err(|ce| {
                            AgentError::Runtime(format!(
                                "{e}; the fallback to Claude Code failed too: {ce}"
                            ))
                        })?;
                        notices.insert(
                            0,
                            EventKind::RuntimeFallback {
                                task: None,
                                from: RuntimeKind::OpenCode,
                                to: RuntimeKind::Claude,
                                reason: e.to_string(),
                            },
                        );
                        Arc::new(claude)
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        built.insert(kind, runner.clone());
        Ok((runner, notices))
    }

    /// The `cli` runtime, on the configured model.
    pub fn cli(&self) -> Result<CliRunner, AgentError> {
        let Some((provider, model)) = self.deps.cli_model.clone() else {
            return Err(AgentError::Runtime(self.needs_model("the `cli` runtime")));
        };
        Ok(CliRunner::new(provider, model))
    }

    /// What `who` needs when no model is configured, and where to configure it.
    pub fn needs_model(&self, who: &str) -> String {
        let file = self
            .deps
            .config_file
            .as_ref()
            .map_or("capstan.toml".to_string(), |p| p.display().to_string());
        format!(
            "{who} needs a model: add a [model] section to {file} (kind = \"anthropic\" or \"openai\", model, api_key_env; \
             base_url for Ollama, vLLM or llama.cpp)"
        )
    }

    /// Claude Code; its `security.warning` (when unconfined) goes to `notices`.
    fn claude(&self, notices: &mut Vec<EventKind>) -> Result<ClaudeRunner, AgentError> {
        let runner = ClaudeRunner::new(
            self.deps.config.claude.clone(),
            self.deps.capstan_exe.clone(),
        )?;
        notices.extend(runner.warning().map(|message| EventKind::SecurityWarning {
            runtime: RuntimeKind::Claude,
            message,
        }));
        Ok(runner)
    }
}
