//! The risk scale shared by the classifier, the policy, plugins and frontends.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::names;

/// How much harm running a command (or an operation) could do, from least to
/// most severe.
///
/// The variants are declared in severity order and `Ord` is derived from that
/// order, so `max` over the parts of a command line gives the risk of the whole.
/// `Unknown` is deliberately the *highest* value: anything the classifier cannot
/// see through (interpreters, dynamic command names, parse failures) must never
/// be treated more leniently than a known-destructive command.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    Default,
    JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Only reads files or prints; changes nothing on disk or elsewhere.
    ReadOnly,
    /// Creates or modifies files (or other local state) without deleting them.
    Write,
    /// Deletes files, branches or other data, or discards uncommitted work.
    Delete,
    /// Reaches the network (downloads, uploads, remote git operations).
    Network,
    /// Could do anything: arbitrary code, dynamic commands, unparseable input.
    #[default]
    Unknown,
}

names!(Risk, "risk level", {
    ReadOnly => "read_only",
    Write => "write",
    Delete => "delete",
    Network => "network",
    Unknown => "unknown",
});

impl Risk {
    /// The risk to apply when a plugin declares its own risk for an action.
    ///
    /// A plugin may only make things *stricter*: the result is the maximum of
    /// the host's classification and the plugin's request, so a plugin claiming
    /// `read_only` for a command the host classifies as `delete` still gets
    /// `delete`.
    pub fn at_least(self, requested_by_plugin: Option<Risk>) -> Risk {
        requested_by_plugin.map_or(self, |p| self.max(p))
    }
}
