//! The one way a run's context is made, for every entry point (`ask` and the
//! server through [`crate::run::app::App::execute`], `capstan invoke`, the
//! index and search commands, an MCP tool call): the workspace's policy and
//! sandbox settings, the host services on offer, the run's identity and its
//! cancellation. Frontends never assemble a [`RunContext`] by hand, so a new
//! service or setting reaches every entry point at once.

use std::path::PathBuf;
use std::sync::Arc;

use capstan_policy::Policy;
use tokio_util::sync::CancellationToken;

use crate::config::SandboxSettings;
use crate::plugins::context::{Capture, HostServices, RunContext, Sampler};
use crate::plugins::services::approval::ApprovalBroker;
use crate::plugins::services::exec::Exec;
use crate::plugins::services::index::Indexes;
use capstan_protocol::EventSink;

/// Which host services a run offers its plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Commands (under the workspace's policy and sandbox), the index and approvals.
    Everything,
    /// The index only: indexing and search never run commands or ask.
    IndexOnly,
}

/// A run's context, made step by step. Start it with
/// [`crate::run::app::App::run_builder`]; by default it offers every service,
/// has no ids (a run nobody stores) and a fresh cancellation token.
pub struct RunBuilder {
    workspace: Option<PathBuf>,
    policy: Policy,
    sandbox: SandboxSettings,
    broker: Arc<ApprovalBroker>,
    indexes: Arc<Indexes>,
    offer: Offer,
    changes: Option<Capture>,
    run_id: String,
    session_id: Option<String>,
    cancel: CancellationToken,
    sampler: Option<Arc<dyn Sampler>>,
}

impl RunBuilder {
    /// A run in `workspace` (canonical, already through the workspace gate)
    /// under `policy` and `sandbox`, with the host's broker and indexes.
    pub fn new(
        workspace: Option<PathBuf>,
        policy: Policy,
        sandbox: SandboxSettings,
        broker: Arc<ApprovalBroker>,
        indexes: Arc<Indexes>,
    ) -> Self {
        Self {
            workspace,
            policy,
            sandbox,
            broker,
            indexes,
            offer: Offer::Everything,
            changes: None,
            run_id: String::new(),
            session_id: None,
            cancel: CancellationToken::new(),
            sampler: None,
        }
    }

    /// Offer only these services.
    pub fn offer(mut self, offer: Offer) -> Self {
        self.offer = offer;
        self
    }

    /// Capture the changes commands make to the workspace (`None`: they land
    /// directly).
    pub fn changes(mut self, capture: Option<Capture>) -> Self {
        self.changes = capture;
        self
    }

    /// The stored run (and session) this context belongs to: approvals and
    /// policy verdicts are audited against it.
    pub fn ids(mut self, run_id: impl Into<String>, session_id: Option<String>) -> Self {
        self.run_id = run_id.into();
        self.session_id = session_id;
        self
    }

    /// The run's model for external MCP servers' sampling requests.
    pub fn sampler(mut self, sampler: Arc<dyn Sampler>) -> Self {
        self.sampler = Some(sampler);
        self
    }

    /// Cancel the run when `token` fires (a client's cancel, Ctrl-C).
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// The context, sending its events to `events`.
    pub fn build(self, events: Arc<dyn EventSink>) -> RunContext {
        let services = match self.offer {
            Offer::Everything => HostServices {
                exec: Some(Arc::new(
                    Exec::new(self.policy, self.broker.clone())
                        .with_sandbox(self.sandbox)
                        .with_changes(self.changes),
                )),
                index: Some(self.indexes),
                approval: Some(self.broker),
                sampler: self.sampler,
            },
            Offer::IndexOnly => HostServices {
                index: Some(self.indexes),
                ..Default::default()
            },
        };
        RunContext {
            run_id: self.run_id,
            session_id: self.session_id,
            workspace: self.workspace,
            events,
            cancel: self.cancel,
            services,
        }
    }
}
