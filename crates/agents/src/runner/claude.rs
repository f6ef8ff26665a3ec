//! The `claude` runtime: Claude Code headless, in stream-json mode both ways.
//!
//! `claude -p --input-format stream-json --output-format stream-json --verbose
//! --include-partial-messages`: the prompt goes in as one `user` line on stdin (which
//! stays open so an `interrupt` control request can be sent), and Claude Code prints
//! one JSON object per line: `system` (init: model, tools, MCP servers), `stream_event`
//! (token deltas), `assistant` / `user` (whole messages, tool calls and results) and a
//! final `result` (usage, cost, `is_error`, `terminal_reason`). Capstan's capabilities
//! reach it as MCP tools through `--mcp-config`, a server entry that runs
//! `capstan mcp --workspace DIR`.
//!
//! Confinement: Claude Code's own built-in tools (Bash, Read, Write, Edit, Agent,
//! WebFetch, ...) run on the host, outside Capstan's sandbox, policy, approvals and
//! events. So it starts with `--tools ""` (no built-in tool at all; verified on 2.1.330:
//! the model is offered only `mcp__capstan__*` and a built-in call comes back "No such
//! tool available"), `--strict-mcp-config` (no MCP server but Capstan's) and
//! `--setting-sources user` (the workspace's `.claude/settings*.json`, whose hooks would
//! run commands on the host at session start, are not read). A configuration that would
//! undo this (another permission mode, an `extra_args` option not known to be harmless)
//! is refused unless `[agents.claude] unconfined_builtin_tools = true`, which leaves the
//! built-in tools on and is reported by every run (`security.warning`) and by
//! `capstan doctor`. A Claude Code older than [`MIN_VERSION`] is refused.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use capstan_models::Usage;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio_util::sync::CancellationToken;

use super::{AgentJob, ProgressFn, RunOutput, Runner};
use crate::config::ClaudeConfig;
use crate::event::Progress;
use crate::{AgentError, RuntimeKind, TaskStatus};

/// The oldest Claude Code Capstan runs confined: `--tools ""` (no built-in tools) and
/// `--setting-sources` work in print mode from 2.1.0 on.
pub const MIN_VERSION: (u64, u64, u64) = (2, 1, 0);

/// Permission modes that approve nothing by themselves. With the built-in tools off they
/// only decide about Capstan's MCP tools, which `--allowedTools mcp__capstan` allows.
const CONFINED_PERMISSION_MODES: &[&str] = &["default", "dontAsk"];

/// `extra_args` options that cannot give Claude Code tools, permissions, settings,
/// directories or MCP servers. Anything else starting with `-` (including short options
/// and `--`) is refused while confined: a list of harmless options fails closed when a
/// new Claude Code adds a dangerous one, a list of dangerous ones would not.
const HARMLESS_OPTIONS: &[&str] = &[
    "--append-system-prompt",
    "--append-system-prompt-file",
    "--autocompact",
    "--bare",
    "--betas",
    "--debug",
    "--debug-file",
    "--disable-slash-commands",
    "--effort",
    "--exclude-dynamic-system-prompt-sections",
    "--fallback-model",
    "--json-schema",
    "--max-budget-usd",
    "--max-turns",
    "--name",
    "--no-session-persistence",
    "--restricted",
    "--safe-mode",
    "--system-prompt",
    "--system-prompt-file",
    "--system-prompt-snapshot",
    "--verbose",
];

/// The name of the setting that turns confinement off, in messages.
const UNCONFINED: &str = "[agents.claude] unconfined_builtin_tools = true";

/// Why `config` would give Claude Code built-in tools or permissions back, one reason per
/// setting; empty when it keeps Claude Code confined (or when confinement is turned off,
/// which [`unconfined_warning`] reports instead).
pub fn confinement_problems(config: &ClaudeConfig) -> Vec<String> {
    if config.unconfined_builtin_tools {
        return Vec::new();
    }
    let mut problems = Vec::new();
    if !CONFINED_PERMISSION_MODES.contains(&config.permission_mode.as_str()) {
        problems.push(format!(
            "permission_mode = {:?} (only {} keep Claude Code from approving its own actions)",
            config.permission_mode,
            CONFINED_PERMISSION_MODES
                .iter()
                .map(|m| format!("{m:?}"))
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    for arg in &config.extra_args {
        if !arg.starts_with('-') {
            continue; // a value of the option before it
        }
        let name = arg.split_once('=').map_or(arg.as_str(), |(n, _)| n);
        if !HARMLESS_OPTIONS.contains(&name) {
            problems.push(format!("extra_args option {name:?}"));
        }
    }
    problems
}

/// The refusal for a configuration with [`confinement_problems`]: what, why, what to do.
fn refusal(problems: &[String]) -> String {
    format!(
        "[agents.claude] would give Claude Code back its built-in tools (Bash, Read, Write, ...), \
         which run on the host outside Capstan's sandbox, policy and approvals: {}. \
         Remove it (Claude Code acts through Capstan's MCP tools), or accept the risk with {UNCONFINED}",
        problems.join(", ")
    )
}

/// The warning every run with `unconfined_builtin_tools` reports; `None` when confined.
pub fn unconfined_warning(config: &ClaudeConfig) -> Option<String> {
    config.unconfined_builtin_tools.then(|| {
        format!(
            "{UNCONFINED}: Claude Code's built-in tools (Bash, Read, Write, Edit, Agent, WebFetch, ...) \
             are on and run on the host, outside Capstan's sandbox, policy, approvals and events \
             (permission_mode {:?}{})",
            config.permission_mode,
            if config.extra_args.is_empty() {
                String::new()
            } else {
                format!(", extra_args {:?}", config.extra_args)
            }
        )
    })
}

/// `(major, minor, patch)` from `claude --version` output (`2.1.330 (Claude Code)`).
pub fn parse_version(output: &str) -> Option<(u64, u64, u64)> {
    let word = output.split_whitespace().next()?;
    let mut parts = word.trim_start_matches('v').splitn(3, '.');
    let mut num = || -> Option<u64> {
        let p = parts.next()?;
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((num()?, num()?, num()?))
}

/// Runs `program --version` (10 s at most) and checks it is [`MIN_VERSION`] or newer.
fn check_version(program: &Path) -> Result<(u64, u64, u64), String> {
    let (maj, min, pat) = MIN_VERSION;
    let upgrade = format!(
        "Capstan needs Claude Code {maj}.{min}.{pat} or newer to turn its built-in tools off: \
         upgrade it (`npm install -g @anthropic-ai/claude-code@latest` or `claude update`)"
    );
    let mut child = std::process::Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run `{} --version`: {e}", program.display()))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{} --version` did not answer within 10 s; {upgrade}",
                    program.display()
                ));
            }
        }
    }
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
    }
    match parse_version(&out) {
        Some(v) if v >= MIN_VERSION => Ok(v),
        Some((a, b, c)) => Err(format!(
            "Claude Code {a}.{b}.{c} ({}) is too old: {upgrade}",
            program.display()
        )),
        None => Err(format!(
            "cannot tell which Claude Code `{}` is (`--version` printed {:?}): {upgrade}",
            program.display(),
            out.trim()
        )),
    }
}

/// How long Claude Code gets to answer an interrupt with its `result` line before it
/// is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(5);
/// Bytes of stderr kept for error messages.
const STDERR_TAIL: usize = 4096;

/// Runs a step as a headless Claude Code process (`claude -p`, stream-JSON output).
pub struct ClaudeRunner {
    config: ClaudeConfig,
    program: PathBuf,
    capstan_exe: Option<PathBuf>,
}

impl ClaudeRunner {
    /// Checks that the configuration keeps Claude Code confined (or says it does not, with
    /// `unconfined_builtin_tools`), that the executable exists and, when confined, that it
    /// is recent enough to turn its built-in tools off. Nothing else is started until a
    /// step runs.
    pub fn new(config: ClaudeConfig, capstan_exe: Option<PathBuf>) -> Result<Self, AgentError> {
        let problems = confinement_problems(&config);
        if !problems.is_empty() {
            return Err(AgentError::Runtime(refusal(&problems)));
        }
        let program = find_program(&config.command).ok_or_else(|| {
            AgentError::Runtime(format!(
                "Claude Code (`{}`) was not found: install it (`npm install -g @anthropic-ai/claude-code`) or set [agents.claude] command to its path",
                config.command
            ))
        })?;
        if !config.unconfined_builtin_tools {
            check_version(&program).map_err(AgentError::Runtime)?;
        }
        Ok(Self {
            config,
            program,
            capstan_exe,
        })
    }

    /// Whether `command` (a name on PATH or a path) names an existing file.
    pub fn installed(command: &str) -> bool {
        find_program(command).is_some()
    }

    /// [`unconfined_warning`] for this runner's configuration.
    pub fn warning(&self) -> Option<String> {
        unconfined_warning(&self.config)
    }

    /// The `--mcp-config` file: one server, `capstan`, running this binary's MCP mode on
    /// the workspace. Deleted when the step ends.
    fn mcp_config(&self, workspace: &Path) -> std::io::Result<Option<tempfile::NamedTempFile>> {
        let Some(exe) = self.capstan_exe.as_ref().filter(|_| self.config.mcp) else {
            return Ok(None);
        };
        let config = json!({"mcpServers": {"capstan": {
            "command": exe,
            "args": ["mcp", "--workspace", workspace],
        }}});
        let mut file = tempfile::Builder::new()
            .prefix("capstan-mcp-")
            .suffix(".json")
            .tempfile()?;
        std::io::Write::write_all(&mut file, config.to_string().as_bytes())?;
        Ok(Some(file))
    }
}

/// Where `command` resolves: a path as given, or the first match on PATH. By hand
/// because it is a few lines and only needs to answer "is it there" for a clear error.
fn find_program(command: &str) -> Option<PathBuf> {
    if command.contains('/') {
        let p = PathBuf::from(command);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(command))
            .find(|p| p.is_file())
    })
}

/// What the stream told so far.
#[derive(Default)]
struct Transcript {
    model: Option<String>,
    /// Text of finished assistant messages.
    text: String,
    /// Text streamed for the message in progress (moved into `text` when it ends).
    partial: String,
    result: Option<Value>,
}

impl Transcript {
    /// Everything produced, including the message cut off mid-stream.
    fn output(&self) -> String {
        let mut out = self.text.clone();
        if !self.partial.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&self.partial);
        }
        out
    }

    fn take_line(&mut self, line: &str, progress: ProgressFn<'_>) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return; // Claude Code only prints JSON here; anything else is not ours to parse
        };
        match v["type"].as_str() {
            Some("system") if v["subtype"] == "init" => {
                self.model = v["model"].as_str().map(str::to_string);
                let mcp: Vec<String> = v["mcp_servers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| {
                        format!(
                            "{} {}",
                            s["name"].as_str().unwrap_or("?"),
                            s["status"].as_str().unwrap_or("?")
                        )
                    })
                    .collect();
                progress(Progress::Status {
                    message: format!(
                        "Claude Code session {} on {}{}",
                        v["session_id"].as_str().unwrap_or("?"),
                        v["model"].as_str().unwrap_or("?"),
                        if mcp.is_empty() {
                            String::new()
                        } else {
                            format!(" (MCP: {})", mcp.join(", "))
                        }
                    ),
                });
            }
            Some("stream_event") => {
                let ev = &v["event"];
                if ev["type"] == "content_block_delta"
                    && ev["delta"]["type"] == "text_delta"
                    && let Some(t) = ev["delta"]["text"].as_str()
                {
                    self.partial.push_str(t);
                    progress(Progress::Text {
                        text: t.to_string(),
                    });
                }
            }
            Some("assistant") => {
                self.partial.clear();
                for block in v["message"]["content"].as_array().into_iter().flatten() {
                    match block["type"].as_str() {
                        Some("text") => {
                            if !self.text.is_empty() {
                                self.text.push('\n');
                            }
                            self.text.push_str(block["text"].as_str().unwrap_or(""));
                        }
                        Some("tool_use") => progress(Progress::ToolUse {
                            tool: block["name"].as_str().unwrap_or("?").to_string(),
                            input: block["input"].to_string(),
                        }),
                        _ => {}
                    }
                }
            }
            Some("user") => {
                for block in v["message"]["content"].as_array().into_iter().flatten() {
                    if block["type"] == "tool_result" {
                        let output = match &block["content"] {
                            Value::String(s) => s.clone(),
                            Value::Array(parts) => parts
                                .iter()
                                .filter_map(|p| p["text"].as_str())
                                .collect::<Vec<_>>()
                                .join("\n"),
                            other => other.to_string(),
                        };
                        progress(Progress::ToolResult {
                            tool: block["tool_use_id"].as_str().unwrap_or("?").to_string(),
                            output,
                            is_error: block["is_error"].as_bool().unwrap_or(false),
                        });
                    }
                }
            }
            Some("result") => self.result = Some(v),
            _ => {}
        }
    }
}

/// Input counts every token the model read: fresh, cache writes and cache reads.
fn result_usage(result: &Value) -> Option<Usage> {
    let u = result.get("usage")?;
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    Some(Usage {
        input_tokens: n("input_tokens")
            + n("cache_creation_input_tokens")
            + n("cache_read_input_tokens"),
        output_tokens: n("output_tokens"),
        estimated: false,
        cost_usd: None,
    })
}

fn kill_group(child: &mut Child) {
    if let Some(pid) = child.id() {
        // The child leads its own process group (see `process_group(0)`), so this also
        // stops the MCP servers and tools Claude Code started.
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is involved.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
    let _ = child.start_kill();
}

async fn send_line(stdin: &mut Option<ChildStdin>, v: &Value) {
    if let Some(s) = stdin.as_mut() {
        let mut line = v.to_string();
        line.push('\n');
        if s.write_all(line.as_bytes()).await.is_err() || s.flush().await.is_err() {
            *stdin = None;
        }
    }
}

#[async_trait]
impl Runner for ClaudeRunner {
    fn runtime(&self) -> RuntimeKind {
        RuntimeKind::Claude
    }

    fn default_model(&self) -> Option<String> {
        self.config.model.clone()
    }

    async fn run(
        &self,
        job: &AgentJob,
        progress: ProgressFn<'_>,
        cancel: CancellationToken,
    ) -> RunOutput {
        let estimate_usage = |output: &str| job.estimated_usage(output);
        let mcp = match self.mcp_config(&job.workspace) {
            Ok(m) => m,
            Err(e) => {
                return RunOutput::failed(
                    String::new(),
                    estimate_usage(""),
                    None,
                    format!("cannot write the MCP config for Claude Code: {e}"),
                );
            }
        };
        let mut cmd = Command::new(&self.program);
        cmd.args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--permission-mode",
            &self.config.permission_mode,
        ]);
        if !self.config.unconfined_builtin_tools {
            // No built-in tool at all (Capstan's MCP tools stay), and no settings from the
            // workspace (its hooks would run commands on the host).
            cmd.args(["--tools", "", "--setting-sources", "user"]);
        }
        if let Some(model) = job.model.as_ref().or(self.config.model.as_ref()) {
            cmd.args(["--model", model]);
        }
        if let Some(file) = &mcp {
            // Only Capstan's server (not whatever the user configured), and its tools
            // allowed without a prompt nobody could answer: Capstan's own policy and
            // approvals apply inside `capstan mcp`.
            cmd.arg("--mcp-config").arg(file.path()).args([
                "--strict-mcp-config",
                "--allowedTools",
                "mcp__capstan",
            ]);
        }
        // Last, so a value-taking option in them cannot swallow one of Capstan's.
        cmd.args(&self.config.extra_args)
            .envs(&self.config.env)
            .current_dir(&job.workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return RunOutput::failed(
                    String::new(),
                    estimate_usage(""),
                    None,
                    format!("cannot start Claude Code ({}): {e}", self.program.display()),
                );
            }
        };
        let stderr_tail = Arc::new(Mutex::new(VecDeque::<u8>::new()));
        let stderr_reader = child.stderr.take().map(|mut err| {
            let tail = stderr_tail.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = err.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut t = tail.lock();
                    t.extend(&buf[..n]);
                    while t.len() > STDERR_TAIL {
                        t.pop_front();
                    }
                }
            })
        });
        let mut stdin = child.stdin.take();
        let Some(stdout) = child.stdout.take() else {
            return RunOutput::failed(
                String::new(),
                estimate_usage(""),
                None,
                "cannot read Claude Code's output: its stdout was not piped".into(),
            );
        };
        let mut lines = BufReader::new(stdout).lines();
        send_line(
            &mut stdin,
            &json!({"type": "user", "message": {"role": "user", "content": job.prompt}}),
        )
        .await;

        let idle = Duration::from_secs(self.config.idle_timeout_secs.max(1));
        let mut t = Transcript::default();
        let mut interrupted = false;
        let mut failure: Option<String> = None;
        let mut interrupt_deadline: Option<tokio::time::Instant> = None;
        loop {
            let wait = match interrupt_deadline {
                Some(d) => d
                    .saturating_duration_since(tokio::time::Instant::now())
                    .min(idle),
                None => idle,
            };
            tokio::select! {
                _ = cancel.cancelled(), if !interrupted => {
                    interrupted = true;
                    interrupt_deadline = Some(tokio::time::Instant::now() + INTERRUPT_GRACE);
                    send_line(&mut stdin, &json!({
                        "type": "control_request",
                        "request_id": format!("capstan_interrupt_{}", job.task_id),
                        "request": {"subtype": "interrupt"},
                    })).await;
                }
                line = tokio::time::timeout(wait, lines.next_line()) => match line {
                    Ok(Ok(Some(line))) => {
                        t.take_line(&line, progress);
                        if t.result.is_some() {
                            break;
                        }
                    }
                    Ok(Ok(None)) => break,
                    Ok(Err(e)) => {
                        failure = Some(format!("reading Claude Code's output failed: {e}"));
                        break;
                    }
                    Err(_) if interrupted => break,
                    Err(_) => {
                        failure = Some(format!(
                            "Claude Code sent nothing for {} s (idle watchdog); it was killed",
                            idle.as_secs()
                        ));
                        break;
                    }
                },
            }
        }
        // Closing stdin ends a finished session; anything still running is killed.
        drop(stdin);
        let exit = match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
            Ok(Ok(status)) => Some(status),
            _ => {
                kill_group(&mut child);
                let _ = child.wait().await;
                None
            }
        };
        if let Some(reader) = stderr_reader {
            // The pipe closes when the process group is gone; a grandchild holding it
            // open must not hold up the result.
            let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
        }
        let stderr = {
            let tail = stderr_tail.lock();
            String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>())
                .trim()
                .to_string()
        };
        let with_stderr = |msg: String| {
            if stderr.is_empty() {
                msg
            } else {
                format!("{msg}; Claude Code's stderr ends with: {stderr}")
            }
        };

        let Some(result) = t.result.take() else {
            let output = t.output();
            let usage = estimate_usage(&output);
            if interrupted {
                return RunOutput {
                    status: TaskStatus::Cancelled,
                    output,
                    usage,
                    model: t.model,
                    error: Some(
                        "stopped; Claude Code did not confirm the interrupt and was killed".into(),
                    ),
                };
            }
            let why = failure.unwrap_or_else(|| {
                format!(
                    "Claude Code exited ({}) before its result line",
                    exit.map_or("killed".to_string(), |s| s.to_string())
                )
            });
            return RunOutput::failed(output, usage, t.model, with_stderr(why));
        };
        let model = result["modelUsage"]
            .as_object()
            .and_then(|m| m.keys().next().cloned())
            .or(t.model.clone());
        let text = result["result"].as_str().map(str::to_string);
        let output = match &text {
            Some(r) if !r.is_empty() => r.clone(),
            _ => t.output(),
        };
        let usage = result_usage(&result).unwrap_or_else(|| estimate_usage(&output));
        let is_error = result["is_error"].as_bool().unwrap_or(true);
        let subtype = result["subtype"].as_str().unwrap_or("");
        let terminal = result["terminal_reason"].as_str();
        // A result counts only when it is not an error and the turn really finished
        // (an interrupted turn reports `aborted_streaming`, a max-turns stop
        // `error_max_turns`).
        if !is_error && subtype == "success" && terminal.is_none_or(|r| r == "completed") {
            return RunOutput {
                status: TaskStatus::Completed,
                output,
                usage,
                model,
                error: None,
            };
        }
        let partial = if text.as_deref().is_none_or(str::is_empty) {
            t.output()
        } else {
            output
        };
        if interrupted {
            return RunOutput {
                status: TaskStatus::Cancelled,
                output: partial,
                usage,
                model,
                error: Some(format!("interrupted ({})", terminal.unwrap_or(subtype))),
            };
        }
        let api_error = result["api_error_status"]
            .as_u64()
            .map(|s| format!(", API status {s}"))
            .unwrap_or_default();
        let errors = result["errors"]
            .as_array()
            .map(|e| format!(": {}", Value::Array(e.clone())))
            .unwrap_or_default();
        RunOutput::failed(
            partial,
            usage,
            model,
            with_stderr(format!(
                "Claude Code reported {subtype} (terminal_reason {}{api_error}){errors}",
                terminal.unwrap_or("none")
            )),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_from_claude_version_output() {
        assert_eq!(parse_version("2.1.330 (Claude Code)\n"), Some((2, 1, 330)));
        assert_eq!(parse_version("v2.0.14"), Some((2, 0, 14)));
        assert_eq!(parse_version("2.1.0-beta.1 (Claude Code)"), Some((2, 1, 0)));
        assert_eq!(parse_version("Claude Code"), None);
        assert_eq!(parse_version(""), None);
        assert!(parse_version("2.0.99").unwrap() < MIN_VERSION);
        assert!(parse_version("10.0.0").unwrap() > MIN_VERSION);
    }

    #[test]
    fn only_harmless_options_and_approving_nothing_modes_stay_confined() {
        let with = |mode: &str, args: &[&str]| ClaudeConfig {
            permission_mode: mode.into(),
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            ..ClaudeConfig::default()
        };
        assert!(confinement_problems(&ClaudeConfig::default()).is_empty());
        assert!(
            confinement_problems(&with(
                "dontAsk",
                &[
                    "--effort",
                    "high",
                    "--max-budget-usd=1",
                    "--append-system-prompt",
                    "be brief"
                ]
            ))
            .is_empty()
        );
        for args in [
            &["--tools", "default"][..],
            &["--tools=Bash"],
            &["--allowed-tools", "Bash"],
            &["--disallowedTools", "x"],
            &["--permission-mode", "bypassPermissions"],
            &["--dangerously-skip-permissions"],
            &["--add-dir", "/"],
            &["--mcp-config", "x.json"],
            &["--settings", "{}"],
            &["--setting-sources", "project"],
            &["--effort", "high", "-d"],
            &["--", "--tools"],
            &["--some-future-option"],
        ] {
            assert!(
                !confinement_problems(&with("default", args)).is_empty(),
                "{args:?}"
            );
        }
        for mode in ["bypassPermissions", "acceptEdits", "auto", "plan", ""] {
            assert_eq!(confinement_problems(&with(mode, &[])).len(), 1, "{mode}");
        }
        let mut unconfined = with("bypassPermissions", &["--tools", "default"]);
        unconfined.unconfined_builtin_tools = true;
        assert!(confinement_problems(&unconfined).is_empty());
        assert!(
            unconfined_warning(&unconfined)
                .unwrap()
                .contains("unconfined_builtin_tools = true")
        );
        assert!(unconfined_warning(&ClaudeConfig::default()).is_none());
    }
}
