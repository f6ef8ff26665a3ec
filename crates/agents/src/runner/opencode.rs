//! The `opencode` runtime: an OpenCode server (`opencode serve`) over its HTTP API.
//!
//! The seed names an `/execute` endpoint; OpenCode has none. The real 1.x API, used
//! here (docs/AGENTS.md has the table):
//! - `GET /global/health`: connection check at init (`{"healthy":true,"version":..}`);
//! - `POST /session?directory=WS`: a session per agent step, rooted in the workspace;
//! - `GET /event`: the server's SSE stream, filtered to that session: text deltas
//!   (`message.part.delta`), tool parts, errors;
//! - `POST /session/{id}/message` with the prompt as a text part and the provider and
//!   model (`{"providerID","modelID"}`): answers when the turn ends with the assistant
//!   message (tokens, model, error) and its parts;
//! - `POST /session/{id}/abort`: cancellation.
//!
//! Confinement: OpenCode's built-in tools (bash, read, edit, write, webfetch, task, ...)
//! run where the server runs, outside Capstan's sandbox. Each session is created with
//! permission rules that deny every tool but `capstan_*` (OpenCode then offers the model
//! none of its own tools; verified on 1.18.33), and Capstan registers `capstan mcp` on
//! the server as MCP server `capstan` (`POST /mcp`), so its capabilities are the agent's
//! tools. Capstan does not start the server, so it cannot confine the server itself;
//! every execution using it says so in a `security.warning`.
//!
//! API generations: 1.x servers also expose a preview of the 2.x API under `/api/...`,
//! whose agent loop does not run yet (1.18: `POST /api/session/{id}/wait` answers 503
//! "not available yet"), so the 1.x routes are the ones that work. The generation is
//! detected at init: no `/global/health` but an `/api/health` means a 2.x-only server,
//! refused with a message saying so rather than spoken to half-way.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use capstan_models::Usage;
use capstan_models::sse::{SseEvent, SseParser};
use futures::StreamExt;
use reqwest::{RequestBuilder, StatusCode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{AgentJob, ProgressFn, RunOutput, Runner};
use crate::config::OpenCodeConfig;
use crate::event::Progress;
use crate::{AgentError, RuntimeKind, TaskStatus};

/// Runs a step in a session of an `opencode serve` server, over its HTTP API.
pub struct OpenCodeRunner {
    config: OpenCodeConfig,
    base: String,
    client: reqwest::Client,
    auth: Auth,
    /// The server's version, from the health check.
    version: String,
    /// The `capstan` executable registered on the server as an MCP server (`None`: none).
    capstan_exe: Option<PathBuf>,
    /// Workspaces whose `capstan` MCP server is registered on the server.
    registered: tokio::sync::Mutex<HashSet<PathBuf>>,
}

/// The session permission rules that leave OpenCode only Capstan's MCP tools (the last
/// matching rule wins).
fn confined_permissions() -> Value {
    json!([
        {"permission": "*", "pattern": "*", "action": "deny"},
        {"permission": "capstan_*", "pattern": "*", "action": "allow"},
    ])
}

/// Capstan's own directories, passed to the `capstan mcp` the server starts (it runs
/// with the server's environment, not Capstan's).
fn capstan_env() -> serde_json::Map<String, Value> {
    [
        "CAPSTAN_HOME",
        "CAPSTAN_CONFIG_DIR",
        "CAPSTAN_DATA_DIR",
        "CAPSTAN_CACHE_DIR",
    ]
    .into_iter()
    .filter_map(|k| {
        std::env::var(k)
            .ok()
            .map(|v| (k.to_string(), Value::from(v)))
    })
    .collect()
}

#[derive(Clone)]
enum Auth {
    None,
    Basic { user: String, password: String },
    Bearer(String),
}

impl Auth {
    fn apply(&self, req: RequestBuilder) -> RequestBuilder {
        match self {
            Auth::None => req,
            Auth::Basic { user, password } => req.basic_auth(user, Some(password)),
            Auth::Bearer(token) => req.bearer_auth(token),
        }
    }
}

fn secret_from_env(var: &str, what: &str) -> Result<String, AgentError> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| {
            AgentError::Runtime(format!(
                "[agents.opencode] {what} names the env var {var}, which is not set: export it (the same value the server was started with)"
            ))
        })
}

impl OpenCodeRunner {
    /// Reads the credentials, then checks the server answers its health endpoint.
    /// `capstan_exe` is registered on the server as MCP server `capstan` before the first
    /// step in each workspace (unless `[agents.opencode] mcp = false`).
    pub async fn connect(
        config: OpenCodeConfig,
        capstan_exe: Option<PathBuf>,
    ) -> Result<Self, AgentError> {
        let auth = match (&config.password_env, &config.api_key_env) {
            (Some(var), _) => Auth::Basic {
                user: config.username.clone(),
                password: secret_from_env(var, "password_env")?,
            },
            (None, Some(var)) => Auth::Bearer(secret_from_env(var, "api_key_env")?),
            (None, None) => Auth::None,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| AgentError::Runtime(format!("HTTP client: {e}")))?;
        let base = config.url.trim_end_matches('/').to_string();
        let unreachable = |e: String| {
            AgentError::Runtime(format!(
                "the OpenCode server at {base} is not available ({e}): start it with `opencode serve --hostname 127.0.0.1 --port 4096`, or set [agents.opencode] url"
            ))
        };
        let health = |path: &str| {
            auth.apply(client.get(format!("{base}{path}")))
                .timeout(Duration::from_secs(10))
                .send()
        };
        let resp = health("/global/health")
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        match resp.status() {
            s if s.is_success() => {
                let body: Value = resp.json().await.unwrap_or(Value::Null);
                if body["healthy"] != true {
                    return Err(unreachable(format!("it reports itself unhealthy: {body}")));
                }
                let version = body["version"].as_str().unwrap_or("unknown").to_string();
                return Ok(Self {
                    config,
                    base,
                    client,
                    auth,
                    version,
                    capstan_exe,
                    registered: tokio::sync::Mutex::new(HashSet::new()),
                });
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                return Err(AgentError::Runtime(format!(
                    "the OpenCode server at {base} refused the credentials (HTTP {}): set [agents.opencode] password_env to the variable holding its OPENCODE_SERVER_PASSWORD",
                    resp.status().as_u16()
                )));
            }
            StatusCode::NOT_FOUND => {}
            s => {
                return Err(unreachable(format!(
                    "GET /global/health answered HTTP {}",
                    s.as_u16()
                )));
            }
        }
        // No 1.x routes: is it a 2.x-only server?
        let resp = health("/api/health")
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        if resp.status().is_success() {
            return Err(AgentError::Runtime(format!(
                "the OpenCode server at {base} speaks only the 2.x API (/api/...): Capstan speaks the 1.x session API; run an opencode 1.x server (1.x also serves the 2.x preview)"
            )));
        }
        Err(unreachable(format!(
            "neither /global/health nor /api/health answered (HTTP {})",
            resp.status().as_u16()
        )))
    }

    /// The server's version, as its health endpoint reported it.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// What Capstan cannot confine on this server, for a `security.warning`: the server
    /// itself always (Capstan did not start it), and its built-in tools too when
    /// `unconfined_builtin_tools` is set.
    pub fn warning(&self) -> String {
        if self.config.unconfined_builtin_tools {
            format!(
                "[agents.opencode] unconfined_builtin_tools = true: OpenCode's built-in tools (bash, read, edit, write, webfetch, task, ...) \
                 are on in Capstan's sessions on {} and run where that server runs, outside Capstan's sandbox, policy, approvals and events",
                self.base
            )
        } else {
            format!(
                "the OpenCode server at {} was not started by Capstan, so Capstan cannot confine it: Capstan's sessions on it deny \
                 OpenCode's built-in tools and offer only Capstan's tools, but the server process, its plugins and configuration, and \
                 other clients' sessions run outside Capstan's sandbox",
                self.base
            )
        }
    }

    /// Registers `capstan mcp --workspace WS` on the server as MCP server `capstan`, once
    /// per workspace; `Ok` without doing anything when MCP is off or no executable is known.
    async fn register_mcp(&self, workspace: &Path) -> Result<(), String> {
        let Some(exe) = self.capstan_exe.as_ref().filter(|_| self.config.mcp) else {
            return Ok(());
        };
        let mut registered = self.registered.lock().await;
        if registered.contains(workspace) {
            return Ok(());
        }
        let dir = workspace.to_string_lossy().to_string();
        let body = json!({"name": "capstan", "config": {
            "type": "local",
            "command": [exe, "mcp", "--workspace", workspace],
            "environment": capstan_env(),
            "timeout": 120_000,
        }});
        let resp = self
            .post("/mcp")
            .query(&[("directory", dir.as_str())])
            .json(&body)
            .timeout(Duration::from_secs(180))
            .send()
            .await
            .map_err(|e| format!("cannot register Capstan's MCP server on OpenCode: {e}"))?;
        let status = resp.status();
        let answer: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() || answer["capstan"]["status"] != "connected" {
            return Err(format!(
                "OpenCode could not start Capstan's MCP server (`{} mcp`; HTTP {}): {answer}",
                exe.display(),
                status.as_u16()
            ));
        }
        registered.insert(workspace.to_path_buf());
        Ok(())
    }

    fn post(&self, path: &str) -> RequestBuilder {
        self.auth
            .apply(self.client.post(format!("{}{path}", self.base)))
    }
}

/// What the session's events told so far.
#[derive(Default)]
struct Seen {
    text: String,
    error: Option<String>,
    /// The session went idle: the turn's events are all in.
    idle: bool,
}

impl Seen {
    fn take(&mut self, ev: &SseEvent, session: &str, progress: ProgressFn<'_>) {
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            return;
        };
        let props = &v["properties"];
        if props["sessionID"] != session
            && props["part"]["sessionID"] != session
            && props["info"]["sessionID"] != session
        {
            return;
        }
        match v["type"].as_str() {
            Some("message.part.delta") if props["field"] == "text" => {
                if let Some(d) = props["delta"].as_str() {
                    self.text.push_str(d);
                    progress(Progress::Text {
                        text: d.to_string(),
                    });
                }
            }
            Some("message.part.updated") if props["part"]["type"] == "tool" => {
                let part = &props["part"];
                let state = &part["state"];
                let tool = part["tool"].as_str().unwrap_or("?").to_string();
                match state["status"].as_str() {
                    Some("running") => progress(Progress::ToolUse {
                        tool,
                        input: state["input"].to_string(),
                    }),
                    Some("completed") => progress(Progress::ToolResult {
                        tool,
                        output: state["output"].as_str().unwrap_or("").to_string(),
                        is_error: false,
                    }),
                    Some("error") => progress(Progress::ToolResult {
                        tool,
                        output: state["error"].as_str().unwrap_or("").to_string(),
                        is_error: true,
                    }),
                    _ => {}
                }
            }
            Some("session.idle") => self.idle = true,
            Some("session.status") if props["status"]["type"] == "idle" => self.idle = true,
            Some("session.error") => {
                self.error = Some(error_text(&props["error"]));
            }
            _ => {}
        }
    }
}

fn error_text(e: &Value) -> String {
    let name = e["name"].as_str().unwrap_or("error");
    match e["data"]["message"].as_str() {
        Some(m) => format!("{name}: {m}"),
        None => format!("{name}: {e}"),
    }
}

/// Tokens as OpenCode counts them; input includes cache reads and writes.
fn usage_of(info: &Value) -> Option<Usage> {
    let t = info.get("tokens")?;
    let n = |v: &Value| v.as_f64().unwrap_or(0.0) as u64;
    let input = n(&t["input"]) + n(&t["cache"]["read"]) + n(&t["cache"]["write"]);
    let output = n(&t["output"]) + n(&t["reasoning"]);
    (input + output > 0).then_some(Usage {
        input_tokens: input,
        output_tokens: output,
        estimated: false,
        cost_usd: None,
    })
}

#[async_trait]
impl Runner for OpenCodeRunner {
    fn runtime(&self) -> RuntimeKind {
        RuntimeKind::OpenCode
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
        let estimate = |out: &str| job.estimated_usage(out);
        let model = job.model.clone().or(self.config.model.clone());
        let fail = |out: String, e: String| {
            RunOutput::failed(out.clone(), estimate(&out), model.clone(), e)
        };

        // 1. Capstan's tools on the server, and a session rooted in the workspace that
        // denies OpenCode's own tools.
        if let Err(e) = self.register_mcp(&job.workspace).await {
            return fail(String::new(), e);
        }
        let dir = job.workspace.to_string_lossy().to_string();
        let mut session_body = json!({"title": format!("capstan {} ({})", job.task_id, job.agent)});
        if !self.config.unconfined_builtin_tools {
            session_body["permission"] = confined_permissions();
        }
        let session = match self
            .post("/session")
            .query(&[("directory", dir.as_str())])
            .json(&session_body)
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r.json::<Value>().await.unwrap_or(Value::Null),
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.text().await.unwrap_or_default();
                return fail(
                    String::new(),
                    format!(
                        "OpenCode refused to create a session (HTTP {status}): {body}{}",
                        if self.config.unconfined_builtin_tools {
                            ""
                        } else {
                            " (Capstan creates sessions with permission rules that deny OpenCode's own tools; this needs an OpenCode 1.x server that accepts them, such as 1.18)"
                        }
                    ),
                );
            }
            Err(e) => return fail(String::new(), format!("OpenCode is not reachable: {e}")),
        };
        let Some(session_id) = session["id"].as_str().map(str::to_string) else {
            return fail(
                String::new(),
                format!("OpenCode's session answer has no id: {session}"),
            );
        };
        progress(Progress::Status {
            message: format!("OpenCode {} session {session_id}", self.version),
        });

        // 2. Subscribe to events before prompting, so no delta is missed.
        let events = match self
            .auth
            .apply(self.client.get(format!("{}/event", self.base)))
            .query(&[("directory", dir.as_str())])
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r.bytes_stream(),
            Ok(r) => {
                return fail(
                    String::new(),
                    format!(
                        "OpenCode's event stream answered HTTP {}",
                        r.status().as_u16()
                    ),
                );
            }
            Err(e) => return fail(String::new(), format!("OpenCode's event stream: {e}")),
        };

        // 3. The prompt; the answer arrives when the turn is over.
        let mut body = json!({"parts": [{"type": "text", "text": job.prompt}]});
        if let (Some(provider), Some(model)) = (&self.config.provider, &model) {
            body["model"] = json!({"providerID": provider, "modelID": model});
        }
        if let Some(agent) = &self.config.agent {
            body["agent"] = json!(agent);
        }
        let prompt = self
            .post(&format!("/session/{session_id}/message"))
            .query(&[("directory", dir.as_str())])
            .json(&body)
            .send();
        tokio::pin!(prompt);
        tokio::pin!(events);
        let idle = Duration::from_secs(self.config.idle_timeout_secs.max(1));
        let mut parser = SseParser::new();
        let mut seen = Seen::default();
        let mut aborted = false;
        let mut events_open = true;
        let answer = loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled(), if !aborted => {
                    aborted = true;
                    let _ = self.post(&format!("/session/{session_id}/abort")).query(&[("directory", dir.as_str())]).send().await;
                }
                r = &mut prompt => break r,
                chunk = tokio::time::timeout(idle, events.next()), if events_open => match chunk {
                    Ok(Some(Ok(bytes))) => {
                        let mut out = Vec::new();
                        if parser.feed(&bytes, &mut out).is_err() {
                            events_open = false;
                        }
                        for ev in &out {
                            seen.take(ev, &session_id, progress);
                        }
                    }
                    Ok(_) => events_open = false,
                    Err(_) => {
                        let _ = self.post(&format!("/session/{session_id}/abort")).query(&[("directory", dir.as_str())]).send().await;
                        return fail(seen.text, format!("OpenCode sent nothing for {} s (idle watchdog); the session was aborted", idle.as_secs()));
                    }
                },
            }
        };
        let reply: Value = match answer {
            Ok(r) if r.status().is_success() => r.json().await.unwrap_or(Value::Null),
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.text().await.unwrap_or_default();
                return fail(
                    seen.text,
                    format!("OpenCode answered the prompt with HTTP {status}: {body}"),
                );
            }
            Err(e) => return fail(seen.text, format!("OpenCode's prompt request failed: {e}")),
        };
        // The answer can overtake the last events: read them up to the session's idle
        // event, so progress and the partial text are complete.
        let drain = async {
            while events_open && !seen.idle {
                match events.next().await {
                    Some(Ok(bytes)) => {
                        let mut out = Vec::new();
                        if parser.feed(&bytes, &mut out).is_err() {
                            break;
                        }
                        for ev in &out {
                            seen.take(ev, &session_id, progress);
                        }
                    }
                    _ => break,
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
        let info = &reply["info"];
        let text: String = reply["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let output = if text.is_empty() {
            seen.text.clone()
        } else {
            text
        };
        let usage = usage_of(info).unwrap_or_else(|| estimate(&output));
        let answered_model = info["modelID"]
            .as_str()
            .map(str::to_string)
            .or(model.clone());
        let error = info
            .get("error")
            .filter(|e| !e.is_null())
            .map(error_text)
            .or(seen.error);
        if aborted {
            return RunOutput {
                status: TaskStatus::Cancelled,
                output,
                usage,
                model: answered_model,
                error,
            };
        }
        match error {
            None if info["finish"].is_string() => RunOutput {
                status: TaskStatus::Completed,
                output,
                usage,
                model: answered_model,
                error: None,
            },
            e => RunOutput::failed(
                output,
                usage,
                answered_model,
                e.unwrap_or_else(|| format!("OpenCode's turn did not finish: {info}")),
            ),
        }
    }
}
