//! What an execution returns: per task its agents' contributions, and metadata for the
//! whole run.

use capstan_models::Usage;
use serde::{Deserialize, Serialize};

use crate::{RuntimeKind, Strategy};

/// How one task (or one agent step) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Completed,
    Failed,
    /// The execution's timeout fired while this ran (or before it could start).
    Timeout,
    /// The user (or the budget gate) cancelled while this ran or before it started.
    Cancelled,
    /// Not run: a prerequisite did not complete.
    SkippedDependencyFailed,
}

impl TaskStatus {
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
    pub input: u64,
    pub output: u64,
    pub total: u64,
    pub estimated: bool,
}

impl TokenUsage {
    pub fn add(&mut self, u: &Usage) {
        self.input += u.input_tokens;
        self.output += u.output_tokens;
        self.total = self.input + self.output;
        self.estimated |= u.estimated;
    }

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
    pub agent: String,
    pub runtime: RuntimeKind,
    pub model: Option<String>,
    pub status: TaskStatus,
    /// Everything the agent produced, also when it failed or was stopped (partial).
    pub output: String,
    pub token_usage: TokenUsage,
    /// `None` when the model's price is unknown.
    pub cost: Option<f64>,
    /// What went wrong, with the runtime's own context (stderr tail, API error).
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// One task's result. `output` is the last agent's output (the dev's, under `multi`);
/// `steps` keeps every agent's contribution in order, failed attempts included.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    pub task_id: String,
    pub status: TaskStatus,
    pub output: String,
    pub token_usage: TokenUsage,
    pub cost: Option<f64>,
    pub depends_on: Vec<String>,
    pub steps: Vec<AgentStep>,
    pub error: Option<String>,
}

/// The execution's metadata.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metadata {
    pub execution_id: String,
    pub strategy: Strategy,
    /// Agents (roles) that ran, in first-use order.
    pub agents: Vec<String>,
    /// Runtimes that ran a step, in first-use order.
    pub runtimes: Vec<RuntimeKind>,
    pub duration_ms: u64,
    pub total_tokens: TokenUsage,
    /// Sum of the steps whose cost is known.
    pub total_cost: f64,
    /// `false` when a step's model had no price: `total_cost` is then a lower bound.
    pub cost_complete: bool,
    pub budget_usd: Option<f64>,
    pub status: ExecutionStatus,
}

/// Everything an execution returns. `tasks` is in dependency (topological) order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutionResult {
    pub metadata: Metadata,
    pub tasks: Vec<TaskResult>,
}

impl ExecutionResult {
    pub fn task(&self, id: &str) -> Option<&TaskResult> {
        self.tasks.iter().find(|t| t.task_id == id)
    }
}
