//! `capstan serve`: the HTTP + SSE API, the AG-UI endpoint, the reference web
//! chat and the OpenAPI document on one axum router; and `capstan serve
//! --stdio`, JSON-RPC 2.0 for a frontend that spawns the binary. Both sit on
//! one [`runs::RunManager`].
//!
//! Security: loopback binds only, unless a bearer token is set; with a token
//! every API route (not the static web chat files, which hold no data) needs
//! `Authorization: Bearer <token>`. Request bodies are capped.

pub mod agui;
pub mod error;
pub mod http;
pub mod runs;
pub mod stdio;
mod web;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{Method, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::{errln, outln};
use error::{ApiError, ErrorKind};
use runs::RunManager;

/// Default cap on a request body: a message, not a file upload.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

pub struct ServerState {
    pub runs: Arc<RunManager>,
    pub token: Option<String>,
    pub max_body_bytes: usize,
}

pub type AppState = Arc<ServerState>;

/// The whole HTTP surface. `extra` routers (the lead merges MCP's `/mcp` here)
/// sit behind the same token check and body limit as the API.
pub fn router(state: AppState, extra: Vec<Router>) -> Router {
    let api: Router = Router::new()
        .route("/v1/health", get(http::health))
        .route("/v1/runs", post(http::create_run).get(http::list_runs))
        .route("/v1/runs/{id}", get(http::get_run))
        .route("/v1/runs/{id}/events", get(http::run_events))
        .route("/v1/runs/{id}/cancel", post(http::cancel_run))
        .route("/v1/approvals/{id}", post(http::decide_approval))
        .route("/v1/sessions", get(http::list_sessions))
        .route("/v1/sessions/{id}", get(http::get_session))
        .route("/v1/sessions/{id}/turns", get(http::session_turns))
        .route("/v1/sessions/{id}/runs", get(http::session_runs))
        .route(
            "/v1/workspaces",
            get(http::list_workspaces).post(http::add_workspace),
        )
        .route("/agui", post(agui::run))
        .with_state(state.clone());
    let protected = extra
        .into_iter()
        .fold(api, Router::merge)
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let public = Router::new()
        .route("/", get(web::index))
        .route("/assets/{file}", get(web::asset))
        .route("/openapi.json", get(http::openapi));
    Router::new()
        .merge(public)
        .merge(protected)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
}

async fn require_token(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(token) = &state.token else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => next.run(req).await,
        Some(_) => ApiError::new(
            ErrorKind::Unauthorized,
            "the bearer token is wrong; send the token `capstan serve` was started with",
        )
        .into_response(),
        None => ApiError::new(
            ErrorKind::Unauthorized,
            "this server needs `Authorization: Bearer <token>`; use the token `capstan serve` \
             was started with (--token or CAPSTAN_TOKEN)",
        )
        .into_response(),
    }
}

/// Compares without an early exit, so the time taken does not reveal how much
/// of a guessed token was right. (Eight lines; not worth a crate.)
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "no route {method} {}; the API is described at GET /openapi.json",
        uri.path()
    ))
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        ErrorKind::MethodNotAllowed,
        format!(
            "{} does not accept {method}; see GET /openapi.json for its methods",
            uri.path()
        ),
    )
}

/// How `capstan serve` listens.
pub struct HttpOptions {
    pub addr: SocketAddr,
    pub token: Option<String>,
    pub max_body_bytes: usize,
}

/// Serve HTTP until Ctrl-C or SIGTERM; then cancel the runs in flight, let
/// them record their end, and stop. Prints the address it bound on stdout
/// (first line) so a parent process that asked for port 0 learns the port.
pub async fn serve_http(
    runs: Arc<RunManager>,
    opts: HttpOptions,
    extra: Vec<Router>,
) -> Result<()> {
    if !opts.addr.ip().is_loopback() && opts.token.is_none() {
        bail!(
            "refusing to listen on {} without a token: anyone who can reach it could run \
             commands in your workspaces. Set --token (or CAPSTAN_TOKEN), or bind 127.0.0.1",
            opts.addr
        );
    }
    if opts.token.as_deref() == Some("") {
        bail!("the token is empty; pass a long random string to --token");
    }
    let listener = tokio::net::TcpListener::bind(opts.addr)
        .await
        .with_context(|| format!("cannot listen on {}", opts.addr))?;
    let local = listener.local_addr()?;
    let state = Arc::new(ServerState {
        runs: runs.clone(),
        token: opts.token.clone(),
        max_body_bytes: opts.max_body_bytes,
    });
    outln!("listening on http://{local}");
    // The address is said once, on stdout above (scripts read it); these
    // are paths under it.
    let chat = match &opts.token {
        Some(_) => "/#token=<your token>",
        None => "/",
    };
    errln!(
        "capstan serve: web chat at {chat}, API at /openapi.json, AG-UI at POST /agui; Ctrl-C stops (runs in flight are cancelled)"
    );
    let shutdown = {
        let runs = runs.clone();
        async move {
            shutdown_signal().await;
            errln!("capstan serve: stopping; cancelling runs in flight");
            runs.cancel_all();
        }
    };
    axum::serve(listener, router(state, extra))
        .with_graceful_shutdown(shutdown)
        .await?;
    // Streams end with their runs' terminal events; give the runs a bounded
    // moment to record them.
    let _ = tokio::time::timeout(Duration::from_secs(10), runs.wait_idle()).await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
