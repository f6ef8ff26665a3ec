//! External MCP servers as capabilities. Each `[[mcp_server]]` entry in a
//! `capstan.toml` (the user's or the workspace's) names a command to spawn or a
//! URL to reach; every tool the server lists becomes the capability kind
//! `mcp:<server>/<tool>` with the single operation `call`. The host never takes
//! a server's word on risk (tool annotations are hints from an untrusted
//! peer): the entry's `risk` (default `unknown`, so every call is approved
//! first) decides the approval gate, per tool if `tool_risk` says so.
//!
//! What Capstan offers its servers ([`ClientSide`]): the workspace as its one
//! root, a progress token on every call (progress becomes the run's
//! `progress` events), image and resource content kept in the task's data,
//! the server's stderr in Capstan's log (and its last lines in the error when
//! it dies), and for HTTP servers a heartbeat during a call, so a server that
//! went away fails the call within a second or two instead of at the
//! timeout.

// Roots are deprecated by the 2026-07-28 revision (SEP-2577); the servers
// Capstan uses speak 2025-11-25 or older and ask for them.
#![allow(deprecated)]

mod asks;
pub mod confine;
pub mod pool;

pub use asks::confirm_answer;
pub use pool::McpPool;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, ContentBlock, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationCapability, FormElicitationCapability,
    Implementation, ListRootsResult, ProgressNotificationParam, ProgressToken, Root,
    SamplingCapability, ServerResult, UrlElicitationCapability,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, RunningService,
    ServiceError, ServiceExt,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ErrorData as McpError};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::config::McpServerEntry;
use crate::plugins::context::RunContext;
use crate::plugins::registry::{ExternalTool, Problem};
use capstan_policy::Risk;
use capstan_protocol::{
    Event, EventSink, FailureReason, TaskFailure, TaskOutcome, TaskRequest, TaskSuccess,
};

/// The one operation of an MCP tool capability.
pub const OPERATION: &str = "call";

/// How long a server gets to start and list its tools.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often an HTTP server is pinged during a call, how long a ping may
/// take, and how many pings in a row may go unanswered before the server
/// counts as gone. A refused connection (a killed server) fails at once.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);
const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(1500);
const HEARTBEAT_MISSES: u32 = 3;
/// Lines of a server's stderr kept for the error when it dies.
const STDERR_TAIL: usize = 20;

#[derive(Debug, Default, Deserialize)]
struct ConfigFile {
    #[serde(default)]
    mcp_server: Vec<toml::Value>,
}

/// Where the progress of one call goes: its task and its run's events.
struct ProgressRoute {
    task_id: String,
    events: Arc<dyn EventSink>,
}

/// Capstan's side of a connection: the roots it offers, the calls waiting
/// for progress, and the calls running (whose run answers the server's
/// elicitation and sampling requests).
#[derive(Clone, Default)]
pub struct ClientSide {
    /// The server's configured name.
    name: String,
    roots: Vec<Root>,
    progress: Arc<Mutex<Progress>>,
    calls: Arc<Mutex<Calls>>,
    /// Set when the server says its tools changed
    /// (`notifications/tools/list_changed`): the next registry lists them again.
    tools_changed: Arc<AtomicBool>,
}

/// The calls running on one server, by a number of their own.
#[derive(Default)]
struct Calls {
    next: u64,
    running: Vec<(u64, String, RunContext)>,
    /// When the last call ended (`None`: none has).
    last_end: Option<Instant>,
}

impl ClientSide {
    /// The task and run that a request from the server belongs to: the
    /// server's running calls, when they are all of one run (MCP does not say
    /// which call a server's request is for; with calls of several runs at
    /// once, nobody is asked).
    fn asker(&self) -> Result<(String, RunContext), String> {
        let calls = self.calls.lock();
        let Some((_, task_id, run)) = calls.running.last() else {
            return Err("no call of Capstan's is running on it".into());
        };
        let runs: std::collections::HashSet<&str> = calls
            .running
            .iter()
            .map(|(_, _, r)| r.run_id.as_str())
            .collect();
        if runs.len() > 1 {
            return Err(format!(
                "calls of {} runs are running on it at once, and Capstan cannot tell which one asks",
                runs.len()
            ));
        }
        Ok((task_id.clone(), run.clone()))
    }

    /// How long no call has been running on it (zero while one runs);
    /// `started`: when it started, for a server never called.
    fn idle_for(&self, started: Instant) -> Duration {
        let calls = self.calls.lock();
        if calls.running.is_empty() {
            calls.last_end.unwrap_or(started).elapsed()
        } else {
            Duration::ZERO
        }
    }

    /// Note a call as running until the guard drops.
    fn begin_call(&self, task_id: &str, run: &RunContext) -> CallGuard {
        let mut calls = self.calls.lock();
        calls.next += 1;
        let id = calls.next;
        calls.running.push((id, task_id.to_string(), run.clone()));
        CallGuard {
            calls: self.calls.clone(),
            id,
        }
    }
}

/// Ends a call's running entry, however the call ends.
struct CallGuard {
    calls: Arc<Mutex<Calls>>,
    id: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut calls = self.calls.lock();
        calls.running.retain(|(id, _, _)| *id != self.id);
        calls.last_end = Some(Instant::now());
    }
}

/// The calls waiting for progress, and progress that came before its call
/// was registered (a fast server can answer before `send` returns).
#[derive(Default)]
struct Progress {
    routes: HashMap<ProgressToken, ProgressRoute>,
    early: VecDeque<ProgressNotificationParam>,
}

impl ProgressRoute {
    fn emit(&self, params: ProgressNotificationParam) {
        // MCP progress is a float that only grows; the event counts whole steps.
        let done = params.progress.max(0.0) as u64;
        let total = params.total.map(|t| t.max(0.0) as u64).unwrap_or(0);
        self.events.emit(Event::Progress {
            task_id: self.task_id.clone(),
            done,
            total,
            unit: "steps".into(),
        });
        if let Some(message) = params.message {
            self.events.emit(Event::Activity {
                task_id: Some(self.task_id.clone()),
                kind: "mcp.progress".into(),
                message,
                data: Value::Null,
            });
        }
    }
}

impl ClientHandler for ClientSide {
    fn get_info(&self) -> ClientConfig {
        // Declaring roots with none to give would leave such a server nothing.
        let mut capabilities = if self.roots.is_empty() {
            ClientCapabilities::default()
        } else {
            ClientCapabilities::builder().enable_roots().build()
        };
        // Both go to the person as approvals (see `asks`).
        let mut elicitation = ElicitationCapability::new();
        elicitation.form = Some(FormElicitationCapability::new());
        elicitation.url = Some(UrlElicitationCapability::new());
        capabilities.elicitation = Some(elicitation);
        capabilities.sampling = Some(SamplingCapability::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("capstan", env!("CARGO_PKG_VERSION")),
        )
    }

    /// The workspace the server was started for: servers that honour roots
    /// (the reference filesystem server) limit themselves to it.
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        Ok(ListRootsResult::new(self.roots.clone()))
    }

    /// An approval for the person of the run whose call is running.
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        Ok(asks::elicit(self, request).await)
    }

    /// The run's model answers, after the person approves, under its budget.
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        asks::sample(self, params).await
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        tracing::info!(target: "capstan::mcp_server", server = %self.name, "its tool list changed");
        self.tools_changed.store(true, Ordering::Release);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let mut progress = self.progress.lock();
        match progress.routes.get(&params.progress_token) {
            Some(route) => route.emit(params),
            None => {
                if progress.early.len() == EARLY_PROGRESS {
                    progress.early.pop_front();
                }
                progress.early.push_back(params);
            }
        }
    }
}

/// A connected server.
pub struct McpServer {
    entry: McpServerEntry,
    client: RunningService<RoleClient, ClientSide>,
    side: ClientSide,
    /// The last lines the server wrote on stderr (spawned servers only).
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// A spawned server's HOME, removed with it.
    _home: Option<tempfile::TempDir>,
    started: Instant,
    /// A sandboxed server's task and egress proxy, ended with it (after the
    /// client above, whose drop closes the server's stdin).
    confined: Option<confine::Confined>,
}

/// How a server runs, for `capstan plugins list`: sandboxed (with its
/// workspace access and network allowlist), NOT sandboxed (`sandbox =
/// false` written out), or remote (a URL, not a process of ours).
pub fn sandbox_word(entry: &McpServerEntry) -> String {
    confine::describe(entry)
}

/// The whole environment of an unconfined server: `PATH` and `LANG` of
/// Capstan's, `HOME` private to it, then the entry's `env` (`"$NAME"`
/// passes Capstan's variable on; unset, it is left out). Nothing else:
/// model API keys and tokens in Capstan's environment stay there. (A
/// sandboxed server gets the sandbox's fixed `PATH`, `LANG`, `HOME` and
/// `TMPDIR`, then the entry's `env`.)
pub fn server_env(entry: &BTreeMap<String, String>, home: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ["PATH", "LANG"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
        .collect();
    env.push(("HOME".into(), home.to_string_lossy().into_owned()));
    for (k, v) in entry_env(entry) {
        env.retain(|(name, _)| *name != k);
        env.push((k, v));
    }
    env
}

/// The entry's `env`, `"$NAME"` values read from Capstan's environment
/// (left out when unset).
fn entry_env(entry: &BTreeMap<String, String>) -> Vec<(String, String)> {
    entry
        .iter()
        .filter_map(|(k, v)| {
            let value = match v.strip_prefix('$') {
                Some(name) => std::env::var(name).ok()?,
                None => v.clone(),
            };
            Some((k.clone(), value))
        })
        .collect()
}

/// Progress that arrived before its call was registered, kept for at most
/// this many tokens.
const EARLY_PROGRESS: usize = 64;

/// One tool of a connected server, as a capability kind.
pub struct McpTool {
    kind: String,
    tool: String,
    description: String,
    input_schema: Value,
    risk: Risk,
    /// The server, started on the first call if it is not running.
    slot: Arc<pool::Slot>,
}

impl McpTool {
    /// The tool's own name on its server.
    pub fn tool_name(&self) -> &str {
        &self.tool
    }
}

#[async_trait::async_trait]
impl ExternalTool for McpTool {
    fn kind(&self) -> &str {
        &self.kind
    }

    fn owner(&self) -> &str {
        &self.slot.entry.name
    }

    fn risk(&self) -> Risk {
        self.risk
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    fn operation(&self) -> &'static str {
        OPERATION
    }

    /// Call the tool with the task's input. A server that dies mid-call, an
    /// error result and a timeout each become a task failure naming the server.
    async fn call(&self, task: &TaskRequest, run: &RunContext) -> TaskOutcome {
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
        let started = self.slot.server().await.map_err(|why| {
            TaskFailure::new(
                FailureReason::Failed,
                format!("MCP server `{}`: {why}", self.slot.entry.name),
            )
        })?;
        let this = Call {
            tool: self,
            server: &started,
        };
        let _running = started.side.begin_call(&task.id, run);
        let server = &started.entry.name;
        let peer = started.client.peer().clone();
        let params = CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        // rmcp gives every request a progress token of its own; progress for
        // it goes to this task's events from here on (and what came first is
        // replayed).
        let handle = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| this.lost(e))?;
        let _route = RouteGuard::register(
            &started.side,
            handle.progress_token.clone(),
            ProgressRoute {
                task_id: task.id.clone(),
                events: run.events.clone(),
            },
        );
        let id = handle.id.clone();
        let timeout = Duration::from_secs(started.entry.timeout_secs);
        let heartbeat = async {
            match started.entry.url {
                Some(_) => heartbeat(&peer).await,
                // A spawned server that dies closes its stdout: the response fails at once.
                None => std::future::pending().await,
            }
        };
        let response = tokio::select! {
            r = handle.await_response() => r,
            gone = heartbeat => return Err(this.lost(gone)),
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
        // The server's connections during the call are the call's events.
        if let Some(confined) = &started.confined {
            confined.settle().await;
        }
        let result = match response.map_err(|e| this.lost(e))? {
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
        let mut data = json!({"text": texts});
        if let Some(structured) = result.structured_content {
            data["structured"] = structured;
        }
        // Images, audio, embedded resources and links are kept as the server
        // sent them: they are part of the answer, saved with the run.
        let other: Vec<Value> = result
            .content
            .iter()
            .filter(|c| c.as_text().is_none())
            .filter_map(|c: &ContentBlock| serde_json::to_value(c).ok())
            .collect();
        if !other.is_empty() {
            data["content"] = Value::Array(other);
        }
        Ok(TaskSuccess { summary, data })
    }
}

/// One call of a tool on its started server.
struct Call<'a> {
    tool: &'a McpTool,
    server: &'a McpServer,
}

impl Call<'_> {
    fn lost(&self, error: ServiceError) -> TaskFailure {
        let server = &self.server.entry.name;
        let tool = &self.tool.tool;
        let tail: Vec<String> = self.server.stderr_tail.lock().iter().cloned().collect();
        let how = match (&self.server.entry.command, tail.is_empty()) {
            (Some(cmd), true) => format!("check `{cmd}` in its [[mcp_server]] entry"),
            (Some(cmd), false) => format!(
                "check `{cmd}` in its [[mcp_server]] entry; its last words on stderr:\n{}",
                tail.join("\n")
            ),
            (None, _) => "check that its url is reachable".to_string(),
        };
        match error {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => TaskFailure::new(
                FailureReason::Failed,
                format!(
                    "MCP server `{server}` closed the connection during `{}` (it exited or crashed); {how}",
                    tool
                ),
            ),
            ServiceError::McpError(e) => TaskFailure::new(
                FailureReason::Failed,
                format!(
                    "MCP server `{server}` refused `{}`: {} (code {})",
                    tool, e.message, e.code.0
                ),
            ),
            other => TaskFailure::new(
                FailureReason::Failed,
                format!("MCP server `{server}` failed `{}`: {other}; {how}", tool),
            ),
        }
    }
}

/// Removes a call's progress route when the call ends, however it ends.
struct RouteGuard {
    side: ClientSide,
    token: ProgressToken,
}

impl RouteGuard {
    fn register(side: &ClientSide, token: ProgressToken, route: ProgressRoute) -> Self {
        let mut progress = side.progress.lock();
        let (early, later): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut progress.early)
            .into_iter()
            .partition(|p| p.progress_token == token);
        progress.early = later;
        for params in early {
            route.emit(params);
        }
        progress.routes.insert(token.clone(), route);
        drop(progress);
        Self {
            side: side.clone(),
            token,
        }
    }
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.side.progress.lock().routes.remove(&self.token);
    }
}

/// Pings an HTTP server until it stops answering; returns why. The
/// streamable HTTP client would otherwise wait on a dead connection (or try
/// to resume it) until the call's timeout.
async fn heartbeat(peer: &Peer<RoleClient>) -> ServiceError {
    let mut misses = 0;
    loop {
        tokio::time::sleep(HEARTBEAT_EVERY).await;
        let ping = peer.send_request(ClientRequest::PingRequest(Default::default()));
        match tokio::time::timeout(HEARTBEAT_TIMEOUT, ping).await {
            Ok(Ok(_)) => misses = 0,
            Ok(Err(e)) => return e,
            Err(_) => {
                misses += 1;
                if misses == HEARTBEAT_MISSES {
                    return ServiceError::Timeout {
                        timeout: HEARTBEAT_TIMEOUT * HEARTBEAT_MISSES,
                    };
                }
            }
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
        _ => {
            Err::<(), String>("give exactly one of `command` (a program to spawn) or `url`".into())
        }
    }?;
    confine::validate(entry)
}

fn problem(name: Option<&str>, message: String) -> Problem {
    Problem {
        plugin: name.map(|n| format!("mcp:{n}")),
        message,
    }
}

/// One tool a server lists, as planning needs it (and as the tool-list
/// cache keeps it, so planning needs no running server).
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct ListedTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// Connect to every configured server now and list its tools (`capstan
/// plugins list` and `setup` check servers this way; runs go through
/// [`McpPool`], which starts servers when first called). A server that
/// cannot start or answer is a [`Problem`]; the others still load. The
/// servers stop when the tools are dropped.
pub async fn connect_all(
    files: &[PathBuf],
    cwd: Option<&Path>,
    limits: &capstan_sandbox::Limits,
) -> (Vec<Arc<McpTool>>, Vec<Problem>) {
    let (entries, problems) = entries(files);
    let slots = entries
        .into_iter()
        .map(|entry| {
            Arc::new(pool::Slot::new(
                entry,
                cwd.map(Path::to_path_buf),
                None,
                limits.clone(),
            ))
        })
        .collect();
    pool::list_tools(slots, problems).await
}

/// The kinds of one server's listed tools, served through its slot.
fn tools_of(slot: &Arc<pool::Slot>, listed: &[ListedTool]) -> Vec<Arc<McpTool>> {
    listed
        .iter()
        .map(|tool| {
            Arc::new(McpTool {
                kind: format!("mcp:{}/{}", slot.entry.name, tool.name),
                risk: slot
                    .entry
                    .tool_risk
                    .get(&tool.name)
                    .copied()
                    .unwrap_or(slot.entry.risk),
                description: tool.description.clone(),
                input_schema: tool.input_schema.clone(),
                tool: tool.name.clone(),
                slot: slot.clone(),
            })
        })
        .collect()
}

/// Start a server for the workspace `cwd` (spawned, or reached at its URL),
/// complete the handshake and list its tools.
async fn start(
    entry: &McpServerEntry,
    cwd: Option<&Path>,
    limits: &capstan_sandbox::Limits,
    tools_changed: Arc<AtomicBool>,
) -> Result<(McpServer, Vec<ListedTool>), String> {
    let entry = entry.clone();
    let side = ClientSide {
        name: entry.name.clone(),
        // A sandboxed server that cannot see the workspace is offered no root.
        roots: cwd
            .filter(|_| entry.roots)
            .filter(|_| {
                !confine::sandboxed(&entry)
                    || entry.workspace != crate::config::WorkspaceAccess::None
            })
            .map(|dir| {
                let mut root = Root::new(format!(
                    "file://{}",
                    crate::uri::encode(&dir.to_string_lossy())
                ));
                root.name = Some("workspace".into());
                vec![root]
            })
            .unwrap_or_default(),
        progress: Arc::default(),
        calls: Arc::default(),
        tools_changed,
    };
    let stderr_tail: Arc<Mutex<VecDeque<String>>> = Arc::default();
    let mut private_home = None;
    let mut confined = None;
    let client = match (&entry.command, &entry.url) {
        (Some(program), _) if confine::sandboxed(&entry) => {
            let mut task =
                confine::spawn(&entry, program, cwd, entry_env(&entry.env), limits, &side)
                    .await
                    .map_err(|e| format!("cannot start `{program}`: {e}"))?;
            let (Some(stdout), Some(stdin)) = (task.task.stdout.take(), task.task.stdin.take())
            else {
                return Err(format!(
                    "cannot start `{program}`: its pipes were not set up"
                ));
            };
            if let Some(stderr) = task.task.stderr.take() {
                tokio::spawn(log_stderr(entry.name.clone(), stderr, stderr_tail.clone()));
            }
            match side.clone().serve((stdout, stdin)).await {
                Ok(client) => {
                    confined = Some(task);
                    client
                }
                Err(e) => {
                    if let Some(why) = confine::why_not_started(&mut task, &entry).await {
                        return Err(why);
                    }
                    let tail: Vec<String> = stderr_tail.lock().iter().cloned().collect();
                    return Err(format!(
                        "`{program}` did not complete the MCP handshake: {e}; it runs in the OS \
                         sandbox, which holds only the system directories, the entry's `read` \
                         paths and, if `workspace` says so, the workspace: its program and files \
                         must be there (add their directory to `read`){}",
                        if tail.is_empty() {
                            String::new()
                        } else {
                            format!("; its last words on stderr:\n{}", tail.join("\n"))
                        }
                    ));
                }
            }
        }
        (Some(program), _) => {
            let home = tempfile::Builder::new()
                .prefix("capstan-mcp-home-")
                .tempdir()
                .map_err(|e| format!("cannot make a private HOME for `{program}`: {e}"))?;
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(&entry.args)
                .env_clear()
                .envs(server_env(&entry.env, home.path()));
            private_home = Some(home);
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start `{program}`: {e}"))?;
            if let Some(stderr) = stderr {
                tokio::spawn(log_stderr(entry.name.clone(), stderr, stderr_tail.clone()));
            }
            side.clone()
                .serve(transport)
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
            side.clone()
                .serve(transport)
                .await
                .map_err(|e| format!("{url} did not complete the MCP handshake: {e}"))?
        }
        (None, None) => return Err("give a `command` or a `url`".into()),
    };
    let server = McpServer {
        entry,
        client,
        side,
        stderr_tail,
        _home: private_home,
        started: Instant::now(),
        confined,
    };
    let tools = server.list_tools().await?;
    Ok((server, tools))
}

impl McpServer {
    /// How long no call has been running on it.
    pub(super) fn idle_for(&self) -> Duration {
        self.side.idle_for(self.started)
    }

    /// Its tools, as it lists them now.
    async fn list_tools(&self) -> Result<Vec<ListedTool>, String> {
        let listed = self
            .client
            .list_all_tools()
            .await
            .map_err(|e| format!("cannot list its tools: {e}"))?;
        Ok(listed
            .into_iter()
            .map(|tool| ListedTool {
                name: tool.name.to_string(),
                description: tool.description.as_deref().unwrap_or("").to_string(),
                input_schema: Value::Object((*tool.input_schema).clone()),
            })
            .collect())
    }
}

/// A server's stderr, line by line, into Capstan's log (`-v` or `RUST_LOG`
/// shows it), the last [`STDERR_TAIL`] lines kept for the error if it dies.
async fn log_stderr(
    server: String,
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "capstan::mcp_server", server = %server, "{line}");
        let mut tail = tail.lock();
        if tail.len() == STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}
