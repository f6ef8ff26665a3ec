//! `capstan.toml` in the user's config dir: the model, run limits, prices,
//! approvals, per-workspace policy and the search index's analyzer. Plugin
//! entries (`[[plugin]]`) in the same file belong to the manifest module. Every
//! field has a default, so no file at all means: the offline model, the
//! `cautious` profile, no budget.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

pub mod changes;
pub mod check;
mod mcp_server;
pub mod network;
pub mod network_always;
pub mod network_report;
pub mod store;

pub use mcp_server::{McpServerEntry, WorkspaceAccess};

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default)]
pub struct Config {
    /// `[model]`: which model the host loop uses. Absent: the offline model.
    pub model: Option<capstan_models::ProviderConfig>,
    pub run: RunSection,
    /// `[prices]`: "model-id-or-prefix" = { input = USD per 1M, output = ... },
    /// merged over the built-in table.
    pub prices: Option<capstan_models::PriceTable>,
    pub approval: ApprovalSection,
    /// `[policy]`: defaults for every workspace (a workspace's own profile, set
    /// with `capstan workspace add --profile`, wins over `profile` here).
    pub policy: capstan_policy::Policy,
    /// `[agents]`: runtimes for `capstan agent run` (docs/AGENTS.md).
    pub agents: Option<capstan_agents::AgentsConfig>,
    pub index: IndexSection,
    /// `[sandbox]`: limits and extra read paths of sandboxed commands.
    pub sandbox: SandboxSection,
    /// `[network]`: the egress policy of sandboxed commands (config::network).
    pub network: network::NetworkSection,
    pub server: ServerSection,
    /// `[changes]`: capture, review and undo of workspace changes.
    pub changes: changes::ChangesSection,
    /// `[store]`: the database (SQLite file, or PostgreSQL for replicas).
    pub store: store::StoreSection,
}

/// `[sandbox]`: what every sandboxed command gets (docs/ARCHITECTURE.md,
/// security model). Only the user's own capstan.toml is read for it: a
/// workspace's file could be written by a command, and must not widen its own
/// sandbox.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSection {
    /// Memory of one command and everything it starts, in MiB (a memory
    /// cgroup; `RLIMIT_AS` per process where none can be made). Files in the
    /// private /tmp and writes not yet copied back count too. 0: no limit.
    pub memory_mb: u64,
    /// Size of the command's private /tmp, in MiB.
    pub tmp_mb: u64,
    /// Bytes one command may write to the workspace in total, in MiB (every
    /// file it creates or changes counts whole). 0: no quota, writes go
    /// straight to the workspace.
    pub write_quota_mb: u64,
    /// Extra paths every command may read (and execute), read-only. `~/` is
    /// the home directory. None may contain Capstan's own directories.
    pub read: Vec<PathBuf>,
    /// Per-workspace additions: `[sandbox.workspace."/path/to/ws"] read = [...]`.
    pub workspace: BTreeMap<PathBuf, WorkspaceSandbox>,
}

impl Default for SandboxSection {
    fn default() -> Self {
        Self {
            memory_mb: capstan_sandbox::DEFAULT_MEMORY >> 20,
            tmp_mb: capstan_sandbox::DEFAULT_TMP_SIZE >> 20,
            write_quota_mb: capstan_sandbox::DEFAULT_WRITE_QUOTA >> 20,
            read: Vec::new(),
            workspace: BTreeMap::new(),
        }
    }
}

/// `[sandbox.workspace."<root>"]`: what commands in that workspace get on top
/// of `[sandbox]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceSandbox {
    /// Extra read-only paths for this workspace only.
    pub read: Vec<PathBuf>,
}

/// The sandbox settings of commands in one workspace, resolved from `[sandbox]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    pub limits: capstan_sandbox::Limits,
    pub read: Vec<PathBuf>,
    /// The egress policy (`[network]`): `Some` sends the command's network
    /// through the egress proxy.
    pub network: Option<network::CommandNetwork>,
}

impl SandboxSection {
    /// The limits of a sandboxed `[[mcp_server]]` process: the memory and
    /// `/tmp` size every command gets; no write quota (a long-lived
    /// server's workspace writes land at once).
    pub fn mcp_server_limits(&self) -> capstan_sandbox::Limits {
        capstan_sandbox::Limits {
            workspace_write_quota: None,
            ..self.settings_for(None, None).limits
        }
    }

    /// The settings for commands in `workspace` (canonical root, or `None`),
    /// with `~/` expanded against `home`.
    pub fn settings_for(&self, workspace: Option<&Path>, home: Option<&Path>) -> SandboxSettings {
        let mb = |v: u64| (v > 0).then_some(v << 20);
        let limits = capstan_sandbox::Limits {
            max_memory: mb(self.memory_mb),
            tmp_size: self.tmp_mb.max(1) << 20,
            workspace_write_quota: mb(self.write_quota_mb),
            ..capstan_sandbox::Limits::default()
        };
        let per_workspace = workspace.into_iter().flat_map(|ws| {
            self.workspace
                .iter()
                .filter(move |(root, _)| {
                    let root = expand_home(root, home);
                    root == ws || std::fs::canonicalize(&root).is_ok_and(|r| r == ws)
                })
                .flat_map(|(_, w)| w.read.iter())
        });
        let read = self
            .read
            .iter()
            .chain(per_workspace)
            .map(|p| expand_home(p, home))
            .collect();
        SandboxSettings {
            limits,
            read,
            network: None,
        }
    }

    /// Refuses read paths that would show a command Capstan's own state
    /// (`protected`: config, data and cache dirs), or that are not absolute.
    pub fn check(&self, protected: &[PathBuf], home: Option<&Path>) -> Result<()> {
        let all = self
            .read
            .iter()
            .chain(self.workspace.values().flat_map(|w| w.read.iter()));
        for p in all {
            let path = expand_home(p, home);
            if !path.is_absolute() {
                anyhow::bail!(
                    "[sandbox] read: {} is not an absolute path; write it as /... or ~/...",
                    p.display()
                );
            }
            let real = std::fs::canonicalize(&path).unwrap_or(path.clone());
            for dir in protected {
                let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
                if dir.starts_with(&real) || real.starts_with(&dir) {
                    anyhow::bail!(
                        "[sandbox] read: {} would let commands read Capstan's own directory {}; \
                         list a narrower path",
                        p.display(),
                        dir.display()
                    );
                }
            }
        }
        Ok(())
    }
}

/// `~/x` against `home`; anything else unchanged.
fn expand_home(p: &Path, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~"), home) {
        (Ok(rest), Some(h)) => h.join(rest),
        _ => p.to_path_buf(),
    }
}

/// `[server]`: the doors of `capstan serve` and `capstan mcp --listen`
/// (docs/ARCHITECTURE.md, security model). Flags add to the lists and
/// override the caps.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Extra names the server answers to in `Host` (`name` or `name:port`),
    /// besides its bound address and `localhost`.
    pub allowed_hosts: Vec<String>,
    /// Extra origins whose pages may call the server (`https://app.example.com`).
    pub allowed_origins: Vec<String>,
    /// Event streams (SSE, AG-UI) open at once, over all runs.
    pub max_streams: usize,
    /// Event streams open at once on one run.
    pub max_streams_per_run: usize,
    /// `[[server.user]]`: people (or programs) with tokens of their own and
    /// limits on their runs.
    #[serde(rename = "user", skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<ServerUser>,
}

/// `[[server.user]]`: a token of its own for `capstan serve`, and limits on
/// the runs started with it, counted in the database so they hold across
/// replicas. The server's own token (`--token`) has no limits. The token is
/// never written in capstan.toml: it comes from an environment variable or
/// a file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerUser {
    /// The name runs are recorded under and errors name.
    pub name: String,
    /// The environment variable holding the user's token.
    pub token_env: Option<String>,
    /// A file holding the user's token (its first line); `~/` is the home
    /// directory.
    pub token_file: Option<PathBuf>,
    /// Runs of this user in flight at once.
    pub max_runs: Option<u32>,
    /// Runs this user may start in any 60 seconds.
    pub runs_per_minute: Option<u32>,
    /// Model tokens (input and output) this user's runs may use in any
    /// 24 hours.
    pub tokens_per_day: Option<u64>,
    /// USD this user's runs may cost in any 24 hours (models with a price).
    pub usd_per_day: Option<f64>,
}

impl ServerUser {
    /// The user's limits, as the store checks them.
    pub fn quota(&self) -> capstan_store::Quota {
        capstan_store::Quota {
            user: self.name.clone(),
            max_running: self.max_runs,
            max_per_minute: self.runs_per_minute,
            max_tokens_per_day: self.tokens_per_day,
            max_cost_per_day: self.usd_per_day,
        }
    }

    /// The user's token, read from where the entry says; errors name the
    /// entry and what to do.
    pub fn token(&self, home: Option<&Path>) -> Result<String> {
        let who = format!("[[server.user]] `{}`", self.name);
        let token = match (&self.token_env, &self.token_file) {
            (Some(var), None) => std::env::var(var).map_err(|_| {
                anyhow::anyhow!(
                    "{who}: the environment variable {var} (its `token_env`) is not set; \
                     export it with the user's token before starting the server"
                )
            })?,
            (None, Some(file)) => {
                let path = expand_home(file, home);
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    anyhow::anyhow!(
                        "{who}: cannot read its `token_file` {}: {e}; write the user's token \
                         there (one line)",
                        path.display()
                    )
                })?;
                text.lines().next().unwrap_or("").to_string()
            }
            _ => anyhow::bail!(
                "{who}: give exactly one of `token_env` (an environment variable holding the \
                 token) or `token_file` (a file holding it); tokens are not written in capstan.toml"
            ),
        };
        let token = token.trim().to_string();
        if token.len() < 16 {
            anyhow::bail!(
                "{who}: its token is {} characters long; use at least 16 random characters \
                 (e.g. `openssl rand -hex 32`)",
                token.len()
            );
        }
        Ok(token)
    }
}

/// Event streams open at once over all runs, unless `[server] max_streams` says.
pub const DEFAULT_MAX_STREAMS: usize = 256;
/// Event streams open at once on one run, unless `[server] max_streams_per_run` says.
pub const DEFAULT_MAX_STREAMS_PER_RUN: usize = 16;

impl Default for ServerSection {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_streams: DEFAULT_MAX_STREAMS,
            max_streams_per_run: DEFAULT_MAX_STREAMS_PER_RUN,
            users: Vec::new(),
        }
    }
}

/// `[index]`: how workspace search indexes are built.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct IndexSection {
    /// `"english"` (default: stop words dropped, words stemmed, best for prose
    /// questions) or `"simple"` (lowercased exact words, e.g. for code or other
    /// languages). Changing it rebuilds each index on its next use.
    pub analyzer: capstan_index::Analyzer,
}

impl IndexSection {
    pub fn options(&self) -> capstan_index::IndexOptions {
        capstan_index::IndexOptions {
            analyzer: self.analyzer,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSection {
    pub max_retrievals: u32,
    pub history_turns: usize,
    pub max_parallel: usize,
    pub budget_usd: Option<f64>,
    pub budget_tokens: Option<u64>,
    pub session_budget_usd: Option<f64>,
}

impl Default for RunSection {
    fn default() -> Self {
        Self {
            max_retrievals: 3,
            history_turns: 8,
            max_parallel: 4,
            budget_usd: None,
            budget_tokens: None,
            session_budget_usd: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalSection {
    /// Seconds an approval waits for an answer before it expires (denied).
    pub timeout_secs: u64,
}

impl Default for ApprovalSection {
    fn default() -> Self {
        Self { timeout_secs: 600 }
    }
}

impl Config {
    /// The profile a registered workspace runs under: the one chosen for it
    /// (`capstan workspace add --profile`), else `[policy] profile`.
    pub fn profile_for(&self, ws: &capstan_store::Workspace) -> capstan_policy::Profile {
        use capstan_policy::Profile as P;
        use capstan_store::Profile as S;
        match ws.policy_profile {
            None => self.policy.profile,
            Some(S::Cautious) => P::Cautious,
            Some(S::Trusted) => P::Trusted,
            Some(S::Locked) => P::Locked,
        }
    }

    /// The workspace as clients see it: its profile is the one in force
    /// ([`Self::profile_for`]), never "none".
    pub fn with_profile_in_force(&self, ws: capstan_store::Workspace) -> capstan_store::Workspace {
        use capstan_policy::Profile as P;
        use capstan_store::Profile as S;
        let profile = match self.profile_for(&ws) {
            P::Cautious => S::Cautious,
            P::Trusted => S::Trusted,
            P::Locked => S::Locked,
        };
        capstan_store::Workspace {
            policy_profile: Some(profile),
            ..ws
        }
    }

    /// Reads and checks the user's capstan.toml (see [`crate::config::check`]): any
    /// problem, an unknown key included, is an error naming the line and the fix.
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let errors = crate::config::check::check_text(
                    &text,
                    path,
                    crate::config::check::Scope::User,
                );
                if !errors.is_empty() {
                    return Err(crate::config::check::ConfigErrors(errors)).context(
                        "your capstan.toml has problems (`capstan config check` lists them)",
                    );
                }
                toml::from_str(&text)
                    .with_context(|| format!("{} is not a valid Capstan config", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }
}
