//! The risk scale shared by the classifier, the policy and plugins.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How much harm running a command could do, from least to most severe.
///
/// The variants are declared in severity order and `Ord` is derived from that
/// order, so `max` over the parts of a command line gives the risk of the whole.
/// `Unknown` is deliberately the *highest* value: anything the classifier cannot
/// see through (interpreters, dynamic command names, parse failures) must never
/// be treated more leniently than a known-destructive command.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
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

impl Risk {
    /// Every risk, in ascending order of severity.
    pub const ALL: [Risk; 5] = [
        Risk::ReadOnly,
        Risk::Write,
        Risk::Delete,
        Risk::Network,
        Risk::Unknown,
    ];

    /// The snake_case name used in serialisation, `Display` and `FromStr`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Risk::ReadOnly => "read_only",
            Risk::Write => "write",
            Risk::Delete => "delete",
            Risk::Network => "network",
            Risk::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error returned when parsing a [`Risk`] from an unrecognised name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown risk level `{0}` (expected read_only, write, delete, network or unknown)")]
pub struct ParseRiskError(pub String);

impl FromStr for Risk {
    type Err = ParseRiskError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Risk::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| ParseRiskError(s.to_owned()))
    }
}

/// The risk to apply when a plugin declares its own risk for an action.
///
/// A plugin may only make things *stricter*: the result is the maximum of the
/// host's classification and the plugin's request, so a plugin claiming
/// `read_only` for a command the host classifies as `delete` still gets `delete`.
pub fn effective_risk(host: Risk, requested_by_plugin: Option<Risk>) -> Risk {
    requested_by_plugin.map_or(host, |p| host.max(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_is_by_severity() {
        for pair in Risk::ALL.windows(2) {
            assert!(pair[0] < pair[1], "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(Risk::Write.max(Risk::Unknown), Risk::Unknown);
    }

    #[test]
    fn names_round_trip() {
        for r in Risk::ALL {
            assert_eq!(r.to_string().parse::<Risk>().unwrap(), r);
        }
        assert!("readonly".parse::<Risk>().is_err());
    }

    #[test]
    fn plugins_can_only_tighten() {
        assert_eq!(
            effective_risk(Risk::Delete, Some(Risk::ReadOnly)),
            Risk::Delete
        );
        assert_eq!(
            effective_risk(Risk::ReadOnly, Some(Risk::Network)),
            Risk::Network
        );
        assert_eq!(effective_risk(Risk::Write, None), Risk::Write);
    }
}
