//! The closed sets of a `network.connect` event: how a sandboxed command
//! asked the egress proxy for a connection, what was decided and by whom.
//! The proxy (crates/egress) records them; every frontend shows them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::names;

/// How the command asked for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConnectProtocol {
    /// `CONNECT host:port` (HTTPS and any other TCP through an HTTP proxy).
    Connect,
    /// A plain-HTTP request forwarded by the proxy (`GET http://host/...`).
    Http,
    /// A SOCKS5 `CONNECT`.
    Socks5,
}

names!(ConnectProtocol, "connection protocol", {
    Connect => "connect",
    Http => "http",
    Socks5 => "socks5",
});

/// The outcome of the proxy's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConnectVerdict {
    /// The proxy let the connection through.
    Allowed,
    /// The proxy refused it; the command saw a refusal.
    Denied,
}

names!(ConnectVerdict, "connection verdict", {
    Allowed => "allowed",
    Denied => "denied",
});

/// Who decided a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// An allow or deny rule of the policy (or a special-address refusal).
    Policy,
    /// A grant made earlier in this session (a person's "for this session"
    /// or "always").
    Session,
    /// A person, asked just now.
    Person,
    /// Nobody could be asked: an unlisted host is denied.
    Default,
}

names!(DecidedBy, "decider", {
    Policy => "policy",
    Session => "session",
    Person => "person",
    Default => "default",
});
