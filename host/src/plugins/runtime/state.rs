//! Per-task store data: the WASI context, resource limits, the interrupt flags the
//! epoch callback sets, and the host-service imports.

use std::time::Instant;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::plugins::bindings::{approval, cancel, events, exec, index, types};
use crate::plugins::context::TaskScope;
use crate::plugins::services::not_offered;
use capstan_protocol::Event;

/// Why the host stopped a running plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    Timeout,
    Cancelled,
}

/// Memory and table growth limits. Records that a limit was hit so a later trap
/// (the guest aborting on allocation failure) is reported as `resource-limit`.
pub struct Limiter {
    pub memory_bytes: usize,
    pub table_elements: usize,
    pub hit: Option<String>,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.hit = Some(format!(
                "memory limit of {} MiB reached (asked for {} MiB)",
                self.memory_bytes >> 20,
                desired >> 20
            ));
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            self.hit = Some(format!(
                "table limit of {} elements reached",
                self.table_elements
            ));
            return Ok(false);
        }
        Ok(true)
    }
}

pub struct TaskState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: Limiter,
    pub stdout: MemoryOutputPipe,
    pub stderr: MemoryOutputPipe,
    pub deadline: Instant,
    pub interrupted: Option<Interrupt>,
    pub scope: TaskScope,
}

impl WasiView for TaskState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl TaskState {
    fn send_event(&self, event: Event) {
        self.scope.run.events.emit(event);
    }
}

impl types::Host for TaskState {}

impl events::Host for TaskState {
    async fn emit(&mut self, ev: events::Activity) -> wasmtime::Result<()> {
        let data = match ev.data {
            None => serde_json::Value::Null,
            // 0.1.x plugins said "none" with "".
            Some(d) if d.is_empty() => serde_json::Value::Null,
            // A plugin's malformed JSON is kept as text rather than dropped.
            Some(d) => serde_json::from_str(&d).unwrap_or(serde_json::Value::String(d)),
        };
        self.send_event(Event::Activity {
            task_id: Some(self.scope.task_id.clone()),
            kind: ev.kind,
            message: ev.message,
            data,
        });
        Ok(())
    }

    async fn progress(&mut self, done: u64, total: u64, unit: String) -> wasmtime::Result<()> {
        self.send_event(Event::Progress {
            task_id: self.scope.task_id.clone(),
            done,
            total,
            unit,
        });
        Ok(())
    }
}

impl cancel::Host for TaskState {
    async fn is_cancelled(&mut self) -> wasmtime::Result<bool> {
        Ok(self.scope.run.cancel.is_cancelled())
    }
}

impl exec::Host for TaskState {
    async fn run(
        &mut self,
        req: exec::ExecRequest,
    ) -> wasmtime::Result<Result<exec::ExecOutput, exec::ExecError>> {
        Ok(match self.scope.run.services.exec.clone() {
            Some(service) => service.run(&self.scope, req).await,
            None => Err(exec::ExecError::Denied(not_offered("exec"))),
        })
    }
}

impl TaskState {
    /// The index service for this task, or the typed reason there is none.
    fn index_service(
        &self,
    ) -> Result<std::sync::Arc<dyn crate::plugins::context::IndexService>, index::IndexError> {
        let service = self
            .scope
            .run
            .services
            .index
            .clone()
            .ok_or_else(|| index::IndexError::Denied(not_offered("index")))?;
        if self.scope.run.workspace.is_none() {
            return Err(index::IndexError::WorkspaceRequired);
        }
        Ok(service)
    }
}

/// The index service's own failures (disk, tantivy, a bad batch), typed.
fn index_failed(message: String) -> index::IndexError {
    index::IndexError::Failed(message)
}

impl index::Host for TaskState {
    async fn known_files(
        &mut self,
    ) -> wasmtime::Result<Result<Vec<index::FileMeta>, index::IndexError>> {
        Ok(match self.index_service() {
            Ok(s) => s.known_files(&self.scope).await.map_err(index_failed),
            Err(e) => Err(e),
        })
    }

    async fn upsert_files(
        &mut self,
        files: Vec<index::FileUpdate>,
    ) -> wasmtime::Result<Result<(), index::IndexError>> {
        if let Some(bad) = files.iter().find(|f| f.meta.path.is_empty()) {
            return Ok(Err(index::IndexError::InvalidRequest(format!(
                "a file update has an empty path ({} passages); the batch was not indexed",
                bad.passages.len()
            ))));
        }
        if let Some((f, p)) = files.iter().find_map(|f| {
            f.passages
                .iter()
                .find(|p| p.line_end < p.line_start)
                .map(|p| (f, p))
        }) {
            return Ok(Err(index::IndexError::InvalidRequest(format!(
                "{}: passage lines {}-{} are reversed; the batch was not indexed",
                f.meta.path, p.line_start, p.line_end
            ))));
        }
        Ok(match self.index_service() {
            Ok(s) => s
                .upsert_files(&self.scope, files)
                .await
                .map_err(index_failed),
            Err(e) => Err(e),
        })
    }

    async fn remove_file(
        &mut self,
        path: String,
    ) -> wasmtime::Result<Result<(), index::IndexError>> {
        Ok(match self.index_service() {
            Ok(s) => s.remove_file(&self.scope, path).await.map_err(index_failed),
            Err(e) => Err(e),
        })
    }

    async fn commit(&mut self) -> wasmtime::Result<Result<index::IndexStats, index::IndexError>> {
        Ok(match self.index_service() {
            Ok(s) => s.commit(&self.scope).await.map_err(index_failed),
            Err(e) => Err(e),
        })
    }

    async fn search(
        &mut self,
        query: String,
        limit: u32,
    ) -> wasmtime::Result<Result<Vec<index::Hit>, index::IndexError>> {
        Ok(match self.index_service() {
            Ok(s) => s
                .search(&self.scope, query, limit)
                .await
                .map_err(index_failed),
            Err(e) => Err(e),
        })
    }
}

impl approval::Host for TaskState {
    async fn request(
        &mut self,
        req: approval::ApprovalRequest,
    ) -> wasmtime::Result<approval::Decision> {
        Ok(match self.scope.run.services.approval.clone() {
            Some(s) => s.request(&self.scope, req).await,
            // Nobody to ask means nobody said yes.
            None => approval::Decision::Denied,
        })
    }
}
