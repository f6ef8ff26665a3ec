//! The terminal feed `capstan ask`, `capstan chat` and `capstan invoke` share:
//! the plan with task states, each step, approvals, the streamed answer and
//! its sources (stdout), usage and cost (stderr); or the raw envelopes as JSON
//! lines. Each fact is said once: events that repeat another (an `activity`
//! echoing an approval decision or a command the feed already showed) are not
//! printed. Approvals that wait for a person are handed to the input loop,
//! which reads the answer from stdin (y / n / a / b, and w "always for this
//! workspace" where the approval offers it). Everything goes through
//! `crate::term`, so text from files, commands and models is inert.

use std::sync::Arc;

use parking_lot::Mutex;

use capstan_store::Decision;
use tokio::sync::mpsc;

use crate::plugins::services::approval::{ApprovalBroker, ApproveMode};
use crate::run::app::Frontend;
use crate::{err, errln, out, outln};
use capstan_protocol::{
    ChangeSetState, ConnectVerdict, Envelope, Event, FailureReason, TaskStatus,
};

/// An approval a person must answer.
#[derive(Debug, Clone)]
pub struct Ask {
    pub approval_id: String,
    /// The rule `w` ("always for this workspace") writes; `None`: not offered.
    pub always: Option<String>,
}

/// How the approval mode was chosen, so a decision nobody typed is explained
/// in the words that fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApproveSource {
    /// `--approve` on the command line.
    Flag(ApproveMode),
    /// No `--approve`, and stdin is not a terminal: nobody can be asked.
    NoTerminal,
}

/// `activity` kinds that repeat, in words, an event this feed renders from its
/// structure (they exist for feeds built from `activity` alone, see
/// docs/EVENTS.md): the plan (`plan.created`), a task's failure
/// (`task.failed`), a missing workspace (`workspace.required`), the approval
/// prompt and decision (`approval.*`), a command that ran (`terminal.step`),
/// a search's hit count (`retrieval.completed`, or the task's summary).
const MIRRORED_ACTIVITY: &[&str] = &[
    "plan",
    "task.rejected",
    "task.failed",
    "workspace.required",
    "approval.waiting",
    "approval",
    "terminal.ran",
    "kb.searched",
];

/// Which tasks' outcomes get a line of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcomes {
    /// A run (`ask`, `chat`): the plan's tasks; the host's own retrievals
    /// are reported by `retrieval.*` events, and their outcome would repeat
    /// them.
    PlanTasks,
    /// One task straight to a capability (`invoke`): its outcome is the news.
    EveryTask,
}

pub struct Feed {
    json: bool,
    approve: ApproveSource,
    outcomes: Outcomes,
    broker: Arc<ApprovalBroker>,
    plan: Mutex<Vec<(String, String, TaskStatus)>>,
    asks: mpsc::UnboundedSender<Ask>,
}

impl Feed {
    /// A feed and the receiver of the approvals it asks.
    pub fn new(
        json: bool,
        approve: ApproveSource,
        outcomes: Outcomes,
        broker: Arc<ApprovalBroker>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<Ask>) {
        let (asks, rx) = mpsc::unbounded_channel();
        let feed = Arc::new(Self {
            json,
            approve,
            outcomes,
            broker,
            plan: Mutex::default(),
            asks,
        });
        (feed, rx)
    }

    pub fn frontend(self: &Arc<Self>) -> Frontend {
        let feed = self.clone();
        Arc::new(move |env: &Arc<Envelope>| feed.render(env))
    }

    fn render(&self, env: &Envelope) {
        let event = &env.event;
        if let Event::ApprovalRequested {
            approval_id,
            always,
            ..
        } = event
            && self.broker.is_open(approval_id)
        {
            print_approval(event);
            let _ = self.asks.send(Ask {
                approval_id: approval_id.clone(),
                always: always.clone(),
            });
        }
        if self.json {
            outln!("{}", crate::term::json(env));
        } else {
            self.print(event);
        }
    }

    /// Whether a task's outcome gets its own line (see [`Outcomes`]).
    fn reports(&self, task_id: &str) -> bool {
        self.outcomes == Outcomes::EveryTask
            || self.plan.lock().iter().any(|(id, ..)| id == task_id)
    }

    fn print_plan(&self) {
        let plan = self.plan.lock();
        for (id, title, status) in plan.iter() {
            let mark = match status {
                TaskStatus::Pending => "·",
                TaskStatus::Running => "▸",
                TaskStatus::Completed => "✓",
                TaskStatus::Failed => "✗",
                TaskStatus::Skipped => "–",
            };
            errln!("    {mark} [{id}] {title} ({})", status_word(*status));
        }
    }

    /// Who answered an approval, in words that fit how the mode was chosen.
    fn decided_by(&self, by: &str) -> String {
        match (by, self.approve) {
            ("flag", ApproveSource::Flag(mode)) => format!("by --approve {}", mode_word(mode)),
            ("flag", ApproveSource::NoTerminal) => {
                "nobody to ask: stdin is not a terminal; pass --approve ask or --approve all".into()
            }
            (by, _) => format!("by {by}"),
        }
    }

    fn print(&self, event: &Event) {
        match event {
            Event::RunResumed { message, .. } => errln!("· resumed: {message}"),
            Event::HostAnalysis {
                decision, reason, ..
            } => errln!("· {decision}: {reason}"),
            Event::RetrievalStarted {
                query,
                rewritten_from,
                attempt,
                ..
            } => {
                if let (Some(asked), 1) = (rewritten_from, attempt) {
                    errln!("· follow-up \"{asked}\" read with the previous question")
                }
                errln!("· searching the knowledge base for \"{query}\"")
            }
            Event::RetrievalCompleted {
                hits, sufficient, ..
            } => errln!(
                "  {hits} passage{}{}",
                if *hits == 1 { "" } else { "s" },
                if *sufficient { "" } else { " (not enough)" }
            ),
            Event::PlanCreated { tasks } => {
                *self.plan.lock() = tasks
                    .iter()
                    .map(|t| {
                        let title = if t.title.is_empty() {
                            format!("{} {}", t.kind, t.operation)
                        } else {
                            t.title.clone()
                        };
                        (t.id.clone(), title, TaskStatus::Pending)
                    })
                    .collect();
                errln!("· plan:");
                self.print_plan();
            }
            Event::PlanUpdated { task_id, status } => {
                let title = {
                    let mut plan = self.plan.lock();
                    plan.iter_mut().find(|(id, ..)| id == task_id).map(|t| {
                        t.2 = *status;
                        t.1.clone()
                    })
                };
                // Completion and failure get their own line with the result.
                if let Some(title) = title
                    && *status != TaskStatus::Completed
                    && *status != TaskStatus::Failed
                {
                    errln!("· [{task_id}] {title}: {}", status_word(*status));
                }
            }
            Event::TaskFailed {
                task_id,
                reason,
                message,
            } if self.reports(task_id) => {
                errln!("  ✗ [{task_id}] {}", failure_words(*reason, message))
            }
            Event::TaskSkipped { task_id, reason } => {
                errln!("  – [{task_id}] skipped: {reason}")
            }
            Event::TaskCompleted {
                task_id, summary, ..
            } if self.reports(task_id) => {
                errln!("  ✓ [{task_id}] {summary}")
            }
            Event::WorkspaceRequired { message, .. } => {
                errln!("! workspace required: {message}")
            }
            Event::TerminalStep {
                command,
                exit_code,
                signal,
                duration_ms,
                timed_out,
                output_tail,
                grant,
                ..
            } => {
                let status = match (exit_code, signal, timed_out) {
                    (_, _, true) => "timed out".to_string(),
                    (Some(c), _, _) => format!("exit {c}"),
                    (None, Some(s), _) => format!("signal {s}"),
                    (None, None, false) => "no exit status".into(),
                };
                errln!("  $ {command}   ({status}, {duration_ms} ms)");
                errln!("    ran with: {}", grant.describe());
                let lines: Vec<&str> = output_tail.lines().collect();
                for line in &lines[lines.len().saturating_sub(5)..] {
                    errln!("    │ {line}");
                }
            }
            Event::WorkspaceChanges {
                change_set,
                state,
                files,
                ..
            } => {
                let verb = match state {
                    ChangeSetState::Pending => "held for review",
                    ChangeSetState::Discarded => "discarded",
                    ChangeSetState::Undone => "undone",
                    ChangeSetState::Applied => "applied",
                };
                errln!(
                    "  changes {verb}: {} path(s) (undo: capstan undo {change_set})",
                    files.len()
                );
                for f in files.iter().take(10) {
                    let from = f
                        .from
                        .as_ref()
                        .map(|p| format!(" (from {p})"))
                        .unwrap_or_default();
                    errln!("    {} {}{from}", f.kind, f.path);
                }
                if files.len() > 10 {
                    errln!(
                        "    ... and {} more (capstan changes {change_set})",
                        files.len() - 10
                    );
                }
            }
            Event::NetworkConnect {
                host,
                port,
                verdict,
                reason,
                bytes_up,
                bytes_down,
                ..
            } => {
                if *verdict == ConnectVerdict::Allowed && reason.is_none() {
                    errln!("    ⇄ {host}:{port} allowed ({bytes_up} B up, {bytes_down} B down)");
                } else {
                    let why = reason.as_deref().unwrap_or("");
                    errln!("    ⇄ {host}:{port} {verdict}: {why}");
                }
            }
            Event::ApprovalDecided { decision, by, .. } => {
                errln!("  approval: {decision} ({})", self.decided_by(by))
            }
            Event::Activity { kind, .. } if MIRRORED_ACTIVITY.contains(&kind.as_str()) => {}
            Event::Activity { message, .. } => errln!("  • {message}"),
            Event::CapabilityStatus {
                status, message, ..
            } => errln!("  ! {status}: {message}"),
            Event::BudgetWarning { message, .. } => errln!("! {message}"),
            Event::ResponseDelta { text } => out!("{text}"),
            Event::ResponseCompleted { citations, .. } => {
                outln!();
                if !citations.is_empty() {
                    outln!("\nSources:");
                    for c in citations {
                        let heading = if c.heading.is_empty() {
                            String::new()
                        } else {
                            format!(" › {}", c.heading)
                        };
                        outln!(
                            "[{}] {}{heading} (lines {}-{})",
                            c.n,
                            c.path,
                            c.line_start,
                            c.line_end
                        );
                    }
                }
            }
            Event::RunCompleted { usage }
            | Event::RunCancelled { usage }
            | Event::RunFailed { usage, .. } => {
                if !self.plan_is_empty() {
                    errln!("· plan, at the end:");
                    self.print_plan();
                }
                let cost = usage
                    .cost_usd
                    .map(|c| format!(", ${c:.4}"))
                    .unwrap_or_default();
                let est = if usage.estimated { " (estimated)" } else { "" };
                let tokens = format!(
                    "{} in, {} out tokens{est}{cost}",
                    usage.input_tokens, usage.output_tokens
                );
                match event {
                    Event::RunFailed {
                        reason, message, ..
                    } => errln!("· failed: {} · {tokens}", failure_words(*reason, message)),
                    Event::RunCancelled { .. } => errln!("· cancelled: {tokens}"),
                    _ => errln!("· completed: {tokens}"),
                }
            }
            _ => {}
        }
    }

    fn plan_is_empty(&self) -> bool {
        self.plan.lock().is_empty()
    }
}

/// A failure in one phrase: the message, with the reason code only when it
/// adds something (`failed` says nothing the message does not).
pub fn failure_words(reason: FailureReason, message: &str) -> String {
    match (reason, message.trim()) {
        (FailureReason::Failed, "") => "failed".into(),
        (FailureReason::Failed, m) => m.to_string(),
        (r, "") => r.to_string(),
        (r, m) => format!("{m} ({r})"),
    }
}

/// The prompt for an approval a person must answer (on stderr, so `--json`
/// output stays clean).
pub fn print_approval(event: &Event) {
    if let Event::ApprovalRequested {
        command,
        risk,
        reasons,
        cwd,
        always,
        ..
    } = event
    {
        let place = if cwd.is_empty() || cwd == "." {
            String::new()
        } else {
            format!("   [in {cwd}]")
        };
        errln!("\n  ? approval needed ({risk}): {command}{place}");
        for r in reasons {
            errln!("      - {r}");
        }
        match always {
            Some(rule) => err!(
                "    run it? [y]es / [n]o / [a]lways this session / always for this [w]orkspace \
                 (writes \"{rule}\" to your capstan.toml) / a[b]ort: "
            ),
            None => err!("    run it? [y]es / [n]o / [a]lways this session / a[b]ort: "),
        }
    }
}

fn mode_word(mode: ApproveMode) -> &'static str {
    match mode {
        ApproveMode::Ask => "ask",
        ApproveMode::All => "all",
        ApproveMode::None => "none",
    }
}

fn status_word(s: TaskStatus) -> &'static str {
    match s {
        TaskStatus::Pending => "pending",
        TaskStatus::Running => "running",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Skipped => "skipped",
    }
}

/// A person's answer to `ask`'s prompt; `None` asks again (`w` only where
/// the approval offers "always for this workspace").
pub fn parse_decision(line: &str, ask: &Ask) -> Option<Decision> {
    match line.trim().to_lowercase().as_str() {
        "y" | "yes" => Some(Decision::Approved),
        "n" | "no" => Some(Decision::Denied),
        "a" | "always" => Some(Decision::ApprovedForSession),
        "w" | "workspace" if ask.always.is_some() => Some(Decision::ApprovedAlways),
        "b" | "abort" => Some(Decision::Aborted),
        _ => None,
    }
}

/// What to type, when a line was not an answer.
pub fn answer_hint(ask: &Ask) -> &'static str {
    if ask.always.is_some() {
        "    please answer y, n, a, w or b: "
    } else {
        "    please answer y, n, a or b: "
    }
}

/// Lines of stdin, read on their own thread (stdin reads block) and delivered
/// in order; the channel closes at end of input.
pub fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx
                        .send(line.trim_end_matches(['\n', '\r']).to_string())
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// Answers each approval from stdin lines (for `ask`); end of input denies.
pub async fn answer_approvals(
    broker: Arc<ApprovalBroker>,
    mut asks: mpsc::UnboundedReceiver<Ask>,
    mut lines: mpsc::UnboundedReceiver<String>,
) {
    while let Some(ask) = asks.recv().await {
        loop {
            let Some(line) = lines.recv().await else {
                errln!("(end of input: denied)");
                let _ = broker.decide(
                    &ask.approval_id,
                    Decision::Denied,
                    crate::plugins::services::approval::Via::Terminal,
                );
                break;
            };
            match parse_decision(&line, &ask) {
                Some(d) => {
                    let _ = broker.decide(
                        &ask.approval_id,
                        d,
                        crate::plugins::services::approval::Via::Terminal,
                    );
                    break;
                }
                None => {
                    err!("{}", answer_hint(&ask));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn w_answers_only_an_approval_that_offers_always_for_this_workspace() {
        let offered = Ask {
            approval_id: "apr_1".into(),
            always: Some("api.example.com".into()),
        };
        let plain = Ask {
            approval_id: "apr_2".into(),
            always: None,
        };
        assert_eq!(
            parse_decision(" W ", &offered),
            Some(Decision::ApprovedAlways)
        );
        assert_eq!(parse_decision("w", &plain), None, "asks again");
        assert_eq!(
            parse_decision("a", &plain),
            Some(Decision::ApprovedForSession)
        );
        assert!(answer_hint(&offered).contains(" w "));
        assert!(!answer_hint(&plain).contains(" w "));
    }
}
