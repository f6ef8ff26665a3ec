//! A plan, before anything of it runs: its structure (ids, dependencies, no
//! cycle; a model is asked to fix these), each task's kind (unknown kinds and
//! the retired writing workflow fail, valid tasks go on), and the workspace
//! gate (a plan that acts on files or runs commands needs a workspace; without
//! one nothing runs).

use std::collections::HashSet;

use serde_json::json;

use super::{Host, Stop, activity, report};
use crate::plugins::context::RunContext;
use crate::plugins::manifest::{HostService, WorkspaceAccess};
use crate::plugins::registry::is_legacy_kind;
use crate::run::model::TaskReport;
use capstan_protocol::{Event, FailureReason, PlanTask, SkipReason, TaskFailure, TaskStatus};

/// Input fields of the retired writing workflow: a task carrying them is
/// writer-shaped whatever its kind says.
const LEGACY_FIELDS: &[&str] = &[
    "draft",
    "outline",
    "manuscript",
    "writer",
    "writing_task",
    "writing_style",
];

/// A plan task as a node of the shared scheduler's graph.
pub(super) struct Planned<'t>(pub(super) &'t PlanTask);

impl capstan_graph::Node for Planned<'_> {
    fn id(&self) -> &str {
        &self.0.id
    }
    fn depends_on(&self) -> &[String] {
        &self.0.depends_on
    }
}

/// The tasks of a plan that may run, and how the others failed.
pub(super) struct Admitted {
    pub(super) valid: Vec<PlanTask>,
    pub(super) rejected: Vec<String>,
    pub(super) first_failure: Option<(FailureReason, String)>,
}

impl Host {
    /// Rejects tasks of unknown or retired kinds (each fails at once, the rest
    /// go on), then stops the whole plan if it needs a workspace the run lacks.
    pub(super) fn admit(
        &self,
        tasks: &[PlanTask],
        run: &RunContext,
        reports: &mut Vec<TaskReport>,
    ) -> Result<Admitted, Stop> {
        let events = &run.events;
        let mut admitted = Admitted {
            valid: Vec::new(),
            rejected: Vec::new(),
            first_failure: None,
        };
        for task in tasks {
            let rejection = if is_legacy_kind(&task.kind) || is_legacy_shaped(task) {
                Some(TaskFailure::new(
                    FailureReason::UnsupportedLegacyCapability,
                    format!(
                        "task `{}` is a writing-workflow task (`{}`); that workflow is retired",
                        task.id, task.kind
                    ),
                ))
            } else {
                self.registry.check(&task.kind).err()
            };
            let Some(f) = rejection else {
                admitted.valid.push(task.clone());
                continue;
            };
            events.emit(Event::TaskFailed {
                task_id: task.id.clone(),
                reason: f.reason,
                message: f.message.clone(),
            });
            events.emit(activity(
                "task.rejected",
                format!("did not run task {} ({}): {}", task.id, f.reason, f.message),
            ));
            events.emit(Event::PlanUpdated {
                task_id: task.id.clone(),
                status: TaskStatus::Failed,
            });
            reports.push(report(
                task,
                TaskStatus::Failed,
                Some(f.reason),
                f.message.clone(),
                json!(null),
            ));
            admitted.rejected.push(task.id.clone());
            admitted.first_failure.get_or_insert((f.reason, f.message));
        }
        self.workspace_gate(&admitted.valid, run, reports)?;
        Ok(admitted)
    }

    /// Nothing runs if any task needs a workspace and there is none.
    fn workspace_gate(
        &self,
        valid: &[PlanTask],
        run: &RunContext,
        reports: &mut Vec<TaskReport>,
    ) -> Result<(), Stop> {
        if run.workspace.is_some() {
            return Ok(());
        }
        let needing: Vec<String> = valid
            .iter()
            .filter(|t| {
                self.registry.spec(&t.kind).is_some_and(|spec| {
                    spec.entry.permissions.workspace != WorkspaceAccess::None
                        || spec.entry.permissions.host.contains(&HostService::Exec)
                })
            })
            .map(|t| t.id.clone())
            .collect();
        if needing.is_empty() {
            return Ok(());
        }
        let message = format!(
            "task(s) {} act on files or run commands and need a workspace; bind one with --workspace DIR",
            needing.join(", ")
        );
        let events = &run.events;
        events.emit(Event::WorkspaceRequired {
            task_ids: needing,
            message: message.clone(),
        });
        events.emit(activity(
            "workspace.required",
            format!("stopped: {message}"),
        ));
        for t in valid {
            events.emit(Event::TaskSkipped {
                task_id: t.id.clone(),
                reason: SkipReason::WorkspaceRequired,
            });
            reports.push(report(
                t,
                TaskStatus::Skipped,
                None,
                "no workspace bound".into(),
                json!(null),
            ));
        }
        Err(Stop::Fail(FailureReason::WorkspaceRequired, message))
    }
}

fn is_legacy_shaped(task: &PlanTask) -> bool {
    task.input
        .as_object()
        .is_some_and(|o| o.keys().any(|k| LEGACY_FIELDS.contains(&k.as_str())))
        || task
            .operation
            .to_ascii_lowercase()
            .starts_with("write_draft")
}

/// Structural checks a model can be asked to fix: ids, dependencies, cycles.
pub fn validate_plan(tasks: &[PlanTask]) -> Result<(), String> {
    if tasks.is_empty() {
        return Err("the plan has no tasks".into());
    }
    let mut ids = HashSet::new();
    for t in tasks {
        if t.id.trim().is_empty() {
            return Err("a task has an empty id".into());
        }
        if !ids.insert(t.id.as_str()) {
            return Err(format!("task id `{}` is used twice", t.id));
        }
    }
    for t in tasks {
        if let Some(d) = t.depends_on.iter().find(|d| !ids.contains(d.as_str())) {
            return Err(format!(
                "task `{}` depends on `{d}`, which is not in the plan",
                t.id
            ));
        }
    }
    let nodes: Vec<Planned<'_>> = tasks.iter().map(Planned).collect();
    if let Err(cycle) = capstan_graph::topological_order(&nodes) {
        return Err(format!(
            "the dependencies form a cycle among {}",
            cycle.stuck.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: &str, deps: &[&str]) -> PlanTask {
        PlanTask {
            id: id.into(),
            kind: "k".into(),
            operation: "o".into(),
            input: json!({}),
            depends_on: deps.iter().map(|s| s.to_string()).collect(),
            title: String::new(),
        }
    }

    #[test]
    fn plan_validation_names_the_problem() {
        assert!(validate_plan(&[t("a", &[]), t("b", &["a"])]).is_ok());
        assert!(
            validate_plan(&[t("a", &[]), t("a", &[])])
                .unwrap_err()
                .contains("used twice")
        );
        assert!(
            validate_plan(&[t("a", &["z"])])
                .unwrap_err()
                .contains("`z`")
        );
        assert!(
            validate_plan(&[t("a", &["b"]), t("b", &["a"]), t("c", &[])])
                .unwrap_err()
                .contains("cycle among a, b")
        );
    }
}
