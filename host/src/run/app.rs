//! The assembled host for one command or server: directories, config, store,
//! plugin runtime and registry, services, and the model; and `ask`, which runs
//! one message in a session (history in, turns and summary out, every event
//! persisted for replay).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use capstan_store::{EventRecord, EventWriter, Store};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::config::store::ResumePolicy;
use crate::dirs::Dirs;
use crate::plugins::context::Capture;
use crate::plugins::registry::{ManifestSources, Registry};
use crate::plugins::runtime::{Capacity, Runtime};
use crate::plugins::services::approval::{ApprovalBroker, ApproveMode};
use crate::plugins::services::index::Indexes;
use crate::run::builder::RunBuilder;
use crate::run::model::{HostModel, Turn};
use crate::run::orchestrator::{
    Checkpoint, CheckpointSink, Host, ResumePoint, RunConfig, RunOutcome, RunRequest, RunStatus,
};
use crate::workspace_gate::WorkspaceGate;
use capstan_protocol::{Envelope, Event, EventSink};

pub struct App {
    pub dirs: Dirs,
    /// Which folders may be workspaces (crate::workspace_gate).
    pub gate: WorkspaceGate,
    pub config: Config,
    pub store: Arc<Store>,
    pub runtime: Arc<Runtime>,
    pub indexes: Arc<Indexes>,
    pub broker: Arc<ApprovalBroker>,
    pub model: Arc<dyn HostModel>,
    /// External MCP servers, started when first called and kept warm.
    pub mcp: Arc<crate::plugins::mcp_client::McpPool>,
    events: Arc<EventWriter>,
}

/// Who receives a run's envelopes as they happen (a terminal, an SSE stream...).
/// Shared, so a frontend that keeps them (a server's run history) need not
/// copy them.
pub type Frontend = Arc<dyn Fn(&Arc<Envelope>) + Send + Sync>;

/// One message to run.
#[derive(Debug, Clone, Default)]
pub struct AskRequest {
    pub message: String,
    pub session_id: Option<String>,
    pub workspace: Option<PathBuf>,
    /// The `[[server.user]]` the run is for: its quota is checked when the
    /// run starts. `None`: the person at this machine, or the server's own
    /// token.
    pub quota: Option<capstan_store::Quota>,
}

#[derive(Debug, Clone)]
pub struct AskOutcome {
    pub run_id: String,
    pub session_id: String,
    pub outcome: RunOutcome,
}

/// A run that has a session, a run id and the user's turn, and is ready to
/// execute (see [`App::prepare`]).
pub struct PreparedRun {
    pub run_id: String,
    pub session_id: String,
    /// Canonical root of the workspace the run is bound to, if any.
    pub workspace: Option<PathBuf>,
    /// The policy of its workspace, from the row `prepare` read.
    policy: Option<capstan_policy::Policy>,
    message: String,
    summary: String,
    registry: Arc<Registry>,
    history: Vec<Turn>,
}

/// Stamps each event with the run, a sequence number and a time; persists it
/// and hands it to the frontend.
struct RunEvents {
    run_id: String,
    seq: AtomicU64,
    writer: Arc<EventWriter>,
    frontend: Frontend,
}

impl EventSink for RunEvents {
    fn emit(&self, event: Event) {
        let envelope = Envelope {
            seq: self.seq.fetch_add(1, Ordering::SeqCst),
            run_id: self.run_id.clone(),
            ts: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            event,
        };
        if let Ok(json) = serde_json::to_string(&envelope) {
            let kind = envelope.event.name().to_string();
            let record = EventRecord {
                run_id: self.run_id.clone(),
                seq: envelope.seq,
                ts: envelope.ts.clone(),
                kind,
                json,
            };
            if let Err(e) = self.writer.push(record) {
                crate::term::warn(format_args!(
                    "an event of run {} was not saved: {e}",
                    self.run_id
                ));
            }
        }
        (self.frontend)(&Arc::new(envelope));
    }
}

/// The most parallel tasks (`[run] max_parallel`) a [`Capacity::OneRun`]
/// pool is sized for.
const ONE_RUN_PARALLEL_TASKS: usize = 8;

impl App {
    /// Open everything. Plugins are per workspace: see [`App::registry`].
    pub async fn open(dirs: Dirs, approve: ApproveMode) -> Result<Self> {
        Self::open_with_model(dirs, approve, None).await
    }

    /// As [`App::open`], with the config's `[model]` replaced (command-line flags).
    pub async fn open_with_model(
        dirs: Dirs,
        approve: ApproveMode,
        model: Option<capstan_models::ProviderConfig>,
    ) -> Result<Self> {
        Self::open_with(dirs, approve, model, None, Capacity::OneRun).await
    }

    /// As [`App::open_with_model`], with the config's `[store] url` replaced
    /// (`capstan serve --store`) and room for `capacity` runs at once.
    pub async fn open_with(
        dirs: Dirs,
        approve: ApproveMode,
        model: Option<capstan_models::ProviderConfig>,
        store_url: Option<String>,
        capacity: Capacity,
    ) -> Result<Self> {
        Dirs::ensure(&dirs.data)?;
        // Wherever Capstan's home is (under /opt or /etc the view binds it
        // whole), no command this process runs sees its state.
        capstan_sandbox::hide_from_every_view(vec![
            dirs.config.clone(),
            dirs.data.clone(),
            dirs.cache.clone(),
        ]);
        let mut config = Config::load(&dirs.user_config_file())?;
        config.sandbox.check(
            &[dirs.config.clone(), dirs.data.clone(), dirs.cache.clone()],
            home_dir().as_deref(),
        )?;
        config.network.check()?;
        if model.is_some() {
            config.model = model;
        }
        if store_url.is_some() {
            config.store.url = store_url;
        }
        config.store.check()?;
        let capacity = if config.run.max_parallel > ONE_RUN_PARALLEL_TASKS {
            Capacity::Server
        } else {
            capacity
        };
        // The plugin engine (its code generator and its pool) is built on a
        // thread of its own while this one opens the store: neither needs the
        // other, and each is about a millisecond of every command's start.
        let (cache, protected) = (
            dirs.component_cache(),
            vec![dirs.config.clone(), dirs.data.clone(), dirs.cache.clone()],
        );
        let building_runtime = std::thread::Builder::new()
            .name("capstan-engine".into())
            .spawn(move || Runtime::new(cache, protected, capacity))
            .context("starting a thread to build the plugin engine")?;
        let store = Arc::new(crate::run::lease::open_store(&dirs, &config.store)?);
        // Housekeeping, not news: the command at hand is usually unrelated
        // (the runs list shows them as `interrupted`).
        // Shared with replicas, whose streams wait for a terminal event: on
        // PostgreSQL each run gets one, in the same transaction.
        let ending: capstan_store::Ending<'_> =
            &|run, seq| crate::run::lease::ending(run, seq, crate::run::lease::Ended::ProcessGone);
        let shared = store.backend() == capstan_store::Backend::Postgres;
        if let Ok(ids) = store.mark_interrupted_runs(shared.then_some(ending))
            && !ids.is_empty()
        {
            tracing::info!(
                "marked {} run(s) from an earlier process as interrupted",
                ids.len()
            );
        }
        let runtime = Arc::new(
            building_runtime
                .join()
                .map_err(|_| anyhow::anyhow!("building the plugin engine panicked"))??,
        );
        let indexes = Arc::new(Indexes::new(
            dirs.data.join("indexes"),
            config.index.options(),
        ));
        let broker = Arc::new(ApprovalBroker::new(
            approve,
            Duration::from_secs(config.approval.timeout_secs),
            Some(store.clone()),
        ));
        let model = crate::run::model::build(&config)?;
        let events = Arc::new(EventWriter::new(store.clone()));
        let mcp = Arc::new(crate::plugins::mcp_client::McpPool::new(
            dirs.cache.join("mcp-tools"),
            config.sandbox.mcp_server_limits(),
        ));
        Ok(Self {
            gate: WorkspaceGate::for_dirs(&dirs),
            dirs,
            config,
            store,
            runtime,
            indexes,
            broker,
            model,
            mcp,
            events,
        })
    }

    /// The registry for a workspace: bundled plugins, the user's capstan.toml
    /// (a workspace's capstan.toml may add no plugin, see the registry), and
    /// the tools of the `[[mcp_server]]`s the
    /// user's capstan.toml configures (from their cached tool lists; a server
    /// starts on its first call and stays warm in [`App::mcp`]). A workspace's file cannot add MCP servers: they are
    /// programs run outside the sandbox, and opening a checked-out repository
    /// must not start one.
    pub async fn registry(&self, workspace: Option<&Path>) -> Registry {
        let mut registry = self.plugin_registry(workspace).await;
        let (tools, mut problems) = self
            .mcp
            .tools(&[self.dirs.user_config_file()], workspace)
            .await;
        if let Some(ws) = workspace {
            let file = ws.join("capstan.toml");
            let (ignored, _) = crate::plugins::mcp_client::entries(std::slice::from_ref(&file));
            if !ignored.is_empty() {
                let names: Vec<&str> = ignored.iter().map(|e| e.name.as_str()).collect();
                problems.push(crate::plugins::registry::Problem {
                    plugin: None,
                    message: format!(
                        "{}: [[mcp_server]] {} ignored: a workspace cannot start programs outside the \
                         sandbox; move the entry to your own capstan.toml ({}) if you trust it",
                        file.display(),
                        names.join(", "),
                        self.dirs.user_config_file().display()
                    ),
                });
            }
        }
        registry.add_external(
            tools
                .into_iter()
                .map(|t| t as Arc<dyn crate::plugins::registry::ExternalTool>)
                .collect(),
            problems,
        );
        registry
    }

    /// The registry with plugins only, no external MCP servers. Plugins load
    /// when first used (see [`Registry`]).
    pub async fn plugin_registry(&self, workspace: Option<&Path>) -> Registry {
        Registry::lazy(&ManifestSources::new(
            self.dirs.user_config_file(),
            workspace,
        ))
    }

    /// The sandbox settings (`[sandbox]`) of commands in a workspace.
    pub fn sandbox_for(&self, workspace: Option<&Path>) -> crate::config::SandboxSettings {
        let mut settings = self
            .config
            .sandbox
            .settings_for(workspace, home_dir().as_deref());
        settings.network = self.config.network.command_network(
            workspace,
            home_dir().as_deref(),
            &self.dirs.data,
            &self.dirs.user_config_file(),
        );
        settings
    }

    /// Stops a run in a workspace whose capstan.toml is broken (before anything,
    /// indexing included, reads the folder), naming the file, the line and the fix.
    pub fn check_workspace(&self, workspace: &Path) -> Result<()> {
        crate::config::check::check_workspace(workspace, &self.dirs.user_config_file())
            .context("this workspace's capstan.toml has problems; runs here stop until it is fixed")
    }

    /// The start of every run's context: this workspace's policy and
    /// sandbox, this host's broker and indexes (see [`RunBuilder`]).
    pub fn run_builder(&self, workspace: Option<PathBuf>) -> RunBuilder {
        let policy = workspace.as_deref().map(|w| self.policy_for(w));
        self.run_builder_with(workspace, policy)
    }

    /// [`App::run_builder`] with the workspace's policy already known
    /// (`None`: the configuration's).
    fn run_builder_with(
        &self,
        workspace: Option<PathBuf>,
        policy: Option<capstan_policy::Policy>,
    ) -> RunBuilder {
        let policy = policy.unwrap_or_else(|| self.config.policy.clone());
        let sandbox = self.sandbox_for(workspace.as_deref());
        let changes = workspace
            .as_deref()
            .and_then(|w| Capture::for_workspace(&self.dirs.data, &self.config.changes, w));
        RunBuilder::new(
            workspace,
            policy,
            sandbox,
            self.broker.clone(),
            self.indexes.clone(),
        )
        .changes(changes)
        .sampler(Arc::new(crate::run::model::sampling::RunSampler::new(
            self.model.clone(),
            self.config.run.budget_usd,
            self.config.run.budget_tokens,
        )))
    }

    /// The policy for a workspace: the config's `[policy]`, with the profile
    /// chosen for this workspace (if any) on top.
    pub fn policy_for(&self, workspace: &Path) -> capstan_policy::Policy {
        match self.store.get_workspace_by_root(workspace) {
            Ok(Some(ws)) => self.policy_of(&ws),
            _ => self.config.policy.clone(),
        }
    }

    /// [`App::policy_for`] a workspace whose row the caller has read.
    fn policy_of(&self, ws: &capstan_store::Workspace) -> capstan_policy::Policy {
        let mut policy = self.config.policy.clone();
        policy.profile = self.config.profile_for(ws);
        if let Some(extra) = ws
            .policy_json
            .as_deref()
            .and_then(|j| serde_json::from_str::<capstan_policy::Policy>(j).ok())
        {
            policy.allow.extend(extra.allow);
            policy.deny.extend(extra.deny);
            policy.network |= extra.network;
        }
        policy
    }

    /// The event sink of a run that does not go through [`App::ask`] (an MCP
    /// tool call): each event stamped, persisted for replay and handed to
    /// `frontend`. End the run with [`App::finish_run`].
    pub fn run_events(&self, run_id: &str, frontend: Frontend) -> Arc<dyn EventSink> {
        Arc::new(RunEvents {
            run_id: run_id.to_string(),
            seq: AtomicU64::new(0),
            writer: self.events.clone(),
            frontend,
        })
    }

    /// Ends a run: stores every event pushed for it so far, then its
    /// terminal event together with its terminal status in one transaction
    /// (see [`EventWriter::finish`]), so a replica following the run never
    /// sees the one without the other.
    pub fn finish_run(
        &self,
        run_id: &str,
        status: capstan_store::RunStatus,
        reason: Option<&str>,
        usage: Option<capstan_protocol::Usage>,
    ) -> capstan_store::Result<()> {
        self.events.finish(run_id, status, reason, usage)
    }

    /// Run one message in a session, start to terminal event.
    pub async fn ask(
        &self,
        req: AskRequest,
        frontend: Frontend,
        cancel: CancellationToken,
    ) -> Result<AskOutcome> {
        let prepared = self.prepare(&req).await?;
        self.execute(prepared, frontend, cancel).await
    }

    /// The first half of [`App::ask`]: resolve the session and its workspace,
    /// load the registry and history, start the run and commit the user's
    /// turn. A server learns the run id here, before any event flows, so it
    /// can register the run (and its cancel token) first.
    pub async fn prepare(&self, req: &AskRequest) -> Result<PreparedRun> {
        // The gate again, whoever resolved the path (a frontend's check and
        // this one see the same rules), before anything is written.
        let asked = req
            .workspace
            .as_deref()
            .map(|root| self.gate.check(root))
            .transpose()?;
        // The session, and the workspace it remembers. A new session is
        // stored with its workspace, run and turn in one commit (below); an
        // existing one is updated only when the workspace changed: each is
        // one durable write fewer per run.
        let existing = match &req.session_id {
            Some(id) => Some(
                self.store
                    .get_session(id)?
                    .with_context(|| format!("no session `{id}`; see `capstan chat` /sessions"))?,
            ),
            None => None,
        };
        let asked_workspace = match &asked {
            // Registered on the way with no profile of its own (`[policy]
            // profile` applies); idempotent when two runs register it at once.
            Some(root) => Some(self.store.ensure_workspace(root)?),
            None => None,
        };
        let asked_id = asked_workspace.as_ref().map(|ws| ws.id.clone());
        if let Some(session) = &existing
            && asked_id.is_some()
            && session.workspace_id != asked_id
        {
            self.store
                .set_session_workspace(&session.id, asked_id.as_deref())?;
        }
        // A session's remembered folder passes the gate too.
        let remembered = existing.as_ref().and_then(|s| s.workspace_id.as_deref());
        let row = match asked_workspace {
            Some(ws) => Some(ws),
            None => match remembered {
                Some(id) => match self.store.get_workspace_by_id(id)? {
                    Some(mut w) => {
                        w.root_path = self.gate.check(&w.root_path)?;
                        Some(w)
                    }
                    None => None,
                },
                None => None,
            },
        };
        let workspace = row.as_ref().map(|w| w.root_path.clone());
        let policy = row.as_ref().map(|w| self.policy_of(w));

        if let Some(ws) = &workspace {
            self.check_workspace(ws)?;
        }
        let registry = Arc::new(self.registry(workspace.as_deref()).await);
        for p in registry.problems() {
            crate::term::warn(&p.message);
        }
        // One message at a time per session, whichever process or replica
        // started the other. The user's turn is committed with the run (and a
        // new session with both), before anything runs: a crash loses no
        // turn, and a refused run leaves no empty session.
        let (run, session_id, summary, history) = match existing {
            Some(session) => {
                let history: Vec<Turn> = self
                    .store
                    .recent_turns(&session.id, self.config.run.history_turns)?
                    .into_iter()
                    .map(|t| Turn {
                        role: t.role.as_str().to_string(),
                        content: t.content,
                    })
                    .collect();
                let (run, _) = self.store.start_run_with_turn(
                    &session.id,
                    &self.model.id(),
                    req.quota.as_ref(),
                    &req.message,
                )?;
                (run, session.id, session.summary, history)
            }
            None => {
                let (session, run, _) = self.store.start_run_with_turn_in_new_session(
                    &session_title(&req.message),
                    asked_id.as_deref(),
                    &self.model.id(),
                    req.quota.as_ref(),
                    &req.message,
                )?;
                (run, session.id, session.summary, Vec::new())
            }
        };
        Ok(PreparedRun {
            run_id: run.id,
            session_id,
            policy,
            message: req.message.clone(),
            summary,
            workspace,
            registry,
            history,
        })
    }

    /// The second half of [`App::ask`]: run a prepared run to its terminal
    /// event, then record the answer, the summary and the run's end.
    pub async fn execute(
        &self,
        prepared: PreparedRun,
        frontend: Frontend,
        cancel: CancellationToken,
    ) -> Result<AskOutcome> {
        let PreparedRun {
            run_id,
            session_id,
            message,
            summary,
            workspace,
            policy,
            registry,
            history,
        } = prepared;
        let (host, ctx) = self.run_parts(
            &run_id,
            &session_id,
            workspace,
            policy,
            registry,
            0,
            frontend,
            cancel,
        )?;
        let request = RunRequest {
            message: message.clone(),
            session_id: Some(session_id.clone()),
            history,
            summary: summary.clone(),
        };
        let outcome = host.run(request, &ctx).await;
        self.conclude(run_id, session_id, &message, &summary, outcome)
    }

    /// Whether a run another replica was running when it died can go on here
    /// (`[store] resume`): its checkpoint and stored events say it is safe
    /// (see [`ResumePoint::find`]) and its workspace passes this host's gate.
    /// `Err` says why not; the run is then left to be interrupted.
    pub fn resumable(&self, run_id: &str) -> Result<ResumableRun, String> {
        let run = self
            .store
            .get_run(run_id)
            .map_err(|e| e.to_string())?
            .ok_or("it no longer exists")?;
        let checkpoint = self
            .store
            .run_checkpoint(run_id)
            .map_err(|e| e.to_string())?
            .ok_or("it stopped before its plan was made (no checkpoint)")?;
        let events: Vec<Envelope> = self
            .store
            .events_since(run_id, None)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|e| serde_json::from_str(&e.json))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("a stored event cannot be read ({e})"))?;
        let point = ResumePoint::find(&checkpoint, &events)?;
        let workspace = match point.checkpoint().workspace() {
            Some(root) => {
                let root = self
                    .gate
                    .check(Path::new(root))
                    .map_err(|e| format!("its workspace cannot be used here: {e}"))?;
                self.check_workspace(&root).map_err(|e| format!("{e:#}"))?;
                Some(root)
            }
            None => None,
        };
        Ok(ResumableRun {
            run_id: run_id.to_string(),
            session_id: run.session_id,
            workspace,
            point,
        })
    }

    /// Continues a run [`App::resumable`] accepted, whose lease this process
    /// now holds, to its terminal event, then records the answer as
    /// [`App::execute`] does.
    pub async fn resume(
        &self,
        resumable: ResumableRun,
        frontend: Frontend,
        cancel: CancellationToken,
    ) -> Result<AskOutcome> {
        let ResumableRun {
            run_id,
            session_id,
            workspace,
            point,
        } = resumable;
        let registry = Arc::new(self.registry(workspace.as_deref()).await);
        let (host, ctx) = self.run_parts(
            &run_id,
            &session_id,
            workspace,
            None,
            registry,
            point.next_seq(),
            frontend,
            cancel,
        )?;
        // The audit closes the questions that died with the other replica,
        // as the resumed run's events do.
        for a in point.stale_approvals() {
            let recorded = self.store.record_approval(&capstan_store::NewApproval {
                id: &a.id,
                run_id: &run_id,
                task_id: &a.task_id,
                action: &a.action,
                command: &a.command,
                cwd: &a.cwd,
                risk: a.risk.as_str(),
                reasons: &a.reasons,
                decision: capstan_store::Decision::Aborted,
                decided_by: capstan_store::DecidedBy::Policy,
                grant: None,
                requested_at: &a.requested_at,
            });
            if let Err(e) = recorded {
                tracing::warn!(
                    "run {run_id}: approval {} not closed in the audit: {e}",
                    a.id
                );
            }
        }
        let message = point.checkpoint().message().to_string();
        let summary = point.checkpoint().summary().to_string();
        let outcome = host.resume(point, &ctx).await;
        self.conclude(run_id, session_id, &message, &summary, outcome)
    }

    /// The host and the run context a run executes with; its events are
    /// numbered from `first_seq`. `policy` is the workspace's when the caller
    /// has read its row (`None`: read here).
    #[allow(clippy::too_many_arguments)]
    fn run_parts(
        &self,
        run_id: &str,
        session_id: &str,
        workspace: Option<PathBuf>,
        policy: Option<capstan_policy::Policy>,
        registry: Arc<Registry>,
        first_seq: u64,
        frontend: Frontend,
        cancel: CancellationToken,
    ) -> Result<(Host, crate::plugins::context::RunContext)> {
        let events = Arc::new(RunEvents {
            run_id: run_id.to_string(),
            seq: AtomicU64::new(first_seq),
            writer: self.events.clone(),
            frontend,
        });
        // A session budget is what is left of it; the run stops at the smaller limit.
        let session_left = match self.config.run.session_budget_usd {
            Some(limit) => Some(
                (limit
                    - self
                        .store
                        .session_usage(session_id)?
                        .cost_usd
                        .unwrap_or(0.0))
                .max(0.0),
            ),
            None => None,
        };
        let budget_usd = match (self.config.run.budget_usd, session_left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let policy = policy.or_else(|| workspace.as_deref().map(|w| self.policy_for(w)));
        // Sampling for external MCP servers is held to the same limit.
        let ctx = self
            .run_builder_with(workspace, policy)
            .sampler(Arc::new(crate::run::model::sampling::RunSampler::new(
                self.model.clone(),
                budget_usd,
                self.config.run.budget_tokens,
            )))
            .ids(run_id.to_string(), Some(session_id.to_string()))
            .cancel(cancel)
            .build(events);
        // Only replicas can resume a run: a single process keeps no checkpoints.
        let checkpoints: Option<CheckpointSink> = (self.store.backend()
            == capstan_store::Backend::Postgres
            && self.config.store.resume == ResumePolicy::Safe)
            .then(|| {
                let store = self.store.clone();
                let run_id = run_id.to_string();
                Arc::new(move |c: &Checkpoint| {
                    let saved = serde_json::to_string(c)
                        .map_err(|e| e.to_string())
                        .and_then(|json| {
                            store
                                .save_checkpoint(&run_id, &json)
                                .map_err(|e| e.to_string())
                        });
                    if let Err(e) = saved {
                        tracing::warn!(
                            "run {run_id}: no checkpoint saved, it cannot be resumed: {e}"
                        );
                    }
                }) as CheckpointSink
            });
        let host = Host {
            runtime: self.runtime.clone(),
            registry,
            model: self.model.clone(),
            config: RunConfig {
                max_retrievals: self.config.run.max_retrievals,
                max_parallel: self.config.run.max_parallel,
                budget_usd,
                budget_tokens: self.config.run.budget_tokens,
                ..Default::default()
            },
            checkpoints,
        };
        Ok((host, ctx))
    }

    /// After a run's terminal event: the answer and summary, then the run's
    /// end (with its terminal event, in one transaction).
    fn conclude(
        &self,
        run_id: String,
        session_id: String,
        message: &str,
        summary: &str,
        outcome: RunOutcome,
    ) -> Result<AskOutcome> {
        let status = match outcome.status {
            RunStatus::Completed => capstan_store::RunStatus::Completed,
            RunStatus::Failed => capstan_store::RunStatus::Failed,
            RunStatus::Cancelled => capstan_store::RunStatus::Cancelled,
        };
        // The answer and summary are saved in the run's last commit, but their
        // failure must not leave the run `running`: it still ends, and the
        // error is returned.
        let summary = roll_summary(summary, message, &outcome.answer);
        let answer = capstan_store::RunAnswer {
            session_id: &session_id,
            answer: &outcome.answer,
            summary: &summary,
        };
        let (finished, saved) = self.events.finish_with_answer(
            &run_id,
            status,
            outcome.reason.map(|r| r.as_str()),
            Some(outcome.usage),
            &answer,
        );
        finished?;
        saved?;
        Ok(AskOutcome {
            run_id,
            session_id,
            outcome,
        })
    }
}

/// A run another replica was running, accepted by [`App::resumable`].
pub struct ResumableRun {
    pub run_id: String,
    pub session_id: String,
    /// Canonical root of its workspace, checked by this host's gate.
    pub workspace: Option<PathBuf>,
    point: ResumePoint,
}

/// A bounded rolling summary: the earlier summary plus this exchange, keeping
/// the newest text when it grows past the bound. Deterministic, so it costs no
/// model call; a model-written summary can replace it later.
pub fn roll_summary(previous: &str, question: &str, answer: &str) -> String {
    const MAX: usize = 2000;
    let first_line = answer
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let answer_short: String = first_line.chars().take(200).collect();
    let q: String = question.chars().take(200).collect();
    let mut s = format!("{previous}\n- Asked: {q} -> {answer_short}")
        .trim()
        .to_string();
    if s.len() > MAX {
        let mut start = s.len() - MAX;
        while !s.is_char_boundary(start) {
            start += 1;
        }
        s = s[start..].to_string();
    }
    s
}

/// The user's home directory, for `~/` in `[sandbox] read`.
fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// Longest session title made from a first message, in characters.
const TITLE_CHARS: usize = 80;

/// A session's title from its first message: one line, whitespace runs
/// collapsed, cut at a word boundary with an ellipsis when long (lists show
/// two lines of it; rename gives it any name).
pub fn session_title(message: &str) -> String {
    let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= TITLE_CHARS {
        return line;
    }
    let cut: String = line.chars().take(TITLE_CHARS).collect();
    let at_word = match cut.rfind(' ') {
        Some(i) if i > TITLE_CHARS / 2 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}…", at_word.trim_end_matches([',', '.', ';', ':', ' ']))
}

#[cfg(test)]
mod tests {
    use super::session_title;

    #[test]
    fn session_titles_are_one_line_cut_at_a_word() {
        assert_eq!(
            session_title("  How do I\n rotate   keys? "),
            "How do I rotate keys?"
        );
        let long = "Please look through the release handbook and tell me every step of rotating \
                    the signing keys, with owners";
        let t = session_title(long);
        assert!(t.ends_with('…') && t.chars().count() <= 81, "{t}");
        assert!(long.starts_with(t.trim_end_matches('…')), "{t}");
        let next = &long[t.trim_end_matches('…').len()..];
        assert!(next.starts_with(' '), "cut at a word: {t}");
    }
}
