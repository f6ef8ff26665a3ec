//! Provider-neutral request, usage and stream-event types.

use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions. Anthropic takes these in the top-level `system` field, so a provider
    /// may move them out of the message list; their relative order is kept.
    System,
    /// The person's words (and context the host adds for the model).
    User,
    /// The model's earlier answers.
    Assistant,
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who says it.
    pub role: Role,
    /// The text, sent as is.
    pub content: String,
}

impl Message {
    /// A message of `role`.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
        }
    }
    /// A [`Role::System`] message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }
    /// A [`Role::User`] message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
    /// A [`Role::Assistant`] message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
}

/// A chat completion request, the same for every provider.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The provider's model id. Empty means "the provider's configured default model"
    /// (see [`crate::ProviderConfig::model`]); a provider without one answers
    /// [`crate::ModelError::Config`].
    #[serde(default)]
    pub model: String,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// Upper bound on generated tokens. Anthropic requires one, so it gets
    /// [`crate::anthropic::DEFAULT_MAX_TOKENS`] when this is `None`.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Sampling temperature; `None` leaves the server's default.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Ask for JSON output matching this JSON Schema. OpenAI-compatible servers get
    /// `response_format: {type: "json_schema", ...}` (enforced where the server supports
    /// it); Anthropic gets an instruction appended to the system prompt (best effort: the
    /// caller must still validate the output).
    #[serde(default)]
    pub json_schema: Option<serde_json::Value>,
}

impl ChatRequest {
    /// A request for `model` (empty: the provider's default) with no token cap,
    /// temperature or schema.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            messages,
            ..Self::default()
        }
    }

    /// Rough token count of everything this request sends (see [`estimate_tokens`]).
    pub fn estimated_input_tokens(&self) -> u64 {
        let mut chars: usize = self
            .messages
            .iter()
            .map(|m| m.content.chars().count())
            .sum();
        if let Some(schema) = &self.json_schema {
            chars += schema.to_string().chars().count();
        }
        capstan_protocol::tokens_for_chars(chars)
    }
}

/// Token usage of one completion: Capstan's one usage type (a completion
/// has no cost until priced, see [`crate::PriceTable`]).
pub use capstan_protocol::{Usage, estimate_tokens};

impl ChatRequest {
    /// Usage estimated from this request and the generated text, for
    /// providers that report none.
    pub fn estimate_usage(&self, output: &str) -> Usage {
        Usage {
            input_tokens: self.estimated_input_tokens(),
            output_tokens: estimate_tokens(output),
            estimated: true,
            cost_usd: None,
        }
    }
}

/// One event of a completion stream.
///
/// Invariant of every stream returned by this crate's providers: zero or more `Delta`,
/// then exactly one `Usage`, then exactly one `Done`, then the stream ends. An `Err` item
/// may replace any of these; nothing follows an `Err`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamEvent {
    /// The next piece of generated text (never empty).
    Delta(String),
    /// Tokens of the whole call; what the server did not report is estimated.
    Usage(Usage),
    /// The provider finished. `stop_reason` is the provider's own word
    /// (`stop`, `length`, `end_turn`, `max_tokens`, ...).
    Done {
        /// The provider's stop reason; `None` when it sent none.
        stop_reason: Option<String>,
    },
}

/// A collected completion (see [`crate::ModelProvider::complete`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// The whole generated text.
    pub text: String,
    /// Tokens of the call (see [`StreamEvent::Usage`]).
    pub usage: Usage,
    /// The provider's stop reason, as in [`StreamEvent::Done`].
    pub stop_reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_rounds_up_and_is_at_least_one() {
        assert_eq!(estimate_tokens(""), 1);
        assert_eq!(estimate_tokens("abc"), 1);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        // Characters, not bytes.
        assert_eq!(estimate_tokens("ééééé"), 2);
    }

    #[test]
    fn stream_event_serialises_externally_tagged() {
        let ev = StreamEvent::Done {
            stop_reason: Some("stop".into()),
        };
        assert_eq!(
            serde_json::to_value(&ev).unwrap(),
            serde_json::json!({"done": {"stop_reason": "stop"}})
        );
        let ev = StreamEvent::Delta("hi".into());
        assert_eq!(
            serde_json::to_value(&ev).unwrap(),
            serde_json::json!({"delta": "hi"})
        );
    }
}
