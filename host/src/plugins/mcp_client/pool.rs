//! External MCP servers started when a run first calls one of their tools,
//! and kept warm for the process.
//!
//! Planning needs a server's tool list, not its process: each list is cached
//! on disk (`<cache>/mcp-tools/`), keyed by the `[[mcp_server]]` entry as
//! written and the workspace it serves, so a registry is built from the
//! cache and a server starts on the first call of one of its tools (or to
//! list its tools when nothing is cached for that key yet). A started
//! server stays running in the [`McpPool`] (one per process, held by the
//! app): `capstan serve` reuses it across runs for the same entry and
//! workspace, and a server that died is started again on the next call.
//! Every start lists the tools again and refreshes the cache, and so does
//! the next registry after a running server says its tools changed
//! (`notifications/tools/list_changed`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use sha2::{Digest, Sha256};

use super::{CONNECT_TIMEOUT, ListedTool, McpServer, McpTool, problem, start, tools_of};
use crate::config::McpServerEntry;
use crate::plugins::registry::Problem;
use capstan_sandbox::Limits;

/// One entry for one workspace: its tool list and, once started, its server.
pub struct Slot {
    pub(super) entry: McpServerEntry,
    cwd: Option<PathBuf>,
    /// Where its tool list is cached (`None`: not cached).
    cache: Option<PathBuf>,
    running: tokio::sync::Mutex<Option<Arc<McpServer>>>,
    listed: Mutex<Option<Vec<ListedTool>>>,
    /// Set by its running server's `tools/list_changed`.
    tools_changed: Arc<AtomicBool>,
    /// `[sandbox]`'s limits, for a sandboxed server's process.
    limits: Limits,
}

impl Slot {
    pub(super) fn new(
        entry: McpServerEntry,
        cwd: Option<PathBuf>,
        cache: Option<PathBuf>,
        limits: Limits,
    ) -> Self {
        Self {
            entry,
            cwd,
            cache,
            limits,
            running: tokio::sync::Mutex::new(None),
            listed: Mutex::new(None),
            tools_changed: Arc::default(),
        }
    }

    /// The running server, started now when it is not running (or exited).
    pub(super) async fn server(self: &Arc<Self>) -> Result<Arc<McpServer>, String> {
        let mut running = self.running.lock().await;
        if let Some(server) = running.as_ref()
            && !server.client.is_closed()
        {
            return Ok(server.clone());
        }
        *running = None;
        let started = tokio::time::timeout(
            CONNECT_TIMEOUT,
            start(
                &self.entry,
                self.cwd.as_deref(),
                &self.limits,
                self.tools_changed.clone(),
            ),
        )
        .await
        .map_err(|_| {
            format!(
                "did not start and list its tools within {} s",
                CONNECT_TIMEOUT.as_secs()
            )
        })?;
        let (server, listed) = started?;
        tracing::info!(
            target: "capstan::mcp_server",
            server = %self.entry.name,
            "started, {} tools",
            listed.len()
        );
        self.remember(listed);
        let server = Arc::new(server);
        *running = Some(server.clone());
        if self.entry.idle_secs > 0 {
            tokio::spawn(stop_when_idle(
                Arc::downgrade(self),
                Arc::downgrade(&server),
                Duration::from_secs(self.entry.idle_secs),
            ));
        }
        Ok(server)
    }

    /// Its tools: listed again if its server said they changed, else known,
    /// cached, or listed by starting it.
    async fn tools(self: &Arc<Self>) -> Result<Vec<ListedTool>, String> {
        if self.tools_changed.swap(false, Ordering::AcqRel) {
            let running = self.running.lock().await.clone();
            if let Some(server) = running.filter(|s| !s.client.is_closed()) {
                match server.list_tools().await {
                    Ok(listed) => {
                        self.remember(listed.clone());
                        return Ok(listed);
                    }
                    Err(why) => tracing::warn!(
                        "MCP server `{}` said its tools changed, then: {why}",
                        self.entry.name
                    ),
                }
            }
        }
        if let Some(listed) = self.known() {
            return Ok(listed);
        }
        if let Some(listed) = self.read_cache() {
            *self.listed.lock() = Some(listed.clone());
            return Ok(listed);
        }
        self.server().await?;
        Ok(self.known().unwrap_or_default())
    }

    fn known(&self) -> Option<Vec<ListedTool>> {
        self.listed.lock().clone()
    }

    fn read_cache(&self) -> Option<Vec<ListedTool>> {
        let text = std::fs::read(self.cache.as_ref()?).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Keep a fresh list, in memory and in the cache (written whole, then
    /// renamed, so a reader never sees half a file).
    fn remember(&self, listed: Vec<ListedTool>) {
        if let Some(file) = &self.cache {
            let written = file
                .parent()
                .map(std::fs::create_dir_all)
                .unwrap_or(Ok(()))
                .and_then(|()| {
                    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
                    std::fs::write(&tmp, serde_json::to_vec(&listed).unwrap_or_default())?;
                    std::fs::rename(&tmp, file)
                });
            if let Err(e) = written {
                tracing::warn!(
                    "cannot cache the tool list of MCP server `{}` in {}: {e}",
                    self.entry.name,
                    file.display()
                );
            }
        }
        *self.listed.lock() = Some(listed);
    }

    /// Whether its server is running now.
    fn is_running(&self) -> bool {
        self.running
            .try_lock()
            .map(|r| r.as_ref().is_some_and(|s| !s.client.is_closed()))
            // Locked: it is being started or checked by a call.
            .unwrap_or(true)
    }
}

/// Stops `server` once no call has run on it for `idle` (the next call
/// starts it again); ends when the slot, the server or its connection does.
async fn stop_when_idle(slot: Weak<Slot>, server: Weak<McpServer>, idle: Duration) {
    let check = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    loop {
        tokio::time::sleep(check).await;
        let (Some(slot), Some(started)) = (slot.upgrade(), server.upgrade()) else {
            return;
        };
        if started.client.is_closed() {
            return;
        }
        if started.idle_for() < idle {
            continue;
        }
        let mut running = slot.running.lock().await;
        // Still this server, still idle: a call may have started meanwhile.
        if running.as_ref().is_some_and(|s| Arc::ptr_eq(s, &started)) && started.idle_for() >= idle
        {
            *running = None;
            tracing::info!(
                target: "capstan::mcp_server",
                server = %slot.entry.name,
                "stopped after {} s without a call; the next call starts it again",
                idle.as_secs()
            );
            return;
        }
    }
}

/// The tools of these slots' servers, listing them (from cache or by
/// starting) all at once.
pub(super) async fn list_tools(
    slots: Vec<Arc<Slot>>,
    mut problems: Vec<Problem>,
) -> (Vec<Arc<McpTool>>, Vec<Problem>) {
    let listing = slots.into_iter().map(|slot| async move {
        let listed = slot.tools().await;
        (slot, listed)
    });
    let mut tools = Vec::new();
    for (slot, listed) in futures::future::join_all(listing).await {
        match listed {
            Ok(listed) => tools.extend(tools_of(&slot, &listed)),
            Err(why) => {
                let name = &slot.entry.name;
                problems.push(problem(Some(name), format!("MCP server `{name}`: {why}")));
            }
        }
    }
    (tools, problems)
}

/// The process's external MCP servers, by entry and workspace.
pub struct McpPool {
    cache_dir: PathBuf,
    limits: Limits,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

impl McpPool {
    /// A pool caching tool lists in `cache_dir`, starting sandboxed servers
    /// with `limits` (`[sandbox]`'s memory and /tmp size; a server's
    /// workspace writes land at once, so no write quota applies).
    pub fn new(cache_dir: PathBuf, limits: Limits) -> Self {
        Self {
            cache_dir,
            limits,
            slots: Mutex::default(),
        }
    }

    /// The tools of the servers these config files configure, for a run in
    /// `cwd`: from the cache where it has them (no server starts), else by
    /// starting the server. A server that cannot start or list is a
    /// [`Problem`]; the others still load.
    pub async fn tools(
        &self,
        files: &[PathBuf],
        cwd: Option<&Path>,
    ) -> (Vec<Arc<McpTool>>, Vec<Problem>) {
        let (entries, problems) = super::entries(files);
        let slots = entries
            .into_iter()
            .map(|entry| self.slot(entry, cwd))
            .collect();
        list_tools(slots, problems).await
    }

    /// The names of the servers running now.
    pub fn running(&self) -> Vec<String> {
        let slots = self.slots.lock();
        let mut names: Vec<String> = slots
            .values()
            .filter(|s| s.is_running())
            .map(|s| s.entry.name.clone())
            .collect();
        names.sort();
        names
    }

    fn slot(&self, entry: McpServerEntry, cwd: Option<&Path>) -> Arc<Slot> {
        let key = key(&entry, cwd);
        let mut slots = self.slots.lock();
        slots
            .entry(key.clone())
            .or_insert_with(|| {
                let cache = self.cache_dir.join(format!("{}-{key}.json", entry.name));
                Arc::new(Slot::new(
                    entry,
                    cwd.map(Path::to_path_buf),
                    Some(cache),
                    self.limits.clone(),
                ))
            })
            .clone()
    }
}

/// The entry as written (every field) and the workspace, hashed.
fn key(entry: &McpServerEntry, cwd: Option<&Path>) -> String {
    let mut hash = Sha256::new();
    hash.update(format!("{entry:?}").as_bytes());
    hash.update([0]);
    if let Some(dir) = cwd {
        hash.update(dir.to_string_lossy().as_bytes());
    }
    hash.finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}
