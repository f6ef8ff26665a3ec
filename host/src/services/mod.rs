//! Host services: what a plugin may ask the host to do through WIT imports
//! (`exec`, `index`, `approval`, `model`; `events` and `cancel` are built into
//! the runtime).
//!
//! Grants are checked in two places, each once: the manifest grant when a
//! component is loaded (`runtime::imports`), the workspace policy when a service
//! is called (inside each service). A service that this host does not offer
//! answers `denied` with a sentence saying so.

pub mod approval;
pub mod changes;
pub mod exec;
pub mod index;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::protocol::EventSink;
use crate::runtime::bindings as wit;

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

#[async_trait]
pub trait ExecService: Send + Sync {
    async fn run(
        &self,
        scope: &TaskScope,
        req: wit::exec::ExecRequest,
    ) -> Result<wit::exec::ExecOutput, wit::exec::ExecError>;

    /// The workspace's change capture, when on (plugin file writes are
    /// snapshotted through it too: `services::changes`).
    fn changes(&self) -> Option<Arc<changes::Capture>> {
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
}

#[async_trait]
pub trait Approver: Send + Sync {
    async fn request(
        &self,
        scope: &TaskScope,
        req: wit::approval::ApprovalRequest,
    ) -> wit::approval::Decision;
}

#[async_trait]
pub trait ModelService: Send + Sync {
    async fn complete(
        &self,
        scope: &TaskScope,
        req: wit::model::CompletionRequest,
    ) -> Result<wit::model::Completion, wit::model::ModelError>;
}

/// The services a host offers. `None` means "not offered here".
#[derive(Clone, Default)]
pub struct HostServices {
    pub exec: Option<Arc<dyn ExecService>>,
    pub index: Option<Arc<dyn IndexService>>,
    pub approval: Option<Arc<dyn Approver>>,
    pub model: Option<Arc<dyn ModelService>>,
}

/// The sentence a plugin gets for a service this host does not offer.
pub fn not_offered(service: &str) -> String {
    format!("this Capstan host offers no `{service}` service in this context")
}
