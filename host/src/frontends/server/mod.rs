//! `capstan serve`: the HTTP + SSE API, the AG-UI endpoint, the reference web
//! chat and the OpenAPI document on one axum router; and `capstan serve
//! --stdio`, JSON-RPC 2.0 for a frontend that spawns the binary. Both sit on
//! one [`runs::RunManager`].
//!
//! Security ([`guard`]): every route checks `Host` (DNS rebinding) and
//! `Origin` (cross-site requests); every route but the static web chat files
//! needs the token (made at start-up unless `--no-token`), as a bearer header
//! or the web chat's HttpOnly cookie. Binding beyond loopback needs a token.
//! Event streams are capped per run and per server. Request bodies are capped.

pub mod agui;
pub mod changes;
pub mod error;
pub mod files;
pub mod guard;
pub mod http;
pub mod openapi;
pub mod replica;
pub mod runs;
pub mod stdio;
mod web;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::middleware;
use axum::routing::{get, post};

use crate::{errln, outln};
use error::{ApiError, ErrorKind};
use guard::{Doors, TokenChoice};
use runs::RunManager;

/// Default cap on a request body: a message, not a file upload.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

pub struct ServerState {
    pub runs: Arc<RunManager>,
    pub doors: Arc<Doors>,
    pub max_body_bytes: usize,
}

pub type AppState = Arc<ServerState>;

/// The whole HTTP surface. `extra` routers (MCP's `/mcp`) sit behind the
/// same doors and body limit as the API.
pub fn router(state: AppState, extra: Vec<Router>) -> Router {
    let api: Router = Router::new()
        .route("/v1/health", get(http::health))
        .route("/v1/runs", post(http::create_run).get(http::list_runs))
        .route("/v1/runs/{id}", get(http::get_run))
        .route("/v1/runs/{id}/events", get(http::run_events))
        .route("/v1/runs/{id}/cancel", post(http::cancel_run))
        .route("/v1/runs/{id}/changes", get(changes::run_changes))
        .route("/v1/changes/{id}/undo", post(changes::undo))
        .route("/v1/approvals/{id}", post(http::decide_approval))
        .route("/v1/sessions", get(http::list_sessions))
        .route(
            "/v1/sessions/{id}",
            get(http::get_session)
                .patch(http::rename_session)
                .delete(http::delete_session),
        )
        .route("/v1/sessions/{id}/turns", get(http::session_turns))
        .route("/v1/sessions/{id}/runs", get(http::session_runs))
        .route(
            "/v1/workspaces",
            get(http::list_workspaces).post(http::add_workspace),
        )
        .route("/v1/workspaces/{id}/file", get(http::workspace_file))
        .route("/openapi.json", get(http::openapi))
        .route("/agui", post(agui::run))
        .with_state(state.clone());
    let protected =
        extra
            .into_iter()
            .fold(api, Router::merge)
            .route_layer(middleware::from_fn_with_state(
                state.doors.clone(),
                guard::token,
            ));
    let public = Router::new()
        .route("/", get(web::index))
        .route("/assets/{file}", get(web::asset))
        .route("/assets/vendor/{file}", get(web::vendor_asset))
        .with_state(state.clone());
    Router::new()
        .merge(public)
        .merge(protected)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn_with_state(
            state.doors.clone(),
            guard::host_and_origin,
        ))
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
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
    pub token: TokenChoice,
    /// Extra `Host` names and origins the user allowed (flags and capstan.toml).
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub max_body_bytes: usize,
    /// `[[server.user]]` tokens and quotas.
    pub users: Vec<(String, capstan_store::Quota)>,
}

/// Serve HTTP until Ctrl-C or SIGTERM; then cancel the runs in flight, let
/// them record their end, and stop. Prints the address it bound on stdout
/// (first line) so a parent process that asked for port 0 learns the port,
/// and the web chat's URL (with the token) on stderr.
pub async fn serve_http(
    runs: Arc<RunManager>,
    opts: HttpOptions,
    extra: Vec<Router>,
) -> Result<()> {
    opts.token.check_bind(opts.addr, "capstan serve")?;
    let listener = tokio::net::TcpListener::bind(opts.addr)
        .await
        .with_context(|| format!("cannot listen on {}", opts.addr))?;
    let local = listener.local_addr()?;
    let doors = Arc::new(
        Doors::new(
            local,
            &opts.allowed_hosts,
            &opts.allowed_origins,
            opts.token.token().map(String::from),
            "capstan serve",
        )
        .with_users(opts.users),
    );
    let state = Arc::new(ServerState {
        runs: runs.clone(),
        doors,
        max_body_bytes: opts.max_body_bytes,
    });
    outln!("listening on http://{local}");
    // Jupyter-style: the URL carries the token the browser trades for its
    // cookie. A token the user chose is theirs to know; only a made one is shown.
    let chat = match &opts.token {
        TokenChoice::Generated(t) => format!("http://{local}/?token={t}"),
        TokenChoice::Given(_) => format!("http://{local}/?token=<your token>"),
        TokenChoice::Disabled => format!("http://{local}/"),
    };
    errln!(
        "capstan serve: web chat at {chat}\n  API: http://{local}/openapi.json   AG-UI: POST http://{local}/agui   MCP: http://{local}/mcp\n  API clients send `Authorization: Bearer <token>`. Ctrl-C stops (runs in flight are cancelled)"
    );
    let shutdown = {
        let runs = runs.clone();
        async move {
            shutdown_signal().await;
            errln!("capstan serve: stopping; cancelling runs in flight");
            runs.cancel_all();
        }
    };
    // An event stream is many small writes: with Nagle's algorithm each one
    // after the first waits for the client's delayed ACK (40 ms on Linux),
    // which was most of a short run's time at the client (docs/BENCHMARKS.md).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
        }
    });
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
