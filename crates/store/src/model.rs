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
        User => "user",
        Assistant => "assistant",
    }
}

text_enum! {
    /// Where a run stands. Only `Running` is not terminal.
    RunStatus {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
        /// The process running it died (crash, kill, power loss) before it
        /// finished; set at the next start-up by `mark_interrupted_runs`.
        Interrupted => "interrupted",
    }
}

text_enum! {
    /// The outcome of an approval request.
    Decision {
        Approved => "approved",
        /// Approved, and the same action is approved for the rest of the session.
        ApprovedForSession => "approved-for-session",
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
    pub name: String,
    /// The profile chosen for this folder; `None` follows the configuration's
    /// `[policy] profile`, so tightening the configuration reaches every
    /// workspace that did not choose its own.
    pub policy_profile: Option<Profile>,
    /// Extra policy rules as JSON (valid JSON is enforced by the schema).
    pub policy_json: Option<String>,
    pub created_at: String,
}

/// A conversation: its turns, runs, rolling summary and usage totals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// `ses_...`
    pub id: String,
    pub title: String,
    /// The workspace the session last used; `None` when it never had one or
    /// that workspace was removed.
    pub workspace_id: Option<String>,
    /// The rolling summary of turns older than the recent window.
    pub summary: String,
    pub usage: Usage,
    pub created_at: String,
    /// Bumped by every change to the session, its turns or its runs' usage.
    pub updated_at: String,
}

/// What [`crate::Store::delete_session`] removed, and what it kept for the audit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDeletion {
    pub turns: u64,
    pub events: u64,
    pub runs: u64,
    /// Runs kept because they hold approvals (with the session's tombstone).
    pub audited_runs_kept: u64,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// `turn_...`
    pub id: String,
    pub session_id: String,
    /// The run that produced (assistant) or received (user) the turn.
    pub run_id: Option<String>,
    /// 1, 2, 3... within the session, in the order turns were added.
    pub seq: u64,
    pub role: Role,
    pub content: String,
    pub created_at: String,
}

/// One execution of the orchestrator for one message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// `run_...`
    pub id: String,
    pub session_id: String,
    pub status: RunStatus,
    /// Why it failed, was cancelled or interrupted (a failure reason such as
    /// `unsupported-capability`, or free text).
    pub reason: Option<String>,
    pub model: String,
    pub usage: Usage,
    pub started_at: String,
    /// Set exactly when the status is terminal (enforced by the schema).
    pub ended_at: Option<String>,
}

/// One stored event envelope, for [`crate::Store::append_events`] and the
/// [`crate::EventWriter`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
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

/// An approval decision to record (see [`crate::Store::record_approval`]).
#[derive(Clone, Debug)]
pub struct NewApproval<'a> {
    /// The `approval_id` of the `approval.requested` event, so the audit row
    /// and the event stream name the same request. [`crate::new_id`]`("apr")`
    /// makes one.
    pub id: &'a str,
    pub run_id: &'a str,
    pub task_id: &'a str,
    /// What was asked for (`exec`, `write_file`...).
    pub action: &'a str,
    /// The command line, when the action runs one.
    pub command: &'a str,
    pub cwd: &'a str,
    /// The classified risk (`read_only`, `write`, `delete`, `network`, `unknown`).
    pub risk: &'a str,
    /// Why the command got that risk, in the classifier's words.
    pub reasons: &'a [String],
    pub decision: Decision,
    pub decided_by: DecidedBy,
    /// When the request was made (the decision time is the time of recording).
    pub requested_at: &'a str,
}

/// A recorded approval decision (the audit trail).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    pub run_id: String,
    pub task_id: String,
    pub action: String,
    pub command: String,
    pub cwd: String,
    pub risk: String,
    pub reasons: Vec<String>,
    pub decision: Decision,
    pub decided_by: DecidedBy,
    /// When the request was made.
    pub created_at: String,
    pub decided_at: String,
}
