//! `capstan.toml` in the user's config dir: the model, run limits, prices,
//! approvals, per-workspace policy and the search index's analyzer. Plugin
//! entries (`[[plugin]]`) in the same file belong to the manifest module. Every
//! field has a default, so no file at all means: the offline model, the
//! `cautious` profile, no budget.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, Default)]
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
    pub server: ServerSection,
}

/// `[server]`: the doors of `capstan serve` and `capstan mcp --listen`
/// (docs/ARCHITECTURE.md, security model). Flags add to the lists and
/// override the caps.
#[derive(Debug, Clone, Deserialize)]
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
}

impl Default for ServerSection {
    fn default() -> Self {
        let limits = crate::server::runs::StreamLimits::default();
        Self {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_streams: limits.total,
            max_streams_per_run: limits.per_run,
        }
    }
}

/// `[index]`: how workspace search indexes are built.
#[derive(Debug, Clone, Deserialize, Default)]
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

#[derive(Debug, Clone, Deserialize)]
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

#[derive(Debug, Clone, Deserialize)]
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
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text)
                .with_context(|| format!("{} is not a valid Capstan config", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }
}
