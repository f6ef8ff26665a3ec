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
    /// A `command` server runs in the OS sandbox (crates/sandbox) unless
    /// `false` is written here (shown as NOT sandboxed by `capstan plugins
    /// list`). See docs/MCP.md, "Sandboxed servers".
    #[serde(default)]
    pub sandbox: Option<bool>,
    /// What a sandboxed server sees of the workspace: `none` (the default),
    /// `read` or `write`.
    #[serde(default)]
    pub workspace: WorkspaceAccess,
    /// Hosts a sandboxed server may reach through the egress proxy (rules
    /// as in `[network] allow`: `"api.example.com"`, `"*.example.com"`,
    /// `"127.0.0.1:8080"`); empty with no `network_presets`: no network.
    #[serde(default)]
    pub network: Vec<String>,
    /// Presets of `[network]` (`cargo`, `npm`, `pypi`, `debian`) added to
    /// `network`.
    #[serde(default)]
    pub network_presets: Vec<String>,
    /// Extra host paths a sandboxed server may read (and execute), e.g. the
    /// directory its script and `node_modules` live in. Absolute.
    #[serde(default)]
    pub read: Vec<std::path::PathBuf>,
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

/// What a sandboxed `[[mcp_server]]` sees of the workspace it serves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceAccess {
    /// Not there at all: the server works in an empty private directory.
    #[default]
    None,
    /// Visible at its real path, read-only; the server's working directory.
    Read,
    /// Visible and writable (writes land at once, not captured as a change
    /// set); the server's working directory.
    Write,
}

impl WorkspaceAccess {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceAccess::None => "none",
            WorkspaceAccess::Read => "read",
            WorkspaceAccess::Write => "write",
        }
    }
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
