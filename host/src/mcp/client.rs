//! External MCP servers as capabilities. Each `[[mcp_server]]` entry in a
//! `capstan.toml` (the user's or the workspace's) names a command to spawn or a
//! URL to reach; every tool the server lists becomes the capability kind
//! `mcp:<server>/<tool>` with the single operation `call`. The host never takes
//! a server's word on risk (tool annotations are hints from an untrusted
//! peer): the entry's `risk` (default `unknown`, so every call is approved
//! first) decides the approval gate, per tool if `tool_risk` says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::protocol::{FailureReason, TaskFailure, TaskOutcome, TaskRequest, TaskSuccess};
use crate::registry::Problem;
use crate::runtime::Risk;
use crate::services::RunContext;

/// The one operation of an MCP tool capability.
pub const OPERATION: &str = "call";

/// How long a server gets to start and list its tools.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// One `[[mcp_server]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    /// Names the kinds: `mcp:<name>/<tool>`.
    pub name: String,
    /// A program to spawn that speaks MCP on stdin/stdout.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment for the spawned program, on top of Capstan's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A streamable HTTP endpoint instead of a command.
    #[serde(default)]
    pub url: Option<String>,
    /// An environment variable holding a bearer token for `url`.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// The risk every tool of this server is treated as.
    #[serde(default = "unknown_risk")]
    pub risk: Risk,
    /// Per-tool risk, overriding `risk`.
    #[serde(default)]
    pub tool_risk: BTreeMap<String, Risk>,
    /// Seconds one call may take before it fails as `timeout`.
    #[serde(default = "default_call_timeout")]
    pub timeout_secs: u64,
}

fn unknown_risk() -> Risk {
    Risk::Unknown
}

fn default_call_timeout() -> u64 {
    300
}

#[derive(Debug, Default, Deserialize)]
struct ConfigFile {
    #[serde(default)]
    mcp_server: Vec<toml::Value>,
}

/// A connected server.
pub struct McpServer {
    entry: McpServerEntry,
    client: RunningService<RoleClient, ()>,
}

/// One tool of a connected server, as a capability kind.
pub struct McpTool {
    kind: String,
    tool: String,
    description: String,
    input_schema: Value,
    risk: Risk,
    server: Arc<McpServer>,
}

impl McpTool {
    pub fn kind(&self) -> &str {
        &self.kind
    }

    pub fn server_name(&self) -> &str {
        &self.server.entry.name
    }

    /// The tool's own name on its server.
    pub fn tool_name(&self) -> &str {
        &self.tool
    }

    pub fn risk(&self) -> Risk {
        self.risk
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    pub fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    /// Call the tool with the task's input. A server that dies mid-call, an
    /// error result and a timeout each become a task failure naming the server.
    pub async fn call(&self, task: &TaskRequest, run: &RunContext) -> TaskOutcome {
        if !task.operation.is_empty() && task.operation != OPERATION {
            return Err(TaskFailure::new(
                FailureReason::InvalidInput,
                format!(
                    "`{}` has no operation `{}`; MCP tools have the one operation `{OPERATION}`",
                    self.kind, task.operation
                ),
            ));
        }
        let arguments = match &task.input {
            Value::Object(map) => map.clone(),
            Value::Null => Default::default(),
            other => {
                return Err(TaskFailure::new(
                    FailureReason::InvalidInput,
                    format!(
                        "`{}` takes a JSON object of tool arguments, not {other}",
                        self.kind
                    ),
                ));
            }
        };
        let server = &self.server.entry.name;
        let peer = self.server.client.peer().clone();
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments),
        ));
        let handle = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| self.lost(e))?;
        let id = handle.id.clone();
        let timeout = Duration::from_secs(self.server.entry.timeout_secs);
        let response = tokio::select! {
            r = handle.await_response() => r,
            _ = run.cancel.cancelled() => {
                // Tell the server, so it can stop its own work.
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("cancelled by Capstan".into()),
                    ))
                    .await;
                return Err(TaskFailure::new(FailureReason::Cancelled, "cancelled while running"));
            }
            _ = tokio::time::sleep(timeout) => {
                return Err(TaskFailure::new(
                    FailureReason::Timeout,
                    format!(
                        "MCP server `{server}` did not answer `{}` within {} s (timeout_secs in its [[mcp_server]] entry)",
                        self.tool, timeout.as_secs()
                    ),
                ));
            }
        };
        let result = match response.map_err(|e| self.lost(e))? {
            ServerResult::CallToolResult(result) => result,
            other => {
                return Err(TaskFailure::new(
                    FailureReason::Failed,
                    format!(
                        "MCP server `{server}` answered `{}` with something that is not a tool result: {other:?}",
                        self.tool
                    ),
                ));
            }
        };
        let texts: Vec<String> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        if result.is_error == Some(true) {
            return Err(TaskFailure::new(
                FailureReason::Failed,
                format!(
                    "MCP tool `{}` of `{server}` reported an error: {}",
                    self.tool,
                    texts.join("\n")
                ),
            ));
        }
        let summary: String = texts
            .first()
            .map(|t| t.lines().next().unwrap_or("").chars().take(200).collect())
            .unwrap_or_else(|| format!("`{}` of `{server}` answered", self.tool));
        let data = match result.structured_content {
            Some(structured) => json!({"structured": structured, "text": texts}),
            None => json!({"text": texts}),
        };
        Ok(TaskSuccess { summary, data })
    }

    fn lost(&self, error: ServiceError) -> TaskFailure {
        let server = &self.server.entry.name;
        let how = match &self.server.entry.command {
            Some(cmd) => format!("check `{cmd}` in its [[mcp_server]] entry and its stderr"),
            None => "check that its url is reachable".to_string(),
        };
        match error {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => TaskFailure::new(
                FailureReason::Failed,
                format!(
                    "MCP server `{server}` closed the connection during `{}` (it exited or crashed); {how}",
                    self.tool
                ),
            ),
            ServiceError::McpError(e) => TaskFailure::new(
                FailureReason::Failed,
                format!(
                    "MCP server `{server}` refused `{}`: {} (code {})",
                    self.tool, e.message, e.code.0
                ),
            ),
            other => TaskFailure::new(
                FailureReason::Failed,
                format!(
                    "MCP server `{server}` failed `{}`: {other}; {how}",
                    self.tool
                ),
            ),
        }
    }
}

/// The `[[mcp_server]]` entries of these config files; a later entry with the
/// same name replaces an earlier one, as with plugins.
pub fn entries(files: &[PathBuf]) -> (Vec<McpServerEntry>, Vec<Problem>) {
    let mut entries: Vec<McpServerEntry> = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                problems.push(problem(
                    None,
                    format!("{}: cannot read: {e}", file.display()),
                ));
                continue;
            }
        };
        // A file that is not TOML at all is reported by the manifest loader.
        let Ok(parsed) = toml::from_str::<ConfigFile>(&text) else {
            continue;
        };
        for (i, raw) in parsed.mcp_server.into_iter().enumerate() {
            match raw.try_into::<McpServerEntry>() {
                Ok(entry) => match validate(&entry) {
                    Ok(()) => {
                        entries.retain(|e| e.name != entry.name);
                        entries.push(entry);
                    }
                    Err(why) => problems.push(problem(
                        Some(&entry.name),
                        format!("{}: [[mcp_server]] `{}`: {why}", file.display(), entry.name),
                    )),
                },
                Err(e) => problems.push(problem(
                    None,
                    format!(
                        "{}: [[mcp_server]] #{}: {}",
                        file.display(),
                        i + 1,
                        e.message().trim()
                    ),
                )),
            }
        }
    }
    (entries, problems)
}

fn validate(entry: &McpServerEntry) -> Result<(), String> {
    let name_ok = !entry.name.is_empty()
        && entry
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !name_ok {
        return Err("`name` must be letters, digits, `-` or `_`".into());
    }
    match (&entry.command, &entry.url) {
        (Some(_), None) | (None, Some(_)) => Ok(()),
        _ => Err("give exactly one of `command` (a program to spawn) or `url`".into()),
    }
}

fn problem(name: Option<&str>, message: String) -> Problem {
    Problem {
        plugin: name.map(|n| format!("mcp:{n}")),
        message,
    }
}

/// Connect to every configured server and list its tools. A server that cannot
/// start or answer is a [`Problem`]; the others still load.
pub async fn connect_all(
    files: &[PathBuf],
    cwd: Option<&Path>,
) -> (Vec<Arc<McpTool>>, Vec<Problem>) {
    let (entries, mut problems) = entries(files);
    let connecting = entries.into_iter().map(|entry| async move {
        let name = entry.name.clone();
        match tokio::time::timeout(CONNECT_TIMEOUT, connect(entry, cwd)).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(why)) => Err(problem(Some(&name), format!("MCP server `{name}`: {why}"))),
            Err(_) => Err(problem(
                Some(&name),
                format!(
                    "MCP server `{name}` did not start and list its tools within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ),
            )),
        }
    });
    let mut tools = Vec::new();
    for result in futures::future::join_all(connecting).await {
        match result {
            Ok(found) => tools.extend(found),
            Err(p) => problems.push(p),
        }
    }
    (tools, problems)
}

async fn connect(entry: McpServerEntry, cwd: Option<&Path>) -> Result<Vec<Arc<McpTool>>, String> {
    let client = match (&entry.command, &entry.url) {
        (Some(program), _) => {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(&entry.args).envs(&entry.env);
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let (transport, _stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|e| format!("cannot start `{program}`: {e}"))?;
            ().serve(transport)
                .await
                .map_err(|e| format!("`{program}` did not complete the MCP handshake: {e}"))?
        }
        (None, Some(url)) => {
            let mut config =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    url.as_str(),
                );
            if let Some(var) = &entry.bearer_token_env {
                config.auth_header =
                    Some(std::env::var(var).map_err(|_| {
                        format!("bearer_token_env names `{var}`, which is not set")
                    })?);
            }
            let transport = StreamableHttpClientTransport::from_config(config);
            ().serve(transport)
                .await
                .map_err(|e| format!("{url} did not complete the MCP handshake: {e}"))?
        }
        (None, None) => return Err("give a `command` or a `url`".into()),
    };
    let listed = client
        .list_all_tools()
        .await
        .map_err(|e| format!("cannot list its tools: {e}"))?;
    let server = Arc::new(McpServer { entry, client });
    Ok(listed
        .into_iter()
        .map(|tool| {
            let name = tool.name.to_string();
            Arc::new(McpTool {
                kind: format!("mcp:{}/{name}", server.entry.name),
                risk: server
                    .entry
                    .tool_risk
                    .get(&name)
                    .copied()
                    .unwrap_or(server.entry.risk),
                description: tool.description.as_deref().unwrap_or("").to_string(),
                input_schema: Value::Object((*tool.input_schema).clone()),
                tool: name,
                server: server.clone(),
            })
        })
        .collect())
}
