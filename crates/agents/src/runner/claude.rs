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
    /// Checks that the executable exists; nothing is started until a step runs.
    pub fn new(config: ClaudeConfig, capstan_exe: Option<PathBuf>) -> Result<Self, AgentError> {
        let program = find_program(&config.command).ok_or_else(|| {
            AgentError::Runtime(format!(
                "Claude Code (`{}`) was not found: install it (`npm install -g @anthropic-ai/claude-code`) or set [agents.claude] command to its path",
                config.command
            ))
        })?;
        Ok(Self {
            config,
            program,
            capstan_exe,
        })
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
