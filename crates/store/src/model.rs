//! The records the store returns and the closed sets of words it stores.
//!
//! Every enum is stored as its text form (the same string serde uses), and the
//! schema has a `CHECK` constraint listing the allowed strings, so a bad value
//! is refused by SQLite itself, whoever writes it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A closed set of words stored as text: `as_str`, `FromStr`, `Display`,
/// serde and SQLite conversions from one table, so they cannot disagree.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stored (and serialised) form.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(format!(
                        concat!("unknown ", stringify!($name), " {:?}; expected one of: {}"),
                        s,
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        impl ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl FromSql for $name {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                value.as_str()?.parse().map_err(|e: String| FromSqlError::Other(e.into()))
            }
        }
    };
}

text_enum! {
    /// Who spoke a turn.
    Role {
        /// The person's message.
        User => "user",
        /// Capstan's answer.
        Assistant => "assistant",
    }
}

text_enum! {
    /// Where a run stands. Only `Running` is not terminal.
    RunStatus {
        /// Started and not ended; the only state with a lease.
        Running => "running",
        /// Ended with an answer (`run.completed`).
        Completed => "completed",
        /// Ended with `run.failed`; `reason` holds the failure reason.
        Failed => "failed",
        /// Cancelled by a person, a dropped stream or end of input.
        Cancelled => "cancelled",
        /// The process running it died (crash, kill, power loss) before it
        /// finished; set at the next start-up by `mark_interrupted_runs`.
        Interrupted => "interrupted",
    }
}

text_enum! {
    /// The outcome of an approval request.
    Decision {
        /// Approved for this one action.
        Approved => "approved",
        /// Approved, and the same action is approved for the rest of the session.
        ApprovedForSession => "approved-for-session",
        /// Approved, and a rule allowing it from now on was written to the
        /// user's configuration (offered only where such a rule exists: a
        /// connection to a host no `[network]` rule names, whose
        /// `approval.requested` carries `always`).
        ApprovedAlways => "approved-always",
        /// Refused; the action did not run.
        Denied => "denied",
        /// The run was cancelled while the question was open.
        Aborted => "aborted",
        /// Nobody answered in time.
        Expired => "expired",
    }
}

text_enum! {
    /// Who (or what) decided an approval.
    DecidedBy {
        /// A person, through a frontend.
        User => "user",
        /// The workspace policy, without asking.
        Policy => "policy",
        /// A command-line flag (e.g. a `--yes`).
        Flag => "flag",
    }
}

/// A workspace's policy profile, and token counts and cost (in a run: that
/// run's totals; in a session: the sum over its runs, kept by
/// [`crate::Store::add_usage`] and [`crate::Store::finish_run`]; a cost of 0,
/// no price or nothing spent, reads back as absent). Both defined once in
/// `capstan-protocol`.
pub use capstan_protocol::{Profile, Usage};

/// A registered workspace folder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workspace {
    /// `ws_...`
    pub id: String,
    /// Canonical (absolute, symlinks resolved) at registration; unique.
    pub root_path: PathBuf,
    /// Display name, as given at registration.
    pub name: String,
    /// The profile chosen for this folder; `None` follows the configuration's
    /// `[policy] profile`, so tightening the configuration reaches every
    /// workspace that did not choose its own.
    pub policy_profile: Option<Profile>,
    /// Extra policy rules as JSON (valid JSON is enforced by the schema).
    pub policy_json: Option<String>,
    /// When it was registered (RFC 3339, milliseconds, UTC).
    pub created_at: String,
}

/// A conversation: its turns, runs, rolling summary and usage totals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// `ses_...`
    pub id: String,
    /// Shown in session lists; set at creation or by a rename.
    pub title: String,
    /// The workspace the session last used; `None` when it never had one or
    /// that workspace was removed.
    pub workspace_id: Option<String>,
    /// The rolling summary of turns older than the recent window.
    pub summary: String,
    /// Token and cost totals over all the session's model calls.
    pub usage: Usage,
    /// RFC 3339, milliseconds, UTC.
    pub created_at: String,
    /// Bumped by every change to the session, its turns or its runs' usage.
    pub updated_at: String,
}

/// What [`crate::Store::delete_session`] removed, and what it kept for the audit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDeletion {
    /// Turns deleted.
    pub turns: u64,
    /// Stored events deleted.
    pub events: u64,
    /// Runs deleted (those without approvals).
    pub runs: u64,
    /// Runs kept because they hold approvals (with the session's tombstone).
    pub audited_runs_kept: u64,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// `turn_...`
    pub id: String,
    /// The session it belongs to.
    pub session_id: String,
    /// The run that produced (assistant) or received (user) the turn.
    pub run_id: Option<String>,
    /// 1, 2, 3... within the session, in the order turns were added.
    pub seq: u64,
    /// Who spoke it.
    pub role: Role,
    /// The message text (the answer's Markdown for the assistant).
    pub content: String,
    /// RFC 3339, milliseconds, UTC.
    pub created_at: String,
}

/// One execution of the orchestrator for one message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// `run_...`
    pub id: String,
    /// The session it belongs to.
    pub session_id: String,
    /// Where it stands.
    pub status: RunStatus,
    /// Why it failed, was cancelled or interrupted (a failure reason such as
    /// `unsupported-capability`, or free text).
    pub reason: Option<String>,
    /// Id of the model that drove it.
    pub model: String,
    /// Its token and cost totals so far.
    pub usage: Usage,
    /// RFC 3339, milliseconds, UTC.
    pub started_at: String,
    /// Set exactly when the status is terminal (enforced by the schema).
    pub ended_at: Option<String>,
}

impl Session {
    /// A new, empty session created now: what both backends insert.
    pub(crate) fn new(title: &str, workspace_id: Option<&str>) -> Self {
        let now = crate::now_rfc3339();
        Self {
            id: crate::new_id("ses"),
            title: title.to_owned(),
            workspace_id: workspace_id.map(str::to_owned),
            summary: String::new(),
            usage: Usage::default(),
            created_at: now.clone(),
            updated_at: now,
        }
    }
}

impl Run {
    /// A new run of `session_id`, `running` from now: what both backends
    /// insert when a run starts.
    pub(crate) fn starting(session_id: &str, model: &str) -> Self {
        Self {
            id: crate::new_id("run"),
            session_id: session_id.to_owned(),
            status: RunStatus::Running,
            reason: None,
            model: model.to_owned(),
            usage: Usage::default(),
            started_at: crate::now_rfc3339(),
            ended_at: None,
        }
    }
}

/// One stored event envelope, for [`crate::Store::append_events`] and the
/// [`crate::EventWriter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    /// The run the event belongs to.
    pub run_id: String,
    /// Unique per run; replay is in `seq` order.
    pub seq: u64,
    /// RFC 3339 with milliseconds.
    pub ts: String,
    /// The envelope's `type` (e.g. `response.delta`).
    pub kind: String,
    /// The whole envelope as JSON, returned verbatim by replay.
    pub json: String,
}

/// What a run leaves in its session when it ends: the assistant's answer (a
/// turn, unless empty) and the session's rolled-up summary. See
/// [`crate::Store::finish_run_with_answer`].
#[derive(Clone, Copy, Debug)]
pub struct RunAnswer<'a> {
    /// The run's session.
    pub session_id: &'a str,
    /// The answer's text; empty stores no turn.
    pub answer: &'a str,
    /// The session's new summary.
    pub summary: &'a str,
}

/// A run's end for [`crate::Store::finish_run_with_answer`]: as
/// [`crate::Store::finish_run_with_events`] takes it, with the run's answer.
#[derive(Clone, Copy, Debug)]
pub struct RunEnding<'a> {
    /// The run.
    pub id: &'a str,
    /// Its terminal status.
    pub status: RunStatus,
    /// Why it failed, was cancelled or interrupted.
    pub reason: Option<&'a str>,
    /// Its final usage totals; `None` keeps the stored ones.
    pub usage: Option<Usage>,
    /// Its events not stored yet (its terminal event last among them), stored
    /// with the end.
    pub last: &'a [EventRecord],
    /// Its answer and the session's summary, if it leaves them.
    pub answer: Option<RunAnswer<'a>>,
}

/// An approval decision to record (see [`crate::Store::record_approval`]).
#[derive(Clone, Debug)]
pub struct NewApproval<'a> {
    /// The `approval_id` of the `approval.requested` event, so the audit row
    /// and the event stream name the same request. [`crate::new_id`]`("apr")`
    /// makes one.
    pub id: &'a str,
    /// The run that asked.
    pub run_id: &'a str,
    /// The task within that run.
    pub task_id: &'a str,
    /// What was asked for (`exec`, `write_file`...).
    pub action: &'a str,
    /// The command line, when the action runs one.
    pub command: &'a str,
    /// Workspace-relative directory the command would run in (empty when none).
    pub cwd: &'a str,
    /// The classified risk (`read_only`, `write`, `delete`, `network`, `unknown`).
    pub risk: &'a str,
    /// Why the command got that risk, in the classifier's words.
    pub reasons: &'a [String],
    /// What was decided.
    pub decision: Decision,
    /// Who decided it.
    pub decided_by: DecidedBy,
    /// What the action was granted when it was let run (`None` when it was
    /// not, or the action is not a command).
    pub grant: Option<capstan_protocol::Grant>,
    /// When the request was made (the decision time is the time of recording).
    pub requested_at: &'a str,
}

/// A recorded approval decision (the audit trail).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// The request's `approval_id` (`apr_...`).
    pub id: String,
    /// The run that asked (kept after its session is deleted).
    pub run_id: String,
    /// The task within that run.
    pub task_id: String,
    /// What was asked for (`exec`, `write_file`...).
    pub action: String,
    /// The command line (empty when the action runs none).
    pub command: String,
    /// Workspace-relative directory of the command (empty when none).
    pub cwd: String,
    /// The classified risk, in its wire spelling.
    pub risk: String,
    /// Why the action got that risk.
    pub reasons: Vec<String>,
    /// What was decided.
    pub decision: Decision,
    /// Who decided it.
    pub decided_by: DecidedBy,
    /// What the action was granted when it was let run: the sandbox gave a
    /// command exactly this (`None` when it did not run, or for older rows).
    #[serde(default)]
    pub grant: Option<capstan_protocol::Grant>,
    /// When the request was made.
    pub created_at: String,
    /// When the decision was recorded (RFC 3339, milliseconds, UTC).
    pub decided_at: String,
}
