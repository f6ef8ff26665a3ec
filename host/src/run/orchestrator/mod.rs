//! A run, as a state machine:
//!
//! `run.started` -> host analysis -> retrieval loop ([`retrieval`]: at most
//! [`RunConfig::max_retrievals`] insufficient retrievals, then `retry-limit`) ->
//! answer or plan -> plan validation ([`plan`]: structure problems go back to
//! the model, bounded; unknown kinds `unsupported-capability`, writing-workflow
//! kinds `unsupported-legacy-capability`; valid tasks go on) -> workspace gate
//! (`workspace.required`, nothing runs) -> dispatch over the dependency graph
//! ([`schedule`], independent tasks in parallel, fail-fast) -> finalization
//! ([`finalize`]: `response.delta`..., `response.completed`) -> `run.completed` |
//! `run.failed` | `run.cancelled`. A valid plan saves a checkpoint first, from
//! which another replica can continue the run ([`resume`]).
//!
//! What a run carries from stage to stage is one [`RunState`]; why it stopped
//! early is one [`Stop`]. One cancellation token (in [`RunContext`]) reaches
//! every step: model calls, plugin calls (epoch interruption) and child
//! processes (the exec service).

mod budget;
mod finalize;
mod plan;
mod resume;
mod retrieval;
mod schedule;

use std::sync::Arc;

use crate::plugins::context::RunContext;
use crate::plugins::registry::Registry;
use crate::plugins::runtime::Runtime;
use crate::run::model::{
    CapabilitySummary, HostContext, HostModel, ModelFailure, OperationSummary, Step, TaskReport,
    Turn,
};
use capstan_protocol::{Event, FailureReason, StepDecision, Usage};

pub use plan::validate_plan;
pub use resume::{Checkpoint, ResumePoint};
pub use retrieval::RETRIEVAL_KIND;

/// Where a run's [`Checkpoint`] goes when its plan is made (the store, so
/// another replica can resume the run).
pub type CheckpointSink = Arc<dyn Fn(&Checkpoint) + Send + Sync>;

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
    /// Receives the run's checkpoint once its plan is valid; `None` keeps none.
    pub checkpoints: Option<CheckpointSink>,
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

/// What a run carries from stage to stage: what the model knows so far, what
/// it has cost, and how each planned task ended.
struct RunState {
    ctx: HostContext,
    meter: budget::Meter,
    reports: Vec<TaskReport>,
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
        for tool in self.registry.external_tools() {
            out.push(CapabilitySummary {
                kind: tool.kind().to_string(),
                operations: vec![OperationSummary {
                    name: tool.operation().to_string(),
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
        run.events.emit(Event::RunStarted {
            message: req.message.clone(),
            session_id: req.session_id.clone(),
            workspace: run.workspace.as_ref().map(|w| w.display().to_string()),
            model: self.model.id(),
        });
        let mut state = RunState {
            ctx: HostContext {
                message: req.message.clone(),
                history: req.history,
                summary: req.summary,
                workspace: run.workspace.as_ref().map(|w| w.display().to_string()),
                capabilities: self.capabilities(run).await,
                ..Default::default()
            },
            meter: budget::Meter::default(),
            reports: Vec::new(),
        };
        let stopped = self.drive(&mut state, run).await.err();
        self.finalize(state, stopped, run).await
    }

    /// Analysis, retrieval and planning until the model answers or a plan has run.
    async fn drive(&self, state: &mut RunState, run: &RunContext) -> Result<(), Stop> {
        let mut plan_retries = 0;
        for step_no in 1..=self.config.max_steps {
            if run.cancel.is_cancelled() {
                return Err(Stop::Cancelled);
            }
            let (step, usage) = match self.model.step(&state.ctx, &run.cancel).await {
                Ok(done) => done,
                Err(ModelFailure::Malformed(message, usage)) => {
                    self.account(&mut state.meter, usage, run);
                    return Err(Stop::Fail(FailureReason::InvalidModelOutput, message));
                }
                Err(other) => return Err(other.into()),
            };
            if let Some(stop) = self.account(&mut state.meter, usage, run) {
                return Err(stop);
            }
            let (decision, reason) = match &step {
                Step::Retrieve { reason, .. } => (StepDecision::Retrieve, reason.clone()),
                Step::Answer { reason } => (StepDecision::Answer, reason.clone()),
                Step::Plan { reason, .. } => (StepDecision::Plan, reason.clone()),
            };
            run.events.emit(Event::HostAnalysis {
                step: step_no,
                decision,
                reason,
            });
            match step {
                Step::Retrieve {
                    query,
                    variants,
                    rewritten_from,
                    ..
                } => {
                    self.retrieve(&mut state.ctx, run, query, variants, rewritten_from)
                        .await?
                }
                Step::Answer { .. } => return Ok(()),
                Step::Plan { tasks, .. } => match validate_plan(&tasks) {
                    Err(problem) if plan_retries < self.config.max_plan_retries => {
                        plan_retries += 1;
                        state.ctx.feedback = Some(format!(
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
                    Ok(()) => {
                        if let Some(save) = &self.checkpoints {
                            save(&Checkpoint::new(&state.ctx, &tasks, state.meter.usage));
                        }
                        return self.execute(tasks, run, &mut state.reports).await;
                    }
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

/// How one task ended, for the final answer.
fn report(
    task: &capstan_protocol::PlanTask,
    status: capstan_protocol::TaskStatus,
    reason: Option<FailureReason>,
    summary: String,
    data: serde_json::Value,
) -> TaskReport {
    TaskReport {
        task: task.clone(),
        status,
        reason,
        summary,
        data,
    }
}
