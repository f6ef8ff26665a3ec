//! What a command may do when it runs, and who said so. The classifier only
//! decides whether to ask; the sandbox enforces exactly the [`Grant`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::names;
use crate::risk::Risk;

/// Who granted a command what it may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrantSource {
    /// Nobody: the command was judged read-only and ran unasked, so it got
    /// the least there is (a read-only workspace, no network, no credentials).
    None,
    /// The workspace profile's standing rule (`trusted` runs writes unasked).
    Profile,
    /// An `allow` rule of the policy (written by the user, or chosen with
    /// "always for this workspace").
    AllowRule,
    /// A person's "for this session" answer to the same command earlier.
    Session,
    /// A person's answer to this command's approval.
    Approval,
    /// `--approve all` (or `--yes`) on the command line.
    Flag,
}

names!(GrantSource, "grant source", {
    None => "none",
    Profile => "profile",
    AllowRule => "allow_rule",
    Session => "session",
    Approval => "approval",
    Flag => "flag",
});

/// What a command was granted. The sandbox gives it exactly this: a
/// read-only workspace unless `write`, no network (not even allowlisted hosts,
/// not brokered credentials) unless `network`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Grant {
    /// Who granted it.
    pub source: GrantSource,
    /// The workspace is writable.
    pub write: bool,
    /// The network as the user allowed it (`[policy] network`, or the
    /// `[network]` rules and credentials through the egress proxy).
    pub network: bool,
}

impl Grant {
    /// Nothing granted: what a command judged read-only gets.
    pub const NONE: Grant = Grant {
        source: GrantSource::None,
        write: false,
        network: false,
    };

    /// The grant a command gets when `source` let it run at `risk`: what that
    /// risk needs and nothing more. A write or a delete gets the workspace;
    /// network and unknown get the network too (a download may write its
    /// file). A read-only risk gets nothing, whoever let it run.
    pub fn for_risk(source: GrantSource, risk: Risk) -> Grant {
        if risk == Risk::ReadOnly {
            return Grant {
                source,
                ..Grant::NONE
            };
        }
        Grant {
            source,
            write: true,
            network: risk >= Risk::Network,
        }
    }

    /// A short phrase for people: `read-only workspace, no network (nothing
    /// granted)`.
    pub fn describe(&self) -> String {
        let workspace = if self.write {
            "writable workspace"
        } else {
            "read-only workspace"
        };
        let network = if self.network {
            "network"
        } else {
            "no network"
        };
        let by = match self.source {
            GrantSource::None => "nothing granted",
            GrantSource::Profile => "granted by the profile",
            GrantSource::AllowRule => "granted by an allow rule",
            GrantSource::Session => "granted for this session",
            GrantSource::Approval => "granted by approval",
            GrantSource::Flag => "granted by --approve all",
        };
        format!("{workspace}, {network} ({by})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_follows_the_risk_it_was_given_at_and_read_only_gets_nothing() {
        for source in GrantSource::ALL {
            let g = Grant::for_risk(source, Risk::ReadOnly);
            assert!(!g.write && !g.network, "{source}");
            let g = Grant::for_risk(source, Risk::Write);
            assert!(g.write && !g.network);
            let g = Grant::for_risk(source, Risk::Delete);
            assert!(g.write && !g.network);
            let g = Grant::for_risk(source, Risk::Network);
            assert!(g.write && g.network);
            let g = Grant::for_risk(source, Risk::Unknown);
            assert!(g.write && g.network);
        }
        assert_eq!(
            Grant::NONE.describe(),
            "read-only workspace, no network (nothing granted)"
        );
    }
}
