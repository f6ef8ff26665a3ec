//! Capstan as an MCP server. Every operation a plugin describes becomes one
//! tool (`<kind>.<operation>`, see [`super::tools`]). A call is a task on the
//! plan-task path ([`run_task`]): registry, workspace gate, risk-narrowed
//! preopens, exec policy and the approval gate. Approvals go to the client as
//! elicitation requests when it declared that capability; otherwise they are
//! denied with a message saying how to allow them. Activity and progress
//! become progress and log notifications; a client's
//! `notifications/cancelled` cancels the task (and kills its processes).
//!
//! Beside the tools: the workspace's files and index as resources
//! ([`super::resources`]), prompts ([`super::prompts`]), completion of their
//! arguments, and logging ([`super::logging`]).
#![allow(deprecated)] // logging: see super::logging

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    CompletionInfo, ContentBlock, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    EnumSchema, GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, Reference, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{ElicitationMode, NotificationContext, Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::fixtures;
use super::logging::SessionLog;
use super::prompts::{self, CapstanPrompt};
use super::resources::{self, WorkspaceResources, invalid_cursor};
use super::tools::{self, ToolEntry, ToolFailure, ToolOutput};
use crate::plugins::registry::Registry;
use crate::plugins::services::approval::ApproveMode;
use crate::run::app::{App, Frontend};
use crate::run::dispatch::run_task;
use capstan_protocol::{Envelope, Event, FailureReason, TaskFailure, TaskRequest};

/// How often a session looks for changed files (subscriptions, list_changed).
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// What every MCP session of one `capstan mcp` (or `capstan serve`) shares:
/// the app, the workspace and the tools of its registry.
pub struct McpHost {
    app: Arc<App>,
    workspace: Option<PathBuf>,
    resources: Option<Arc<WorkspaceResources>>,
    registry: Registry,
    tools: BTreeMap<String, ToolEntry>,
    /// The conformance suite's fixtures are served too (test flag).
    fixtures: bool,
}

impl McpHost {
    /// The tools of the workspace's plugins. External MCP servers are not
    /// re-served: a `capstan mcp` listed as a server of itself would spawn
    /// itself without end, and their tools are reachable at their source.
    pub async fn new(app: Arc<App>, workspace: Option<PathBuf>) -> Arc<Self> {
        Self::build(app, workspace, false).await
    }

    /// As [`McpHost::new`], plus the fixtures the official conformance suite
    /// calls (`capstan mcp --conformance-fixtures`, for tests only).
    pub async fn with_conformance_fixtures(app: Arc<App>, workspace: Option<PathBuf>) -> Arc<Self> {
        Self::build(app, workspace, true).await
    }

    async fn build(app: Arc<App>, workspace: Option<PathBuf>, fixtures: bool) -> Arc<Self> {
        let registry = app.plugin_registry(workspace.as_deref()).await;
        // Tools are listed from every plugin's operations: load them all now.
        registry.load_all(&app.runtime, None).await;
        for p in registry.problems() {
            crate::term::warn(&p.message);
        }
        let network = workspace
            .as_deref()
            .map(|w| app.policy_for(w))
            .unwrap_or_else(|| app.config.policy.clone())
            .network;
        let mut tools = BTreeMap::new();
        for plugin in &registry.plugins() {
            for kind in &plugin.spec.entry.kinds {
                for op in &plugin.operations {
                    let entry = tools::entry(plugin, kind, op, network);
                    tools.insert(entry.tool.name.to_string(), entry);
                }
            }
        }
        let resources = workspace
            .clone()
            .map(|w| Arc::new(WorkspaceResources::new(w)));
        Arc::new(Self {
            app,
            workspace,
            resources,
            registry,
            tools,
            fixtures,
        })
    }

    /// The tool names served, in order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    fn profile_name(&self) -> String {
        let policy = self
            .workspace
            .as_deref()
            .map(|w| self.app.policy_for(w))
            .unwrap_or_else(|| self.app.config.policy.clone());
        policy.profile.to_string()
    }
}

/// What one session keeps between requests.
#[derive(Debug, Default)]
struct SessionState {
    log: SessionLog,
    /// Subscribed URIs and the file stamp last seen.
    subscriptions: Mutex<BTreeMap<String, resources::Stamp>>,
    /// Set once the watcher runs.
    watching: OnceLock<()>,
}

/// One MCP session's handler (stdio has one; streamable HTTP one per session).
/// Its calls are runs of one Capstan session, so an approve-for-session
/// grant holds for this client only, and every call is in the store (runs,
/// events, approvals) like a plan task.
#[derive(Clone)]
pub struct CapstanMcp {
    host: Arc<McpHost>,
    session: Arc<OnceLock<String>>,
    state: Arc<SessionState>,
}

impl CapstanMcp {
    pub fn new(host: Arc<McpHost>) -> Self {
        Self {
            host,
            session: Arc::default(),
            state: Arc::default(),
        }
    }

    fn session(&self, peer: &Peer<RoleServer>) -> Result<String, McpError> {
        if let Some(id) = self.session.get() {
            return Ok(id.clone());
        }
        let store = &self.host.app.store;
        let client = peer
            .peer_info()
            .map(|i| i.client_info.name.clone())
            .unwrap_or_else(|| "an MCP client".into());
        let workspace = self
            .host
            .workspace
            .as_deref()
            .and_then(|w| store.get_workspace_by_root(w).ok().flatten())
            .map(|w| w.id);
        let session = store
            .create_session(
                &format!("MCP tool calls from {client}"),
                workspace.as_deref(),
            )
            .map_err(store_error)?;
        Ok(self.session.get_or_init(|| session.id).clone())
    }

    /// Start this session's watcher once: it tells the client when a
    /// subscribed file changes and when the file list changes, and stops
    /// when the session ends (its state is dropped).
    fn watch(&self, peer: Peer<RoleServer>) {
        let Some(resources) = self.host.resources.clone() else {
            return;
        };
        if self.state.watching.set(()).is_err() {
            return;
        }
        let state: Weak<SessionState> = Arc::downgrade(&self.state);
        tokio::spawn(async move {
            let scan = |r: Arc<WorkspaceResources>| async move {
                tokio::task::spawn_blocking(move || resources::listing(&r))
                    .await
                    .unwrap_or_default()
            };
            let mut files = scan(resources.clone()).await;
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                let Some(state) = state.upgrade() else {
                    return;
                };
                let changed: Vec<String> = {
                    let mut subs = state.subscriptions.lock();
                    subs.iter_mut()
                        .filter_map(|(uri, seen)| {
                            let Ok(resources::Target::File(path)) = resources.target(uri) else {
                                return None;
                            };
                            let now = resources::stamp(&path);
                            (now != *seen).then(|| {
                                *seen = now;
                                uri.clone()
                            })
                        })
                        .collect()
                };
                for uri in changed {
                    let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
                    if peer.notify_resource_updated(param).await.is_err() {
                        return;
                    }
                }
                let now = scan(resources.clone()).await;
                if now != files {
                    files = now;
                    if peer.notify_resource_list_changed().await.is_err() {
                        return;
                    }
                }
            }
        });
    }
}

fn store_error(e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(format!("Capstan's database failed: {e}"), None)
}

/// Why an approval was denied without a person, for the result's advice.
#[derive(Debug, Clone)]
enum ApprovalNote {
    NoElicitation { action: String, is_command: bool },
    ElicitationFailed { action: String, error: String },
    Declined { action: String },
}

/// Turns the events of one call into progress notifications and approval
/// prompts until the call ends.
struct Forwarder {
    peer: Peer<RoleServer>,
    progress: Option<ProgressToken>,
    sent: u32,
    host: Arc<McpHost>,
    notes: Arc<Mutex<Vec<ApprovalNote>>>,
    state: Arc<SessionState>,
    /// The tool called and its run, for log messages.
    tool: String,
    run_id: String,
}

impl Forwarder {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Event>,
        mut done: oneshot::Receiver<()>,
    ) {
        loop {
            tokio::select! {
                event = rx.recv() => match event {
                    Some(event) => self.handle(event).await,
                    None => return,
                },
                _ = &mut done => {
                    // The call is over: send what was emitted before it ended.
                    while let Ok(event) = rx.try_recv() {
                        self.handle(event).await;
                    }
                    return;
                }
            }
        }
    }

    async fn handle(&mut self, event: Event) {
        let (level, message) = match &event {
            Event::ApprovalRequested {
                approval_id,
                action,
                command,
                cwd,
                risk,
                reasons,
                always,
                ..
            } => {
                self.approval(Asked {
                    id: approval_id.clone(),
                    action: action.clone(),
                    command: command.clone(),
                    cwd: cwd.clone(),
                    risk: risk.to_string(),
                    always: always.clone(),
                    reasons: reasons.clone(),
                });
                (
                    LoggingLevel::Notice,
                    format!("waiting for approval: {command} ({risk})"),
                )
            }
            Event::ApprovalDecided { decision, .. } => {
                (LoggingLevel::Notice, format!("approval {decision}"))
            }
            Event::Progress {
                done, total, unit, ..
            } => (LoggingLevel::Debug, format!("{done}/{total} {unit}")),
            Event::Activity { message, .. } => (LoggingLevel::Info, message.clone()),
            Event::TerminalStep {
                command,
                exit_code,
                timed_out,
                grant,
                ..
            } => {
                let (level, outcome) = match (exit_code, timed_out) {
                    (_, true) => (LoggingLevel::Warning, "timed out".to_string()),
                    (Some(0), _) => (LoggingLevel::Info, "exit 0".to_string()),
                    (Some(code), _) => (LoggingLevel::Warning, format!("exit {code}")),
                    (None, _) => (LoggingLevel::Warning, "killed".to_string()),
                };
                let grant = grant.describe();
                (level, format!("$ {command} ({outcome}); ran with: {grant}"))
            }
            Event::TaskFailed {
                reason, message, ..
            } => (LoggingLevel::Error, format!("failed ({reason}): {message}")),
            _ => return,
        };
        self.state
            .log
            .send(
                &self.peer,
                level,
                json!({"tool": self.tool, "run": self.run_id, "message": message}),
            )
            .await;
        // Task failures reach the client as the result; progress is for work.
        if matches!(
            event,
            Event::TaskFailed { .. } | Event::ApprovalDecided { .. }
        ) {
            return;
        }
        if let Some(token) = &self.progress {
            // Progress must grow with every notification; the count of events
            // does, whatever mix of events a capability emits.
            self.sent += 1;
            let mut param = ProgressNotificationParam::new(token.clone(), f64::from(self.sent));
            param.message = Some(message);
            if let Err(e) = self.peer.notify_progress(param).await {
                tracing::debug!("progress notification not sent: {e}");
            }
        }
    }

    /// Ask the client (elicitation) or deny at once. Runs on its own task so
    /// progress keeps flowing while a person decides.
    fn approval(&self, asked: Asked) {
        let Asked {
            id,
            action,
            command,
            cwd,
            risk,
            always,
            reasons,
        } = asked;
        let broker = self.host.app.broker.clone();
        if broker.mode() != ApproveMode::Ask {
            return; // the flag decides; the broker already knows
        }
        let notes = self.notes.clone();
        let note = |n: ApprovalNote| notes.lock().push(n);
        let label = if command.is_empty() {
            action.clone()
        } else {
            command.clone()
        };
        if !self
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            note(ApprovalNote::NoElicitation {
                action: label,
                is_command: action == "exec",
            });
            let _ = broker.decide(
                &id,
                capstan_store::Decision::Denied,
                crate::plugins::services::approval::Via::McpClient,
            );
            return;
        }
        let peer = self.peer.clone();
        let notes = self.notes.clone();
        tokio::spawn(async move {
            let mut message = if action == "exec" {
                format!("Capstan asks to run `{command}` (risk: {risk})")
            } else {
                format!("Capstan asks to approve `{action}`: {command} (risk: {risk})")
            };
            if !cwd.is_empty() {
                message.push_str(&format!(" in {cwd}"));
            }
            for reason in distinct_reasons(&reasons, &message) {
                message.push_str(&format!("\n- {reason}"));
            }
            if let Some(rule) = &always {
                message.push_str(&format!(
                    "\napprove_always: always for this workspace (writes \"{rule}\" to your \
                     capstan.toml)"
                ));
            }
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: approval_schema(always.is_some()),
            };
            let decision = match peer.create_elicitation(params).await {
                Ok(result) => {
                    let answer = result
                        .content
                        .as_ref()
                        .and_then(|c| c.get("decision"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    match (result.action, answer) {
                        (ElicitationAction::Accept, "approve") => capstan_store::Decision::Approved,
                        (ElicitationAction::Accept, "approve_for_session") => {
                            capstan_store::Decision::ApprovedForSession
                        }
                        (ElicitationAction::Accept, "approve_always") if always.is_some() => {
                            capstan_store::Decision::ApprovedAlways
                        }
                        _ => {
                            notes.lock().push(ApprovalNote::Declined { action: label });
                            capstan_store::Decision::Denied
                        }
                    }
                }
                Err(e) => {
                    notes.lock().push(ApprovalNote::ElicitationFailed {
                        action: label,
                        error: e.to_string(),
                    });
                    capstan_store::Decision::Denied
                }
            };
            if let Err(e) = broker.decide(
                &id,
                decision,
                crate::plugins::services::approval::Via::McpClient,
            ) {
                tracing::debug!("approval {id} was settled before the client answered: {e}");
            }
        });
    }
}

/// The reasons worth a line of their own: the classifier and the policy
/// often say the same thing in two sentences (`rm` deletes files; asks
/// because `rm` deletes files), and the risk may already be in the headline.
/// A reason another one (or the headline) contains is left out.
fn distinct_reasons<'a>(reasons: &'a [String], headline: &str) -> Vec<&'a str> {
    let norm = |s: &str| s.trim().trim_end_matches('.').to_lowercase();
    let headline = norm(headline);
    let mut kept: Vec<&str> = Vec::new();
    for (i, reason) in reasons.iter().enumerate() {
        let r = norm(reason);
        if r.is_empty() || headline.contains(&r) {
            continue;
        }
        let inside_another = reasons.iter().enumerate().any(|(j, other)| {
            let o = norm(other);
            j != i && o.contains(&r) && (o.len() > r.len() || j < i)
        });
        if !inside_another {
            kept.push(reason.as_str());
        }
    }
    kept
}

/// What an elicitation shows of one `approval.requested` (owned: it moves
/// into the task that waits for the person).
struct Asked {
    id: String,
    action: String,
    command: String,
    cwd: String,
    risk: String,
    /// The rule "always for this workspace" would write, when offered.
    always: Option<String>,
    reasons: Vec<String>,
}

/// The answers of an approval; `always`: it offers "always for this
/// workspace" (`approve_always`).
fn approval_schema(always: bool) -> ElicitationSchema {
    let mut answers = vec!["approve".into(), "approve_for_session".into()];
    if always {
        answers.push("approve_always".into());
    }
    answers.push("deny".into());
    let choices = EnumSchema::builder(answers).build();
    ElicitationSchema::builder()
        .required_enum_schema("decision", choices)
        .build_unchecked()
}

impl ServerHandler for CapstanMcp {
    fn get_info(&self) -> ServerConfig {
        let workspace = match &self.host.workspace {
            Some(w) => format!("workspace {}", w.display()),
            None => "no workspace (start `capstan mcp --workspace DIR` to act on files)".into(),
        };
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_tools()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("capstan", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Capstan's sandboxed capabilities for {workspace}. Each tool is `<capability>.<operation>`; \
                 commands and writes pass Capstan's policy and approval gate. The workspace's files are \
                 file:// resources and its search index the template {}; prompts: {}.",
                resources::SEARCH_TEMPLATE,
                CapstanPrompt::ALL.map(CapstanPrompt::name).join(", ")
            ))
    }

    /// Capstan asks the client things mid-call (elicitation for approvals,
    /// logging): the 2026-07-28 revision forbids server-to-client requests,
    /// so the newest version offered is 2025-11-25. A client asking for an
    /// unknown or newer one is answered with that (MCP lifecycle: the server
    /// replies with a version it supports, the client decides).
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.watch(context.peer);
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.state.log.set(request.level);
        Ok(())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        single_page(request.as_ref())?;
        let mut tools: Vec<Tool> = self.host.tools.values().map(|t| t.tool.clone()).collect();
        if self.host.fixtures {
            tools.extend(fixtures::tools());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.host
            .tools
            .get(name)
            .map(|t| t.tool.clone())
            .or_else(|| {
                self.host
                    .fixtures
                    .then(|| fixtures::tools().into_iter().find(|t| t.name == name))
                    .flatten()
            })
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        let (mut items, next) = match &self.host.resources {
            Some(res) => res.list(cursor)?,
            None => {
                single_page(request.as_ref())?;
                (Vec::new(), None)
            }
        };
        if self.host.fixtures && cursor.is_none() {
            items.extend(fixtures::resources());
        }
        let mut result = ListResourcesResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        single_page(request.as_ref())?;
        let mut templates = self
            .host
            .resources
            .as_ref()
            .map(|r| r.templates())
            .unwrap_or_default();
        if self.host.fixtures {
            templates.extend(fixtures::templates());
        }
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if self.host.fixtures
            && let Some(found) = fixtures::read(&request.uri)
        {
            return Ok(found.into());
        }
        let Some(res) = &self.host.resources else {
            return Err(McpError::resource_not_found(
                format!(
                    "`{}`: this server has no workspace, so it serves no files; start it as \
                     `capstan mcp --workspace DIR`",
                    request.uri
                ),
                None,
            ));
        };
        Ok(res.read(&request.uri, &self.host.app.indexes).await?.into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let stamp = if self.host.fixtures && fixtures::is_resource(&request.uri) {
            None
        } else {
            let res = self.host.resources.as_ref().ok_or_else(|| {
                McpError::resource_not_found("this server has no workspace to watch", None)
            })?;
            match res.target(&request.uri) {
                Ok(resources::Target::File(path)) => resources::stamp(&path),
                Ok(resources::Target::Search(_)) => {
                    return Err(McpError::invalid_params(
                        "index searches are not watched; subscribe to file:// resources",
                        None,
                    ));
                }
                Err(why) => return Err(McpError::resource_not_found(why, None)),
            }
        };
        self.state.subscriptions.lock().insert(request.uri, stamp);
        self.watch(context.peer);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.state.subscriptions.lock().remove(&request.uri);
        Ok(())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        single_page(request.as_ref())?;
        let mut prompts: Vec<_> = CapstanPrompt::ALL.map(CapstanPrompt::describe).into();
        if self.host.fixtures {
            prompts.extend(fixtures::prompts());
        }
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let args = request.arguments.clone().unwrap_or_default();
        if self.host.fixtures
            && let Some(found) = fixtures::prompt(&request.name, &args)
        {
            return found.map(Into::into);
        }
        let prompt = CapstanPrompt::from_name(&request.name).ok_or_else(|| {
            McpError::invalid_params(
                format!(
                    "no prompt `{}`; this server has: {} (see prompts/list)",
                    request.name,
                    CapstanPrompt::ALL.map(CapstanPrompt::name).join(", ")
                ),
                None,
            )
        })?;
        prompts::get(
            prompt,
            &args,
            &self.host.app,
            self.host.resources.as_deref(),
        )
        .await
        .map(Into::into)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let value = request.argument.value.as_str();
        let values = match &request.r#ref {
            Reference::Prompt(p) => {
                if self.host.fixtures
                    && let Some(info) = fixtures::complete(&p.name, value)
                {
                    return Ok(CompleteResult::new(info));
                }
                match CapstanPrompt::from_name(&p.name) {
                    Some(prompt)
                        if prompt.path_argument() == Some(request.argument.name.as_str()) =>
                    {
                        self.paths(value)
                    }
                    Some(CapstanPrompt::SummariseRunChanges) => self.recent_runs(value),
                    _ => Vec::new(),
                }
            }
            Reference::Resource(r)
                if r.uri.starts_with("file://") && request.argument.name == "path" =>
            {
                self.paths(value)
            }
            _ => Vec::new(),
        };
        let total = values.len();
        let shown: Vec<String> = values
            .into_iter()
            .take(CompletionInfo::MAX_VALUES)
            .collect();
        let mut info = CompletionInfo::new(shown).unwrap_or_default();
        info.total = u32::try_from(total).ok();
        info.has_more = Some(total > CompletionInfo::MAX_VALUES);
        Ok(CompleteResult::new(info))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let host = &self.host;
        if host.fixtures {
            let args = request.arguments.clone().unwrap_or_default();
            if let Some(result) =
                fixtures::call(&request.name, &args, &context, &self.state.log).await
            {
                return result.map(Into::into);
            }
        }
        let Some(entry) = host.tools.get(request.name.as_ref()) else {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{}`; this Capstan serves: {} (see tools/list)",
                    request.name,
                    host.tool_names().collect::<Vec<_>>().join(", ")
                ),
                None,
            ));
        };
        let input = Value::Object(request.arguments.clone().unwrap_or_default());
        // Bad arguments are a tool error, not a protocol error, so the model
        // that made the call can read what to fix (MCP 2025-11-25, SEP-1303).
        if let Some(validator) = &entry.validator {
            let errors: Vec<String> = validator
                .iter_errors(&input)
                .map(|e| {
                    let at = e.instance_path().to_string();
                    if at.is_empty() {
                        e.to_string()
                    } else {
                        format!("{at}: {e}")
                    }
                })
                .collect();
            if !errors.is_empty() {
                return Ok(failure_result(
                    &TaskFailure::new(
                        FailureReason::InvalidInput,
                        format!(
                            "the arguments do not fit the input schema of `{}`: {}",
                            request.name,
                            errors.join("; ")
                        ),
                    ),
                    None,
                )
                .into());
            }
        }
        if entry.needs_workspace && host.workspace.is_none() {
            return Ok(failure_result(
                &TaskFailure::new(
                    FailureReason::WorkspaceRequired,
                    format!(
                        "`{}` acts on files or runs commands and this server has no workspace; \
                         start it as `capstan mcp --workspace DIR`",
                        request.name
                    ),
                ),
                None,
            )
            .into());
        }

        let session_id = self.session(&context.peer)?;
        let stored = host
            .app
            .store
            .start_run(&session_id, "mcp")
            .map_err(store_error)?;
        // Events reach the forwarder through a channel: a sink must not block,
        // and notifications and elicitations are async.
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = oneshot::channel();
        let notes = Arc::new(Mutex::new(Vec::new()));
        let forwarder = Forwarder {
            peer: context.peer.clone(),
            progress: context.meta.get_progress_token(),
            sent: 0,
            host: host.clone(),
            notes: notes.clone(),
            state: self.state.clone(),
            tool: request.name.to_string(),
            run_id: stored.id.clone(),
        };
        let forwarding = tokio::spawn(forwarder.run(rx, done_rx));

        let frontend: Frontend = Arc::new(move |e: &Arc<Envelope>| {
            let _ = tx.send(e.event.clone());
        });
        // The client's `notifications/cancelled` fires the context's token.
        let run = host
            .app
            .run_builder(host.workspace.clone())
            .ids(stored.id.clone(), Some(session_id))
            .cancel(context.ct.clone())
            .build(host.app.run_events(&stored.id, frontend));
        let task = TaskRequest {
            id: "t1".into(),
            kind: entry.kind.clone(),
            operation: entry.operation.clone(),
            input,
        };
        let outcome = run_task(&host.app.runtime, &host.registry, &task, &run).await;
        drop(run);
        let _ = done_tx.send(());
        let _ = forwarding.await;
        let (status, reason) = match &outcome {
            Ok(_) => (capstan_store::RunStatus::Completed, None),
            Err(f) if f.reason == FailureReason::Cancelled => {
                (capstan_store::RunStatus::Cancelled, Some(f.reason))
            }
            Err(f) => (capstan_store::RunStatus::Failed, Some(f.reason)),
        };
        if let Err(e) =
            host.app
                .finish_run(&stored.id, status, reason.map(FailureReason::as_str), None)
        {
            crate::term::warn(format_args!(
                "MCP call {} not recorded as finished: {e}",
                stored.id
            ));
        }

        Ok(match outcome {
            Ok(success) => {
                let mut result = CallToolResult::success(vec![
                    ContentBlock::text(success.summary.clone()),
                    ContentBlock::text(
                        serde_json::to_string_pretty(&success.data).unwrap_or_default(),
                    ),
                ]);
                result.structured_content = serde_json::to_value(ToolOutput {
                    summary: &success.summary,
                    data: &success.data,
                })
                .ok();
                result
            }
            Err(failure) => {
                let advice = (failure.reason == FailureReason::Denied)
                    .then(|| denial_advice(host, &notes.lock()));
                failure_result(&failure, advice)
            }
        }
        .into())
    }
}

impl CapstanMcp {
    /// Workspace paths for completion (confined like any path).
    fn paths(&self, prefix: &str) -> Vec<String> {
        self.host
            .resources
            .as_ref()
            .map(|r| r.complete_path(prefix))
            .unwrap_or_default()
    }

    /// This session's recent runs whose id starts with `prefix`.
    fn recent_runs(&self, prefix: &str) -> Vec<String> {
        let session = self.session.get().map(String::as_str);
        self.host
            .app
            .store
            .list_runs(session, 50)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.id)
            .filter(|id| id.starts_with(prefix))
            .collect()
    }
}

/// Lists served in one page take no cursor: any cursor is one this server
/// never handed out (MCP: an invalid cursor is -32602).
fn single_page(request: Option<&PaginatedRequestParams>) -> Result<(), McpError> {
    match request.and_then(|r| r.cursor.as_deref()) {
        Some(cursor) => Err(invalid_cursor(cursor)),
        None => Ok(()),
    }
}

/// A failed task as a tool result the model and the person can both read.
fn failure_result(failure: &TaskFailure, advice: Option<String>) -> CallToolResult {
    let mut text = format!("task failed ({}): {}", failure.reason, failure.message);
    if let Some(advice) = &advice {
        text.push_str("\n\n");
        text.push_str(advice);
    }
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = serde_json::to_value(ToolFailure {
        reason: failure.reason,
        message: &failure.message,
        advice: advice.as_deref(),
    })
    .ok();
    result
}

/// Why a call was denied and how to allow it: the approval mode, the client's
/// missing prompt, or the workspace policy.
fn denial_advice(host: &McpHost, notes: &[ApprovalNote]) -> String {
    let profile = host.profile_name();
    if host.app.broker.mode() == ApproveMode::None {
        return format!(
            "This Capstan MCP server runs with `--approve none`, which denies every approval \
             (workspace policy profile `{profile}`). To allow such calls, restart it with \
             `capstan mcp --approve ask` (approval through the client's prompt) or `--approve all` \
             (no prompt; the sandbox and deny rules still hold)."
        );
    }
    if let Some(note) = notes.first() {
        match note {
            ApprovalNote::NoElicitation { action, is_command } => {
                let by_policy = if *is_command {
                    ", or let the policy run it without asking (capstan.toml [policy] allow = [\"...\"], \
                     or profile = \"trusted\" for writes)"
                } else {
                    ""
                };
                return format!(
                    "`{action}` needs approval under workspace policy profile `{profile}`, and this MCP \
                     client cannot ask a person (it did not declare the elicitation capability), so it was \
                     denied. To allow it: use a client that supports elicitation, or restart with \
                     `capstan mcp --approve all`{by_policy}."
                );
            }
            ApprovalNote::ElicitationFailed { action, error } => {
                return format!(
                    "`{action}` needs approval under workspace policy profile `{profile}`, and asking the \
                     client failed ({error}), so it was denied. Restart with `capstan mcp --approve all` \
                     or allow the command in capstan.toml [policy]."
                );
            }
            ApprovalNote::Declined { action } => {
                return format!("`{action}` was declined at the client's approval prompt.");
            }
        }
    }
    format!(
        "Denied by workspace policy profile `{profile}`; change it in capstan.toml [policy] \
         (profile, allow, deny) or with the workspace's profile."
    )
}

/// The streamable HTTP endpoint at `/mcp`, ready to mount into any axum app
/// (`capstan serve` mounts it; `capstan mcp --listen` serves it alone). It
/// has no doors of its own: both mount it behind crate::frontends::server::guard (Host,
/// Origin and token), so rmcp's own Host check is off rather than doubled.
pub fn http_router(
    host: Arc<McpHost>,
    shutdown: tokio_util::sync::CancellationToken,
) -> axum::Router {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .disable_allowed_hosts();
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(CapstanMcp::new(host.clone())),
        sessions.clone(),
        config,
    );
    // Only this router's routes (`/mcp`) get the JSON-RPC error layer.
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            sessions,
            super::http::json_rpc_errors,
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_said_twice_is_shown_once() {
        let reasons = vec![
            "`rm` deletes files".to_string(),
            "asks because `rm` deletes files".to_string(),
            "risk: delete".to_string(),
            "the plugin asked to treat this as `delete`".to_string(),
            "`rm` deletes files".to_string(),
        ];
        let kept = distinct_reasons(&reasons, "Capstan asks to run `rm x` (risk: delete)");
        assert_eq!(
            kept,
            [
                "asks because `rm` deletes files",
                "the plugin asked to treat this as `delete`"
            ]
        );
    }
}
