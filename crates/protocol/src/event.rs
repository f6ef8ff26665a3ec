//! The event protocol: what a run tells its frontends. Every event travels in
//! an [`Envelope`] (`{seq, run_id, ts, type, ...}`); the names are the
//! contract frontends and tests match on (`task.failed`, `run.cancelled`...).
//! docs/EVENTS.md is the reference for frontends; docs/events.schema.json is
//! generated from these types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::changes::{ChangeSetState, ChangedFile};
use crate::names::names;
use crate::risk::Risk;
use crate::task::{FailureReason, PlanTask, SkipReason, TaskStatus};
use crate::usage::Usage;

/// Version of the event protocol; bumped on any incompatible change.
pub const PROTOCOL_VERSION: &str = "0.1";

/// What the host loop decided at one step of its analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepDecision {
    /// Search the workspace's knowledge base (again).
    Retrieve,
    /// Answer from what is known.
    Answer,
    /// Run a plan of tasks.
    Plan,
}

names!(StepDecision, "step decision", {
    Retrieve => "retrieve",
    Answer => "answer",
    Plan => "plan",
});
/// A passage the answer cites.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Citation {
    pub n: u32,
    pub path: String,
    pub heading: String,
    pub line_start: u32,
    pub line_end: u32,
}

/// Every event a run emits. `type` carries the dotted name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
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
        decision: StepDecision,
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
    TaskSkipped { task_id: String, reason: SkipReason },
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
        risk: Risk,
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
        state: ChangeSetState,
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

impl Event {
    /// The event's dotted name, as in the envelope's `type` field.
    pub const fn name(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "run.started",
            Event::HostAnalysis { .. } => "host.analysis",
            Event::RetrievalStarted { .. } => "retrieval.started",
            Event::RetrievalCompleted { .. } => "retrieval.completed",
            Event::PlanCreated { .. } => "plan.created",
            Event::PlanUpdated { .. } => "plan.updated",
            Event::TaskSkipped { .. } => "task.skipped",
            Event::WorkspaceRequired { .. } => "workspace.required",
            Event::ApprovalRequested { .. } => "approval.requested",
            Event::ApprovalDecided { .. } => "approval.decided",
            Event::TerminalStep { .. } => "terminal.step",
            Event::Usage { .. } => "usage",
            Event::BudgetWarning { .. } => "budget.warning",
            Event::ResponseDelta { .. } => "response.delta",
            Event::ResponseCompleted { .. } => "response.completed",
            Event::RunCompleted { .. } => "run.completed",
            Event::RunFailed { .. } => "run.failed",
            Event::RunCancelled { .. } => "run.cancelled",
            Event::TaskStarted { .. } => "task.started",
            Event::TaskCompleted { .. } => "task.completed",
            Event::TaskFailed { .. } => "task.failed",
            Event::Activity { .. } => "activity",
            Event::Progress { .. } => "progress",
            Event::CapabilityStatus { .. } => "capability.status",
            Event::WorkspaceChanges { .. } => "workspace.changes",
        }
    }
}

/// What travels on the wire.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
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
        assert_eq!(env.event.name(), "task.failed");
        assert_eq!(json["reason"], "unsupported-legacy-capability");
        assert_eq!(json["seq"], 3);
        let back: Envelope = serde_json::from_value(json).unwrap();
        assert_eq!(back, env);
    }
}
