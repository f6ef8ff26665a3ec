//! The plugin runtime: one wasmtime [`Engine`] for the process, components
//! compiled once and cached, one [`InstancePre`](wasmtime::component::InstancePre)
//! per plugin, and a fresh [`Store`] per task.
//!
//! Confinement of a task:
//! - files: only the workspace root, preopened as `.` with the access the manifest
//!   grants, narrowed to read-only for operations that declare `read-only` risk
//!   (so a plugin's claim can only ever take rights away);
//! - no environment, no arguments, no sockets, stdout and stderr captured into
//!   tracing (and into the failure message when the plugin traps);
//! - memory and table growth capped per task, optional fuel, and a deadline
//!   enforced by epoch interruption (a ticker thread bumps the epoch every
//!   [`EPOCH_TICK`]); cancellation is checked on the same tick.
//!
//! Faults never escape a task: traps, timeouts, limits and missing exports come
//! back as a [`TaskFailure`] with a [`FailureReason`], and the next task runs on a
//! fresh store.

use capstan_policy::Risk;

use crate::plugins::bindings;
use crate::plugins::manifest::sha256_hex;
mod cache;
pub mod imports;
mod state;
mod v0_1;
mod verified;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::plugins::context::{RunContext, TaskScope};
pub use crate::plugins::engine::Capacity;
use crate::plugins::manifest::{HostService, PluginSpec, WorkspaceAccess};
use crate::workspace_gate::WorkspaceGate;
pub use cache::ComponentCache;
use capstan_protocol::{FailureReason, TaskFailure, TaskOutcome, TaskRequest, TaskSuccess};
use state::{Interrupt, Limiter, TaskState};

/// How often the epoch advances: the granularity of deadlines and cancellation.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Captured plugin output per stream; more is a write error inside the plugin.
const OUTPUT_CAPTURE: usize = 64 * 1024;

/// One operation of a capability, as the plugin describes it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OperationInfo {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
    pub risk: Risk,
}

/// How a plugin got loaded: for `plugins list` and the benchmark.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct LoadStats {
    pub cache_hit: bool,
    pub duration: Duration,
}

/// A plugin ready to run tasks.
pub struct LoadedPlugin {
    pub spec: PluginSpec,
    pub sha256: String,
    pub kinds: Vec<String>,
    pub operations: Vec<OperationInfo>,
    pub imports: BTreeSet<HostService>,
    /// The `capstan:plugin` version the component was built against.
    pub wit_version: imports::WitVersion,
    pub load: LoadStats,
    pre: Pre,
}

/// A linked component, by the WIT version it was built against.
#[derive(Clone)]
enum Pre {
    Current(bindings::PluginPre<TaskState>),
    V0_1(v0_1::PluginPre<TaskState>),
}

/// An instance, by the WIT version it was built against.
enum Instance {
    Current(bindings::Plugin),
    V0_1(v0_1::Plugin),
}

impl LoadedPlugin {
    pub fn name(&self) -> &str {
        &self.spec.entry.name
    }

    pub fn operation(&self, name: &str) -> Option<&OperationInfo> {
        self.operations.iter().find(|o| o.name == name)
    }
}

/// Bumps the engine's epoch until dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: Engine) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("capstan-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })?;
        Ok(Self { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

pub struct Runtime {
    engine: Engine,
    linker: Linker<TaskState>,
    cache: ComponentCache,
    /// The workspace gate, checked again before every task: a plugin that
    /// could write Capstan's cache, data or config could rewrite compiled code
    /// or its own grants, whatever entry point bound the workspace.
    gate: WorkspaceGate,
    /// Components hashed, compiled, linked and described once for the process.
    verified: verified::VerifiedComponents,
    _ticker: EpochTicker,
}

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("plugin `{plugin}` ({source_desc}): {message}")]
pub struct LoadError {
    pub plugin: String,
    pub source_desc: String,
    pub message: String,
}

impl Runtime {
    /// `cache_dir` holds compiled components; `protected` lists Capstan's own
    /// directories, which no workspace may contain.
    pub fn new(cache_dir: PathBuf, protected: Vec<PathBuf>, capacity: Capacity) -> Result<Self> {
        let config = crate::plugins::engine::config(capacity);
        let engine = Engine::new(&config)
            .map_err(anyhow::Error::from)
            .context("creating the wasmtime engine")?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        bindings::Plugin::add_to_linker::<TaskState, wasmtime::component::HasSelf<TaskState>>(
            &mut linker,
            |s| s,
        )?;
        // Components built against 0.1.x: same store, their own names and types.
        v0_1::Plugin::add_to_linker::<TaskState, wasmtime::component::HasSelf<TaskState>>(
            &mut linker,
            |s| s,
        )?;

        let cache = ComponentCache::new(cache_dir.clone(), &engine);
        let mut protected = protected;
        protected.push(cache_dir);
        Ok(Self {
            _ticker: EpochTicker::start(engine.clone())
                .map_err(|e| anyhow::anyhow!("cannot start the plugin epoch ticker thread: {e}"))?,
            engine,
            linker,
            cache,
            gate: WorkspaceGate::new(protected),
            verified: Default::default(),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compile (or load from cache) a component, check its imports against the
    /// manifest and ask it to describe itself. Nothing is kept for later loads:
    /// [`Runtime::load_spec`] is the one that reuses verified components.
    pub async fn load(&self, spec: PluginSpec, bytes: &[u8]) -> Result<LoadedPlugin, LoadError> {
        let started = Instant::now();
        let verified = self.verify(&spec, bytes, None).await?;
        let cache_hit = verified.cache_hit;
        self.plugin(spec, &verified, cache_hit, started)
    }

    /// Hash `bytes`, check the entry's pin, compile (or load the compiled code
    /// from the cache), link and describe: everything the process keeps.
    async fn verify(
        &self,
        spec: &PluginSpec,
        bytes: &[u8],
        fingerprint: Option<verified::Fingerprint>,
    ) -> Result<verified::Verified, LoadError> {
        let fail = |message: String| load_error(spec, message);
        let sha256 = component_sha256(spec, bytes);
        // Before compiling: code that does not match its pin never runs.
        check_pin(spec, &sha256).map_err(fail)?;
        let (component, cache_hit) = self
            .cache
            .load_or_compile(&self.engine, bytes, &sha256, self.compiled_ahead(spec))
            .map_err(|e| fail(format!("not a valid WebAssembly component: {e:#}")))?;
        let checked =
            imports::check(&self.engine, &component, &spec.entry.permissions.host).map_err(fail)?;
        let linked = self.linker.instantiate_pre(&component);
        let pre = if checked.version.minor == 1 {
            linked.and_then(v0_1::PluginPre::new).map(Pre::V0_1)
        } else {
            linked.and_then(bindings::PluginPre::new).map(Pre::Current)
        }
        .map_err(|e| fail(format!("cannot be linked: {e:#}")))?;
        let probe = LoadedPlugin {
            sha256,
            kinds: vec![],
            operations: vec![],
            imports: checked.services,
            wit_version: checked.version,
            load: LoadStats {
                cache_hit,
                duration: Duration::ZERO,
            },
            pre,
            spec: spec.clone(),
        };
        let info = self
            .describe(&probe)
            .await
            .map_err(|e| fail(format!("describe failed: {e}")))?;
        let mut operations = Vec::with_capacity(info.operations.len());
        for op in info.operations {
            let input_schema = serde_json::from_str(&op.input_schema).map_err(|e| {
                fail(format!(
                    "operation `{}` has an input schema that is not JSON: {e}",
                    op.name
                ))
            })?;
            operations.push(OperationInfo {
                name: op.name,
                description: op.description,
                input_schema,
                risk: op.risk.into(),
            });
        }
        Ok(verified::Verified {
            fingerprint,
            sha256: probe.sha256,
            component,
            pre: probe.pre,
            version: checked.version,
            kinds: info.kinds,
            operations,
            cache_hit,
        })
    }

    /// The plugin of one manifest entry on a verified component: its pin, its
    /// grants and the kinds it claims are checked against the entry.
    fn plugin(
        &self,
        spec: PluginSpec,
        verified: &verified::Verified,
        cache_hit: bool,
        started: Instant,
    ) -> Result<LoadedPlugin, LoadError> {
        let fail = |message: String| load_error(&spec, message);
        check_pin(&spec, &verified.sha256).map_err(fail)?;
        let checked = imports::check(
            &self.engine,
            &verified.component,
            &spec.entry.permissions.host,
        )
        .map_err(fail)?;
        if let Some(kind) = spec
            .entry
            .kinds
            .iter()
            .find(|k| !verified.kinds.contains(k))
        {
            return Err(fail(format!(
                "the manifest claims kind `{kind}`, but the component serves only {:?}",
                verified.kinds
            )));
        }
        Ok(LoadedPlugin {
            sha256: verified.sha256.clone(),
            kinds: verified.kinds.clone(),
            operations: verified.operations.clone(),
            imports: checked.services,
            wit_version: verified.version,
            load: LoadStats {
                cache_hit,
                duration: started.elapsed(),
            },
            pre: verified.pre.clone(),
            spec,
        })
    }

    /// Load a component from its manifest source. The first load in the
    /// process verifies it (hash, pin, compiled code, describe); later loads
    /// reuse that for as long as the file's fingerprint (size, times, inode)
    /// is unchanged, and verify it again, pin included, once it changed.
    pub async fn load_spec(&self, spec: PluginSpec) -> Result<LoadedPlugin, LoadError> {
        let started = Instant::now();
        let slot = self.verified.slot(&spec.source);
        let mut held = slot.lock().await;
        let before = verified::fingerprint(&spec.source).map_err(|e| unreadable(&spec, e))?;
        if let Some(v) = held.as_ref().filter(|v| v.fingerprint == before) {
            let v = v.clone();
            drop(held);
            return self.plugin(spec, &v, true, started);
        }
        // Never verified, or the file changed: what was kept no longer holds.
        *held = None;
        let bytes = component_bytes(&spec)?;
        let verified = Arc::new(self.verify(&spec, &bytes, before).await?);
        // A file that changed while it was read is verified again next time.
        if verified::fingerprint(&spec.source).is_ok_and(|after| after == before) {
            *held = Some(verified.clone());
        }
        drop(held);
        let cache_hit = verified.cache_hit;
        self.plugin(spec, &verified, cache_hit, started)
    }

    /// Whether loading `spec` means compiling it (no usable entry in the compiled
    /// cache): the first run on a fresh home, or a new component.
    pub fn needs_compile(&self, spec: &PluginSpec) -> bool {
        if self.verified.is_fresh(&spec.source) {
            return false;
        }
        if self.compiled_ahead(spec).is_some() {
            return false;
        }
        component_bytes(spec)
            .is_ok_and(|bytes| !self.cache.contains(&component_sha256(spec, &bytes)))
    }

    /// A builtin's code compiled when the binary was built, if this engine
    /// can load it.
    fn compiled_ahead(&self, spec: &PluginSpec) -> Option<&'static [u8]> {
        match &spec.source {
            crate::plugins::manifest::ComponentSource::Builtin(name) => {
                crate::plugins::bundled::precompiled(name, self.cache.engine_key())
            }
            crate::plugins::manifest::ComponentSource::File(_) => None,
        }
    }

    async fn describe(
        &self,
        plugin: &LoadedPlugin,
    ) -> Result<bindings::types::CapabilityInfo, TaskFailure> {
        let run = RunContext::new(
            None,
            Arc::new(capstan_protocol::NullSink),
            Default::default(),
        );
        let (mut store, instance) = self
            .instantiate(plugin, "describe", &run, WorkspaceAccess::None)
            .await?;
        let result = match &instance {
            Instance::Current(i) => {
                i.capstan_plugin_capability()
                    .call_describe(&mut store)
                    .await
            }
            Instance::V0_1(i) => i
                .capstan_plugin_capability()
                .call_describe(&mut store)
                .await
                .map(v0_1::capability_info),
        };
        result.map_err(|e| classify_trap(&store, plugin, e))
    }

    async fn instantiate(
        &self,
        plugin: &LoadedPlugin,
        task_id: &str,
        run: &RunContext,
        access: WorkspaceAccess,
    ) -> Result<(Store<TaskState>, Instance), TaskFailure> {
        let limits = &plugin.spec.entry.limits;
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPTURE);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPTURE);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_ip_name_lookup(false)
            .allow_tcp(false)
            .allow_udp(false)
            // Workspace file operations are short local I/O; running them on the task's
            // own thread instead of a `spawn_blocking` hand-off each (open, stat, read...)
            // cut the CPU time of indexing linux-doc's 3,179 files by a fifth. Guest code
            // itself already occupies the thread between epoch yields, so this blocks it no
            // longer than the plugin's computing does.
            .allow_blocking_current_thread(true);
        if access != WorkspaceAccess::None {
            let root = run.workspace.as_ref().ok_or_else(|| {
                TaskFailure::new(
                    FailureReason::WorkspaceRequired,
                    format!(
                        "`{}` needs a workspace; bind one with --workspace DIR",
                        plugin.name()
                    ),
                )
            })?;
            let perms = if access == WorkspaceAccess::ReadWrite {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            wasi.preopened_dir(root, ".", perms).map_err(|e| {
                TaskFailure::new(
                    FailureReason::Failed,
                    format!("cannot open workspace {}: {e:#}", root.display()),
                )
            })?;
        }
        let state = TaskState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: Limiter {
                memory_bytes: (limits.memory_mb as usize) << 20,
                table_elements: 1 << 20,
                hit: None,
            },
            stdout,
            stderr,
            deadline: Instant::now() + Duration::from_millis(limits.timeout_ms),
            interrupted: None,
            scope: TaskScope {
                task_id: task_id.to_string(),
                plugin: plugin.name().to_string(),
                run: run.clone(),
                resource_limit: Default::default(),
            },
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        store
            .set_fuel(limits.fuel.unwrap_or(u64::MAX))
            .map_err(|e| {
                TaskFailure::new(
                    FailureReason::Failed,
                    format!("cannot set the plugin's fuel limit: {e}"),
                )
            })?;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            if state.scope.run.cancel.is_cancelled() {
                state.interrupted = Some(Interrupt::Cancelled);
                return Ok(UpdateDeadline::Interrupt);
            }
            if Instant::now() >= state.deadline {
                state.interrupted = Some(Interrupt::Timeout);
                return Ok(UpdateDeadline::Interrupt);
            }
            // Yield so a spinning plugin cannot starve the executor thread.
            Ok(UpdateDeadline::Yield(1))
        });
        let instance = match &plugin.pre {
            Pre::Current(pre) => pre
                .instantiate_async(&mut store)
                .await
                .map(Instance::Current),
            Pre::V0_1(pre) => pre.instantiate_async(&mut store).await.map(Instance::V0_1),
        }
        .map_err(|e| classify_trap(&store, plugin, e))?;
        Ok((store, instance))
    }

    /// Run one task on a plugin. Never panics and never leaks a fault: every
    /// failure is a [`TaskFailure`].
    pub async fn invoke(
        &self,
        plugin: &LoadedPlugin,
        task: &TaskRequest,
        run: &RunContext,
    ) -> TaskOutcome {
        let Some(op) = plugin.operation(&task.operation) else {
            let names: Vec<&str> = plugin.operations.iter().map(|o| o.name.as_str()).collect();
            return Err(TaskFailure::new(
                FailureReason::InvalidInput,
                format!(
                    "`{}` has no operation `{}`; it offers: {}",
                    task.kind,
                    task.operation,
                    names.join(", ")
                ),
            ));
        };
        let granted = plugin.spec.entry.permissions.workspace;
        // The plugin's risk claim can only narrow its rights: a read-only
        // operation gets a read-only view even from a read-write plugin.
        let access = if op.risk == Risk::ReadOnly {
            granted.min(WorkspaceAccess::Read)
        } else {
            granted
        };
        // Checked whatever the plugin's own access: a plugin with no file
        // access may still run commands there through the exec service.
        if let Some(root) = &run.workspace {
            self.check_workspace(root)?;
        }
        if run.cancel.is_cancelled() {
            return Err(TaskFailure::new(
                FailureReason::Cancelled,
                "cancelled before it started",
            ));
        }
        let (mut store, instance) = self.instantiate(plugin, &task.id, run, access).await?;
        // Plugin file writes: the files the operation declares are
        // snapshotted, so its change set can be shown and undone.
        let snapshot = if access == WorkspaceAccess::ReadWrite && op.risk != Risk::ReadOnly {
            crate::plugins::services::changes::snapshot_plugin(run, &task.input).await
        } else {
            None
        };
        let wit_task = bindings::types::Task {
            id: task.id.clone(),
            kind: task.kind.clone(),
            operation: task.operation.clone(),
            input: task.input.to_string(),
        };
        let result = match &instance {
            Instance::Current(i) => {
                i.capstan_plugin_capability()
                    .call_invoke(&mut store, &wit_task)
                    .await
            }
            Instance::V0_1(i) => i
                .capstan_plugin_capability()
                .call_invoke(&mut store, &v0_1::task(&wit_task))
                .await
                .map(v0_1::task_result),
        };
        log_output(&store, plugin);
        if let Some(snap) = snapshot {
            let source = format!("{} {}", task.kind, task.operation);
            let scope = store.data().scope.clone();
            if let Some(denied) =
                crate::plugins::services::changes::record_plugin(&scope, snap, source).await
            {
                return Err(TaskFailure::new(FailureReason::Denied, denied));
            }
        }
        if store.data().interrupted.is_none()
            && let Some(limit) = store.data().scope.resource_limit.get()
        {
            return Err(TaskFailure::new(
                FailureReason::ResourceLimit,
                limit.clone(),
            ));
        }
        match result {
            Ok(Ok(out)) => {
                let text = out.data.unwrap_or_default();
                let data = if text.trim().is_empty() {
                    serde_json::Value::Null
                } else {
                    serde_json::from_str(&text).map_err(|e| {
                        TaskFailure::new(
                            FailureReason::InvalidPlugin,
                            format!("`{}` returned data that is not JSON: {e}", plugin.name()),
                        )
                    })?
                };
                Ok(TaskSuccess {
                    summary: out.summary,
                    data,
                })
            }
            Ok(Err(err)) => {
                use bindings::types::TaskError as E;
                Err(match err {
                    E::InvalidInput(m) => TaskFailure::new(FailureReason::InvalidInput, m),
                    E::Denied(m) => TaskFailure::new(FailureReason::Denied, m),
                    E::NotImplemented(m) => TaskFailure::new(FailureReason::NotImplemented, m),
                    E::Failed(m) => TaskFailure::new(FailureReason::Failed, m),
                    E::Cancelled => TaskFailure::new(FailureReason::Cancelled, "cancelled"),
                })
            }
            Err(e) => Err(classify_trap(&store, plugin, e)),
        }
    }

    /// The workspace gate's never-rules (crate::workspace_gate), as a task failure.
    fn check_workspace(&self, root: &Path) -> Result<(), TaskFailure> {
        self.gate
            .check_canonical(root)
            .map_err(|refusal| TaskFailure::new(FailureReason::Denied, refusal.to_string()))
    }
}

fn load_error(spec: &PluginSpec, message: String) -> LoadError {
    LoadError {
        plugin: spec.entry.name.clone(),
        source_desc: spec.source.to_string(),
        message,
    }
}

fn unreadable(spec: &PluginSpec, e: std::io::Error) -> LoadError {
    load_error(
        spec,
        format!(
            "cannot read the component file (field `component` in {}): {e}",
            spec.origin
        ),
    )
}

/// The entry's sha256 pin, if it has one, against the component's hash.
fn check_pin(spec: &PluginSpec, sha256: &str) -> Result<(), String> {
    match &spec.entry.sha256 {
        Some(expected) if !expected.eq_ignore_ascii_case(sha256) => Err(format!(
            "sha256 mismatch: the manifest ({}) says {expected}, the file is {sha256}; \
             the component changed since the manifest was written. Refusing to load it",
            spec.origin
        )),
        _ => Ok(()),
    }
}

/// The component's bytes, from the binary or from its file.
fn component_bytes(spec: &PluginSpec) -> Result<std::borrow::Cow<'static, [u8]>, LoadError> {
    let fail = |message: String| load_error(spec, message);
    match &spec.source {
        crate::plugins::manifest::ComponentSource::Builtin(name) => {
            crate::plugins::bundled::component(name)
                .map(std::borrow::Cow::Borrowed)
                .ok_or_else(|| {
                    fail(format!(
                        "no builtin component `{name}`; builtins are: {}",
                        crate::plugins::bundled::names().join(", ")
                    ))
                })
        }
        crate::plugins::manifest::ComponentSource::File(path) => std::fs::read(path)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| unreadable(spec, e)),
    }
}

/// The component's SHA-256: a builtin's was computed when the binary was
/// built (its bytes are the binary's), a file's is computed now.
fn component_sha256(spec: &PluginSpec, bytes: &[u8]) -> String {
    match &spec.source {
        crate::plugins::manifest::ComponentSource::Builtin(name) => {
            crate::plugins::bundled::sha256(name).map_or_else(|| sha256_hex(bytes), str::to_owned)
        }
        crate::plugins::manifest::ComponentSource::File(_) => sha256_hex(bytes),
    }
}

/// Turn a wasmtime error from a plugin call into the reason people can act on.
fn classify_trap(
    store: &Store<TaskState>,
    plugin: &LoadedPlugin,
    err: wasmtime::Error,
) -> TaskFailure {
    let state = store.data();
    let limits = &plugin.spec.entry.limits;
    if let Some(interrupt) = state.interrupted {
        return match interrupt {
            Interrupt::Cancelled => {
                TaskFailure::new(FailureReason::Cancelled, "cancelled while running")
            }
            Interrupt::Timeout => TaskFailure::new(
                FailureReason::Timeout,
                format!(
                    "`{}` ran past its {} ms limit and was stopped",
                    plugin.name(),
                    limits.timeout_ms
                ),
            ),
        };
    }
    if let Some(hit) = &state.limiter.hit {
        return TaskFailure::new(
            FailureReason::ResourceLimit,
            format!("`{}`: {hit}", plugin.name()),
        );
    }
    if let Some(wasmtime::Trap::OutOfFuel) = err.downcast_ref::<wasmtime::Trap>() {
        return TaskFailure::new(
            FailureReason::ResourceLimit,
            format!(
                "`{}` used up its fuel ({} units)",
                plugin.name(),
                limits.fuel.unwrap_or(0)
            ),
        );
    }
    let stderr = String::from_utf8_lossy(&state.stderr.contents())
        .trim()
        .to_string();
    let tail: String = stderr
        .chars()
        .rev()
        .take(500)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let detail = if tail.is_empty() {
        String::new()
    } else {
        format!(" (plugin stderr: {tail})")
    };
    let trap = err
        .downcast_ref::<wasmtime::Trap>()
        .map(|t| t.to_string())
        .unwrap_or_else(|| format!("{err:#}"));
    TaskFailure::new(
        FailureReason::Trap,
        format!("`{}` trapped: {trap}{detail}", plugin.name()),
    )
}

fn log_output(store: &Store<TaskState>, plugin: &LoadedPlugin) {
    let state = store.data();
    for (stream, pipe) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
        let bytes = pipe.contents();
        if !bytes.is_empty() {
            tracing::info!(target: "capstan::plugin", plugin = plugin.name(), stream, "{}", String::from_utf8_lossy(&bytes).trim_end());
        }
    }
}
