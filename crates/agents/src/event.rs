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
    /// The execution the event belongs to (`exec_...`).
    pub execution_id: String,
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// Milliseconds since the execution started (monotonic).
    pub elapsed_ms: u64,
    /// The event itself, flattened: its `type` and fields sit beside the stamps.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// `type` is a dotted name, like the run events of docs/EVENTS.md.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum EventKind {
    /// The first event of an execution.
    #[serde(rename = "execution.started")]
    ExecutionStarted {
        /// How the tasks are run.
        strategy: Strategy,
        /// Why this strategy (given, or the auto-selection rule that chose it).
        strategy_reason: String,
        /// How many tasks the file holds.
        tasks: usize,
        /// The spending limit in US dollars; `None` for no limit.
        budget_usd: Option<f64>,
    },
    /// A task of the file starts.
    #[serde(rename = "task.started")]
    TaskStarted {
        /// The task's id in the task file.
        task: String,
    },
    /// One agent of a task starts on a runtime.
    #[serde(rename = "agent.started")]
    AgentStarted {
        /// The task's id in the task file.
        task: String,
        /// The agent's name within the task.
        agent: String,
        /// The runtime it runs on.
        runtime: RuntimeKind,
        /// The model asked for; `None` leaves the runtime's default.
        model: Option<String>,
    },
    /// Incremental output of a running agent.
    #[serde(rename = "progress")]
    Progress {
        /// The task's id in the task file.
        task: String,
        /// The agent's name within the task.
        agent: String,
        /// The runtime reporting it.
        runtime: RuntimeKind,
        /// What the agent did (flattened, tagged by `progress`).
        #[serde(flatten)]
        progress: Progress,
    },
    /// The prompt was over the context limit and was cut to fit.
    #[serde(rename = "context.truncated")]
    ContextTruncated {
        /// The task's id in the task file.
        task: String,
        /// The agent's name within the task.
        agent: String,
        /// The prompt's estimated size before cutting, in tokens.
        original_tokens: u64,
        /// The context limit it was cut to, in tokens.
        limit_tokens: u64,
        /// Which sections were shortened, most expendable first.
        cut: Vec<String>,
    },
    /// The prompt was over the context limit and the configured model summarised
    /// these sections (`[agents] context = "summarise"`); each summary is a step of
    /// its own (agent `summariser`), counted in the budget.
    #[serde(rename = "context.summarised")]
    ContextSummarised {
        /// The task's id in the task file.
        task: String,
        /// The agent's name within the task.
        agent: String,
        /// The prompt's estimated size before summarising, in tokens.
        original_tokens: u64,
        /// The context limit, in tokens.
        limit_tokens: u64,
        /// The sections replaced by summaries.
        summarised: Vec<String>,
    },
    /// One agent of a task ended.
    #[serde(rename = "agent.finished")]
    AgentFinished {
        /// The task's id in the task file.
        task: String,
        /// The agent's name within the task.
        agent: String,
        /// The runtime it ran on.
        runtime: RuntimeKind,
        /// How the step ended.
        status: TaskStatus,
        /// Tokens the step used, as the runtime reported them.
        usage: TokenUsage,
        /// Its cost in US dollars; `None` when the model's price is unknown.
        cost_usd: Option<f64>,
        /// What went wrong, for a step that did not complete.
        error: Option<String>,
    },
    /// A runtime failed; the step is tried again on another one.
    #[serde(rename = "runtime.retry")]
    RuntimeRetry {
        /// The task's id in the task file.
        task: String,
        /// The agent's name within the task.
        agent: String,
        /// The runtime that failed.
        from: RuntimeKind,
        /// The runtime the step runs on next.
        to: RuntimeKind,
        /// The failure that caused the retry.
        error: String,
    },
    /// A runtime could not be used at all; another one takes its place: for every
    /// task (OpenCode unreachable, Claude Code used instead; `task` is absent) or for
    /// one task, on its `retry_runtime`.
    #[serde(rename = "runtime.fallback")]
    RuntimeFallback {
        /// The task concerned; absent when the fallback holds for every task.
        #[serde(skip_serializing_if = "Option::is_none")]
        task: Option<String>,
        /// The runtime that cannot be used.
        from: RuntimeKind,
        /// The runtime used instead.
        to: RuntimeKind,
        /// Why `from` cannot be used.
        reason: String,
    },
    /// A runtime runs with a protection turned off by configuration (Claude Code with
    /// `unconfined_builtin_tools`: its built-in tools run on the host, outside Capstan's
    /// sandbox). Emitted once per execution that uses the runtime, before its first step.
    #[serde(rename = "security.warning")]
    SecurityWarning {
        /// The runtime concerned.
        runtime: RuntimeKind,
        /// What is off, and which setting turned it off.
        message: String,
    },
    /// A task of the file ended.
    #[serde(rename = "task.finished")]
    TaskFinished {
        /// The task's id in the task file.
        task: String,
        /// How it ended.
        status: TaskStatus,
    },
    /// A task did not run because a prerequisite did not complete.
    #[serde(rename = "task.skipped")]
    TaskSkipped {
        /// The task's id in the task file.
        task: String,
        /// Always [`TaskStatus::SkippedDependencyFailed`].
        status: TaskStatus,
        /// The prerequisite that did not complete.
        failed_dependency: String,
    },
    /// The next step would take spending over the budget. An approval-style event: the
    /// [`crate::BudgetGate`] answers it, and [`EventKind::BudgetDecision`] says how.
    #[serde(rename = "budget.warning")]
    BudgetWarning {
        /// US dollars spent so far.
        spent_usd: f64,
        /// The estimated cost of the next step, in US dollars.
        next_step_usd: f64,
        /// The execution's budget, in US dollars.
        budget_usd: f64,
        /// The task of the next step.
        task: String,
        /// The agent of the next step.
        agent: String,
    },
    /// The gate's answer to the preceding `budget.warning`.
    #[serde(rename = "budget.decision")]
    BudgetDecision {
        /// Whether the step runs (`false` stops the execution).
        proceed: bool,
    },
    /// The last event, before the result.
    #[serde(rename = "execution.finished")]
    ExecutionFinished {
        /// How the execution ended.
        status: ExecutionStatus,
        /// Tokens over all steps.
        total_tokens: TokenUsage,
        /// US dollars over all steps whose model has a price.
        total_cost_usd: f64,
        /// Whether every model used has a price (else the total is a lower bound).
        cost_complete: bool,
        /// Wall-clock time of the execution, in milliseconds.
        duration_ms: u64,
    },
}

/// What an agent did, as far as its runtime tells.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "progress", rename_all = "snake_case")]
pub enum Progress {
    /// Generated text (a delta or a whole block, as the runtime streams it).
    Text {
        /// The text, as streamed.
        text: String,
    },
    /// The agent called a tool.
    ToolUse {
        /// The tool's name, as the runtime names it.
        tool: String,
        /// Its input, as text (usually JSON).
        input: String,
    },
    /// A tool answered.
    ToolResult {
        /// The tool's name, or the id of the call it answers (Claude Code).
        tool: String,
        /// Its output, as text.
        output: String,
        /// Whether the runtime marked the result as an error.
        is_error: bool,
    },
    /// Anything else worth showing (session id, runtime status).
    Status {
        /// The line to show.
        message: String,
    },
}

/// Stamps and delivers events for one execution.
#[derive(Clone)]
pub struct Emitter {
    execution_id: String,
    start: Instant,
    sink: EventSink,
}

impl Emitter {
    /// An emitter for `execution_id` whose clock starts now.
    pub fn new(execution_id: String, sink: EventSink) -> Self {
        Self {
            execution_id,
            start: Instant::now(),
            sink,
        }
    }

    /// The execution's id, as stamped on every event.
    pub fn execution_id(&self) -> &str {
        &self.execution_id
    }

    /// Milliseconds since the emitter was made (monotonic).
    pub fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Stamps `kind` and hands it to the sink, on the calling thread.
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
