//! One error type for every interface: HTTP turns it into a status and a JSON
//! body, stdio into a JSON-RPC error. The message always says what was wrong
//! and what to do next.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed input (bad JSON, a missing field, a bad value).
    BadRequest,
    /// Well-formed input the server cannot act on (a path that is not a directory).
    Unprocessable,
    NotFound,
    /// The thing exists but is in the wrong state (a finished run, a busy session).
    Conflict,
    TooLarge,
    UnsupportedMediaType,
    MethodNotAllowed,
    Unauthorized,
    /// Authenticated (or not yet) but not allowed: a foreign `Origin`, a
    /// folder that may not be a workspace here.
    Forbidden,
    /// The request named a `Host` this server does not answer to (DNS rebinding).
    MisdirectedRequest,
    /// A per-client cap (event streams of one run) is reached.
    TooManyRequests,
    /// A server-wide cap (event streams in total) is reached.
    Unavailable,
    Internal,
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// Seconds after which a retry may succeed (`Retry-After`), for 429s.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unprocessable, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, message)
    }
    pub fn internal(e: impl std::fmt::Display) -> Self {
        Self::new(ErrorKind::Internal, format!("internal error: {e}"))
    }

    pub fn status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::MisdirectedRequest => StatusCode::MISDIRECTED_REQUEST,
            ErrorKind::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The JSON-RPC error code (the -32000 range is the server's own).
    pub fn rpc_code(&self) -> i64 {
        match self.kind {
            ErrorKind::BadRequest | ErrorKind::Unprocessable | ErrorKind::UnsupportedMediaType => {
                -32602
            }
            ErrorKind::MethodNotAllowed => -32601,
            ErrorKind::NotFound => -32004,
            ErrorKind::Conflict => -32009,
            ErrorKind::TooLarge => -32013,
            ErrorKind::Unauthorized => -32001,
            ErrorKind::Forbidden => -32003,
            ErrorKind::MisdirectedRequest => -32021,
            ErrorKind::TooManyRequests => -32029,
            ErrorKind::Unavailable => -32053,
            ErrorKind::Internal => -32603,
        }
    }

    /// A short stable word for the kind, for programs that branch on it.
    pub fn code(&self) -> &'static str {
        match self.kind {
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Unprocessable => "unprocessable",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::UnsupportedMediaType => "unsupported_media_type",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::MisdirectedRequest => "misdirected_request",
            ErrorKind::TooManyRequests => "too_many_requests",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl ApiError {
    /// 409 for a session that runs another message now (on any replica),
    /// with the route that cancels that run.
    pub fn session_busy(e: &capstan_store::StoreError, run_id: &str) -> ApiError {
        ApiError::conflict(format!("{e} (POST /v1/runs/{run_id}/cancel cancels it)"))
    }
}

impl ApiError {
    /// 429 for a `[[server.user]]` at a limit of their quota, with
    /// `Retry-After`.
    pub fn quota(e: &capstan_store::StoreError) -> ApiError {
        let retry_after = match e {
            capstan_store::StoreError::QuotaExceeded {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        };
        ApiError {
            retry_after,
            ..ApiError::new(ErrorKind::TooManyRequests, e.to_string())
        }
    }
}

impl From<capstan_store::StoreError> for ApiError {
    fn from(e: capstan_store::StoreError) -> Self {
        match e {
            capstan_store::StoreError::NotFound { .. } => ApiError::not_found(e.to_string()),
            capstan_store::StoreError::InvalidArgument(_) => ApiError::bad_request(e.to_string()),
            capstan_store::StoreError::SessionRunning { .. } => ApiError::conflict(e.to_string()),
            capstan_store::StoreError::SessionBusy { ref run_id, .. } => {
                ApiError::session_busy(&e, run_id)
            }
            capstan_store::StoreError::QuotaExceeded { .. } => ApiError::quota(&e),
            other => ApiError::internal(other),
        }
    }
}

impl From<crate::workspace_gate::Refusal> for ApiError {
    fn from(r: crate::workspace_gate::Refusal) -> Self {
        if r.is_forbidden() {
            ApiError::forbidden(r.to_string())
        } else {
            ApiError::unprocessable(r.to_string())
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.kind == ErrorKind::Internal {
            // The operator's copy (the client gets the body); logs are off by default.
            crate::errln!("error: {}", self.message);
        }
        let body = json!({"error": {"code": self.code(), "message": self.message}});
        let mut resp = (self.status(), Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}
