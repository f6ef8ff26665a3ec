//! What an execution returns: per task its agents' contributions, and metadata for the
//! whole run.

use capstan_models::Usage;
use serde::{Deserialize, Serialize};

use crate::{RuntimeKind, Strategy};

/// How one task (or one agent step) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Ran to the end and produced its output.
    Completed,
    /// The runtime or agent reported a failure (see the `error`).
    Failed,
    /// The execution's timeout fired while this ran (or before it could start).
    Timeout,
    /// The user (or the budget gate) cancelled while this ran or before it started.
    Cancelled,
    /// Not run: a prerequisite did not complete.
    SkippedDependencyFailed,
}

impl TaskStatus {
    /// The serialised spelling (`skipped_dependency_failed`...).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Timeout => "timeout",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::SkippedDependencyFailed => "skipped_dependency_failed",
        }
    }
}

/// How the whole execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Every task completed.
    Completed,
    /// No task completed.
    Failed,
    /// Some tasks completed, others failed or were skipped.
    Partial,
    /// The timeout fired; results so far are returned.
    Timeout,
    /// Cancelled (by the user or at a budget warning); results so far are returned.
    Cancelled,
}

impl ExecutionStatus {
    /// The serialised spelling (`partial`...).
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Completed => "completed",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::Partial => "partial",
            ExecutionStatus::Timeout => "timeout",
            ExecutionStatus::Cancelled => "cancelled",
        }
    }
}

/// Input and output tokens. `estimated` is true when any number in the sum was
/// estimated (the runtime reported none), so budgets built on it are approximate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output (generated) tokens.
    pub output: u64,
    /// `input + output`, kept in step by [`TokenUsage::add`] and [`TokenUsage::merge`].
    pub total: u64,
    /// Whether any number in the sum was estimated.
    pub estimated: bool,
}

impl TokenUsage {
    /// Adds one model call's usage.
    pub fn add(&mut self, u: &Usage) {
        self.input += u.input_tokens;
        self.output += u.output_tokens;
        self.total = self.input + self.output;
        self.estimated |= u.estimated;
    }

    /// Adds another sum (e.g. a step's into its task's).
    pub fn merge(&mut self, other: &TokenUsage) {
        self.input += other.input;
        self.output += other.output;
        self.total = self.input + self.output;
        self.estimated |= other.estimated;
    }
}

impl From<Usage> for TokenUsage {
    fn from(u: Usage) -> Self {
        let mut t = TokenUsage::default();
        t.add(&u);
        t
    }
}

/// One agent's contribution to a task (an attempt on one runtime).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentStep {
    /// The agent's name (its role, e.g. `dev`, `reviewer`).
    pub agent: String,
    /// The runtime the attempt ran on.
    pub runtime: RuntimeKind,
    /// The model asked for; `None` left the runtime's default.
    pub model: Option<String>,
    /// How the attempt ended.
    pub status: TaskStatus,
    /// Everything the agent produced, also when it failed or was stopped (partial).
    pub output: String,
    /// Tokens the attempt used.
    pub token_usage: TokenUsage,
    /// `None` when the model's price is unknown.
    pub cost: Option<f64>,
    /// What went wrong, with the runtime's own context (stderr tail, API error).
    pub error: Option<String>,
    /// Wall-clock time of the attempt, in milliseconds.
    pub duration_ms: u64,
}

/// One task's result. `output` is the last agent's output (the dev's, under `multi`);
/// `steps` keeps every agent's contribution in order, failed attempts included.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    /// The task's id in the task file.
    pub task_id: String,
    /// How the task ended.
    pub status: TaskStatus,
    /// The last agent's output (empty for a task that never ran).
    pub output: String,
    /// Tokens over all its steps.
    pub token_usage: TokenUsage,
    /// US dollars over its steps; `None` when any step's cost is unknown.
    pub cost: Option<f64>,
    /// Ids of the tasks it waited for, as in the task file.
    pub depends_on: Vec<String>,
    /// Every agent attempt, in order, failed ones included.
    pub steps: Vec<AgentStep>,
    /// Why it failed or was skipped; `None` when it completed.
    pub error: Option<String>,
}

/// The execution's metadata.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metadata {
    /// The execution's id (`exec_...`), as on its events.
    pub execution_id: String,
    /// How the tasks were run.
    pub strategy: Strategy,
    /// Agents (roles) that ran, in first-use order.
    pub agents: Vec<String>,
    /// Runtimes that ran a step, in first-use order.
    pub runtimes: Vec<RuntimeKind>,
    /// Wall-clock time of the execution, in milliseconds.
    pub duration_ms: u64,
    /// Tokens over all tasks.
    pub total_tokens: TokenUsage,
    /// Sum of the steps whose cost is known.
    pub total_cost: f64,
    /// `false` when a step's model had no price: `total_cost` is then a lower bound.
    pub cost_complete: bool,
    /// The spending limit it ran under, in US dollars; `None` for none.
    pub budget_usd: Option<f64>,
    /// How it ended.
    pub status: ExecutionStatus,
}

/// Everything an execution returns. `tasks` is in dependency (topological) order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutionResult {
    /// What ran, how long, at what cost, and how it ended.
    pub metadata: Metadata,
    /// One result per task of the file, skipped ones included.
    pub tasks: Vec<TaskResult>,
}

impl ExecutionResult {
    /// The result of the task with this id; `None` when the file has no such task.
    pub fn task(&self, id: &str) -> Option<&TaskResult> {
        self.tasks.iter().find(|t| t.task_id == id)
    }
}
