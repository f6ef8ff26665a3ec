//! A valid plan, run over its dependency graph with the shared scheduler
//! (`capstan-graph`): ready tasks run concurrently up to
//! [`super::RunConfig::max_parallel`]; the first failure stops scheduling
//! (fail-fast) and cancels the tasks still running; every task ends in
//! `plan.updated` and, when it did not run, `task.skipped` with its reason.

use capstan_graph::{Ended, Handler, NotRun};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::plan::Planned;
use super::{Host, Stop, activity, report};
use crate::plugins::context::RunContext;
use crate::run::dispatch::run_task_with_steps;
use crate::run::model::TaskReport;
use capstan_protocol::{
    Event, FailureReason, PlanTask, SkipReason, TaskOutcome, TaskRequest, TaskStatus,
};

impl Host {
    /// Announce the plan, admit its tasks (see [`super::plan`]), then run the
    /// valid ones over their graph.
    pub(super) async fn execute(
        &self,
        tasks: Vec<PlanTask>,
        run: &RunContext,
        reports: &mut Vec<TaskReport>,
    ) -> Result<(), Stop> {
        run.events.emit(Event::PlanCreated {
            tasks: tasks.clone(),
        });
        let titles: Vec<&str> = tasks
            .iter()
            .map(|t| {
                if t.title.is_empty() {
                    t.kind.as_str()
                } else {
                    t.title.as_str()
                }
            })
            .collect();
        run.events.emit(activity(
            "plan",
            format!("planned {} task(s): {}", tasks.len(), titles.join("; ")),
        ));
        self.run_plan(tasks, run, reports).await
    }

    /// Admit tasks and run the valid ones over their graph (a new plan's, or
    /// what a resumed run has left).
    pub(super) async fn run_plan(
        &self,
        tasks: Vec<PlanTask>,
        run: &RunContext,
        reports: &mut Vec<TaskReport>,
    ) -> Result<(), Stop> {
        let admitted = self.admit(&tasks, run, reports)?;
        // Tasks share a child token: fail-fast cancels the others without
        // cancelling the run.
        let tasks_cancel = run.cancel.child_token();
        let task_run = RunContext {
            cancel: tasks_cancel.clone(),
            ..run.clone()
        };
        let rejected: Vec<&str> = admitted.rejected.iter().map(String::as_str).collect();
        let mut dispatch = Dispatch {
            host: self,
            run,
            task_run: &task_run,
            tasks_cancel,
            reports,
            first_failure: admitted.first_failure,
            stop: false,
        };
        let nodes: Vec<Planned<'_>> = admitted.valid.iter().map(Planned).collect();
        capstan_graph::run(&nodes, self.config.max_parallel, &rejected, &mut dispatch).await;
        if run.cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        match dispatch.first_failure {
            Some((reason, message)) => Err(Stop::Fail(reason, message)),
            None => Ok(()),
        }
    }
}

/// The orchestrator's side of the scheduler: events, reports and fail-fast.
struct Dispatch<'a, 'r> {
    host: &'a Host,
    run: &'a RunContext,
    task_run: &'a RunContext,
    tasks_cancel: CancellationToken,
    reports: &'r mut Vec<TaskReport>,
    first_failure: Option<(FailureReason, String)>,
    /// Set by the first failure: nothing new starts.
    stop: bool,
}

impl<'a> Handler<Planned<'_>> for Dispatch<'a, '_> {
    type Output = (TaskOutcome, Vec<Value>);
    type Running = BoxFuture<'a, Self::Output>;

    fn stopped(&self) -> bool {
        self.stop || self.run.cancel.is_cancelled()
    }

    fn start(&mut self, Planned(t): &Planned<'_>) -> Self::Running {
        self.run.events.emit(Event::PlanUpdated {
            task_id: t.id.clone(),
            status: TaskStatus::Running,
        });
        let request = TaskRequest {
            id: t.id.clone(),
            kind: t.kind.clone(),
            operation: t.operation.clone(),
            input: t.input.clone(),
        };
        let (host, run) = (self.host, self.task_run);
        async move { run_task_with_steps(&host.runtime, &host.registry, &request, run).await }
            .boxed()
    }

    fn ended(&mut self, Planned(task): &Planned<'_>, (outcome, steps): Self::Output) -> Ended {
        let events = &self.run.events;
        match outcome {
            Ok(ok) => {
                events.emit(Event::PlanUpdated {
                    task_id: task.id.clone(),
                    status: TaskStatus::Completed,
                });
                self.reports.push(report(
                    task,
                    TaskStatus::Completed,
                    None,
                    ok.summary,
                    ok.data,
                ));
                Ended::Completed
            }
            Err(f) => {
                events.emit(activity(
                    "task.failed",
                    format!("task {} failed ({}): {}", task.id, f.reason, f.message),
                ));
                events.emit(Event::PlanUpdated {
                    task_id: task.id.clone(),
                    status: TaskStatus::Failed,
                });
                // What the task's commands printed stays in the report: the
                // answer says why they failed.
                let data = if steps.is_empty() {
                    json!(null)
                } else {
                    json!({ "steps": steps })
                };
                self.reports.push(report(
                    task,
                    TaskStatus::Failed,
                    Some(f.reason),
                    f.message.clone(),
                    data,
                ));
                // Before any failure only an aborted approval cancels the
                // tasks' token, and an abort ends the run as cancelled, not failed.
                if f.reason == FailureReason::Cancelled
                    && self.tasks_cancel.is_cancelled()
                    && self.first_failure.is_none()
                {
                    self.run.cancel.cancel();
                }
                self.first_failure.get_or_insert((f.reason, f.message));
                self.stop = true;
                self.tasks_cancel.cancel();
                Ended::Failed
            }
        }
    }

    fn not_run(&mut self, Planned(task): &Planned<'_>, why: NotRun<'_>) {
        let reason = match why {
            NotRun::DependencyFailed(_) => SkipReason::SkippedDependencyFailed,
            NotRun::Stopped if self.run.cancel.is_cancelled() => SkipReason::Cancelled,
            NotRun::Stopped => SkipReason::SkippedFailFast,
        };
        self.run.events.emit(Event::TaskSkipped {
            task_id: task.id.clone(),
            reason,
        });
        self.run.events.emit(Event::PlanUpdated {
            task_id: task.id.clone(),
            status: TaskStatus::Skipped,
        });
        self.reports.push(report(
            task,
            TaskStatus::Skipped,
            None,
            reason.as_str().replace('_', " "),
            json!(null),
        ));
    }
}
