//! The host's thinking: at each step of a run it reads the situation and chooses
//! to retrieve more context, answer, or plan tasks; at the end it writes the
//! answer. Two implementations: [`offline::OfflineModel`] (deterministic rules,
//! no network, the default) and [`llm::LlmModel`] (any chat model through
//! `capstan-models`).
//!
//! The orchestrator enforces every bound (retrieval attempts, plan validity,
//! budgets); a model only proposes.

pub mod llm;
pub mod offline;
pub mod sampling;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use capstan_protocol::{Citation, FailureReason, PlanTask, TaskStatus, Usage};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Turn {
    /// `user` or `assistant`.
    pub role: String,
    pub content: String,
}

/// A retrieved passage, with what is needed to cite it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Passage {
    pub path: String,
    pub heading: String,
    pub line_start: u32,
    pub line_end: u32,
    pub text: String,
    pub score: f32,
}

/// What a capability offers, for planning.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CapabilitySummary {
    pub kind: String,
    pub operations: Vec<OperationSummary>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperationSummary {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
}

/// Everything the host knows at one step (saved in a run's checkpoint).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HostContext {
    pub message: String,
    /// Recent turns, oldest first.
    pub history: Vec<Turn>,
    pub summary: String,
    pub workspace: Option<String>,
    pub passages: Vec<Passage>,
    /// Retrievals done so far in this run.
    pub retrievals: u32,
    pub last_retrieval_sufficient: Option<bool>,
    pub capabilities: Vec<CapabilitySummary>,
    /// Set when a previous proposal was rejected (malformed output).
    pub feedback: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Retrieve {
        query: String,
        variants: Vec<String>,
        reason: String,
        /// The user's own words when `query` rewrites a follow-up to stand
        /// alone (shown in the feed next to the query).
        rewritten_from: Option<String>,
    },
    Answer {
        reason: String,
    },
    Plan {
        tasks: Vec<PlanTask>,
        reason: String,
    },
}

/// The result of one task, as the final answer reports it.
#[derive(Debug, Clone, Serialize)]
pub struct TaskReport {
    pub task: PlanTask,
    /// `Completed`, `Failed` or `Skipped`.
    pub status: TaskStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<FailureReason>,
    pub summary: String,
    pub data: serde_json::Value,
}

/// What the final answer is written from.
#[derive(Debug, Clone, Default)]
pub struct FinalInput {
    pub ctx: HostContext,
    pub reports: Vec<TaskReport>,
    /// Why the run cannot succeed, if it cannot (retry-limit, workspace-required...).
    pub failure: Option<(FailureReason, String)>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelFailure {
    /// The model's output could not be used after the bounded retries.
    /// With the usage of the failed attempts, which still cost tokens.
    #[error("the model's output could not be used: {0}")]
    Malformed(String, Usage),
    #[error("the model is unavailable: {0}")]
    Unavailable(String),
    #[error("cancelled")]
    Cancelled,
}

/// Receives answer text as it is produced, in order.
pub type TokenSink<'a> = &'a mut (dyn FnMut(&str) + Send);

#[async_trait]
pub trait HostModel: Send + Sync {
    /// The model's name for events, usage and pricing.
    fn id(&self) -> String;

    /// Whether the model plans from operation names and input schemas (so every
    /// plugin must be loaded before it plans), rather than from kinds alone.
    fn reads_operation_schemas(&self) -> bool {
        true
    }

    /// Whether the passages gathered so far answer the message, by the
    /// model's own reading; `None` leaves it to retrieval's word coverage.
    fn judge_sufficiency(&self, _ctx: &HostContext) -> Option<bool> {
        None
    }

    /// One step of the host loop.
    async fn step(
        &self,
        ctx: &HostContext,
        cancel: &CancellationToken,
    ) -> Result<(Step, Usage), ModelFailure>;

    /// Write the final answer, streaming it through `on_token`. Returns the full
    /// text and the passages it cites.
    async fn finalize(
        &self,
        input: &FinalInput,
        cancel: &CancellationToken,
        on_token: TokenSink<'_>,
    ) -> Result<(String, Vec<Citation>, Usage), ModelFailure>;

    /// Answer a prompt an external MCP server sent (`sampling/createMessage`),
    /// with at most `req.max_tokens` tokens. Returns the text, whether it
    /// stopped at the limit, and the usage.
    /// A model that cannot (a stand-in in a bench) says so.
    async fn sample(
        &self,
        _req: &crate::plugins::context::SampleRequest,
        _cancel: &CancellationToken,
    ) -> Result<(String, bool, Usage), ModelFailure> {
        Err(ModelFailure::Unavailable(format!(
            "the model `{}` does not answer sampling requests",
            self.id()
        )))
    }
}

/// The host model the config asks for: `[model]` absent or `kind = "offline"`
/// gives the embedded offline model.
pub fn build(config: &crate::config::Config) -> anyhow::Result<std::sync::Arc<dyn HostModel>> {
    use capstan_models::ProviderKind;
    match &config.model {
        None => Ok(std::sync::Arc::new(offline::OfflineModel)),
        Some(m) if m.kind == ProviderKind::Offline => {
            Ok(std::sync::Arc::new(offline::OfflineModel))
        }
        Some(m) => {
            let provider = capstan_models::build(m)
                .map_err(|e| anyhow::anyhow!("[model] in capstan.toml: {e}"))?;
            let mut prices = capstan_models::PriceTable::defaults();
            if let Some(extra) = &config.prices {
                prices.merge(extra);
            }
            Ok(std::sync::Arc::new(llm::LlmModel {
                provider,
                model: m.model.clone(),
                prices,
                max_corrections: 2,
            }))
        }
    }
}
