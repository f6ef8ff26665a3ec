//! The `cli` runtime: the rendered prompt through Capstan's own model provider. No MCP,
//! no tools: one streamed completion per step.

use std::sync::Arc;

use async_trait::async_trait;
use capstan_models::{ChatRequest, Message, ModelError, ModelProvider, StreamEvent, Usage};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{AgentJob, ProgressFn, RunOutput, Runner};
use crate::event::Progress;
use crate::{RuntimeKind, TaskStatus};

/// Runs a step as one streamed completion of Capstan's own model provider (no tools).
pub struct CliRunner {
    provider: Arc<dyn ModelProvider>,
    model: String,
}

impl CliRunner {
    /// A runner calling `model` on `provider`.
    pub fn new(provider: Arc<dyn ModelProvider>, model: String) -> Self {
        Self { provider, model }
    }
}

#[async_trait]
impl Runner for CliRunner {
    fn runtime(&self) -> RuntimeKind {
        RuntimeKind::Cli
    }

    fn default_model(&self) -> Option<String> {
        Some(self.model.clone()).filter(|m| !m.is_empty())
    }

    async fn run(
        &self,
        job: &AgentJob,
        progress: ProgressFn<'_>,
        cancel: CancellationToken,
    ) -> RunOutput {
        let model = job.model.clone().unwrap_or_else(|| self.model.clone());
        let req = ChatRequest::new(model.clone(), vec![Message::user(job.prompt.clone())]);
        let estimate = req.clone();
        let mut output = String::new();
        let mut usage = None;
        let model_name = Some(model).filter(|m| !m.is_empty());
        let finish =
            |output: String, usage: Option<Usage>, status: TaskStatus, error: Option<String>| {
                let usage = usage.unwrap_or_else(|| estimate.estimate_usage(&output));
                RunOutput {
                    status,
                    output,
                    usage,
                    model: model_name.clone(),
                    error,
                }
            };
        let mut stream = match self.provider.stream(req, cancel.clone()).await {
            Ok(s) => s,
            Err(ModelError::Cancelled) => {
                return finish(output, usage, TaskStatus::Cancelled, None);
            }
            Err(e) => return finish(output, usage, TaskStatus::Failed, Some(e.to_string())),
        };
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(StreamEvent::Delta(t)) => {
                    progress(Progress::Text { text: t.clone() });
                    output.push_str(&t);
                }
                Ok(StreamEvent::Usage(u)) => usage = Some(u),
                Ok(StreamEvent::Done { .. }) => {
                    return finish(output, usage, TaskStatus::Completed, None);
                }
                Err(ModelError::Cancelled) => {
                    return finish(output, usage, TaskStatus::Cancelled, None);
                }
                Err(e) => {
                    return finish(output, usage, TaskStatus::Failed, Some(e.to_string()));
                }
            }
        }
        finish(
            output,
            usage,
            TaskStatus::Failed,
            Some("the model stream ended before it finished".into()),
        )
    }
}
