//! The AG-UI endpoint (`POST /agui`, protocol 1.0 as `@ag-ui/client` 1.0.0
//! speaks it): a `RunAgentInput` in, AG-UI events out as SSE.
//!
//! Mapping (docs/EVENTS.md has the table): `run.started` -> RUN_STARTED;
//! retrievals and tasks -> STEP_STARTED / STEP_FINISHED; each task is also a
//! tool call (TOOL_CALL_START/ARGS/END, then TOOL_CALL_RESULT); the plan with
//! task states and terminal traces -> ACTIVITY_SNAPSHOT `capstan.plan`; the
//! `activity` feed -> ACTIVITY_SNAPSHOT `capstan.activity`; the answer ->
//! TEXT_MESSAGE_*; citations -> CUSTOM `capstan.citations`; trace events with
//! no AG-UI counterpart -> RAW; the end -> RUN_FINISHED (with usage) or
//! RUN_ERROR.
//!
//! Approvals are AG-UI interrupts: when a run needs a person, the AG-UI run
//! ends with RUN_FINISHED `outcome: {type: "interrupt"}` naming the approval
//! while the Capstan run waits. The client answers with a new RunAgentInput on
//! the same thread whose `resume` entries carry `payload: {decision}`; that
//! request decides the approval and streams the rest of the same Capstan run
//! as a new AG-UI run. Dropping the stream any other time (the client's
//! `abortRun`) cancels the Capstan run.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use super::http::ApiJson;
use super::runs::{ActiveRun, RunManager, StartRun};
use crate::plugins::services::approval::Via;
use capstan_protocol::{Citation, Envelope, Event, PlanTask, TaskStatus, Usage};
use capstan_store::Decision;

/// What an approval interrupt's answer looks like (the decisions a frontend
/// may send).
static DECISION_SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    json!({
        "type": "object",
        "properties": {"decision": {"enum": ["approved", "approved-for-session", "denied", "aborted"]}},
        "required": ["decision"],
    })
});

/// [`DECISION_SCHEMA`] of an approval that offers "always for this
/// workspace" (`approval.requested` with `always`).
static DECISION_SCHEMA_ALWAYS: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    json!({
        "type": "object",
        "properties": {"decision": {"enum":
            ["approved", "approved-for-session", "approved-always", "denied", "aborted"]}},
        "required": ["decision"],
    })
});

/// The AG-UI protocol version this endpoint speaks.
pub const AGUI_PROTOCOL_VERSION: &str = "1.0";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    pub thread_id: String,
    pub run_id: String,
    #[serde(default)]
    pub messages: Vec<Value>,
    #[serde(default)]
    pub forwarded_props: Value,
    #[serde(default)]
    pub resume: Vec<ResumeEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    pub interrupt_id: String,
    /// `resolved` or `cancelled`.
    pub status: String,
    #[serde(default)]
    pub payload: Value,
}

pub async fn run(
    State(state): State<AppState>,
    Extension(via): Extension<Via>,
    user: Option<Extension<super::guard::RunUser>>,
    ApiJson(input): ApiJson<RunAgentInput>,
) -> Result<Response, ApiError> {
    let runs = &state.runs;
    let (run, mapper, events) = if input.resume.is_empty() {
        let message = last_user_text(&input.messages).ok_or_else(|| {
            ApiError::unprocessable(
                "RunAgentInput.messages has no user message with text; add \
                 {\"role\":\"user\",\"content\":\"...\"}",
            )
        })?;
        let workspace = input.forwarded_props["workspace"]
            .as_str()
            .map(String::from);
        let started = runs
            .start(
                StartRun {
                    message,
                    session_id: runs.session_for_thread(&input.thread_id),
                    workspace,
                },
                user.map(|Extension(u)| u.quota),
            )
            .await?;
        runs.bind_thread(&input.thread_id, &started.run.session_id);
        let mapper = Mapper::new(&input, &started.run);
        (
            Some(started.run),
            mapper,
            started.events.into_stream().boxed(),
        )
    } else {
        resume(runs, &input, via)?
    };
    let stream = Segment {
        mapper,
        events,
        queue: VecDeque::new(),
        done: false,
        elsewhere: run.is_none(),
        guard: CancelOnDrop(run),
        runs: runs.clone(),
    }
    .into_stream();
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

type EnvelopeStream = futures::stream::BoxStream<'static, Arc<Envelope>>;

/// Answer the interrupts and pick the run up where it waited: on this
/// replica when it runs the run, otherwise through the store (the decisions
/// are forwarded to the replica that runs it, and the stream follows the
/// stored events).
fn resume(
    runs: &Arc<RunManager>,
    input: &RunAgentInput,
    via: Via,
) -> Result<(Option<Arc<ActiveRun>>, Mapper, EnvelopeStream), ApiError> {
    let first = &input.resume[0].interrupt_id;
    let decisions = decisions(input)?;
    let (run, mut mapper, sub) = match runs.run_for_approval(first) {
        Some(run) => {
            for (id, _) in &decisions {
                if !run.open_approvals().contains(id) {
                    return Err(ApiError::not_found(format!(
                        "interrupt `{id}` is not open in run {}; answer only the interrupts of \
                         the last RUN_FINISHED",
                        run.run_id
                    )));
                }
            }
            // Subscribe before deciding: every event after the decision is then live.
            let sub = runs.subscribe(&run.run_id)?;
            let mapper = Mapper::new(input, &run);
            (Some(run), mapper, sub)
        }
        None => {
            let Some((run_id, session_id)) = runs.running_elsewhere_for_approval(first)? else {
                return Err(ApiError::not_found(format!(
                    "interrupt `{first}` is not open: it was answered, it expired, or its run \
                     ended; start a new run without `resume`"
                )));
            };
            let sub = runs.subscribe(&run_id)?;
            let mapper = Mapper::for_run(
                input.thread_id.clone(),
                input.run_id.clone(),
                run_id,
                session_id,
            );
            (None, mapper, sub)
        }
    };
    for env in &sub.backlog {
        mapper.observe(env);
    }
    for (id, decision) in &decisions {
        runs.decide(id, *decision, via)?;
    }
    mapper.resumed = decisions.into_iter().map(|(id, _)| id).collect();
    let events = sub.without_backlog().into_stream().boxed();
    mapper.reopen();
    Ok((run, mapper, events))
}

/// The decisions a resume carries, in order, refused with what to send when
/// one is malformed.
fn decisions(input: &RunAgentInput) -> Result<Vec<(String, Decision)>, ApiError> {
    let mut decisions = Vec::new();
    for entry in &input.resume {
        let decision = match entry.status.as_str() {
            "cancelled" => Decision::Denied,
            "resolved" => entry.payload["decision"]
                .as_str()
                .map(RunManager::parse_decision)
                .ok_or_else(|| {
                    ApiError::unprocessable(format!(
                        "resume entry for `{}` needs payload.decision: approved, \
                         approved-for-session, denied or aborted (or approved-always when \
                         the interrupt's responseSchema lists it)",
                        entry.interrupt_id
                    ))
                })??,
            other => {
                return Err(ApiError::unprocessable(format!(
                    "resume status must be `resolved` or `cancelled`, not {other:?}"
                )));
            }
        };
        decisions.push((entry.interrupt_id.clone(), decision));
    }
    Ok(decisions)
}

/// The text of the last user message (a string, or text parts).
fn last_user_text(messages: &[Value]) -> Option<String> {
    let m = messages.iter().rev().find(|m| m["role"] == "user")?;
    let text = match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

/// One AG-UI run's worth of a Capstan run.
struct Segment {
    mapper: Mapper,
    events: EnvelopeStream,
    queue: VecDeque<Value>,
    done: bool,
    /// Another replica runs the run: its approvals are open there, so every
    /// one requested and not yet decided in the stream is an interrupt.
    elsewhere: bool,
    guard: CancelOnDrop,
    runs: Arc<RunManager>,
}

impl Segment {
    fn into_stream(self) -> impl Stream<Item = Result<SseEvent, Infallible>> + Send + 'static {
        futures::stream::unfold(self, |mut seg| async move {
            loop {
                if let Some(v) = seg.queue.pop_front() {
                    return Some((Ok(SseEvent::default().data(v.to_string())), seg));
                }
                if seg.done {
                    return None;
                }
                if !seg.mapper.pending.is_empty() {
                    seg.queue.extend(seg.mapper.pending.drain(..));
                    if seg.mapper.interrupted {
                        seg.done = true;
                        seg.guard.0 = None;
                    }
                    continue;
                }
                match seg.events.next().await {
                    Some(env) => {
                        let broker = seg.runs.app().broker.clone();
                        let elsewhere = seg.elsewhere;
                        let out = seg.mapper.map(&env, |id| elsewhere || broker.is_open(id));
                        seg.queue.extend(out.events);
                        if out.segment_over {
                            seg.done = true;
                            seg.guard.0 = None;
                        }
                    }
                    None => {
                        seg.done = true;
                        seg.guard.0 = None;
                    }
                }
            }
        })
    }
}

/// Cancels the run if the client goes away mid-run (AG-UI's `abortRun`).
/// A run another replica runs is left to it.
struct CancelOnDrop(Option<Arc<ActiveRun>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(run) = self.0.take()
            && !run.ended()
        {
            tracing::info!("AG-UI client left run {}: cancelling it", run.run_id);
            run.cancel();
        }
    }
}

struct Mapped {
    events: Vec<Value>,
    segment_over: bool,
}

#[derive(Clone)]
struct PlanEntry {
    task: PlanTask,
    status: TaskStatus,
    steps: Vec<Value>,
}

/// Folds Capstan envelopes into AG-UI events. Stateful: open steps, the open
/// text message, the plan and the feed.
struct Mapper {
    thread_id: String,
    agui_run_id: String,
    run_id: String,
    session_id: String,
    open_steps: Vec<String>,
    text_open: bool,
    /// The text of the open message sent so far.
    streamed: String,
    plan: Vec<PlanEntry>,
    feed: Vec<Value>,
    /// Events to send before the next mapped one (the opening of a resumed run).
    pending: Vec<Value>,
    /// Approvals this request answered (not to be interrupted on again).
    resumed: Vec<String>,
    /// Approvals requested and not decided, as AG-UI interrupts.
    interrupts: Vec<(String, Value)>,
    /// `pending` ends the segment with an interrupt.
    interrupted: bool,
    started: bool,
    model: String,
}

impl Mapper {
    fn new(input: &RunAgentInput, run: &ActiveRun) -> Self {
        Self::for_run(
            input.thread_id.clone(),
            input.run_id.clone(),
            run.run_id.clone(),
            run.session_id.clone(),
        )
    }

    /// A mapper for one Capstan run seen as the AG-UI run `agui_run_id` of
    /// `thread_id`, nothing mapped yet.
    fn for_run(thread_id: String, agui_run_id: String, run_id: String, session_id: String) -> Self {
        Self {
            thread_id,
            agui_run_id,
            run_id,
            session_id,
            open_steps: Vec::new(),
            text_open: false,
            streamed: String::new(),
            plan: Vec::new(),
            feed: Vec::new(),
            pending: Vec::new(),
            resumed: Vec::new(),
            interrupts: Vec::new(),
            interrupted: false,
            started: false,
            model: String::new(),
        }
    }

    fn message_id(&self) -> String {
        format!("{}-answer", self.run_id)
    }

    fn tool_call_id(&self, task_id: &str) -> String {
        format!("{}-{task_id}", self.run_id)
    }

    /// Update the state from an event without emitting (a resumed run's past).
    fn observe(&mut self, env: &Envelope) {
        let _ = self.map(env, |_| false);
    }

    /// The opening of a resumed AG-UI run (into `pending`): RUN_STARTED, the
    /// steps still open, the current plan and feed; and at once another
    /// interrupt if approvals other than the answered ones are still open.
    fn reopen(&mut self) {
        self.started = true;
        let mut out = vec![self.run_started()];
        for step in &self.open_steps {
            out.push(json!({"type": "STEP_STARTED", "stepName": step}));
        }
        if !self.plan.is_empty() {
            out.push(self.plan_snapshot());
        }
        if !self.feed.is_empty() {
            out.push(self.feed_snapshot());
        }
        let still_open: Vec<Value> = self
            .interrupts
            .iter()
            .filter(|(id, _)| !self.resumed.contains(id))
            .map(|(_, i)| i.clone())
            .collect();
        if !still_open.is_empty() {
            self.close_all(&mut out);
            out.push(self.interrupt(still_open));
            self.interrupted = true;
        }
        self.pending = out;
    }

    fn interrupt(&self, interrupts: Vec<Value>) -> Value {
        json!({
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.agui_run_id,
            "outcome": {"type": "interrupt", "interrupts": interrupts},
        })
    }

    fn run_started(&self) -> Value {
        json!({
            "type": "RUN_STARTED",
            "threadId": self.thread_id,
            "runId": self.agui_run_id,
            "protocolVersion": AGUI_PROTOCOL_VERSION,
            "metadata": {"capstan": {"runId": self.run_id, "sessionId": self.session_id}},
        })
    }

    fn plan_snapshot(&self) -> Value {
        let tasks: Vec<Value> = self
            .plan
            .iter()
            .map(|p| {
                json!({
                    "id": p.task.id,
                    "title": p.task.title,
                    "kind": p.task.kind,
                    "operation": p.task.operation,
                    "dependsOn": p.task.depends_on,
                    "status": p.status,
                    "steps": p.steps,
                })
            })
            .collect();
        json!({
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": format!("{}-plan", self.run_id),
            "activityType": "capstan.plan",
            "content": {"tasks": tasks},
            "replace": true,
        })
    }

    fn feed_snapshot(&self) -> Value {
        json!({
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": format!("{}-activity", self.run_id),
            "activityType": "capstan.activity",
            "content": {"items": self.feed},
            "replace": true,
        })
    }

    fn finish_step(&mut self, name: &str, out: &mut Vec<Value>) {
        if let Some(i) = self.open_steps.iter().position(|s| s == name) {
            self.open_steps.remove(i);
            out.push(json!({"type": "STEP_FINISHED", "stepName": name}));
        }
    }

    /// Closes what AG-UI requires closed before RUN_FINISHED.
    fn close_all(&mut self, out: &mut Vec<Value>) {
        if self.text_open {
            self.text_open = false;
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": self.message_id()}));
        }
        for step in std::mem::take(&mut self.open_steps) {
            out.push(json!({"type": "STEP_FINISHED", "stepName": step}));
        }
    }

    fn usage(&self, usage: &Usage) -> Value {
        json!([{
            "model": self.model,
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "totalTokens": usage.input_tokens + usage.output_tokens,
        }])
    }

    fn task_started(&mut self, task_id: &str, kind: &str, operation: &str, out: &mut Vec<Value>) {
        let name = format!("task {task_id}");
        self.open_steps.push(name.clone());
        out.push(json!({"type": "STEP_STARTED", "stepName": name}));
        let input = self
            .plan
            .iter()
            .find(|p| p.task.id == task_id)
            .map(|p| p.task.input.clone())
            .unwrap_or(Value::Null);
        let id = self.tool_call_id(task_id);
        out.push(json!({"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": kind}));
        out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": id,
            "delta": json!({"operation": operation, "input": input}).to_string()}));
        out.push(json!({"type": "TOOL_CALL_END", "toolCallId": id}));
    }

    /// The answer's end: a message opened (and closed) even when nothing
    /// streamed, then its citations.
    fn response_completed(&mut self, text: &str, citations: &[Citation], out: &mut Vec<Value>) {
        // The store coalesces deltas into the completed text, so a stream
        // read from it may have seen only the first deltas, or none: what was
        // not streamed yet is sent now.
        let rest = text.strip_prefix(self.streamed.as_str()).unwrap_or("");
        if !self.text_open && !rest.is_empty() {
            out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": self.message_id(), "role": "assistant"}));
            self.text_open = true;
        }
        if !rest.is_empty() {
            out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": self.message_id(), "delta": rest}));
        }
        self.streamed.clear();
        if self.text_open {
            self.text_open = false;
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": self.message_id()}));
        }
        if !citations.is_empty() {
            out.push(json!({"type": "CUSTOM", "name": "capstan.citations",
                "value": {"messageId": self.message_id(), "citations": citations}}));
        }
    }

    /// `RUN_FINISHED` for a completed (`success`) or cancelled run.
    fn run_finished(&self, usage: &Usage, completed: bool) -> Value {
        let mut finished = json!({
            "type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.agui_run_id,
            "outcome": {"type": if completed { "success" } else { "cancelled" }},
            "usage": self.usage(usage),
        });
        if completed {
            finished["result"] = json!({"capstanRunId": self.run_id, "sessionId": self.session_id, "costUsd": usage.cost_usd});
        }
        finished
    }

    fn map(&mut self, env: &Envelope, is_open: impl Fn(&str) -> bool) -> Mapped {
        let mut out = Vec::new();
        let mut segment_over = false;
        let raw = || json!({"type": "RAW", "source": "capstan", "event": serde_json::to_value(env).unwrap_or(Value::Null)});
        match &env.event {
            Event::RunStarted { model, .. } => {
                self.model = model.clone();
                if !self.started {
                    self.started = true;
                    out.push(self.run_started());
                }
            }
            Event::RetrievalStarted { attempt, .. } => {
                let name = format!("retrieval {attempt}");
                self.open_steps.push(name.clone());
                out.push(json!({"type": "STEP_STARTED", "stepName": name}));
            }
            Event::RetrievalCompleted { attempt, .. } => {
                self.finish_step(&format!("retrieval {attempt}"), &mut out);
            }
            Event::PlanCreated { tasks } => {
                self.plan = tasks
                    .iter()
                    .map(|t| PlanEntry {
                        task: t.clone(),
                        status: TaskStatus::Pending,
                        steps: Vec::new(),
                    })
                    .collect();
                out.push(self.plan_snapshot());
            }
            Event::PlanUpdated { task_id, status } => {
                if let Some(p) = self.plan.iter_mut().find(|p| &p.task.id == task_id) {
                    p.status = *status;
                }
                out.push(self.plan_snapshot());
            }
            Event::TaskStarted {
                task_id,
                kind,
                operation,
            } => self.task_started(task_id, kind, operation, &mut out),
            Event::TaskCompleted {
                task_id, summary, ..
            } => {
                out.push(json!({"type": "TOOL_CALL_RESULT", "messageId": format!("{}-result", self.tool_call_id(task_id)),
                    "toolCallId": self.tool_call_id(task_id), "role": "tool", "content": summary}));
                self.finish_step(&format!("task {task_id}"), &mut out);
            }
            Event::TaskFailed {
                task_id,
                reason,
                message,
            } => {
                out.push(json!({"type": "TOOL_CALL_RESULT", "messageId": format!("{}-result", self.tool_call_id(task_id)),
                    "toolCallId": self.tool_call_id(task_id), "role": "tool",
                    "content": format!("failed ({reason}): {message}")}));
                self.finish_step(&format!("task {task_id}"), &mut out);
            }
            Event::TerminalStep {
                task_id,
                command,
                exit_code,
                output_tail,
                duration_ms,
                timed_out,
                grant,
                ..
            } => {
                if let Some(p) = self.plan.iter_mut().find(|p| &p.task.id == task_id) {
                    p.steps
                        .push(json!({"command": command, "exitCode": exit_code,
                        "durationMs": duration_ms, "timedOut": timed_out, "output": output_tail,
                        "grant": grant}));
                }
                out.push(self.plan_snapshot());
                out.push(raw());
            }
            Event::Activity {
                task_id,
                kind,
                message,
                ..
            } => {
                self.feed
                    .push(json!({"kind": kind, "message": message, "taskId": task_id}));
                out.push(self.feed_snapshot());
            }
            Event::ApprovalRequested {
                approval_id,
                task_id,
                action,
                command,
                cwd,
                risk,
                reasons,
                always,
            } => {
                out.push(raw());
                let mut interrupt = json!({
                    "id": approval_id,
                    "reason": "capstan.approval",
                    "message": format!("Allow {action} `{command}` ({risk})?"),
                    "toolCallId": self.tool_call_id(task_id),
                    "responseSchema": DECISION_SCHEMA.clone(),
                    "metadata": {"capstan": {"runId": self.run_id, "taskId": task_id,
                        "command": command, "cwd": cwd, "risk": risk, "reasons": reasons}},
                });
                if let Some(rule) = always {
                    // "Always for this workspace" is one more answer here.
                    interrupt["responseSchema"] = DECISION_SCHEMA_ALWAYS.clone();
                    interrupt["metadata"]["capstan"]["always"] = json!(rule);
                }
                self.interrupts
                    .push((approval_id.clone(), interrupt.clone()));
                if is_open(approval_id) && !self.resumed.contains(approval_id) {
                    self.close_all(&mut out);
                    out.push(self.interrupt(vec![interrupt]));
                    segment_over = true;
                }
            }
            Event::ApprovalDecided { approval_id, .. } => {
                self.interrupts.retain(|(id, _)| id != approval_id);
                out.push(raw());
            }
            Event::ResponseDelta { text } => {
                if !self.text_open {
                    self.text_open = true;
                    self.streamed.clear();
                    out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": self.message_id(), "role": "assistant"}));
                }
                if !text.is_empty() {
                    self.streamed.push_str(text);
                    out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": self.message_id(), "delta": text}));
                }
            }
            Event::ResponseCompleted { text, citations } => {
                self.response_completed(text, citations, &mut out)
            }
            Event::WorkspaceChanges { .. } => {
                // The change set with its diffs; undo is
                // `POST /v1/changes/{changeSet}/undo`.
                let mut value = serde_json::to_value(&env.event).unwrap_or_default();
                if let Some(o) = value.as_object_mut() {
                    o.remove("type");
                }
                out.push(json!({"type": "CUSTOM", "name": "capstan.changes", "value": value}));
            }
            Event::RunCompleted { usage } => {
                self.close_all(&mut out);
                out.push(self.run_finished(usage, true));
                segment_over = true;
            }
            Event::RunCancelled { usage } => {
                self.close_all(&mut out);
                out.push(self.run_finished(usage, false));
                segment_over = true;
            }
            Event::RunFailed {
                reason,
                message,
                usage,
            } => {
                out.push(
                    json!({"type": "RUN_ERROR", "message": message, "code": reason,
                    "usage": self.usage(usage)}),
                );
                segment_over = true;
            }
            _ => out.push(raw()),
        }
        Mapped {
            events: out,
            segment_over,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mapper() -> Mapper {
        let mut mapper = Mapper::for_run("t".into(), "r".into(), "run_1".into(), "s".into());
        mapper.started = true;
        mapper
    }

    fn text_of(mapper: &mut Mapper, events: Vec<Event>) -> String {
        let mut text = String::new();
        for (seq, event) in events.into_iter().enumerate() {
            let env = Envelope {
                seq: seq as u64,
                run_id: "run_1".into(),
                ts: String::new(),
                event,
            };
            for e in mapper.map(&env, |_| false).events {
                if e["type"] == "TEXT_MESSAGE_CONTENT" {
                    text.push_str(e["delta"].as_str().unwrap());
                }
            }
        }
        text
    }

    fn delta(text: &str) -> Event {
        Event::ResponseDelta { text: text.into() }
    }

    fn completed(text: &str) -> Event {
        Event::ResponseCompleted {
            text: text.into(),
            citations: Vec::new(),
        }
    }

    /// A stream read from the store may lack the deltas the completed text
    /// replaced: the message still carries the whole answer, once.
    #[test]
    fn the_completed_text_supplies_what_coalesced_deltas_did_not() {
        let all = vec![delta("Hel"), delta("lo"), completed("Hello")];
        assert_eq!(text_of(&mut mapper(), all), "Hello");
        let some = vec![delta("Hel"), completed("Hello")];
        assert_eq!(text_of(&mut mapper(), some), "Hello");
        assert_eq!(text_of(&mut mapper(), vec![completed("Hello")]), "Hello");
    }
}
