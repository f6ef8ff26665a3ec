//! Capstan's model layer: providers behind one streaming trait that reports token usage.
//!
//! - [`ModelProvider`]: `stream` a [`ChatRequest`] as [`StreamEvent`]s, or `complete` it.
//! - [`OpenAiCompatible`] (OpenAI, Ollama, vLLM, llama.cpp, ...) and [`Anthropic`].
//! - [`ProviderConfig`] + [`build`]: a provider from config, keys read from env vars.
//! - [`PriceTable`]: usage to dollars.
//! - `scripted` (feature `scripted`): a local server speaking both wire formats from a
//!   script, for tests.
//!
//! Guarantees of every stream this crate returns:
//! - events come as `Delta*`, one `Usage`, one `Done` (or an `Err`, after which nothing);
//! - usage the server did not report is estimated (`Usage::estimated = true`);
//! - retries happen only before the first `Delta` reached the caller, so output is never
//!   duplicated;
//! - cancelling the token ends the stream with [`ModelError::Cancelled`] at the next
//!   poll, and dropping the stream (or a pending `stream` future) closes the connection.

#![warn(missing_docs)]

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio_util::sync::CancellationToken;

pub mod anthropic;
mod config;
mod error;
mod http;
pub mod openai;
pub mod pricing;
pub mod sse;
mod types;

#[cfg(feature = "scripted")]
pub mod scripted;

pub use anthropic::Anthropic;
pub use config::{ProviderConfig, ProviderKind, build, build_with_env};
pub use error::ModelError;
pub use http::{HttpOptions, ProviderSettings, RetryPolicy};
pub use openai::OpenAiCompatible;
pub use pricing::{Price, PriceTable};
pub use types::{ChatRequest, Completion, Message, Role, StreamEvent, Usage, estimate_tokens};

/// The stream of one completion.
pub type EventStream = BoxStream<'static, Result<StreamEvent, ModelError>>;

/// A chat model reachable over some protocol.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// A short name for logs and events (`openai`, `anthropic`, or as configured).
    fn id(&self) -> &str;

    /// Start a completion. Resolves once the server has accepted the request (after
    /// retries); errors from then on arrive as stream items. See the crate docs for the
    /// event order and the cancellation guarantees.
    async fn stream(
        &self,
        req: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, ModelError>;

    /// Run a completion to the end and collect it. Fails with [`ModelError::Protocol`] if
    /// the stream ends without `Done`. Usage missing from the stream (a provider not of
    /// this crate may omit it) is estimated.
    async fn complete(
        &self,
        req: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<Completion, ModelError> {
        let estimate_req = ChatRequest {
            messages: req.messages.clone(),
            json_schema: req.json_schema.clone(),
            ..ChatRequest::default()
        };
        let mut stream = self.stream(req, cancel).await?;
        let mut text = String::new();
        let mut usage = None;
        while let Some(event) = stream.next().await {
            match event? {
                StreamEvent::Delta(t) => text.push_str(&t),
                StreamEvent::Usage(u) => usage = Some(u),
                StreamEvent::Done { stop_reason } => {
                    let usage = usage.unwrap_or_else(|| estimate_req.estimate_usage(&text));
                    return Ok(Completion {
                        text,
                        usage,
                        stop_reason,
                    });
                }
            }
        }
        Err(ModelError::Protocol(format!(
            "the {} stream ended without a Done event",
            self.id()
        )))
    }
}

/// The model to ask for: the request's, else the provider's default.
pub(crate) fn resolve_model<'a>(
    requested: &'a str,
    default: Option<&'a str>,
    provider: &str,
) -> Result<&'a str, ModelError> {
    if !requested.is_empty() {
        return Ok(requested);
    }
    default.ok_or_else(|| {
        ModelError::Config(format!(
            "no model given: set `model` in the {provider} provider config or in the request"
        ))
    })
}
