//! Capstan's shared types, defined once: every crate that speaks of a risk, a
//! profile, a failure reason, usage or an event uses these, and the WIT types
//! convert to them in exactly one place (the host's `plugins::bindings`).
//!
//! Serde types with no logic beyond their names. Each closed set is an enum
//! with one wire spelling (`as_str`, `Display`, `FromStr` and serde agree),
//! and every type derives a JSON Schema: the host generates docs/events.schema.json
//! and the server's OpenAPI document from them, and a test fails when the
//! checked-in copies are stale.
//!
//! - [`risk`]: how much harm an action could do ([`Risk`]);
//! - [`policy`]: what a workspace lets run ([`Profile`], [`SandboxMode`]);
//! - [`grant`]: what one command may do and who said so ([`Grant`]);
//! - [`usage`]: tokens and cost ([`Usage`], [`estimate_tokens`]);
//! - [`task`]: one unit of work and how it ended ([`TaskRequest`],
//!   [`FailureReason`], [`SkipReason`], [`TaskStatus`]...);
//! - [`event`]: what a run tells its frontends ([`Event`] in an [`Envelope`]).

#![warn(missing_docs)]

pub mod changes;
pub mod event;
pub mod grant;
pub mod network;
pub mod policy;
pub mod risk;
pub mod task;
pub mod usage;

mod names;

pub use changes::{ChangeKind, ChangeSetState, ChangedFile, EntryType};
pub use event::{Citation, Envelope, Event, EventSink, NullSink, PROTOCOL_VERSION, StepDecision};
pub use grant::{Grant, GrantSource};
pub use names::UnknownName;
pub use network::{ConnectProtocol, ConnectVerdict, DecidedBy};
pub use policy::{Profile, SandboxMode};
pub use risk::Risk;
pub use task::{
    FailureReason, PlanTask, SkipReason, TaskFailure, TaskOutcome, TaskRequest, TaskStatus,
    TaskSuccess,
};
pub use usage::{Usage, estimate_tokens, tokens_for_chars};

/// The JSON Schema of one event as it travels (an [`Envelope`]): what
/// docs/events.schema.json holds, generated from these types.
pub fn event_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Envelope)).unwrap_or_default()
}
