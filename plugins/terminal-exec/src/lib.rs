//! `terminal_exec`: raw command strings, run one by one through the host's
//! sandboxed `exec` service in a bounded loop: evaluate, policy
//! check (the host's), execute, inspect the output, decide the next or finish.
//!
//! The plugin never touches files or processes itself (its manifest grants no
//! workspace access); the host classifies, gates and sandboxes every command.

use capstan_plugin::host::exec::{self, Command, ExecError, ExecRequest};
use capstan_plugin::{
    CapabilityInfo, JsonSchema, Plugin, Risk, Task, TaskError, TaskOutput, activity, is_cancelled,
    op, progress,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// Most commands one task may run: a bound on the loop, whoever drives it.
const MAX_COMMANDS: usize = 20;

/// Input of `run`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunInput {
    /// One shell command line (bash)
    command: Option<String>,
    /// Command lines run in order
    #[serde(default)]
    #[schemars(length(max = 20))]
    commands: Vec<String>,
    /// Working directory relative to the workspace root
    #[serde(default)]
    #[schemars(extend("default" = "."))]
    cwd: String,
    /// Keep going after a command exits non-zero
    #[serde(default)]
    continue_on_error: bool,
    /// Per-command timeout
    #[schemars(range(min = 1))]
    timeout_ms: Option<u32>,
    /// What the commands are for (shown to people)
    objective: Option<String>,
}

struct TerminalExec;

impl Plugin for TerminalExec {
    fn describe() -> CapabilityInfo {
        CapabilityInfo {
            kinds: vec!["terminal_exec".into()],
            // What the commands do is classified by the host per command; the risk is a floor.
            operations: vec![op::<RunInput>(
                "run",
                "Run shell commands in the workspace, in the OS sandbox, behind the approval gate. \
                 The first command that fails (non-zero exit, signal, timeout) stops the loop and \
                 fails the task, unless continue_on_error is set.",
                Risk::ReadOnly,
            )],
        }
    }

    fn invoke(task: Task) -> Result<TaskOutput, TaskError> {
        if task.operation != "run" {
            return Err(TaskError::NotImplemented(format!(
                "operation `{}`; terminal_exec offers run",
                task.operation
            )));
        }
        let input: RunInput = serde_json::from_str(&task.input)
            .map_err(|e| TaskError::InvalidInput(format!("terminal_exec input: {e}")))?;
        let mut commands = input.commands.clone();
        if let Some(c) = &input.command {
            commands.insert(0, c.clone());
        }
        commands.retain(|c| !c.trim().is_empty());
        if commands.is_empty() {
            if input.objective.is_some() {
                return Err(TaskError::NotImplemented(
                    "a model-driven loop from an objective alone; give `command` or `commands`"
                        .into(),
                ));
            }
            return Err(TaskError::InvalidInput(
                "give `command` or `commands`".into(),
            ));
        }
        if commands.len() > MAX_COMMANDS {
            return Err(TaskError::InvalidInput(format!(
                "{} commands; at most {MAX_COMMANDS} per task",
                commands.len()
            )));
        }
        run_loop(&commands, &input)
    }
}

/// The risk as the host names it on the wire (`read_only`, ...), so a step's
/// `risk` reads the same as the host's own events.
fn risk_name(risk: Risk) -> &'static str {
    match risk {
        Risk::ReadOnly => "read_only",
        Risk::Write => "write",
        Risk::Delete => "delete",
        Risk::Network => "network",
        Risk::Unknown => "unknown",
    }
}

fn run_loop(commands: &[String], input: &RunInput) -> Result<TaskOutput, TaskError> {
    let total = commands.len() as u64;
    let mut steps: Vec<Value> = Vec::new();
    let mut failed: Option<String> = None;
    for (i, command) in commands.iter().enumerate() {
        if is_cancelled() {
            return Err(TaskError::Cancelled);
        }
        let req = ExecRequest {
            command: Command::Shell(command.clone()),
            cwd: input.cwd.clone(),
            timeout_ms: input.timeout_ms,
            output_limit: None,
            min_risk: None,
        };
        match exec::run(&req) {
            Ok(out) => {
                let ok = out.exit_code == Some(0) && !out.timed_out;
                let status = if out.timed_out {
                    "timed out".to_string()
                } else if let Some(code) = out.exit_code {
                    format!("exited {code}")
                } else {
                    format!("was killed by signal {}", out.signal.unwrap_or(0))
                };
                activity("terminal.ran", &format!("ran `{command}`: {status}"));
                steps.push(json!({
                    "command": command, "cwd": input.cwd, "exit_code": out.exit_code, "signal": out.signal,
                    "stdout": out.stdout, "stderr": out.stderr, "truncated_bytes": out.truncated_bytes,
                    "duration_ms": out.duration_ms, "timed_out": out.timed_out,
                    "risk": risk_name(out.risk), "reasons": out.reasons,
                }));
                if !ok && failed.is_none() {
                    // The last line of the error output usually says why.
                    let why = out
                        .stderr
                        .lines()
                        .rev()
                        .map(str::trim)
                        .find(|l| !l.is_empty())
                        .map(|l| format!(": {}", l.chars().take(200).collect::<String>()))
                        .unwrap_or_default();
                    failed = Some(format!("`{command}` {status}{why}"));
                }
                if !ok && !input.continue_on_error {
                    break;
                }
            }
            Err(ExecError::Cancelled) => return Err(TaskError::Cancelled),
            Err(ExecError::Denied(why)) => return Err(TaskError::Denied(why)),
            Err(ExecError::WorkspaceRequired) => {
                return Err(TaskError::Denied(
                    "no workspace is bound; commands run only inside a workspace".into(),
                ));
            }
            Err(ExecError::InvalidRequest(why)) => return Err(TaskError::InvalidInput(why)),
            Err(ExecError::Failed(why)) => {
                return Err(TaskError::Failed(format!(
                    "`{command}` could not run: {why}"
                )));
            }
        }
        progress(i as u64 + 1, total, "commands");
    }
    let ran = steps.len();
    // A failed command fails the task unless the task asked to go on (the host
    // enforces the same rule on what it saw run).
    if let Some(f) = &failed
        && !input.continue_on_error
    {
        return Err(TaskError::Failed(format!(
            "{f} (ran {ran} of {} command{})",
            commands.len(),
            if commands.len() == 1 { "" } else { "s" }
        )));
    }
    let summary = match &failed {
        None => format!(
            "ran {ran} command{}: all succeeded",
            if ran == 1 { "" } else { "s" }
        ),
        Some(f) => format!("ran {ran} of {} commands; {f}", commands.len()),
    };
    let data = json!({ "steps": steps, "failed": failed, "ran": ran, "planned": commands.len() });
    Ok(TaskOutput {
        summary,
        data: Some(data.to_string()),
    })
}

capstan_plugin::export!(TerminalExec);
