//! A run, as a state machine (design layer 2, seeds 000/001/002):
//!
//! `run.started` -> host analysis -> retrieval loop (at most
//! [`RunConfig::max_retrievals`] insufficient retrievals, then `retry-limit`) ->
//! answer or plan -> plan validation (unknown kinds `unsupported-capability`,
//! writing-workflow kinds `unsupported-legacy-capability`; valid tasks go on) ->
//! workspace gate (`workspace.required`, nothing runs) -> dispatch over the
//! dependency graph, independent tasks in parallel, fail-fast -> finalization
//! (`response.delta`..., `response.completed`) -> `run.completed` |
//! `run.failed` | `run.cancelled`.
//!
//! One cancellation token (in [`RunContext`]) reaches every step: model calls,
//! plugin calls (epoch interruption) and child processes (the exec service).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::json;

use crate::dispatch::{run_task, run_task_with_steps};
use crate::host_model::{
    CapabilitySummary, FinalInput, HostContext, HostModel, ModelFailure, OperationSummary, Passage,
    Step, TaskReport, Turn,
};
use crate::manifest::{HostService, WorkspaceAccess};
use crate::protocol::{
    Event, FailureReason, PlanTask, TaskFailure, TaskRequest, TaskStatus, Usage,
};
use crate::registry::{Registry, is_legacy_kind};
use crate::runtime::Runtime;
use crate::services::RunContext;

/// The retrieval capability the host loop uses.
pub const RETRIEVAL_KIND: &str = "local_kb_retrieval";

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

#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Insufficient retrievals before the run gives up with `retry-limit`.
    pub max_retrievals: u32,
    /// Host-loop steps before the run gives up (a model that never decides).
    pub max_steps: u32,
    /// Times a rejected plan is sent back to the model with the reason.
    pub max_plan_retries: u32,
    /// Tasks run at once.
    pub max_parallel: usize,
    /// Passages kept per retrieval.
    pub retrieval_limit: u32,
    /// Stop the run when its cost would pass this (USD).
    pub budget_usd: Option<f64>,
    /// Stop the run when its tokens pass this.
    pub budget_tokens: Option<u64>,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            max_retrievals: 3,
            max_steps: 8,
            max_plan_retries: 2,
            max_parallel: 4,
            retrieval_limit: 6,
            budget_usd: None,
            budget_tokens: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Completed,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone)]
pub struct RunRequest {
    pub message: String,
    pub session_id: Option<String>,
    pub history: Vec<Turn>,
    pub summary: String,
}

#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub status: RunStatus,
    pub reason: Option<FailureReason>,
    pub message: String,
    pub answer: String,
    pub usage: Usage,
}

/// Everything a run needs from the layers below.
pub struct Host {
    pub runtime: Arc<Runtime>,
    pub registry: Arc<Registry>,
    pub model: Arc<dyn HostModel>,
    pub config: RunConfig,
}

/// Why the loop stopped early.
enum Stop {
    Cancelled,
    Fail(FailureReason, String),
}

impl From<ModelFailure> for Stop {
    fn from(f: ModelFailure) -> Self {
        match f {
            ModelFailure::Cancelled => Stop::Cancelled,
            ModelFailure::Malformed(m, _) => Stop::Fail(FailureReason::InvalidModelOutput, m),
            ModelFailure::Unavailable(m) => Stop::Fail(
                FailureReason::Failed,
                format!("the model is unavailable: {m}"),
            ),
        }
    }
}

struct Meter {
    usage: Usage,
    warned: bool,
}

impl Host {
    /// What the model may plan with. A model that reads operation schemas gets every
    /// plugin loaded first (compiling what is not cached, with "preparing" lines); one
    /// that plans by kind alone (the offline model) gets the manifests' kinds, and
    /// plugins compile only when a task runs on them.
    async fn capabilities(&self, run: &RunContext) -> Vec<CapabilitySummary> {
        if self.model.reads_operation_schemas() {
            self.registry
                .load_all(&self.runtime, Some(run.events.as_ref()))
                .await;
        }
        let mut out = Vec::new();
        for spec in self.registry.specs() {
            let operations: Vec<OperationSummary> = self
                .registry
                .loaded(&spec.entry.name)
                .map(|plugin| {
                    plugin
                        .operations
                        .iter()
                        .map(|o| OperationSummary {
                            name: o.name.clone(),
                            description: o.description.clone(),
                            input_schema: o.input_schema.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            for kind in &spec.entry.kinds {
                if self.registry.check(kind).is_ok() {
                    out.push(CapabilitySummary {
                        kind: kind.clone(),
                        operations: operations.clone(),
                    });
                }
            }
        }
        for tool in self.registry.mcp_tools() {
            out.push(CapabilitySummary {
                kind: tool.kind().to_string(),
                operations: vec![OperationSummary {
                    name: crate::mcp::client::OPERATION.to_string(),
                    description: tool.description().to_string(),
                    input_schema: tool.input_schema().clone(),
                }],
            });
        }
        out
    }

    /// Run one message to a terminal event. Never panics on bad model output,
    /// bad plans or failing plugins: each ends the run with a reason.
    pub async fn run(&self, req: RunRequest, run: &RunContext) -> RunOutcome {
        let events = run.events.clone();
        events.emit(Event::RunStarted {
            message: req.message.clone(),
            session_id: req.session_id.clone(),
            workspace: run.workspace.as_ref().map(|w| w.display().to_string()),
            model: self.model.id(),
        });
        let mut ctx = HostContext {
            message: req.message.clone(),
            history: req.history,
            summary: req.summary,
            workspace: run.workspace.as_ref().map(|w| w.display().to_string()),
            capabilities: self.capabilities(run).await,
            ..Default::default()
        };
        let meter = Mutex::new(Meter {
            usage: Usage::default(),
            warned: false,
        });
        let mut reports = Vec::new();
        let result = self.drive(&mut ctx, run, &meter, &mut reports).await;
        let (failure, cancelled) = match result {
            Ok(()) => (None, false),
            Err(Stop::Cancelled) => (None, true),
            Err(Stop::Fail(reason, message)) => (Some((reason, message)), false),
        };
        if cancelled || run.cancel.is_cancelled() {
            let usage = meter.lock().unwrap().usage.clone();
            events.emit(Event::RunCancelled {
                usage: usage.clone(),
            });
            return RunOutcome {
                status: RunStatus::Cancelled,
                reason: Some(FailureReason::Cancelled),
                message: "cancelled".into(),
                answer: String::new(),
                usage,
            };
        }

        // Finalization: the host owns the answer, also for failed runs.
        let input = FinalInput {
            ctx,
            reports,
            failure: failure.clone(),
        };
        let mut on_token = |t: &str| {
            events.emit(Event::ResponseDelta {
                text: t.to_string(),
            })
        };
        // Past the budget no further model call is made: the offline model,
        // which costs nothing, writes the answer that explains why.
        let over_budget = matches!(failure, Some((FailureReason::BudgetExceeded, _)));
        let finalizer: &dyn HostModel = if over_budget {
            &crate::host_model::offline::OfflineModel
        } else {
            self.model.as_ref()
        };
        let finalized = finalizer.finalize(&input, &run.cancel, &mut on_token).await;
        let (answer, failure) = match finalized {
            Ok((text, citations, usage)) => {
                if !over_budget {
                    self.account(&meter, usage, run);
                }
                events.emit(Event::ResponseCompleted {
                    text: text.clone(),
                    citations,
                });
                (text, failure)
            }
            Err(ModelFailure::Cancelled) => {
                let usage = meter.lock().unwrap().usage.clone();
                events.emit(Event::RunCancelled {
                    usage: usage.clone(),
                });
                return RunOutcome {
                    status: RunStatus::Cancelled,
                    reason: Some(FailureReason::Cancelled),
                    message: "cancelled".into(),
                    answer: String::new(),
                    usage,
                };
            }
            Err(e) => (
                String::new(),
                failure.or(Some((FailureReason::Failed, e.to_string()))),
            ),
        };
        let usage = meter.lock().unwrap().usage.clone();
        match failure {
            None => {
                events.emit(Event::RunCompleted {
                    usage: usage.clone(),
                });
                RunOutcome {
                    status: RunStatus::Completed,
                    reason: None,
                    message: String::new(),
                    answer,
                    usage,
                }
            }
            Some((reason, message)) => {
                events.emit(Event::RunFailed {
                    reason,
                    message: message.clone(),
                    usage: usage.clone(),
                });
                RunOutcome {
                    status: RunStatus::Failed,
                    reason: Some(reason),
                    message,
                    answer,
                    usage,
                }
            }
        }
    }

    /// Add a model call's usage; warn at 80% of a budget, stop past it.
    fn account(&self, meter: &Mutex<Meter>, usage: Usage, run: &RunContext) -> Option<Stop> {
        let mut m = meter.lock().unwrap();
        m.usage.input_tokens += usage.input_tokens;
        m.usage.output_tokens += usage.output_tokens;
        m.usage.estimated |= usage.estimated;
        if let Some(c) = usage.cost_usd {
            *m.usage.cost_usd.get_or_insert(0.0) += c;
        }
        if usage.input_tokens + usage.output_tokens > 0 {
            run.events.emit(Event::Usage {
                usage,
                model: self.model.id(),
            });
        }
        let spent = m.usage.cost_usd.unwrap_or(0.0);
        let tokens = m.usage.input_tokens + m.usage.output_tokens;
        if let Some(limit) = self.config.budget_usd {
            if spent > limit {
                return Some(Stop::Fail(
                    FailureReason::BudgetExceeded,
                    format!("spent ${spent:.4} of a ${limit:.4} run budget"),
                ));
            }
            if spent > 0.8 * limit && !m.warned {
                m.warned = true;
                run.events.emit(Event::BudgetWarning {
                    spent_usd: spent,
                    limit_usd: limit,
                    message: format!(
                        "this run has used {:.0}% of its ${limit:.2} budget",
                        100.0 * spent / limit
                    ),
                });
            }
        }
        if let Some(limit) = self.config.budget_tokens
            && tokens > limit
        {
            return Some(Stop::Fail(
                FailureReason::BudgetExceeded,
                format!("used {tokens} tokens of a {limit}-token run budget"),
            ));
        }
        None
    }

    async fn drive(
        &self,
        ctx: &mut HostContext,
        run: &RunContext,
        meter: &Mutex<Meter>,
        reports: &mut Vec<TaskReport>,
    ) -> Result<(), Stop> {
        let mut plan_retries = 0;
        for step_no in 1..=self.config.max_steps {
            if run.cancel.is_cancelled() {
                return Err(Stop::Cancelled);
            }
            let (step, usage) = match self.model.step(ctx, &run.cancel).await {
                Ok(done) => done,
                Err(ModelFailure::Malformed(message, usage)) => {
                    self.account(meter, usage, run);
                    return Err(Stop::Fail(FailureReason::InvalidModelOutput, message));
                }
                Err(other) => return Err(other.into()),
            };
            if let Some(stop) = self.account(meter, usage, run) {
                return Err(stop);
            }
            let (decision, reason) = match &step {
                Step::Retrieve { reason, .. } => ("retrieve", reason.clone()),
                Step::Answer { reason } => ("answer", reason.clone()),
                Step::Plan { reason, .. } => ("plan", reason.clone()),
            };
            run.events.emit(Event::HostAnalysis {
                step: step_no,
                decision: decision.into(),
                reason,
            });
            match step {
                Step::Retrieve {
                    query,
                    variants,
                    rewritten_from,
                    ..
                } => {
                    self.retrieve(ctx, run, query, variants, rewritten_from)
                        .await?
                }
                Step::Answer { .. } => return Ok(()),
                Step::Plan { tasks, .. } => match validate_plan(&tasks) {
                    Err(problem) if plan_retries < self.config.max_plan_retries => {
                        plan_retries += 1;
                        ctx.feedback = Some(format!(
                            "Your plan was rejected: {problem}. Send a corrected plan."
                        ));
                    }
                    Err(problem) => {
                        return Err(Stop::Fail(
                            FailureReason::InvalidModelOutput,
                            format!(
                                "the plan was still invalid after {plan_retries} corrections: {problem}"
                            ),
                        ));
                    }
                    Ok(()) => return self.execute(tasks, run, reports).await,
                },
            }
        }
        Err(Stop::Fail(
            FailureReason::RetryLimit,
            format!(
                "the host loop reached its limit of {} steps without deciding",
                self.config.max_steps
            ),
        ))
    }

    async fn retrieve(
        &self,
        ctx: &mut HostContext,
        run: &RunContext,
        query: String,
        variants: Vec<String>,
        rewritten_from: Option<String>,
    ) -> Result<(), Stop> {
        let attempt = ctx.retrievals + 1;
        let task_id = format!("retrieval-{attempt}");
        if ctx.retrievals >= self.config.max_retrievals {
            let message = format!(
                "retrieval stayed insufficient after {} attempts (last query: \"{}\")",
                self.config.max_retrievals, query
            );
            run.events.emit(Event::TaskFailed {
                task_id,
                reason: FailureReason::RetryLimit,
                message: message.clone(),
            });
            return Err(Stop::Fail(FailureReason::RetryLimit, message));
        }
        if run.workspace.is_none() {
            run.events.emit(Event::WorkspaceRequired {
                task_ids: vec![task_id],
                message: "searching the knowledge base needs a workspace; pass --workspace DIR"
                    .into(),
            });
            return Err(Stop::Fail(
                FailureReason::WorkspaceRequired,
                "no workspace is bound to this run".into(),
            ));
        }
        run.events.emit(Event::RetrievalStarted {
            attempt,
            query: query.clone(),
            variants: variants.clone(),
            rewritten_from,
        });
        let task = TaskRequest {
            id: task_id,
            kind: RETRIEVAL_KIND.into(),
            operation: "search".into(),
            input: json!({"query": query, "variants": variants, "limit": self.config.retrieval_limit}),
        };
        let outcome = run_task(&self.runtime, &self.registry, &task, run).await;
        ctx.retrievals = attempt;
        let data = match outcome {
            Ok(ok) => ok.data,
            Err(f) if f.reason == FailureReason::Cancelled || run.cancel.is_cancelled() => {
                return Err(Stop::Cancelled);
            }
            Err(f) => {
                return Err(Stop::Fail(
                    f.reason,
                    format!("retrieval failed: {}", f.message),
                ));
            }
        };
        let passages: Vec<Passage> =
            serde_json::from_value(data["passages"].clone()).unwrap_or_default();
        let hits = passages.len() as u32;
        for p in passages {
            if !ctx
                .passages
                .iter()
                .any(|q| q.path == p.path && q.line_start == p.line_start)
            {
                ctx.passages.push(p);
            }
        }
        // The model's reading of the passages (does one answer?) wins over
        // retrieval's share of query words found.
        let sufficient = self
            .model
            .judge_sufficiency(ctx)
            .unwrap_or_else(|| data["sufficient"].as_bool().unwrap_or(hits > 0));
        run.events.emit(Event::RetrievalCompleted {
            attempt,
            hits,
            sufficient,
        });
        ctx.last_retrieval_sufficient = Some(sufficient);
        Ok(())
    }

    /// Validate kinds, gate on the workspace, then run the plan's graph.
    async fn execute(
        &self,
        tasks: Vec<PlanTask>,
        run: &RunContext,
        reports: &mut Vec<TaskReport>,
    ) -> Result<(), Stop> {
        let events = &run.events;
        events.emit(Event::PlanCreated {
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
        events.emit(activity(
            "plan",
            format!("planned {} task(s): {}", tasks.len(), titles.join("; ")),
        ));
        let mut state: BTreeMap<String, TaskStatus> = tasks
            .iter()
            .map(|t| (t.id.clone(), TaskStatus::Pending))
            .collect();
        let mut first_failure: Option<(FailureReason, String)> = None;
        let by_id: BTreeMap<String, PlanTask> =
            tasks.iter().map(|t| (t.id.clone(), t.clone())).collect();

        // Validation: rejected tasks fail, valid ones go on.
        let mut valid = Vec::new();
        for task in &tasks {
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
            match rejection {
                Some(f) => {
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
                    state.insert(task.id.clone(), TaskStatus::Failed);
                    reports.push(report(
                        task,
                        "failed",
                        Some(f.reason),
                        f.message.clone(),
                        json!(null),
                    ));
                    first_failure.get_or_insert((f.reason, f.message));
                }
                None => valid.push(task.clone()),
            }
        }

        // Workspace gate: nothing runs if any task needs a workspace and there is none.
        if run.workspace.is_none() {
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
            if !needing.is_empty() {
                let message = format!(
                    "task(s) {} act on files or run commands and need a workspace; bind one with --workspace DIR",
                    needing.join(", ")
                );
                events.emit(Event::WorkspaceRequired {
                    task_ids: needing.clone(),
                    message: message.clone(),
                });
                events.emit(activity(
                    "workspace.required",
                    format!("stopped: {message}"),
                ));
                for t in &valid {
                    events.emit(Event::TaskSkipped {
                        task_id: t.id.clone(),
                        reason: "workspace_required".into(),
                    });
                    reports.push(report(
                        t,
                        "skipped",
                        None,
                        "no workspace bound".into(),
                        json!(null),
                    ));
                }
                return Err(Stop::Fail(FailureReason::WorkspaceRequired, message));
            }
        }

        // Dispatch: ready tasks (every dependency completed) run concurrently;
        // the first unrecoverable failure stops the rest (fail-fast).
        let valid_ids: HashSet<String> = valid.iter().map(|t| t.id.clone()).collect();
        let mut pending: Vec<PlanTask> = valid;
        let task_cancel = run.cancel.child_token();
        let task_run = RunContext {
            cancel: task_cancel.clone(),
            ..run.clone()
        };
        let mut running = FuturesUnordered::new();
        let mut stop_scheduling = false;
        loop {
            // Dependents of failed or skipped tasks are skipped.
            let mut i = 0;
            while i < pending.len() {
                let t = &pending[i];
                let dep_failed = t.depends_on.iter().any(|d| {
                    matches!(state.get(d), Some(TaskStatus::Failed | TaskStatus::Skipped))
                        || !by_id.contains_key(d)
                });
                if dep_failed || stop_scheduling {
                    let t = pending.remove(i);
                    let reason = if dep_failed {
                        "skipped_dependency_failed"
                    } else if run.cancel.is_cancelled() {
                        "cancelled"
                    } else {
                        "skipped_fail_fast"
                    };
                    events.emit(Event::TaskSkipped {
                        task_id: t.id.clone(),
                        reason: reason.into(),
                    });
                    events.emit(Event::PlanUpdated {
                        task_id: t.id.clone(),
                        status: TaskStatus::Skipped,
                    });
                    state.insert(t.id.clone(), TaskStatus::Skipped);
                    reports.push(report(
                        &t,
                        "skipped",
                        None,
                        reason.replace('_', " "),
                        json!(null),
                    ));
                } else {
                    i += 1;
                }
            }
            while running.len() < self.config.max_parallel.max(1) {
                let Some(pos) = pending.iter().position(|t| {
                    t.depends_on.iter().all(|d| {
                        state.get(d) == Some(&TaskStatus::Completed) && valid_ids.contains(d)
                    })
                }) else {
                    break;
                };
                let t = pending.remove(pos);
                state.insert(t.id.clone(), TaskStatus::Running);
                events.emit(Event::PlanUpdated {
                    task_id: t.id.clone(),
                    status: TaskStatus::Running,
                });
                let request = TaskRequest {
                    id: t.id.clone(),
                    kind: t.kind.clone(),
                    operation: t.operation.clone(),
                    input: t.input.clone(),
                };
                let task_run = &task_run;
                running.push(async move {
                    let (outcome, steps) =
                        run_task_with_steps(&self.runtime, &self.registry, &request, task_run)
                            .await;
                    (t, outcome, steps)
                });
            }
            let Some((task, outcome, steps)) = running.next().await else {
                break;
            };
            match outcome {
                Ok(ok) => {
                    state.insert(task.id.clone(), TaskStatus::Completed);
                    events.emit(Event::PlanUpdated {
                        task_id: task.id.clone(),
                        status: TaskStatus::Completed,
                    });
                    reports.push(report(&task, "completed", None, ok.summary, ok.data));
                }
                Err(f) => {
                    events.emit(activity(
                        "task.failed",
                        format!("task {} failed ({}): {}", task.id, f.reason, f.message),
                    ));
                    state.insert(task.id.clone(), TaskStatus::Failed);
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
                    reports.push(report(
                        &task,
                        "failed",
                        Some(f.reason),
                        f.message.clone(),
                        data,
                    ));
                    // Tasks share a child token; before any failure only an
                    // aborted approval cancels it, and an abort ends the run
                    // as cancelled, not failed.
                    if f.reason == FailureReason::Cancelled
                        && task_cancel.is_cancelled()
                        && first_failure.is_none()
                    {
                        run.cancel.cancel();
                    }
                    first_failure.get_or_insert((f.reason, f.message));
                    stop_scheduling = true;
                    task_cancel.cancel();
                }
            }
        }
        if run.cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        match first_failure {
            Some((reason, message)) => Err(Stop::Fail(reason, message)),
            None => Ok(()),
        }
    }
}

/// A plain-words line for the activity feed, from the host itself.
fn activity(kind: &str, message: String) -> Event {
    Event::Activity {
        task_id: None,
        kind: kind.into(),
        message,
        data: serde_json::Value::Null,
    }
}

fn report(
    task: &PlanTask,
    status: &str,
    reason: Option<FailureReason>,
    summary: String,
    data: serde_json::Value,
) -> TaskReport {
    TaskReport {
        task: task.clone(),
        status: status.into(),
        reason,
        summary,
        data,
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
    // Kahn's algorithm: whatever is left over sits on a cycle.
    let mut indegree: BTreeMap<&str, usize> = tasks
        .iter()
        .map(|t| (t.id.as_str(), t.depends_on.len()))
        .collect();
    let mut queue: Vec<&str> = indegree
        .iter()
        .filter(|(_, d)| **d == 0)
        .map(|(id, _)| *id)
        .collect();
    let mut seen = 0;
    while let Some(id) = queue.pop() {
        seen += 1;
        for t in tasks
            .iter()
            .filter(|t| t.depends_on.iter().any(|d| d == id))
        {
            let d = indegree.get_mut(t.id.as_str()).unwrap();
            *d -= 1;
            if *d == 0 {
                queue.push(t.id.as_str());
            }
        }
    }
    if seen < tasks.len() {
        let cyclic: Vec<&str> = indegree
            .iter()
            .filter(|(_, d)| **d > 0)
            .map(|(id, _)| *id)
            .collect();
        return Err(format!(
            "the dependencies form a cycle among {}",
            cyclic.join(", ")
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
