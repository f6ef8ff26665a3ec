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

pub use claude::ClaudeRunner;
pub use cli::CliRunner;
pub use opencode::OpenCodeRunner;

use crate::event::{Emitter, EventKind, Progress};
use crate::{AgentError, AgentsConfig, RuntimeKind, TaskStatus};

/// One agent step: a rendered prompt for one role of one task.
#[derive(Debug, Clone)]
pub struct AgentJob {
    pub task_id: String,
    pub agent: String,
    pub prompt: String,
    /// Model asked of the runtime; `None`: the runtime's configured default.
    pub model: Option<String>,
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
        }
    }
}

/// What a runtime produced. Failures keep what was produced before them.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// `Completed`, `Failed` or `Cancelled` (the executor turns a cancellation caused by
    /// its timeout into `Timeout`).
    pub status: TaskStatus,
    pub output: String,
    pub usage: Usage,
    /// The model that actually answered, as the runtime reports it.
    pub model: Option<String>,
    pub error: Option<String>,
}

impl RunOutput {
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

#[async_trait]
pub trait Runner: Send + Sync {
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
    Cli,
    Mcp,
}

/// What the runners need from the host.
#[derive(Clone)]
pub struct RunnerDeps {
    pub config: AgentsConfig,
    /// The model provider and model for the `cli` runtime (`None`: no model configured).
    pub cli_model: Option<(Arc<dyn ModelProvider>, String)>,
    /// The `capstan` executable, given to Claude Code as an MCP server (`None`: no MCP).
    pub capstan_exe: Option<PathBuf>,
    pub workspace: PathBuf,
    pub mode: Mode,
}

/// Builds each runtime's runner once per execution, on first use.
pub struct RunnerFactory {
    deps: RunnerDeps,
    built: Mutex<HashMap<RuntimeKind, Arc<dyn Runner>>>,
}

impl RunnerFactory {
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
    /// allows, with a `runtime_fallback` event.
    pub async fn get(
        &self,
        kind: RuntimeKind,
        events: &Emitter,
    ) -> Result<Arc<dyn Runner>, AgentError> {
        let mut built = self.built.lock().await;
        if let Some(r) = built.get(&kind) {
            return Ok(r.clone());
        }
        let runner: Arc<dyn Runner> = match kind {
            RuntimeKind::Cli => {
                let Some((provider, model)) = self.deps.cli_model.clone() else {
                    return Err(AgentError::Runtime(
                        "the `cli` runtime needs a model: set [model] in capstan.toml".into(),
                    ));
                };
                Arc::new(CliRunner::new(provider, model))
            }
            RuntimeKind::Claude => Arc::new(self.claude()?),
            RuntimeKind::OpenCode => {
                match OpenCodeRunner::connect(self.deps.config.opencode.clone()).await {
                    Ok(r) => Arc::new(r),
                    Err(e) if self.deps.config.opencode.fallback_to_claude => {
                        let claude = self.claude().map_err(|ce| {
                            AgentError::Runtime(format!(
                                "{e}; the fallback to Claude Code failed too: {ce}"
                            ))
                        })?;
                        events.emit(EventKind::RuntimeFallback {
                            from: RuntimeKind::OpenCode,
                            to: RuntimeKind::Claude,
                            reason: e.to_string(),
                        });
                        Arc::new(claude)
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        built.insert(kind, runner.clone());
        Ok(runner)
    }

    fn claude(&self) -> Result<ClaudeRunner, AgentError> {
        ClaudeRunner::new(
            self.deps.config.claude.clone(),
            self.deps.capstan_exe.clone(),
        )
    }
}
