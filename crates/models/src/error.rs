//! Errors that tell the operator what to do next.

use std::time::Duration;

/// Everything a provider call can fail with.
///
/// Retry policy (applied inside the providers, see [`crate::RetryPolicy`]):
/// [`ModelError::is_retryable`] errors are retried only while no text has been streamed
/// to the caller, so a retry can never duplicate output.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The server answered with an error status (after retries, when retryable).
    #[error("model server answered HTTP {status}: {body_excerpt} ({})", http_hint(*status))]
    Http {
        /// The HTTP status code.
        status: u16,
        /// The start of the error body (at most 300 characters).
        body_excerpt: String,
    },

    /// The server could not be reached, or stopped sending (connect refused, DNS,
    /// TLS, connect/header timeout, idle timeout between chunks, connection reset).
    #[error("model server unavailable: {0}")]
    Unavailable(String),

    /// The server sent something that is not the expected wire format (bad SSE framing,
    /// invalid JSON in a chunk, wrong content type). Retrying will not help: check that
    /// `base_url` points at the right kind of server.
    #[error(
        "model stream is malformed: {0} (check that base_url points at a server of this provider kind)"
    )]
    Protocol(String),

    /// The caller's cancellation token fired (or the stream was dropped).
    #[error("model request cancelled")]
    Cancelled,

    /// 401/403: the key is missing, wrong, or lacks access to the model.
    #[error("{provider} rejected the credentials (HTTP {status}): {}{}", auth_hint(key_env.as_deref()), excerpt_suffix(body_excerpt))]
    Auth {
        /// 401 or 403.
        status: u16,
        /// The provider's id (e.g. `anthropic`), for the message.
        provider: String,
        /// The env var the key was read from, if any.
        key_env: Option<String>,
        /// The start of the error body (at most 300 characters; may be empty).
        body_excerpt: String,
    },

    /// The provider configuration is unusable (unknown kind, missing key variable,
    /// bad URL or header, no model).
    #[error("model provider configuration: {0}")]
    Config(String),
}

impl ModelError {
    /// Whether a fresh attempt of the same request may succeed: network trouble, 408,
    /// 429, 500, 502, 503, 504 and Anthropic's 529 "overloaded".
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Unavailable(_) => true,
            ModelError::Http { status, .. } => {
                matches!(status, 408 | 429 | 500 | 502 | 503 | 504 | 529)
            }
            _ => false,
        }
    }
}

fn http_hint(status: u16) -> &'static str {
    match status {
        400 | 422 => {
            "the server rejected the request: check the model name, max_tokens and message format"
        }
        404 => {
            "not found: check base_url (OpenAI-compatible servers usually end in /v1) and the model name"
        }
        408 | 504 => "the server timed out: retry later or raise timeout_ms",
        413 => "the request is too large: shorten the prompt or history",
        429 => {
            "rate limited or out of quota: retry later, lower concurrency, or check the account's limits"
        }
        500..=599 => {
            "server error: retry later; if it persists, check the server's logs or status page"
        }
        _ => "unexpected status",
    }
}

fn auth_hint(key_env: Option<&str>) -> String {
    match key_env {
        Some(var) => format!("check the API key in the {var} env var"),
        None => "no API key env var is configured: set api_key_env in the provider config to the name of the env var holding the key".to_string(),
    }
}

fn excerpt_suffix(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(" (server said: {body})")
    }
}

/// At most this many characters of an error body are kept: enough for the provider's
/// message, never a whole HTML error page in a log line.
pub(crate) const EXCERPT_CHARS: usize = 300;

/// The provider's error message if the body is the usual JSON error shape
/// (`{"error": {"message": ..}}` for OpenAI, `{"type":"error","error":{"message":..}}`
/// for Anthropic, `{"error": ".."}` for Ollama and others), else the raw body; shortened.
pub(crate) fn body_excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            let err = v.get("error")?;
            err.get("message")
                .and_then(|m| m.as_str())
                .or_else(|| err.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| text.trim().to_string());
    shorten(&message, EXCERPT_CHARS)
}

pub(crate) fn shorten(s: &str, max_chars: usize) -> String {
    let mut out: String = s.chars().take(max_chars).collect();
    if s.chars().nth(max_chars).is_some() {
        out.push('…');
    }
    out
}

/// Format a duration for error messages the way a person reads it.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_message_names_the_env_var() {
        let e = ModelError::Auth {
            status: 401,
            provider: "anthropic".into(),
            key_env: Some("ANTHROPIC_API_KEY".into()),
            body_excerpt: "invalid x-api-key".into(),
        };
        let s = e.to_string();
        assert!(
            s.contains("check the API key in the ANTHROPIC_API_KEY env var"),
            "{s}"
        );
        assert!(s.contains("invalid x-api-key"), "{s}");
    }

    #[test]
    fn excerpt_prefers_the_json_message() {
        assert_eq!(
            body_excerpt(br#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#),
            "boom"
        );
        assert_eq!(
            body_excerpt(br#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(body_excerpt(b"  plain  "), "plain");
        assert_eq!(shorten("abcdef", 3), "abc…");
    }

    #[test]
    fn retryable_statuses() {
        for s in [429, 500, 502, 503, 504, 529] {
            assert!(
                ModelError::Http {
                    status: s,
                    body_excerpt: String::new()
                }
                .is_retryable()
            );
        }
        for s in [400, 401, 404, 422] {
            assert!(
                !ModelError::Http {
                    status: s,
                    body_excerpt: String::new()
                }
                .is_retryable()
            );
        }
        assert!(ModelError::Unavailable("x".into()).is_retryable());
        assert!(!ModelError::Protocol("x".into()).is_retryable());
        assert!(!ModelError::Cancelled.is_retryable());
    }
}
