//! JSON-RPC answers for what the streamable HTTP transport cannot parse.
//! rmcp answers a body that is not one JSON-RPC message with a plain-text
//! 415, a batch the same way, and a DELETE of a session it never made with
//! 202. MCP (2025-11-25, basic/transports) wants a JSON-RPC error the client
//! can read: a body that is not JSON is a parse error (-32700), a batch or a
//! value that is not a request an invalid request (-32600), both with 400;
//! an unknown session is 404. This layer sits between the doors
//! (crate::frontends::server::guard, always in front) and rmcp's service.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};

/// The largest request body read, as rmcp's own limit (4 MiB).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The JSON-RPC error codes this layer answers with (JSON-RPC 2.0, section 5.1).
#[derive(Debug, Clone, Copy)]
enum RpcError {
    Parse,
    InvalidRequest,
    /// MCP's "session not found" (the SDKs use -32001).
    SessionNotFound,
}

impl RpcError {
    fn code(self) -> i64 {
        match self {
            Self::Parse => -32700,
            Self::InvalidRequest => -32600,
            Self::SessionNotFound => -32001,
        }
    }
}

fn rpc_error(status: StatusCode, kind: RpcError, message: String) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": kind.code(), "message": message},
    });
    (status, axum::Json(body)).into_response()
}

/// The middleware: checks POST bodies and DELETE sessions, passes the rest.
pub async fn json_rpc_errors(
    State(sessions): State<Arc<LocalSessionManager>>,
    req: Request,
    next: Next,
) -> Response {
    match *req.method() {
        Method::POST => check_post(req, next).await,
        Method::DELETE => {
            let id = req
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(|s| Arc::<str>::from(s.to_owned()));
            if let Some(id) = id
                && !sessions.has_session(&id).await.unwrap_or(false)
            {
                return rpc_error(
                    StatusCode::NOT_FOUND,
                    RpcError::SessionNotFound,
                    format!(
                        "no session `{id}` on this server (it ended or never existed); \
                         start a new one with `initialize`"
                    ),
                );
            }
            next.run(req).await
        }
        _ => next.run(req).await,
    }
}

async fn check_post(req: Request, next: Next) -> Response {
    let json_body = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .is_some_and(|essence| essence.eq_ignore_ascii_case("application/json"));
    if !json_body {
        return rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RpcError::InvalidRequest,
            "send one JSON-RPC message with `Content-Type: application/json`".into(),
        );
    }
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                RpcError::InvalidRequest,
                format!(
                    "the request body could not be read ({e}); at most {} MiB per message",
                    MAX_BODY_BYTES / (1024 * 1024)
                ),
            );
        }
    };
    if let Err((kind, message)) = classify(&bytes) {
        return rpc_error(StatusCode::BAD_REQUEST, kind, message);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// `Ok` for one JSON-RPC message; otherwise why not.
fn classify(bytes: &Bytes) -> Result<(), (RpcError, String)> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        (
            RpcError::Parse,
            format!("the body is not JSON ({e}); send one JSON-RPC 2.0 message"),
        )
    })?;
    match &value {
        Value::Array(_) => Err((
            RpcError::InvalidRequest,
            "JSON-RPC batches are not supported (MCP removed them in 2025-06-18); \
             send one message per request"
                .into(),
        )),
        Value::Object(map) if map.get("jsonrpc").and_then(Value::as_str) == Some("2.0") => Ok(()),
        Value::Object(_) => Err((
            RpcError::InvalidRequest,
            "not a JSON-RPC 2.0 message: `\"jsonrpc\": \"2.0\"` is missing".into(),
        )),
        other => Err((
            RpcError::InvalidRequest,
            format!("a JSON-RPC message is a JSON object, not `{other}`"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_classified_as_the_spec_says() {
        let kind = |s: &'static str| classify(&Bytes::from(s)).map_err(|(k, _)| k.code());
        assert_eq!(kind("{not json"), Err(-32700));
        assert_eq!(kind(""), Err(-32700));
        assert_eq!(
            kind(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            Err(-32600)
        );
        assert_eq!(kind(r#"{"id":1,"method":"ping"}"#), Err(-32600));
        assert_eq!(kind("42"), Err(-32600));
        assert_eq!(kind(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Ok(()));
    }
}
