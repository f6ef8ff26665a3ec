//! Continuing a run another replica was running when it died (`[store]
//! resume`, docs/DEPLOY.md).
//!
//! When its plan is made a run saves a [`Checkpoint`]: what the model knew
//! (message, history, passages), the validated plan and the usage so far. Its
//! stored events say how far it got. [`ResumePoint::find`] reads both and
//! decides whether the run can go on without doing anything twice: no task
//! failed (a failing run was ending anyway), the answer was not being written
//! (its deltas would repeat), and every task that was running is safe to start
//! again ([`repeatable`]). [`Host::resume`] then emits `run.resumed`, runs the
//! rest of the plan (dependencies on completed tasks are met) and ends the run
//! as any run ends.
//!
//! The rules are deliberately narrow: a task that may have changed something
//! (a command that writes, a plugin operation) is never repeated; such a run
//! is interrupted, as with `resume = "off"`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Host, RunOutcome, RunState, budget, report};
use crate::plugins::context::RunContext;
use crate::run::model::{HostContext, TaskReport};
use capstan_protocol::{Envelope, Event, PlanTask, Risk, TaskStatus, Usage};

/// The checkpoint format this build writes and reads; another is not resumed.
const CHECKPOINT_VERSION: u32 = 1;

/// What a run saves when its plan is made, for [`ResumePoint::find`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    version: u32,
    ctx: HostContext,
    tasks: Vec<PlanTask>,
    usage: Usage,
}

impl Checkpoint {
    pub(super) fn new(ctx: &HostContext, tasks: &[PlanTask], usage: Usage) -> Self {
        Self {
            version: CHECKPOINT_VERSION,
            ctx: ctx.clone(),
            tasks: tasks.to_vec(),
            usage,
        }
    }

    /// The user's message, for the session's summary once the run ends.
    pub fn message(&self) -> &str {
        &self.ctx.message
    }

    /// The session's summary when the run started.
    pub fn summary(&self) -> &str {
        &self.ctx.summary
    }

    /// The workspace the run was bound to, as its replica resolved it.
    pub fn workspace(&self) -> Option<&str> {
        self.ctx.workspace.as_deref()
    }
}

/// An approval the dead replica asked for and nobody answered: its question
/// died with that replica (a restarted task asks again). The resumed run
/// closes it as `aborted` by policy, in its events and the audit.
#[derive(Debug, Clone)]
pub struct StaleApproval {
    pub id: String,
    pub task_id: String,
    pub action: String,
    pub command: String,
    pub cwd: String,
    pub risk: Risk,
    pub reasons: Vec<String>,
    /// The `ts` of its `approval.requested`.
    pub requested_at: String,
}

/// Where a resumed run picks up: what completed, what starts again, and the
/// seq its next event takes.
#[derive(Debug)]
pub struct ResumePoint {
    checkpoint: Checkpoint,
    /// Reports of the tasks that completed, in the order they completed.
    reports: Vec<TaskReport>,
    completed: Vec<String>,
    restarted: Vec<String>,
    /// The tasks still to run (restarted ones included), in plan order, with
    /// their dependencies on completed tasks dropped.
    remaining: Vec<PlanTask>,
    stale: Vec<StaleApproval>,
    next_seq: u64,
}

/// How far a task got, from the run's events.
#[derive(Debug, Default)]
struct Progress {
    status: Option<TaskStatus>,
    completed: Option<(String, Value)>,
    ran_a_command: bool,
    /// `exec` approvals asked for.
    exec_waiting: u32,
    /// Approvals answered, and approvals of other actions (asked while a
    /// command runs): any means a command may have started.
    settled: u32,
}

impl ResumePoint {
    /// Whether the run these events and this checkpoint describe can be
    /// continued safely, and from where. `Err` says why not, in words for the
    /// log (the run is then interrupted).
    pub fn find(checkpoint: &str, events: &[Envelope]) -> Result<Self, String> {
        let checkpoint: Checkpoint = serde_json::from_str(checkpoint)
            .map_err(|e| format!("its checkpoint cannot be read ({e})"))?;
        if checkpoint.version != CHECKPOINT_VERSION {
            return Err(format!(
                "its checkpoint has format {} and this build reads {CHECKPOINT_VERSION}",
                checkpoint.version
            ));
        }
        let mut progress: std::collections::HashMap<&str, Progress> = checkpoint
            .tasks
            .iter()
            .map(|t| (t.id.as_str(), Progress::default()))
            .collect();
        let mut approval_task: std::collections::HashMap<&str, &str> =
            std::collections::HashMap::new();
        let mut order: Vec<&str> = Vec::new();
        let mut stale: Vec<StaleApproval> = Vec::new();
        let mut next_seq = 0;
        for env in events {
            next_seq = next_seq.max(env.seq + 1);
            let task = |id: &str| progress.contains_key(id);
            match &env.event {
                Event::RunCompleted { .. }
                | Event::RunFailed { .. }
                | Event::RunCancelled { .. } => {
                    return Err("it has already ended".into());
                }
                Event::ResponseDelta { .. } | Event::ResponseCompleted { .. } => {
                    return Err("it was writing its answer, which would repeat".into());
                }
                Event::WorkspaceRequired { .. } => {
                    return Err("it stopped for want of a workspace".into());
                }
                Event::TaskFailed { task_id, .. } | Event::TaskSkipped { task_id, .. } => {
                    return Err(format!(
                        "task {task_id} did not complete, so the run was ending"
                    ));
                }
                Event::PlanUpdated { task_id, status } if task(task_id) => {
                    if matches!(status, TaskStatus::Failed | TaskStatus::Skipped) {
                        return Err(format!(
                            "task {task_id} did not complete, so the run was ending"
                        ));
                    }
                    if let Some(p) = progress.get_mut(task_id.as_str()) {
                        p.status = Some(*status);
                    }
                }
                Event::TaskCompleted {
                    task_id,
                    summary,
                    data,
                } if task(task_id) => {
                    if let Some(p) = progress.get_mut(task_id.as_str()) {
                        p.completed = Some((summary.clone(), data.clone()));
                    }
                    if !order.contains(&task_id.as_str()) {
                        order.push(task_id);
                    }
                }
                Event::TerminalStep { task_id, .. } if task(task_id) => {
                    if let Some(p) = progress.get_mut(task_id.as_str()) {
                        p.ran_a_command = true;
                    }
                }
                Event::ApprovalRequested {
                    approval_id,
                    task_id,
                    action,
                    command,
                    cwd,
                    risk,
                    reasons,
                    ..
                } if task(task_id) => {
                    stale.push(StaleApproval {
                        id: approval_id.clone(),
                        task_id: task_id.clone(),
                        action: action.clone(),
                        command: command.clone(),
                        cwd: cwd.clone(),
                        risk: *risk,
                        reasons: reasons.clone(),
                        requested_at: env.ts.clone(),
                    });
                    approval_task.insert(approval_id, task_id);
                    if let Some(p) = progress.get_mut(task_id.as_str()) {
                        if action == "exec" {
                            p.exec_waiting += 1;
                        } else {
                            p.settled += 1;
                        }
                    }
                }
                Event::ApprovalDecided { approval_id, .. } => {
                    stale.retain(|a| a.id != *approval_id);
                    if let Some(task_id) = approval_task.get(approval_id.as_str())
                        && let Some(p) = progress.get_mut(task_id)
                    {
                        // Decided, whichever way: the command may have started.
                        p.settled += 1;
                    }
                }
                _ => {}
            }
        }

        let mut reports = Vec::new();
        let mut completed = Vec::new();
        for id in &order {
            let (Some(task), Some(p)) = (
                checkpoint.tasks.iter().find(|t| t.id == *id),
                progress.get(id),
            ) else {
                continue;
            };
            if let Some((summary, data)) = &p.completed {
                reports.push(report(
                    task,
                    TaskStatus::Completed,
                    None,
                    summary.clone(),
                    data.clone(),
                ));
                completed.push(task.id.clone());
            }
        }
        let mut restarted = Vec::new();
        let mut remaining = Vec::new();
        for task in &checkpoint.tasks {
            if completed.contains(&task.id) {
                continue;
            }
            let started = progress
                .get(task.id.as_str())
                .is_some_and(|p| p.status.is_some() || p.ran_a_command || p.exec_waiting > 0);
            if started {
                let p = progress.get(task.id.as_str());
                repeatable(task, p)
                    .map_err(|why| format!("task {} was running and {why}", task.id))?;
                restarted.push(task.id.clone());
            }
            let mut task = task.clone();
            task.depends_on.retain(|d| !completed.contains(d));
            remaining.push(task);
        }
        Ok(Self {
            checkpoint,
            reports,
            completed,
            restarted,
            remaining,
            stale,
            next_seq,
        })
    }

    /// Approvals asked for and never answered (see [`StaleApproval`]).
    pub fn stale_approvals(&self) -> &[StaleApproval] {
        &self.stale
    }

    /// The seq of the resumed run's first event: after the last one stored.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }
}

/// Whether a task that was running may start again from the beginning: when
/// starting it again cannot do anything twice. `Err` says why not.
fn repeatable(task: &PlanTask, progress: Option<&Progress>) -> Result<(), String> {
    if task.kind == super::RETRIEVAL_KIND {
        return Ok(());
    }
    if task.kind != "terminal_exec" {
        return Err(format!(
            "`{}` operations may have changed something; only searches and read-only commands \
             are repeated",
            task.kind
        ));
    }
    let commands = planned_commands(&task.input);
    if !commands.is_empty()
        && commands
            .iter()
            .all(|c| capstan_policy::classify_shell(c).risk == Risk::ReadOnly)
    {
        return Ok(());
    }
    // Commands run one after another, each behind its approval: a first
    // command still waiting for its answer means none has started.
    if let Some(p) = progress
        && p.exec_waiting > 0
        && p.settled == 0
        && !p.ran_a_command
    {
        return Ok(());
    }
    Err("its commands may have changed something".into())
}

/// The command lines a `terminal_exec` task's input names (`command`, then
/// `commands`), as the plugin reads them.
fn planned_commands(input: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(c) = input.get("command").and_then(Value::as_str) {
        out.push(c.to_string());
    }
    if let Some(list) = input.get("commands").and_then(Value::as_array) {
        out.extend(list.iter().filter_map(Value::as_str).map(str::to_string));
    }
    out.retain(|c| !c.trim().is_empty());
    out
}

impl Host {
    /// Continue a run from `point` (see [`ResumePoint::find`]) to its
    /// terminal event.
    pub async fn resume(&self, point: ResumePoint, run: &RunContext) -> RunOutcome {
        let ResumePoint {
            checkpoint,
            reports,
            completed,
            restarted,
            remaining,
            stale,
            ..
        } = point;
        let mut message = format!(
            "the replica running this run stopped; this one continues it from its last \
             completed task ({} of {} task(s) done",
            completed.len(),
            checkpoint.tasks.len()
        );
        if !restarted.is_empty() {
            message.push_str(&format!(
                "; {} started again: {}",
                restarted.len(),
                restarted.join(", ")
            ));
        }
        message.push(')');
        run.events.emit(Event::RunResumed {
            completed,
            restarted,
            message,
        });
        // Their question died with the other replica; a restarted task asks again.
        for approval in stale {
            run.events.emit(Event::ApprovalDecided {
                approval_id: approval.id,
                decision: "aborted".into(),
                by: "policy".into(),
                via: None,
            });
        }
        let mut state = RunState {
            ctx: checkpoint.ctx,
            meter: budget::Meter::resumed(checkpoint.usage),
            reports,
        };
        let stopped = self
            .run_plan(remaining, run, &mut state.reports)
            .await
            .err();
        self.finalize(state, stopped, run).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn task(id: &str, kind: &str, input: Value, deps: &[&str]) -> PlanTask {
        PlanTask {
            id: id.into(),
            kind: kind.into(),
            operation: String::new(),
            input,
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            title: String::new(),
        }
    }

    fn checkpoint(tasks: Vec<PlanTask>) -> String {
        serde_json::to_string(&Checkpoint::new(
            &HostContext::default(),
            &tasks,
            Usage::default(),
        ))
        .unwrap()
    }

    fn envs(events: Vec<Event>) -> Vec<Envelope> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Envelope {
                seq: i as u64,
                run_id: "run_x".into(),
                ts: String::new(),
                event,
            })
            .collect()
    }

    fn running(id: &str) -> Event {
        Event::PlanUpdated {
            task_id: id.into(),
            status: TaskStatus::Running,
        }
    }

    fn done(id: &str) -> Vec<Event> {
        vec![
            Event::TaskCompleted {
                task_id: id.into(),
                summary: format!("{id} done"),
                data: json!({"id": id}),
            },
            Event::PlanUpdated {
                task_id: id.into(),
                status: TaskStatus::Completed,
            },
        ]
    }

    #[test]
    fn completed_tasks_keep_their_results_and_read_only_ones_start_again() {
        let plan = checkpoint(vec![
            task(
                "t1",
                "terminal_exec",
                json!({"command": "rm -rf build"}),
                &[],
            ),
            task(
                "t2",
                "terminal_exec",
                json!({"commands": ["ls -la", "cat README.md"]}),
                &["t1"],
            ),
            task("t3", "local_kb_retrieval", json!({"query": "x"}), &["t2"]),
        ]);
        let mut events = vec![running("t1")];
        events.extend(done("t1"));
        events.push(running("t2"));
        let point = ResumePoint::find(&plan, &envs(events)).unwrap();
        assert_eq!(point.completed, ["t1"]);
        assert_eq!(point.restarted, ["t2"]);
        assert_eq!(point.next_seq(), 4);
        assert_eq!(point.reports.len(), 1);
        assert_eq!(point.reports[0].summary, "t1 done");
        let ids: Vec<&str> = point.remaining.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["t2", "t3"]);
        assert!(point.remaining[0].depends_on.is_empty(), "t1 is met");
        assert_eq!(point.remaining[1].depends_on, ["t2"]);
    }

    #[test]
    fn a_running_command_that_writes_is_never_repeated() {
        let plan = checkpoint(vec![task(
            "t1",
            "terminal_exec",
            json!({"command": "sed -i s/a/b/ notes.txt"}),
            &[],
        )]);
        let err = ResumePoint::find(&plan, &envs(vec![running("t1")])).unwrap_err();
        assert!(err.contains("t1") && err.contains("changed"), "{err}");
        // A plugin operation neither.
        let plan = checkpoint(vec![task("t1", "docx", json!({}), &[])]);
        let err = ResumePoint::find(&plan, &envs(vec![running("t1")])).unwrap_err();
        assert!(err.contains("docx"), "{err}");
    }

    #[test]
    fn a_command_still_waiting_for_approval_starts_again_but_not_once_answered() {
        let plan = checkpoint(vec![task(
            "t1",
            "terminal_exec",
            json!({"command": "touch made.txt"}),
            &[],
        )]);
        let asked = Event::ApprovalRequested {
            approval_id: "apr_1".into(),
            task_id: "t1".into(),
            action: "exec".into(),
            command: "touch made.txt".into(),
            cwd: ".".into(),
            risk: Risk::Write,
            reasons: vec![],
            always: None,
        };
        let waiting = envs(vec![running("t1"), asked.clone()]);
        let point = ResumePoint::find(&plan, &waiting).unwrap();
        assert_eq!(point.restarted, ["t1"]);
        let stale: Vec<&str> = point
            .stale_approvals()
            .iter()
            .map(|a| a.id.as_str())
            .collect();
        assert_eq!(stale, ["apr_1"], "the unanswered question is closed");
        let answered = envs(vec![
            running("t1"),
            asked,
            Event::ApprovalDecided {
                approval_id: "apr_1".into(),
                decision: "approved".into(),
                by: "user".into(),
                via: None,
            },
        ]);
        assert!(ResumePoint::find(&plan, &answered).is_err());
    }

    #[test]
    fn runs_that_failed_ended_or_were_answering_are_not_resumed() {
        let plan = checkpoint(vec![
            task("t1", "local_kb_retrieval", json!({}), &[]),
            task("t2", "local_kb_retrieval", json!({}), &[]),
        ]);
        let failed = envs(vec![Event::TaskFailed {
            task_id: "t1".into(),
            reason: capstan_protocol::FailureReason::Timeout,
            message: String::new(),
        }]);
        assert!(ResumePoint::find(&plan, &failed).is_err());
        let mut answering = done("t1");
        answering.extend(done("t2"));
        answering.push(Event::ResponseDelta { text: "Hi".into() });
        assert!(ResumePoint::find(&plan, &envs(answering)).is_err());
        // Every task done and no word of the answer out: only the answer is left.
        let mut all_done = done("t1");
        all_done.extend(done("t2"));
        let point = ResumePoint::find(&plan, &envs(all_done)).unwrap();
        assert!(point.remaining.is_empty());
        assert_eq!(point.reports.len(), 2);
        assert!(ResumePoint::find("{not json", &[]).is_err());
        let old = plan.replace("\"version\":1", "\"version\":99");
        assert!(
            ResumePoint::find(&old, &[])
                .unwrap_err()
                .contains("format 99")
        );
    }
}
