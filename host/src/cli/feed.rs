//! The terminal feed `capstan ask` and `capstan chat` share: the plan with task
//! states, each step, approvals, the streamed answer (stdout), citations,
//! usage and cost (stderr); or the raw envelopes as JSON lines. Approvals that
//! wait for a person are handed to the input loop, which reads the answer
//! from stdin (y / n / a / b).

use std::io::Write;
use std::sync::{Arc, Mutex};

use capstan_store::Decision;
use tokio::sync::mpsc;

use crate::app::Frontend;
use crate::protocol::{Envelope, Event, TaskStatus};
use crate::services::approval::ApprovalBroker;

/// An approval a person must answer.
#[derive(Debug, Clone)]
pub struct Ask {
    pub approval_id: String,
}

pub struct Feed {
    json: bool,
    broker: Arc<ApprovalBroker>,
    plan: Mutex<Vec<(String, String, TaskStatus)>>,
    asks: mpsc::UnboundedSender<Ask>,
}

impl Feed {
    /// A feed and the receiver of the approvals it asks.
    pub fn new(
        json: bool,
        broker: Arc<ApprovalBroker>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<Ask>) {
        let (asks, rx) = mpsc::unbounded_channel();
        let feed = Arc::new(Self {
            json,
            broker,
            plan: Mutex::default(),
            asks,
        });
        (feed, rx)
    }

    pub fn frontend(self: &Arc<Self>) -> Frontend {
        let feed = self.clone();
        Arc::new(move |env: &Envelope| feed.render(env))
    }

    fn render(&self, env: &Envelope) {
        if let Event::ApprovalRequested { approval_id, .. } = &env.event
            && self.broker.is_open(approval_id)
        {
            print_approval(&env.event);
            let _ = self.asks.send(Ask {
                approval_id: approval_id.clone(),
            });
        }
        if self.json {
            println!("{}", serde_json::to_string(env).unwrap_or_default());
        } else {
            self.print(&env.event);
        }
    }

    fn print_plan(&self) {
        let plan = self.plan.lock().unwrap();
        for (id, title, status) in plan.iter() {
            let mark = match status {
                TaskStatus::Pending => "·",
                TaskStatus::Running => "▸",
                TaskStatus::Completed => "✓",
                TaskStatus::Failed => "✗",
                TaskStatus::Skipped => "–",
            };
            eprintln!("    {mark} [{id}] {title} ({})", status_word(*status));
        }
    }

    fn print(&self, event: &Event) {
        let mut out = std::io::stdout();
        match event {
            Event::HostAnalysis {
                decision, reason, ..
            } => eprintln!("· {decision}: {reason}"),
            Event::RetrievalStarted { query, .. } => {
                eprintln!("· searching the knowledge base for \"{query}\"")
            }
            Event::RetrievalCompleted {
                hits, sufficient, ..
            } => eprintln!(
                "  {hits} passages{}",
                if *sufficient { "" } else { " (not enough)" }
            ),
            Event::PlanCreated { tasks } => {
                *self.plan.lock().unwrap() = tasks
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
                eprintln!("· plan:");
                self.print_plan();
            }
            Event::PlanUpdated { task_id, status } => {
                let title = {
                    let mut plan = self.plan.lock().unwrap();
                    plan.iter_mut().find(|(id, ..)| id == task_id).map(|t| {
                        t.2 = *status;
                        t.1.clone()
                    })
                };
                if let Some(title) = title
                    && *status != TaskStatus::Completed
                    && *status != TaskStatus::Failed
                {
                    eprintln!("· [{task_id}] {title}: {}", status_word(*status));
                }
            }
            Event::TaskFailed {
                task_id,
                reason,
                message,
            } => eprintln!("  ✗ [{task_id}] {reason}: {message}"),
            Event::TaskSkipped { task_id, reason } => {
                eprintln!("  – [{task_id}] skipped: {reason}")
            }
            Event::TaskCompleted {
                task_id, summary, ..
            } => eprintln!("  ✓ [{task_id}] {summary}"),
            Event::WorkspaceRequired { message, .. } => {
                eprintln!("! workspace required: {message}")
            }
            Event::TerminalStep {
                command,
                exit_code,
                signal,
                duration_ms,
                timed_out,
                output_tail,
                ..
            } => {
                let status = match (exit_code, signal, timed_out) {
                    (_, _, true) => "timed out".to_string(),
                    (Some(c), _, _) => format!("exit {c}"),
                    (None, Some(s), _) => format!("signal {s}"),
                    _ => "?".into(),
                };
                eprintln!("  $ {command}   ({status}, {duration_ms} ms)");
                for line in output_tail
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                {
                    eprintln!("    │ {line}");
                }
            }
            Event::ApprovalDecided { decision, by, .. } => {
                eprintln!("  approval: {decision} (by {by})")
            }
            // The approval prompt already says so.
            Event::Activity { kind, .. } if kind == "approval.waiting" => {}
            Event::Activity { message, .. } => eprintln!("  • {message}"),
            Event::CapabilityStatus {
                status, message, ..
            } => eprintln!("  ! {status}: {message}"),
            Event::BudgetWarning { message, .. } => eprintln!("! {message}"),
            Event::ResponseDelta { text } => {
                let _ = write!(out, "{text}");
                let _ = out.flush();
            }
            Event::ResponseCompleted { citations, .. } => {
                println!();
                if !citations.is_empty() {
                    let list: Vec<String> = citations
                        .iter()
                        .map(|c| format!("[{}] {}:{}-{}", c.n, c.path, c.line_start, c.line_end))
                        .collect();
                    eprintln!("· sources: {}", list.join(", "));
                }
            }
            Event::RunCompleted { usage }
            | Event::RunCancelled { usage }
            | Event::RunFailed { usage, .. } => {
                if !self.plan.lock().unwrap().is_empty() {
                    eprintln!("· plan, at the end:");
                    self.print_plan();
                }
                let cost = usage
                    .cost_usd
                    .map(|c| format!(", ${c:.4}"))
                    .unwrap_or_default();
                let est = if usage.estimated { " (estimated)" } else { "" };
                let end = match event {
                    Event::RunCompleted { .. } => "completed".to_string(),
                    Event::RunCancelled { .. } => "cancelled".to_string(),
                    Event::RunFailed { reason, .. } => format!("failed ({reason})"),
                    _ => unreachable!(),
                };
                eprintln!(
                    "· {end}: {} in, {} out tokens{est}{cost}",
                    usage.input_tokens, usage.output_tokens
                );
            }
            _ => {}
        }
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
        ..
    } = event
    {
        let place = if cwd.is_empty() {
            String::new()
        } else {
            format!("   [in {cwd}]")
        };
        eprintln!("\n  ? approval needed ({risk}): {command}{place}");
        for r in reasons {
            eprintln!("      - {r}");
        }
        eprint!("    run it? [y]es / [n]o / [a]lways this session / a[b]ort: ");
        let _ = std::io::stderr().flush();
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

/// A person's answer to an approval prompt; `None` asks again.
pub fn parse_decision(line: &str) -> Option<Decision> {
    match line.trim().to_lowercase().as_str() {
        "y" | "yes" => Some(Decision::Approved),
        "n" | "no" => Some(Decision::Denied),
        "a" | "always" => Some(Decision::ApprovedForSession),
        "b" | "abort" => Some(Decision::Aborted),
        _ => None,
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
                eprintln!("(end of input: denied)");
                let _ = broker.decide(
                    &ask.approval_id,
                    Decision::Denied,
                    crate::services::approval::Via::Terminal,
                );
                break;
            };
            match parse_decision(&line) {
                Some(d) => {
                    let _ = broker.decide(
                        &ask.approval_id,
                        d,
                        crate::services::approval::Via::Terminal,
                    );
                    break;
                }
                None => {
                    eprint!("    please answer y, n, a or b: ");
                    let _ = std::io::stderr().flush();
                }
            }
        }
    }
}
