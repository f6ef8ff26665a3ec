//! One retrieval from the workspace's knowledge base: bounded attempts, the
//! passages kept without duplicates, and whether they suffice (the model's
//! reading wins over retrieval's own share of query words found).

use serde_json::json;

use super::{Host, Stop};
use crate::plugins::context::RunContext;
use crate::run::dispatch::run_task;
use crate::run::model::{HostContext, Passage};
use capstan_protocol::{Event, FailureReason, TaskRequest};

/// The retrieval capability the host loop uses.
pub const RETRIEVAL_KIND: &str = "local_kb_retrieval";

impl Host {
    pub(super) async fn retrieve(
        &self,
        ctx: &mut HostContext,
        run: &RunContext,
        query: String,
        variants: Vec<String>,
        rewritten_from: Option<String>,
    ) -> Result<(), Stop> {
        let attempt = ctx.retrievals + 1;
        let task_id = format!("retrieval-{attempt}");
        if ctx.retrievals >= self.config.max_retrievals {
            let message = format!(
                "retrieval stayed insufficient after {} attempts (last query: \"{}\")",
                self.config.max_retrievals, query
            );
            run.events.emit(Event::TaskFailed {
                task_id,
                reason: FailureReason::RetryLimit,
                message: message.clone(),
            });
            return Err(Stop::Fail(FailureReason::RetryLimit, message));
        }
        if run.workspace.is_none() {
            run.events.emit(Event::WorkspaceRequired {
                task_ids: vec![task_id],
                message: "searching the knowledge base needs a workspace; pass --workspace DIR"
                    .into(),
            });
            return Err(Stop::Fail(
                FailureReason::WorkspaceRequired,
                "no workspace is bound to this run".into(),
            ));
        }
        run.events.emit(Event::RetrievalStarted {
            attempt,
            query: query.clone(),
            variants: variants.clone(),
            rewritten_from,
        });
        let task = TaskRequest {
            id: task_id,
            kind: RETRIEVAL_KIND.into(),
            operation: "search".into(),
            input: crate::plugins::services::index::search_input(
                run,
                json!({"query": query, "variants": variants, "limit": self.config.retrieval_limit}),
            )
            .await,
        };
        let outcome = run_task(&self.runtime, &self.registry, &task, run).await;
        ctx.retrievals = attempt;
        let data = match outcome {
            Ok(ok) => ok.data,
            Err(f) if f.reason == FailureReason::Cancelled || run.cancel.is_cancelled() => {
                return Err(Stop::Cancelled);
            }
            Err(f) => {
                return Err(Stop::Fail(
                    f.reason,
                    format!("retrieval failed: {}", f.message),
                ));
            }
        };
        let passages: Vec<Passage> =
            serde_json::from_value(data["passages"].clone()).unwrap_or_default();
        let hits = passages.len() as u32;
        for p in passages {
            if !ctx
                .passages
                .iter()
                .any(|q| q.path == p.path && q.line_start == p.line_start)
            {
                ctx.passages.push(p);
            }
        }
        // The model's reading of the passages (does one answer?) wins over
        // retrieval's share of query words found.
        let sufficient = self
            .model
            .judge_sufficiency(ctx)
            .unwrap_or_else(|| data["sufficient"].as_bool().unwrap_or(hits > 0));
        run.events.emit(Event::RetrievalCompleted {
            attempt,
            hits,
            sufficient,
        });
        ctx.last_retrieval_sufficient = Some(sufficient);
        Ok(())
    }
}
