//! The `index` host service: one tantivy index per workspace, in Capstan's data
//! dir (never inside the workspace), shared by every task that touches it, and by
//! every Capstan process on the same workspace (see `capstan_index` on how: readers
//! never take the writer lock; a refresh that finds another process writing searches
//! the last commit).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use async_trait::async_trait;
use capstan_index::{IndexOptions, WorkspaceIndex};

use crate::plugins::bindings::index as wit;
use crate::plugins::context::{IndexService, RunContext, TaskScope};

/// Cloned handles share the open indexes.
#[derive(Clone)]
pub struct Indexes {
    root: PathBuf,
    options: IndexOptions,
    open: Arc<Mutex<HashMap<PathBuf, Arc<WorkspaceIndex>>>>,
    /// Change watchers, in a long-running process ([`Indexes::watch_changes`]).
    watches: Arc<super::index_watch::Watches>,
}

impl Indexes {
    /// `root` is the directory holding every workspace's index
    /// (`<data dir>/indexes`).
    pub fn new(root: PathBuf, options: IndexOptions) -> Self {
        Self {
            root,
            options,
            open: Arc::default(),
            watches: Arc::default(),
        }
    }

    /// From now on, watch each workspace asked about ([`super::index_watch`]):
    /// while nothing under it changes, its index stays current without a walk.
    pub fn watch_changes(&self) {
        self.watches.enable();
    }

    /// Where a workspace's index lives: a hash of its root path, plus its name
    /// for people browsing the data dir.
    pub fn dir_for(&self, workspace: &Path) -> PathBuf {
        let hash = crate::plugins::manifest::sha256_hex(workspace.as_os_str().as_encoded_bytes());
        let name: String = workspace
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                    .collect()
            })
            .unwrap_or_default();
        self.root.join(format!("{}-{name}", &hash[..16]))
    }

    pub fn for_workspace(&self, workspace: &Path) -> Result<Arc<WorkspaceIndex>, String> {
        let mut open = self.open.lock();
        if let Some(ix) = open.get(workspace) {
            return Ok(ix.clone());
        }
        let dir = self.dir_for(workspace);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create index dir {}: {e}", dir.display()))?;
        let ix = WorkspaceIndex::open_or_rebuild(&dir, self.options.clone())
            .map_err(|e| format!("cannot open the index at {}: {e}", dir.display()))?;
        let ix = Arc::new(ix);
        open.insert(workspace.to_path_buf(), ix.clone());
        Ok(ix)
    }

    /// Whether a refresh of `workspace`'s index would find nothing to do:
    /// every file the refresh would consider is in the index with the size
    /// and modification time it has now, and the index holds no other file.
    /// The host walks natively (one `lstat` per file, no file read) with the
    /// plugin's own walk ([`capstan_kb_parse::walk`]) and search's options, so
    /// the two cannot disagree on which files count. A file the refresh reads
    /// and then skips (binary content, a broken .docx) is never in the index,
    /// so a workspace with one is never current: it is refreshed as before.
    /// With [`Indexes::watch_changes`] on, no walk while no change has come
    /// since the last walk that found the index current.
    pub fn is_current_now(&self, workspace: &Path) -> Result<bool, String> {
        match self.watches.for_root(workspace) {
            Some(watch) => watch.is_current(|| self.walk_is_current(workspace)),
            None => self.walk_is_current(workspace),
        }
    }

    fn walk_is_current(&self, workspace: &Path) -> Result<bool, String> {
        let ix = self.for_workspace(workspace)?;
        let known = ix.known_files().map_err(|e| e.to_string())?;
        let walked = capstan_kb_parse::walk::walk(workspace, &Default::default());
        if walked.candidates.len() != known.len() {
            return Ok(false);
        }
        let known: HashMap<&str, &capstan_index::FileMeta> =
            known.iter().map(|m| (m.path.as_str(), m)).collect();
        Ok(walked.candidates.iter().all(|c| {
            known
                .get(c.path.as_str())
                .is_some_and(|m| m.size == c.size && m.mtime_ms == c.mtime_ms)
        }))
    }

    fn scoped(&self, scope: &TaskScope) -> Result<Arc<WorkspaceIndex>, String> {
        let ws = scope
            .run
            .workspace
            .as_ref()
            .ok_or("no workspace is bound, so there is no index")?;
        self.for_workspace(ws)
    }
}

/// Run index work off the async executor: commits and searches touch disk.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("index worker failed: {e}"))?
}

pub fn to_wit_hit(h: capstan_index::Hit) -> wit::Hit {
    wit::Hit {
        path: h.path,
        heading: h.heading,
        text: h.text,
        line_start: h.line_start,
        line_end: h.line_end,
        score: h.score,
        snippet: h.snippet,
    }
}

#[async_trait]
impl IndexService for Indexes {
    async fn known_files(&self, scope: &TaskScope) -> Result<Vec<wit::FileMeta>, String> {
        let ix = self.scoped(scope)?;
        let files = blocking(move || ix.known_files().map_err(|e| e.to_string())).await?;
        Ok(files
            .into_iter()
            .map(|m| wit::FileMeta {
                path: m.path,
                mtime_ms: m.mtime_ms,
                size: m.size,
                hash: m.hash,
            })
            .collect())
    }

    async fn upsert_files(
        &self,
        scope: &TaskScope,
        files: Vec<wit::FileUpdate>,
    ) -> Result<(), String> {
        let ix = self.scoped(scope)?;
        let files: Vec<(capstan_index::FileMeta, Vec<capstan_index::Passage>)> = files
            .into_iter()
            .map(|f| {
                let meta = capstan_index::FileMeta {
                    path: f.meta.path,
                    mtime_ms: f.meta.mtime_ms,
                    size: f.meta.size,
                    hash: f.meta.hash,
                };
                let passages = f
                    .passages
                    .into_iter()
                    .map(|p| capstan_index::Passage {
                        heading: p.heading,
                        text: p.text,
                        line_start: p.line_start,
                        line_end: p.line_end,
                    })
                    .collect();
                (meta, passages)
            })
            .collect();
        // Off the executor: handing a batch to tantivy blocks while its indexing threads
        // are saturated (that back-pressure is what paces the plugin's parsing).
        blocking(move || ix.upsert_files(&files).map_err(|e| e.to_string())).await
    }

    async fn remove_file(&self, scope: &TaskScope, path: String) -> Result<(), String> {
        let ix = self.scoped(scope)?;
        // Off the executor: the first change of a refresh may wait for another
        // process's writer.
        blocking(move || ix.remove_file(&path).map_err(|e| e.to_string())).await
    }

    async fn commit(&self, scope: &TaskScope) -> Result<wit::IndexStats, String> {
        let ix = self.scoped(scope)?;
        let stats = blocking(move || ix.commit().map_err(|e| e.to_string())).await?;
        Ok(wit::IndexStats {
            files: stats.files,
            passages: stats.passages,
        })
    }

    async fn search(
        &self,
        scope: &TaskScope,
        query: String,
        limit: u32,
    ) -> Result<Vec<wit::Hit>, String> {
        let ix = self.scoped(scope)?;
        let hits = blocking(move || {
            ix.search(&query, limit.clamp(1, 200) as usize)
                .map_err(|e| e.to_string())
        })
        .await?;
        Ok(hits.into_iter().map(to_wit_hit).collect())
    }

    async fn is_current(&self, workspace: &Path) -> bool {
        // Off the executor: the walk is one `lstat` per file.
        let (indexes, workspace) = (self.clone(), workspace.to_path_buf());
        blocking(move || indexes.is_current_now(&workspace))
            .await
            .unwrap_or(false)
    }
}

/// The input of a `local_kb_retrieval` search for `run`: `refresh: false`
/// when the run's index is current ([`Indexes::is_current_now`]), so a search
/// of an unchanged workspace does not pay for the plugin's refresh walk.
pub async fn search_input(run: &RunContext, mut input: serde_json::Value) -> serde_json::Value {
    if let (Some(index), Some(ws)) = (&run.services.index, &run.workspace)
        && input.get("refresh").is_none()
        && index.is_current(ws).await
    {
        input["refresh"] = serde_json::Value::Bool(false);
    }
    input
}
