//! The event protocol: what a run tells its frontends, as serde types with no
//! logic. Every event travels in an [`Envelope`] (`{seq, run_id, ts, type, ...}`);
//! the names follow the requirement seeds (`task.failed`, `run.cancelled`, ...).
//! docs/EVENTS.md is the reference for frontends.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the event protocol; bumped on any incompatible change.
pub const PROTOCOL_VERSION: &str = "0.1";

/// Why a task failed. Stable strings: frontends and tests match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    BudgetExceeded,
    /// The model's output stayed unusable after bounded corrections.
    InvalidModelOutput,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidInput => "invalid-input",
            Self::Denied => "denied",
            Self::NotImplemented => "not-implemented",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Trap => "trap",
            Self::Timeout => "timeout",
            Self::ResourceLimit => "resource-limit",
            Self::InvalidPlugin => "invalid-plugin",
            Self::UnsupportedCapability => "unsupported-capability",
            Self::UnsupportedLegacyCapability => "unsupported-legacy-capability",
            Self::WorkspaceRequired => "workspace-required",
            Self::RetryLimit => "retry-limit",
            Self::BudgetExceeded => "budget-exceeded",
            Self::InvalidModelOutput => "invalid-model-output",
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A unit of work for one capability.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRequest {
    pub id: String,
    pub kind: String,
    pub operation: String,
    pub input: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskSuccess {
    pub summary: String,
    pub data: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct TaskFailure {
    pub reason: FailureReason,
    pub message: String,
}

impl TaskFailure {
    pub fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

pub type TaskOutcome = Result<TaskSuccess, TaskFailure>;

/// A task in a plan, as the plan panel shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PlanTask {
    pub id: String,
    pub kind: String,
    pub operation: String,
    pub input: Value,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// One line for people: what this task is for.
    #[serde(default)]
    pub title: String,
}

/// Where a task stands, for `plan.updated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Pending,
    Running,
    Completed,
    Failed,
    Skipped,
}

/// A passage the answer cites.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Citation {
    pub n: u32,
    pub path: String,
    pub heading: String,
    pub line_start: u32,
    pub line_end: u32,
}

/// Token counts and cost, per model call or per run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// True when a provider reported no usage and Capstan estimated it.
    #[serde(default)]
    pub estimated: bool,
    /// USD; absent when the model has no price in the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// Every event a run emits. `type` carries the dotted name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "run.started")]
    RunStarted {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace: Option<String>,
        model: String,
    },
    /// The host's reading of the situation at one step of its loop.
    #[serde(rename = "host.analysis")]
    HostAnalysis {
        step: u32,
        /// `retrieve`, `answer` or `plan`.
        decision: String,
        reason: String,
    },
    #[serde(rename = "retrieval.started")]
    RetrievalStarted {
        attempt: u32,
        query: String,
        variants: Vec<String>,
        /// The user's message when `query` is a follow-up rewritten to stand
        /// alone with the previous question.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rewritten_from: Option<String>,
    },
    #[serde(rename = "retrieval.completed")]
    RetrievalCompleted {
        attempt: u32,
        hits: u32,
        sufficient: bool,
    },
    #[serde(rename = "plan.created")]
    PlanCreated { tasks: Vec<PlanTask> },
    #[serde(rename = "plan.updated")]
    PlanUpdated { task_id: String, status: TaskStatus },
    #[serde(rename = "task.skipped")]
    TaskSkipped {
        task_id: String,
        /// `skipped_dependency_failed` or `cancelled`.
        reason: String,
    },
    /// An executable capability was planned and the run has no workspace.
    #[serde(rename = "workspace.required")]
    WorkspaceRequired {
        task_ids: Vec<String>,
        message: String,
    },
    #[serde(rename = "approval.requested")]
    ApprovalRequested {
        approval_id: String,
        task_id: String,
        action: String,
        #[serde(default)]
        command: String,
        #[serde(default)]
        cwd: String,
        risk: String,
        reasons: Vec<String>,
    },
    #[serde(rename = "approval.decided")]
    ApprovalDecided {
        approval_id: String,
        /// `approved`, `approved-for-session`, `denied`, `aborted`, `expired`.
        decision: String,
        /// `user`, `policy` or `flag`.
        by: String,
        /// For a person's answer, the door it came through: `terminal`,
        /// `stdio`, `http-token`, `http-cookie`, `http-no-token`, `mcp-client`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        via: Option<String>,
    },
    /// One command of `terminal_exec`, reported by the host that ran it.
    #[serde(rename = "terminal.step")]
    TerminalStep {
        task_id: String,
        command: String,
        cwd: String,
        risk: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        duration_ms: u64,
        output_tail: String,
        truncated_bytes: u64,
        timed_out: bool,
    },
    /// What a task changed in the workspace (a captured command, a plugin
    /// file write): one change set, its state (`pending` while held for
    /// review, `applied`, `discarded` when a review was denied, `undone`).
    #[serde(rename = "workspace.changes")]
    WorkspaceChanges {
        task_id: String,
        /// The change set's id (`capstan changes`, `capstan undo`).
        change_set: String,
        state: String,
        /// The command line or plugin operation that made the changes.
        source: String,
        /// Why the set went to review (review mode, protected paths).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        review_reasons: Vec<String>,
        bytes_before: u64,
        bytes_after: u64,
        files: Vec<ChangedFile>,
    },
    #[serde(rename = "usage")]
    Usage {
        #[serde(flatten)]
        usage: Usage,
        model: String,
    },
    #[serde(rename = "budget.warning")]
    BudgetWarning {
        spent_usd: f64,
        limit_usd: f64,
        message: String,
    },
    #[serde(rename = "response.delta")]
    ResponseDelta { text: String },
    #[serde(rename = "response.completed")]
    ResponseCompleted {
        text: String,
        citations: Vec<Citation>,
    },
    #[serde(rename = "run.completed")]
    RunCompleted { usage: Usage },
    #[serde(rename = "run.failed")]
    RunFailed {
        reason: FailureReason,
        message: String,
        usage: Usage,
    },
    #[serde(rename = "run.cancelled")]
    RunCancelled { usage: Usage },
    #[serde(rename = "task.started")]
    TaskStarted {
        task_id: String,
        kind: String,
        operation: String,
    },
    #[serde(rename = "task.completed")]
    TaskCompleted {
        task_id: String,
        summary: String,
        data: Value,
    },
    #[serde(rename = "task.failed")]
    TaskFailed {
        task_id: String,
        reason: FailureReason,
        message: String,
    },
    /// Plain words for the activity feed.
    #[serde(rename = "activity")]
    Activity {
        #[serde(skip_serializing_if = "Option::is_none", default)]
        task_id: Option<String>,
        kind: String,
        message: String,
        #[serde(skip_serializing_if = "Value::is_null", default)]
        data: Value,
    },
    #[serde(rename = "progress")]
    Progress {
        task_id: String,
        done: u64,
        total: u64,
        unit: String,
    },
    /// A capability's availability, e.g. an operation that is not implemented.
    #[serde(rename = "capability.status")]
    CapabilityStatus {
        task_id: String,
        kind: String,
        status: String,
        message: String,
    },
}

/// What travels on the wire.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Envelope {
    pub seq: u64,
    pub run_id: String,
    /// RFC 3339 with milliseconds, UTC.
    pub ts: String,
    #[serde(flatten)]
    pub event: Event,
}

/// Receives events as they happen. Implementations must not block: they are
/// called from inside plugin calls.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: Event);
}

/// Drops every event (for `describe` calls and benchmarks).
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: Event) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_dotted_type_names_and_kebab_reasons() {
        let env = Envelope {
            seq: 3,
            run_id: "r1".into(),
            ts: "2026-01-01T00:00:00.000Z".into(),
            event: Event::TaskFailed {
                task_id: "t1".into(),
                reason: FailureReason::UnsupportedLegacyCapability,
                message: "writer".into(),
            },
        };
        let json = serde_json::to_value(&env).unwrap();
        assert_eq!(json["type"], "task.failed");
        assert_eq!(json["reason"], "unsupported-legacy-capability");
        assert_eq!(json["seq"], 3);
        let back: Envelope = serde_json::from_value(json).unwrap();
        assert_eq!(back, env);
    }
}

/// One path of a `workspace.changes` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangedFile {
    pub path: String,
    /// `created`, `modified`, `deleted`, `renamed`, `mode_changed`.
    pub kind: String,
    /// `file`, `dir` or `symlink`.
    pub entry: String,
    /// Renamed: the old path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_size: Option<u64>,
    /// Permission bits, octal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_mode: Option<String>,
    /// Unified diff (text files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// One line for binary and office files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}
