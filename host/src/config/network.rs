//! `[network]` in the user's capstan.toml: the egress policy of sandboxed
//! commands. When a workspace has one (any allow, deny or preset, or
//! `ask = true`), its commands get no network but the egress proxy
//! (crates/egress), which decides each connection; without one the old
//! `[policy] network` switch holds (off, or the host's whole network).
//!
//! Only the user's own file is read for it: a workspace's capstan.toml can be
//! written by a command and must not widen its own network.
//!
//! ```toml
//! [network]
//! allow = ["api.github.com:443"]
//! presets = ["cargo", "npm"]
//! deny = ["*.evil.example"]
//! ask = true                      # unlisted hosts ask (else: denied, naming the rule to add)
//!
//! [network.workspace."/home/me/project"]
//! allow = ["pypi.internal.example"]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

/// `[network]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSection {
    /// Hosts commands may reach (`crates.io`, `*.npmjs.org`,
    /// `api.github.com:443`, `10.0.0.0/8`); ports 80 and 443 unless written.
    pub allow: Vec<String>,
    /// Hosts refused even when an allow rule or a person says yes.
    pub deny: Vec<String>,
    /// Named lists of package-registry hosts: `cargo`, `npm`, `pypi`, `debian`.
    pub presets: Vec<String>,
    /// Ask a person about hosts no rule names (else they are denied).
    pub ask: bool,
    /// Per-workspace additions: `[network.workspace."/path"] allow = [...]`.
    pub workspace: BTreeMap<PathBuf, WorkspaceNetwork>,
}

/// `[network.workspace."<root>"]`: rules added for that workspace.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceNetwork {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub presets: Vec<String>,
    /// `Some` overrides `[network] ask` for this workspace.
    pub ask: Option<bool>,
}

impl NetworkSection {
    /// Every rule and preset read, so a typo stops Capstan at start-up with
    /// the rule and what a rule looks like (never a policy silently off).
    pub fn check(&self) -> Result<()> {
        let all = std::iter::once((None, &self.allow, &self.deny, &self.presets)).chain(
            self.workspace
                .iter()
                .map(|(root, w)| (Some(root), &w.allow, &w.deny, &w.presets)),
        );
        for (root, allow, deny, presets) in all {
            capstan_egress::Policy::new(allow, deny, presets, false).map_err(|e| {
                let place = match root {
                    Some(r) => format!("[network.workspace.\"{}\"]", r.display()),
                    None => "[network]".into(),
                };
                anyhow::anyhow!("{place} in capstan.toml: {e}")
            })?;
        }
        Ok(())
    }

    /// The egress policy of commands in `workspace`, or `None` when neither
    /// `[network]` nor the workspace's entry sets one.
    pub fn policy_for(
        &self,
        workspace: Option<&Path>,
        home: Option<&Path>,
    ) -> Option<capstan_egress::Policy> {
        let mut allow = self.allow.clone();
        let mut deny = self.deny.clone();
        let mut presets = self.presets.clone();
        let mut ask = self.ask;
        if let Some(ws) = workspace {
            for (root, w) in &self.workspace {
                let root = match (root.strip_prefix("~"), home) {
                    (Ok(rest), Some(h)) => h.join(rest),
                    _ => root.clone(),
                };
                if root == ws || std::fs::canonicalize(&root).is_ok_and(|r| r == ws) {
                    allow.extend(w.allow.iter().cloned());
                    deny.extend(w.deny.iter().cloned());
                    presets.extend(w.presets.iter().cloned());
                    ask = w.ask.unwrap_or(ask);
                }
            }
        }
        if allow.is_empty() && deny.is_empty() && presets.is_empty() && !ask {
            return None;
        }
        // Checked at start-up (`check`); a rule that fails here anyway
        // denies everything rather than opening anything.
        Some(
            capstan_egress::Policy::new(&allow, &deny, &presets, ask).unwrap_or_else(|e| {
                tracing::error!("[network] policy unreadable, denying all: {e}");
                capstan_egress::Policy::default()
            }),
        )
    }
}
