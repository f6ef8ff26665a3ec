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
use crate::network::{ConnectProtocol, ConnectVerdict, DecidedBy};
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
    /// The marker's number in the answer text (`[n]`), from 1.
    pub n: u32,
    /// Workspace-relative path of the cited file, `/`-separated.
    pub path: String,
    /// The heading of the section the passage sits under (empty when none).
    pub heading: String,
    /// First cited line, 1-based.
    pub line_start: u32,
    /// Last cited line, 1-based and inclusive.
    pub line_end: u32,
}

/// Every event a run emits. `type` carries the dotted name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(tag = "type")]
pub enum Event {
    /// The first event of every run.
    #[serde(rename = "run.started")]
    RunStarted {
        /// The user's message, as given.
        message: String,
        /// The session the run belongs to; absent for a one-off run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
        /// Absolute path of the bound workspace folder; absent when none is bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace: Option<String>,
        /// Id of the model that drives the run (`offline` or a provider's model id).
        model: String,
    },
    /// A replica took the run over after the replica running it died, and
    /// continues it from its last completed task: what had completed keeps its
    /// result, what was running starts again, the rest of the plan follows.
    #[serde(rename = "run.resumed")]
    RunResumed {
        /// Tasks of the plan that had completed; they do not run again.
        completed: Vec<String>,
        /// Tasks that were running when the replica died, each safe to repeat
        /// (a knowledge-base search, read-only commands, or a command that was
        /// still waiting for approval); they run again from the start.
        restarted: Vec<String>,
        /// What happened, in plain words for the feed.
        message: String,
    },
    /// The host's reading of the situation at one step of its loop.
    #[serde(rename = "host.analysis")]
    HostAnalysis {
        /// The loop's step number, from 1 (at most the configured `max_steps`).
        step: u32,
        /// What the host does next.
        decision: StepDecision,
        /// Why, in plain words for the feed.
        reason: String,
    },
    /// A knowledge-base search begins.
    #[serde(rename = "retrieval.started")]
    RetrievalStarted {
        /// Which search of this run it is, from 1.
        attempt: u32,
        /// The query searched for.
        query: String,
        /// Reformulations of `query` searched alongside it (may be empty).
        variants: Vec<String>,
        /// The user's message when `query` is a follow-up rewritten to stand
        /// alone with the previous question.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rewritten_from: Option<String>,
    },
    /// A knowledge-base search ended.
    #[serde(rename = "retrieval.completed")]
    RetrievalCompleted {
        /// The `attempt` of the matching `retrieval.started`.
        attempt: u32,
        /// How many passages it found.
        hits: u32,
        /// Whether the passages answer the question (the model's reading, else
        /// retrieval's word coverage); drives the host loop.
        sufficient: bool,
    },
    /// The plan of tasks the run will execute: the plan panel's content.
    #[serde(rename = "plan.created")]
    PlanCreated {
        /// Every task of the plan, in plan order.
        tasks: Vec<PlanTask>,
    },
    /// A task of the plan changed status.
    #[serde(rename = "plan.updated")]
    PlanUpdated {
        /// Id of the task, as in `plan.created`.
        task_id: String,
        /// Its new status.
        status: TaskStatus,
    },
    /// A task of the plan never ran.
    #[serde(rename = "task.skipped")]
    TaskSkipped {
        /// Id of the task, as in `plan.created`.
        task_id: String,
        /// Why it did not run.
        reason: SkipReason,
    },
    /// An executable capability was planned and the run has no workspace.
    #[serde(rename = "workspace.required")]
    WorkspaceRequired {
        /// The planned tasks that need a workspace; none of them ran.
        task_ids: Vec<String>,
        /// What to do: bind a workspace (`-w`, `workspace` in the request).
        message: String,
    },
    /// An action needs a decision (a person's, a policy's or a flag's) before it runs.
    #[serde(rename = "approval.requested")]
    ApprovalRequested {
        /// Id to answer with (`POST /v1/approvals/{approval_id}`, `approval.decide`).
        approval_id: String,
        /// The task that asks.
        task_id: String,
        /// What kind of action: `exec`, `workspace.changes`, `network.connect`,
        /// or a plugin's own.
        action: String,
        /// The command line to run (empty when the action is not a command).
        #[serde(default)]
        command: String,
        /// Workspace-relative directory it would run in (empty when not a command).
        #[serde(default)]
        cwd: String,
        /// How much harm the action could do.
        risk: Risk,
        /// Why it needs approval (classifier and policy), each said once.
        reasons: Vec<String>,
        /// When the person may also answer `approved-always` ("always for
        /// this workspace"): the rule that answer writes into the user's
        /// capstan.toml under `[network.workspace."<root>"] allow` (e.g.
        /// `api.example.com` or `api.example.com:8443`). Only a
        /// `network.connect` in a workspace offers it; absent, that answer is
        /// refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        always: Option<String>,
    },
    /// How an `approval.requested` was answered.
    #[serde(rename = "approval.decided")]
    ApprovalDecided {
        /// The `approval_id` of the request.
        approval_id: String,
        /// `approved`, `approved-for-session`, `approved-always`, `denied`,
        /// `aborted`, `expired`.
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
        /// The task that ran it.
        task_id: String,
        /// The command line, as run.
        command: String,
        /// Workspace-relative directory it ran in.
        cwd: String,
        /// Its classified risk, in the wire spelling of [`Risk`].
        risk: String,
        /// What it was granted, which the sandbox enforced.
        grant: crate::Grant,
        /// Exit status; absent when it was killed by a signal or never exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// The signal that killed it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// Wall-clock time it ran, in milliseconds.
        duration_ms: u64,
        /// The last 2,000 bytes of stdout then stderr (lossy UTF-8).
        output_tail: String,
        /// Output bytes dropped by the sandbox's capture limit (0 when none).
        truncated_bytes: u64,
        /// Whether it was killed for running past its timeout.
        timed_out: bool,
    },
    /// What a task changed in the workspace (a captured command, a plugin
    /// file write): one change set, its state (`pending` while held for
    /// review, `applied`, `discarded` when a review was denied, `undone`).
    #[serde(rename = "workspace.changes")]
    WorkspaceChanges {
        /// The task whose command or file write made the changes.
        task_id: String,
        /// The change set's id (`capstan changes`, `capstan undo`).
        change_set: String,
        /// Where the set stands: held for review, applied, discarded or undone.
        state: ChangeSetState,
        /// The command line or plugin operation that made the changes.
        source: String,
        /// Why the set went to review (review mode, protected paths).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        review_reasons: Vec<String>,
        /// Total size of the changed files before, in bytes.
        bytes_before: u64,
        /// Total size of the changed files after, in bytes.
        bytes_after: u64,
        /// One entry per changed path.
        files: Vec<ChangedFile>,
    },
    /// One connection a sandboxed command asked the egress proxy for,
    /// allowed or not (`[network]`).
    #[serde(rename = "network.connect")]
    NetworkConnect {
        /// The task whose command asked.
        task_id: String,
        /// The host name (or IP literal) the command asked for.
        host: String,
        /// The destination port.
        port: u16,
        /// How the command spoke to the proxy.
        protocol: ConnectProtocol,
        /// Whether the connection was let through.
        verdict: ConnectVerdict,
        /// What settled the verdict.
        decided_by: DecidedBy,
        /// The `[network]` rule that matched, as written in the policy; absent when none did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        /// Why it was denied (naming the rule to add), or why an allowed one failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The resolved address connected to (`ip:port`); absent when none was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        address: Option<String>,
        /// The header of a brokered credential the proxy set on this
        /// connection's requests (never its value).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        credential: Option<String>,
        /// Bytes sent from the command to the destination (final: the event
        /// is sent when the connection ends).
        bytes_up: u64,
        /// Bytes received from the destination.
        bytes_down: u64,
        /// How long the connection lasted, in milliseconds.
        duration_ms: u64,
    },
    /// One model call's tokens and cost.
    #[serde(rename = "usage")]
    Usage {
        /// Tokens and cost of this call (flattened into the event).
        #[serde(flatten)]
        usage: Usage,
        /// Id of the model called.
        model: String,
    },
    /// 80% of the run's budget has been spent.
    #[serde(rename = "budget.warning")]
    BudgetWarning {
        /// US dollars spent so far in the run.
        spent_usd: f64,
        /// The run's budget, in US dollars.
        limit_usd: f64,
        /// The warning in plain words.
        message: String,
    },
    /// A piece of the answer as it streams; the pieces, in order, make the answer.
    #[serde(rename = "response.delta")]
    ResponseDelta {
        /// Answer text to append (Markdown).
        text: String,
    },
    /// The whole answer, after its last `response.delta`.
    #[serde(rename = "response.completed")]
    ResponseCompleted {
        /// The full answer (Markdown), with `[n]` citation markers.
        text: String,
        /// The passages the markers in `text` refer to; only those cited.
        citations: Vec<Citation>,
    },
    /// Terminal: the run ended with an answer.
    #[serde(rename = "run.completed")]
    RunCompleted {
        /// Total tokens and cost of the run.
        usage: Usage,
    },
    /// Terminal: the run failed.
    #[serde(rename = "run.failed")]
    RunFailed {
        /// The reason, from the closed set in docs/EVENTS.md.
        reason: FailureReason,
        /// What went wrong, in plain words.
        message: String,
        /// Total tokens and cost of the run up to the failure.
        usage: Usage,
    },
    /// Terminal: the run was cancelled (by a person, a dropped stream or end of input).
    #[serde(rename = "run.cancelled")]
    RunCancelled {
        /// Total tokens and cost of the run up to the cancellation.
        usage: Usage,
    },
    /// A capability call of the plan begins.
    #[serde(rename = "task.started")]
    TaskStarted {
        /// Id of the task, as in `plan.created`.
        task_id: String,
        /// The capability kind that runs it (e.g. `terminal_exec`, `local_kb_retrieval`).
        kind: String,
        /// The capability's operation called.
        operation: String,
    },
    /// A task succeeded.
    #[serde(rename = "task.completed")]
    TaskCompleted {
        /// Id of the task, as in `plan.created`.
        task_id: String,
        /// One line for the feed.
        summary: String,
        /// The capability's structured result (shape depends on the capability).
        data: Value,
    },
    /// A task failed; its dependants are skipped.
    #[serde(rename = "task.failed")]
    TaskFailed {
        /// Id of the task, as in `plan.created`.
        task_id: String,
        /// The reason, from the closed set in docs/EVENTS.md.
        reason: FailureReason,
        /// What went wrong, naming the command or input at fault.
        message: String,
    },
    /// Plain words for the activity feed.
    #[serde(rename = "activity")]
    Activity {
        /// The task it concerns; absent for the run's own activity.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        task_id: Option<String>,
        /// Dotted category for styling and filtering (e.g. `approval.waiting`, `kb.warning`).
        kind: String,
        /// The sentence to show.
        message: String,
        /// Optional structured detail; absent (null) when there is none.
        #[serde(skip_serializing_if = "Value::is_null", default)]
        data: Value,
    },
    /// Progress of long work (indexing, an MCP tool call).
    #[serde(rename = "progress")]
    Progress {
        /// The task doing the work.
        task_id: String,
        /// Units done so far.
        done: u64,
        /// Units in all (`done` reaches it at the end).
        total: u64,
        /// What is counted (e.g. `bytes`, `files`, `steps`).
        unit: String,
    },
    /// A capability's availability, e.g. an operation that is not implemented.
    #[serde(rename = "capability.status")]
    CapabilityStatus {
        /// The task that called it.
        task_id: String,
        /// The capability kind.
        kind: String,
        /// The status, e.g. `not_implemented`.
        status: String,
        /// What is unavailable and what to use instead.
        message: String,
    },
}

/// The names of the events that end a run: each run's stream ends with
/// exactly one of them. The store keeps one back until the run's terminal
/// status is written, so both are stored in one transaction.
pub const RUN_ENDING: [&str; 3] = ["run.completed", "run.failed", "run.cancelled"];

impl Event {
    /// The event's dotted name, as in the envelope's `type` field.
    pub const fn name(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "run.started",
            Event::RunResumed { .. } => "run.resumed",
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
            Event::NetworkConnect { .. } => "network.connect",
        }
    }
}

/// What travels on the wire.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Envelope {
    /// Position in the run's stream: from 0, no gaps (SSE `id`, `Last-Event-ID`).
    pub seq: u64,
    /// The run the event belongs to (`run_...`).
    pub run_id: String,
    /// RFC 3339 with milliseconds, UTC.
    pub ts: String,
    /// The event itself, flattened: its `type` and fields sit beside `seq`.
    #[serde(flatten)]
    pub event: Event,
}

/// Receives events as they happen. Implementations must not block: they are
/// called from inside plugin calls.
pub trait EventSink: Send + Sync {
    /// Hands over one event, in emission order; must return without waiting.
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

    #[test]
    fn run_ending_names_the_three_terminal_events() {
        let usage = Usage::default();
        let ends = [
            Event::RunCompleted { usage },
            Event::RunFailed {
                reason: FailureReason::RetryLimit,
                message: String::new(),
                usage,
            },
            Event::RunCancelled { usage },
        ];
        assert_eq!(ends.map(|e| e.name()), RUN_ENDING);
    }
}
