//! Anthropic Messages API (`POST {base_url}/v1/messages`, streaming).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::http::{self, Decoder, Engine, Piece, Prepared, ProviderSettings};
use crate::sse::SseEvent;
use crate::{ChatRequest, EventStream, ModelError, ModelProvider, Role};

/// The `anthropic-version` header this crate's parser was written against.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The default base URL of the `anthropic` kind.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// `max_tokens` is mandatory for Anthropic; this is sent when the request has none.
/// 4096 is accepted by every current Claude model.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A provider speaking the Anthropic Messages streaming protocol.
///
/// System messages are joined (blank-line separated, in order) into the top-level
/// `system` field. Usage: `input_tokens` is the sum of `input_tokens`,
/// `cache_creation_input_tokens` and `cache_read_input_tokens` (the whole prompt), so a
/// cost computed from it ignores prompt-cache discounts and surcharges.
pub struct Anthropic {
    engine: Arc<Engine>,
    url: String,
    headers: HeaderMap,
    id: String,
    default_model: Option<String>,
}

impl std::fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic")
            .field("id", &self.id)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Anthropic {
    /// Uses [`ANTHROPIC_VERSION`]. Fails with [`ModelError::Config`] on a bad URL, header
    /// or key.
    pub fn new(settings: ProviderSettings) -> Result<Self, ModelError> {
        Self::with_version(settings, ANTHROPIC_VERSION)
    }

    /// Like [`Anthropic::new`], sending `version` as the `anthropic-version` header.
    pub fn with_version(settings: ProviderSettings, version: &str) -> Result<Self, ModelError> {
        let id = settings
            .id
            .clone()
            .unwrap_or_else(|| "anthropic".to_string());
        let engine = Engine::new(&settings, id.clone())?;
        let base = settings.trimmed_base_url()?;
        let mut headers = settings.header_map()?;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        headers.insert(
            "anthropic-version",
            HeaderValue::from_str(version).map_err(|_| {
                ModelError::Config(format!("invalid anthropic version {version:?}"))
            })?,
        );
        if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            let mut v = HeaderValue::from_str(key).map_err(|_| {
                ModelError::Config("the API key is not a valid header value".into())
            })?;
            v.set_sensitive(true);
            headers.insert("x-api-key", v);
        }
        Ok(Self {
            engine: Arc::new(engine),
            url: format!("{base}/v1/messages"),
            headers,
            id,
            default_model: settings.default_model.clone(),
        })
    }

    /// The JSON body sent for `req`.
    pub fn request_body(&self, req: &ChatRequest) -> Result<Value, ModelError> {
        let model = crate::resolve_model(&req.model, self.default_model.as_deref(), &self.id)?;
        let mut system: Vec<String> = Vec::new();
        let mut messages = Vec::new();
        for m in &req.messages {
            match m.role {
                Role::System => system.push(m.content.clone()),
                // Consecutive turns of one role are merged by the API itself.
                Role::User => messages.push(json!({"role": "user", "content": m.content})),
                Role::Assistant => {
                    messages.push(json!({"role": "assistant", "content": m.content}))
                }
            }
        }
        if let Some(schema) = &req.json_schema {
            // No native JSON-schema mode here: ask for it in words.
            system.push(format!(
                "Respond with only a single JSON value (no prose, no code fences) that \
                 validates against this JSON Schema:\n{schema}"
            ));
        }
        let mut obj = serde_json::Map::new();
        obj.insert("model".into(), json!(model));
        obj.insert(
            "max_tokens".into(),
            json!(req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
        );
        obj.insert("messages".into(), Value::Array(messages));
        obj.insert("stream".into(), json!(true));
        if !system.is_empty() {
            obj.insert("system".into(), json!(system.join("\n\n")));
        }
        if let Some(t) = req.temperature {
            obj.insert("temperature".into(), json!(t));
        }
        Ok(Value::Object(obj))
    }
}

#[async_trait]
impl ModelProvider for Anthropic {
    fn id(&self) -> &str {
        &self.id
    }

    async fn stream(
        &self,
        req: ChatRequest,
        cancel: CancellationToken,
    ) -> Result<EventStream, ModelError> {
        let body = self.request_body(&req)?;
        let prepared = Prepared {
            url: self.url.clone(),
            headers: self.headers.clone(),
            body: Bytes::from(body.to_string()),
            input_estimate: req.estimated_input_tokens(),
        };
        http::start::<AnthropicDecoder>(self.engine.clone(), prepared, cancel).await
    }
}

/// Decodes the Messages event stream. Unknown event types are ignored, as Anthropic's
/// versioning policy asks (new event types may appear without a version change).
#[derive(Default)]
pub(crate) struct AnthropicDecoder;

impl Decoder for AnthropicDecoder {
    fn on_event(&mut self, ev: SseEvent, out: &mut Vec<Piece>) -> Result<(), ModelError> {
        let v = http::parse_json(&ev.data)?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(ev.event.as_deref())
            .unwrap_or("");
        match kind {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    push_usage(u, out);
                }
            }
            "content_block_delta" => {
                let delta = v.get("delta");
                // thinking_delta, signature_delta and input_json_delta are not answer text.
                if delta.and_then(|d| d.get("type")).and_then(Value::as_str) == Some("text_delta") {
                    let text = delta
                        .and_then(|d| d.get("text"))
                        .and_then(Value::as_str)
                        .ok_or_else(|| ModelError::Protocol("a text_delta without text".into()))?;
                    out.push(Piece::Delta(text.to_string()));
                }
            }
            "message_delta" => {
                if let Some(reason) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    out.push(Piece::Stop(reason.to_string()));
                }
                if let Some(u) = v.get("usage") {
                    push_usage(u, out);
                }
            }
            "message_stop" => out.push(Piece::End),
            "error" => return Err(stream_error(&v)),
            _ => {} // ping, content_block_start, content_block_stop, future types
        }
        Ok(())
    }

    fn on_json_body(&mut self, v: Value, out: &mut Vec<Piece>) -> Result<(), ModelError> {
        if v.get("type").and_then(Value::as_str) == Some("error") {
            return Err(stream_error(&v));
        }
        let content = v
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| ModelError::Protocol("the JSON response has no content array".into()))?;
        for block in content {
            if block.get("type").and_then(Value::as_str) == Some("text")
                && let Some(t) = block.get("text").and_then(Value::as_str)
            {
                out.push(Piece::Delta(t.to_string()));
            }
        }
        if let Some(reason) = v.get("stop_reason").and_then(Value::as_str) {
            out.push(Piece::Stop(reason.to_string()));
        }
        if let Some(u) = v.get("usage") {
            push_usage(u, out);
        }
        Ok(())
    }
}

/// `input` is the whole prompt (uncached + cache writes + cache reads); fields absent
/// from this event leave the previous value.
fn push_usage(u: &Value, out: &mut Vec<Piece>) {
    let get = |k: &str| u.get(k).and_then(Value::as_u64);
    let input = get("input_tokens").map(|n| {
        n + get("cache_creation_input_tokens").unwrap_or(0)
            + get("cache_read_input_tokens").unwrap_or(0)
    });
    let output = get("output_tokens");
    if input.is_some() || output.is_some() {
        out.push(Piece::Usage { input, output });
    }
}

/// An `error` event, mapped to the HTTP status Anthropic documents for its type so the
/// retry policy treats it like the same error at the header stage.
fn stream_error(v: &Value) -> ModelError {
    let kind = v
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("error");
    let message = v
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    let status = match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "overloaded_error" => 529,
        _ => 500,
    };
    let body_excerpt =
        crate::error::shorten(&format!("{kind}: {message}"), crate::error::EXCERPT_CHARS);
    match status {
        401 | 403 => ModelError::Auth {
            status,
            provider: "anthropic".into(),
            key_env: None,
            body_excerpt,
        },
        _ => ModelError::Http {
            status,
            body_excerpt,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;

    fn decode(event: &str, data: &str) -> Result<Vec<Piece>, ModelError> {
        let mut out = Vec::new();
        AnthropicDecoder.on_event(
            SseEvent {
                event: Some(event.into()),
                data: data.into(),
            },
            &mut out,
        )?;
        Ok(out)
    }

    #[test]
    fn decodes_the_event_sequence() {
        let start = r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}"#;
        assert_eq!(
            decode("message_start", start).unwrap(),
            vec![Piece::Usage {
                input: Some(40),
                output: Some(1)
            }]
        );
        assert_eq!(decode("ping", r#"{"type": "ping"}"#).unwrap(), vec![]);
        assert_eq!(
            decode(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#
            )
            .unwrap(),
            vec![Piece::Delta("Hello".into())]
        );
        assert_eq!(
            decode(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#
            )
            .unwrap(),
            vec![]
        );
        assert_eq!(
            decode(
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#
            )
            .unwrap(),
            vec![Piece::Stop("end_turn".into()), Piece::Usage { input: None, output: Some(15) }]
        );
        assert_eq!(
            decode("message_stop", r#"{"type":"message_stop"}"#).unwrap(),
            vec![Piece::End]
        );
    }

    #[test]
    fn error_event_maps_to_status() {
        let e = decode(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
        .unwrap_err();
        assert!(matches!(e, ModelError::Http { status: 529, .. }), "{e:?}");
        assert!(e.is_retryable());
    }

    #[test]
    fn system_messages_go_to_the_system_field() {
        let p = Anthropic::new(ProviderSettings::new("http://127.0.0.1:1")).unwrap();
        let mut req = ChatRequest::new(
            "claude-haiku-4-5",
            vec![
                Message::system("be brief"),
                Message::user("hi"),
                Message::system("in French"),
            ],
        );
        req.json_schema = Some(json!({"type": "object"}));
        let b = p.request_body(&req).unwrap();
        let system = b["system"].as_str().unwrap();
        assert!(
            system.starts_with("be brief\n\nin French\n\nRespond with only"),
            "{system}"
        );
        assert_eq!(b["messages"], json!([{"role": "user", "content": "hi"}]));
        assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(b["stream"], true);
    }
}
