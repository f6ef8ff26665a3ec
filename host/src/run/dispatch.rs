//! Dispatch one task through the registry to its plugin, with the task events
//! around it. The orchestrator calls this for every plan task; `capstan invoke`
//! calls it directly.
//!
//! The host, not the plugin, decides whether a task whose commands failed
//! succeeded: every command a task runs goes through the host's exec service,
//! which reports it as a `terminal.step`; a task with a command that exited
//! non-zero, was killed or timed out fails, whatever the plugin answered,
//! unless the task's input says `"continue_on_error": true`.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::plugins::bindings::{approval, types};
use crate::plugins::context::RunContext;
use crate::plugins::registry::Registry;
use crate::plugins::runtime::Runtime;
use capstan_policy::Risk;
use capstan_protocol::{Event, EventSink, FailureReason, TaskFailure, TaskOutcome, TaskRequest};

pub async fn run_task(
    runtime: &Runtime,
    registry: &Registry,
    task: &TaskRequest,
    run: &RunContext,
) -> TaskOutcome {
    run_task_with_steps(runtime, registry, task, run).await.0
}

/// [`run_task`], also returning the commands the task ran as the host saw them
/// (`command`, `exit_code`, `signal`, `timed_out`, `stdout`: the output tail), so
/// a failed task's report can still show what its commands printed.
pub async fn run_task_with_steps(
    runtime: &Runtime,
    registry: &Registry,
    task: &TaskRequest,
    run: &RunContext,
) -> (TaskOutcome, Vec<Value>) {
    let log = Arc::new(StepLog {
        inner: run.events.clone(),
        task_id: task.id.clone(),
        steps: Mutex::new(Vec::new()),
    });
    let run = &RunContext {
        events: log.clone(),
        ..run.clone()
    };
    let events = &run.events;
    // An MCP tool has one operation; a plan may leave it out.
    let operation = match registry.external_tool(&task.kind) {
        Some(tool) if task.operation.is_empty() => tool.operation().to_string(),
        _ => task.operation.clone(),
    };
    events.emit(Event::TaskStarted {
        task_id: task.id.clone(),
        kind: task.kind.clone(),
        operation,
    });
    let outcome = if let Some(tool) = registry.external_tool(&task.kind) {
        // A tool of an external MCP server: it declares no risk Capstan could
        // trust, so the server's configured risk decides the approval.
        let why = format!(
            "MCP server `{}` is configured with `{:?}` risk",
            tool.owner(),
            tool.risk()
        );
        match approve_risk(tool.owner(), tool.risk(), why, task, run).await {
            Ok(()) => tool.call(task, run).await,
            Err(failure) => Err(failure),
        }
    } else {
        // The plugin compiles here on its first use (with a "preparing" line in the feed).
        match registry
            .resolve(runtime, &task.kind, Some(run.events.as_ref()))
            .await
        {
            Ok(plugin) => {
                let risk = plugin
                    .operation(&task.operation)
                    .map_or(Risk::ReadOnly, |op| op.risk);
                let why = format!(
                    "`{}` declares `{risk:?}` risk for `{}`",
                    plugin.name(),
                    task.operation
                );
                match approve_risk(plugin.name(), risk, why, task, run).await {
                    Ok(()) => runtime.invoke(&plugin, task, run).await,
                    Err(failure) => Err(failure),
                }
            }
            Err(failure) => Err(failure),
        }
    };
    let steps = log.take();
    let outcome = enforce_exit_status(task, &steps, outcome);
    match &outcome {
        Ok(success) => events.emit(Event::TaskCompleted {
            task_id: task.id.clone(),
            summary: success.summary.clone(),
            data: success.data.clone(),
        }),
        Err(failure) => {
            if failure.reason == FailureReason::NotImplemented {
                // An unimplemented operation is also a capability status, so a
                // frontend can show what this host cannot do.
                events.emit(Event::CapabilityStatus {
                    task_id: task.id.clone(),
                    kind: task.kind.clone(),
                    status: "not_implemented".into(),
                    message: failure.message.clone(),
                });
            }
            events.emit(Event::TaskFailed {
                task_id: task.id.clone(),
                reason: failure.reason,
                message: failure.message.clone(),
            })
        }
    }
    (outcome, steps.into_iter().map(|s| s.data).collect())
}

/// One command of the task, from its `terminal.step` event.
struct CommandStep {
    /// `None` when the command succeeded; else why it did not, and the reason.
    failure: Option<(FailureReason, String)>,
    data: Value,
}

/// Forwards every event and keeps this task's `terminal.step`s.
struct StepLog {
    inner: Arc<dyn EventSink>,
    task_id: String,
    steps: Mutex<Vec<CommandStep>>,
}

impl StepLog {
    fn take(&self) -> Vec<CommandStep> {
        std::mem::take(&mut *self.steps.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl EventSink for StepLog {
    fn emit(&self, event: Event) {
        if let Event::TerminalStep {
            task_id,
            command,
            exit_code,
            signal,
            timed_out,
            output_tail,
            ..
        } = &event
            && *task_id == self.task_id
        {
            let failure = match (exit_code, signal, timed_out) {
                (_, _, true) => Some((FailureReason::Timeout, format!("`{command}` timed out"))),
                (Some(0), _, _) => None,
                (Some(code), _, _) => Some((
                    FailureReason::Failed,
                    format!("`{command}` exited {code}{}", last_line(output_tail)),
                )),
                (None, Some(sig), _) => Some((
                    FailureReason::Failed,
                    format!("`{command}` was killed by signal {sig}"),
                )),
                (None, None, _) => Some((
                    FailureReason::Failed,
                    format!("`{command}` ended without an exit status"),
                )),
            };
            let data = json!({
                "command": command, "exit_code": exit_code, "signal": signal,
                "timed_out": timed_out, "stdout": output_tail,
            });
            self.steps
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(CommandStep { failure, data });
        }
        self.inner.emit(event);
    }
}

/// `: <the output's last line>`, the usual place of a command's error message.
fn last_line(output: &str) -> String {
    match output.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => format!(": {}", line.chars().take(200).collect::<String>()),
        None => String::new(),
    }
}

/// A command that failed fails its task (a failed task sends the run
/// to its answer) unless the task asked to go on. A plugin's own failure stays
/// as it is, except that a timed-out command makes it a `timeout`.
fn enforce_exit_status(
    task: &TaskRequest,
    steps: &[CommandStep],
    outcome: TaskOutcome,
) -> TaskOutcome {
    if task.input.get("continue_on_error") == Some(&Value::Bool(true)) {
        return outcome;
    }
    let Some((reason, message)) = steps.iter().find_map(|s| s.failure.clone()) else {
        return outcome;
    };
    match outcome {
        Ok(_) => Err(TaskFailure::new(reason, message)),
        Err(f) if f.reason == FailureReason::Failed => Err(TaskFailure::new(reason, f.message)),
        Err(f) => Err(f),
    }
}

/// An operation that declares more than `read-only` risk (a document write,
/// say) passes the approval gate before it runs, like a command. The plugin
/// gets a writable workspace only for such operations (see the runtime), so
/// this gate covers every write a plugin can make. Commands are gated per
/// command by the exec service instead. An unknown operation passes: the
/// runtime refuses it as invalid input without running anything.
async fn approve_risk(
    owner: &str,
    op_risk: Risk,
    why: String,
    task: &TaskRequest,
    run: &RunContext,
) -> Result<(), TaskFailure> {
    if op_risk == Risk::ReadOnly {
        return Ok(());
    }
    let Some(approver) = run.services.approval.clone() else {
        return Err(TaskFailure::new(
            FailureReason::Denied,
            format!(
                "`{}.{}` writes and nobody can approve it here",
                task.kind, task.operation
            ),
        ));
    };
    let scope = crate::plugins::context::TaskScope {
        task_id: task.id.clone(),
        plugin: owner.to_string(),
        run: run.clone(),
        resource_limit: Default::default(),
    };
    let risk: types::Risk = op_risk.into();
    let path = task
        .input
        .get("path")
        .and_then(|p| p.as_str())
        .unwrap_or("");
    let request = approval::ApprovalRequest {
        action: format!("{}.{}", task.kind, task.operation),
        detail: format!("{} {} {}", task.kind, task.operation, path)
            .trim()
            .to_string(),
        risk,
        reasons: vec![why],
    };
    match approver.request(&scope, request).await {
        approval::Decision::Approved | approval::Decision::ApprovedForSession => Ok(()),
        approval::Decision::Aborted => Err(TaskFailure::new(
            FailureReason::Cancelled,
            "aborted at the approval prompt",
        )),
        approval::Decision::Denied => Err(TaskFailure::new(
            FailureReason::Denied,
            format!(
                "`{}.{}` on `{path}` was not approved",
                task.kind, task.operation
            ),
        )),
    }
}
