//! The run manager every interface shares (HTTP, SSE, AG-UI, stdio): it starts
//! runs on the one [`App`], owns the active runs with their cancel tokens,
//! fans each run's events out to its subscribers, routes approval decisions
//! to the broker, and answers the list and replay queries.
//!
//! Fan-out is one unbounded channel per subscriber rather than a
//! `tokio::sync::broadcast`: broadcast drops events for a slow reader, and a
//! feed with a hole in it is wrong. A run's event count is finite, so a stalled
//! reader costs at most one run's events of memory; and the number of readers
//! is capped per run and per server ([`StreamLimits`]), so the memory and
//! connections a client can hold open are bounded too.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use capstan_store::{Decision, Run, Session, Turn, Workspace};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::error::{ApiError, ErrorKind};
use crate::plugins::services::approval::{DecideError, Via};
use crate::run::app::{App, AskRequest, Frontend};
use crate::run::lease::Replica;
use crate::workspace_gate::{Caller, Refusal};
use capstan_protocol::{Envelope, Event};

/// The longest session title a rename accepts.
pub const MAX_TITLE_CHARS: usize = 200;

/// What a frontend sends to start a run.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRun {
    /// The question or instruction.
    pub message: String,
    /// Continue this session; a new one is made when absent.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Bind this workspace folder (absolute path, or relative to the server's
    /// working directory). Absent: the session's last workspace, else the
    /// server's default.
    #[serde(default)]
    pub workspace: Option<String>,
}

/// A run that has not reached the end of its bookkeeping yet.
pub struct ActiveRun {
    pub run_id: String,
    pub session_id: String,
    pub workspace: Option<PathBuf>,
    cancel: CancellationToken,
    feed: Mutex<Feed>,
}

#[derive(Default)]
struct Feed {
    history: Vec<Arc<Envelope>>,
    subscribers: Vec<mpsc::UnboundedSender<Arc<Envelope>>>,
    /// The terminal event was emitted: no more events will come.
    ended: bool,
    /// The terminal event, held back from subscribers until the run's end is
    /// stored with it ([`ActiveRun::close`], after `App::execute` returns):
    /// a client that reads `run.completed` and then asks for the run must
    /// find it completed. With the place in `history` it goes to.
    held_end: Option<(usize, Arc<Envelope>)>,
    /// Approvals requested and not decided yet.
    open_approvals: Vec<String>,
}

/// A view of a run's events: everything so far, then (for a live run) the rest
/// as it happens, with no gap and no duplicate between the two.
pub struct Subscription {
    pub backlog: Vec<Arc<Envelope>>,
    /// `None` when the run has ended; otherwise closes after the terminal event.
    pub live: Option<mpsc::UnboundedReceiver<Arc<Envelope>>>,
    /// This reader's place under the stream caps, freed when it is dropped.
    slot: Option<StreamSlot>,
}

impl Subscription {
    /// A subscription fed by something other than a local run (a tail of
    /// the store, see [`super::replica::tail`]).
    pub(super) fn from_parts(
        backlog: Vec<Arc<Envelope>>,
        live: Option<mpsc::UnboundedReceiver<Arc<Envelope>>>,
        slot: StreamSlot,
    ) -> Self {
        Self {
            backlog,
            live,
            slot: Some(slot),
        }
    }

    /// Only the events still to come (the caller has seen the backlog).
    pub fn without_backlog(mut self) -> Self {
        self.backlog.clear();
        self
    }

    /// The backlog, then the live events, as one stream that ends with the run.
    pub fn into_stream(self) -> impl futures::Stream<Item = Arc<Envelope>> + Send + 'static {
        use futures::StreamExt;
        let slot = self.slot;
        let live = futures::stream::unfold(self.live, |rx| async move {
            let mut rx = rx?;
            let next = rx.recv().await?;
            Some((next, Some(rx)))
        });
        futures::stream::iter(self.backlog)
            .chain(live)
            .map(move |env| {
                // The slot lives exactly as long as the stream does.
                let _held = &slot;
                env
            })
    }
}

/// Caps on concurrent event streams (SSE, AG-UI, stdio `run.events`):
/// past them a new stream is refused with advice instead of accepted.
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    /// Streams of one run at a time.
    pub per_run: usize,
    /// Streams of all runs at a time.
    pub total: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            per_run: crate::config::DEFAULT_MAX_STREAMS_PER_RUN,
            total: crate::config::DEFAULT_MAX_STREAMS,
        }
    }
}

#[derive(Default)]
struct StreamCounts {
    total: usize,
    per_run: HashMap<String, usize>,
}

/// One open stream, counted until dropped.
pub struct StreamSlot {
    manager: Arc<RunManager>,
    run_id: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut counts = self.manager.streams.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_run.get_mut(&self.run_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.per_run.remove(&self.run_id);
            }
        }
    }
}

impl ActiveRun {
    fn push(&self, envelope: &Arc<Envelope>) {
        let envelope = envelope.clone();
        let mut feed = self.feed.lock();
        match &envelope.event {
            Event::ApprovalRequested { approval_id, .. } => {
                feed.open_approvals.push(approval_id.clone())
            }
            Event::ApprovalDecided { approval_id, .. } => {
                feed.open_approvals.retain(|a| a != approval_id)
            }
            _ => {}
        }
        if is_terminal(&envelope.event) && feed.held_end.is_none() {
            let at = feed.history.len();
            feed.held_end = Some((at, envelope));
            return;
        }
        if feed.held_end.is_none() {
            feed.subscribers
                .retain(|tx| tx.send(envelope.clone()).is_ok());
        }
        feed.history.push(envelope);
    }

    fn subscribe(&self, slot: StreamSlot) -> Subscription {
        let mut feed = self.feed.lock();
        let backlog = feed.history.clone();
        let live = if feed.ended {
            None
        } else {
            let (tx, rx) = mpsc::unbounded_channel();
            feed.subscribers.push(tx);
            Some(rx)
        };
        Subscription {
            backlog,
            live,
            slot: Some(slot),
        }
    }

    pub fn open_approvals(&self) -> Vec<String> {
        self.feed.lock().open_approvals.clone()
    }

    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    pub fn ended(&self) -> bool {
        self.feed.lock().ended
    }

    /// The run's end is stored (or it stopped without one, after a store
    /// error, and no stream may wait forever): its held terminal event goes
    /// out, and every live stream ends after it (the senders are dropped).
    /// Called once the run is out of the active runs, so a client acting on
    /// the terminal event (a second cancel) finds the run ended.
    fn close(&self) {
        let mut feed = self.feed.lock();
        if let Some((at, end)) = feed.held_end.take() {
            feed.subscribers.retain(|tx| tx.send(end.clone()).is_ok());
            let at = at.min(feed.history.len());
            feed.history.insert(at, end);
        }
        feed.ended = true;
        feed.subscribers.clear();
    }
}

pub fn is_terminal(event: &Event) -> bool {
    matches!(
        event,
        Event::RunCompleted { .. } | Event::RunFailed { .. } | Event::RunCancelled { .. }
    )
}

/// Why a run was not resumed here.
#[derive(Debug)]
pub enum Resume {
    /// It cannot go on safely (the reason, for the log); it is interrupted.
    Unsafe(String),
    /// Another replica took it over first, or it ended.
    Taken,
}

/// A run just started: its ids and its events from the first one on.
pub struct Started {
    pub run: Arc<ActiveRun>,
    pub events: Subscription,
}

/// A run as the list endpoints show it: the stored record, and whether this
/// server is running it now.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    #[serde(flatten)]
    pub run: Run,
    pub active: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub open_approvals: Vec<String>,
}

pub struct RunManager {
    app: Arc<App>,
    /// The workspace for runs that name none and whose session has none.
    default_workspace: Option<PathBuf>,
    /// Who this manager serves: remote callers get registered workspaces only.
    caller: Caller,
    limits: StreamLimits,
    streams: Mutex<StreamCounts>,
    active: Mutex<HashMap<String, Arc<ActiveRun>>>,
    /// Sessions with a run in flight: a session's turns stay in order.
    busy_sessions: Mutex<HashSet<String>>,
    /// This server as one replica of several (`None` on SQLite).
    replica: Option<Arc<Replica>>,
    /// AG-UI thread ids to the Capstan sessions they became.
    threads: Mutex<HashMap<String, String>>,
    tasks: TaskTracker,
}

impl RunManager {
    pub fn new(
        app: Arc<App>,
        default_workspace: Option<PathBuf>,
        caller: Caller,
        limits: StreamLimits,
    ) -> Self {
        Self {
            default_workspace,
            caller,
            limits,
            streams: Mutex::default(),
            active: Mutex::default(),
            busy_sessions: Mutex::default(),
            threads: Mutex::default(),
            tasks: TaskTracker::new(),
            replica: Replica::for_store(app.store.clone(), &app.config.store),
            app,
        }
    }

    /// This server as one replica of several (a shared PostgreSQL store).
    pub fn replica(&self) -> Option<&Arc<Replica>> {
        self.replica.as_ref()
    }

    /// The runs this server is running now.
    pub fn active_runs(&self) -> Vec<Arc<ActiveRun>> {
        self.active.lock().values().cloned().collect()
    }

    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Validate, prepare and launch a run. The returned subscription starts at
    /// its first event.
    /// A `quota` makes the run its user's (`[[server.user]]`), refused with
    /// 429 when the user has no room for another.
    pub async fn start(
        self: &Arc<Self>,
        req: StartRun,
        quota: Option<capstan_store::Quota>,
    ) -> Result<Started, ApiError> {
        if req.message.trim().is_empty() {
            return Err(ApiError::bad_request(
                "`message` is empty: send the question or instruction to run",
            ));
        }
        let workspace = match &req.workspace {
            Some(dir) if !dir.trim().is_empty() => Some(self.checked_workspace(dir)?),
            _ => None,
        };
        // The stream this call answers with counts from the start.
        let slot = self.stream_slot("")?;
        let session_guard = match &req.session_id {
            Some(id) => {
                if self.app.store.get_session(id)?.is_none() {
                    return Err(ApiError::not_found(format!(
                        "no session `{id}`; list sessions at GET /v1/sessions, or leave \
                         `session_id` out to start a new one"
                    )));
                }
                Some(self.reserve_session(id)?)
            }
            None => None,
        };
        let workspace = match workspace {
            Some(ws) => Some(ws),
            None => {
                let remembered = match &req.session_id {
                    Some(id) => self
                        .app
                        .store
                        .get_session(id)?
                        .and_then(|s| s.workspace_id)
                        .is_some(),
                    None => false,
                };
                if remembered {
                    None
                } else {
                    self.default_workspace.clone()
                }
            }
        };
        let ask = AskRequest {
            message: req.message,
            session_id: req.session_id,
            workspace,
            quota,
        };
        let prepared = self.app.prepare(&ask).await.map_err(|e| {
            if let Some(refusal) = e.downcast_ref::<Refusal>() {
                return ApiError::from(refusal.clone());
            }
            // Another replica or process runs this session now.
            if let Some(busy @ capstan_store::StoreError::SessionBusy { run_id, .. }) =
                e.downcast_ref()
            {
                return ApiError::session_busy(busy, run_id);
            }
            if let Some(q @ capstan_store::StoreError::QuotaExceeded { .. }) = e.downcast_ref() {
                return ApiError::quota(q);
            }
            ApiError::internal(format!("{e:#}"))
        })?;
        // A new session is reserved now that it has an id.
        let session_guard = match session_guard {
            Some(g) => g,
            None => self.reserve_session(&prepared.session_id)?,
        };
        let run = Arc::new(ActiveRun {
            run_id: prepared.run_id.clone(),
            session_id: prepared.session_id.clone(),
            workspace: prepared.workspace.clone(),
            cancel: CancellationToken::new(),
            feed: Mutex::default(),
        });
        let events = self.stream(&run, self.bind_slot(slot, &run.run_id))?;
        self.active.lock().insert(run.run_id.clone(), run.clone());
        if let Some(replica) = &self.replica
            && let Err(e) = replica.claim(&run.run_id)
        {
            tracing::warn!("run {} runs without a lease: {e}", run.run_id);
        }
        let sink = run.clone();
        let frontend: Frontend = Arc::new(move |env: &Arc<Envelope>| sink.push(env));
        let manager = self.clone();
        let running = run.clone();
        self.tasks.spawn(async move {
            let result = manager
                .app
                .execute(prepared, frontend, running.cancel.clone())
                .await;
            if let Err(e) = result {
                crate::errln!("error: run {} stopped: {e:#}", running.run_id);
            }
            // Free for a next run before anyone hears this one ended.
            manager.active.lock().remove(&running.run_id);
            drop(session_guard);
            running.close();
        });
        Ok(Started { run, events })
    }

    /// Continues here a run whose replica died (its lease expired), when
    /// [`App::resumable`] finds it safe: takes its lease, registers it like a
    /// run started here (cancels, approvals, heartbeat) and runs the rest on
    /// `runtime`. Its streams read the store, as every replica's do.
    pub fn resume(
        self: &Arc<Self>,
        run_id: &str,
        runtime: &tokio::runtime::Handle,
    ) -> Result<(), Resume> {
        let replica = self.replica.as_ref().ok_or(Resume::Taken)?;
        let resumable = self.app.resumable(run_id).map_err(Resume::Unsafe)?;
        let session_guard = self
            .reserve_session(&resumable.session_id)
            .map_err(|e| Resume::Unsafe(e.message))?;
        let claim = replica.claim(run_id);
        if claim.is_err() {
            return Err(Resume::Taken);
        }
        let run = Arc::new(ActiveRun {
            run_id: resumable.run_id.clone(),
            session_id: resumable.session_id.clone(),
            workspace: resumable.workspace.clone(),
            cancel: CancellationToken::new(),
            feed: Mutex::default(),
        });
        self.active.lock().insert(run.run_id.clone(), run.clone());
        let sink = run.clone();
        let frontend: Frontend = Arc::new(move |env: &Arc<Envelope>| sink.push(env));
        let manager = self.clone();
        self.tasks.spawn_on(
            async move {
                let result = manager
                    .app
                    .resume(resumable, frontend, run.cancel.clone())
                    .await;
                if let Err(e) = result {
                    crate::errln!("error: resumed run {} stopped: {e:#}", run.run_id);
                }
                manager.active.lock().remove(&run.run_id);
                drop(session_guard);
                run.close();
            },
            runtime,
        );
        Ok(())
    }

    fn reserve_session(self: &Arc<Self>, id: &str) -> Result<SessionGuard, ApiError> {
        let mut busy = self.busy_sessions.lock();
        if !busy.insert(id.to_string()) {
            let running = self
                .active
                .lock()
                .values()
                .find(|r| r.session_id == id)
                .map(|r| r.run_id.clone())
                .unwrap_or_default();
            return Err(ApiError::conflict(format!(
                "session `{id}` already has a run in progress ({running}); wait for it or \
                 cancel it (POST /v1/runs/{running}/cancel)"
            )));
        }
        Ok(SessionGuard {
            manager: self.clone(),
            id: id.to_string(),
        })
    }

    pub fn active_run(&self, run_id: &str) -> Option<Arc<ActiveRun>> {
        self.active.lock().get(run_id).cloned()
    }

    /// The active run waiting on this approval, if any.
    pub fn run_for_approval(&self, approval_id: &str) -> Option<Arc<ActiveRun>> {
        self.active
            .lock()
            .values()
            .find(|r| r.open_approvals().iter().any(|a| a == approval_id))
            .cloned()
    }

    /// A place for one more event stream, or advice when the caps are reached.
    fn stream_slot(self: &Arc<Self>, run_id: &str) -> Result<StreamSlot, ApiError> {
        let mut counts = self.streams.lock();
        if counts.total >= self.limits.total {
            return Err(ApiError::new(
                ErrorKind::Unavailable,
                format!(
                    "this server already serves {} event streams, its limit; close streams you \
                     no longer read, retry later, or raise the limit (`capstan serve \
                     --max-streams`, or `[server] max_streams` in capstan.toml)",
                    self.limits.total
                ),
            ));
        }
        let per_run = counts.per_run.get(run_id).copied().unwrap_or(0);
        if !run_id.is_empty() && per_run >= self.limits.per_run {
            return Err(ApiError::new(
                ErrorKind::TooManyRequests,
                format!(
                    "run `{run_id}` already has {per_run} event streams open, the limit per run; \
                     read the stream you have, or raise the limit (`capstan serve \
                     --max-streams-per-run`, or `[server] max_streams_per_run` in capstan.toml)"
                ),
            ));
        }
        counts.total += 1;
        if !run_id.is_empty() {
            *counts.per_run.entry(run_id.to_string()).or_default() += 1;
        }
        Ok(StreamSlot {
            manager: self.clone(),
            run_id: run_id.to_string(),
        })
    }

    /// A slot taken before its run had an id, now counted against the run.
    fn bind_slot(&self, mut slot: StreamSlot, run_id: &str) -> StreamSlot {
        *self
            .streams
            .lock()
            .per_run
            .entry(run_id.to_string())
            .or_default() += 1;
        slot.run_id = run_id.to_string();
        slot
    }

    /// The events of a run this replica runs. With a shared store even these
    /// streams read the store: a client never sees an event that a kill -9 of
    /// this replica (its event writer still holding it) would take from the
    /// replay every other replica serves.
    fn stream(&self, run: &ActiveRun, slot: StreamSlot) -> Result<Subscription, ApiError> {
        if self.replica.is_some() {
            return super::replica::tail(self.app.store.clone(), &run.run_id, slot);
        }
        Ok(run.subscribe(slot))
    }

    /// Events of a run, live or stored.
    pub fn subscribe(self: &Arc<Self>, run_id: &str) -> Result<Subscription, ApiError> {
        if let Some(run) = self.active_run(run_id) {
            return self.stream(&run, self.stream_slot(run_id)?);
        }
        self.require_run(run_id)?;
        let slot = self.stream_slot(run_id)?;
        if self.replica.is_some() && super::replica::running_elsewhere(&self.app.store, run_id)? {
            return super::replica::tail(self.app.store.clone(), run_id, slot);
        }
        let backlog = self
            .app
            .store
            .events(run_id)?
            .iter()
            .filter_map(|json| match serde_json::from_str::<Envelope>(json) {
                Ok(env) => Some(Arc::new(env)),
                Err(e) => {
                    tracing::warn!(
                        "skipping a stored event of {run_id} this build cannot read: {e}"
                    );
                    None
                }
            })
            .collect();
        Ok(Subscription {
            backlog,
            live: None,
            slot: Some(slot),
        })
    }

    pub fn cancel(&self, run_id: &str) -> Result<(), ApiError> {
        if let Some(run) = self.active_run(run_id) {
            run.cancel();
            return Ok(());
        }
        let run = self.require_run(run_id)?;
        if let Some(replica) = &self.replica
            && run.status == capstan_store::RunStatus::Running
        {
            return super::replica::forward_cancel(replica, run_id);
        }
        Err(ApiError::conflict(format!(
            "run `{run_id}` already ended ({}); nothing to cancel",
            run.status
        )))
    }

    pub fn cancel_all(&self) {
        for run in self.active.lock().values() {
            run.cancel();
        }
    }

    /// Wait for every run to finish its bookkeeping (after `cancel_all`, at shutdown).
    pub async fn wait_idle(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// A frontend's decision as sent on the wire: `approved`,
    /// `approved-for-session`, `approved-always` (where offered), `denied`
    /// or `aborted`.
    pub fn parse_decision(decision: &str) -> Result<Decision, ApiError> {
        decision.parse().map_err(|_| {
            ApiError::unprocessable(format!(
                "`decision` must be one of approved, approved-for-session, denied, aborted, \
                 or approved-always where the approval.requested carries `always` \
                 (got {decision:?})"
            ))
        })
    }

    /// Answer an open approval; `via` is who answered (the frontend and the
    /// credential it showed), kept in the audit trail.
    pub fn decide(&self, approval_id: &str, decision: Decision, via: Via) -> Result<(), ApiError> {
        if decision == Decision::Expired {
            return Err(ApiError::unprocessable(
                "`expired` is decided by the timeout, not by a frontend; send approved, \
                 approved-for-session, denied or aborted",
            ));
        }
        let local = self.app.broker.decide(approval_id, decision, via);
        // Open here but refused (`approved-always` not offered): not another
        // replica's.
        if matches!(local, Err(DecideError::NotOpen(_)))
            && let Some(replica) = &self.replica
            && super::replica::forward_decision(replica, approval_id, decision, via)?
        {
            return Ok(());
        }
        local.map_err(|e| match e {
            DecideError::NotOpen(e) => ApiError::not_found(e.to_string()),
            e @ DecideError::AlwaysNotOffered(_) => ApiError::bad_request(e.to_string()),
        })
    }

    /// The run (and its session) another replica runs that asked for
    /// approval `approval_id`, for an AG-UI `resume` sent to this replica.
    /// `None` without a shared store, or when no running run asked for it.
    pub fn running_elsewhere_for_approval(
        &self,
        approval_id: &str,
    ) -> Result<Option<(String, String)>, ApiError> {
        if self.replica.is_none() {
            return Ok(None);
        }
        Ok(self
            .app
            .store
            .running_run_with_approval(approval_id)?
            .filter(|r| self.active_run(&r.id).is_none())
            .map(|r| (r.id, r.session_id)))
    }

    /// The session an AG-UI thread maps to (made on first use).
    pub fn session_for_thread(&self, thread_id: &str) -> Option<String> {
        if self
            .app
            .store
            .get_session(thread_id)
            .ok()
            .flatten()
            .is_some()
        {
            return Some(thread_id.to_string());
        }
        self.threads.lock().get(thread_id).cloned()
    }

    pub fn bind_thread(&self, thread_id: &str, session_id: &str) {
        self.threads
            .lock()
            .insert(thread_id.to_string(), session_id.to_string());
    }

    // Queries.

    pub fn sessions(&self, limit: usize) -> Result<Vec<Session>, ApiError> {
        Ok(self.app.store.list_sessions(limit)?)
    }

    /// Sessions whose title or turns contain `query`, newest first.
    pub fn search_sessions(&self, query: &str, limit: usize) -> Result<Vec<Session>, ApiError> {
        Ok(self.app.store.search_sessions(query, limit)?)
    }

    /// Renames a session. The title is one line of at most
    /// [`MAX_TITLE_CHARS`] characters.
    pub fn rename_session(&self, id: &str, title: &str) -> Result<Session, ApiError> {
        let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
        if title.is_empty() {
            return Err(ApiError::bad_request(
                "`title` is empty; send the new name of the session",
            ));
        }
        if title.chars().count() > MAX_TITLE_CHARS {
            return Err(ApiError::bad_request(format!(
                "`title` is longer than {MAX_TITLE_CHARS} characters; send a shorter name"
            )));
        }
        self.session(id)?;
        self.app.store.set_session_title(id, &title)?;
        self.session(id)
    }

    /// Deletes a session (see [`capstan_store::Store::delete_session`] for
    /// what stays for the audit). Refused while a run of it is in flight.
    pub fn delete_session(
        self: &Arc<Self>,
        id: &str,
    ) -> Result<capstan_store::SessionDeletion, ApiError> {
        self.session(id)?;
        // Held for the delete, so no run can start in the session meanwhile.
        let _guard = self.reserve_session(id)?;
        Ok(self.app.store.delete_session(id)?)
    }

    /// The workspace `-w` gave the server, if any (the page preselects it).
    pub fn default_workspace(&self) -> Option<&Path> {
        self.default_workspace.as_deref()
    }

    /// A text file of a registered workspace, for the citation viewer (see
    /// [`super::files`]).
    pub fn workspace_file(
        &self,
        workspace_id: &str,
        path: &str,
    ) -> Result<super::files::FileText, ApiError> {
        let ws = self
            .app
            .store
            .get_workspace_by_id(workspace_id)?
            .ok_or_else(|| {
                ApiError::not_found(format!(
                    "no workspace `{workspace_id}`; list them at GET /v1/workspaces"
                ))
            })?;
        // The gate again: registered, and still not a forbidden place (a
        // symlink may have been swapped in since it was registered).
        let store = &self.app.store;
        let root = self
            .app
            .gate
            .check_for(&ws.root_path, self.caller, |root| {
                matches!(store.get_workspace_by_root(root), Ok(Some(_)))
            })?;
        super::files::read(&root, &ws.id, path)
    }

    pub fn session(&self, id: &str) -> Result<Session, ApiError> {
        self.app.store.get_session(id)?.ok_or_else(|| {
            ApiError::not_found(format!(
                "no session `{id}`; list sessions at GET /v1/sessions"
            ))
        })
    }

    pub fn turns(&self, session_id: &str) -> Result<Vec<Turn>, ApiError> {
        self.session(session_id)?;
        Ok(self.app.store.recent_turns(session_id, usize::MAX)?)
    }

    pub fn runs(&self, session_id: Option<&str>, limit: usize) -> Result<Vec<RunInfo>, ApiError> {
        if let Some(id) = session_id {
            self.session(id)?;
        }
        Ok(self
            .app
            .store
            .list_runs(session_id, limit)?
            .into_iter()
            .map(|r| self.info(r))
            .collect())
    }

    pub fn run(&self, run_id: &str) -> Result<RunInfo, ApiError> {
        Ok(self.info(self.require_run(run_id)?))
    }

    fn info(&self, run: Run) -> RunInfo {
        let active = self.active_run(&run.id);
        RunInfo {
            open_approvals: active
                .as_ref()
                .map(|r| r.open_approvals())
                .unwrap_or_default(),
            active: active.is_some(),
            run,
        }
    }

    fn require_run(&self, run_id: &str) -> Result<Run, ApiError> {
        self.app.store.get_run(run_id)?.ok_or_else(|| {
            ApiError::not_found(format!("no run `{run_id}`; list runs at GET /v1/runs"))
        })
    }

    /// A workspace path from a frontend through the workspace gate: canonical,
    /// never a forbidden place, and registered when the caller is remote.
    fn checked_workspace(&self, dir: &str) -> Result<PathBuf, ApiError> {
        let store = &self.app.store;
        Ok(self
            .app
            .gate
            .check_for(Path::new(dir), self.caller, |root| {
                matches!(store.get_workspace_by_root(root), Ok(Some(_)))
            })?)
    }

    /// Registered workspaces, each with the profile in force (its own, or
    /// the configuration's).
    pub fn workspaces(&self) -> Result<Vec<Workspace>, ApiError> {
        Ok(self
            .app
            .store
            .list_workspaces()?
            .into_iter()
            .map(|ws| self.app.config.with_profile_in_force(ws))
            .collect())
    }

    /// Register a workspace folder (or return the registered one). A remote
    /// caller can only get a folder already registered: registering is the
    /// user's act, at the command line.
    pub fn add_workspace(&self, dir: &str) -> Result<Workspace, ApiError> {
        let root = self.checked_workspace(dir)?;
        let ws = self.app.store.ensure_workspace(&root)?;
        Ok(self.app.config.with_profile_in_force(ws))
    }
}

/// Frees a session for its next run when the run ends (or fails to start).
struct SessionGuard {
    manager: Arc<RunManager>,
    id: String,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.manager.busy_sessions.lock().remove(&self.id);
    }
}
