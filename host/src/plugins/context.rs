//! What a task carries into the plugin layer: its run (id, session,
//! workspace, event sink, cancellation, the host services on offer) and, for
//! a host service call, which task and plugin is asking.
//!
//! Built once per run by [`crate::run::builder`]; everything below the run
//! layer only reads it.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use async_trait::async_trait;

use crate::plugins::bindings as wit;
use capstan_protocol::EventSink;

/// What a service knows about the task calling it.
#[derive(Clone)]
pub struct TaskScope {
    pub task_id: String,
    pub plugin: String,
    pub run: RunContext,
    /// Set by a host service when the task ran into a resource limit outside
    /// the plugin (a sandboxed command's memory, /tmp or write quota): the task
    /// then fails with `resource-limit` whatever the plugin answers.
    pub resource_limit: Arc<std::sync::OnceLock<String>>,
}

/// Everything a task inherits from its run.
#[derive(Clone)]
pub struct RunContext {
    pub run_id: String,
    pub session_id: Option<String>,
    /// Canonical workspace root, if the run is bound to one.
    pub workspace: Option<PathBuf>,
    pub events: Arc<dyn EventSink>,
    pub cancel: CancellationToken,
    pub services: HostServices,
}

impl RunContext {
    pub fn new(
        workspace: Option<PathBuf>,
        events: Arc<dyn EventSink>,
        services: HostServices,
    ) -> Self {
        Self {
            run_id: String::new(),
            session_id: None,
            workspace,
            events,
            cancel: CancellationToken::new(),
            services,
        }
    }
}

impl RunContext {
    /// What an approve-for-session grant is scoped to: the session, or the run
    /// when there is no session.
    pub fn session_key(&self) -> String {
        self.session_id
            .clone()
            .unwrap_or_else(|| format!("run:{}", self.run_id))
    }
}

/// One workspace's change capture: the store that keeps previous versions
/// and how changes land there (settled by `services::changes`).
#[derive(Debug, Clone)]
pub struct Capture {
    pub store: capstan_changes::Store,
    pub apply: crate::config::changes::ApplyMode,
    /// Workspace-relative paths always reviewed (a trailing `/` covers a tree).
    pub protected: Vec<String>,
}

#[async_trait]
pub trait ExecService: Send + Sync {
    async fn run(
        &self,
        scope: &TaskScope,
        req: wit::exec::ExecRequest,
    ) -> Result<wit::exec::ExecOutput, wit::exec::ExecError>;

    /// The workspace's change capture, when on (plugin file writes are
    /// snapshotted through it too: `services::changes`).
    fn changes(&self) -> Option<Arc<Capture>> {
        None
    }
}

#[async_trait]
pub trait IndexService: Send + Sync {
    async fn known_files(&self, scope: &TaskScope) -> Result<Vec<wit::index::FileMeta>, String>;
    async fn upsert_files(
        &self,
        scope: &TaskScope,
        files: Vec<wit::index::FileUpdate>,
    ) -> Result<(), String>;
    async fn remove_file(&self, scope: &TaskScope, path: String) -> Result<(), String>;
    async fn commit(&self, scope: &TaskScope) -> Result<wit::index::IndexStats, String>;
    async fn search(
        &self,
        scope: &TaskScope,
        query: String,
        limit: u32,
    ) -> Result<Vec<wit::index::Hit>, String>;
    /// Whether a refresh of `workspace`'s index would find nothing to do, so a
    /// search may skip it. `false` whenever that is not known for sure.
    async fn is_current(&self, _workspace: &std::path::Path) -> bool {
        false
    }
}

#[async_trait]
pub trait Approver: Send + Sync {
    async fn request(
        &self,
        scope: &TaskScope,
        req: wit::approval::ApprovalRequest,
    ) -> wit::approval::Decision;
}

/// The services a host offers. `None` means "not offered here".
#[derive(Clone, Default)]
pub struct HostServices {
    pub exec: Option<Arc<dyn ExecService>>,
    pub index: Option<Arc<dyn IndexService>>,
    pub approval: Option<Arc<dyn Approver>>,
    /// The run's model, for an external MCP server's `sampling/createMessage`
    /// (asked only after the person approves, under the run's budget).
    pub sampler: Option<Arc<dyn Sampler>>,
}

/// A prompt an external MCP server asks Capstan's model to answer.
#[derive(Debug, Clone, Default)]
pub struct SampleRequest {
    pub system: Option<String>,
    /// `(role, text)`, oldest first; role is `user` or `assistant`.
    pub messages: Vec<(String, String)>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
}

impl SampleRequest {
    /// The prompt's size in characters (system prompt and every message).
    pub fn chars(&self) -> usize {
        self.system.as_deref().map_or(0, |s| s.chars().count())
            + self
                .messages
                .iter()
                .map(|(_, t)| t.chars().count())
                .sum::<usize>()
    }
}

/// What the model answered.
#[derive(Debug, Clone)]
pub struct SampleAnswer {
    pub text: String,
    /// The model's name.
    pub model: String,
    /// `endTurn` or `maxTokens`.
    pub stop_reason: String,
}

/// The run's model answering prompts for external MCP servers, metered
/// against the run's budget.
#[async_trait]
pub trait Sampler: Send + Sync {
    /// The model's name (shown in the approval).
    fn model(&self) -> String;
    /// Whether a request of this size (its prompt, estimated in tokens, and
    /// the most it may generate) fits what is left of the run's budget; if
    /// not, why.
    fn fits(&self, prompt_tokens: u64, max_tokens: u64) -> Result<(), String>;
    /// Answer it (usage is added to the run's and reported as a `usage` event).
    async fn sample(&self, scope: &TaskScope, req: SampleRequest) -> Result<SampleAnswer, String>;
    /// What sampling has cost this run so far.
    fn spent(&self) -> capstan_protocol::Usage;
    /// What one of the run's own model calls cost, so [`Sampler::fits`]
    /// weighs a request against everything the run spent.
    fn note_run_usage(&self, usage: &capstan_protocol::Usage);
}
