//! Components built against `capstan:plugin@0.1.x` (wit-snapshots/0.1.0): their
//! own bindings, with every import served by the current (0.2) implementation
//! through conversions, and their exports converted to the current types.
//!
//! What differs from 0.2: index calls fail with a string, absent data is `""`,
//! and the `model` interface exists (no host ever offered it: it answers `denied`).

use super::state::TaskState;
use crate::plugins::bindings as now;

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit-snapshots/0.1.0",
    imports: { default: async | trappable },
    exports: { default: async },
});

use self::capstan::plugin::{approval, cancel, events, exec, index, model, types};

fn risk_now(r: types::Risk) -> now::types::Risk {
    use now::types::Risk as N;
    use types::Risk as O;
    match r {
        O::ReadOnly => N::ReadOnly,
        O::Write => N::Write,
        O::Delete => N::Delete,
        O::Network => N::Network,
        O::Unknown => N::Unknown,
    }
}

fn risk_old(r: now::types::Risk) -> types::Risk {
    use now::types::Risk as N;
    use types::Risk as O;
    match r {
        N::ReadOnly => O::ReadOnly,
        N::Write => O::Write,
        N::Delete => O::Delete,
        N::Network => O::Network,
        N::Unknown => O::Unknown,
    }
}

/// "" meant "no data" in 0.1.
fn data_now(data: String) -> Option<String> {
    (!data.is_empty()).then_some(data)
}

pub fn capability_info(info: types::CapabilityInfo) -> now::types::CapabilityInfo {
    now::types::CapabilityInfo {
        kinds: info.kinds,
        operations: info
            .operations
            .into_iter()
            .map(|o| now::types::OperationInfo {
                name: o.name,
                description: o.description,
                input_schema: o.input_schema,
                risk: risk_now(o.risk),
            })
            .collect(),
    }
}

pub fn task(t: &now::types::Task) -> types::Task {
    types::Task {
        id: t.id.clone(),
        kind: t.kind.clone(),
        operation: t.operation.clone(),
        input: t.input.clone(),
    }
}

pub fn task_result(
    r: Result<types::TaskOutput, types::TaskError>,
) -> Result<now::types::TaskOutput, now::types::TaskError> {
    use now::types::TaskError as N;
    use types::TaskError as O;
    match r {
        Ok(out) => Ok(now::types::TaskOutput {
            summary: out.summary,
            data: data_now(out.data),
        }),
        Err(e) => Err(match e {
            O::InvalidInput(m) => N::InvalidInput(m),
            O::Denied(m) => N::Denied(m),
            O::NotImplemented(m) => N::NotImplemented(m),
            O::Failed(m) => N::Failed(m),
            O::Cancelled => N::Cancelled,
        }),
    }
}

impl types::Host for TaskState {}

impl events::Host for TaskState {
    async fn emit(&mut self, ev: events::Activity) -> wasmtime::Result<()> {
        now::events::Host::emit(
            self,
            now::events::Activity {
                kind: ev.kind,
                message: ev.message,
                data: data_now(ev.data),
            },
        )
        .await
    }

    async fn progress(&mut self, done: u64, total: u64, unit: String) -> wasmtime::Result<()> {
        now::events::Host::progress(self, done, total, unit).await
    }
}

impl cancel::Host for TaskState {
    async fn is_cancelled(&mut self) -> wasmtime::Result<bool> {
        now::cancel::Host::is_cancelled(self).await
    }
}

impl exec::Host for TaskState {
    async fn run(
        &mut self,
        req: exec::ExecRequest,
    ) -> wasmtime::Result<Result<exec::ExecOutput, exec::ExecError>> {
        let req = now::exec::ExecRequest {
            command: match req.command {
                exec::Command::Shell(s) => now::exec::Command::Shell(s),
                exec::Command::Argv(a) => now::exec::Command::Argv(a),
            },
            cwd: req.cwd,
            timeout_ms: req.timeout_ms,
            output_limit: req.output_limit,
            min_risk: req.min_risk.map(risk_now),
        };
        let out = now::exec::Host::run(self, req).await?;
        Ok(match out {
            Ok(o) => Ok(exec::ExecOutput {
                exit_code: o.exit_code,
                signal: o.signal,
                stdout: o.stdout,
                stderr: o.stderr,
                truncated_bytes: o.truncated_bytes,
                duration_ms: o.duration_ms,
                timed_out: o.timed_out,
                risk: risk_old(o.risk),
                reasons: o.reasons,
            }),
            Err(e) => Err(match e {
                now::exec::ExecError::Denied(m) => exec::ExecError::Denied(m),
                now::exec::ExecError::WorkspaceRequired => exec::ExecError::WorkspaceRequired,
                now::exec::ExecError::InvalidRequest(m) => exec::ExecError::InvalidRequest(m),
                now::exec::ExecError::Cancelled => exec::ExecError::Cancelled,
                now::exec::ExecError::Failed(m) => exec::ExecError::Failed(m),
            }),
        })
    }
}

/// 0.1's index errors were strings.
fn index_error(e: now::index::IndexError) -> String {
    use now::index::IndexError as E;
    match e {
        E::Denied(m) | E::InvalidRequest(m) | E::Failed(m) => m,
        E::WorkspaceRequired => "no workspace is bound, so there is no index".into(),
    }
}

fn file_meta_now(m: index::FileMeta) -> now::index::FileMeta {
    now::index::FileMeta {
        path: m.path,
        mtime_ms: m.mtime_ms,
        size: m.size,
        hash: m.hash,
    }
}

impl index::Host for TaskState {
    async fn known_files(&mut self) -> wasmtime::Result<Result<Vec<index::FileMeta>, String>> {
        let r = now::index::Host::known_files(self).await?;
        Ok(r.map_err(index_error).map(|files| {
            files
                .into_iter()
                .map(|m| index::FileMeta {
                    path: m.path,
                    mtime_ms: m.mtime_ms,
                    size: m.size,
                    hash: m.hash,
                })
                .collect()
        }))
    }

    async fn upsert_files(
        &mut self,
        files: Vec<index::FileUpdate>,
    ) -> wasmtime::Result<Result<(), String>> {
        let files = files
            .into_iter()
            .map(|f| now::index::FileUpdate {
                meta: file_meta_now(f.meta),
                passages: f
                    .passages
                    .into_iter()
                    .map(|p| now::index::Passage {
                        heading: p.heading,
                        text: p.text,
                        line_start: p.line_start,
                        line_end: p.line_end,
                    })
                    .collect(),
            })
            .collect();
        Ok(now::index::Host::upsert_files(self, files)
            .await?
            .map_err(index_error))
    }

    async fn remove_file(&mut self, path: String) -> wasmtime::Result<Result<(), String>> {
        Ok(now::index::Host::remove_file(self, path)
            .await?
            .map_err(index_error))
    }

    async fn commit(&mut self) -> wasmtime::Result<Result<index::IndexStats, String>> {
        let r = now::index::Host::commit(self).await?;
        Ok(r.map_err(index_error).map(|s| index::IndexStats {
            files: s.files,
            passages: s.passages,
        }))
    }

    async fn search(
        &mut self,
        query: String,
        limit: u32,
    ) -> wasmtime::Result<Result<Vec<index::Hit>, String>> {
        let r = now::index::Host::search(self, query, limit).await?;
        Ok(r.map_err(index_error).map(|hits| {
            hits.into_iter()
                .map(|h| index::Hit {
                    path: h.path,
                    heading: h.heading,
                    text: h.text,
                    line_start: h.line_start,
                    line_end: h.line_end,
                    score: h.score,
                    snippet: h.snippet,
                })
                .collect()
        }))
    }
}

impl approval::Host for TaskState {
    async fn request(
        &mut self,
        req: approval::ApprovalRequest,
    ) -> wasmtime::Result<approval::Decision> {
        let req = now::approval::ApprovalRequest {
            action: req.action,
            detail: req.detail,
            risk: risk_now(req.risk),
            reasons: req.reasons,
        };
        use now::approval::Decision as N;
        Ok(match now::approval::Host::request(self, req).await? {
            N::Approved => approval::Decision::Approved,
            N::ApprovedForSession => approval::Decision::ApprovedForSession,
            N::Denied => approval::Decision::Denied,
            N::Aborted => approval::Decision::Aborted,
        })
    }
}

impl model::Host for TaskState {
    async fn complete(
        &mut self,
        _req: model::CompletionRequest,
    ) -> wasmtime::Result<Result<model::Completion, model::ModelError>> {
        Ok(Err(model::ModelError::Denied(
            "Capstan offers no model service to plugins (the interface was removed in capstan:plugin@0.2.0)"
                .into(),
        )))
    }
}
