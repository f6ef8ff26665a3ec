//! The capability registry: task kind -> loaded plugin.
//!
//! Manifests are read in order (bundled, then the user's `capstan.toml`); a
//! later entry with the same plugin name replaces an earlier one. A
//! workspace's `capstan.toml` is never a source of plugins: any command that
//! may write the workspace could write that file, so an entry there (a new
//! plugin, a replacement with more host services or longer limits) would widen
//! what the user granted. Such entries are refused whole, each file with one
//! [`Problem`] saying where to move them.
//! Each entry loads on its own: a bad one becomes a [`Problem`] and the rest load.
//! Two plugins claiming one kind is a load error for the later one, and no plugin
//! may claim a retired writing-workflow kind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::manifest::{self, PluginSpec};
use crate::mcp::client::McpTool;
use crate::protocol::{FailureReason, TaskFailure};
use crate::runtime::{LoadedPlugin, Runtime};

/// Kinds of the retired writing workflow (seed 002). Tasks of these kinds fail
/// with `unsupported-legacy-capability` and no plugin is ever called for them.
const LEGACY_KINDS: &[&str] = &[
    "writer", "write", "writing", "draft", "drafter", "rewrite", "editor", "answer",
];

pub fn is_legacy_kind(kind: &str) -> bool {
    let k = kind.to_ascii_lowercase();
    LEGACY_KINDS.contains(&k.as_str())
        || k.starts_with("writing_")
        || k.starts_with("writer_")
        || k.starts_with("draft_")
}

/// Which manifests to read.
#[derive(Debug, Clone)]
pub struct ManifestSources {
    pub bundled: bool,
    /// The user's own manifests (their capstan.toml), trusted, in order.
    pub files: Vec<PathBuf>,
    /// The workspace's capstan.toml: its `[[plugin]]` entries are refused.
    pub workspace: Option<PathBuf>,
}

impl ManifestSources {
    /// Bundled plugins and the user's capstan.toml, with a workspace's
    /// capstan.toml checked for entries it may not hold.
    pub fn new(user_config: PathBuf, workspace: Option<&Path>) -> Self {
        Self {
            bundled: true,
            files: vec![user_config],
            workspace: workspace.map(|ws| ws.join("capstan.toml")),
        }
    }
}

/// The refusal of a workspace file's `[[plugin]]` entries, if it has any.
fn refuse_workspace_plugins(file: &Path, user_files: &[PathBuf]) -> Option<Problem> {
    let names = manifest::entry_labels(file);
    if names.is_empty() {
        return None;
    }
    let user = user_files
        .first()
        .map(|f| f.display().to_string())
        .unwrap_or_else(|| "the capstan.toml in your config dir".into());
    Some(Problem {
        plugin: None,
        message: format!(
            "{}: [[plugin]] {} ignored: a workspace's capstan.toml cannot add or replace plugins \
             (nor grant host services or limits); move the entry to your own capstan.toml ({user}) if you trust it",
            file.display(),
            names.join(", ")
        ),
    })
}

/// Something that kept a manifest entry or a plugin from loading.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Problem {
    /// The plugin's name, when the entry got that far.
    pub plugin: Option<String>,
    pub message: String,
}

#[derive(Default)]
pub struct Registry {
    plugins: Vec<Arc<LoadedPlugin>>,
    by_kind: BTreeMap<String, Arc<LoadedPlugin>>,
    /// Kinds whose plugin failed to load, with the reason: their tasks fail as
    /// `invalid-plugin`, not as an unknown kind.
    broken: BTreeMap<String, String>,
    problems: Vec<Problem>,
    /// Tools of external MCP servers, by kind (`mcp:<server>/<tool>`).
    mcp: BTreeMap<String, Arc<McpTool>>,
}

impl Registry {
    pub async fn load(runtime: &Runtime, sources: &ManifestSources) -> Self {
        let mut problems = Vec::new();
        let mut specs: Vec<PluginSpec> = Vec::new();
        let mut add = |found: Vec<PluginSpec>,
                       errors: Vec<manifest::ManifestError>,
                       problems: &mut Vec<Problem>| {
            problems.extend(errors.into_iter().map(|e| Problem {
                plugin: None,
                message: e.to_string(),
            }));
            for spec in found {
                specs.retain(|s| s.entry.name != spec.entry.name);
                specs.push(spec);
            }
        };
        if sources.bundled {
            let (found, errors) =
                manifest::parse(crate::bundled::MANIFEST, "bundled manifest", None);
            add(found, errors, &mut problems);
        }
        for file in &sources.files {
            let (found, errors) = manifest::load_file(file);
            add(found, errors, &mut problems);
        }
        if let Some(file) = &sources.workspace {
            problems.extend(refuse_workspace_plugins(file, &sources.files));
        }

        let mut registry = Registry {
            problems,
            ..Default::default()
        };
        for spec in specs {
            let name = spec.entry.name.clone();
            let kinds = spec.entry.kinds.clone();
            match runtime.load_spec(spec).await {
                Ok(plugin) => registry.admit(plugin),
                Err(e) => {
                    for kind in kinds {
                        registry.broken.insert(kind, e.to_string());
                    }
                    registry.problems.push(Problem {
                        plugin: Some(name),
                        message: e.to_string(),
                    });
                }
            }
        }
        registry
    }

    fn admit(&mut self, plugin: LoadedPlugin) {
        let refuse = |message: String| Problem {
            plugin: Some(plugin.name().to_string()),
            message,
        };
        for kind in &plugin.spec.entry.kinds {
            if is_legacy_kind(kind) {
                let p = refuse(format!(
                    "plugin `{}` claims `{kind}`, a retired writing-workflow kind; rename the kind",
                    plugin.name()
                ));
                self.problems.push(p);
                return;
            }
            if let Some(other) = self.by_kind.get(kind) {
                let p = refuse(format!(
                    "plugin `{}` ({}) claims kind `{kind}`, already served by plugin `{}` ({}); \
                     remove the kind from one of them or give the replacement the same name",
                    plugin.name(),
                    plugin.spec.origin,
                    other.name(),
                    other.spec.origin
                ));
                self.problems.push(p);
                return;
            }
        }
        let plugin = Arc::new(plugin);
        for kind in &plugin.spec.entry.kinds {
            self.by_kind.insert(kind.clone(), plugin.clone());
        }
        self.plugins.push(plugin);
    }

    /// The plugin serving `kind`, or the failure the task gets.
    pub fn resolve(&self, kind: &str) -> Result<&Arc<LoadedPlugin>, TaskFailure> {
        if is_legacy_kind(kind) {
            return Err(TaskFailure::new(
                FailureReason::UnsupportedLegacyCapability,
                format!(
                    "`{kind}` belongs to the retired writing workflow; no writing code path exists any more"
                ),
            ));
        }
        if let (None, Some(why)) = (self.by_kind.get(kind), self.broken.get(kind)) {
            return Err(TaskFailure::new(FailureReason::InvalidPlugin, why.clone()));
        }
        self.by_kind.get(kind).ok_or_else(|| {
            TaskFailure::new(
                FailureReason::UnsupportedCapability,
                format!(
                    "no capability serves kind `{kind}`; registered kinds: {}",
                    self.kinds().collect::<Vec<_>>().join(", ")
                ),
            )
        })
    }

    /// Whether a task of `kind` can run here (a plugin or an MCP tool), or the
    /// failure it gets.
    pub fn check(&self, kind: &str) -> Result<(), TaskFailure> {
        if self.mcp.contains_key(kind) {
            return Ok(());
        }
        self.resolve(kind).map(|_| ())
    }

    /// Add the tools of external MCP servers, and why any server is missing.
    pub fn add_mcp(&mut self, tools: Vec<Arc<McpTool>>, problems: Vec<Problem>) {
        self.problems.extend(problems);
        for tool in tools {
            self.mcp.insert(tool.kind().to_string(), tool);
        }
    }

    /// The external MCP tool serving `kind`, if it is one.
    pub fn mcp_tool(&self, kind: &str) -> Option<&Arc<McpTool>> {
        self.mcp.get(kind)
    }

    pub fn mcp_tools(&self) -> impl Iterator<Item = &Arc<McpTool>> {
        self.mcp.values()
    }

    pub fn plugins(&self) -> &[Arc<LoadedPlugin>] {
        &self.plugins
    }

    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.by_kind
            .keys()
            .chain(self.mcp.keys())
            .map(String::as_str)
    }

    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_kinds_are_recognised() {
        for k in [
            "writer",
            "Write",
            "draft",
            "writing_outline",
            "writer_review",
        ] {
            assert!(is_legacy_kind(k), "{k}");
        }
        for k in [
            "terminal_exec",
            "docx",
            "local_kb_retrieval",
            "rewriter_tool",
        ] {
            assert!(!is_legacy_kind(k), "{k}");
        }
    }
}
