//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`): OpenAI,
//! Ollama, vLLM, llama.cpp's server, and the many hosted APIs that copy it.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::http::{self, Decoder, Engine, Piece, Prepared, ProviderSettings};
use crate::sse::SseEvent;
use crate::{ChatRequest, EventStream, ModelError, ModelProvider, Role};

/// A provider speaking the OpenAI Chat Completions streaming protocol.
///
/// Requests carry `stream: true` and `stream_options: {include_usage: true}`; servers
/// that ignore the latter get their usage estimated (`Usage::estimated`). A server that
/// ignores `stream: true` and answers one JSON object is handled too.
pub struct OpenAiCompatible {
    engine: Arc<Engine>,
    url: String,
    headers: HeaderMap,
    id: String,
    default_model: Option<String>,
    /// api.openai.com wants `max_completion_tokens` (newer models reject `max_tokens`);
    /// the compatible servers only know `max_tokens`.
    use_max_completion_tokens: bool,
}

impl std::fmt::Debug for OpenAiCompatible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiCompatible")
            .field("id", &self.id)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The default base URL of the `openai` kind.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

impl OpenAiCompatible {
    /// Fails with [`ModelError::Config`] on a bad URL, header or key.
    pub fn new(settings: ProviderSettings) -> Result<Self, ModelError> {
        let id = settings.id.clone().unwrap_or_else(|| "openai".to_string());
        let engine = Engine::new(&settings, id.clone())?;
        let base = settings.trimmed_base_url()?;
        let mut headers = settings.header_map()?;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(key) = settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ModelError::Config("the API key is not a valid header value".into())
            })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        Ok(Self {
            engine: Arc::new(engine),
            url: format!("{base}/chat/completions"),
            headers,
            id,
            default_model: settings.default_model.clone(),
            use_max_completion_tokens: base.starts_with("https://api.openai.com"),
        })
    }

    /// The JSON body sent for `req` (public so callers can log or inspect it).
    pub fn request_body(&self, req: &ChatRequest) -> Result<Value, ModelError> {
        let model = crate::resolve_model(&req.model, self.default_model.as_deref(), &self.id)?;
        let messages: Vec<Value> = req
            .messages
            .iter()
            .map(|m| {
                let role = match m.role {
                    Role::System => "system",
                    Role::User => "user",
                    Role::Assistant => "assistant",
                };
                json!({"role": role, "content": m.content})
            })
            .collect();
        let mut obj = serde_json::Map::new();
        obj.insert("model".into(), json!(model));
        obj.insert("messages".into(), Value::Array(messages));
        obj.insert("stream".into(), json!(true));
        obj.insert("stream_options".into(), json!({"include_usage": true}));
        if let Some(n) = req.max_tokens {
            let key = if self.use_max_completion_tokens {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            obj.insert(key.into(), json!(n));
        }
        if let Some(t) = req.temperature {
            obj.insert("temperature".into(), json!(t));
        }
        if let Some(schema) = &req.json_schema {
            // Not `strict`: strict mode rejects schemas that do not meet OpenAI's subset
            // (every property required, additionalProperties false), and callers pass
            // ordinary schemas. The output must be validated by the caller either way.
            obj.insert(
                "response_format".into(),
                json!({
                    "type": "json_schema",
                    "json_schema": {"name": "response", "schema": schema},
                }),
            );
        }
        Ok(Value::Object(obj))
    }
}

#[async_trait]
impl ModelProvider for OpenAiCompatible {
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
        http::start::<OpenAiDecoder>(self.engine.clone(), prepared, cancel).await
    }
}

/// Decodes `data: {chat.completion.chunk}` events and the `[DONE]` marker.
#[derive(Default)]
pub(crate) struct OpenAiDecoder;

impl Decoder for OpenAiDecoder {
    fn on_event(&mut self, ev: SseEvent, out: &mut Vec<Piece>) -> Result<(), ModelError> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            out.push(Piece::End);
            return Ok(());
        }
        let v = http::parse_json(data)?;
        check_error(&v)?;
        if let Some(choice) = first_choice(&v)? {
            // `reasoning_content` / `reasoning` (vLLM, DeepSeek, Ollama) is thinking, not
            // answer text: deliberately not forwarded.
            if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
                out.push(Piece::Delta(text.to_string()));
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                out.push(Piece::Stop(reason.to_string()));
            }
        }
        push_usage(&v, out);
        Ok(())
    }

    fn on_json_body(&mut self, v: Value, out: &mut Vec<Piece>) -> Result<(), ModelError> {
        check_error(&v)?;
        let choice = first_choice(&v)?
            .ok_or_else(|| ModelError::Protocol("the JSON response has no choices".into()))?;
        if let Some(text) = choice.pointer("/message/content").and_then(Value::as_str) {
            out.push(Piece::Delta(text.to_string()));
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            out.push(Piece::Stop(reason.to_string()));
        }
        push_usage(&v, out);
        Ok(())
    }
}

fn first_choice(v: &Value) -> Result<Option<&Value>, ModelError> {
    match v.get("choices") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(choices)) => Ok(choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)),
        Some(_) => Err(ModelError::Protocol("`choices` is not an array".into())),
    }
}

fn push_usage(v: &Value, out: &mut Vec<Piece>) {
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        let input = u.get("prompt_tokens").and_then(Value::as_u64);
        let output = u.get("completion_tokens").and_then(Value::as_u64);
        if input.is_some() || output.is_some() {
            out.push(Piece::Usage { input, output });
        }
    }
}

/// vLLM, llama.cpp and proxies report errors inside the stream as `{"error": {...}}`.
fn check_error(v: &Value) -> Result<(), ModelError> {
    let Some(err) = v.get("error").filter(|e| !e.is_null()) else {
        return Ok(());
    };
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| err.as_str())
        .unwrap_or("unknown error")
        .to_string();
    let status = err
        .get("code")
        .and_then(|c| {
            c.as_u64()
                .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
        })
        .filter(|c| (400..600).contains(c))
        .unwrap_or(500) as u16;
    Err(ModelError::Http {
        status,
        body_excerpt: crate::error::shorten(&message, crate::error::EXCERPT_CHARS),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;

    fn decode(data: &str) -> Result<Vec<Piece>, ModelError> {
        let mut out = Vec::new();
        OpenAiDecoder.on_event(
            SseEvent {
                event: None,
                data: data.into(),
            },
            &mut out,
        )?;
        Ok(out)
    }

    #[test]
    fn decodes_content_finish_usage_and_done() {
        assert_eq!(
            decode(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#).unwrap(),
            vec![Piece::Delta(String::new())]
        );
        assert_eq!(
            decode(r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"usage":null}"#).unwrap(),
            vec![Piece::Delta("Hi".into())]
        );
        assert_eq!(
            decode(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#).unwrap(),
            vec![Piece::Stop("stop".into())]
        );
        assert_eq!(
            decode(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}"#).unwrap(),
            vec![Piece::Usage { input: Some(3), output: Some(5) }]
        );
        assert_eq!(decode("[DONE]").unwrap(), vec![Piece::End]);
    }

    #[test]
    fn in_stream_error_becomes_http_error() {
        let e = decode(r#"{"error":{"message":"overloaded","code":503}}"#).unwrap_err();
        assert!(matches!(e, ModelError::Http { status: 503, .. }), "{e:?}");
        assert!(matches!(decode("{nope"), Err(ModelError::Protocol(_))));
    }

    #[test]
    fn body_uses_max_completion_tokens_only_for_openai() {
        let mut req = ChatRequest::new("gpt-4o", vec![Message::user("hi")]);
        req.max_tokens = Some(10);
        let openai = OpenAiCompatible::new(ProviderSettings::new(OPENAI_BASE_URL)).unwrap();
        let b = openai.request_body(&req).unwrap();
        assert_eq!(b["max_completion_tokens"], 10);
        assert!(b.get("max_tokens").is_none());
        let local =
            OpenAiCompatible::new(ProviderSettings::new("http://127.0.0.1:11434/v1/")).unwrap();
        assert_eq!(local.url, "http://127.0.0.1:11434/v1/chat/completions");
        let b = local.request_body(&req).unwrap();
        assert_eq!(b["max_tokens"], 10);
        assert_eq!(b["stream_options"]["include_usage"], true);
    }
}
