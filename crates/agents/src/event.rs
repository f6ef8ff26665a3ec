//! What an execution reports while it runs. The host turns these into terminal output,
//! JSON lines or protocol events; the crate only calls the sink.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::result::{TaskStatus, TokenUsage};
use crate::{ExecutionStatus, RuntimeKind, Strategy};

/// Receives every event, from any task's thread: keep it quick.
pub type EventSink = Arc<dyn Fn(AgentEvent) + Send + Sync>;

/// One event. `elapsed_ms` comes from a monotonic clock started with the execution, so
/// events of concurrent tasks can be ordered (task A started before task B finished).
#[derive(Debug, Clone, Serialize)]
pub struct AgentEvent {
    pub execution_id: String,
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// Milliseconds since the execution started (monotonic).
    pub elapsed_ms: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// `type` is a dotted name, like the run events of docs/EVENTS.md.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum EventKind {
    #[serde(rename = "execution.started")]
    ExecutionStarted {
        strategy: Strategy,
        /// Why this strategy (given, or the auto-selection rule that chose it).
        strategy_reason: String,
        tasks: usize,
        budget_usd: Option<f64>,
    },
    #[serde(rename = "task.started")]
    TaskStarted { task: String },
    /// One agent of a task starts on a runtime.
    #[serde(rename = "agent.started")]
    AgentStarted {
        task: String,
        agent: String,
        runtime: RuntimeKind,
        model: Option<String>,
    },
    /// Incremental output of a running agent.
    #[serde(rename = "progress")]
    Progress {
        task: String,
        agent: String,
        runtime: RuntimeKind,
        #[serde(flatten)]
        progress: Progress,
    },
    /// The prompt was over the context limit and was cut to fit.
    #[serde(rename = "context.truncated")]
    ContextTruncated {
        task: String,
        agent: String,
        original_tokens: u64,
        limit_tokens: u64,
        /// Which sections were shortened, most expendable first.
        cut: Vec<String>,
    },
    /// The prompt was over the context limit and the configured model summarised
    /// these sections (`[agents] context = "summarise"`); each summary is a step of
    /// its own (agent `summariser`), counted in the budget.
    #[serde(rename = "context.summarised")]
    ContextSummarised {
        task: String,
        agent: String,
        original_tokens: u64,
        limit_tokens: u64,
        summarised: Vec<String>,
    },
    #[serde(rename = "agent.finished")]
    AgentFinished {
        task: String,
        agent: String,
        runtime: RuntimeKind,
        status: TaskStatus,
        usage: TokenUsage,
        cost_usd: Option<f64>,
        error: Option<String>,
    },
    /// A runtime failed; the step is tried again on another one.
    #[serde(rename = "runtime.retry")]
    RuntimeRetry {
        task: String,
        agent: String,
        from: RuntimeKind,
        to: RuntimeKind,
        error: String,
    },
    /// A runtime could not be used at all; another one takes its place: for every
    /// task (OpenCode unreachable, Claude Code used instead; `task` is absent) or for
    /// one task, on its `retry_runtime`.
    #[serde(rename = "runtime.fallback")]
    RuntimeFallback {
        #[serde(skip_serializing_if = "Option::is_none")]
        task: Option<String>,
        from: RuntimeKind,
        to: RuntimeKind,
        reason: String,
    },
    #[serde(rename = "task.finished")]
    TaskFinished { task: String, status: TaskStatus },
    /// A task did not run because a prerequisite did not complete.
    #[serde(rename = "task.skipped")]
    TaskSkipped {
        task: String,
        status: TaskStatus,
        failed_dependency: String,
    },
    /// The next step would take spending over the budget. An approval-style event: the
    /// [`crate::BudgetGate`] answers it, and [`EventKind::BudgetDecision`] says how.
    #[serde(rename = "budget.warning")]
    BudgetWarning {
        spent_usd: f64,
        next_step_usd: f64,
        budget_usd: f64,
        task: String,
        agent: String,
    },
    #[serde(rename = "budget.decision")]
    BudgetDecision { proceed: bool },
    #[serde(rename = "execution.finished")]
    ExecutionFinished {
        status: ExecutionStatus,
        total_tokens: TokenUsage,
        total_cost_usd: f64,
        cost_complete: bool,
        duration_ms: u64,
    },
}

/// What an agent did, as far as its runtime tells.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "progress", rename_all = "snake_case")]
pub enum Progress {
    /// Generated text (a delta or a whole block, as the runtime streams it).
    Text { text: String },
    /// The agent called a tool.
    ToolUse { tool: String, input: String },
    /// A tool answered.
    ToolResult {
        tool: String,
        output: String,
        is_error: bool,
    },
    /// Anything else worth showing (session id, runtime status).
    Status { message: String },
}

/// Stamps and delivers events for one execution.
#[derive(Clone)]
pub struct Emitter {
    execution_id: String,
    start: Instant,
    sink: EventSink,
}

impl Emitter {
    pub fn new(execution_id: String, sink: EventSink) -> Self {
        Self {
            execution_id,
            start: Instant::now(),
            sink,
        }
    }

    pub fn execution_id(&self) -> &str {
        &self.execution_id
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub fn emit(&self, kind: EventKind) {
        let ts_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        (self.sink)(AgentEvent {
            execution_id: self.execution_id.clone(),
            ts_ms,
            elapsed_ms: self.elapsed_ms(),
            kind,
        });
    }
}
