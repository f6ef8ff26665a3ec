//! One unit of work for a capability, and how it ended.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::names;

/// Why a task failed. Stable strings: frontends and tests match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FailureReason {
    /// The task's input did not fit the operation (or named no known operation).
    InvalidInput,
    /// Policy, a manifest grant or a person said no.
    Denied,
    /// The capability knows the operation but does not implement it yet.
    NotImplemented,
    /// The capability ran and reported a failure.
    Failed,
    /// The run was cancelled while the task ran.
    Cancelled,
    /// The plugin trapped or panicked.
    Trap,
    /// The task ran past its deadline.
    Timeout,
    /// The plugin hit its memory, table or fuel limit.
    ResourceLimit,
    /// The component cannot serve: missing export, bad component, wrong imports.
    InvalidPlugin,
    /// No plugin serves the task's kind.
    UnsupportedCapability,
    /// The kind belongs to the retired writing workflow (`writer`, `draft`...).
    UnsupportedLegacyCapability,
    /// The capability needs a workspace and the run has none.
    WorkspaceRequired,
    /// A bounded loop gave up (e.g. retrieval stayed insufficient).
    RetryLimit,
    /// The run's cost budget (`budget_usd`) was spent.
    BudgetExceeded,
    /// The model's output stayed unusable after bounded corrections.
    InvalidModelOutput,
    /// The replica running the run stopped renewing its lease (it died or
    /// lost the database); another replica marked the run interrupted.
    LeaseExpired,
}

names!(FailureReason, "failure reason", {
    InvalidInput => "invalid-input",
    Denied => "denied",
    NotImplemented => "not-implemented",
    Failed => "failed",
    Cancelled => "cancelled",
    Trap => "trap",
    Timeout => "timeout",
    ResourceLimit => "resource-limit",
    InvalidPlugin => "invalid-plugin",
    UnsupportedCapability => "unsupported-capability",
    UnsupportedLegacyCapability => "unsupported-legacy-capability",
    WorkspaceRequired => "workspace-required",
    RetryLimit => "retry-limit",
    BudgetExceeded => "budget-exceeded",
    InvalidModelOutput => "invalid-model-output",
    LeaseExpired => "lease-expired",
});

/// A unit of work for one capability.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskRequest {
    /// The task's id within its plan (`plan.created`).
    pub id: String,
    /// The capability kind that serves it (e.g. `terminal_exec`).
    pub kind: String,
    /// The capability's operation to call.
    pub operation: String,
    /// The operation's input, a JSON object whose shape the capability defines.
    pub input: Value,
}

/// What a task that succeeded reports (`task.completed`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct TaskSuccess {
    /// One line for the feed.
    pub summary: String,
    /// The structured result (shape defined by the capability).
    pub data: Value,
}

/// Why a task failed (`task.failed`); displays as `reason: message`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, thiserror::Error, JsonSchema)]
#[error("{reason}: {message}")]
pub struct TaskFailure {
    /// The reason, from the closed set.
    pub reason: FailureReason,
    /// What went wrong and, where it helps, what to do.
    pub message: String,
}

impl TaskFailure {
    /// A failure for `reason` with the given message.
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// How a task ended: its success or its failure.
pub type TaskOutcome = Result<TaskSuccess, TaskFailure>;

/// A task in a plan, as the plan panel shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct PlanTask {
    /// Id unique within the plan; events name the task by it.
    pub id: String,
    /// The capability kind that serves it.
    pub kind: String,
    /// The capability's operation to call.
    pub operation: String,
    /// The operation's input (a JSON object).
    pub input: Value,
    /// Ids of tasks that must complete before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// One line for people: what this task is for.
    #[serde(default)]
    pub title: String,
}

/// Where a task stands, for `plan.updated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Planned, not started (waiting for its dependencies or a slot).
    Pending,
    /// Started: `task.started` was sent.
    Running,
    /// Ended with `task.completed`.
    Completed,
    /// Ended with `task.failed`.
    Failed,
    /// Never ran (`task.skipped` says why).
    Skipped,
}

names!(TaskStatus, "task status", {
    Pending => "pending",
    Running => "running",
    Completed => "completed",
    Failed => "failed",
    Skipped => "skipped",
});

/// Why a planned task did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// A task it depends on failed, or was not run because of a failure.
    SkippedDependencyFailed,
    /// Another task failed first and the run stopped scheduling (fail-fast).
    SkippedFailFast,
    /// The run was cancelled before the task could start.
    Cancelled,
    /// The plan needs a workspace and the run has none: nothing ran.
    WorkspaceRequired,
}

names!(SkipReason, "skip reason", {
    SkippedDependencyFailed => "skipped_dependency_failed",
    SkippedFailFast => "skipped_fail_fast",
    Cancelled => "cancelled",
    WorkspaceRequired => "workspace_required",
});
