//! The approval gate: one broker per process. A service that needs a person's
//! consent asks the broker; the broker emits `approval.requested`, waits for a
//! decision from whichever frontend is attached (terminal prompt, HTTP, stdio),
//! a flag (`--approve all|none`), a session grant or the timeout, emits
//! `approval.decided` and records the decision for audit. Decisions the policy
//! makes without asking (allow and deny verdicts) are recorded too, with
//! `decided_by = policy`.
//!
//! Invariant: no path returns "approved" without either a person, an explicit
//! flag or an earlier approve-for-session of the same command in the same cwd.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use capstan_store::{DecidedBy, Decision, NewApproval, Store};
use tokio::sync::oneshot;

use crate::plugins::bindings::approval as wit;
use crate::plugins::context::{Approver, TaskScope};
use capstan_protocol::{Event, Grant, GrantSource};

/// No request with this id waits for a decision: it was never asked, it was
/// already decided or expired, or its run ended.
#[derive(Debug, thiserror::Error)]
#[error("no open approval `{0}`: it was already decided, it expired, or its run ended")]
pub struct NotOpen(pub String);

/// Why a decision was not applied.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error(transparent)]
    NotOpen(#[from] NotOpen),
    /// `approved-always` on a request whose `approval.requested` has no
    /// `always` (only a connection to an unlisted host in a workspace offers
    /// it); the request still waits for a decision.
    #[error(
        "approval `{0}` does not offer `approved-always` (only a network connection to a host \
         no [network] rule names, in a workspace, does: its approval.requested carries \
         `always`); send approved, approved-for-session, denied or aborted"
    )]
    AlwaysNotOffered(String),
}

/// How approvals are answered when nobody is asked interactively.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ApproveMode {
    /// Ask a person (a terminal prompt or a frontend).
    Ask,
    /// Grant every approval (the sandbox and deny rules still hold).
    All,
    /// Deny every approval.
    None,
}

/// Who answered an approval: the frontend and the credential it showed. Kept
/// with the decision (`approval.decided` `via`, in the run's stored events),
/// so the audit says which door a "yes" came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The terminal prompt of `capstan ask`, `chat` or `invoke`.
    Terminal,
    /// `capstan serve --stdio`: the frontend that spawned the process.
    Stdio,
    /// An HTTP request (REST or AG-UI) carrying the server's bearer token.
    HttpToken,
    /// The web chat: the HttpOnly cookie given for the start-up URL's token.
    HttpCookie,
    /// HTTP to a server started with `--no-token` (Host and Origin checked only).
    HttpNoToken,
    /// An MCP client, answering an elicitation in its own session.
    McpClient,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Terminal => "terminal",
            Via::Stdio => "stdio",
            Via::HttpToken => "http-token",
            Via::HttpCookie => "http-cookie",
            Via::HttpNoToken => "http-no-token",
            Via::McpClient => "mcp-client",
        }
    }
}

/// What is being asked.
#[derive(Debug, Clone)]
pub struct ApprovalAsk {
    pub action: String,
    pub command: String,
    pub cwd: String,
    pub risk: capstan_policy::Risk,
    pub reasons: Vec<String>,
    /// The rule "always for this workspace" would write (`approved-always`
    /// offered); `None` for every other kind of approval.
    pub always: Option<String>,
}

/// An open request: where its decision goes, and whether `approved-always`
/// is one of the answers.
struct Pending {
    tx: oneshot::Sender<(Decision, Via)>,
    offers_always: bool,
}

pub struct ApprovalBroker {
    mode: ApproveMode,
    timeout: Duration,
    pending: Mutex<HashMap<String, Pending>>,
    /// (session or run, command, cwd) granted for the session.
    grants: Mutex<HashSet<(String, String, String)>>,
    store: Option<Arc<Store>>,
}

impl ApprovalBroker {
    pub fn new(mode: ApproveMode, timeout: Duration, store: Option<Arc<Store>>) -> Self {
        Self {
            mode,
            timeout,
            pending: Mutex::default(),
            grants: Mutex::default(),
            store,
        }
    }

    pub fn mode(&self) -> ApproveMode {
        self.mode
    }

    /// Answer an open request (from a prompt or a frontend, `via`). Errors
    /// when no request with that id waits (unknown, decided, expired, or its
    /// run ended), or on `approved-always` for a request that does not offer
    /// it (which then still waits).
    pub fn decide(
        &self,
        approval_id: &str,
        decision: Decision,
        via: Via,
    ) -> Result<(), DecideError> {
        let pending = {
            let mut open = self.pending.lock();
            let Some(p) = open.get(approval_id) else {
                return Err(NotOpen(approval_id.to_string()).into());
            };
            if decision == Decision::ApprovedAlways && !p.offers_always {
                return Err(DecideError::AlwaysNotOffered(approval_id.to_string()));
            }
            open.remove(approval_id)
        };
        pending
            .ok_or_else(|| NotOpen(approval_id.to_string()))?
            .tx
            .send((decision, via))
            .map_err(|_| NotOpen(approval_id.to_string()).into())
    }

    /// Whether this open request offers `approved-always` (false when it is
    /// not open).
    pub fn offers_always(&self, approval_id: &str) -> bool {
        self.pending
            .lock()
            .get(approval_id)
            .is_some_and(|p| p.offers_always)
    }

    /// Whether this request waits for a person (true from before its
    /// `approval.requested` event until it is decided).
    pub fn is_open(&self, approval_id: &str) -> bool {
        self.pending.lock().contains_key(approval_id)
    }

    /// Ask, wait, record. `Aborted` also cancels the run.
    pub async fn ask(&self, scope: &TaskScope, ask: ApprovalAsk) -> Decision {
        self.ask_granting(scope, ask).await.0
    }

    /// [`Self::ask`], also saying who granted an approval: a session grant made
    /// earlier, a person now, or the `--approve all` flag.
    pub async fn ask_granting(
        &self,
        scope: &TaskScope,
        mut ask: ApprovalAsk,
    ) -> (Decision, GrantSource) {
        // The classifier and the policy can give the same reason; say it once.
        let mut seen = HashSet::new();
        ask.reasons.retain(|r| seen.insert(r.clone()));
        let session = scope.run.session_key();
        let grant_key = (session, ask.command.clone(), ask.cwd.clone());
        let id = capstan_store::new_id("apr");
        let requested_at = capstan_store::now_rfc3339();
        let granted = !ask.command.is_empty() && self.grants.lock().contains(&grant_key);
        // Registered before the request is announced, so a frontend that sees
        // `approval.requested` can tell at once (`is_open`) whether a person
        // must answer it or a grant or flag is about to.
        let waiting = (!granted && self.mode == ApproveMode::Ask).then(|| {
            let (tx, rx) = oneshot::channel();
            let offers_always = ask.always.is_some();
            self.pending
                .lock()
                .insert(id.clone(), Pending { tx, offers_always });
            rx
        });
        scope.run.events.emit(Event::ApprovalRequested {
            approval_id: id.clone(),
            task_id: scope.task_id.clone(),
            action: ask.action.clone(),
            command: ask.command.clone(),
            cwd: ask.cwd.clone(),
            risk: ask.risk,
            reasons: ask.reasons.clone(),
            always: ask.always.clone(),
        });
        if waiting.is_some() {
            // So a feed built from `activity` alone shows the run waiting.
            scope.run.events.emit(Event::Activity {
                task_id: Some(scope.task_id.clone()),
                kind: "approval.waiting".into(),
                message: format!("waiting for approval of `{}` ({})", ask.command, ask.risk),
                data: serde_json::Value::Null,
            });
        }
        let (decision, by, via) = match (granted, waiting) {
            (true, _) => (Decision::Approved, DecidedBy::User, None),
            (false, Some(rx)) => {
                let decided = tokio::select! {
                    r = rx => match r {
                        Ok((decision, via)) => (decision, DecidedBy::User, Some(via)),
                        Err(_) => (Decision::Expired, DecidedBy::Policy, None),
                    },
                    _ = tokio::time::sleep(self.timeout) => (Decision::Expired, DecidedBy::Policy, None),
                    _ = scope.run.cancel.cancelled() => (Decision::Aborted, DecidedBy::User, None),
                };
                self.pending.lock().remove(&id);
                decided
            }
            (false, None) if self.mode == ApproveMode::All => {
                (Decision::Approved, DecidedBy::Flag, None)
            }
            (false, None) => (Decision::Denied, DecidedBy::Flag, None),
        };
        if decision == Decision::ApprovedForSession {
            self.grants.lock().insert(grant_key);
        }
        if decision == Decision::Aborted {
            scope.run.cancel.cancel();
        }
        scope.run.events.emit(Event::ApprovalDecided {
            approval_id: id.clone(),
            decision: decision.as_str().to_string(),
            by: by.as_str().to_string(),
            via: via.map(|v| v.as_str().to_string()),
        });
        scope.run.events.emit(Event::Activity {
            task_id: Some(scope.task_id.clone()),
            kind: "approval".into(),
            message: format!(
                "approval for `{}` ({}): {} by {}{}",
                ask.command,
                ask.risk,
                decision.as_str(),
                by.as_str(),
                via.map(|v| format!(" via {}", v.as_str()))
                    .unwrap_or_default()
            ),
            data: serde_json::Value::Null,
        });
        let source = match (granted, by) {
            (true, _) => GrantSource::Session,
            (false, DecidedBy::Flag) => GrantSource::Flag,
            (false, _) => GrantSource::Approval,
        };
        let approved = matches!(
            decision,
            Decision::Approved | Decision::ApprovedForSession | Decision::ApprovedAlways
        );
        let grant = approved.then(|| Grant::for_risk(source, ask.risk));
        self.audit(scope, &id, &ask, decision, by, grant, &requested_at);
        (decision, source)
    }

    /// Record a decision the policy made without asking (a deny rule).
    pub fn record_policy_denial(&self, scope: &TaskScope, ask: &ApprovalAsk) {
        self.record_policy_verdict(scope, ask, Decision::Denied, None);
    }

    /// Record that the policy let an action run without asking (the
    /// profile auto-runs its risk, or an allow rule matched): every decision
    /// on an action is in the audit trail, not only the ones a person made.
    /// `grant` is what the action runs with.
    pub fn record_policy_allow(&self, scope: &TaskScope, ask: &ApprovalAsk, grant: Grant) {
        self.record_policy_verdict(scope, ask, Decision::Approved, Some(grant));
    }

    fn record_policy_verdict(
        &self,
        scope: &TaskScope,
        ask: &ApprovalAsk,
        decision: Decision,
        grant: Option<Grant>,
    ) {
        let id = capstan_store::new_id("apr");
        self.audit(
            scope,
            &id,
            ask,
            decision,
            DecidedBy::Policy,
            grant,
            &capstan_store::now_rfc3339(),
        );
    }

    #[allow(clippy::too_many_arguments)] // one audit row's fields
    fn audit(
        &self,
        scope: &TaskScope,
        id: &str,
        ask: &ApprovalAsk,
        decision: Decision,
        by: DecidedBy,
        grant: Option<Grant>,
        requested_at: &str,
    ) {
        let (Some(store), false) = (&self.store, scope.run.run_id.is_empty()) else {
            return;
        };
        let record = NewApproval {
            id,
            run_id: &scope.run.run_id,
            task_id: &scope.task_id,
            action: &ask.action,
            command: &ask.command,
            cwd: &ask.cwd,
            risk: ask.risk.as_str(),
            reasons: &ask.reasons,
            decision,
            decided_by: by,
            grant,
            requested_at,
        };
        if let Err(e) = store.record_approval(&record) {
            crate::term::warn(format_args!(
                "approval {id} (`{}`: {}) could not be recorded for audit: {e}",
                ask.command,
                decision.as_str()
            ));
        }
    }
}

/// The `approval` WIT import: plugins ask through the same broker.
#[async_trait]
impl Approver for ApprovalBroker {
    async fn request(&self, scope: &TaskScope, req: wit::ApprovalRequest) -> wit::Decision {
        let ask = ApprovalAsk {
            action: req.action,
            command: req.detail,
            cwd: String::new(),
            risk: req.risk.into(),
            reasons: req.reasons,
            always: None,
        };
        match self.ask(scope, ask).await {
            Decision::Approved => wit::Decision::Approved,
            // Never offered to a plugin's request; a session grant is the
            // nearest the plugin's WIT can say.
            Decision::ApprovedForSession | Decision::ApprovedAlways => {
                wit::Decision::ApprovedForSession
            }
            Decision::Aborted => wit::Decision::Aborted,
            Decision::Denied | Decision::Expired => wit::Decision::Denied,
        }
    }
}
