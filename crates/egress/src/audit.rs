//! The audit record: one per connection the proxy was asked for, allowed or not.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

pub use capstan_protocol::{ConnectProtocol as Protocol, ConnectVerdict as Verdict, DecidedBy};

/// One connection, as the audit log and the `network.connect` event carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectionRecord {
    /// The host as the command named it (a name, or an IP literal).
    pub host: String,
    /// The destination port.
    pub port: u16,
    /// How the command spoke to the proxy.
    pub protocol: Protocol,
    /// Whether the checks let it through.
    pub verdict: Verdict,
    /// What settled the verdict (policy, session grant, person, default).
    pub decided_by: DecidedBy,
    /// The rule that decided, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Why it was denied, or why an allowed connection failed, as a sentence
    /// that names the rule to add where one would help.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The header of the brokered credential the proxy set on the requests
    /// of this connection (the name, never the value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// The checked address the proxy connected to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<SocketAddr>,
    /// Bytes from the command to the host.
    pub bytes_up: u64,
    /// Bytes from the host to the command.
    pub bytes_down: u64,
    /// From the request to the end of the connection.
    #[serde(serialize_with = "millis")]
    pub duration: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// Where records go (an event log, a database, a test's vector).
pub trait Audit: Send + Sync + 'static {
    /// Takes one record, sent when its connection ends; must not block.
    fn record(&self, record: ConnectionRecord);
}

impl<F: Fn(ConnectionRecord) + Send + Sync + 'static> Audit for F {
    fn record(&self, record: ConnectionRecord) {
        self(record)
    }
}

/// Drops every record (the default when nobody listens), after logging it at
/// debug level.
pub(crate) struct LogOnly;

impl Audit for LogOnly {
    fn record(&self, r: ConnectionRecord) {
        tracing::debug!(target: "capstan_egress", host = %r.host, port = r.port, verdict = ?r.verdict, "connection");
    }
}
