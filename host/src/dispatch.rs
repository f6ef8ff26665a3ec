//! Dispatch one task through the registry to its plugin, with the task events
//! around it. The orchestrator calls this for every plan task; `capstan invoke`
//! calls it directly.

use crate::protocol::{Event, FailureReason, TaskOutcome, TaskRequest};
use crate::registry::Registry;
use crate::runtime::Runtime;
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
    let outcome = match registry.resolve(&task.kind) {
        Ok(plugin) => runtime.invoke(plugin, task, run).await,
        Err(failure) => Err(failure),
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
