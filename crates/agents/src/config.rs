//! `[agents]` in capstan.toml: how each runtime is reached, limits, prices.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Every field has a default, so no `[agents]` section at all works (with `claude` and
/// `opencode serve` found on PATH / at their default address).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentsConfig {
    /// Most tasks running at once under `parallel` (a task file may lower or raise it).
    pub max_parallel: usize,
    /// Prompt size limit in (estimated) tokens; larger prompts are cut to fit, keeping
    /// the role and the task whole (see [`crate::context`]).
    pub context_tokens: u64,
    /// How a prompt over `context_tokens` is made to fit.
    pub context: ContextMode,
    /// Output tokens assumed for a step that has not run yet, to warn before a budget
    /// would be exceeded.
    pub expected_output_tokens: u64,
    /// Default skills directory, relative to the workspace.
    pub skills_dir: PathBuf,
    /// `[agents.claude]`: how Claude Code is run.
    pub claude: ClaudeConfig,
    /// `[agents.opencode]`: how the OpenCode server is reached.
    pub opencode: OpenCodeConfig,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        Self {
            max_parallel: 4,
            context_tokens: 150_000,
            context: ContextMode::Truncate,
            expected_output_tokens: 2_000,
            skills_dir: PathBuf::from(".capstan/skills"),
            claude: ClaudeConfig::default(),
            opencode: OpenCodeConfig::default(),
        }
    }
}

/// How a prompt over the context limit is made to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextMode {
    /// Cut the sections (head and tail kept): free, and nothing is spent behind the
    /// user's back. The default.
    Truncate,
    /// Have the configured `[model]` summarise the sections that do not fit: a step of
    /// its own, counted in the budget. Falls back to cutting what is still too long.
    #[serde(alias = "summarize")]
    Summarise,
}

/// `[agents.claude]`: the Claude Code runtime, run headless as a child process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClaudeConfig {
    /// The Claude Code executable (a name on PATH or a path).
    pub command: String,
    /// `--model` (else Claude Code's own default).
    pub model: Option<String>,
    /// Seconds without a line from Claude Code before it is considered hung and killed.
    pub idle_timeout_secs: u64,
    /// Give Claude Code Capstan's capabilities as MCP tools (`capstan mcp`).
    pub mcp: bool,
    /// `--permission-mode` for the headless run: `default` or `dontAsk` (the modes that
    /// approve nothing by themselves). Any other mode is refused unless
    /// `unconfined_builtin_tools` is set.
    pub permission_mode: String,
    /// Extra arguments, appended as given. Only options that cannot give Claude Code
    /// tools or permissions are accepted (see [`crate::runner::ClaudeRunner`]); any other
    /// is refused unless `unconfined_builtin_tools` is set.
    pub extra_args: Vec<String>,
    /// DANGEROUS. Leave Claude Code's own built-in tools (Bash, Read, Write, Edit, Agent,
    /// WebFetch, ...) on, and accept any `permission_mode` and `extra_args`. Those tools
    /// run on the host, outside Capstan's sandbox, policy, approvals and event log.
    /// Off (the default), Claude Code starts with `--tools ""` and acts only through
    /// Capstan's MCP tools. Every run with it on reports a `security.warning` event and
    /// `capstan doctor` warns.
    pub unconfined_builtin_tools: bool,
    /// Extra environment for the child (e.g. `ANTHROPIC_BASE_URL` for a gateway).
    /// Values are passed as given: put no secret in a shared config file.
    pub env: BTreeMap<String, String>,
}

impl Default for ClaudeConfig {
    fn default() -> Self {
        Self {
            command: "claude".into(),
            model: None,
            idle_timeout_secs: 300,
            mcp: true,
            permission_mode: "default".into(),
            extra_args: Vec::new(),
            unconfined_builtin_tools: false,
            env: BTreeMap::new(),
        }
    }
}

/// `[agents.opencode]`: the OpenCode runtime, an `opencode serve` reached over HTTP.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenCodeConfig {
    /// Where `opencode serve` listens.
    pub url: String,
    /// Env var holding the server password (`OPENCODE_SERVER_PASSWORD` on the server
    /// side): sent as HTTP basic auth with `username`.
    pub password_env: Option<String>,
    /// Basic-auth user name sent with the password (default `opencode`).
    pub username: String,
    /// Env var holding a bearer token, for a server behind an authenticating proxy.
    pub api_key_env: Option<String>,
    /// OpenCode provider id (e.g. `zhipuai`, `moonshotai`, or one defined in
    /// opencode.json) and model id, passed with every prompt. Unset: the server's default.
    pub provider: Option<String>,
    /// Model id within `provider`; unset: the server's default.
    pub model: Option<String>,
    /// OpenCode agent (`build`, `plan`, ...). Unset: the server's default.
    pub agent: Option<String>,
    /// Seconds without an event from the server before the step is abandoned.
    pub idle_timeout_secs: u64,
    /// When the server cannot be reached, run `opencode` tasks on Claude Code instead
    /// (with a `runtime.fallback` event).
    pub fallback_to_claude: bool,
    /// Give OpenCode Capstan's capabilities as MCP tools: Capstan registers `capstan mcp`
    /// on the server (`POST /mcp`, server name `capstan`, tools `capstan_*`).
    pub mcp: bool,
    /// DANGEROUS. Leave OpenCode's built-in tools (bash, read, edit, write, webfetch,
    /// task, ...) on in the sessions Capstan creates. They run where the server runs,
    /// outside Capstan's sandbox, policy and approvals. Off (the default), each session
    /// is created with permission rules denying every tool but `capstan_*`.
    pub unconfined_builtin_tools: bool,
}

impl Default for OpenCodeConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:4096".into(),
            password_env: None,
            username: "opencode".into(),
            api_key_env: None,
            provider: None,
            model: None,
            agent: None,
            idle_timeout_secs: 300,
            fallback_to_claude: true,
            mcp: true,
            unconfined_builtin_tools: false,
        }
    }
}
