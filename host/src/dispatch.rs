//! Dispatch one task through the registry to its plugin, with the task events
//! around it. The orchestrator calls this for every plan task; `capstan invoke`
//! calls it directly.

use crate::protocol::{Event, FailureReason, TaskFailure, TaskOutcome, TaskRequest};
use crate::registry::Registry;
use crate::runtime::Risk;
use crate::runtime::Runtime;
use crate::runtime::bindings::{approval, types};
use crate::services::RunContext;

pub async fn run_task(
    runtime: &Runtime,
    registry: &Registry,
    task: &TaskRequest,
    run: &RunContext,
) -> TaskOutcome {
    let events = &run.events;
    events.emit(Event::TaskStarted {
        task_id: task.id.clone(),
        kind: task.kind.clone(),
        operation: task.operation.clone(),
    });
    let outcome = if let Some(tool) = registry.mcp_tool(&task.kind) {
        // A tool of an external MCP server: it declares no risk Capstan could
        // trust, so the server's configured risk decides the approval.
        let why = format!(
            "MCP server `{}` is configured with `{:?}` risk",
            tool.server_name(),
            tool.risk()
        );
        match approve_risk(tool.server_name(), tool.risk(), why, task, run).await {
            Ok(()) => tool.call(task, run).await,
            Err(failure) => Err(failure),
        }
    } else {
        match registry.resolve(&task.kind) {
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
                    Ok(()) => runtime.invoke(plugin, task, run).await,
                    Err(failure) => Err(failure),
                }
            }
            Err(failure) => Err(failure),
        }
    };
    match &outcome {
        Ok(success) => events.emit(Event::TaskCompleted {
            task_id: task.id.clone(),
            summary: success.summary.clone(),
            data: success.data.clone(),
        }),
        Err(failure) => {
            if failure.reason == FailureReason::NotImplemented {
                // Seed 004: an unimplemented operation is also a capability status.
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
    outcome
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
    let scope = crate::services::TaskScope {
        task_id: task.id.clone(),
        plugin: owner.to_string(),
        run: run.clone(),
        resource_limit: Default::default(),
    };
    let risk = match op_risk {
        Risk::ReadOnly => types::Risk::ReadOnly,
        Risk::Write => types::Risk::Write,
        Risk::Delete => types::Risk::Delete,
        Risk::Network => types::Risk::Network,
        Risk::Unknown => types::Risk::Unknown,
    };
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
