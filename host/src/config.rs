//! `capstan.toml` in the user's config dir: the model, run limits, prices,
//! approvals, per-workspace policy and the search index's analyzer. Plugin
//! entries (`[[plugin]]`) in the same file belong to the manifest module. Every
//! field has a default, so no file at all means: the offline model, the
//! `cautious` profile, no budget.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

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
    /// Reads and checks the user's capstan.toml (see [`crate::config_check`]): any
    /// problem, an unknown key included, is an error naming the line and the fix.
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let errors =
                    crate::config_check::check_text(&text, path, crate::config_check::Scope::User);
                if !errors.is_empty() {
                    return Err(crate::config_check::ConfigErrors(errors)).context(
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
