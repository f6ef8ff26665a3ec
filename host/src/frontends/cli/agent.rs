//! `capstan agent run`: delegate a task file to agent runtimes (Claude Code, OpenCode,
//! Capstan's own model) with a strategy, a budget and a timeout. The work itself is in
//! the capstan-agents crate; this wires config, the budget prompt and the output.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use async_trait::async_trait;
use capstan_agents::event::{EventKind, Progress};
use capstan_agents::runner::{Mode, RunnerDeps};
use capstan_agents::{
    AgentEvent, BudgetGate, BudgetWarning, ExecuteOptions, ExecutionResult, ExecutionStatus,
    FixedGate, RuntimeKind, Strategy, TaskFile,
};
use capstan_models::{PriceTable, ProviderKind};
use tokio_util::sync::CancellationToken;

use super::{GlobalArgs, workspace_root};
use crate::config::Config;
use crate::{err, errln, outln};

#[derive(clap::Subcommand, Debug)]
pub enum AgentCommand {
    /// Run the tasks of a TASKS.yaml file on agent runtimes (see docs/AGENTS.md).
    Run(RunArgs),
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnBudget {
    /// Ask at the terminal (reads y/n from stdin).
    Ask,
    /// Go on over budget (the warning is still shown).
    Continue,
    /// Stop at the warning; results so far are kept.
    Cancel,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum RuntimeArg {
    Claude,
    Opencode,
    Cli,
}

impl From<RuntimeArg> for RuntimeKind {
    fn from(r: RuntimeArg) -> Self {
        match r {
            RuntimeArg::Claude => RuntimeKind::Claude,
            RuntimeArg::Opencode => RuntimeKind::OpenCode,
            RuntimeArg::Cli => RuntimeKind::Cli,
        }
    }
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum StrategyArg {
    Single,
    Multi,
    Parallel,
}

impl From<StrategyArg> for Strategy {
    fn from(s: StrategyArg) -> Self {
        match s {
            StrategyArg::Single => Strategy::Single,
            StrategyArg::Multi => Strategy::Multi,
            StrategyArg::Parallel => Strategy::Parallel,
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Runtimes: `claude` runs Claude Code headless (with Capstan's capabilities as MCP tools), \
`opencode` an OpenCode server (`opencode serve`), `cli` Capstan's own [model]. Configure them under [agents] \
in capstan.toml.\n\n\
Strategies: `single` (one agent per task), `multi` (architect designs, dev implements), `parallel` \
(independent tasks at once, dependents get their prerequisites' outputs). Without --strategy and without \
`strategy:` in the file: several tasks -> parallel, one complex task -> multi, else single.\n\n\
Exit status: 0 completed, 1 failed or partial, 124 timeout, 130 cancelled, 2 bad input or setup.\n\n\
Examples:\n  capstan agent run examples/agents/TASKS.yaml\n  \
capstan agent run --runtime claude --strategy multi --budget 0.50 TASKS.yaml\n  \
capstan agent run --json --on-budget cancel TASKS.yaml | jq 'select(.type==\"result\")'"
)]
pub struct RunArgs {
    /// The task file (format: docs/AGENTS.md).
    #[arg(value_name = "TASKS.yaml")]
    pub tasks: PathBuf,
    /// Runtime for tasks that name none (over the file's `runtime`).
    #[arg(long, value_enum)]
    pub runtime: Option<RuntimeArg>,
    /// Strategy (over the file's `strategy`); default: chosen automatically.
    #[arg(long, value_enum)]
    pub strategy: Option<StrategyArg>,
    /// Spending limit in USD; a warning comes before a step would exceed it.
    #[arg(long, value_name = "USD")]
    pub budget: Option<f64>,
    /// What to do at a budget warning. Default: ask on a terminal, cancel otherwise.
    #[arg(long, value_enum)]
    pub on_budget: Option<OnBudget>,
    /// Stop everything after this long (e.g. 90s, 10m); partial results are returned.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// Most tasks at once under `parallel`.
    #[arg(long, value_name = "N")]
    pub max_parallel: Option<usize>,
    /// Retry a step whose runtime fails on this runtime.
    #[arg(long, value_enum)]
    pub retry_runtime: Option<RuntimeArg>,
    /// Workspace folder: files tasks reference, skills, the agents' working directory.
    #[arg(long, short, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,
    /// Print events and the result as JSON lines on stdout.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, cmd: AgentCommand) -> Result<ExitCode> {
    match cmd {
        AgentCommand::Run(args) => run_tasks(global, args).await,
    }
}

async fn run_tasks(global: &GlobalArgs, args: RunArgs) -> Result<ExitCode> {
    let file = TaskFile::load(&args.tasks)?;
    let workspace = workspace_root(global, &args.workspace)?;
    let dirs = global.dirs()?;
    let config = Config::load(&dirs.user_config_file())?;
    let mut prices = PriceTable::defaults();
    if let Some(extra) = &config.prices {
        prices.merge(extra);
    }
    let cli_model = match &config.model {
        Some(m) if m.kind != ProviderKind::Offline => Some((
            capstan_models::build(m)
                .context("the [model] in capstan.toml (used by the `cli` runtime)")?,
            m.model.clone(),
        )),
        _ => None,
    };
    let on_budget = args.on_budget.unwrap_or(if std::io::stdin().is_terminal() {
        OnBudget::Ask
    } else {
        OnBudget::Cancel
    });
    let gate: Arc<dyn BudgetGate> = match on_budget {
        OnBudget::Ask => Arc::new(PromptGate),
        OnBudget::Continue => Arc::new(FixedGate(true)),
        OnBudget::Cancel => Arc::new(FixedGate(false)),
    };
    let json = args.json;
    let cancel = CancellationToken::new();
    {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
            }
        });
    }
    let opts = ExecuteOptions {
        strategy: args.strategy.map(Into::into),
        runtime: args.runtime.map(Into::into),
        budget_usd: args.budget,
        timeout: args.timeout,
        max_parallel: args.max_parallel,
        retry_runtime: args.retry_runtime.map(Into::into),
        prices,
        gate,
        events: Arc::new(move |e: AgentEvent| {
            if json {
                outln!("{}", crate::term::json(&e));
            } else {
                feed(&e, on_budget);
            }
        }),
        cancel,
        deps: RunnerDeps {
            config: config.agents.clone().unwrap_or_default(),
            cli_model,
            capstan_exe: std::env::current_exe().ok(),
            workspace,
            mode: Mode::Cli,
            config_file: Some(dirs.user_config_file()),
        },
    };
    let result = capstan_agents::execute(&file, opts).await?;
    if json {
        let mut line = serde_json::to_value(&result)?;
        line["type"] = "result".into();
        outln!("{}", crate::term::json(&line));
    } else {
        print_result(&result);
    }
    Ok(match result.metadata.status {
        ExecutionStatus::Completed => ExitCode::SUCCESS,
        ExecutionStatus::Failed | ExecutionStatus::Partial => ExitCode::from(1),
        ExecutionStatus::Timeout => ExitCode::from(124),
        ExecutionStatus::Cancelled => ExitCode::from(130),
    })
}

/// The budget question at the terminal, off the async threads.
struct PromptGate;

#[async_trait]
impl BudgetGate for PromptGate {
    async fn proceed(&self, w: &BudgetWarning) -> bool {
        let w = w.clone();
        tokio::task::spawn_blocking(move || {
            loop {
                err!(
                    "    continue over the budget (${:.4} spent, next step about ${:.4}, budget ${:.4})? [y]es / [n]o: ",
                    w.spent_usd, w.next_step_usd, w.budget_usd
                );
                let mut line = String::new();
                if std::io::stdin().read_line(&mut line).unwrap_or(0) == 0 {
                    return false;
                }
                match line.trim().to_lowercase().as_str() {
                    "y" | "yes" => return true,
                    "n" | "no" | "" => return false,
                    _ => continue,
                }
            }
        })
        .await
        .unwrap_or(false)
    }
}

fn usd(v: Option<f64>) -> String {
    v.map_or("cost unknown".into(), |c| format!("${c:.4}"))
}

/// The human feed on stderr; outputs go to stdout at the end.
fn feed(e: &AgentEvent, on_budget: OnBudget) {
    match &e.kind {
        EventKind::ExecutionStarted {
            strategy,
            strategy_reason,
            tasks,
            budget_usd,
        } => errln!(
            "· {} · {tasks} task(s) · strategy {strategy} ({strategy_reason}){}",
            e.execution_id,
            budget_usd
                .map(|b| format!(" · budget ${b:.2}"))
                .unwrap_or_default()
        ),
        EventKind::AgentStarted {
            task,
            agent,
            runtime,
            model,
        } => errln!(
            "  ▶ {task} · {agent} on {runtime}{}",
            model
                .as_ref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        ),
        EventKind::Progress {
            task,
            progress: Progress::ToolUse { tool, .. },
            ..
        } => errln!("    {task}: tool {tool}"),
        EventKind::Progress {
            task,
            progress: Progress::Status { message },
            ..
        } => errln!("    {task}: {message}"),
        EventKind::ContextTruncated {
            task,
            agent,
            original_tokens,
            limit_tokens,
            cut,
        } => errln!(
            "    {task} · {agent}: prompt of ~{original_tokens} tokens cut to {limit_tokens} ({})",
            cut.join(", ")
        ),
        EventKind::AgentFinished {
            task,
            agent,
            runtime,
            status,
            usage,
            cost_usd,
            error,
        } => errln!(
            "  {} {task} · {agent} on {runtime}: {} · {} tokens{} · {}{}",
            if *status == capstan_agents::TaskStatus::Completed {
                "✓"
            } else {
                "✗"
            },
            status.as_str(),
            usage.total,
            if usage.estimated { " (estimated)" } else { "" },
            usd(*cost_usd),
            error
                .as_ref()
                .map(|e| format!("\n      {e}"))
                .unwrap_or_default()
        ),
        EventKind::RuntimeRetry { task, from, to, .. } => {
            errln!("  ↻ {task}: {from} failed, retrying on {to}")
        }
        EventKind::RuntimeFallback {
            task,
            from,
            to,
            reason,
        } => match task {
            Some(task) => {
                errln!("! {task}: {from} is unavailable, using its retry runtime {to}: {reason}")
            }
            None => errln!("! {from} is unavailable, using {to} instead: {reason}"),
        },
        EventKind::SecurityWarning { runtime, message } => {
            errln!("! WARNING {runtime}: {message}")
        }
        EventKind::ContextSummarised {
            task,
            agent,
            original_tokens,
            limit_tokens,
            summarised,
        } => errln!(
            "    {task} · {agent}: prompt of ~{original_tokens} tokens over the {limit_tokens} limit; the model summarised {}",
            summarised.join(", ")
        ),
        EventKind::TaskSkipped {
            task,
            failed_dependency,
            ..
        } => errln!("  – {task} skipped: prerequisite {failed_dependency} did not complete"),
        EventKind::BudgetWarning {
            spent_usd,
            next_step_usd,
            budget_usd,
            task,
            agent,
        } => {
            errln!(
                "! budget: ${spent_usd:.4} spent; {task} · {agent} would add about ${next_step_usd:.4}, over the ${budget_usd:.4} budget"
            );
            if on_budget != OnBudget::Ask {
                errln!(
                    "  --on-budget {}: {}",
                    if on_budget == OnBudget::Continue {
                        "continue"
                    } else {
                        "cancel"
                    },
                    if on_budget == OnBudget::Continue {
                        "going on"
                    } else {
                        "stopping here"
                    }
                );
            }
        }
        EventKind::BudgetDecision { proceed } => {
            errln!(
                "  budget: {}",
                if *proceed {
                    "continuing over budget"
                } else {
                    "cancelled"
                }
            )
        }
        EventKind::ExecutionFinished { .. }
        | EventKind::TaskStarted { .. }
        | EventKind::TaskFinished { .. }
        | EventKind::Progress { .. } => {}
    }
}

fn print_result(r: &ExecutionResult) {
    for t in &r.tasks {
        outln!("== {} [{}] ==", t.task_id, t.status.as_str());
        if r.metadata.strategy == Strategy::Multi && t.steps.len() > 1 {
            for s in &t.steps {
                outln!("-- {} ({}) --\n{}", s.agent, s.runtime, s.output.trim_end());
            }
        } else if !t.output.is_empty() {
            outln!("{}", t.output.trim_end());
        }
        if let Some(e) = &t.error {
            outln!("(error: {e})");
        }
    }
    let m = &r.metadata;
    let runtimes: Vec<&str> = m.runtimes.iter().map(|r| r.as_str()).collect();
    let or_none = |names: String| {
        if names.is_empty() {
            "none".into()
        } else {
            names
        }
    };
    errln!(
        "· {} {} in {:.1}s · agents {} · runtimes {} · tokens {} (in {}, out {}){} · total cost ${:.4}{}{}",
        m.execution_id,
        m.status.as_str(),
        m.duration_ms as f64 / 1000.0,
        or_none(m.agents.join(", ")),
        or_none(runtimes.join(", ")),
        m.total_tokens.total,
        m.total_tokens.input,
        m.total_tokens.output,
        if m.total_tokens.estimated {
            ", partly estimated"
        } else {
            ""
        },
        m.total_cost,
        if m.cost_complete {
            ""
        } else {
            " (some models unpriced: add them under [prices])"
        },
        m.budget_usd
            .map(|b| format!(" of ${b:.2} budget"))
            .unwrap_or_default()
    );
}
