//! Asking a person about a host no rule names.

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;

/// What a person answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Refuse this connection (the next one asks again).
    Deny,
    /// This connection only.
    Once,
    /// Every connection to this host and port until the proxy stops.
    Session,
    /// Every connection from now on: the hook writes [`Ask::rule`] into the
    /// workspace's policy; the proxy also keeps it for this session.
    Always,
}

/// The question: a command wants `host:port`, which no rule names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ask {
    /// The host as the command named it (a name or an IP literal).
    pub host: String,
    /// The destination port.
    pub port: u16,
    /// The allow rule that would cover it (what "always" writes).
    pub rule: String,
}

/// The host's way to ask a person (the approval broker). Called only when the
/// policy has `ask = true`; without a hook an unlisted host is denied.
pub trait DecisionHook: Send + Sync + 'static {
    /// Asks and resolves to the answer; the connection waits meanwhile.
    fn decide(&self, ask: Ask) -> Pin<Box<dyn Future<Output = Decision> + Send + 'static>>;
}

impl<F, Fut> DecisionHook for F
where
    F: Fn(Ask) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Decision> + Send + 'static,
{
    fn decide(&self, ask: Ask) -> Pin<Box<dyn Future<Output = Decision> + Send + 'static>> {
        Box::pin(self(ask))
    }
}
