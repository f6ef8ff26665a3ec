//! Runs a task file: strategy, dependency graph, budget, timeout, results.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use capstan_graph::{Ended, Handler, NotRun};
use capstan_models::{PriceTable, Usage, estimate_tokens};
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::budget::{Budget, BudgetGate, Check};
use crate::config::ContextMode;
use crate::context::{self, ContextItem, FileItem, Skill};
use crate::event::{Emitter, EventKind, EventSink};
use crate::result::{AgentStep, Metadata, TaskResult, TokenUsage};
use crate::runner::{AgentJob, Runner, RunnerDeps, RunnerFactory};
use crate::task::{TaskFile, TaskSpec};
use crate::{AgentError, ExecutionResult, ExecutionStatus, RuntimeKind, Strategy, TaskStatus};

/// How to run a task file. Command-line choices override the file's, which override
/// the config's.
pub struct ExecuteOptions {
    /// How to run the tasks; `None`: the file's, else chosen from the tasks.
    pub strategy: Option<Strategy>,
    /// Default runtime for tasks that name none (over the file's `runtime`).
    pub runtime: Option<RuntimeKind>,
    /// Spending limit in US dollars (over the file's); `None`: the file's, else none.
    pub budget_usd: Option<f64>,
    /// Wall-clock limit of the whole execution; `None`: the file's, else none.
    pub timeout: Option<Duration>,
    /// Most tasks at once under `parallel` (over the file's and the config's).
    pub max_parallel: Option<usize>,
    /// Runtime to retry a failed step on, for tasks without their own `retry_runtime`.
    pub retry_runtime: Option<RuntimeKind>,
    /// Prices of the models, for the budget and the reported cost.
    pub prices: PriceTable,
    /// Answers when the next step would pass the budget.
    pub gate: Arc<dyn BudgetGate>,
    /// Receives every event of the execution.
    pub events: EventSink,
    /// Cancels the whole execution (Ctrl-C); partial results are still returned.
    pub cancel: CancellationToken,
    /// What the runners need from the host (config, model, workspace).
    pub deps: RunnerDeps,
}

/// The agent name of a context-summarising step.
pub const SUMMARISER: &str = "summariser";

/// A task's inputs, loaded before anything runs so a bad file path or skill name
/// stops the execution up front.
struct Prepared {
    skills: Vec<Skill>,
    files: Vec<FileItem>,
    runtime: RuntimeKind,
}

struct Run<'a> {
    file: &'a TaskFile,
    opts: &'a ExecuteOptions,
    strategy: Strategy,
    factory: RunnerFactory,
    budget: Budget,
    events: Emitter,
    cancel: CancellationToken,
    timed_out: Arc<AtomicBool>,
    prepared: Vec<Prepared>,
}

impl capstan_graph::Node for TaskSpec {
    fn id(&self) -> &str {
        &self.id
    }
    fn depends_on(&self) -> &[String] {
        &self.depends_on
    }
}

/// A task of the file with its position there (where its prepared runner is).
struct Indexed<'a> {
    index: usize,
    task: &'a TaskSpec,
}

impl capstan_graph::Node for Indexed<'_> {
    fn id(&self) -> &str {
        &self.task.id
    }
    fn depends_on(&self) -> &[String] {
        &self.task.depends_on
    }
}

/// The executor's side of the scheduler: results by task id, each task
/// seeing its prerequisites' outputs.
struct Scheduled<'a> {
    run: &'a Run<'a>,
    done: HashMap<String, TaskResult>,
}

impl<'a> Handler<Indexed<'a>> for Scheduled<'a> {
    type Output = TaskResult;
    type Running = BoxFuture<'a, TaskResult>;

    fn stopped(&self) -> bool {
        self.run.cancel.is_cancelled()
    }

    fn start(&mut self, node: &Indexed<'a>) -> Self::Running {
        let task = node.task;
        let inputs: Vec<ContextItem> = task
            .depends_on
            .iter()
            .map(|d| ContextItem {
                label: format!("result of prerequisite task `{d}`"),
                text: self
                    .done
                    .get(d)
                    .map(|r| r.output.clone())
                    .unwrap_or_default(),
            })
            .collect();
        self.run.run_task(node.index, inputs).boxed()
    }

    fn ended(&mut self, _node: &Indexed<'a>, result: TaskResult) -> Ended {
        let ended = if result.status == TaskStatus::Completed {
            Ended::Completed
        } else {
            Ended::Failed
        };
        self.done.insert(result.task_id.clone(), result);
        ended
    }

    fn not_run(&mut self, node: &Indexed<'a>, why: NotRun<'_>) {
        let task = node.task;
        let result = match why {
            NotRun::DependencyFailed(failed) => self.run.skipped(task, failed),
            NotRun::Stopped => self.run.never_started(task),
        };
        self.done.insert(task.id.clone(), result);
    }
}

/// Run every task of `file` and collect the results. Errors only for problems found
/// before the first step (bad file references, unknown skills, no runtime in MCP mode);
/// everything after is reported in the result's statuses.
pub async fn execute(file: &TaskFile, opts: ExecuteOptions) -> Result<ExecutionResult, AgentError> {
    let started = Instant::now();
    let order = file.topological_order()?;
    let execution_id = format!("exec_{}", uuid::Uuid::new_v4().simple());
    let events = Emitter::new(execution_id.clone(), opts.events.clone());
    let (strategy, strategy_reason) = match opts.strategy.or(file.strategy) {
        Some(s) => (s, "given".to_string()),
        None => file.auto_strategy(),
    };
    let factory = RunnerFactory::new(opts.deps.clone());
    let skills_dir = opts.deps.workspace.join(
        file.skills_dir
            .as_ref()
            .unwrap_or(&opts.deps.config.skills_dir),
    );
    let mut prepared = Vec::with_capacity(file.tasks.len());
    for t in &file.tasks {
        prepared.push(Prepared {
            skills: context::select_skills(&skills_dir, t)?,
            files: context::load_files(&opts.deps.workspace, t)?,
            runtime: factory.resolve(t.runtime.or(opts.runtime).or(file.runtime))?,
        });
    }
    let notices = check_runtimes(&factory, file, &opts, &mut prepared).await?;
    let budget_usd = opts.budget_usd.or(file.budget_usd);
    let run = Run {
        file,
        opts: &opts,
        strategy,
        factory,
        budget: Budget::new(budget_usd, opts.prices.clone()),
        events,
        cancel: opts.cancel.child_token(),
        timed_out: Arc::new(AtomicBool::new(false)),
        prepared,
    };
    run.events.emit(EventKind::ExecutionStarted {
        strategy,
        strategy_reason,
        tasks: file.tasks.len(),
        budget_usd,
    });
    for n in notices {
        run.events.emit(n);
    }
    let timer = file
        .timeout_secs
        .map(Duration::from_secs)
        .or(opts.timeout)
        .map(|limit| {
            let cancel = run.cancel.clone();
            let flag = run.timed_out.clone();
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                flag.store(true, Ordering::SeqCst);
                cancel.cancel();
            })
        });
    let tasks = run.schedule(&order).await;
    if let Some(t) = timer {
        t.abort();
    }
    let status = run.status(&tasks);
    let mut agents: Vec<String> = Vec::new();
    let mut runtimes: Vec<RuntimeKind> = Vec::new();
    for s in tasks.iter().flat_map(|t| &t.steps) {
        if !agents.contains(&s.agent) {
            agents.push(s.agent.clone());
        }
        if !runtimes.contains(&s.runtime) {
            runtimes.push(s.runtime);
        }
    }
    let total_tokens = run.budget.tokens();
    let total_cost = run.budget.spent_usd();
    let cost_complete = run.budget.unpriced_models().is_empty();
    let duration_ms = started.elapsed().as_millis() as u64;
    run.events.emit(EventKind::ExecutionFinished {
        status,
        total_tokens,
        total_cost_usd: total_cost,
        cost_complete,
        duration_ms,
    });
    Ok(ExecutionResult {
        metadata: Metadata {
            execution_id,
            strategy,
            agents,
            runtimes,
            duration_ms,
            total_tokens,
            total_cost,
            cost_complete,
            budget_usd,
            status,
        },
        tasks,
    })
}

/// Builds the runtime of every task before anything runs. A task whose runtime cannot
/// start moves to its `retry_runtime` when that one can (a `runtime.fallback` event,
/// returned to be emitted after `execution.started`); otherwise the execution stops
/// here, with one line saying what each runtime needs.
async fn check_runtimes(
    factory: &RunnerFactory,
    file: &TaskFile,
    opts: &ExecuteOptions,
    prepared: &mut [Prepared],
) -> Result<Vec<EventKind>, AgentError> {
    let mut notices = Vec::new();
    // (runtime, what it needs, the tasks it was to run)
    let mut problems: Vec<(RuntimeKind, String, Vec<String>)> = Vec::new();
    for (task, prep) in file.tasks.iter().zip(prepared.iter_mut()) {
        let reason = match factory.build(prep.runtime).await {
            Ok((_, notice)) => {
                notices.extend(notice);
                continue;
            }
            Err(e) => e.to_string(),
        };
        let retry = task
            .retry_runtime
            .or(opts.retry_runtime)
            .filter(|r| *r != prep.runtime);
        if let Some(to) = retry
            && let Ok((_, notice)) = factory.build(to).await
        {
            notices.extend(notice);
            notices.push(EventKind::RuntimeFallback {
                task: Some(task.id.clone()),
                from: prep.runtime,
                to,
                reason,
            });
            prep.runtime = to;
            continue;
        }
        match problems.iter_mut().find(|p| p.0 == prep.runtime) {
            Some(p) => p.2.push(task.id.clone()),
            None => problems.push((prep.runtime, reason, vec![task.id.clone()])),
        }
    }
    if opts.deps.config.context == ContextMode::Summarise && opts.deps.cli_model.is_none() {
        return Err(AgentError::Runtime(format!(
            "no task was started: {}, or set it back to \"truncate\"",
            factory.needs_model("[agents] context = \"summarise\"")
        )));
    }
    if problems.is_empty() {
        return Ok(notices);
    }
    let what: Vec<String> = problems
        .iter()
        .map(|(_, reason, tasks)| {
            format!(
                "{} {}: {reason}",
                if tasks.len() == 1 { "task" } else { "tasks" },
                tasks.join(", ")
            )
        })
        .collect();
    Err(AgentError::Runtime(format!(
        "no task was started: {}",
        what.join("; ")
    )))
}

impl Run<'_> {
    /// Run the tasks over their dependency graph with the shared scheduler
    /// (`capstan-graph`): a task starts when its prerequisites completed, up
    /// to the concurrency limit; a task whose prerequisite did not complete is
    /// skipped; once the execution is stopped, tasks not started end as
    /// stopped. Results in topological order.
    async fn schedule(&self, order: &[usize]) -> Vec<TaskResult> {
        let limit = match self.strategy {
            Strategy::Parallel => self
                .opts
                .max_parallel
                .or(self.file.max_parallel)
                .unwrap_or(self.opts.deps.config.max_parallel)
                .max(1),
            Strategy::Single | Strategy::Multi => 1,
        };
        let nodes: Vec<Indexed<'_>> = order
            .iter()
            .map(|&index| Indexed {
                index,
                task: &self.file.tasks[index],
            })
            .collect();
        let mut scheduled = Scheduled {
            run: self,
            done: HashMap::new(),
        };
        capstan_graph::run(&nodes, limit, &[], &mut scheduled).await;
        let mut done = scheduled.done;
        order
            .iter()
            .filter_map(|&i| done.remove(&self.file.tasks[i].id))
            .collect()
    }

    fn skipped(&self, task: &TaskSpec, failed: &str) -> TaskResult {
        let status = TaskStatus::SkippedDependencyFailed;
        self.events.emit(EventKind::TaskSkipped {
            task: task.id.clone(),
            status,
            failed_dependency: failed.to_string(),
        });
        empty_result(
            task,
            status,
            Some(format!("prerequisite task `{failed}` did not complete")),
        )
    }

    /// A task the execution stopped before it started.
    fn never_started(&self, task: &TaskSpec) -> TaskResult {
        let status = self.stopped_status();
        self.events.emit(EventKind::TaskFinished {
            task: task.id.clone(),
            status,
        });
        empty_result(
            task,
            status,
            Some("not started: the execution was stopped".into()),
        )
    }

    fn stopped_status(&self) -> TaskStatus {
        if self.timed_out.load(Ordering::SeqCst) {
            TaskStatus::Timeout
        } else {
            TaskStatus::Cancelled
        }
    }

    /// One task: one agent (single, parallel) or architect then dev (multi), each
    /// agent seeing the prerequisites' outputs and the agents before it.
    async fn run_task(&self, index: usize, mut context: Vec<ContextItem>) -> TaskResult {
        let task = &self.file.tasks[index];
        let prep = &self.prepared[index];
        self.events.emit(EventKind::TaskStarted {
            task: task.id.clone(),
        });
        let role = task.role.clone().unwrap_or_else(|| "dev".into());
        let agents: Vec<String> = match self.strategy {
            Strategy::Multi => vec!["architect".into(), role],
            Strategy::Single | Strategy::Parallel => vec![role],
        };
        let mut steps: Vec<AgentStep> = Vec::new();
        let mut status = TaskStatus::Completed;
        let mut error = None;
        for agent in &agents {
            if self.cancel.is_cancelled() {
                status = self.stopped_status();
                error = Some(format!("stopped before agent `{agent}` started"));
                break;
            }
            match self
                .run_agent(task, prep, agent, &context, &mut steps)
                .await
            {
                Ok(step_output) => context.push(ContextItem {
                    label: format!("{agent}'s output for this task"),
                    text: step_output,
                }),
                Err((s, e)) => {
                    status = s;
                    error = e;
                    break;
                }
            }
        }
        let mut token_usage = TokenUsage::default();
        let mut cost = Some(0.0);
        for s in &steps {
            token_usage.merge(&s.token_usage);
            cost = cost.zip(s.cost).map(|(a, b)| a + b);
        }
        self.events.emit(EventKind::TaskFinished {
            task: task.id.clone(),
            status,
        });
        TaskResult {
            task_id: task.id.clone(),
            status,
            output: steps.last().map(|s| s.output.clone()).unwrap_or_default(),
            token_usage,
            cost,
            depends_on: task.depends_on.clone(),
            steps,
            error,
        }
    }

    /// One agent of a task, retried once on the retry runtime if its runtime fails.
    /// `Ok(output)` when it completed; `Err((status, error))` otherwise.
    async fn run_agent(
        &self,
        task: &TaskSpec,
        prep: &Prepared,
        agent: &str,
        context: &[ContextItem],
        steps: &mut Vec<AgentStep>,
    ) -> Result<String, (TaskStatus, Option<String>)> {
        let fail = |e: AgentError| (TaskStatus::Failed, Some(e.to_string()));
        let (template, role_model) = context::role_template(self.file, agent).map_err(fail)?;
        let limit = self.opts.deps.config.context_tokens;
        let mut skills = prep.skills.clone();
        let mut earlier = context.to_vec();
        let mut files = prep.files.clone();
        if self.opts.deps.config.context == ContextMode::Summarise
            && let Some((original_tokens, over)) =
                context::overflow(agent, template, task, &skills, &earlier, &files, limit)
                    .map_err(fail)?
        {
            let mut summarised = Vec::new();
            for o in &over {
                let text = context::section_text(&mut skills, &mut earlier, &mut files, o.section);
                if let Some(summary) = self.summarise(task, o, text, steps).await? {
                    *text = summary;
                    summarised.push(o.label.clone());
                }
            }
            if !summarised.is_empty() {
                self.events.emit(EventKind::ContextSummarised {
                    task: task.id.clone(),
                    agent: agent.to_string(),
                    original_tokens,
                    limit_tokens: limit,
                    summarised,
                });
            }
        }
        // Whatever is still over the limit (a summary that came out too long, a
        // failed summary) is cut.
        let prompt =
            context::render(agent, template, task, skills, earlier, files, limit).map_err(fail)?;
        if let Some((original_tokens, cut)) = prompt.truncated.clone() {
            self.events.emit(EventKind::ContextTruncated {
                task: task.id.clone(),
                agent: agent.to_string(),
                original_tokens,
                limit_tokens: limit,
                cut,
            });
        }
        let job = AgentJob {
            task_id: task.id.clone(),
            agent: agent.to_string(),
            prompt: prompt.text,
            model: task.model.clone().or(role_model.map(str::to_string)),
            workspace: self.opts.deps.workspace.clone(),
        };
        let runner = self
            .factory
            .get(prep.runtime, &self.events)
            .await
            .map_err(fail)?;
        self.check_budget(&job, runner.as_ref()).await?;
        let step = self.run_step(runner.as_ref(), &job).await;
        let retry_on = task.retry_runtime.or(self.opts.retry_runtime);
        let step = match retry_on {
            Some(other) if step.status == TaskStatus::Failed && other != runner.runtime() => {
                self.events.emit(EventKind::RuntimeRetry {
                    task: task.id.clone(),
                    agent: agent.to_string(),
                    from: runner.runtime(),
                    to: other,
                    error: step.error.clone().unwrap_or_default(),
                });
                steps.push(step);
                let retry = self.factory.get(other, &self.events).await.map_err(fail)?;
                self.check_budget(&job, retry.as_ref()).await?;
                self.run_step(retry.as_ref(), &job).await
            }
            _ => step,
        };
        let result = match step.status {
            TaskStatus::Completed => Ok(step.output.clone()),
            s => Err((s, step.error.clone())),
        };
        steps.push(step);
        result
    }

    /// One section summarised by the configured model, as a step of its own (agent
    /// [`SUMMARISER`], budget-checked and counted like any step). `None` when the
    /// summary failed: the section is then cut instead.
    async fn summarise(
        &self,
        task: &TaskSpec,
        over: &context::Overflow,
        text: &str,
        steps: &mut Vec<AgentStep>,
    ) -> Result<Option<String>, (TaskStatus, Option<String>)> {
        let limit_chars = self.opts.deps.config.context_tokens as usize * 4;
        // The summariser's own prompt must fit the limit too.
        let source = context::cut_middle(text, limit_chars.saturating_sub(2_000).max(1_000));
        let words = (over.keep_chars / 6).max(20);
        let prompt = format!(
            "Summarise the {} below for an agent working on task `{}`: {}\n\
             Keep what matters for that task (names, numbers, decisions, errors, file paths). \
             At most {words} words. Answer with the summary only.\n\n{source}",
            over.label, task.id, task.description
        );
        let job = AgentJob {
            task_id: task.id.clone(),
            agent: SUMMARISER.to_string(),
            prompt,
            model: None,
            workspace: self.opts.deps.workspace.clone(),
        };
        let runner = self
            .factory
            .get(RuntimeKind::Cli, &self.events)
            .await
            .map_err(|e| (TaskStatus::Failed, Some(e.to_string())))?;
        self.check_budget(&job, runner.as_ref()).await?;
        let step = self.run_step(runner.as_ref(), &job).await;
        let summary = (step.status == TaskStatus::Completed && !step.output.trim().is_empty())
            .then(|| format!("[summary of {}]\n{}", over.label, step.output.trim()));
        if matches!(step.status, TaskStatus::Cancelled | TaskStatus::Timeout) {
            let status = step.status;
            steps.push(step);
            return Err((status, Some("stopped while summarising the context".into())));
        }
        steps.push(step);
        Ok(summary)
    }

    /// Warn before a step that would take spending over the budget; on "stop", cancel
    /// the execution.
    async fn check_budget(
        &self,
        job: &AgentJob,
        runner: &dyn Runner,
    ) -> Result<(), (TaskStatus, Option<String>)> {
        let model = job.model.clone().or_else(|| runner.default_model());
        let projected = Usage {
            input_tokens: estimate_tokens(&job.prompt),
            output_tokens: self.opts.deps.config.expected_output_tokens,
            estimated: true,
            cost_usd: None,
        };
        let next = self
            .budget
            .price(model.as_deref(), &projected)
            .unwrap_or(0.0);
        let mut warned = false;
        let check = self
            .budget
            .check(
                next,
                &job.task_id,
                &job.agent,
                self.opts.gate.as_ref(),
                |w| {
                    warned = true;
                    self.events.emit(EventKind::BudgetWarning {
                        spent_usd: w.spent_usd,
                        next_step_usd: w.next_step_usd,
                        budget_usd: w.budget_usd,
                        task: w.task.clone(),
                        agent: w.agent.clone(),
                    });
                },
            )
            .await;
        if warned {
            self.events.emit(EventKind::BudgetDecision {
                proceed: check != Check::Cancel,
            });
        }
        if check == Check::Cancel {
            self.cancel.cancel();
            return Err((
                TaskStatus::Cancelled,
                Some(format!(
                    "cancelled at the budget warning before agent `{}` (spent ${:.4} of ${:.4})",
                    job.agent,
                    self.budget.spent_usd(),
                    self.budget.limit_usd().unwrap_or_default()
                )),
            ));
        }
        Ok(())
    }

    async fn run_step(&self, runner: &dyn Runner, job: &AgentJob) -> AgentStep {
        let runtime = runner.runtime();
        let started = Instant::now();
        self.events.emit(EventKind::AgentStarted {
            task: job.task_id.clone(),
            agent: job.agent.clone(),
            runtime,
            model: job.model.clone().or_else(|| runner.default_model()),
        });
        let progress = |p| {
            self.events.emit(EventKind::Progress {
                task: job.task_id.clone(),
                agent: job.agent.clone(),
                runtime,
                progress: p,
            })
        };
        let out = runner.run(job, &progress, self.cancel.clone()).await;
        let model = out
            .model
            .clone()
            .or_else(|| job.model.clone())
            .or_else(|| runner.default_model());
        let cost = self.budget.price(model.as_deref(), &out.usage);
        self.budget.record(model.as_deref(), &out.usage, cost);
        let status = match out.status {
            TaskStatus::Cancelled => self.stopped_status(),
            s => s,
        };
        let token_usage = TokenUsage::from(out.usage);
        self.events.emit(EventKind::AgentFinished {
            task: job.task_id.clone(),
            agent: job.agent.clone(),
            runtime,
            status,
            usage: token_usage,
            cost_usd: cost,
            error: out.error.clone(),
        });
        AgentStep {
            agent: job.agent.clone(),
            runtime,
            model,
            status,
            output: out.output,
            token_usage,
            cost,
            error: out.error,
            duration_ms: started.elapsed().as_millis() as u64,
        }
    }

    fn status(&self, tasks: &[TaskResult]) -> ExecutionStatus {
        if self.timed_out.load(Ordering::SeqCst) {
            return ExecutionStatus::Timeout;
        }
        if self.cancel.is_cancelled() {
            return ExecutionStatus::Cancelled;
        }
        let completed = tasks
            .iter()
            .filter(|t| t.status == TaskStatus::Completed)
            .count();
        if completed == tasks.len() {
            ExecutionStatus::Completed
        } else if completed == 0 {
            ExecutionStatus::Failed
        } else {
            ExecutionStatus::Partial
        }
    }
}

fn empty_result(task: &TaskSpec, status: TaskStatus, error: Option<String>) -> TaskResult {
    TaskResult {
        task_id: task.id.clone(),
        status,
        output: String::new(),
        token_usage: TokenUsage::default(),
        cost: Some(0.0),
        depends_on: task.depends_on.clone(),
        steps: Vec::new(),
        error,
    }
}
