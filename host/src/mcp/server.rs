//! Capstan's capabilities as MCP tools. Every operation a plugin describes
//! becomes one tool (`<kind>.<operation>`), its input schema taken from
//! `describe`. A call is a task on the plan-task path ([`run_task`]): registry,
//! workspace gate, risk-narrowed preopens, exec policy and the approval gate.
//! Approvals go to the client as elicitation requests when it declared that
//! capability; otherwise they are denied with a message saying how to allow
//! them. Activity and progress become progress notifications; a client's
//! `notifications/cancelled` cancels the task (and kills its processes).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, EnumSchema, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{ElicitationMode, Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::app::{App, Frontend};
use crate::dispatch::run_task;
use crate::manifest::{HostService, WorkspaceAccess};
use crate::protocol::{Envelope, Event, FailureReason, TaskFailure, TaskRequest};
use crate::registry::Registry;
use crate::runtime::Risk;
use crate::services::approval::ApproveMode;
use crate::services::{HostServices, RunContext};

/// One capability operation offered as a tool.
struct ToolEntry {
    tool: Tool,
    kind: String,
    operation: String,
    /// `None` when the plugin's schema is not valid JSON Schema: the plugin
    /// still checks its own input.
    validator: Option<jsonschema::Validator>,
    needs_workspace: bool,
}

/// What every MCP session of one `capstan mcp` (or `capstan serve`) shares:
/// the app, the workspace and the tools of its registry.
pub struct McpHost {
    app: Arc<App>,
    workspace: Option<PathBuf>,
    registry: Registry,
    tools: BTreeMap<String, ToolEntry>,
}

/// A tool name from a kind and an operation, in the MCP tool-name charset
/// (ASCII letters, digits, `_`, `-`, `.`; at most 128 characters).
pub fn tool_name(kind: &str, operation: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut name = format!("{}.{}", clean(kind), clean(operation));
    name.truncate(128);
    name
}

impl McpHost {
    /// The tools of the workspace's plugins. External MCP servers are not
    /// re-served: a `capstan mcp` listed as a server of itself would spawn
    /// itself without end, and their tools are reachable at their source.
    pub async fn new(app: Arc<App>, workspace: Option<PathBuf>) -> Arc<Self> {
        let registry = app.plugin_registry(workspace.as_deref()).await;
        // Tools are listed from every plugin's operations: load them all now.
        registry.load_all(&app.runtime, None).await;
        for p in registry.problems() {
            crate::term::warn(&p.message);
        }
        let mut tools = BTreeMap::new();
        for plugin in &registry.plugins() {
            let needs_workspace = plugin.spec.entry.permissions.workspace != WorkspaceAccess::None
                || plugin
                    .spec
                    .entry
                    .permissions
                    .host
                    .contains(&HostService::Exec);
            for kind in &plugin.spec.entry.kinds {
                for op in &plugin.operations {
                    let name = tool_name(kind, &op.name);
                    let schema = object_schema(&op.input_schema);
                    let validator = match jsonschema::validator_for(&Value::Object(schema.clone()))
                    {
                        Ok(v) => Some(v),
                        Err(e) => {
                            crate::term::warn(format_args!(
                                "`{name}`: the input schema of plugin `{}` is not valid JSON Schema ({e}); \
                                 arguments go to the plugin unchecked",
                                plugin.name()
                            ));
                            None
                        }
                    };
                    let annotations = ToolAnnotations::new()
                        .read_only(op.risk == Risk::ReadOnly && !needs_exec(plugin))
                        .destructive(matches!(op.risk, Risk::Delete | Risk::Unknown));
                    let description = format!(
                        "{} (Capstan capability `{kind}`, operation `{}`; risk `{}`{})",
                        op.description.trim_end_matches('.'),
                        op.name,
                        risk_name(op.risk),
                        if needs_exec(plugin) {
                            "; commands are classified and gated one by one"
                        } else {
                            ""
                        }
                    );
                    let tool = Tool::new(name.clone(), description, Arc::new(schema))
                        .with_title(format!("{kind} {}", op.name))
                        .with_annotations(annotations);
                    tools.insert(
                        name,
                        ToolEntry {
                            tool,
                            kind: kind.clone(),
                            operation: op.name.clone(),
                            validator,
                            needs_workspace,
                        },
                    );
                }
            }
        }
        Arc::new(Self {
            app,
            workspace,
            registry,
            tools,
        })
    }

    /// The tool names served, in order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    fn services(&self) -> HostServices {
        let policy = self
            .workspace
            .as_deref()
            .map(|w| self.app.policy_for(w))
            .unwrap_or_else(|| self.app.config.policy.clone());
        HostServices {
            exec: Some(Arc::new(
                crate::services::exec::Exec::new(policy, self.app.broker.clone())
                    .with_sandbox(self.app.sandbox_for(self.workspace.as_deref())),
            )),
            index: Some(self.app.indexes.clone()),
            approval: Some(self.app.broker.clone()),
            model: None,
        }
    }

    fn profile_name(&self) -> String {
        let policy = self
            .workspace
            .as_deref()
            .map(|w| self.app.policy_for(w))
            .unwrap_or_else(|| self.app.config.policy.clone());
        serde_json::to_value(policy.profile)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    }
}

fn needs_exec(plugin: &crate::runtime::LoadedPlugin) -> bool {
    plugin
        .spec
        .entry
        .permissions
        .host
        .contains(&HostService::Exec)
}

fn risk_name(risk: Risk) -> String {
    serde_json::to_value(risk)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// MCP requires an object schema at the top; a plugin that declares none (or
/// another type) gets one that takes any object.
fn object_schema(schema: &Value) -> JsonObject {
    match schema {
        Value::Object(map) if map.get("type").and_then(Value::as_str) == Some("object") => {
            map.clone()
        }
        _ => json!({"type": "object"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    }
}

/// One MCP session's handler (stdio has one; streamable HTTP one per session).
/// Its calls are runs of one Capstan session, so an approve-for-session
/// grant holds for this client only, and every call is in the store (runs,
/// events, approvals) like a plan task.
#[derive(Clone)]
pub struct CapstanMcp {
    host: Arc<McpHost>,
    session: Arc<OnceLock<String>>,
}

impl CapstanMcp {
    pub fn new(host: Arc<McpHost>) -> Self {
        Self {
            host,
            session: Arc::default(),
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
        let message = match &event {
            Event::ApprovalRequested {
                approval_id,
                action,
                command,
                cwd,
                risk,
                reasons,
                ..
            } => {
                self.approval(
                    approval_id.clone(),
                    action.clone(),
                    command.clone(),
                    cwd.clone(),
                    risk.clone(),
                    reasons.clone(),
                );
                Some(format!("waiting for approval: {command} ({risk})"))
            }
            Event::Progress {
                done, total, unit, ..
            } => Some(format!("{done}/{total} {unit}")),
            Event::Activity { message, .. } => Some(message.clone()),
            Event::TerminalStep {
                command,
                exit_code,
                timed_out,
                ..
            } => Some(match (exit_code, timed_out) {
                (_, true) => format!("$ {command} (timed out)"),
                (Some(code), _) => format!("$ {command} (exit {code})"),
                (None, _) => format!("$ {command} (killed)"),
            }),
            _ => None,
        };
        if let (Some(token), Some(message)) = (&self.progress, message) {
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
    fn approval(
        &self,
        id: String,
        action: String,
        command: String,
        cwd: String,
        risk: String,
        reasons: Vec<String>,
    ) {
        let broker = self.host.app.broker.clone();
        if broker.mode() != ApproveMode::Ask {
            return; // the flag decides; the broker already knows
        }
        let notes = self.notes.clone();
        let note = |n: ApprovalNote| notes.lock().unwrap().push(n);
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
                crate::services::approval::Via::McpClient,
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
            for reason in &reasons {
                message.push_str(&format!("\n- {reason}"));
            }
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: approval_schema(),
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
                        _ => {
                            notes
                                .lock()
                                .unwrap()
                                .push(ApprovalNote::Declined { action: label });
                            capstan_store::Decision::Denied
                        }
                    }
                }
                Err(e) => {
                    notes.lock().unwrap().push(ApprovalNote::ElicitationFailed {
                        action: label,
                        error: e.to_string(),
                    });
                    capstan_store::Decision::Denied
                }
            };
            if let Err(e) = broker.decide(&id, decision, crate::services::approval::Via::McpClient)
            {
                tracing::debug!("approval {id} was settled before the client answered: {e}");
            }
        });
    }
}

fn approval_schema() -> ElicitationSchema {
    let choices = EnumSchema::builder(vec![
        "approve".into(),
        "approve_for_session".into(),
        "deny".into(),
    ])
    .build();
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
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("capstan", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Capstan's sandboxed capabilities for {workspace}. Each tool is `<capability>.<operation>`; \
                 commands and writes pass Capstan's policy and approval gate."
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            self.host.tools.values().map(|t| t.tool.clone()).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.host.tools.get(name).map(|t| t.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let host = &self.host;
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
        };
        let forwarding = tokio::spawn(forwarder.run(rx, done_rx));

        let frontend: Frontend = Arc::new(move |e: &Envelope| {
            let _ = tx.send(e.event.clone());
        });
        let mut run = RunContext::new(
            host.workspace.clone(),
            host.app.run_events(&stored.id, frontend),
            host.services(),
        );
        run.run_id = stored.id.clone();
        run.session_id = Some(session_id);
        // The client's `notifications/cancelled` fires this token.
        run.cancel = context.ct.clone();
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
                .store
                .finish_run(&stored.id, status, reason.map(FailureReason::as_str), None)
        {
            crate::term::warn(format_args!(
                "MCP call {} not recorded as finished: {e}",
                stored.id
            ));
        }
        host.app.flush_events();

        Ok(match outcome {
            Ok(success) => {
                let mut result = CallToolResult::success(vec![
                    ContentBlock::text(success.summary.clone()),
                    ContentBlock::text(
                        serde_json::to_string_pretty(&success.data).unwrap_or_default(),
                    ),
                ]);
                result.structured_content =
                    Some(json!({"summary": success.summary, "data": success.data}));
                result
            }
            Err(failure) => {
                let advice = (failure.reason == FailureReason::Denied)
                    .then(|| denial_advice(host, &notes.lock().unwrap()));
                failure_result(&failure, advice)
            }
        }
        .into())
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
    result.structured_content = Some(json!({
        "reason": failure.reason,
        "message": failure.message,
        "advice": advice,
    }));
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
/// has no doors of its own: both mount it behind crate::server::guard (Host,
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
    let service = StreamableHttpService::new(
        move || Ok(CapstanMcp::new(host.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new().nest_service("/mcp", service)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_keep_to_the_mcp_charset() {
        assert_eq!(tool_name("terminal_exec", "run"), "terminal_exec.run");
        assert_eq!(tool_name("my kind/x", "do:it"), "my_kind_x.do_it");
        assert_eq!(tool_name(&"k".repeat(200), "op").len(), 128);
    }
}
