//! `[[mcp_server]]` entries: external MCP servers whose tools become
//! capability kinds `mcp:<server>/<tool>` (see docs/MCP.md).

use std::collections::BTreeMap;

use capstan_policy::Risk;
use serde::Deserialize;

/// One `[[mcp_server]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    /// Names the kinds: `mcp:<name>/<tool>`.
    pub name: String,
    /// A program to spawn that speaks MCP on stdin/stdout.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// The spawned program's whole environment besides `PATH`, `LANG` and a
    /// private `HOME`: nothing else of Capstan's (model API keys, tokens)
    /// reaches it. A value `"$NAME"` passes Capstan's variable NAME on.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `false` must be written to say the server runs unconfined (shown by
    /// `capstan plugins list`). Today every spawned server gets the scrubbed
    /// environment and a private HOME; OS confinement of long-lived servers
    /// (crates/sandbox) is not built yet, see docs/MCP.md.
    #[serde(default)]
    pub sandbox: Option<bool>,
    /// A streamable HTTP endpoint instead of a command.
    #[serde(default)]
    pub url: Option<String>,
    /// An environment variable holding a bearer token for `url`.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// The risk every tool of this server is treated as.
    #[serde(default = "unknown_risk")]
    pub risk: Risk,
    /// Per-tool risk, overriding `risk`.
    #[serde(default)]
    pub tool_risk: BTreeMap<String, Risk>,
    /// Seconds one call may take before it fails as `timeout`.
    #[serde(default = "default_call_timeout")]
    pub timeout_secs: u64,
    /// Offer the workspace as the server's one MCP root. Servers that honour
    /// roots (the reference filesystem server) then serve that folder instead
    /// of the directories their args name; `false` keeps their args.
    #[serde(default = "offer_roots")]
    pub roots: bool,
    /// A started server is stopped after this many seconds without a call
    /// (the next call starts it again); `0` keeps it until Capstan exits.
    #[serde(default = "default_idle")]
    pub idle_secs: u64,
}

fn default_idle() -> u64 {
    600
}

fn offer_roots() -> bool {
    true
}

fn unknown_risk() -> Risk {
    Risk::Unknown
}

fn default_call_timeout() -> u64 {
    300
}
