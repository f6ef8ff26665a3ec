//! The capability registry: task kind -> plugin.
//!
//! Manifests are read in order (bundled, then the user's `capstan.toml`); a
//! later entry with the same plugin name replaces an earlier one. A
//! workspace's `capstan.toml` is never a source of plugins: any command that
//! may write the workspace could write that file, so an entry there (a new
//! plugin, a replacement with more host services or longer limits) would widen
//! what the user granted. Such entries are refused whole, each file with one
//! [`Problem`] saying where to move them.
//! Kinds are routed by what the manifest declares: two entries claiming one kind is
//! a problem for the later one, and no entry may claim a retired writing-workflow kind.
//!
//! Plugins load lazily: a component is compiled (or taken from the compiled cache)
//! the first time a task needs it, so a question on a fresh home compiles the
//! retrieval plugin and nothing else. [`Registry::load`] and [`Registry::load_all`]
//! load everything (listing, checking, serving as MCP tools, planning with a model
//! that reads operation schemas). Each plugin loads on its own: a bad one becomes a
//! [`Problem`] and its tasks fail as `invalid-plugin`; the rest load.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::plugins::manifest::{self, PluginSpec};
use capstan_policy::Risk;

use crate::plugins::context::RunContext;
use crate::plugins::runtime::{LoadedPlugin, Runtime};
use capstan_protocol::{Event, EventSink, FailureReason, TaskFailure, TaskOutcome, TaskRequest};

/// Kinds of the retired writing workflow. Tasks of these kinds fail
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

/// The origin of the bundled manifest's entries ([`PluginSpec::origin`]).
pub const BUNDLED_ORIGIN: &str = "bundled manifest";

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

/// One admitted manifest entry and, once loaded, its plugin (or why it failed).
struct Entry {
    spec: PluginSpec,
    loaded: tokio::sync::OnceCell<Result<Arc<LoadedPlugin>, String>>,
}

#[derive(Default)]
pub struct Registry {
    entries: Vec<Arc<Entry>>,
    by_kind: BTreeMap<String, Arc<Entry>>,
    problems: Mutex<Vec<Problem>>,
    /// Capabilities outside the wasm runtime (tools of external MCP servers),
    /// by kind (`mcp:<server>/<tool>`).
    external: BTreeMap<String, Arc<dyn ExternalTool>>,
}

/// A capability served outside the wasm runtime: a tool of an external MCP
/// server ([`crate::plugins::mcp_client`]). The registry holds such tools only
/// through this trait, so it never depends on where they come from. An
/// external tool has one operation and declares no risk Capstan could trust:
/// [`ExternalTool::risk`] is what its configuration says.
#[async_trait::async_trait]
pub trait ExternalTool: Send + Sync {
    /// The capability kind it serves.
    fn kind(&self) -> &str;
    /// Who answers for it (the server's configured name), for approvals and messages.
    fn owner(&self) -> &str;
    /// The risk its configuration gives it.
    fn risk(&self) -> Risk;
    /// What it does, for the planner.
    fn description(&self) -> &str;
    /// The JSON Schema of its input.
    fn input_schema(&self) -> &serde_json::Value;
    /// The name of its one operation.
    fn operation(&self) -> &'static str;
    /// Runs it with the task's input.
    async fn call(&self, task: &TaskRequest, run: &RunContext) -> TaskOutcome;
}

/// Where the "preparing capabilities" lines go while components compile.
pub type Progress<'a> = Option<&'a dyn EventSink>;

fn activity(kind: &str, message: String) -> Event {
    Event::Activity {
        task_id: None,
        kind: kind.into(),
        message,
        data: serde_json::Value::Null,
    }
}

impl Registry {
    /// Reads the manifests and loads every plugin now.
    pub async fn load(runtime: &Runtime, sources: &ManifestSources) -> Self {
        let registry = Self::lazy(sources);
        registry.load_all(runtime, None).await;
        registry
    }

    /// Reads the manifests; plugins load when first needed.
    pub fn lazy(sources: &ManifestSources) -> Self {
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
            let (found, errors) = bundled_specs().clone();
            add(found, errors, &mut problems);
        }
        for file in &sources.files {
            let (found, errors) = manifest::load_file(file);
            add(found, errors, &mut problems);
        }
        if let Some(file) = &sources.workspace {
            problems.extend(refuse_workspace_plugins(file, &sources.files));
        }
        let mut registry = Registry::default();
        for spec in specs {
            if let Err(p) = registry.admit(spec) {
                problems.push(p);
            }
        }
        registry.problems = Mutex::new(problems);
        registry
    }

    fn admit(&mut self, spec: PluginSpec) -> Result<(), Problem> {
        let name = spec.entry.name.clone();
        let refuse = |message: String| Problem {
            plugin: Some(name.clone()),
            message,
        };
        for kind in &spec.entry.kinds {
            if is_legacy_kind(kind) {
                return Err(refuse(format!(
                    "plugin `{name}` claims `{kind}`, a retired writing-workflow kind; rename the kind"
                )));
            }
            if let Some(other) = self.by_kind.get(kind) {
                return Err(refuse(format!(
                    "plugin `{name}` ({}) claims kind `{kind}`, already served by plugin `{}` ({}); \
                     remove the kind from one of them or give the replacement the same name",
                    spec.origin, other.spec.entry.name, other.spec.origin
                )));
            }
        }
        let entry = Arc::new(Entry {
            spec,
            loaded: tokio::sync::OnceCell::new(),
        });
        for kind in &entry.spec.entry.kinds {
            self.by_kind.insert(kind.clone(), entry.clone());
        }
        self.entries.push(entry);
        Ok(())
    }

    /// The entry's plugin, loading it on first use (and saying so on `progress` when
    /// that means compiling).
    async fn ensure(
        &self,
        runtime: &Runtime,
        entry: &Entry,
        progress: Progress<'_>,
        step: (usize, usize),
    ) -> Result<Arc<LoadedPlugin>, String> {
        entry
            .loaded
            .get_or_init(|| async {
                let name = entry.spec.entry.name.clone();
                let compiling = progress.filter(|_| runtime.needs_compile(&entry.spec));
                if let Some(sink) = compiling {
                    let (i, n) = step;
                    sink.emit(activity(
                        "capabilities.preparing",
                        format!("preparing capabilities (first run): compiling {name} ({i}/{n})"),
                    ));
                }
                let started = Instant::now();
                let result = runtime.load_spec(entry.spec.clone()).await;
                match result {
                    Ok(plugin) => {
                        if let Some(sink) = compiling {
                            sink.emit(activity(
                                "capabilities.ready",
                                format!(
                                    "{name} ready in {:.1} s (cached for later runs)",
                                    started.elapsed().as_secs_f64()
                                ),
                            ));
                        }
                        Ok(Arc::new(plugin))
                    }
                    Err(e) => {
                        let message = e.to_string();
                        self.problems
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(Problem {
                                plugin: Some(name),
                                message: message.clone(),
                            });
                        Err(message)
                    }
                }
            })
            .await
            .clone()
    }

    /// Loads every plugin not loaded yet. Failures become [`Problem`]s.
    pub async fn load_all(&self, runtime: &Runtime, progress: Progress<'_>) {
        let pending: Vec<(&Arc<Entry>, bool)> = self
            .entries
            .iter()
            .filter(|e| e.loaded.get().is_none())
            .map(|e| (e, runtime.needs_compile(&e.spec)))
            .collect();
        let n = pending.iter().filter(|(_, compile)| *compile).count();
        let mut i = 0;
        for (entry, compile) in pending {
            i += usize::from(compile);
            let _ = self.ensure(runtime, entry, progress, (i.max(1), n)).await;
        }
    }

    /// The plugin serving `kind` (loaded now if it was not yet), or the failure the
    /// task gets.
    pub async fn resolve(
        &self,
        runtime: &Runtime,
        kind: &str,
        progress: Progress<'_>,
    ) -> Result<Arc<LoadedPlugin>, TaskFailure> {
        let entry = self.entry(kind)?;
        self.ensure(runtime, entry, progress, (1, 1))
            .await
            .map_err(|why| TaskFailure::new(FailureReason::InvalidPlugin, why))
    }

    fn entry(&self, kind: &str) -> Result<&Arc<Entry>, TaskFailure> {
        if is_legacy_kind(kind) {
            return Err(TaskFailure::new(
                FailureReason::UnsupportedLegacyCapability,
                format!(
                    "`{kind}` belongs to the retired writing workflow; no writing code path exists any more"
                ),
            ));
        }
        let entry = self.by_kind.get(kind).ok_or_else(|| {
            TaskFailure::new(
                FailureReason::UnsupportedCapability,
                format!(
                    "no capability serves kind `{kind}`; registered kinds: {}",
                    self.kinds().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        if let Some(Err(why)) = entry.loaded.get() {
            return Err(TaskFailure::new(FailureReason::InvalidPlugin, why.clone()));
        }
        Ok(entry)
    }

    /// The manifest entry serving `kind` (without loading it): its permissions.
    pub fn spec(&self, kind: &str) -> Option<&PluginSpec> {
        self.by_kind.get(kind).map(|e| &e.spec)
    }

    /// Whether a task of `kind` can run here (a plugin or an MCP tool), or the
    /// failure it gets. A plugin that has not loaded yet counts as available: if it
    /// then fails to load, its task fails as `invalid-plugin`.
    pub fn check(&self, kind: &str) -> Result<(), TaskFailure> {
        if self.external.contains_key(kind) {
            return Ok(());
        }
        self.entry(kind).map(|_| ())
    }

    /// Add capabilities served outside the runtime, and why any source of
    /// them is missing.
    pub fn add_external(&mut self, tools: Vec<Arc<dyn ExternalTool>>, problems: Vec<Problem>) {
        self.problems
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .extend(problems);
        for tool in tools {
            self.external.insert(tool.kind().to_string(), tool);
        }
    }

    /// The external tool serving `kind`, if it is one.
    pub fn external_tool(&self, kind: &str) -> Option<&Arc<dyn ExternalTool>> {
        self.external.get(kind)
    }

    /// Every external tool, by kind.
    pub fn external_tools(&self) -> impl Iterator<Item = &Arc<dyn ExternalTool>> {
        self.external.values()
    }

    /// The plugins loaded so far, in manifest order (all of them after
    /// [`Registry::load_all`], except those that failed).
    pub fn plugins(&self) -> Vec<Arc<LoadedPlugin>> {
        self.entries
            .iter()
            .filter_map(|e| e.loaded.get().and_then(|r| r.as_ref().ok()).cloned())
            .collect()
    }

    /// Every admitted manifest entry, loaded or not.
    pub fn specs(&self) -> impl Iterator<Item = &PluginSpec> {
        self.entries.iter().map(|e| &e.spec)
    }

    /// The loaded plugin of a manifest entry, if it has loaded.
    pub fn loaded(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.entries
            .iter()
            .find(|e| e.spec.entry.name == name)
            .and_then(|e| e.loaded.get())
            .and_then(|r| r.as_ref().ok())
            .cloned()
    }

    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.by_kind
            .keys()
            .filter(|k| !matches!(self.by_kind[*k].loaded.get(), Some(Err(_))))
            .chain(self.external.keys())
            .map(String::as_str)
    }

    /// Manifest problems, plugins that failed to load so far and MCP servers that
    /// could not be reached.
    pub fn problems(&self) -> Vec<Problem> {
        self.problems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The bundled manifest, parsed once per process: it is compiled in, and a
/// server builds a registry for every run.
fn bundled_specs() -> &'static (Vec<PluginSpec>, Vec<manifest::ManifestError>) {
    static SPECS: std::sync::OnceLock<(Vec<PluginSpec>, Vec<manifest::ManifestError>)> =
        std::sync::OnceLock::new();
    SPECS.get_or_init(|| manifest::parse(crate::plugins::bundled::MANIFEST, BUNDLED_ORIGIN, None))
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
